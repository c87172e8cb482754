/*
 * inode.c - inode attributes, timestamps, setattr, creation and release.
 *
 * Inodes travel as struct ext2_inode_large whatever the on-disk inode
 * size: for 128-byte inodes the large fields are simply absent (and the
 * timestamp helpers know it), for inodes larger than the struct the tail
 * (in-inode xattrs) is preserved by libext2fs on write.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "nextfs/inode.h"
#include "nextfs/meta.h"
#include "nextfs/orphan.h"
#include "nextfs/xattr.h"

errcode_t nx_inode_read(struct nx_volume *vol, ext2_ino_t ino,
			struct ext2_inode_large *inode)
{
	memset(inode, 0, sizeof(*inode));
	return ext2fs_read_inode_full(vol->fs, ino, (struct ext2_inode *)inode,
				      sizeof(*inode));
}

errcode_t nx_inode_read_rw(struct nx_volume *vol, ext2_ino_t ino,
			   struct ext2_inode_large *inode)
{
	if (nx_volume_rdonly(vol) || !vol->io)
		return EROFS;
	return nx_inode_read(vol, ino, inode);
}

errcode_t nx_inode_write(struct nx_volume *vol, ext2_ino_t ino,
			 struct ext2_inode_large *inode)
{
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	/*
	 * The write that takes the last link away also puts the inode on
	 * the orphan list (orphan.h); i_dtime is set from the moment
	 * nx_inode_release() starts, so its own writes do not.
	 */
	if (inode->i_links_count == 0 && inode->i_mode && !inode->i_dtime &&
	    !nx_orphan_has(vol, ino)) {
		err = nx_orphan_add(vol, ino, inode);
		if (err)
			return err;
	}
	return ext2fs_write_inode_full(vol->fs, ino, (struct ext2_inode *)inode,
				       sizeof(*inode));
}

/*
 * Does the on-disk inode have room for the large-inode field that ends
 * at byte END?  (i_extra_isize says how much of the large part is valid.)
 */
static int inode_has_field(const struct ext2_inode_large *inode, size_t end)
{
	return EXT2_GOOD_OLD_INODE_SIZE + (size_t)inode->i_extra_isize >= end;
}

#define HAS_FIELD(inode, field)						\
	inode_has_field(inode, offsetof(struct ext2_inode_large, field) +	\
			sizeof((inode)->field))

void nx_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

/* ext4 stores seconds as 32 low bits plus 2 epoch bits in *_extra. */
static void decode_time(uint32_t lo, const uint32_t *extra,
			struct timespec *ts)
{
	ts->tv_sec = (int32_t)lo;
	ts->tv_nsec = 0;
	if (extra) {
		ts->tv_sec += (int64_t)(*extra & 3) << 32;
		ts->tv_nsec = (*extra >> 2) % 1000000000;
	}
}

static void encode_time(uint32_t *lo, uint32_t *extra,
			const struct timespec *ts)
{
	int64_t sec = ts->tv_sec;

	*lo = (uint32_t)sec;
	if (extra)
		*extra = (uint32_t)(((sec - (int32_t)sec) >> 32) & 3) |
			 ((uint32_t)ts->tv_nsec << 2);
}

void nx_inode_get_time(const struct ext2_inode_large *inode,
		       enum nx_time which, struct timespec *ts)
{
	switch (which) {
	case NX_ATIME:
		decode_time(inode->i_atime, HAS_FIELD(inode, i_atime_extra) ?
			    &inode->i_atime_extra : NULL, ts);
		break;
	case NX_MTIME:
		decode_time(inode->i_mtime, HAS_FIELD(inode, i_mtime_extra) ?
			    &inode->i_mtime_extra : NULL, ts);
		break;
	case NX_CTIME:
		decode_time(inode->i_ctime, HAS_FIELD(inode, i_ctime_extra) ?
			    &inode->i_ctime_extra : NULL, ts);
		break;
	case NX_CRTIME:
		if (HAS_FIELD(inode, i_crtime))
			decode_time(inode->i_crtime,
				    HAS_FIELD(inode, i_crtime_extra) ?
				    &inode->i_crtime_extra : NULL, ts);
		else
			ts->tv_sec = ts->tv_nsec = 0;
		break;
	}
}

