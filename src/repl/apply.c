/*
 * apply.c - one command of a send stream, applied to the live tree
 * through the fs layer (receive.h says what a receive guarantees).
 *
 * Paths are the stream's, relative to the root of the snapshot it
 * describes: "" is the root, components are separated by single '/',
 * and none may be empty, "." or "..", or longer than 255 bytes.  They
 * are resolved one component at a time from the root, never following a
 * symbolic link and never leaving the tree; ".snapshots" and
 * ".nextfs-receive" at the top are nextfs's and refused.  The btrfs
 * sender's temporary names ("o257-12-0": inode, generation, counter) are
 * ordinary names here: it creates and renames them like any other.
 *
 * Every command is checked against what the tree holds before it
 * changes anything (a write needs a regular file, a new name a free one,
 * rmdir an empty directory, ...), so a command fails whole; the fs layer
 * refuses what the kernel would (a rename into its own subtree: EINVAL).
 * An inode the parent snapshot has is never freed here: when it loses
 * its last name it waits in /.nextfs-receive (receive.h), named
 * "i<inode>", until the receive is complete or rolled back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/falloc.h>
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"
#include "repl_internal.h"

#define PATH_LINK_MAX	4095		/* a symlink's target, as Linux */
#define COPY_CHUNK	(256 * 1024)	/* clone copies in pieces this big */

/* Where a path leads: the last name and the directory holding it. */
struct target {
	const char *path;		/* as the stream spells it (for messages) */
	ext2_ino_t dir;			/* 0 for the root itself */
	char name[NX_NAME_MAX + 1];
	ext2_ino_t ino;			/* 0 if the name does not exist */
	struct ext2_inode_large inode;	/* of INO */
	char *buf;			/* owned: the path, NUL terminated */
};

static void target_free(struct target *t)
{
	free(t->buf);
	t->buf = NULL;
}

