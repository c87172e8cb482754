/*
 * fuse_internal.h - helpers shared by the FUSE operations of the live
 * volume (fuse_ops.c) and their ioctls (fuse_ioctl.c).  Not a public
 * contract: include/nextfs/fuse_ops.h is.
 */
#ifndef NEXTFS_FUSE_INTERNAL_H
#define NEXTFS_FUSE_INTERNAL_H

#include <unistd.h>
#include "nextfs/fuse_ops.h"
#include "nextfs/perm.h"
#include "nextfs/volume.h"

/* The live volume, or the snapshot view snap_ops.c is serving now. */
static inline struct nx_fuse *req_fs(fuse_req_t req)
{
	return nx_fuse_current ? nx_fuse_current : fuse_req_userdata(req);
}

/* Node ids: snapshot id in the high 32 bits (0: live), inode below. */
static inline ext2_ino_t to_ext2(fuse_ino_t nodeid)
{
	ext2_ino_t ino = (ext2_ino_t)(nodeid & NX_NODE_INO_MASK);

	return ino == FUSE_ROOT_ID ? EXT2_ROOT_INO : ino;
}

static inline void reply_err(fuse_req_t req, errcode_t err)
{
	fuse_reply_err(req, nx_errno(err));
}

/*
 * Who is asking, in the volume's ids (-o fakeroot maps them: idmap.h).
 * Groups are read from /proc, so only when they matter.
 */
static inline void get_cred(fuse_req_t req, struct nx_cred *cred)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	const struct nx_fuse *live = fuse_req_userdata(req);
	int n;

	cred->uid = ctx->uid;
	cred->gid = ctx->gid;
	cred->umask = ctx->umask;
	cred->ngroups = 0;
	if (cred->uid == 0)
		return;		/* root passes every group check anyway */
	n = fuse_req_getgroups(req, NX_MAX_GROUPS, cred->groups);
	if (n > 0)
		cred->ngroups = n < NX_MAX_GROUPS ? n : NX_MAX_GROUPS;
	nx_idmap_cred(&live->idmap, cred);
}

/*
 * Who may ask the daemon for what reads past the permissions of single
 * files (the whole superblock, the delta of two trees, a send) or
 * rewrites any of them (a receive): root (after -o fakeroot's mapping)
 * and the user who mounted the volume, who opened its image and can
 * read and write every byte of it anyway (docs/security.md).
 */
static inline int nx_fuse_volume_owner_asks(fuse_req_t req)
{
	struct nx_cred cred;

	get_cred(req, &cred);
	return nx_cred_is_root(&cred) || fuse_req_ctx(req)->uid == getuid();
}

/*
 * We changed attributes of NODEID that the kernel does not know changed
 * (it caches them for fs->timeout): make it ask again.  Only after the
 * reply, without the lock: the kernel may need other requests answered.
 */
static inline void invalidate_attrs(struct nx_fuse *fs, fuse_ino_t nodeid)
{
	if (fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, nodeid, -1, 0);
}

/*
 * snap_ops.c: take or delete snapshot NAME of the live volume under its
 * lock, as mkdir/rmdir in .snapshots do; then (without the lock)
 * nx_fuse_snapdir_changed() tells the kernel that .snapshots changed and,
 * for a snapshot deleted by us rather than by an rmdir (GONE), that its
 * entry is gone.  The snapshot timer (timer.c) uses them.
 */
errcode_t nx_fuse_snap_take(struct nx_fuse *live, const char *name);
errcode_t nx_fuse_snap_delete(struct nx_fuse *live, const char *name);
void nx_fuse_snapdir_changed(struct nx_fuse *live, const char *gone);

/*
 * snap_ops.c: the attributes of .snapshots (owned like "/", the newest
 * take as mtime; no I/O beyond the root inode).
 */
void nx_fuse_snapdir_stat(struct nx_fuse *live, struct stat *st);

/*
 * snap_ops.c: a directory that lists one entry per snapshot, under its
 * name, oldest first (.snapshots, and the image directory of
 * image_ops.c): readdir(plus) of it, entries without attributes, cookies
 * 2 + id (a take or delete between two calls neither skips nor repeats
 * a name).  Each entry's st_ino is what its snapshot numbers inode INO:
 * nx_fuse_snap_st_ino().
 */
