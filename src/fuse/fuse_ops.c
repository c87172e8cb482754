/*
 * fuse_ops.c - the libfuse low-level operations of nextfs.
 *
 * Each operation translates the request (node ids, credentials, flags)
 * into fs-layer calls made under the volume's big lock, and the result
 * into one FUSE reply sent after the lock is dropped.  (Reads of file
 * data do the device I/O after the lock too, spliced into the reply:
 * nx_op_read.)
 *
 * Division of labour with the kernel: the mount always carries
 * default_permissions (and POSIX ACLs where the kernel offers them), so
 * the kernel has already checked modes, ACLs, sticky bits, ownership for
 * setattr and cleared setuid/setgid where needed before a request
 * reaches us.  The fs layer checks again with the caller's credentials.
 * What the kernel cannot check is what it cannot see: FUSE inodes never
 * carry S_IMMUTABLE/S_APPEND.  The fs layer refuses namespace and xattr
 * changes on such inodes; the checks the VFS makes for data and
 * attributes (may_open, notify_change, write, vfs_fallocate) are made
 * here from i_flags.
 *
 * Lookup accounting: every reply that hands the kernel an entry (lookup,
 * create, mknod, mkdir, symlink, link, each readdirplus entry other than
 * "." and "..") counts one reference in the node table *before* the reply
 * is sent, so that a FORGET racing the reply always finds it; if the
 * reply cannot be delivered the reference is dropped again.
 */
#include "nextfs/fuse_ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <linux/fuse.h>
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/perm.h"
#include "nextfs/snapshot.h"
#include "nextfs/volume.h"
#include "nextfs/xattr.h"
#include "fuse_internal.h"

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE	0x01
#endif

#define NX_MAX_WRITE		(1U << 20)
/* pipe-max-size: a larger pipe needs CAP_SYS_RESOURCE (see NX_MAX_READ) */
#define NX_SPLICE_PIPE_MAX	(1U << 20)
#define NX_MAX_READAHEAD	(1U << 20)

/* fi->fh of a directory handle: "/" lists .snapshots (nx_op_opendir). */
#define NX_DIR_LISTS_SNAPDIR	1

/* What an operation is about to do, for the i_flags checks. */
#define NX_CHANGE_DATA		0x1	/* refused on immutable inodes */
#define NX_CHANGE_META		0x2	/* ... and on append-only ones */

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

static fuse_ino_t to_fuse(const struct nx_fuse *fs, ext2_ino_t ino)
{
	return fs->space | (ino == EXT2_ROOT_INO ? FUSE_ROOT_ID :
			    (fuse_ino_t)ino);
}

/*
 * Credentials for changes the kernel decided on its own authority: it
 * clears setuid/setgid on behalf of whoever writes or truncates, and
 * ftruncate() is allowed by the open file rather than by the caller's
 * current rights.
 */
static void kernel_cred(struct nx_cred *cred)
{
	memset(cred, 0, sizeof(*cred));
}

static errcode_t flags_forbid(uint32_t iflags, int what)
{
	if (iflags & EXT2_IMMUTABLE_FL)
		return EPERM;
	if ((what & NX_CHANGE_META) && (iflags & EXT2_APPEND_FL))
		return EPERM;
	return 0;
}

/*
 * An inode with no links that the kernel no longer references has been
 * (or is about to be) freed: handing it out again would resurrect it.
 */
static int inode_gone(struct nx_fuse *fs, ext2_ino_t ino,
		      const struct ext2_inode_large *inode)
{
	if (inode->i_mode == 0)
		return 1;
	if (inode->i_links_count)
		return 0;
	return inode->i_dtime || !nx_nodes_busy(fs->nodes, ino);
}

static errcode_t fill_entry(struct nx_fuse *fs, ext2_ino_t ino,
			    struct fuse_entry_param *e)
{
	struct ext2_inode_large inode;
	errcode_t err = nx_inode_read(fs->vol, ino, &inode);

	if (err)
		return err;
	if (inode_gone(fs, ino, &inode))
		return ESTALE;
	memset(e, 0, sizeof(*e));
	e->ino = to_fuse(fs, ino);
	if (e->ino != FUSE_ROOT_ID)
		e->generation = nx_fuse_generation(fs, inode.i_generation);
	nx_inode_to_stat(fs->vol, ino, &inode, &e->attr);
	nx_fuse_fix_stat(fs, ino, &e->attr);
	e->attr_timeout = fs->timeout;
	e->entry_timeout = fs->timeout;
	return 0;
}

/* Fill E for INO and count the reference the reply will hand out. */
static errcode_t entry_ref(struct nx_fuse *fs, ext2_ino_t ino,
			   struct fuse_entry_param *e)
{
	errcode_t err = fill_entry(fs, ino, e);

	return err ? err : nx_nodes_lookup(fs->nodes, ino);
}

static void log_release_error(ext2_ino_t ino, errcode_t err)
{
	if (err)
		fuse_log(FUSE_LOG_ERR, "cannot free inode %u: %s\n",
			 ino, strerror(nx_errno(err)));
}

/* Take back N references the kernel never received (or forgot). */
static void unref(struct nx_fuse *fs, ext2_ino_t ino, uint64_t n)
{
	nx_volume_lock(fs->vol);
	log_release_error(ino, nx_nodes_forget(fs->nodes, fs->vol, ino, n));
	nx_volume_unlock(fs->vol);
}

static void reply_entry(fuse_req_t req, struct nx_fuse *fs,
			const struct fuse_entry_param *e, errcode_t err)
{
	if (err) {
		reply_err(req, err);
		return;
	}
	if (fuse_reply_entry(req, e) != 0)
		unref(fs, to_ext2(e->ino), 1);
}

/* An unlink, rmdir or rename took the last name of VICTIM (maybe). */
static void victim_unlinked(struct nx_fuse *fs, ext2_ino_t victim)
{
	if (victim)
		log_release_error(victim, nx_nodes_unlinked(fs->nodes,
							    fs->vol, victim));
}

/*
 * unlink() returns to its caller as soon as we reply, and the kernel
 * queues the FORGET that lets us free the victim only then; another of
 * our threads may be waiting for the lock with it.  An allocation that
 * fails meanwhile would miss space ext4 would already have given back
 * (rm big; cp other . on a full volume), so on ENOSPC with such inodes
 * pending, let the forgets in and try again.  Called with the lock held.
 */