/* "command N (name) at offset O: " + FMT, as the decoder says it. */
static errcode_t bad(struct nx_recv *r, const struct nx_ss_cmd *cmd,
		     enum nx_fault fault, errcode_t err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static errcode_t bad(struct nx_recv *r, const struct nx_ss_cmd *cmd,
		     enum nx_fault fault, errcode_t err, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return nx_repl_fail(r, fault, err, "command %" PRIu64 " (%s) at offset "
			    "%" PRIu64 ": %s", cmd->index,
			    nx_ss_cmd_name(cmd->type), cmd->offset, what);
}

/* A failure of the fs layer: out of space is resumable, the rest is not. */
static errcode_t fs_failed(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			   errcode_t err, const char *path)
{
	int e = nx_errno(err);

	if (e == ENOSPC || e == EDQUOT)
		return bad(r, cmd, NX_FAULT_SPACE, err, "'%s': %s", path,
			   strerror(e));
	/* What the kernel refuses for a caller, the stream asked for. */
	if (e == EINVAL || e == ENOENT || e == EEXIST || e == ENOTDIR ||
	    e == EISDIR || e == ENOTEMPTY || e == EPERM || e == EACCES ||
	    e == ENAMETOOLONG || e == EMLINK || e == EFBIG || e == ENODATA ||
	    e == EOPNOTSUPP || e == ERANGE || e == E2BIG || e == EBUSY ||
	    e == EXDEV)
		return bad(r, cmd, NX_FAULT_STREAM, err, "'%s': %s", path,
			   strerror(e));
	return bad(r, cmd, NX_FAULT_VOLUME, err, "'%s': %s", path,
		   error_message(err));
}

static int reserved(ext2_ino_t dir, const char *name)
{
	return dir == EXT2_ROOT_INO && (!strcmp(name, NX_SNAPDIR_NAME) ||
					!strcmp(name, NX_RECV_PARK_NAME));
}

static int is_dir(const struct ext2_inode_large *inode)
{
	return LINUX_S_ISDIR(inode->i_mode);
}

/*
 * Resolve string attribute ATTR of CMD in VOL (the live tree, or the
 * parent's view for a clone source) into T.
 */
static errcode_t resolve(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			 int attr, struct nx_volume *vol, struct target *t)
{
	uint32_t len = cmd->attr[attr].len;
	ext2_ino_t cur = EXT2_ROOT_INO;
	char *p, *slash;
	errcode_t err;

	memset(t, 0, sizeof(*t));
	t->buf = malloc((size_t)len + 1);
	if (!t->buf)
		return nx_repl_fail(r, NX_FAULT_VOLUME, ENOMEM, "out of memory");
	memcpy(t->buf, cmd->attr[attr].data, len);
	t->buf[len] = 0;
	t->path = t->buf;
	if (len == 0) {			/* the root itself */
		t->ino = EXT2_ROOT_INO;
		err = nx_inode_read(vol, t->ino, &t->inode);
		return err ? fs_failed(r, cmd, err, t->path) : 0;
	}
	if (t->buf[0] == '/')
		return bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': an absolute "
			   "path", t->path);
	/* Check every component before looking anything up. */
	for (p = t->buf; p; p = slash ? slash + 1 : NULL) {
		size_t n;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': a "
				   "path with an empty, '.' or '..' component",
				   t->path);
		if (n > NX_NAME_MAX)
			return bad(r, cmd, NX_FAULT_STREAM, ENAMETOOLONG,
				   "'%s': a name longer than %d bytes", t->path,
				   NX_NAME_MAX);
	}
	for (p = t->buf;; p = slash + 1) {
		slash = strchr(p, '/');
		if (slash)
			*slash = 0;
		if (reserved(cur, p)) {
			if (slash)
				*slash = '/';
			return bad(r, cmd, NX_FAULT_STREAM, EPERM, "'%s': '%s' "
				   "at the top of the tree is nextfs's",
				   t->path, p);
		}
		if (!slash)
			break;
		err = nx_lookup(vol, cur, p, &cur);
		if (!err)
			err = nx_inode_read(vol, cur, &t->inode);
		*slash = '/';
		if (!err && !is_dir(&t->inode))
			err = ENOTDIR;
		if (err == ENOENT || err == ENOTDIR) {
			*slash = 0;
			bad(r, cmd, NX_FAULT_STREAM, err, "'%s': '%s' is %s",
			    t->path, t->buf, err == ENOENT ?
			    "not there" : "not a directory");
			*slash = '/';
			return err;
		}
		if (err)
			return fs_failed(r, cmd, err, t->path);
	}
	t->dir = cur;
	strcpy(t->name, p);
	err = nx_lookup(vol, cur, p, &t->ino);
	if (err == ENOENT) {
		t->ino = 0;
		return 0;
	}
	if (!err)
		err = nx_inode_read(vol, t->ino, &t->inode);
	return err ? fs_failed(r, cmd, err, t->path) : 0;
}

static errcode_t need_absent(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			     const struct target *t)
{
	if (!t->dir)
		return bad(r, cmd, NX_FAULT_STREAM, EEXIST, "the root cannot "
			   "be created, linked or renamed over");
	if (t->ino)
		return bad(r, cmd, NX_FAULT_STREAM, EEXIST, "'%s' exists "
			   "already", t->path);
	return 0;
}

static errcode_t need_present(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			      const struct target *t)
{
	if (!t->ino)
		return bad(r, cmd, NX_FAULT_STREAM, ENOENT, "'%s' is not there",
			   t->path);
	return 0;
}

static errcode_t need_regular(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			      const struct target *t)
{
	errcode_t err = need_present(r, cmd, t);

	if (!err && !LINUX_S_ISREG(t->inode.i_mode))
		err = bad(r, cmd, NX_FAULT_STREAM, EISDIR, "'%s' is not a "
			  "regular file", t->path);
	return err;
}

/* ------------------------------------------------------------------ */
/* Inodes the parent has never die here: they wait.                    */