struct nx_snap_listing {
	uint64_t dot_ino;		/* st_ino of the directory itself */
	mode_t mode;			/* of every entry */
	ext2_ino_t ino;			/* each entry is this inode ... */
	int prefetch;			/* ... of a view: open them in a batch */
};
void nx_fuse_list_snapshots(fuse_req_t req, size_t size, off_t off, int plus,
			    const struct nx_snap_listing *how);
uint64_t nx_fuse_snap_st_ino(const struct nx_fuse *live, uint32_t id,
			     ext2_ino_t ino);

/*
 * fuse_ops.c: reply to a read planned in RD (file.h) after
 * nx_volume_unlock_sharing(): the planned device ranges spliced into the
 * reply where possible (zero copy), else read into BUF; GOT bytes.  Ends
 * the share either way.
 */
struct nx_file_rd;
void nx_fuse_reply_planned(fuse_req_t req, char *buf, size_t got,
			   struct nx_file_rd *rd);

/*
 * fuse_ioctl.c: FS_IOC_GETFLAGS/SETFLAGS and FSGETXATTR/FSSETXATTR
 * (chattr, lsattr), FS_IOC_GETVERSION, and NX_IOC_GET_MTIME (nxioctl.h).
 * Anything else is ENOTTY.
 */
/*
 * delta_ops.c: NX_IOC_DELTA_START and NX_IOC_SAME_DATA (live volume
 * locked), and NX_IOC_DELTA_READ (replies itself; no volume lock
 * needed).
 */
errcode_t nx_fuse_delta_start(fuse_req_t req, struct nx_fuse *live,
			      const void *in, size_t in_size, void *out,
			      size_t *out_size);
errcode_t nx_fuse_same_data(fuse_req_t req, struct nx_fuse *live,
			    const void *in, size_t in_size, void *out,
			    size_t *out_size);
void nx_fuse_delta_read(fuse_req_t req, const void *in, size_t in_size,
			size_t out_bufsz);
/* A handle of a session or a send that nobody can guess (never 0). */
uint64_t nx_fuse_new_handle(void);

/* defrag_ioctl.c: NX_IOC_DEFRAG (replies itself; locks in steps). */
void nx_fuse_defrag(fuse_req_t req, fuse_ino_t nodeid, const void *in,
		    size_t in_size, size_t out_size);

/*
 * fuse_ops.c: on ENOSPC with unlinked inodes still referenced, let their
 * FORGETs in and say to try again (at most a few times); lock held.
 */
int nx_fuse_retry_enospc(struct nx_fuse *fs, errcode_t err, int *tries);

/* xattr_ops.c: the extended attribute requests (fuse_lowlevel_ops). */
void nx_fuse_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		      const char *value, size_t size, int flags);
void nx_fuse_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		      size_t size);
void nx_fuse_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size);
void nx_fuse_removexattr(fuse_req_t req, fuse_ino_t nodeid,
			 const char *name);

void nx_fuse_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		   void *arg, struct fuse_file_info *fi, unsigned flags,
		   const void *in_buf, size_t in_bufsz, size_t out_bufsz);

/*
 * send_ops.c: NX_IOC_SEND_START and NX_IOC_SEND_STATUS (nxioctl.h), which
 * reply themselves and need no volume lock (the send's worker takes it
 * per piece).  nx_fuse_send_shutdown(): at unmount, before the volume
 * closes, stop every send still running and wait for its worker.
 */
void nx_fuse_send_start(fuse_req_t req, const void *in, size_t in_size,
			size_t out_bufsz);
void nx_fuse_send_status(fuse_req_t req, const void *in, size_t in_size,
			 size_t out_bufsz);
void nx_fuse_send_shutdown(void);

/*
 * snap_ops.c: the ext inode number of what tree ID (0: the live tree)
 * shows as ST_INO - the inverse of nx_fuse_st_ino() and
 * nx_fuse_snap_st_ino(); 0 if it cannot be one.
 */
ext2_ino_t nx_fuse_ext_ino(const struct nx_fuse *live, uint32_t id,
			   uint64_t st_ino);

/*
 * recv_ioctl.c: the NX_IOC_RECV_* ioctls ("nextfs receive" into the
 * mount).  nx_fuse_recv_ioctl() answers CMD and returns 1 if it is one
 * of them, else 0.  nx_fuse_recv_shutdown(): at unmount, stop a receive
 * still running (its cursor stays) and free it.
 */
int nx_fuse_recv_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		       const void *in, size_t in_size, size_t out_size);
void nx_fuse_recv_shutdown(struct nx_fuse *live);

#endif
