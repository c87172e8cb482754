/*
 * inode.h - inode attributes: read/write, stat, timestamps, setattr,
 * allocation of new inodes and final release of unlinked ones.
 * Layer: fs/ (calls volume/).
 *
 * Contract: all inodes are handled as struct ext2_inode_large of the
 * volume's inode size.  Timestamps carry nanoseconds in the *_extra fields
 * when the inode has room for them (as ext4 does).  nx_inode_new() picks
 * owner, group (setgid directories), flags (extents, inline data) like the
 * kernel would.  nx_inode_release() frees the blocks, xattrs and the inode
 * of a file whose link count is zero; the FUSE layer calls it once the
 * last reference is gone.  The caller holds the volume lock.
 */
#ifndef NEXTFS_INODE_H
#define NEXTFS_INODE_H

#include <sys/stat.h>
#include <time.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"
#include "nextfs/perm.h"

enum nx_time { NX_ATIME, NX_MTIME, NX_CTIME, NX_CRTIME };

errcode_t nx_inode_read(struct nx_volume *vol, ext2_ino_t ino,
			struct ext2_inode_large *inode);
/*
 * The same for an inode a change is about to write: EROFS first on a
 * volume that writes nothing (read-only, or a snapshot view).
 */
errcode_t nx_inode_read_rw(struct nx_volume *vol, ext2_ino_t ino,
			   struct ext2_inode_large *inode);
errcode_t nx_inode_write(struct nx_volume *vol, ext2_ino_t ino,
			 struct ext2_inode_large *inode);

void nx_inode_to_stat(struct nx_volume *vol, ext2_ino_t ino,
		      const struct ext2_inode_large *inode, struct stat *st);
errcode_t nx_getattr(struct nx_volume *vol, ext2_ino_t ino, struct stat *st);

void nx_now(struct timespec *ts);
void nx_inode_get_time(const struct ext2_inode_large *inode, enum nx_time which,
		       struct timespec *ts);
void nx_inode_set_time(struct ext2_inode_large *inode, enum nx_time which,
		       const struct timespec *ts);
/* Set each of the NX_TOUCH_* times named in WHAT to now. */
#define NX_TOUCH_ATIME	0x1
#define NX_TOUCH_MTIME	0x2
#define NX_TOUCH_CTIME	0x4
void nx_inode_touch(struct ext2_inode_large *inode, int what);

/* Attribute changes for nx_setattr; VALID holds NX_SET_* bits. */
#define NX_SET_MODE		0x001
#define NX_SET_UID		0x002
#define NX_SET_GID		0x004
#define NX_SET_SIZE		0x008
#define NX_SET_ATIME		0x010
#define NX_SET_MTIME		0x020
#define NX_SET_ATIME_NOW	0x040
#define NX_SET_MTIME_NOW	0x080
#define NX_SET_CTIME		0x100

struct nx_attr {
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	struct timespec atime, mtime, ctime;
};

/*
 * Apply ATTR to INO with the kernel's ownership rules (chmod by owner,
 * chown by root, chgrp by owner to a group it is in, explicit times by
 * owner, "now" by anyone with write access), clearing setuid/setgid on
 * chown like ext4 and updating ctime.  Size changes go through
 * nx_file_truncate().  On success ST (if non-NULL) holds the new stat.
 */
errcode_t nx_setattr(struct nx_volume *vol, const struct nx_cred *cred,
		     ext2_ino_t ino, const struct nx_attr *attr, int valid,
		     struct stat *st);

/*
 * Allocate and initialise (but do not link) a new inode of MODE (type and
 * permission bits, umask already applied) for a name in directory DIR.
 * Writes the inode and returns it in INODE.
 */
errcode_t nx_inode_new(struct nx_volume *vol, const struct nx_cred *cred,
		       ext2_ino_t dir, mode_t mode, ext2_ino_t *ino,
		       struct ext2_inode_large *inode);

/*
 * ext2fs_punch() for logical blocks START..END of INO (INODE updated and
 * written), working around libext2fs 1.47.0's failure on a run that ends
 * at the volume's last block.  Every caller that frees file blocks uses it.
 */
errcode_t nx_punch(struct nx_volume *vol, ext2_ino_t ino,
		   struct ext2_inode_large *inode, blk64_t start, blk64_t end);

/* Free everything of INO if its link count is zero.  No-op otherwise. */
errcode_t nx_inode_release(struct nx_volume *vol, ext2_ino_t ino);

#endif