errcode_t nx_repl_park_dir(struct nx_recv *r, int create, ext2_ino_t *dir)
{
	errcode_t err;

	if (r->park) {
		*dir = r->park;
		return 0;
	}
	err = nx_lookup(r->vol, EXT2_ROOT_INO, NX_RECV_PARK_NAME, dir);
	if (err == ENOENT && create)
		err = nx_mkdir(r->vol, &r->cred, EXT2_ROOT_INO,
			       NX_RECV_PARK_NAME, 0700, dir);
	if (err == ENOENT) {
		*dir = 0;
		return 0;
	}
	if (!err)
		r->park = *dir;
	return err;
}

/* Does the parent snapshot have INO (the same file: generation, type)? */
int nx_repl_parent_has(struct nx_recv *r, ext2_ino_t ino,
		      const struct ext2_inode_large *live)
{
	struct ext2_inode_large p;

	if (!r->pview || nx_inode_read(r->pview, ino, &p))
		return 0;
	return p.i_links_count && p.i_generation == live->i_generation &&
	       (p.i_mode & LINUX_S_IFMT) == (live->i_mode & LINUX_S_IFMT);
}

void nx_repl_park_name(ext2_ino_t ino, char name[32])
{
	snprintf(name, 32, "i%u", ino);
}

void nx_repl_changed(struct nx_recv *r, ext2_ino_t dir, const char *name)
{
	if (r->env.changed)
		r->env.changed(r->env.priv, dir, name);
}

/*
 * NAME in DIR (inode INO) is about to lose that name.  If it is the
 * parent's and this is its last name (a directory has one), move it into
 * the parking directory instead: *PARKED says so.
 */
errcode_t nx_repl_maybe_park(struct nx_recv *r, ext2_ino_t dir,
			    const char *name, ext2_ino_t ino,
			    const struct ext2_inode_large *inode, int *parked)
{
	char pname[32];
	ext2_ino_t park;
	errcode_t err;

	*parked = 0;
	if ((!is_dir(inode) && inode->i_links_count > 1) ||
	    !nx_repl_parent_has(r, ino, inode))
		return 0;
	err = nx_repl_park_dir(r, 1, &park);
	if (err)
		return err;
	nx_repl_park_name(ino, pname);
	err = nx_rename(r->vol, &r->cred, dir, name, park, pname,
			RENAME_NOREPLACE, NULL);
	if (!err) {
		*parked = 1;
		nx_repl_changed(r, dir, name);
	}
	return err;
}

errcode_t nx_repl_unlink(struct nx_recv *r, ext2_ino_t dir, const char *name,
			 int isdir)
{
	ext2_ino_t victim = 0;
	errcode_t err;

	err = isdir ? nx_rmdir(r->vol, &r->cred, dir, name, &victim) :
		      nx_unlink(r->vol, &r->cred, dir, name, &victim);
	if (err)
		return err;
	nx_repl_changed(r, dir, name);
	return victim ? r->env.release(r->env.priv, victim) : 0;
}

/* ------------------------------------------------------------------ */
/* The commands.                                                       */

