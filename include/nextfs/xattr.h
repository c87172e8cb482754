/*
 * xattr.h - extended attributes and inode flags (chattr/lsattr).
 * Layer: fs/ (calls volume/).
 *
 * Contract: user., trusted., security., gnu. and system.posix_acl_* names,
 * in the in-inode area and external xattr blocks, with Linux's semantics:
 * ENODATA for a missing name, ERANGE when the buffer is too small (size 0
 * asks for the length) or the name is empty or longer than 255,
 * XATTR_CREATE -> EEXIST, XATTR_REPLACE -> ENODATA, ENOSPC when a value
 * does not fit (E2BIG past 64 KiB), EOPNOTSUPP for unknown namespaces
 * (including ext4's private system.data, which is never listed).
 * Permissions as fs/xattr.c: trusted. needs root (EPERM to write, hidden
 * and ENODATA to read/list otherwise); user. only on regular files and
 * directories (EPERM to write, ENODATA to read otherwise) and needs
 * write/read permission (EACCES); security. is written by owner or root;
 * immutable and append-only inodes refuse every change (EPERM).  POSIX
 * ACLs are stored in ext4's disk format and exchanged in the kernel's
 * posix_acl_xattr format (version 2, ACL_UNDEFINED_ID for the unnamed
 * entries); setting one is for owner or root, validates it (EINVAL),
 * updates the mode like ext4 (an ACL the mode can express is not stored),
 * default ACLs only on directories (EACCES).  Setting or removing an
 * xattr or flags updates ctime.  The caller holds the volume lock.
 */
#ifndef NEXTFS_XATTR_H
#define NEXTFS_XATTR_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"
#include "nextfs/perm.h"

errcode_t nx_getxattr(struct nx_volume *vol, const struct nx_cred *cred,
		      ext2_ino_t ino, const char *name, void *buf,
		      size_t size, size_t *len);
errcode_t nx_setxattr(struct nx_volume *vol, const struct nx_cred *cred,
		      ext2_ino_t ino, const char *name, const void *value,
		      size_t size, int flags);
/* NUL-separated names into BUF; *LEN the total length (size 0: just *LEN). */
errcode_t nx_listxattr(struct nx_volume *vol, const struct nx_cred *cred,
		       ext2_ino_t ino, char *buf, size_t size, size_t *len);
errcode_t nx_removexattr(struct nx_volume *vol, const struct nx_cred *cred,
			 ext2_ino_t ino, const char *name);

/* FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (FS_*_FL values as lsattr shows them). */
errcode_t nx_get_iflags(struct nx_volume *vol, ext2_ino_t ino,
			unsigned *flags);
errcode_t nx_set_iflags(struct nx_volume *vol, const struct nx_cred *cred,
			ext2_ino_t ino, unsigned flags);

/*
 * Is INODE immutable / append-only?  The FUSE layer refuses writes,
 * truncation, unlink, rename, link, setattr etc. with EPERM as the kernel
 * does (IS_IMMUTABLE / IS_APPEND); the xattr calls above already do.
 */
int nx_iflags_immutable(const struct ext2_inode *inode);
int nx_iflags_append_only(const struct ext2_inode *inode);

/*
 * POSIX ACL glue for the paths that own the mode (like the kernel's
 * posix_acl_create and posix_acl_chmod; FUSE_CAP_POSIX_ACL makes these
 * the file system's job).
 *
 * nx_acl_inherit: call right after nx_inode_new() for INO in directory
 * DIR, where INODE was created with the mode as requested, NOT yet masked
 * by the umask.  If DIR has a default ACL the mode is masked by it, INO
 * gets the inherited access ACL and (directories) the default ACL;
 * otherwise the mode is masked by UMASK.  Symlinks are left alone.
 * Writes INO and refreshes INODE from disk.
 *
 * nx_acl_chmod: after a chmod of INO to MODE has been written, bring the
 * access ACL (if any) in line: owner, mask (or group) and other entries
 * take the new permission bits.  Rewrites the inode's xattrs, so a caller
 * holding an inode copy must re-read it before writing it again.
 */
errcode_t nx_acl_inherit(struct nx_volume *vol, ext2_ino_t dir,
			 ext2_ino_t ino, struct ext2_inode_large *inode,
			 mode_t umask);
errcode_t nx_acl_chmod(struct nx_volume *vol, ext2_ino_t ino, mode_t mode);

/*
 * nextfs's own records on an inode (the receive cursor and the received
 * snapshot identity: docs/replication.md): xattrs named NX_XATTR_PRIVATE
 * + something.  ext4 has no handler for such system.* names, so no user
 * interface lists, reads or writes them - the calls above answer
 * EOPNOTSUPP and leave them out of lists, as the kernel does - and no
 * stream, copy or ACL can forge one.  These store them like any xattr,
 * without permission checks and without changing ctime (the inode did
 * not change for its users).  _get mallocs *VALUE; ENODATA if absent;
 * EINVAL for a name outside the prefix.
 */
#define NX_XATTR_PRIVATE	"system.nextfs."
errcode_t nx_xattr_private_get(struct nx_volume *vol, ext2_ino_t ino,
			       const char *name, void **value, size_t *len);
errcode_t nx_xattr_private_set(struct nx_volume *vol, ext2_ino_t ino,
			       const char *name, const void *value,
			       size_t len);
errcode_t nx_xattr_private_remove(struct nx_volume *vol, ext2_ino_t ino,
				  const char *name);

#endif