int nx_fuse_retry_enospc(struct nx_fuse *fs, errcode_t err, int *tries)
{
	if (nx_errno(err) != ENOSPC || *tries >= 3 ||
	    !nx_nodes_pending(fs->nodes))
		return 0;
	(*tries)++;
	nx_volume_unlock(fs->vol);
	usleep(1000U << *tries);
	nx_volume_lock(fs->vol);
	return 1;
}

/* ------------------------------------------------------------------ */
/* Session                                                             */

static void nx_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct nx_fuse *fs = userdata;
	unsigned acl = FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
	unsigned want = FUSE_CAP_EXPORT_SUPPORT | FUSE_CAP_ATOMIC_O_TRUNC |
			FUSE_CAP_IOCTL_DIR | FUSE_CAP_SPLICE_WRITE |
			FUSE_CAP_SPLICE_MOVE | FUSE_CAP_CACHE_SYMLINKS |
			FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS;

	conn->want |= conn->capable & want;
	/*
	 * ACLs: the kernel enforces them; we store them, inherit default
	 * ACLs on create (which is why the umask becomes ours: DONT_MASK)
	 * and keep them in line with chmod.  Both or neither.
	 */
	if ((conn->capable & acl) == acl)
		conn->want |= acl;
	else
		conn->want &= ~acl;
	/*
	 * Writeback caching would let the kernel decide sizes and times;
	 * KILLPRIV would make us responsible for clearing setuid bits on
	 * every write (the kernel does it with a setattr instead).
	 * SPLICE_READ needs a write_buf handler and gains us nothing.
	 * AUTO_INVAL_DATA drops a file's cached pages whenever its mtime
	 * moves, which our own write-through writes always do: every
	 * reopen after a write would start from an empty cache.  It guards
	 * against changes behind the kernel's back, and there are none:
	 * the daemon owns the volume, every change to live file data comes
	 * through this mount (the kernel keeps or drops the cached range at
	 * writes, truncates and hole punches itself), and snapshot views
	 * never change (their node ids carry the never-reused snapshot id).
	 */
	conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV |
			FUSE_CAP_SPLICE_READ | FUSE_CAP_AUTO_INVAL_DATA |
			FUSE_CAP_READDIRPLUS_AUTO);
	conn->max_write = NX_MAX_WRITE;
	conn->max_read = fs->max_read;	/* as fuse_main.c mounted it */
	if (conn->max_readahead > NX_MAX_READAHEAD)
		conn->max_readahead = NX_MAX_READAHEAD;
	/*
	 * The kernel keeps the smaller of the window fuse_main.c set through
	 * sysfs before INIT and this: keep that window (it offers 128 KiB).
	 */
	if (conn->max_readahead < fs->read_ahead_kb << 10)
		conn->max_readahead = fs->read_ahead_kb << 10;
	/* Nanoseconds only where inodes have the *_extra fields. */
	conn->time_gran = EXT2_INODE_SIZE(fs->vol->fs->super) >
			  EXT2_GOOD_OLD_INODE_SIZE ? 1 : 1000000000;
	fs->dont_mask = (conn->want & FUSE_CAP_DONT_MASK) != 0;
	fs->gen_salt = ext2fs_crc32c_le(~0U, fs->vol->fs->super->s_uuid,
					sizeof(fs->vol->fs->super->s_uuid));
}

/* Unmount: free what the kernel kept alive, then close (mark clean). */
static void nx_op_destroy(void *userdata)
{
	struct nx_fuse *fs = userdata;
	errcode_t err, cerr;

	if (!fs->vol)
		return;
	nx_fuse_send_shutdown();	/* sends still running stop */
	nx_fuse_recv_shutdown(fs);	/* a receive still running stops */
	nx_volume_lock(fs->vol);
	err = nx_nodes_release_all(fs->nodes, fs->vol);
	nx_volume_unlock(fs->vol);
	if (err)
		fuse_log(FUSE_LOG_ERR, "freeing unlinked inodes: %s\n",
			 strerror(nx_errno(err)));
	cerr = nx_volume_close(fs->vol);
	fs->vol = NULL;
	fs->close_err = cerr ? cerr : err;
}

/* ------------------------------------------------------------------ */
/* Names                                                               */

/*
 * LOOKUP(NODEID, ".") is how the kernel turns a file handle back into an
 * inode it no longer has (fuse_get_dentry); the generation it then
 * compares.  Handles come from outside (an NFS client can send any
 * bytes), so the node id is checked as ext4 checks the inode number of a
 * handle: the root or an ordinary inode of this volume, in its canonical
 * node id, never a reserved inode (journal, resize) nor what the mount
 * hides (snapshot files, the real /.snapshots, xattr value inodes).
 * An inode without links is ESTALE too, as in ext4: the kernel asks only
 * for inodes it no longer holds, so nothing can reach a deleted file
 * through its handle any more (whether its last FORGET has been served
 * yet or not).
 */
/*
 * A view's root holds the real /.snapshots as it was at the take: the
 * snapshot files of that time, which are no files of the snapshot's tree
 * (tar, rsync and a restore must never see them, and only the live
 * mount's .snapshots lists snapshots).  Its readdir leaves the name out
 * (fill_dir); lookup and handles must not reach it either.
 */
static int is_view_snapdir(struct nx_fuse *fs, ext2_ino_t ino)
{
	ext2_ino_t sd = 0;

	return fs->hides_snapdir &&
	       !nx_lookup(fs->vol, EXT2_ROOT_INO, NX_SNAPDIR_NAME, &sd) &&
	       sd == ino;
}

static errcode_t handle_target(struct nx_fuse *fs, fuse_ino_t nodeid)
{
	struct ext2_super_block *sb = fs->vol->fs->super;
	struct ext2_inode_large inode;
	ext2_ino_t ino = to_ext2(nodeid);
	errcode_t err;

	if (to_fuse(fs, ino) != nodeid)
		return ESTALE;
	if (ino != EXT2_ROOT_INO &&
	    (ino < EXT2_FIRST_INO(sb) || ino > sb->s_inodes_count))
		return ESTALE;
	if (!fs->space && ino == nx_snap_dir_ino(fs->vol))
		return ESTALE;
	if (fs->space && is_view_snapdir(fs, ino))
		return ESTALE;
	err = nx_inode_read(fs->vol, ino, &inode);
	if (err)
		return err;
	if (!inode.i_links_count ||
	    (inode.i_flags & (EXT4_SNAPFILE_FL | EXT4_EA_INODE_FL)))
		return ESTALE;
	return 0;
}