static errcode_t do_create(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct target t;
	mode_t mode;
	dev_t rdev = 0;
	char link[PATH_LINK_MAX + 1];
	ext2_ino_t ino;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_absent(r, cmd, &t);
	if (err)
		goto out;
	switch (cmd->type) {
	case NX_SS_C_MKFILE:
		err = nx_mknod(r->vol, &r->cred, t.dir, t.name, S_IFREG | 0600,
			       0, &ino);
		break;
	case NX_SS_C_MKDIR:
		err = nx_mkdir(r->vol, &r->cred, t.dir, t.name, 0700, &ino);
		break;
	case NX_SS_C_MKFIFO:
		err = nx_mknod(r->vol, &r->cred, t.dir, t.name, S_IFIFO | 0600,
			       0, &ino);
		break;
	case NX_SS_C_MKSOCK:
		err = nx_mknod(r->vol, &r->cred, t.dir, t.name,
			       S_IFSOCK | 0600, 0, &ino);
		break;
	case NX_SS_C_MKNOD:
		mode = (mode_t)nx_ss_u64(cmd, NX_SS_A_MODE);
		rdev = (dev_t)nx_ss_u64(cmd, NX_SS_A_RDEV);
		if (nx_ss_u64(cmd, NX_SS_A_MODE) > 0177777 ||
		    (!S_ISCHR(mode) && !S_ISBLK(mode) && !S_ISFIFO(mode) &&
		     !S_ISSOCK(mode))) {
			err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': mode "
				  "0%" PRIo64 " is no device, fifo or socket",
				  t.path, nx_ss_u64(cmd, NX_SS_A_MODE));
			goto out;
		}
		err = nx_mknod(r->vol, &r->cred, t.dir, t.name, mode, rdev,
			       &ino);
		break;
	default:			/* NX_SS_C_SYMLINK */
		if (cmd->attr[NX_SS_A_PATH_LINK].len == 0 ||
		    cmd->attr[NX_SS_A_PATH_LINK].len > PATH_LINK_MAX) {
			err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': a "
				  "symbolic link's target must have 1 to %d "
				  "bytes", t.path, PATH_LINK_MAX);
			goto out;
		}
		nx_ss_str(cmd, NX_SS_A_PATH_LINK, link, sizeof(link));
		err = nx_symlink(r->vol, &r->cred, t.dir, t.name, link, &ino);
		break;
	}
	if (err)
		err = fs_failed(r, cmd, err, t.path);
	else
		nx_repl_changed(r, t.dir, t.name);
out:
	target_free(&t);
	return err;
}

static errcode_t do_rename(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct target from = { 0 }, to = { 0 };
	int parked;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &from);
	if (!err)
		err = resolve(r, cmd, NX_SS_A_PATH_TO, r->vol, &to);
	if (!err)
		err = need_present(r, cmd, &from);
	if (!err && (!from.dir || !to.dir))
		err = bad(r, cmd, NX_FAULT_STREAM, EBUSY, "the root cannot be "
			  "renamed or renamed over");
	if (err)
		goto out;
	if (to.ino && to.ino != from.ino) {
		int empty = 1;

		/* What it replaces must be what rename would replace... */
		if (is_dir(&from.inode) != is_dir(&to.inode)) {
			err = bad(r, cmd, NX_FAULT_STREAM, EISDIR, "'%s' -> "
				  "'%s': a directory and a non-directory",
				  from.path, to.path);
			goto out;
		}
		if (is_dir(&to.inode))
			err = nx_dir_is_empty(r->vol, to.ino, &empty);
		if (!err && !empty)
			err = bad(r, cmd, NX_FAULT_STREAM, ENOTEMPTY, "'%s' is "
				  "not empty", to.path);
		else if (err)
			err = fs_failed(r, cmd, err, to.path);
		if (err)
			goto out;
		/* ... and if it is the parent's, it waits. */
		err = nx_repl_maybe_park(r, to.dir, to.name, to.ino, &to.inode,
				 &parked);
		if (err) {
			err = fs_failed(r, cmd, err, to.path);
			goto out;
		}
	}
	err = nx_rename(r->vol, &r->cred, from.dir, from.name, to.dir,
			to.name, 0, &to.ino);
	if (err) {
		err = fs_failed(r, cmd, err, from.path);
		goto out;
	}
	nx_repl_changed(r, from.dir, from.name);
	nx_repl_changed(r, to.dir, to.name);
	if (to.ino && to.ino != from.ino)
		err = r->env.release(r->env.priv, to.ino);
out:
	target_free(&from);
	target_free(&to);
	return err;
}

static errcode_t do_link(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct target name = { 0 }, old = { 0 };
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &name);
	if (!err)
		err = resolve(r, cmd, NX_SS_A_PATH_LINK, r->vol, &old);
	if (!err)
		err = need_absent(r, cmd, &name);
	if (!err)
		err = need_present(r, cmd, &old);
	if (!err && is_dir(&old.inode))
		err = bad(r, cmd, NX_FAULT_STREAM, EPERM, "'%s': a hard link "
			  "to a directory", old.path);
	if (!err) {
		err = nx_link(r->vol, &r->cred, old.ino, name.dir, name.name);
		if (err)
			err = fs_failed(r, cmd, err, name.path);
		else
			nx_repl_changed(r, name.dir, name.name);
	}
	target_free(&name);
	target_free(&old);
	return err;
}