void nx_inode_set_time(struct ext2_inode_large *inode, enum nx_time which,
		       const struct timespec *ts)
{
	switch (which) {
	case NX_ATIME:
		encode_time(&inode->i_atime, HAS_FIELD(inode, i_atime_extra) ?
			    &inode->i_atime_extra : NULL, ts);
		break;
	case NX_MTIME:
		encode_time(&inode->i_mtime, HAS_FIELD(inode, i_mtime_extra) ?
			    &inode->i_mtime_extra : NULL, ts);
		break;
	case NX_CTIME:
		encode_time(&inode->i_ctime, HAS_FIELD(inode, i_ctime_extra) ?
			    &inode->i_ctime_extra : NULL, ts);
		break;
	case NX_CRTIME:
		if (HAS_FIELD(inode, i_crtime))
			encode_time(&inode->i_crtime,
				    HAS_FIELD(inode, i_crtime_extra) ?
				    &inode->i_crtime_extra : NULL, ts);
		break;
	}
}

void nx_inode_touch(struct ext2_inode_large *inode, int what)
{
	struct timespec now;

	nx_now(&now);
	if (what & NX_TOUCH_ATIME)
		nx_inode_set_time(inode, NX_ATIME, &now);
	if (what & NX_TOUCH_MTIME)
		nx_inode_set_time(inode, NX_MTIME, &now);
	if (what & NX_TOUCH_CTIME)
		nx_inode_set_time(inode, NX_CTIME, &now);
}

/* Device numbers live in i_block like ext4's old and new encodings. */
static dev_t inode_rdev(const struct ext2_inode_large *inode)
{
	uint32_t old = inode->i_block[0], new = inode->i_block[1];

	if (old)
		return makedev((old >> 8) & 0xff, old & 0xff);
	return makedev((new & 0xfff00) >> 8, (new & 0xff) | ((new >> 12) & 0xfff00));
}

void nx_inode_to_stat(struct nx_volume *vol, ext2_ino_t ino,
		      const struct ext2_inode_large *inode, struct stat *st)
{
	mode_t type = inode->i_mode & S_IFMT;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = inode->i_mode;
	st->st_nlink = inode->i_links_count;
	st->st_uid = inode_uid(*inode);
	st->st_gid = inode_gid(*inode);
	st->st_size = EXT2_I_SIZE(inode);
	st->st_blksize = vol->fs->blocksize;
	st->st_blocks = ext2fs_get_stat_i_blocks(vol->fs,
						 (struct ext2_inode *)inode);
	if (type == S_IFCHR || type == S_IFBLK)
		st->st_rdev = inode_rdev(inode);
	nx_inode_get_time(inode, NX_ATIME, &st->st_atim);
	nx_inode_get_time(inode, NX_MTIME, &st->st_mtim);
	nx_inode_get_time(inode, NX_CTIME, &st->st_ctim);
}

errcode_t nx_getattr(struct nx_volume *vol, ext2_ino_t ino, struct stat *st)
{
	struct ext2_inode_large inode;
	errcode_t err = nx_inode_read(vol, ino, &inode);

	if (err)
		return err;
	if (inode.i_links_count == 0 && inode.i_mode == 0)
		return ENOENT;
	nx_inode_to_stat(vol, ino, &inode, st);
	return 0;
}

/* chmod: owner or root; a non-member of the group loses setgid. */
static errcode_t check_chmod(const struct nx_cred *cred,
			     const struct ext2_inode_large *inode, gid_t gid,
			     mode_t *mode)
{
	if (!nx_perm_is_owner(cred, (const struct ext2_inode *)inode))
		return EPERM;
	if (!nx_cred_is_root(cred) && !nx_cred_in_group(cred, gid))
		*mode &= ~S_ISGID;
	return 0;
}

/* chown/chgrp as in the kernel's chown_ok/chgrp_ok. */
static errcode_t check_chown(const struct nx_cred *cred,
			     const struct ext2_inode_large *inode,
			     const struct nx_attr *attr, int valid)
{
	uid_t uid = inode_uid(*inode);
	gid_t gid = inode_gid(*inode);

	if (nx_cred_is_root(cred))
		return 0;
	if ((valid & NX_SET_UID) && attr->uid != uid)
		return EPERM;
	if ((valid & NX_SET_GID) && attr->gid != gid &&
	    !(cred->uid == uid && nx_cred_in_group(cred, attr->gid)))
		return EPERM;
	return 0;
}

