/*
 * bytechan.h - open a libext2fs file system on a device made of two
 * byte-range callbacks.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: nx_bytechan_open_fs() opens a file system whose every block
 * read (and write, if OPS->write is set) becomes OPS->read/OPS->write
 * (PRIV, buf, byte offset, byte length), whatever block size libext2fs
 * settles on.  Without a write callback the device is read-only: opening
 * it with EXT2_FLAG_RW or writing to it is EROFS.  Flush does nothing
 * (the callbacks decide durability).  PRIV must outlive the file system;
 * ext2fs_close() releases everything else.  Safe to call from several
 * threads.  Used for snapshot views (snapview.c) and the copy-on-write
 * overlay of export (export.c).
 */
#ifndef NEXTFS_BYTECHAN_H
#define NEXTFS_BYTECHAN_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct nx_bytechan_ops {
	errcode_t (*read)(void *priv, void *buf, uint64_t offset,
			  uint64_t len);
	errcode_t (*write)(void *priv, const void *buf, uint64_t offset,
			   uint64_t len);	/* NULL: read-only */
};

/* ext2fs_open2(..., FLAGS, 0, 0, ...) on OPS over PRIV. */
errcode_t nx_bytechan_open_fs(const struct nx_bytechan_ops *ops, void *priv,
			      int flags, ext2_filsys *ret);

#endif
