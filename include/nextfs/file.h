/*
 * file.h - the file data path: read, write, truncate, fallocate, SEEK_DATA
 * and SEEK_HOLE, fsync.
 *
 * Contract: reads and writes are served as large contiguous device I/O
 * (runs of physically contiguous blocks are one request), holes and
 * unwritten extents read as zeros, and writes allocate near the file's
 * other blocks.  Works on extent-mapped, indirect-mapped and inline-data
 * files.  Write and size-changing calls update i_size, i_blocks, mtime
 * and ctime as ext4 does.  On ENOSPC a write stores what fits (short
 * write) and the volume stays consistent; nothing already written is
 * lost.  Every overwrite of an already-mapped block goes through one
 * function in file.c (prepare_overwrite) so that the snapshot layer can
 * move the old block away first.  The caller holds the volume lock.
 */
#ifndef NEXTFS_FILE_H
#define NEXTFS_FILE_H

#include <stdint.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

errcode_t nx_file_read(struct nx_volume *vol, ext2_ino_t ino, void *buf,
		       size_t size, uint64_t offset, size_t *got);
errcode_t nx_file_write(struct nx_volume *vol, ext2_ino_t ino,
			const void *buf, size_t size, uint64_t offset,
			size_t *written);

/* Set i_size to SIZE, freeing blocks past it or leaving a hole. */
errcode_t nx_file_truncate(struct nx_volume *vol, ext2_ino_t ino,
			   uint64_t size);

/* fallocate(2) MODE: 0, FALLOC_FL_KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE. */
errcode_t nx_file_fallocate(struct nx_volume *vol, ext2_ino_t ino, int mode,
			    uint64_t offset, uint64_t len);

/* lseek(2) with SEEK_DATA or SEEK_HOLE; ENXIO past the end. */
errcode_t nx_file_seek(struct nx_volume *vol, ext2_ino_t ino, uint64_t offset,
		       int whence, uint64_t *result);

#endif