static errcode_t do_remove(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	int rmdir = cmd->type == NX_SS_C_RMDIR, parked, empty;
	struct target t;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_present(r, cmd, &t);
	if (!err && !t.dir)
		err = bad(r, cmd, NX_FAULT_STREAM, EBUSY, "the root cannot be "
			  "removed");
	if (!err && rmdir != is_dir(&t.inode))
		err = bad(r, cmd, NX_FAULT_STREAM, rmdir ? ENOTDIR : EISDIR,
			  "'%s' is %sa directory", t.path, rmdir ? "not " : "");
	if (!err && rmdir) {
		err = nx_dir_is_empty(r->vol, t.ino, &empty);
		if (!err && !empty)
			err = bad(r, cmd, NX_FAULT_STREAM, ENOTEMPTY, "'%s' is "
				  "not empty", t.path);
		else if (err)
			err = fs_failed(r, cmd, err, t.path);
	}
	if (err)
		goto out;
	err = nx_repl_maybe_park(r, t.dir, t.name, t.ino, &t.inode, &parked);
	if (!err && !parked)
		err = nx_repl_unlink(r, t.dir, t.name, rmdir);
	if (err)
		err = fs_failed(r, cmd, err, t.path);
out:
	target_free(&t);
	return err;
}

/* btrfs's own properties (btrfs.compression): nothing ext4 can hold. */
static int btrfs_property(const char *name)
{
	return !strncmp(name, "btrfs.", 6);
}

static errcode_t do_xattr(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	char name[NX_NAME_MAX + 1];
	struct target t;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_present(r, cmd, &t);
	if (err)
		goto out;
	if (nx_ss_str(cmd, NX_SS_A_XATTR_NAME, name, sizeof(name))) {
		err = bad(r, cmd, NX_FAULT_STREAM, ERANGE, "'%s': an attribute "
			  "name longer than %d bytes", t.path, NX_NAME_MAX);
		goto out;
	}
	/*
	 * btrfs's properties have no place here; nextfs's own records of
	 * the sending volume (a sender reading the image raw may pass them
	 * on) are that volume's bookkeeping, never this one's: a stream
	 * cannot set them (and the fs layer would refuse them).
	 */
	if (btrfs_property(name)) {
		r->st.ignored_xattrs++;
		goto out;
	}
	if (!strncmp(name, NX_XATTR_PRIVATE, strlen(NX_XATTR_PRIVATE)))
		goto out;
	if (cmd->type == NX_SS_C_SET_XATTR)
		err = nx_setxattr(r->vol, &r->cred, t.ino, name,
				  cmd->attr[NX_SS_A_XATTR_DATA].data,
				  cmd->attr[NX_SS_A_XATTR_DATA].len, 0);
	else
		err = nx_removexattr(r->vol, &r->cred, t.ino, name);
	if (err) {
		char what[2 * NX_NAME_MAX + 8];

		snprintf(what, sizeof(what), "%s' attribute '%s", t.path, name);
		err = fs_failed(r, cmd, err, what);
	} else {
		nx_repl_changed(r, t.ino, NULL);
	}
out:
	target_free(&t);
	return err;
}

/* Is [OFF, OFF + LEN) of a file of INODE beyond what it may hold? */
static int too_far(struct nx_recv *r, const struct ext2_inode_large *inode,
		   uint64_t off, uint64_t len)
{
	uint64_t max = nx_file_max_bytes(r->vol->fs, inode);

	return off > max || len > max - off;
}

