/*
 * namei.c - operations that create or remove one name: mknod, mkdir,
 * symlink, link, unlink, rmdir, plus readlink.
 *
 * Each follows the kernel's order of checks (search permission, name
 * exists, write permission, flags) so that callers see the errno Linux
 * would give, then changes the directory first and the inodes after:
 * a failure while adding the name leaves no trace (a freshly allocated
 * inode is released again), so ENOSPC keeps the volume consistent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "nextfs/dir.h"
#include "nextfs/inode.h"

/* ---------------------------------------------------------------- */
/* Permission rules shared with rename.c                              */
/* ---------------------------------------------------------------- */

static const struct ext2_inode *small(const struct ext2_inode_large *inode)
{
	return (const struct ext2_inode *)inode;
}

errcode_t nx_dir_may_create(const struct nx_cred *cred,
			    const struct ext2_inode_large *dir)
{
	if (dir->i_links_count == 0)
		return ENOENT;	/* removed directory (IS_DEADDIR) */
	if (dir->i_flags & EXT2_IMMUTABLE_FL)
		return EPERM;
	return nx_perm_access(cred, small(dir), W_OK | X_OK);
}

errcode_t nx_dir_may_delete(const struct nx_cred *cred,
			    const struct ext2_inode_large *dir,
			    const struct ext2_inode_large *victim, int isdir)
{
	errcode_t err;

	if (dir->i_flags & EXT2_IMMUTABLE_FL)
		return EPERM;
	err = nx_perm_may_delete(cred, small(dir), small(victim));
	if (err)
		return err;
	if ((dir->i_flags & EXT2_APPEND_FL) ||
	    (victim->i_flags & (EXT2_APPEND_FL | EXT2_IMMUTABLE_FL)))
		return EPERM;
	if (isdir && !LINUX_S_ISDIR(victim->i_mode))
		return ENOTDIR;
	if (!isdir && LINUX_S_ISDIR(victim->i_mode))
		return EISDIR;
	return 0;
}

/* ---------------------------------------------------------------- */
/* Helpers                                                            */
/* ---------------------------------------------------------------- */

static int is_dot(const char *name)
{
	return name[0] == '.' && name[1] == 0;
}

static int is_dotdot(const char *name)
{
	return name[0] == '.' && name[1] == '.' && name[2] == 0;
}

/* Read DIR for a name operation: it must be a directory we may search. */
static errcode_t open_parent(struct nx_volume *vol, const struct nx_cred *cred,
			     ext2_ino_t dir, struct ext2_inode_large *inode)
{
	errcode_t err;

	err = nx_inode_read(vol, dir, inode);
	if (err)
		return err;
	if (!LINUX_S_ISDIR(inode->i_mode))
		return inode->i_mode ? ENOTDIR : ENOENT;
	return nx_perm_access(cred, small(inode), X_OK);
}

/*
 * Checks before NAME is created in DIR, in the kernel's order: name
 * syntax, search permission, EEXIST, then may_create().
 */
static errcode_t prepare_create(struct nx_volume *vol,
				const struct nx_cred *cred, ext2_ino_t dir,
				const char *name)
{
	struct ext2_inode_large dinode;
	ext2_ino_t existing;
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	err = nx_name_check(name);
	if (err)
		return err;
	err = open_parent(vol, cred, dir, &dinode);
	if (err)
		return err;
	if (is_dot(name) || is_dotdot(name))
		return EEXIST;
	err = nx_lookup(vol, dir, name, &existing);
	if (!err)
		return EEXIST;
	if (err != ENOENT)
		return err;
	return nx_dir_may_create(cred, &dinode);
}

/*
 * After a name was added to or removed from DIR: mtime and ctime to NOW
 * and the link count moved by NLINK (a subdirectory came or went).
 */
static errcode_t touch_parent(struct nx_volume *vol, ext2_ino_t dir,
			      int nlink, const struct timespec *now)
{
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read(vol, dir, &inode);
	if (err)
		return err;
	if (nlink > 0)
		nx_dir_nlink_inc(vol->fs, &inode);
	else if (nlink < 0)
		nx_dir_nlink_dec(&inode);
	nx_inode_set_time(&inode, NX_MTIME, now);
	nx_inode_set_time(&inode, NX_CTIME, now);
	return nx_inode_write(vol, dir, &inode);
}