/* utimens: explicit times need ownership; "now" needs write access. */
static errcode_t check_times(const struct nx_cred *cred,
			     const struct ext2_inode_large *inode, int valid)
{
	const struct ext2_inode *in = (const struct ext2_inode *)inode;

	if (nx_perm_is_owner(cred, in))
		return 0;
	if (valid & (NX_SET_ATIME | NX_SET_MTIME))
		return EPERM;
	return nx_perm_access(cred, in, W_OK);
}

errcode_t nx_setattr(struct nx_volume *vol, const struct nx_cred *cred,
		     ext2_ino_t ino, const struct nx_attr *attr, int valid,
		     struct stat *st)
{
	struct ext2_inode_large inode;
	struct timespec now;
	errcode_t err;

	err = nx_inode_read_rw(vol, ino, &inode);
	if (err)
		return err;
	if (valid & (NX_SET_UID | NX_SET_GID)) {
		err = check_chown(cred, &inode, attr, valid);
		if (err)
			return err;
	}
	if (valid & NX_SET_MODE) {
		mode_t mode = attr->mode & 07777;
		gid_t gid = (valid & NX_SET_GID) ? attr->gid : inode_gid(inode);

		err = check_chmod(cred, &inode, gid, &mode);
		if (err)
			return err;
		inode.i_mode = (inode.i_mode & S_IFMT) | mode;
	}
	if (valid & (NX_SET_ATIME | NX_SET_MTIME | NX_SET_ATIME_NOW |
		     NX_SET_MTIME_NOW)) {
		err = check_times(cred, &inode, valid);
		if (err)
			return err;
	}
	if (valid & (NX_SET_UID | NX_SET_GID)) {
		/*
		 * Like the kernel's chown_common: changing owner of a
		 * non-directory drops setuid, and setgid when it means
		 * "setgid" (group-executable) rather than mandatory locking.
		 */
		if (!S_ISDIR(inode.i_mode) && !(valid & NX_SET_MODE)) {
			inode.i_mode &= ~S_ISUID;
			if (inode.i_mode & S_IXGRP)
				inode.i_mode &= ~S_ISGID;
		}
		if (valid & NX_SET_UID) {
			inode.i_uid = (uint16_t)attr->uid;
			ext2fs_set_i_uid_high(inode, attr->uid >> 16);
		}
		if (valid & NX_SET_GID) {
			inode.i_gid = (uint16_t)attr->gid;
			ext2fs_set_i_gid_high(inode, attr->gid >> 16);
		}
	}
	nx_now(&now);
	if (valid & NX_SET_ATIME_NOW)
		nx_inode_set_time(&inode, NX_ATIME, &now);
	else if (valid & NX_SET_ATIME)
		nx_inode_set_time(&inode, NX_ATIME, &attr->atime);
	if (valid & NX_SET_MTIME_NOW)
		nx_inode_set_time(&inode, NX_MTIME, &now);
	else if (valid & NX_SET_MTIME)
		nx_inode_set_time(&inode, NX_MTIME, &attr->mtime);
	nx_inode_set_time(&inode, NX_CTIME,
			  (valid & NX_SET_CTIME) ? &attr->ctime : &now);
	err = nx_inode_write(vol, ino, &inode);
	/* The access ACL mirrors the mode bits (posix_acl_chmod). */
	if (!err && (valid & NX_SET_MODE) && !LINUX_S_ISLNK(inode.i_mode))
		err = nx_acl_chmod(vol, ino, inode.i_mode);
	if (!err && st)
		nx_inode_to_stat(vol, ino, &inode, st);
	return err;
}

/* The kernel's inode_init_owner(): group and setgid inheritance. */
static void init_owner(const struct nx_cred *cred,
		       const struct ext2_inode_large *dir_inode,
		       struct ext2_inode_large *inode, mode_t mode)
{
	gid_t gid = cred->gid;