static void nx_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct nx_fuse *fs = req_fs(req);
	struct fuse_entry_param e;
	ext2_ino_t dir = to_ext2(parent), ino = 0;
	errcode_t err = 0;

	if (strlen(name) > NX_NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	nx_volume_lock(fs->vol);
	if (strcmp(name, ".") == 0) {	/* export support: node by id */
		ino = dir;
		err = handle_target(fs, parent);
	} else if (fs->space && nx_fuse_hidden(dir, name, strlen(name))) {
		err = ENOENT;	/* a view's own /.snapshots: is_view_snapdir */
	} else {
		err = nx_lookup(fs->vol, dir, name, &ino);
	}
	if (!err)
		err = entry_ref(fs, ino, &e);
	nx_volume_unlock(fs->vol);
	if (err && nx_errno(err) == ENOENT && strcmp(name, ".") != 0) {
		/* Cache the miss: only we add names, and we tell the kernel. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs->timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry(req, fs, &e, err);
}

static void nx_op_forget(fuse_req_t req, fuse_ino_t nodeid, uint64_t nlookup)
{
	unref(req_fs(req), to_ext2(nodeid), nlookup);
	fuse_reply_none(req);
}

static void nx_op_forget_multi(fuse_req_t req, size_t count,
			       struct fuse_forget_data *forgets)
{
	struct nx_fuse *fs = req_fs(req);
	size_t i;

	nx_volume_lock(fs->vol);
	for (i = 0; i < count; i++) {
		ext2_ino_t ino = to_ext2(forgets[i].ino);

		log_release_error(ino, nx_nodes_forget(fs->nodes, fs->vol, ino,
						       forgets[i].nlookup));
	}
	nx_volume_unlock(fs->vol);
	fuse_reply_none(req);
}

/* Take back a name whose creation could not be completed. */
static void undo_create(struct nx_fuse *fs, ext2_ino_t dir, const char *name,
			int isdir)
{
	struct nx_cred kcred;
	ext2_ino_t victim = 0;
	errcode_t err;

	kernel_cred(&kcred);
	err = isdir ? nx_rmdir(fs->vol, &kcred, dir, name, &victim) :
		      nx_unlink(fs->vol, &kcred, dir, name, &victim);
	if (!err && victim)
		err = nx_inode_release(fs->vol, victim);
	if (err)
		fuse_log(FUSE_LOG_ERR, "cannot remove half-created '%s': %s\n",
			 name, strerror(nx_errno(err)));
}

/*
 * Create NAME in DIR (a symlink to TARGET if given) and count the entry
 * handed back.  With POSIX ACLs the kernel leaves the umask to us (it
 * must not apply under a default ACL): the fs layer creates with the mode
 * as asked and nx_acl_inherit() applies the default ACL or the umask.
 * Otherwise the kernel already masked MODE (masking again is a no-op).
 */
static errcode_t new_entry(struct nx_fuse *fs, struct nx_cred *cred,
			   ext2_ino_t dir, const char *name, mode_t mode,
			   dev_t rdev, const char *target,
			   struct fuse_entry_param *e)
{
	struct ext2_inode_large inode;
	mode_t umask = cred->umask;
	ext2_ino_t ino = 0;
	int tries = 0;
	errcode_t err;


	if (fs->dont_mask)
		cred->umask = 0;
	do {
		if (target)
			err = nx_symlink(fs->vol, cred, dir, name, target,
					 &ino);
		else if (S_ISDIR(mode))
			err = nx_mkdir(fs->vol, cred, dir, name, mode, &ino);
		else
			err = nx_mknod(fs->vol, cred, dir, name, mode, rdev,
				       &ino);
	} while (nx_fuse_retry_enospc(fs, err, &tries));
	cred->umask = umask;
	if (err)
		return err;
	if (fs->dont_mask && !target) {
		err = nx_inode_read(fs->vol, ino, &inode);
		if (!err)
			err = nx_acl_inherit(fs->vol, dir, ino, &inode, umask);
		if (err) {
			undo_create(fs, dir, name, S_ISDIR(mode));
			return err;
		}
	}
	return entry_ref(fs, ino, e);
}

/* mknod, mkdir and symlink: new_entry() under the lock, and the reply. */
static void reply_new_entry(fuse_req_t req, fuse_ino_t parent,
			    const char *name, mode_t mode, dev_t rdev,
			    const char *target)
{
	struct nx_fuse *fs = req_fs(req);
	struct fuse_entry_param e;
	struct nx_cred cred;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = new_entry(fs, &cred, to_ext2(parent), name, mode, rdev, target,
			&e);
	nx_volume_unlock(fs->vol);
	reply_entry(req, fs, &e, err);
}

static void nx_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode, dev_t rdev)
{
	if (S_ISDIR(mode))
		fuse_reply_err(req, EINVAL);
	else
		reply_new_entry(req, parent, name, mode, rdev, NULL);
}

static void nx_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode)
{
	reply_new_entry(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void nx_op_symlink(fuse_req_t req, const char *target,
			  fuse_ino_t parent, const char *name)
{
	reply_new_entry(req, parent, name, S_IFLNK | 0777, 0, target);
}

static void nx_op_link(fuse_req_t req, fuse_ino_t nodeid, fuse_ino_t newparent,
		       const char *newname)
{
	struct nx_fuse *fs = req_fs(req);
	struct fuse_entry_param e;
	struct nx_cred cred;
	ext2_ino_t ino = to_ext2(nodeid);
	int tries = 0;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	do
		err = nx_link(fs->vol, &cred, ino, to_ext2(newparent),
			      newname);
	while (nx_fuse_retry_enospc(fs, err, &tries));
	if (!err)
		err = entry_ref(fs, ino, &e);
	nx_volume_unlock(fs->vol);
	reply_entry(req, fs, &e, err);
}

/* unlink and rmdir (dir.h): REMOVE under the lock, and the reply. */
static void reply_removal(fuse_req_t req, fuse_ino_t parent, const char *name,
			  errcode_t (*remove)(struct nx_volume *,
					      const struct nx_cred *,
					      ext2_ino_t, const char *,
					      ext2_ino_t *))
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_cred cred;
	ext2_ino_t victim = 0;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = remove(fs->vol, &cred, to_ext2(parent), name, &victim);
	if (!err)
		victim_unlinked(fs, victim);
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

static void nx_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_removal(req, parent, name, nx_unlink);
}

static void nx_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_removal(req, parent, name, nx_rmdir);
}