/* An empty extent tree root in i_block. */
static void init_extent_root(struct ext2_inode_large *inode)
{
	struct ext3_extent_header *eh = (struct ext3_extent_header *)
					inode->i_block;

	memset(inode->i_block, 0, sizeof(inode->i_block));
	inode->i_flags |= EXT4_EXTENTS_FL;
	eh->eh_magic = ext2fs_cpu_to_le16(EXT3_EXT_MAGIC);
	eh->eh_max = ext2fs_cpu_to_le16((sizeof(inode->i_block) -
					 sizeof(*eh)) /
					sizeof(struct ext3_extent));
}

/*
 * Give back the single data block a new directory or slow symlink got.
 * Done by hand rather than by ext2fs_punch(), which in libext2fs 1.47.0
 * refuses to free the last block of the volume (off-by-one in
 * punch_extent_blocks()) and would leave it allocated but unmapped.
 */
static void drop_only_block(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode)
{
	ext2_filsys fs = vol->fs;
	blk64_t pblk = 0;

	if (inode->i_file_acl || (inode->i_flags & EXT4_INLINE_DATA_FL) ||
	    ext2fs_inode_data_blocks2(fs, EXT2_INODE(inode)) !=
	    fs->blocksize / 512)
		return;
	if (ext2fs_bmap2(fs, ino, EXT2_INODE(inode), NULL, 0, 0, NULL, &pblk) ||
	    !pblk)
		return;
	if (inode->i_flags & EXT4_EXTENTS_FL)
		init_extent_root(inode);
	else
		memset(inode->i_block, 0, sizeof(inode->i_block));
	ext2fs_iblk_set(fs, EXT2_INODE(inode), 0);
	inode->i_size = 0;
	inode->i_size_high = 0;
	ext2fs_block_alloc_stats2(fs, pblk, -1);
}

/* Undo nx_inode_new() (and a first block) after a failure. */
static void discard_new_inode(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;

	if (nx_inode_read(vol, ino, &inode))
		return;
	drop_only_block(vol, ino, &inode);
	inode.i_links_count = 0;
	if (nx_inode_write(vol, ino, &inode))
		return;
	nx_inode_release(vol, ino);
}

/*
 * The end of every create: ERR says how writing the new inode INO went.
 * Link it under NAME and return it in *RET (if not NULL), or release it
 * if either failed.
 */
static errcode_t publish_new_inode(struct nx_volume *vol, ext2_ino_t dir,
				   const char *name, ext2_ino_t ino,
				   mode_t mode, errcode_t err, ext2_ino_t *ret)
{
	struct timespec now;

	nx_now(&now);
	if (!err)
		err = nx_dir_add_entry(vol, dir, name, ino, mode);
	if (err) {
		discard_new_inode(vol, ino);
		return err;
	}
	err = touch_parent(vol, dir, LINUX_S_ISDIR(mode) ? 1 : 0, &now);
	if (!err && ret)
		*ret = ino;
	return err;
}

/* ---------------------------------------------------------------- */
/* mknod                                                              */
/* ---------------------------------------------------------------- */

/* ext4's device number encodings in i_block (old 8:8, new 12:20). */
static void encode_rdev(struct ext2_inode_large *inode, dev_t rdev)
{
	unsigned maj = major(rdev), min = minor(rdev);

	memset(inode->i_block, 0, sizeof(inode->i_block));
	if (maj < 256 && min < 256)
		inode->i_block[0] = (maj << 8) | min;
	else
		inode->i_block[1] = (min & 0xff) | (maj << 8) |
				    ((min & ~0xffU) << 12);
}

errcode_t nx_mknod(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, mode_t mode, dev_t rdev,
		   ext2_ino_t *ino)
{
	struct ext2_inode_large inode;
	mode_t type = mode & S_IFMT;
	ext2_ino_t newino;
	errcode_t err;

	/* may_mknod() */
	if (!type)
		type = S_IFREG;
	if (type == S_IFDIR)
		return EPERM;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK &&
	    type != S_IFCHR && type != S_IFBLK)
		return EINVAL;
	err = prepare_create(vol, cred, dir, name);
	if (err)
		return err;
	/* CAP_MKNOD */
	if ((type == S_IFCHR || type == S_IFBLK) && !nx_cred_is_root(cred))
		return EPERM;
	mode = type | (mode & 07777 & ~cred->umask);
	err = nx_inode_new(vol, cred, dir, mode, &newino, &inode);
	if (err)
		return err;
	if (type == S_IFCHR || type == S_IFBLK) {
		encode_rdev(&inode, rdev);
		err = nx_inode_write(vol, newino, &inode);
	}
	return publish_new_inode(vol, dir, name, newino, mode, err, ino);
}