static errcode_t do_write(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	uint64_t off = nx_ss_u64(cmd, NX_SS_A_FILE_OFFSET);
	uint32_t len = cmd->attr[NX_SS_A_DATA].len;
	struct target t;
	size_t done = 0;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_regular(r, cmd, &t);
	if (!err && too_far(r, &t.inode, off, len))
		err = bad(r, cmd, NX_FAULT_STREAM, EFBIG, "'%s': %" PRIu32
			  " bytes at offset %" PRIu64 " are beyond the largest "
			  "file this volume can hold", t.path, len, off);
	if (!err && len) {
		err = nx_file_write(r->vol, t.ino, cmd->attr[NX_SS_A_DATA].data,
				    len, off, &done);
		if (!err && done < len)
			err = ENOSPC;
		if (err)
			err = fs_failed(r, cmd, err, t.path);
		else
			nx_repl_changed(r, t.ino, NULL);
		r->st.data_bytes += done;
	}
	target_free(&t);
	return err;
}

static int all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

/*
 * Copy LEN bytes at SOFF of SRC (in SVOL) to DOFF of DST: no extents are
 * shared on ext4, so a clone is a copy.  Zero runs stay (or become)
 * holes, so that a sparse source stays sparse.
 */
static errcode_t copy_range(struct nx_recv *r, struct nx_volume *svol,
			    ext2_ino_t src, uint64_t soff, ext2_ino_t dst,
			    uint64_t doff, uint64_t len, uint64_t dsize)
{
	char *buf = malloc(COPY_CHUNK);
	uint64_t done = 0;
	errcode_t err = buf ? 0 : ENOMEM;

	while (!err && done < len) {
		size_t want = len - done < COPY_CHUNK ? (size_t)(len - done) :
			      COPY_CHUNK, got = 0, put = 0;

		err = nx_file_read(svol, src, buf, want, soff + done, &got);
		if (!err && got < want)
			memset(buf + got, 0, want - got);
		if (err)
			break;
		if (all_zero(buf, want) && doff + done < dsize)
			err = nx_file_fallocate(r->vol, dst, FALLOC_FL_PUNCH_HOLE |
						FALLOC_FL_KEEP_SIZE,
						doff + done, want);
		else if (!all_zero(buf, want))
			err = nx_file_write(r->vol, dst, buf, want,
					    doff + done, &put);
		if (!err && !all_zero(buf, want) && put < want)
			err = ENOSPC;
		if (!err)
			r->st.data_bytes += want;
		done += want;
	}
	if (!err && doff + len > dsize)
		err = nx_file_truncate(r->vol, dst, doff + len);
	free(buf);
	return err;
}

static errcode_t do_clone(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	uint64_t doff = nx_ss_u64(cmd, NX_SS_A_FILE_OFFSET);
	uint64_t soff = nx_ss_u64(cmd, NX_SS_A_CLONE_OFFSET);
	uint64_t len = nx_ss_u64(cmd, NX_SS_A_CLONE_LEN), ssize;
	const unsigned char *from = nx_ss_uuid(cmd, NX_SS_A_CLONE_UUID);
	struct nx_volume *svol;
	struct target t = { 0 }, s = { 0 };
	errcode_t err;

	if (!memcmp(from, r->cur.uuid, NX_SS_UUID_LEN))
		svol = r->vol;			/* within what is received */
	else if ((r->cur.flags & NX_CUR_INCREMENTAL) &&
		 !memcmp(from, r->cur.parent_uuid, NX_SS_UUID_LEN))
		svol = r->pview;		/* from the parent */
	else
		return bad(r, cmd, NX_FAULT_STREAM, EXDEV, "a clone from a "
			   "snapshot other than the stream's and its parent");
	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_regular(r, cmd, &t);
	if (!err)
		err = resolve(r, cmd, NX_SS_A_CLONE_PATH, svol, &s);
	if (!err)
		err = need_regular(r, cmd, &s);
	if (err)
		goto out;
	ssize = EXT2_I_SIZE(&s.inode);
	if (soff > ssize || len > ssize - soff)
		err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': %" PRIu64
			  " bytes at %" PRIu64 " are beyond its end", s.path,
			  len, soff);
	else if (too_far(r, &t.inode, doff, len))
		err = bad(r, cmd, NX_FAULT_STREAM, EFBIG, "'%s': beyond the "
			  "largest file this volume can hold", t.path);
	else if (svol == r->vol && s.ino == t.ino && soff < doff + len &&
		 doff < soff + len)
		err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': a clone onto "
			  "an overlapping range of itself", t.path);
	if (!err) {
		err = copy_range(r, svol, s.ino, soff, t.ino, doff, len,
				 EXT2_I_SIZE(&t.inode));
		if (err)
			err = fs_failed(r, cmd, err, t.path);
		else
			nx_repl_changed(r, t.ino, NULL);
	}