	if (dir_inode->i_mode & S_ISGID) {
		gid = inode_gid(*dir_inode);
		if (S_ISDIR(mode))
			mode |= S_ISGID;
	}
	if (!S_ISDIR(mode) && (mode & (S_ISGID | S_IXGRP)) ==
	    (S_ISGID | S_IXGRP) && !nx_cred_is_root(cred) &&
	    !nx_cred_in_group(cred, gid))
		mode &= ~S_ISGID;
	inode->i_mode = mode;
	inode->i_uid = (uint16_t)cred->uid;
	ext2fs_set_i_uid_high(*inode, cred->uid >> 16);
	inode->i_gid = (uint16_t)gid;
	ext2fs_set_i_gid_high(*inode, gid >> 16);
}

static void init_extent_header(struct ext2_inode_large *inode)
{
	struct ext3_extent_header *eh = (struct ext3_extent_header *)inode->i_block;

	inode->i_flags |= EXT4_EXTENTS_FL;
	eh->eh_magic = ext2fs_cpu_to_le16(EXT3_EXT_MAGIC);
	eh->eh_entries = 0;
	eh->eh_max = ext2fs_cpu_to_le16((sizeof(inode->i_block) -
					 sizeof(*eh)) /
					sizeof(struct ext3_extent));
	eh->eh_depth = 0;
	eh->eh_generation = 0;
}

/*
 * Write a freshly allocated inode over whatever the slot held before,
 * including the in-inode xattr area past struct ext2_inode_large.
 */
static errcode_t write_new_inode(struct nx_volume *vol, ext2_ino_t ino,
				 const struct ext2_inode_large *inode)
{
	size_t size = EXT2_INODE_SIZE(vol->fs->super);
	char *buf = calloc(1, size > sizeof(*inode) ? size : sizeof(*inode));
	errcode_t err;

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	memcpy(buf, inode, size < sizeof(*inode) ? size : sizeof(*inode));
	err = ext2fs_write_inode_full(vol->fs, ino, (struct ext2_inode *)buf,
				      size);
	free(buf);
	return err;
}

/*
 * i_generation of a new inode: what tells a file handle of the file that
 * had this inode number before (freed since) from the new file (fuse_ops.h).
 * Consecutive within a run, so never repeated before 2^32 creations; the
 * start is random, so that runs do not repeat each other's numbers (a
 * start from the time and the pid did, for daemons started a few seconds
 * apart with the same pid, as in a container).  Caller holds the lock.
 */
static uint32_t next_generation(void)
{
	static uint32_t gen;

	if (!gen && getrandom(&gen, sizeof(gen), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(gen))
		gen = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
	return ++gen;
}

errcode_t nx_inode_new(struct nx_volume *vol, const struct nx_cred *cred,
		       ext2_ino_t dir, mode_t mode, ext2_ino_t *ino,
		       struct ext2_inode_large *inode)
{
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large dir_inode;
	struct timespec now;
	ext2_ino_t newino;
	errcode_t err;

	err = nx_inode_read_rw(vol, dir, &dir_inode);
	if (err)
		return err;
	err = ext2fs_new_inode(fs, dir, mode, NULL, &newino);
	if (err)
		return err;
	memset(inode, 0, sizeof(*inode));
	if (EXT2_INODE_SIZE(fs->super) > EXT2_GOOD_OLD_INODE_SIZE) {
		inode->i_extra_isize = sizeof(*inode) - EXT2_GOOD_OLD_INODE_SIZE;
		if (fs->super->s_want_extra_isize &&
		    fs->super->s_want_extra_isize < inode->i_extra_isize)
			inode->i_extra_isize = fs->super->s_want_extra_isize;
	}
	init_owner(cred, &dir_inode, inode, mode);
	inode->i_links_count = S_ISDIR(mode) ? 2 : 1;
	inode->i_generation = next_generation();
	if ((S_ISREG(mode) || S_ISDIR(mode)) &&
	    ext2fs_has_feature_extents(fs->super))
		init_extent_header(inode);
	nx_now(&now);
	nx_inode_set_time(inode, NX_ATIME, &now);
	nx_inode_set_time(inode, NX_MTIME, &now);
	nx_inode_set_time(inode, NX_CTIME, &now);
	nx_inode_set_time(inode, NX_CRTIME, &now);
	err = write_new_inode(vol, newino, inode);
	if (err)
		return err;
	ext2fs_inode_alloc_stats2(fs, newino, +1, S_ISDIR(mode));
	nx_meta_dirty_inode(vol, newino);
	*ino = newino;
	return 0;
}

/* Logical block of extent file INODE that maps physical block PBLK, if any. */
static errcode_t find_logical_of(ext2_filsys fs, ext2_ino_t ino,
				 struct ext2_inode_large *inode, blk64_t pblk,
				 blk64_t *lblk, int *found)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent ex;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;

	*found = 0;
	err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)inode, &h);
	if (err)
		return err;
	for (;;) {
		err = ext2fs_extent_get(h, op, &ex);
		op = EXT2_EXTENT_NEXT_LEAF;
		if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE) {
			err = 0;
			break;
		}
		if (err)
			break;
		if (!(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) || !ex.e_len)
			continue;
		if (pblk >= ex.e_pblk && pblk < ex.e_pblk + ex.e_len) {
			*lblk = ex.e_lblk + (pblk - ex.e_pblk);
			*found = 1;
			break;
		}
	}
	ext2fs_extent_free(h);
	return err;
}