static void nx_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname,
			 unsigned int flags)
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_cred cred;
	ext2_ino_t olddir = to_ext2(parent), newdir = to_ext2(newparent);
	ext2_ino_t replaced = 0;
	int tries = 0;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	do
		err = nx_rename(fs->vol, &cred, olddir, name, newdir, newname,
				flags, &replaced);
	while (nx_fuse_retry_enospc(fs, err, &tries));
	if (!err)
		victim_unlinked(fs, replaced);
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

static void nx_op_readlink(fuse_req_t req, fuse_ino_t nodeid)
{
	struct nx_fuse *fs = req_fs(req);
	size_t size, len = 0;
	char *buf;
	errcode_t err;

	nx_volume_lock(fs->vol);
	size = fs->vol->fs->blocksize + 1;	/* longest ext4 symlink + NUL */
	buf = malloc(size);
	err = buf ? nx_readlink(fs->vol, to_ext2(nodeid), buf, size, &len) :
		    ENOMEM;
	nx_volume_unlock(fs->vol);
	if (!err && len >= size)
		err = EIO;		/* cannot be a valid ext4 symlink */
	if (!err) {
		buf[len] = 0;
		fuse_reply_readlink(req, buf);
	} else {
		reply_err(req, err);
	}
	free(buf);
}

/* ------------------------------------------------------------------ */
/* Attributes                                                          */

static void nx_op_getattr(fuse_req_t req, fuse_ino_t nodeid,
			  struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct stat st;
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_getattr(fs->vol, to_ext2(nodeid), &st);
	if (!err)
		nx_fuse_fix_stat(fs, to_ext2(nodeid), &st);
	nx_volume_unlock(fs->vol);
	if (err)
		reply_err(req, err);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

/* notify_change() refuses these on immutable and append-only inodes. */
static errcode_t setattr_flags_check(uint32_t iflags, int to_set)
{
	int explicit_times = ((to_set & FUSE_SET_ATTR_ATIME) &&
			      !(to_set & FUSE_SET_ATTR_ATIME_NOW)) ||
			     ((to_set & FUSE_SET_ATTR_MTIME) &&
			      !(to_set & FUSE_SET_ATTR_MTIME_NOW));

	if (iflags & EXT2_IMMUTABLE_FL)
		return EPERM;
	if ((iflags & EXT2_APPEND_FL) &&
	    ((to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
			FUSE_SET_ATTR_GID | FUSE_SET_ATTR_SIZE)) ||
	     explicit_times))
		return EPERM;
	return 0;
}

/* Does NEW only drop setuid/setgid from OLD (the kernel's killpriv)? */
static int drops_only_suid(mode_t old, mode_t new)
{
	mode_t dropped = old & ~new & 07777, added = new & ~old & 07777;

	return dropped && !added && !(dropped & ~(mode_t)(S_ISUID | S_ISGID));
}

/*
 * The VFS clamps stored times to the file system's range
 * (timestamp_truncate with ext4's s_time_min/max): 32-bit seconds, plus
 * two epoch bits where inodes have the *_extra fields.
 */
static struct timespec clamp_time(const struct nx_volume *vol,
				  struct timespec ts)
{
	int64_t min = INT32_MIN, max = INT32_MAX;

	if (EXT2_INODE_SIZE(vol->fs->super) > EXT2_GOOD_OLD_INODE_SIZE)
		max += (int64_t)3 << 32;
	if (ts.tv_sec < min)
		ts.tv_sec = min;
	if (ts.tv_sec > max)
		ts.tv_sec = max;
	if (ts.tv_sec == min || ts.tv_sec == max)
		ts.tv_nsec = 0;
	return ts;
}

static int fuse_to_nx_attr(const struct nx_volume *vol, int to_set,
			   const struct stat *attr, struct nx_attr *na)
{
	int valid = 0;

	memset(na, 0, sizeof(*na));
	if (to_set & FUSE_SET_ATTR_MODE) {
		valid |= NX_SET_MODE;
		na->mode = attr->st_mode;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		valid |= NX_SET_UID;
		na->uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		valid |= NX_SET_GID;
		na->gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
		valid |= NX_SET_ATIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_ATIME) {
		valid |= NX_SET_ATIME;
		na->atime = clamp_time(vol, attr->st_atim);
	}
	if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
		valid |= NX_SET_MTIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_MTIME) {
		valid |= NX_SET_MTIME;
		na->mtime = clamp_time(vol, attr->st_mtim);
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		valid |= NX_SET_CTIME;
		na->ctime = clamp_time(vol, attr->st_ctim);
	}
	return valid;
}

static errcode_t do_setattr(struct nx_fuse *fs, const struct nx_cred *cred,
			    ext2_ino_t ino, const struct stat *attr,
			    int to_set, int by_fh, struct stat *st)
{
	struct nx_volume *vol = fs->vol;
	struct ext2_inode_large inode;
	struct nx_cred kcred;
	struct nx_attr na;
	int valid, mode_set = 0;
	errcode_t err;

	err = nx_inode_read_rw(vol, ino, &inode);
	if (err)
		return err;
	err = setattr_flags_check(inode.i_flags, to_set);
	if (err)
		return err;
	kernel_cred(&kcred);
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (S_ISDIR(inode.i_mode))
			return EISDIR;
		if (!S_ISREG(inode.i_mode))
			return EINVAL;
		err = nx_file_truncate(vol, ino, (uint64_t)attr->st_size);
		if (err)
			return err;
	}
	/* A writer who is not the owner: the kernel's killpriv. */
	if ((to_set & FUSE_SET_ATTR_MODE) &&
	    drops_only_suid(inode.i_mode, attr->st_mode) &&
	    !nx_perm_is_owner(cred, (struct ext2_inode *)&inode)) {
		valid = fuse_to_nx_attr(vol, FUSE_SET_ATTR_MODE, attr, &na);
		err = nx_setattr(vol, &kcred, ino, &na, valid, NULL);
		if (err)
			return err;
		to_set &= ~FUSE_SET_ATTR_MODE;
		mode_set = 1;
	}
	valid = fuse_to_nx_attr(vol, to_set, attr, &na);
	if (valid & NX_SET_UID)		/* chown: the ids to record */
		na.uid = nx_idmap_uid(&fs->idmap, na.uid);
	if (valid & NX_SET_GID)
		na.gid = nx_idmap_gid(&fs->idmap, na.gid);
	if (valid) {
		err = nx_setattr(vol, by_fh ? &kcred : cred, ino, &na, valid,
				 NULL);
		if (err)
			return err;
	}
	err = nx_getattr(vol, ino, st);
	/* posix_acl_chmod(): the access ACL follows the new mode. */
	if (!err && (mode_set || (to_set & FUSE_SET_ATTR_MODE)))
		err = nx_acl_chmod(vol, ino, st->st_mode);
	if (!err)
		nx_fuse_fix_stat(fs, ino, st);
	return err;
}

