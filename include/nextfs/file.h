/*
 * file.h - the file data path: read, write, truncate, fallocate, SEEK_DATA
 * and SEEK_HOLE, fsync.
 * Layer: fs/ (calls volume/).
 *
 * Contract: reads and writes are served as large contiguous device I/O
 * (runs of physically contiguous blocks are one request), holes and
 * unwritten extents read as zeros, and writes allocate near the file's
 * other blocks.  Works on extent-mapped, indirect-mapped and inline-data
 * files.  Write and size-changing calls update i_size, i_blocks, mtime
 * and ctime as ext4 does.  On ENOSPC a write stores what fits (short
 * write) and the volume stays consistent; nothing already written is
 * lost.  Every overwrite of an already-mapped block asks the volume's
 * overwrite policy first (overwrite.h: the snapshot layer may move the
 * old block away).  The caller holds the volume lock.
 */
#ifndef NEXTFS_FILE_H
#define NEXTFS_FILE_H

#include <stdint.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

errcode_t nx_file_read(struct nx_volume *vol, ext2_ino_t ino, void *buf,
		       size_t size, uint64_t offset, size_t *got);
/*
 * Reading without holding the volume lock during the device I/O.
 * nx_file_read_begin (volume lock held) does what nx_file_read does but
 * only plans the device reads in *RD (blocks a transaction still holds
 * are read at once); then the caller unlocks with
 * nx_volume_unlock_sharing() and calls nx_file_read_end(), which reads
 * and ends the share.  *GOT counts the bytes that the end fills.  If
 * _begin fails, unlock normally and do not call _end.  Works on the live
 * volume and on snapshot views (their blocks resolve to live ones).
 * A caller that moves the planned ranges itself (zero copy: splices them
 * from nx_blkio_splice_fd() to where they go; RD's segments are in
 * buffer order, and BUF already holds every byte not planned) ends with
 * nx_file_read_drop() instead, once those transfers are complete.
 */
struct nx_file_rd_seg {
	uint64_t dev;
	char *dst;
	uint64_t len;
};
struct nx_file_rd {
	struct nx_blkio *io;		/* the live device */
	struct nx_file_rd_seg *seg;
	size_t n, cap;
};
errcode_t nx_file_read_begin(struct nx_volume *vol, ext2_ino_t ino,
			     void *buf, size_t size, uint64_t offset,
			     struct nx_file_rd *rd, size_t *got);
errcode_t nx_file_read_end(struct nx_file_rd *rd);
void nx_file_read_drop(struct nx_file_rd *rd);
/* Plan reading LEN device bytes at DEV into DST (for snapview.c). */
errcode_t nx_file_rd_add(struct nx_file_rd *rd, uint64_t dev, char *dst,
			 uint64_t len);

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

/* Largest i_size INODE may have (the kernel's s_maxbytes rules). */
uint64_t nx_file_max_bytes(ext2_filsys fs,
			   const struct ext2_inode_large *inode);

/*
 * Map the hole [LBLK, LBLK + LEN) of extent-mapped INO to physical blocks
 * PBLK.. (already allocated by the caller) with as few extents as
 * possible, merging with neighbours.  INODE is the caller's copy: tree
 * growth updates it (i_blocks); the caller writes it.  EEXIST if part of
 * the range is mapped.  The snapshot layer maps preserved runs with it.
 */
errcode_t nx_file_map_run(struct nx_volume *vol, ext2_ino_t ino,
			  struct ext2_inode_large *inode, blk64_t lblk,
			  blk64_t pblk, blk64_t len);

/*
 * The same for any block-mapped or extent-mapped file, and the LEN
 * blocks are counted in i_blocks: they become the file's.  The snapshot
 * layer maps preserved blocks and defrag.c a file's new home with it.
 */
errcode_t nx_file_map_blocks(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, blk64_t lblk,
			     blk64_t pblk, blk64_t len);

#ifdef NX_FILE_INTERNAL
/*
 * Shared by file.c and falloc.c only; not a contract for other modules.
 */

/* A run of logical blocks that map alike. */
struct nx_fmap_run {
	blk64_t lblk;			/* first logical block */
	blk64_t len;			/* >= 1; holes may be very long */
	blk64_t pblk;			/* first physical block; 0: hole */
	int uninit;			/* unwritten extent: reads as zeros */
};