/* ---------------------------------------------------------------- */
/* mkdir                                                              */
/* ---------------------------------------------------------------- */

/* '.' and '..' in i_block, like ext4_try_create_inline_dir(). */
static errcode_t init_inline_dir(struct nx_volume *vol, ext2_ino_t ino,
				 struct ext2_inode_large *inode,
				 ext2_ino_t parent)
{
	errcode_t err;

	inode->i_flags &= ~EXT4_EXTENTS_FL;
	inode->i_flags |= EXT4_INLINE_DATA_FL;
	memset(inode->i_block, 0, sizeof(inode->i_block));
	err = ext2fs_new_dir_inline_data(vol->fs, ino, parent,
					 inode->i_block);
	if (err)
		return err;
	inode->i_size = EXT4_MIN_INLINE_DATA_SIZE;
	inode->i_size_high = 0;
	err = nx_inode_write(vol, ino, inode);
	if (err)
		return err;
	/* An inline directory always carries a (possibly empty) system.data. */
	return ext2fs_inline_data_init(vol->fs, ino);
}

/* One directory block with '.' and '..' (and the checksum tail). */
static errcode_t init_block_dir(struct nx_volume *vol, ext2_ino_t ino,
				struct ext2_inode_large *inode,
				ext2_ino_t parent)
{
	ext2_filsys fs = vol->fs;
	char *block = NULL;
	blk64_t pblk = 0;
	errcode_t err;

	err = ext2fs_new_dir_block(fs, ino, parent, &block);
	if (err)
		return err;
	/* Allocates near the inode, maps block 0 and updates i_blocks. */
	err = ext2fs_bmap2(fs, ino, EXT2_INODE(inode), NULL, BMAP_ALLOC, 0,
			   NULL, &pblk);
	if (!err)
		err = ext2fs_write_dir_block4(fs, pblk, block, 0, ino);
	ext2fs_free_mem(&block);
	if (err)
		return err;
	inode->i_size = fs->blocksize;
	inode->i_size_high = 0;
	return nx_inode_write(vol, ino, inode);
}

static int want_inline_dir(ext2_filsys fs)
{
	return ext2fs_has_feature_inline_data(fs->super) &&
	       EXT2_INODE_SIZE(fs->super) > EXT2_GOOD_OLD_INODE_SIZE;
}

errcode_t nx_mkdir(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, mode_t mode,
		   ext2_ino_t *ino)
{
	struct ext2_inode_large inode, dinode;
	ext2_ino_t newino;
	errcode_t err;

	err = prepare_create(vol, cred, dir, name);
	if (err)
		return err;
	err = nx_inode_read(vol, dir, &dinode);
	if (err)
		return err;
	if (nx_dir_link_max(vol->fs, &dinode))
		return EMLINK;
	mode = S_IFDIR | (mode & 01777 & ~cred->umask);
	err = nx_inode_new(vol, cred, dir, mode, &newino, &inode);
	if (err)
		return err;
	if (want_inline_dir(vol->fs))
		err = init_inline_dir(vol, newino, &inode, dir);
	else
		err = init_block_dir(vol, newino, &inode, dir);
	return publish_new_inode(vol, dir, name, newino, S_IFDIR, err, ino);
}

/* ---------------------------------------------------------------- */
/* symlink / readlink                                                 */
/* ---------------------------------------------------------------- */

/* Targets of 60 bytes or more live in a data block (slow symlink). */
static errcode_t write_slow_symlink(struct nx_volume *vol, ext2_ino_t ino,
				    struct ext2_inode_large *inode,
				    const char *target, size_t len)
{
	ext2_filsys fs = vol->fs;
	blk64_t pblk = 0;
	char *buf;
	errcode_t err;

	if (ext2fs_has_feature_extents(fs->super))
		init_extent_root(inode);
	err = nx_inode_write(vol, ino, inode);
	if (err)
		return err;
	buf = calloc(1, fs->blocksize);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	memcpy(buf, target, len);
	err = ext2fs_bmap2(fs, ino, EXT2_INODE(inode), NULL, BMAP_ALLOC, 0,
			   NULL, &pblk);
	if (!err)
		err = io_channel_write_blk64(fs->io, pblk, 1, buf);
	free(buf);
	return err;
}

