/*
 * xattr.h - extended attributes and inode flags (chattr/lsattr).
 *
 * Contract: user., trusted., security. and system.posix_acl_* names, in the
 * in-inode area and external xattr blocks, with Linux's semantics: ENODATA
 * for a missing name, ERANGE when the buffer is too small (size 0 asks for
 * the length), XATTR_CREATE -> EEXIST, XATTR_REPLACE -> ENODATA, ENOTSUP
 * for unknown namespaces, EPERM for trusted. without root and for user. on
 * non-regular/non-directory inodes.  POSIX ACLs are stored in ext4's disk
 * format and exchanged in the kernel's xattr format.  Setting an xattr or
 * flags updates ctime.  The caller holds the volume lock.
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

#endif