out:
	target_free(&t);
	target_free(&s);
	return err;
}

static errcode_t do_truncate(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	uint64_t size = nx_ss_u64(cmd, NX_SS_A_SIZE);
	struct target t;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_regular(r, cmd, &t);
	if (!err && too_far(r, &t.inode, size, 0))
		err = bad(r, cmd, NX_FAULT_STREAM, EFBIG, "'%s': size %" PRIu64
			  " is beyond the largest file this volume can hold",
			  t.path, size);
	if (!err) {
		err = nx_file_truncate(r->vol, t.ino, size);
		if (err)
			err = fs_failed(r, cmd, err, t.path);
		else
			nx_repl_changed(r, t.ino, NULL);
	}
	target_free(&t);
	return err;
}

static errcode_t do_fallocate(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	uint32_t mode = nx_ss_u32(cmd, NX_SS_A_FALLOCATE_MODE);
	uint64_t off = nx_ss_u64(cmd, NX_SS_A_FILE_OFFSET);
	uint64_t len = nx_ss_u64(cmd, NX_SS_A_SIZE);
	struct target t;
	errcode_t err;

	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_regular(r, cmd, &t);
	if (!err && mode != 0 && mode != FALLOC_FL_KEEP_SIZE &&
	    mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) &&
	    mode != FALLOC_FL_ZERO_RANGE &&
	    mode != (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE))
		err = bad(r, cmd, NX_FAULT_STREAM, EOPNOTSUPP, "'%s': fallocate "
			  "mode 0x%" PRIx32 " is not supported", t.path, mode);
	if (!err && too_far(r, &t.inode, off, len))
		err = bad(r, cmd, NX_FAULT_STREAM, EFBIG, "'%s': beyond the "
			  "largest file this volume can hold", t.path);
	if (!err && len) {
		err = nx_file_fallocate(r->vol, t.ino, (int)mode, off, len);
		if (err)
			err = fs_failed(r, cmd, err, t.path);
		else
			nx_repl_changed(r, t.ino, NULL);
	}
	target_free(&t);
	return err;
}

/* Times as ext4 can hold them (the VFS clamps the same way). */
static struct timespec clamp(struct nx_recv *r, int64_t sec, uint32_t nsec)
{
	int64_t min = INT32_MIN, max = INT32_MAX;
	struct timespec ts;

	if (EXT2_INODE_SIZE(r->vol->fs->super) > EXT2_GOOD_OLD_INODE_SIZE)
		max += (int64_t)3 << 32;
	ts.tv_sec = sec < min ? min : sec > max ? max : sec;
	ts.tv_nsec = ts.tv_sec != sec || nsec > 999999999 ? 0 : (long)nsec;
	return ts;
}