static void nx_op_setattr(fuse_req_t req, fuse_ino_t nodeid,
			  struct stat *attr, int to_set,
			  struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_cred cred;
	struct stat st;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = do_setattr(fs, &cred, to_ext2(nodeid), attr, to_set, fi != NULL,
			 &st);
	nx_volume_unlock(fs->vol);
	if (err)
		reply_err(req, err);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

static void nx_op_access(fuse_req_t req, fuse_ino_t nodeid, int mask)
{
	struct nx_fuse *fs = req_fs(req);
	struct ext2_inode_large inode;
	struct nx_cred cred;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = nx_inode_read(fs->vol, to_ext2(nodeid), &inode);
	if (!err && mask != F_OK) {
		int special = S_ISCHR(inode.i_mode) || S_ISBLK(inode.i_mode) ||
			      S_ISFIFO(inode.i_mode) || S_ISSOCK(inode.i_mode);

		if ((mask & W_OK) && !special && nx_volume_rdonly(fs->vol))
			err = EROFS;
		else if ((mask & W_OK) && (inode.i_flags & EXT2_IMMUTABLE_FL))
			err = EPERM;
		else
			err = nx_perm_access(&cred, (struct ext2_inode *)&inode,
					     mask & (R_OK | W_OK | X_OK));
	}
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

static void nx_op_statfs(fuse_req_t req, fuse_ino_t nodeid)
{
	struct nx_fuse *fs = req_fs(req);
	struct statvfs st;
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_volume_statfs(fs->vol, &st);
	nx_volume_unlock(fs->vol);
	if (err)
		reply_err(req, err);
	else
		fuse_reply_statfs(req, &st);
}

/* ------------------------------------------------------------------ */
/* Files                                                               */

/* may_open() for the flags the kernel cannot see. */
static errcode_t open_flags_check(const struct ext2_inode_large *inode,
				  int flags)
{
	int writing = (flags & O_ACCMODE) != O_RDONLY;

	if (!writing && !(flags & O_TRUNC))
		return 0;
	if (inode->i_flags & EXT2_IMMUTABLE_FL)
		return EPERM;
	if ((inode->i_flags & EXT2_APPEND_FL) &&
	    ((writing && !(flags & O_APPEND)) || (flags & O_TRUNC)))
		return EPERM;
	return 0;
}

/*
 * open(O_TRUNC) with FUSE_CAP_ATOMIC_O_TRUNC: the kernel skips its own
 * truncate (and with it the setuid/setgid clearing), so do what
 * do_truncate(ATTR_MTIME|ATTR_CTIME|ATTR_OPEN) would have done.
 */
static errcode_t truncate_on_open(struct nx_volume *vol,
				  const struct nx_cred *cred, ext2_ino_t ino,
				  mode_t mode)
{
	struct nx_cred kcred;
	struct nx_attr na;
	int valid = NX_SET_MTIME_NOW;
	errcode_t err = nx_file_truncate(vol, ino, 0);

	if (err)
		return err;
	memset(&na, 0, sizeof(na));
	if (!nx_cred_is_root(cred) &&
	    ((mode & S_ISUID) ||
	     (mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))) {
		valid |= NX_SET_MODE;
		na.mode = mode & ~S_ISUID;
		if (mode & S_IXGRP)
			na.mode &= ~S_ISGID;
	}
	kernel_cred(&kcred);
	return nx_setattr(vol, &kcred, ino, &na, valid, NULL);
}

static errcode_t do_open(struct nx_fuse *fs, const struct nx_cred *cred,
			 ext2_ino_t ino, int flags)
{
	struct ext2_inode_large inode;
	int writing = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
	errcode_t err = nx_inode_read(fs->vol, ino, &inode);

	if (err)
		return err;
	if (S_ISDIR(inode.i_mode))
		return writing ? EISDIR : 0;
	if (!S_ISREG(inode.i_mode))
		return S_ISLNK(inode.i_mode) ? ELOOP : ENXIO;
	if (writing && nx_volume_rdonly(fs->vol))
		return EROFS;
	err = open_flags_check(&inode, flags);
	if (!err && (flags & O_TRUNC))
		err = truncate_on_open(fs->vol, cred, ino, inode.i_mode);
	if (!err)
		err = nx_nodes_open(fs->nodes, ino);
	return err;
}

/* Hand FI to the kernel; if it never arrives, the handle never opened. */
static void reply_open(fuse_req_t req, struct nx_fuse *fs, ext2_ino_t ino,
		       struct fuse_file_info *fi, errcode_t err)
{
	if (err) {
		reply_err(req, err);
		return;
	}
	if (fuse_reply_open(req, fi) != 0) {
		nx_volume_lock(fs->vol);
		log_release_error(ino, nx_nodes_close(fs->nodes, fs->vol,
						      ino));
		nx_volume_unlock(fs->vol);
	}
}

static void nx_op_open(fuse_req_t req, fuse_ino_t nodeid,
		       struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	ext2_ino_t ino = to_ext2(nodeid);
	struct nx_cred cred;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = do_open(fs, &cred, ino, fi->flags);
	nx_volume_unlock(fs->vol);
	fi->fh = 0;
	/* Data changes only through this mount, so cached pages stay valid. */
	fi->keep_cache = 1;
	/* close() has nothing for us to do (see nx_op_flush): no FLUSH. */
	fi->noflush = 1;
	reply_open(req, fs, ino, fi, err);
	/* The kernel expects new times and size, not the mode we may drop. */
	if (!err && (fi->flags & O_TRUNC))
		invalidate_attrs(fs, nodeid);
}

static void nx_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode, struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct fuse_entry_param e;
	struct nx_cred cred;
	ext2_ino_t ino = 0;
	errcode_t err;

	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	err = new_entry(fs, &cred, to_ext2(parent), name,
			S_IFREG | (mode & 07777), 0, NULL, &e);
	if (!err) {
		ino = to_ext2(e.ino);
		err = nx_nodes_open(fs->nodes, ino);
		if (err)
			nx_nodes_forget(fs->nodes, fs->vol, ino, 1);
	}
	nx_volume_unlock(fs->vol);
	if (err) {
		reply_err(req, err);
		return;
	}
	fi->fh = 0;
	fi->keep_cache = 1;
	fi->noflush = 1;
	if (fuse_reply_create(req, &e, fi) != 0) {
		nx_volume_lock(fs->vol);
		nx_nodes_close(fs->nodes, fs->vol, ino);
		nx_nodes_forget(fs->nodes, fs->vol, ino, 1);
		nx_volume_unlock(fs->vol);
	}
}

/*
 * Reply to a read whose device I/O was planned in RD (the share is
 * held): the bytes that are already in BUF (holes, inline data, blocks
 * a transaction holds) go out from memory, every planned device range
 * is spliced straight from the device (large aligned ranges from its
 * O_DIRECT descriptor) into /dev/fuse: the kernel copies it once, into
 * the FUSE page cache.  The share is held until the reply is written,
 * so no device write can change the data under the splice.  Returns -1
 * (nothing sent) where the device cannot be spliced from or the reply
 * has too many pieces for libfuse's pipe.
 */
static int reply_read_spliced(fuse_req_t req, char *buf, size_t got,
			      struct nx_file_rd *rd)
{
	struct fuse_bufvec *bv;
	size_t i, n = 0, pos = 0;
	uint64_t spliced = 0;

	if (nx_blkio_splice_fd(rd->io, 0, 0) < 0)
		return -1;
	bv = malloc(sizeof(*bv) + 2 * (rd->n + 1) * sizeof(bv->buf[0]));
	if (!bv)
		return -1;
	memset(bv, 0, sizeof(*bv));
	/* Segments come in buffer order (read_blocks and views walk up). */
	for (i = 0; i <= rd->n; i++) {
		size_t at = i < rd->n ? (size_t)(rd->seg[i].dst - buf) : got;

		if (at > pos) {
			memset(&bv->buf[n], 0, sizeof(bv->buf[n]));
			bv->buf[n].mem = buf + pos;
			bv->buf[n].size = at - pos;
			n++;
		}
		if (i == rd->n)
			break;
		memset(&bv->buf[n], 0, sizeof(bv->buf[n]));
		bv->buf[n].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK |
				   FUSE_BUF_FD_RETRY;
		bv->buf[n].fd = nx_blkio_splice_fd(rd->io, rd->seg[i].dev,
						   rd->seg[i].len);
		bv->buf[n].pos = (off_t)rd->seg[i].dev;
		bv->buf[n].size = rd->seg[i].len;
		spliced += rd->seg[i].len;
		pos = at + rd->seg[i].len;
		n++;
	}
	bv->count = n;
	/*
	 * libfuse wants a page of pipe per piece on top of the data, in a
	 * pipe of at most NX_SPLICE_PIPE_MAX, else it falls back to a copy
	 * through a freshly allocated buffer: slower than reading into ours.
	 */
	if ((size_t)getpagesize() * (n + 2) + sizeof(struct fuse_out_header) +
	    got > NX_SPLICE_PIPE_MAX) {
		free(bv);
		return -1;
	}
	nx_blkio_splice_note(rd->io, spliced);
	fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
	free(bv);
	return 0;
}

/*
 * The block map (for a snapshot view: through its chain) is resolved
 * under the lock, the data is read after it is released, so that reads
 * (the kernel's readahead, several readers) overlap with each other and
 * with metadata operations.  The reply splices the data from the device
 * where it can (reply_read_spliced), else reads it into BUF and sends
 * that.
 */
static void nx_op_read(fuse_req_t req, fuse_ino_t nodeid, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct nx_file_rd rd;
	char *buf = NULL;
	size_t got = 0;
	errcode_t err;

	if (posix_memalign((void **)&buf, NX_BLKIO_DIRECT_ALIGN,
			   size ? size : 1)) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	nx_volume_lock(fs->vol);
	err = nx_file_read_begin(fs->vol, to_ext2(nodeid), buf, size,
				 (uint64_t)off, &rd, &got);
	if (err) {
		nx_volume_unlock(fs->vol);
		reply_err(req, err);
		goto out;
	}
	nx_volume_unlock_sharing(fs->vol);
	nx_fuse_reply_planned(req, buf, got, &rd);
out:
	free(buf);
}

void nx_fuse_reply_planned(fuse_req_t req, char *buf, size_t got,
			   struct nx_file_rd *rd)
{
	errcode_t err;

	if (rd->n && reply_read_spliced(req, buf, got, rd) == 0) {
		nx_file_read_drop(rd);
		return;
	}
	err = nx_file_read_end(rd);
	if (err)
		reply_err(req, err);
	else
		fuse_reply_buf(req, buf, got);
}

static void nx_op_write(fuse_req_t req, fuse_ino_t nodeid, const char *buf,
			size_t size, off_t off, struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct ext2_inode_large inode;
	ext2_ino_t ino = to_ext2(nodeid);
	uint64_t pos = (uint64_t)off;
	size_t written = 0;
	int tries = 0;
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_volume_rdonly(fs->vol) ? EROFS :
	      nx_inode_read(fs->vol, ino, &inode);
	if (!err)
		err = flags_forbid(inode.i_flags, NX_CHANGE_DATA);
	if (!err) {
		/* Appends land at the size we know, whatever the kernel thought. */
		if ((fi->flags & O_APPEND) || (inode.i_flags & EXT2_APPEND_FL))
			pos = EXT2_I_SIZE(&inode);
		do
			err = nx_file_write(fs->vol, ino, buf, size, pos,
					    &written);
		while (!written && nx_fuse_retry_enospc(fs, err, &tries));
	}
	nx_volume_unlock(fs->vol);
	if (err && !written) {
		reply_err(req, err);
		return;
	}
	fuse_reply_write(req, written);
	/* Outside the lock, after the reply: the writer goes on meanwhile. */
	if (!fs->space && written >= NX_BLKIO_STREAM_MIN)
		nx_blkio_stream_settle(fs->vol->io);
}

static void nx_op_flush(fuse_req_t req, fuse_ino_t nodeid,
			struct fuse_file_info *fi)
{
	/*
	 * close() does not promise durability; fsync() does.  Writes are
	 * synchronous, so there is no deferred error to report either, and
	 * there are no POSIX locks of ours to drop: open and create ask the
	 * kernel not to send FLUSH at all (noflush, Linux 5.16+), saving a
	 * round trip per close.  Older kernels still come here.
	 */
	fuse_reply_err(req, 0);
}

static void nx_op_release(fuse_req_t req, fuse_ino_t nodeid,
			  struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	ext2_ino_t ino = to_ext2(nodeid);

	nx_volume_lock(fs->vol);
	log_release_error(ino, nx_nodes_close(fs->nodes, fs->vol, ino));
	nx_volume_unlock(fs->vol);
	fuse_reply_err(req, 0);
}

/*
 * Data goes to the device as it is written; what is still only in
 * memory is libext2fs's metadata (bitmaps, counters, descriptors).
 * Flushing that and the device makes the whole volume durable.
 */
static void nx_op_fsync(fuse_req_t req, fuse_ino_t nodeid, int datasync,
			struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_volume_sync(fs->vol);
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

static void nx_op_fallocate(fuse_req_t req, fuse_ino_t nodeid, int mode,
			    off_t offset, off_t length,
			    struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct ext2_inode_large inode;
	ext2_ino_t ino = to_ext2(nodeid);
	int tries = 0;
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_volume_rdonly(fs->vol) ? EROFS :
	      nx_inode_read(fs->vol, ino, &inode);
	if (!err)	/* vfs_fallocate: append-only may only grow */
		err = flags_forbid(inode.i_flags,
				   (mode & ~FALLOC_FL_KEEP_SIZE) ?
				   NX_CHANGE_META : NX_CHANGE_DATA);
	if (!err && !S_ISREG(inode.i_mode))
		err = S_ISDIR(inode.i_mode) ? EISDIR : ENODEV;
	if (!err)
		do
			err = nx_file_fallocate(fs->vol, ino, mode,
						(uint64_t)offset,
						(uint64_t)length);
		while (nx_fuse_retry_enospc(fs, err, &tries));
	nx_volume_unlock(fs->vol);
	reply_err(req, err);
}

static void nx_op_lseek(fuse_req_t req, fuse_ino_t nodeid, off_t off,
			int whence, struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	uint64_t result = 0;
	errcode_t err;

	/* The kernel handles SEEK_SET/CUR/END itself. */
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	nx_volume_lock(fs->vol);
	err = nx_file_seek(fs->vol, to_ext2(nodeid), (uint64_t)off, whence,
			   &result);
	nx_volume_unlock(fs->vol);
	if (err)
		reply_err(req, err);
	else
		fuse_reply_lseek(req, (off_t)result);
}

/* ------------------------------------------------------------------ */
/* Directories                                                         */

static void nx_op_opendir(fuse_req_t req, fuse_ino_t nodeid,
			  struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct ext2_inode_large inode;
	ext2_ino_t ino = to_ext2(nodeid);
	errcode_t err;

	nx_volume_lock(fs->vol);
	err = nx_inode_read(fs->vol, ino, &inode);
	if (!err && !S_ISDIR(inode.i_mode))
		err = ENOTDIR;
	if (!err)
		err = nx_nodes_open(fs->nodes, ino);
	nx_volume_unlock(fs->vol);
	/*
	 * Flags of exactly O_RDONLY come from the kernel's own open of a
	 * directory: open(2) adds O_LARGEFILE on 64-bit, opendir(3)
	 * O_DIRECTORY.  For "/" that is exportfs's get_name(), which
	 * reconnects a directory decoded from a file handle by finding its
	 * name in the parent's listing: there, and only there, "/" lists
	 * .snapshots (docs/nfs.md).
	 */
	fi->fh = !fs->space && ino == EXT2_ROOT_INO && fi->flags == O_RDONLY ?
		 NX_DIR_LISTS_SNAPDIR : 0;
	reply_open(req, fs, ino, fi, err);
}

struct dirbuf {
	fuse_req_t req;
	struct nx_fuse *fs;
	int plus;			/* readdirplus */
	int lists_snapdir;		/* show the hidden .snapshots */
	char *buf;
	size_t size, used;
	ext2_ino_t *refs;		/* inodes counted for this reply */
	size_t nrefs, maxrefs;
	ext2_ino_t dir;			/* the directory being listed */
};

static int is_dot_or_dotdot(const char *name)
{
	return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

/*
 * One readdirplus entry.  The kernel takes a reference for every entry
 * that carries a node id except "." and ".."; an entry whose inode we
 * cannot read, or that has no inode of its own (INO 0), goes out
 * without one (node id 0) and the kernel just lists the name.
 */
static size_t add_plus_entry(struct dirbuf *db, const char *name,
			     ext2_ino_t ino, const struct stat *st,
			     uint64_t next)
{
	struct fuse_entry_param e;
	size_t room = db->size - db->used;
	size_t need = fuse_add_direntry_plus(db->req, NULL, 0, name, NULL, 0);

	if (need > room)
		return need;
	if (!ino || is_dot_or_dotdot(name) || db->nrefs >= db->maxrefs ||
	    entry_ref(db->fs, ino, &e) != 0) {
		memset(&e, 0, sizeof(e));
		e.attr = *st;
	} else {
		db->refs[db->nrefs++] = ino;
	}
	return fuse_add_direntry_plus(db->req, db->buf + db->used, room, name,
				      &e, (off_t)next);
}

/*
 * The virtual .snapshots and .snapshot-images as entries of "/", at the
 * position of the real .snapshots: both or, when the buffer cannot take
 * both, neither (the kernel asks again from here), so that a listing
 * never shows one without the other.  Each with the inode number it
 * shows, and no node id.
 */
static int add_virtual_dirs(struct dirbuf *db, uint64_t next)
{
	static const struct {
		const char *name;
		uint64_t st_ino;
	} dirs[] = {
		{ NX_SNAPDIR_NAME, NX_SNAPDIR_STINO },
		{ NX_IMGDIR_NAME, NX_IMGDIR_STINO },
	};
	size_t i, need = 0, len;
	struct stat st;

	for (i = 0; i < 2; i++)
		need += db->plus ?
			fuse_add_direntry_plus(db->req, NULL, 0, dirs[i].name,
					       NULL, 0) :
			fuse_add_direntry(db->req, NULL, 0, dirs[i].name,
					  NULL, 0);
	if (need > db->size - db->used)
		return 1;
	for (i = 0; i < 2; i++) {
		memset(&st, 0, sizeof(st));
		st.st_ino = dirs[i].st_ino;
		st.st_mode = S_IFDIR;
		len = db->plus ?
		      add_plus_entry(db, dirs[i].name, 0, &st, next) :
		      fuse_add_direntry(db->req, db->buf + db->used,
					db->size - db->used, dirs[i].name,
					&st, (off_t)next);
		db->used += len;
	}
	return 0;
}

static int fill_dir(void *priv, const char *name, size_t namelen,
		    ext2_ino_t ino, unsigned char d_type, uint64_t next)
{
	struct dirbuf *db = priv;
	char nm[NX_NAME_MAX + 1];
	struct stat st;
	size_t room = db->size - db->used, len;

	if (namelen > NX_NAME_MAX)
		return 0;	/* cannot be a valid name: skip it */
	if (nx_fuse_hidden(db->dir, name, namelen)) {
		/*
		 * Hidden, but for the kernel's listing that reconnects a
		 * handle (nx_op_opendir): there the real .snapshots stands
		 * for the virtual directories.  Not a real .snapshot-images,
		 * which is no .snapshots (and has no inode of its own here).
		 */
		if (!db->lists_snapdir ||
		    namelen != strlen(NX_SNAPDIR_NAME) ||
		    memcmp(name, NX_SNAPDIR_NAME, namelen))
			return 0;
		return add_virtual_dirs(db, next);
	}
	memcpy(nm, name, namelen);
	nm[namelen] = 0;
	memset(&st, 0, sizeof(st));
	st.st_ino = nx_fuse_st_ino(db->fs, ino);
	/* A snapshot's "/" lives in .snapshots: its ".." is that. */
	if (db->fs->space && db->dir == EXT2_ROOT_INO && !strcmp(nm, ".."))
		st.st_ino = NX_SNAPDIR_STINO;
	st.st_mode = DTTOIF(d_type);
	if (db->plus)
		len = add_plus_entry(db, nm, ino, &st, next);
	else
		len = fuse_add_direntry(db->req, db->buf + db->used, room, nm,
					&st, (off_t)next);
	if (len > room)
		return 1;	/* full: the kernel asks again from here */
	db->used += len;
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size,
		       off_t off, int plus, const struct fuse_file_info *fi)
{
	struct nx_fuse *fs = req_fs(req);
	struct dirbuf db;
	errcode_t err;
	size_t i;

	memset(&db, 0, sizeof(db));
	db.req = req;
	db.fs = fs;
	db.plus = plus;
	db.lists_snapdir = fi && fi->fh == NX_DIR_LISTS_SNAPDIR;
	db.dir = to_ext2(nodeid);
	db.size = size;
	db.buf = malloc(size ? size : 1);
	if (plus) {
		db.maxrefs = size / fuse_add_direntry_plus(req, NULL, 0, "",
							   NULL, 0) + 1;
		db.refs = calloc(db.maxrefs, sizeof(*db.refs));
	}
	if (!db.buf || (plus && !db.refs)) {
		fuse_reply_err(req, ENOMEM);
		goto out;
	}
	nx_volume_lock(fs->vol);
	err = nx_readdir(fs->vol, to_ext2(nodeid), (uint64_t)off, fill_dir,
			 &db);
	nx_volume_unlock(fs->vol);
	/* Entries already gathered go out; the error comes next time. */
	if (err && !db.used) {
		reply_err(req, err);
		for (i = 0; i < db.nrefs; i++)
			unref(fs, db.refs[i], 1);
		goto out;
	}
	if (fuse_reply_buf(req, db.buf, db.used) != 0)
		for (i = 0; i < db.nrefs; i++)
			unref(fs, db.refs[i], 1);
out:
	free(db.refs);
	free(db.buf);
}

static void nx_op_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, nodeid, size, off, 0, fi);
}

static void nx_op_readdirplus(fuse_req_t req, fuse_ino_t nodeid, size_t size,
			      off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, nodeid, size, off, 1, fi);
}