errcode_t nx_symlink(struct nx_volume *vol, const struct nx_cred *cred,
		     ext2_ino_t dir, const char *name, const char *target,
		     ext2_ino_t *ino)
{
	struct ext2_inode_large inode;
	ext2_ino_t newino;
	size_t len;
	errcode_t err;

	len = strnlen(target, vol->fs->blocksize);
	if (len == 0)
		return ENOENT;
	err = prepare_create(vol, cred, dir, name);
	if (err)
		return err;
	/* ext4 keeps the target and its NUL within one block. */
	if (len >= vol->fs->blocksize)
		return ENAMETOOLONG;
	err = nx_inode_new(vol, cred, dir, S_IFLNK | 0777, &newino, &inode);
	if (err)
		return err;
	inode.i_flags &= ~EXT4_EXTENTS_FL;
	memset(inode.i_block, 0, sizeof(inode.i_block));
	inode.i_size = len;
	if (len < sizeof(inode.i_block)) {
		memcpy(inode.i_block, target, len);	/* fast symlink */
		err = nx_inode_write(vol, newino, &inode);
	} else {
		err = write_slow_symlink(vol, newino, &inode, target, len);
	}
	return publish_new_inode(vol, dir, name, newino, S_IFLNK, err, ino);
}

/* Target of a slow symlink: the start of its first data block. */
static errcode_t read_link_block(struct nx_volume *vol, ext2_ino_t ino,
				 struct ext2_inode_large *inode, char *buf)
{
	blk64_t pblk = 0;
	errcode_t err;

	err = ext2fs_bmap2(vol->fs, ino, EXT2_INODE(inode), NULL, 0, 0, NULL,
			   &pblk);
	if (err)
		return err;
	if (!pblk)
		return EIO;
	return io_channel_read_blk64(vol->fs->io, pblk, 1, buf);
}

static errcode_t read_link_inline(struct nx_volume *vol, ext2_ino_t ino,
				  char *buf, size_t size)
{
	size_t got;
	errcode_t err;

	err = ext2fs_inline_data_size(vol->fs, ino, &got);
	if (err)
		return err;
	if (got < size || got > vol->fs->blocksize)
		return EIO;
	return ext2fs_inline_data_get(vol->fs, ino, NULL, buf, &got);
}

errcode_t nx_readlink(struct nx_volume *vol, ext2_ino_t ino, char *buf,
		      size_t bufsize, size_t *len)
{
	struct ext2_inode_large inode;
	size_t size;
	char *target;
	errcode_t err;

	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (!LINUX_S_ISLNK(inode.i_mode))
		return EINVAL;
	size = EXT2_I_SIZE(&inode);
	if (size >= vol->fs->blocksize)
		return EIO;
	/* Every layout fits in one block (inodes are never bigger). */
	target = calloc(1, vol->fs->blocksize);
	if (!target)
		return EXT2_ET_NO_MEMORY;
	if (inode.i_flags & EXT4_INLINE_DATA_FL)
		err = read_link_inline(vol, ino, target, size);
	else if (size < sizeof(inode.i_block) &&
		 ext2fs_inode_data_blocks2(vol->fs, EXT2_INODE(&inode)) == 0)
		memcpy(target, inode.i_block, size);	/* fast symlink */
	else
		err = read_link_block(vol, ino, &inode, target);
	if (!err) {
		memcpy(buf, target, size < bufsize ? size : bufsize);
		if (size < bufsize)
			buf[size] = 0;
		*len = size;
	}
	free(target);
	return err;
}

/* ---------------------------------------------------------------- */
/* link                                                               */
/* ---------------------------------------------------------------- */