static errcode_t do_setattr(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct nx_attr a;
	struct target t;
	int valid = 0;
	int64_t sec;
	uint32_t nsec;
	errcode_t err;

	memset(&a, 0, sizeof(a));
	err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);
	if (!err)
		err = need_present(r, cmd, &t);
	if (err)
		goto out;
	switch (cmd->type) {
	case NX_SS_C_CHMOD:
		if (nx_ss_u64(cmd, NX_SS_A_MODE) > 07777) {
			err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': mode "
				  "0%" PRIo64 " has more than permission bits",
				  t.path, nx_ss_u64(cmd, NX_SS_A_MODE));
			goto out;
		}
		a.mode = (mode_t)nx_ss_u64(cmd, NX_SS_A_MODE);
		valid = NX_SET_MODE;
		break;
	case NX_SS_C_CHOWN:
		if (nx_ss_u64(cmd, NX_SS_A_UID) >= UINT32_MAX ||
		    nx_ss_u64(cmd, NX_SS_A_GID) >= UINT32_MAX) {
			err = bad(r, cmd, NX_FAULT_STREAM, EINVAL, "'%s': owner "
				  "%" PRIu64 ":%" PRIu64 " is no user and group "
				  "id", t.path, nx_ss_u64(cmd, NX_SS_A_UID),
				  nx_ss_u64(cmd, NX_SS_A_GID));
			goto out;
		}
		a.uid = (uid_t)nx_ss_u64(cmd, NX_SS_A_UID);
		a.gid = (gid_t)nx_ss_u64(cmd, NX_SS_A_GID);
		valid = NX_SET_UID | NX_SET_GID;
		break;
	default:			/* NX_SS_C_UTIMES (ctime cannot be set) */
		nx_ss_time(cmd, NX_SS_A_ATIME, &sec, &nsec);
		a.atime = clamp(r, sec, nsec);
		nx_ss_time(cmd, NX_SS_A_MTIME, &sec, &nsec);
		a.mtime = clamp(r, sec, nsec);
		valid = NX_SET_ATIME | NX_SET_MTIME;
		break;
	}
	err = nx_setattr(r->vol, &r->cred, t.ino, &a, valid, NULL);
	if (err)
		err = fs_failed(r, cmd, err, t.path);
	else
		nx_repl_changed(r, t.ino, NULL);
out:
	target_free(&t);
	return err;
}

/* A file or directory must exist for attributes nobody can apply. */
static errcode_t do_ignore(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct target t;
	errcode_t err = resolve(r, cmd, NX_SS_A_PATH, r->vol, &t);

	if (!err)
		err = need_present(r, cmd, &t);
	target_free(&t);
	return err;
}

errcode_t nx_repl_apply(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	switch (cmd->type) {
	case NX_SS_C_MKFILE:
	case NX_SS_C_MKDIR:
	case NX_SS_C_MKNOD:
	case NX_SS_C_MKFIFO:
	case NX_SS_C_MKSOCK:
	case NX_SS_C_SYMLINK:
		return do_create(r, cmd);
	case NX_SS_C_RENAME:
		return do_rename(r, cmd);
	case NX_SS_C_LINK:
		return do_link(r, cmd);
	case NX_SS_C_UNLINK:
	case NX_SS_C_RMDIR:
		return do_remove(r, cmd);
	case NX_SS_C_SET_XATTR:
	case NX_SS_C_REMOVE_XATTR:
		return do_xattr(r, cmd);
	case NX_SS_C_WRITE:
		return do_write(r, cmd);
	case NX_SS_C_CLONE:
		return do_clone(r, cmd);
	case NX_SS_C_TRUNCATE:
		return do_truncate(r, cmd);
	case NX_SS_C_CHMOD:
	case NX_SS_C_CHOWN:
	case NX_SS_C_UTIMES:
		return do_setattr(r, cmd);
	case NX_SS_C_FALLOCATE:
		return do_fallocate(r, cmd);
	case NX_SS_C_FILEATTR:
		/* btrfs inode flags; btrfs receive ignores them too */
		return do_ignore(r, cmd);
	case NX_SS_C_UPDATE_EXTENT:
		return bad(r, cmd, NX_FAULT_STREAM, EOPNOTSUPP, "a stream "
			   "without file data (btrfs send --no-data) cannot be "
			   "received");
	case NX_SS_C_ENCODED_WRITE:
		return bad(r, cmd, NX_FAULT_STREAM, EOPNOTSUPP, "compressed "
			   "data (btrfs send --compressed-data) cannot be "
			   "received; send without it");
	case NX_SS_C_SUBVOL:
	case NX_SS_C_SNAPSHOT:
		return bad(r, cmd, NX_FAULT_STREAM, EINVAL, "a second snapshot "
			   "in one stream; receive them one at a time");
	default:
		return bad(r, cmd, NX_FAULT_STREAM, EINVAL, "not expected here");
	}
}