static void nx_op_releasedir(fuse_req_t req, fuse_ino_t nodeid,
			     struct fuse_file_info *fi)
{
	nx_op_release(req, nodeid, fi);
}

static void nx_op_fsyncdir(fuse_req_t req, fuse_ino_t nodeid, int datasync,
			   struct fuse_file_info *fi)
{
	nx_op_fsync(req, nodeid, datasync, fi);
}

const struct fuse_lowlevel_ops nx_fuse_ops = {
	.init		= nx_op_init,
	.destroy	= nx_op_destroy,
	.lookup		= nx_op_lookup,
	.forget		= nx_op_forget,
	.forget_multi	= nx_op_forget_multi,
	.getattr	= nx_op_getattr,
	.setattr	= nx_op_setattr,
	.readlink	= nx_op_readlink,
	.mknod		= nx_op_mknod,
	.mkdir		= nx_op_mkdir,
	.unlink		= nx_op_unlink,
	.rmdir		= nx_op_rmdir,
	.symlink	= nx_op_symlink,
	.rename		= nx_op_rename,
	.link		= nx_op_link,
	.open		= nx_op_open,
	.read		= nx_op_read,
	.write		= nx_op_write,
	.flush		= nx_op_flush,
	.release	= nx_op_release,
	.fsync		= nx_op_fsync,
	.opendir	= nx_op_opendir,
	.readdir	= nx_op_readdir,
	.readdirplus	= nx_op_readdirplus,
	.releasedir	= nx_op_releasedir,
	.fsyncdir	= nx_op_fsyncdir,
	.statfs		= nx_op_statfs,
	.setxattr	= nx_fuse_setxattr,
	.getxattr	= nx_fuse_getxattr,
	.listxattr	= nx_fuse_listxattr,
	.removexattr	= nx_fuse_removexattr,
	.access		= nx_op_access,
	.create		= nx_op_create,
	.fallocate	= nx_op_fallocate,
	.lseek		= nx_op_lseek,
	.ioctl		= nx_fuse_ioctl,
};
