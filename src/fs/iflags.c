/*
 * iflags.c - inode flags as chattr/lsattr see them (FS_IOC_GETFLAGS and
 * FS_IOC_SETFLAGS), with the rules of vfs_fileattr_set() and ext4's
 * ext4_fileattr_set()/ext4_ioctl_setflags().
 *
 * The FS_*_FL values are the on-disk EXT*_FL bits, so no translation is
 * needed; only which bits a user may see and change.  Bits outside the
 * user-modifiable set (extents layout, inline data, snapshot state, ...)
 * always survive a set unchanged.
 */
#include <errno.h>
#include <stdint.h>
#include "nextfs/inode.h"
#include "nextfs/xattr.h"

/* ext4's retired EOFBLOCKS_FL, still user-modifiable there */
#define NX_EOFBLOCKS_FL		0x00400000

/*
 * EXT4_FL_USER_MODIFIABLE, plus No_COW: ext4 has no use for it but
 * applications (databases, VM images, journald) set it.  Snapshots honour
 * it: such a file is overwritten in place and its old blocks are copied
 * into the active snapshot, charged to the writer like any other write
 * (reserve.h), so it is the owner's to set, root or not (as on btrfs;
 * docs/security.md).
 */
#define NX_FL_MODIFIABLE	(EXT2_SECRM_FL | EXT2_UNRM_FL |		\
				 EXT2_COMPR_FL | EXT2_SYNC_FL |		\
				 EXT2_IMMUTABLE_FL | EXT2_APPEND_FL |	\
				 EXT2_NODUMP_FL | EXT2_NOATIME_FL |	\
				 EXT3_JOURNAL_DATA_FL | EXT2_NOTAIL_FL | \
				 EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL |	\
				 EXT4_EXTENTS_FL | NX_EOFBLOCKS_FL |	\
				 FS_DAX_FL | EXT4_PROJINHERIT_FL |	\
				 EXT4_CASEFOLD_FL | FS_NOCOW_FL)

/* EXT4_FL_USER_VISIBLE (plus No_COW). */
#define NX_FL_VISIBLE	(NX_FL_MODIFIABLE | EXT2_DIRTY_FL |		\
			 EXT2_COMPRBLK_FL | EXT2_NOCOMPR_FL |		\
			 EXT4_ENCRYPT_FL | EXT2_INDEX_FL |		\
			 EXT4_VERITY_FL | EXT4_INLINE_DATA_FL)

/* ext4_mask_flags(): which flags make sense for which file types. */
#define NX_FL_DIR_ONLY	(EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL |		\
			 EXT4_CASEFOLD_FL | EXT4_PROJINHERIT_FL)
#define NX_FL_OTHER		(EXT2_NODUMP_FL | EXT2_NOATIME_FL)

#define NX_FL_NEED_ROOT		(EXT2_IMMUTABLE_FL | EXT2_APPEND_FL)

int nx_iflags_immutable(const struct ext2_inode *inode)
{
	return (inode->i_flags & EXT2_IMMUTABLE_FL) != 0;
}

int nx_iflags_append_only(const struct ext2_inode *inode)
{
	return (inode->i_flags & EXT2_APPEND_FL) != 0;
}

static uint32_t mask_for_type(uint16_t mode, uint32_t flags)
{
	if (LINUX_S_ISDIR(mode))
		return flags;
	if (LINUX_S_ISREG(mode))
		return flags & ~(uint32_t)NX_FL_DIR_ONLY;
	return flags & NX_FL_OTHER;
}

errcode_t nx_get_iflags(struct nx_volume *vol, ext2_ino_t ino,
			unsigned *flags)
{
	struct ext2_inode_large inode;
	errcode_t err = nx_inode_read(vol, ino, &inode);

	if (err)
		return err;
	*flags = inode.i_flags & NX_FL_VISIBLE;
	return 0;
}

/*
 * Who may change what: the owner (or root) may set flags at all, only
 * root touches immutable/append-only (CAP_LINUX_IMMUTABLE) and data
 * journaling (CAP_SYS_RESOURCE), and an immutable inode must lose that
 * flag before anything else about it changes.
 */
static errcode_t check_change(const struct nx_cred *cred,
			      const struct ext2_inode_large *inode,
			      uint32_t flags)
{
	uint32_t old = inode->i_flags, changed = (old ^ flags);
	int root = nx_cred_is_root(cred);

	if ((old & EXT2_IMMUTABLE_FL) && (flags & EXT2_IMMUTABLE_FL) &&
	    (changed & NX_FL_MODIFIABLE))
		return EPERM;
	if ((changed & EXT3_JOURNAL_DATA_FL) && !root)
		return EPERM;
	/*
	 * ext4 migrates between block maps and extents here; we do not,
	 * and nextfs does not implement case-insensitive lookups.
	 */
	if (changed & (EXT4_EXTENTS_FL | EXT4_CASEFOLD_FL))
		return EOPNOTSUPP;
	return 0;
}

errcode_t nx_set_iflags(struct nx_volume *vol, const struct nx_cred *cred,
			ext2_ino_t ino, unsigned flags)
{
	struct ext2_inode_large inode;
	uint32_t want = flags;
	errcode_t err;

	err = nx_inode_read_rw(vol, ino, &inode);
	if (err)
		return err;
	/* vfs_fileattr_set() and fileattr_set_prepare() */
	if (!nx_perm_is_owner(cred, (const struct ext2_inode *)&inode))
		return EPERM;
	if (((inode.i_flags ^ want) & NX_FL_NEED_ROOT) &&
	    !nx_cred_is_root(cred))
		return EPERM;
	/*
	 * ext4_fileattr_set(): unknown bits are refused, but visible
	 * read-only ones are silently ignored because chattr hands back
	 * what lsattr read, plus or minus the flag being changed.
	 */
	if (want & ~(uint32_t)NX_FL_VISIBLE)
		return EOPNOTSUPP;
	want &= NX_FL_MODIFIABLE;
	if (mask_for_type(inode.i_mode, want) != want)
		return EOPNOTSUPP;
	err = check_change(cred, &inode, want);
	if (err)
		return err;
	/*
	 * Like btrfs, No_COW only takes on directories and on files that
	 * have no data yet; on others the request is quietly dropped.
	 */
	if ((want & ~inode.i_flags & FS_NOCOW_FL) &&
	    LINUX_S_ISREG(inode.i_mode) && EXT2_I_SIZE(&inode) != 0)
		want &= ~(uint32_t)FS_NOCOW_FL;

	inode.i_flags = (inode.i_flags & ~(uint32_t)NX_FL_MODIFIABLE) | want;
	nx_inode_touch(&inode, NX_TOUCH_CTIME);
	return nx_inode_write(vol, ino, &inode);
}