errcode_t nx_link(struct nx_volume *vol, const struct nx_cred *cred,
		  ext2_ino_t ino, ext2_ino_t newdir, const char *newname)
{
	struct ext2_inode_large inode;
	struct timespec now;
	errcode_t err;

	err = prepare_create(vol, cred, newdir, newname);
	if (err)
		return err;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (inode.i_flags & (EXT2_APPEND_FL | EXT2_IMMUTABLE_FL))
		return EPERM;
	if (LINUX_S_ISDIR(inode.i_mode))
		return EPERM;
	if (inode.i_links_count == 0)
		return ENOENT;
	if (inode.i_links_count >= EXT2_LINK_MAX)
		return EMLINK;
	err = nx_dir_add_entry(vol, newdir, newname, ino, inode.i_mode);
	if (err)
		return err;
	nx_now(&now);
	inode.i_links_count++;
	nx_inode_set_time(&inode, NX_CTIME, &now);
	err = nx_inode_write(vol, ino, &inode);
	if (err)
		return err;
	return touch_parent(vol, newdir, 0, &now);
}

/* ---------------------------------------------------------------- */
/* unlink / rmdir                                                     */
/* ---------------------------------------------------------------- */

/*
 * Find NAME in DIR and check it may go: *VINO and VINODE get the victim.
 * DINODE gets DIR's inode.
 */
static errcode_t prepare_remove(struct nx_volume *vol,
				const struct nx_cred *cred, ext2_ino_t dir,
				const char *name, int isdir,
				struct ext2_inode_large *dinode,
				ext2_ino_t *vino,
				struct ext2_inode_large *vinode)
{
	errcode_t err;

	err = open_parent(vol, cred, dir, dinode);
	if (err)
		return err;
	err = nx_lookup(vol, dir, name, vino);
	if (err)
		return err;
	err = nx_inode_read(vol, *vino, vinode);
	if (err)
		return err;
	err = nx_dir_may_delete(cred, dinode, vinode, isdir);
	if (err)
		return err;
	if (isdir && *vino == EXT2_ROOT_INO)
		return EBUSY;
	return 0;
}

/* What unlink and rmdir check first, before the name's own rules. */
static errcode_t start_remove(struct nx_volume *vol, const char *name,
			      ext2_ino_t *victim)
{
	if (victim)
		*victim = 0;
	if (nx_volume_rdonly(vol))
		return EROFS;
	return nx_name_check(name);
}

/*
 * The end of unlink and rmdir: NAME leaves DIR, and VINO (VINODE) loses
 * that link - a directory all of them: its blocks go with
 * nx_inode_release() once nobody has it open.
 */
static errcode_t drop_name(struct nx_volume *vol, ext2_ino_t dir,
			   const char *name, ext2_ino_t vino,
			   struct ext2_inode_large *vinode, int isdir,
			   ext2_ino_t *victim)
{
	struct timespec now;
	errcode_t err;

	err = nx_dir_remove_entry(vol, dir, name);
	if (err)
		return err;
	nx_now(&now);
	if (isdir)
		vinode->i_links_count = 0;
	else if (vinode->i_links_count)
		vinode->i_links_count--;
	nx_inode_set_time(vinode, NX_CTIME, &now);
	err = nx_inode_write(vol, vino, vinode);
	if (!err)
		err = touch_parent(vol, dir, isdir ? -1 : 0, &now);
	if (victim)
		*victim = vino;
	return err;
}

errcode_t nx_unlink(struct nx_volume *vol, const struct nx_cred *cred,
		    ext2_ino_t dir, const char *name, ext2_ino_t *victim)
{
	struct ext2_inode_large dinode, vinode;
	ext2_ino_t vino;
	errcode_t err;

	err = start_remove(vol, name, victim);
	if (err)
		return err;
	if (is_dot(name) || is_dotdot(name))
		return EISDIR;
	err = prepare_remove(vol, cred, dir, name, 0, &dinode, &vino, &vinode);
	if (err)
		return err;
	return drop_name(vol, dir, name, vino, &vinode, 0, victim);
}

errcode_t nx_rmdir(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, ext2_ino_t *victim)
{
	struct ext2_inode_large dinode, vinode;
	ext2_ino_t vino;
	int empty = 0;
	errcode_t err;

	err = start_remove(vol, name, victim);
	if (err)
		return err;
	if (is_dot(name))
		return EINVAL;
	if (is_dotdot(name))
		return ENOTEMPTY;
	err = prepare_remove(vol, cred, dir, name, 1, &dinode, &vino, &vinode);
	if (err)
		return err;
	err = nx_dir_is_empty(vol, vino, &empty);
	if (err)
		return err;
	if (!empty)
		return ENOTEMPTY;
	return drop_name(vol, dir, name, vino, &vinode, 1, victim);
}
