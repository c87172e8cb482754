/*
 * xattr_ops.c - the extended attribute requests of the live volume and
 * of snapshot views (snap_ops.c dispatches to them like to fuse_ops.c's):
 * each one a call of fs/xattr.c (xattr.h) under the volume lock, with
 * the caller's credentials; ENOSPC on a set retried as fuse_ops.c does.
 */
#include <errno.h>
#include <stdlib.h>
#include "fuse_internal.h"
#include "nextfs/xattr.h"

void nx_fuse_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		      const char *value, size_t size, int flags)
{
	struct nx_fuse *fs = req_fs(req);
	ext2_ino_t ino = to_ext2(nodeid);
	struct nx_cred cred;
	int tries = 0;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	do
		err = nx_setxattr(fs->vol, &cred, ino, name, value, size,
				  flags);
	while (nx_fuse_retry_enospc(fs, err, &tries));
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

/* getxattr and listxattr: size 0 asks for the length only. */
static void reply_sized(fuse_req_t req, errcode_t err, const char *buf,
			size_t size, size_t len)
{
	if (err)
		reply_err(req, err);
	else if (!size)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, buf, len);
}

void nx_fuse_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		      size_t size)
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_cred cred;
	char *buf = NULL;
	size_t len = 0;
	errcode_t err = 0;

	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = nx_getxattr(fs->vol, &cred, to_ext2(nodeid), name, buf, size,
			  &len);
	nx_volume_unlock(fs->vol);
	reply_sized(req, err, buf, size, len);
	free(buf);
}

void nx_fuse_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size)
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_cred cred;
	char *buf = NULL;
	size_t len = 0;
	errcode_t err;

	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = nx_listxattr(fs->vol, &cred, to_ext2(nodeid), buf, size, &len);
	nx_volume_unlock(fs->vol);
	reply_sized(req, err, buf, size, len);
	free(buf);
}

void nx_fuse_removexattr(fuse_req_t req, fuse_ino_t nodeid,
			 const char *name)
{
	struct nx_fuse *fs = req_fs(req);
	ext2_ino_t ino = to_ext2(nodeid);
	struct nx_cred cred;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = nx_removexattr(fs->vol, &cred, ino, name);
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}
