/*
 * orphan.h - the ext3/ext4 orphan list for inodes that lost their last
 * name while still in use.
 * Layer: fs/ (calls volume/).
 *
 * Contract: an inode written with no links (but a mode, i.e. not yet
 * released) is put on the superblock's orphan list (s_last_orphan,
 * chained through i_dtime, as the kernel does) in that same write;
 * nx_inode_release() takes it off before freeing it.  So a commit that
 * happens between unlink and the last close leaves the inode on a list
 * that the next mount - nx_orphans_recover(), or e2fsck, or the kernel -
 * frees, and a crash never leaves an unreachable inode behind.
 *
 * The on-disk chain is singly linked; an in-memory index (owned by the
 * volume) makes removal O(1).  Callers hold the volume lock.
 */
#ifndef NEXTFS_ORPHAN_H
#define NEXTFS_ORPHAN_H

#include <ext2fs/ext2fs.h>

struct nx_volume;

/* Is INO on the orphan list? */
int nx_orphan_has(struct nx_volume *vol, ext2_ino_t ino);

/* Put INO (whose inode is INODE, about to be written) on the list. */
errcode_t nx_orphan_add(struct nx_volume *vol, ext2_ino_t ino,
			struct ext2_inode_large *inode);

/* Take INO off the list (INODE: its inode, i_dtime cleared; not written). */
errcode_t nx_orphan_remove(struct nx_volume *vol, ext2_ino_t ino,
			   struct ext2_inode_large *inode);

/* At a read-write open: free the inodes a crash left on the list. */
errcode_t nx_orphans_recover(struct nx_volume *vol, unsigned *freed);

/* Forget the in-memory index (close). */
void nx_orphans_free(struct nx_volume *vol);

#endif