/*
 * Block-map cursor over one file for the length of one call.  INODE is
 * the caller's copy; libext2fs and the allocation code keep it current,
 * and the caller writes it back once at the end.
 */
struct nx_fmap {
	struct nx_volume *vol;
	ext2_ino_t ino;
	struct ext2_inode_large *inode;
	ext2_extent_handle_t handle;	/* extent-mapped files, else NULL */
	struct ext2fs_extent last;	/* extent the handle points at */
	int have_last;
	blk64_t ind_blk[3];		/* indirect files: cached block ... */
	uint32_t *ind_buf[3];		/* ... per tree level, 0 = none */
};

errcode_t nx_fmap_open(struct nx_fmap *m, struct nx_volume *vol,
		       ext2_ino_t ino, struct ext2_inode_large *inode);
void nx_fmap_close(struct nx_fmap *m);
/* Drop cached mapping state after someone else changed the block map. */
errcode_t nx_fmap_forget(struct nx_fmap *m);
/* The run starting at LBLK (run->lblk == LBLK). */
errcode_t nx_fmap_lookup(struct nx_fmap *m, blk64_t lblk,
			 struct nx_fmap_run *run);

/*
 * Block-mapped files: where LBLK sits (LEVELS indirect blocks below
 * i_block[*SLOT], index *OFF of a subtree spanning *SPAN blocks; 0 levels
 * for direct blocks, -1 beyond the tree), and the cached indirect block
 * BLK at tree level LEVEL.
 */
int nx_fmap_ind_path(ext2_filsys fs, blk64_t lblk, int *slot, blk64_t *off,
		     blk64_t *span);
errcode_t nx_fmap_ind_block(struct nx_fmap *m, int level, blk64_t blk,
			    uint32_t **tab);

/* falloc.c */
/*
 * Allocate and map blocks for the hole at [LBLK, LBLK + LEN): maps a
 * physically contiguous prefix of it (run->len <= LEN) near the file's
 * other blocks.  UNINIT: as unwritten extents.  ENOSPC if nothing fits.
 */
errcode_t nx_fmap_alloc(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			int uninit, struct nx_fmap_run *run);
/*
 * Extent-mapped files: move the written blocks [LBLK, LBLK + LEN) (inside
 * one extent) to newly allocated blocks; the old ones stay allocated for
 * the caller to hand over.  *RUN is the new mapping (maybe shorter);
 * run->len == 0 means nothing changed.  Data must then be written there.
 */
errcode_t nx_fmap_replace(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			  struct nx_fmap_run *run);
/* Mark [LBLK, LBLK + LEN) written (TO_UNINIT = 0) or unwritten. */
errcode_t nx_fmap_convert(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			  int to_uninit);
/*
 * Allocate one run of up to WANT free blocks, keeping SLACK free: at GOAL
 * if it is free, else the next run worth a seek from GOAL on (around the
 * end of the volume), else the next free run, however short.  Bounded
 * (falloc.c); ENOSPC only when no block is free beyond SLACK and the
 * reserves (root-reserved blocks, an active snapshot's).
 */
errcode_t nx_fmap_new_blocks(struct nx_volume *vol, blk64_t goal,
			     blk64_t want, blk64_t slack, blk64_t *pblk,
			     blk64_t *got);

/* file.c */
/* Zero bytes [FROM, TO) of one block on disk if it holds written data. */
errcode_t nx_file_zero_in_block(struct nx_fmap *m, uint64_t from,
				uint64_t to);
/* Move inline data out into a block; INODE is re-read and rewritten. */
errcode_t nx_file_inline_expand(struct nx_volume *vol, ext2_ino_t ino,
				struct ext2_inode_large *inode);
/* Set the size of an inline-data file (may expand it). */
errcode_t nx_file_inline_resize(struct nx_volume *vol, ext2_ino_t ino,
				struct ext2_inode_large *inode, uint64_t size);
/*
 * Free logical blocks START..END (inclusive) of INO; INODE is updated and
 * written.  Blocks an active snapshot needs move into it instead of
 * becoming free (the snapshot layer's free hook).
 */
errcode_t nx_file_punch_blocks(struct nx_volume *vol, ext2_ino_t ino,
			       struct ext2_inode_large *inode, blk64_t start,
			       blk64_t end);

#endif /* NX_FILE_INTERNAL */

#endif
