/*
 * meta.h - write back only the allocation metadata that changed.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: ext2fs_flush() rewrites every group's bitmaps and every
 * descriptor block, so its cost grows with the volume (8192 groups on
 * 1 TiB) and, under a journal, so would every transaction.  This module
 * remembers which groups' block/inode bitmaps and descriptors changed
 * since the last write-back and writes only those, plus the primary
 * superblock, through the volume's io_channel (so the write hook and the
 * journal see them like any other metadata write).  Checksums (bitmap,
 * descriptor, superblock) are set as libext2fs would.  Backup
 * superblocks and descriptors are left alone (MASTER_SB_ONLY).
 *
 * Changes are noticed through libext2fs's block allocation callbacks
 * (installed by nx_meta_attach; later installers must chain to the
 * previous callback) and through nx_meta_dirty_*() for everything else
 * (inode allocation, direct bitmap edits).  As a safety net, any group
 * whose in-memory descriptor differs from the one last written is
 * written too.  nextfs's own range allocations and frees go through
 * nx_meta_alloc_stats_range(), so that every callback in the chain
 * (this module's, txn.c's, the snapshot layer's) learns the range.
 */
#ifndef NEXTFS_META_H
#define NEXTFS_META_H

#include <ext2fs/ext2fs.h>

struct nx_volume;
struct nx_meta;

/* Start tracking on VOL (after its bitmaps are loaded).  Owned by VOL. */
errcode_t nx_meta_attach(struct nx_volume *vol);
void nx_meta_detach(struct nx_volume *vol);

/* The group holding BLK / INO has changed bitmaps or descriptor. */
void nx_meta_dirty_block(struct nx_volume *vol, blk64_t blk);
void nx_meta_dirty_inode(struct nx_volume *vol, ext2_ino_t ino);
/* Everything is dirty (after a bulk change such as a restore). */
void nx_meta_dirty_all(struct nx_volume *vol);

/*
 * ext2fs_block_alloc_stats_range(FS, BLK, NUM, INUSE), with the range
 * callbacks told BLK and NUM.  libext2fs 1.47.0 tells them the end of the
 * range and a count of 0 (fixed upstream later), so a callback that needs
 * the blocks learns nothing from it.  INUSE: +1 allocated, -1 freed.
 */
void nx_meta_alloc_stats_range(ext2_filsys fs, blk64_t blk, blk_t num,
			       int inuse);

/*
 * Blocks set in MAP are written as free although the in-memory bitmap
 * has them in use (txn.c holds freed blocks back from reuse until the
 * commit that frees them on disk is durable).  NULL: none.
 */
void nx_meta_write_as_free(struct nx_volume *vol, ext2fs_block_bitmap map);

/*
 * Write the changed bitmaps and descriptor blocks and the superblock;
 * afterwards libext2fs considers nothing dirty (ext2fs_close writes
 * nothing more).  No fsync.  Replaces ext2fs_flush2() for live volumes.
 */
errcode_t nx_meta_write(struct nx_volume *vol);

#endif