errcode_t nx_punch(struct nx_volume *vol, ext2_ino_t ino,
		   struct ext2_inode_large *inode, blk64_t start, blk64_t end)
{
	ext2_filsys fs = vol->fs;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1, lblk = 0, zero = 0;
	errcode_t err;
	int found = 0;

	/*
	 * libext2fs 1.47.0's punch_extent_blocks() rejects a freed run that
	 * ends on the volume's last block (off by one, fixed upstream after
	 * 1.47.0) after it has already dropped the extent: the block would
	 * leak.  Unmap and free that one block ourselves first.
	 */
	/*
	 * Only a block in use can be mapped by a file: while the last block
	 * is free (the usual case) there is nothing to work around, and we
	 * spare every punch a walk over all of the file's extent leaves
	 * (under a snapshot, each overwrite punches a file that random
	 * overwrites fragment more and more).
	 */
	if ((inode->i_flags & EXT4_EXTENTS_FL) &&
	    !(inode->i_flags & EXT4_INLINE_DATA_FL) &&
	    ext2fs_test_block_bitmap2(fs->block_map, last)) {
		err = find_logical_of(fs, ino, inode, last, &lblk, &found);
		if (err)
			return err;
	}
	if (found && lblk >= start && lblk <= end) {
		err = ext2fs_bmap2(fs, ino, (struct ext2_inode *)inode, NULL,
				   BMAP_SET, lblk, NULL, &zero);
		if (err)
			return err;
		ext2fs_block_alloc_stats2(fs, last, -1);
		err = ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)inode, 1);
		if (err)
			return err;
	}
	return ext2fs_punch(fs, ino, (struct ext2_inode *)inode, NULL, start,
			    end);
}

errcode_t nx_inode_release(struct nx_volume *vol, ext2_ino_t ino)
{
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode;
	struct timespec now;
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return 0;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (inode.i_links_count != 0 || inode.i_mode == 0)
		return 0;
	if (inode.i_dtime && !nx_orphan_has(vol, ino))
		return 0;	/* released already */
	err = nx_orphan_remove(vol, ino, &inode);
	if (err)
		return err;
	/* From here on i_dtime says "being released" (see nx_inode_write). */
	nx_now(&now);
	inode.i_dtime = (uint32_t)now.tv_sec ? (uint32_t)now.tv_sec : 1;
	err = nx_inode_write(vol, ino, &inode);
	if (err)
		return err;
	err = ext2fs_free_ext_attr(fs, ino, &inode);
	if (err)
		return err;
	if (ext2fs_inode_has_valid_blocks2(fs, (struct ext2_inode *)&inode)) {
		err = nx_punch(vol, ino, &inode, 0, ~0ULL);
		if (err)
			return err;
	}
	inode.i_size = 0;
	inode.i_size_high = 0;
	nx_inode_set_time(&inode, NX_CTIME, &now);
	err = nx_inode_write(vol, ino, &inode);
	if (err)
		return err;
	ext2fs_inode_alloc_stats2(fs, ino, -1, LINUX_S_ISDIR(inode.i_mode));
	nx_meta_dirty_inode(vol, ino);
	return 0;
}
