/*
 * receive.c - a receive session: the stream decoded piece by piece, its
 * first command checked against the target, the rest applied (apply.c)
 * with the cursor kept exact, the snapshot taken at the end, or the
 * tree rolled back (revert.c).  receive.h states the guarantees and
 * why they hold; this file keeps them:
 *
 *  - the cursor is rewritten at the end of every nx_recv_feed() that
 *    applied something (the caller may release the lock then, and any
 *    commit after that holds exactly what the cursor names), and before
 *    every commit this file makes (every 16 MiB of stream, at a stop);
 *  - nothing is written before the first command has been checked, and
 *    an error while nothing of this run is applied changes nothing (a
 *    pending receive stays pending);
 *  - after that, a resumable error keeps the cursor and commits it; any
 *    other rolls back, drops the cursor and commits.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nextfs/dir.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/snaptool.h"
#include "nextfs/xattr.h"
#include "repl_internal.h"

/* Commit at least this often (stream bytes): what a crash costs to redo. */
#define COMMIT_BYTES	(16U << 20)

enum { RS_OPEN, RS_APPLYING, RS_DONE, RS_FAILED };

errcode_t nx_repl_fail(struct nx_recv *r, enum nx_fault fault, errcode_t err,
		       const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
	r->fault = fault;
	return err;
}

/* ------------------------------------------------------------------ */
/* The cursor record (repl_internal.h), little endian.                 */

#define CURSOR_MAGIC	"nxrc"
#define CURSOR_FIXED	130

static void le_put(unsigned char *p, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t le_get(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static size_t cursor_pack(const struct nx_cursor *c, unsigned char *b)
{
	size_t len = strlen(c->name);

	memcpy(b, CURSOR_MAGIC, 4);
	le_put(b + 4, 1, 4);
	le_put(b + 8, c->version, 4);
	le_put(b + 12, c->flags, 4);
	memcpy(b + 16, c->uuid, NX_SS_UUID_LEN);
	le_put(b + 32, c->ctransid, 8);
	memcpy(b + 40, c->parent_uuid, NX_SS_UUID_LEN);
	le_put(b + 56, c->parent_ctransid, 8);
	le_put(b + 64, c->parent_id, 4);
	le_put(b + 68, c->root_mode, 4);
	le_put(b + 72, c->root_uid, 4);
	le_put(b + 76, c->root_gid, 4);
	le_put(b + 80, (uint64_t)c->root_atime, 8);
	le_put(b + 88, (uint64_t)c->root_mtime, 8);
	le_put(b + 96, c->root_atime_ns, 4);
	le_put(b + 100, c->root_mtime_ns, 4);
	le_put(b + 104, c->index, 8);
	le_put(b + 112, c->offset, 8);
	le_put(b + 120, c->hash, 8);
	le_put(b + 128, len, 2);
	memcpy(b + CURSOR_FIXED, c->name, len);
	return CURSOR_FIXED + len;
}

static int cursor_unpack(const unsigned char *b, size_t len,
			 struct nx_cursor *c)
{
	size_t nlen;

	memset(c, 0, sizeof(*c));
	if (len < CURSOR_FIXED || memcmp(b, CURSOR_MAGIC, 4) ||
	    le_get(b + 4, 4) != 1)
		return 0;
	nlen = le_get(b + 128, 2);
	if (nlen > NX_NAME_MAX || len != CURSOR_FIXED + nlen)
		return 0;
	c->version = (uint32_t)le_get(b + 8, 4);
	c->flags = (uint32_t)le_get(b + 12, 4);
	memcpy(c->uuid, b + 16, NX_SS_UUID_LEN);
	c->ctransid = le_get(b + 32, 8);
	memcpy(c->parent_uuid, b + 40, NX_SS_UUID_LEN);
	c->parent_ctransid = le_get(b + 56, 8);
	c->parent_id = (uint32_t)le_get(b + 64, 4);
	c->root_mode = (uint32_t)le_get(b + 68, 4);
	c->root_uid = (uint32_t)le_get(b + 72, 4);
	c->root_gid = (uint32_t)le_get(b + 76, 4);
	c->root_atime = (int64_t)le_get(b + 80, 8);
	c->root_mtime = (int64_t)le_get(b + 88, 8);
	c->root_atime_ns = (uint32_t)le_get(b + 96, 4);
	c->root_mtime_ns = (uint32_t)le_get(b + 100, 4);
	c->index = le_get(b + 104, 8);
	c->offset = le_get(b + 112, 8);
	c->hash = le_get(b + 120, 8);
	memcpy(c->name, b + CURSOR_FIXED, nlen);
	c->name[nlen] = 0;
	return 1;
}

/* 1: a cursor (into C), 0: none, or an error. */
static int read_cursor(struct nx_volume *vol, struct nx_cursor *c)
{
	void *v = NULL;
	size_t len = 0;
	errcode_t err;
	int ok;

	err = nx_xattr_private_get(vol, EXT2_ROOT_INO, NX_RECV_CURSOR_XATTR,
				   &v, &len);
	if (err == ENODATA)
		return 0;
	if (err)
		return -(int)nx_errno(err);
	ok = cursor_unpack(v, len, c);
	free(v);
	return ok ? 1 : -EUCLEAN;
}

static errcode_t write_cursor(struct nx_recv *r)
{
	unsigned char b[CURSOR_FIXED + NX_NAME_MAX];
	errcode_t err;

	err = nx_xattr_private_set(r->vol, EXT2_ROOT_INO, NX_RECV_CURSOR_XATTR,
				   b, cursor_pack(&r->cur, b));
	if (!err)
		r->cursor_dirty = 0;
	return err;
}

static errcode_t drop_cursor(struct nx_volume *vol)
{
	errcode_t err = nx_xattr_private_remove(vol, EXT2_ROOT_INO,
						NX_RECV_CURSOR_XATTR);

	return err == ENODATA ? 0 : err;
}

/* ------------------------------------------------------------------ */
/* Opening.                                                            */

static void uuid_text(const unsigned char *u, char out[37])
{
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
		 u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
		 u[15]);
}

errcode_t nx_recv_open(struct nx_volume *vol, int flags,
		       const struct nx_recv_env *env, struct nx_recv **ret,
		       char *msg, size_t msglen)
{
	struct nx_recv *r;
	int rc;

	*ret = NULL;
	if (nx_volume_rdonly(vol) && !(flags & NX_RECV_CHECK)) {
		nx_set_msg(msg, msglen, "the target is read-only");
		return EROFS;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return ENOMEM;
	r->vol = vol;
	r->flags = flags;
	r->env = *env;
	r->cred.umask = 0;		/* uid 0: the stream says who owns */
	nx_ss_dec_init(&r->dec, NX_SS_DEC_PRIVATE);
	rc = read_cursor(vol, &r->cur);
	if (rc < 0) {
		nx_set_msg(msg, msglen, "the target's receive cursor is "
			   "unreadable: %s", strerror(-rc));
		free(r);
		return (errcode_t)-rc;
	}
	r->pending = rc;
	if ((flags & NX_RECV_RESUME) && !r->pending) {
		nx_set_msg(msg, msglen, "no receive is pending on the target: "
			   "nothing to resume");
		free(r);
		return ENOENT;
	}
	if (r->pending) {
		struct nx_snapinfo info;

		snprintf(r->st.name, sizeof(r->st.name), "%s", r->cur.name);
		r->st.incremental = (r->cur.flags & NX_CUR_INCREMENTAL) != 0;
		if (r->st.incremental &&
		    !nx_snap_find_id(vol, r->cur.parent_id, &info))
			snprintf(r->st.parent, sizeof(r->st.parent), "%s",
				 info.name);
		r->st.next_index = r->cur.index;
		r->st.next_offset = r->cur.offset;
		r->st.resumable = 1;
	}
	*ret = r;
	return 0;
}

const char *nx_recv_msg(const struct nx_recv *r)
{
	return r->msg;
}

const struct nx_recv_stats *nx_recv_stats(const struct nx_recv *r)
{
	return &r->st;
}

void nx_recv_close(struct nx_recv *r)
{
	if (!r)
		return;
	free(r->buf);
	free(r);
}

/* ------------------------------------------------------------------ */
/* The first command: what the stream is, and whether it fits here.    */

struct first_diff {
	char line[NX_NAME_MAX * 2 + 64];
};

static int first_change(void *priv, const struct nx_diff_entry *e)
{
	struct first_diff *fd = priv;

	if (e->kind == NX_DIFF_RENAMED)
		snprintf(fd->line, sizeof(fd->line), "R %s -> %s", e->path,
			 e->newpath);
	else
		snprintf(fd->line, sizeof(fd->line), "%c %s", e->kind,
			 e->path);
	return 1;		/* the first is enough */
}

/*
 * Has the live tree changed since snapshot NAME?  Today through the
 * block-map diff of snap/diff.c (nx_snap_diff, which lists both trees);
 * the place to use a cheaper "any change at all" answer once there is one.
 */
static errcode_t live_changed_since(struct nx_recv *r, const char *name,
				    char *line, size_t len)
{
	struct first_diff fd = { "" };
	char msg[256];
	errcode_t err;

	err = nx_snap_diff(r->vol, name, NULL, first_change, &fd, NULL, msg,
			   sizeof(msg));
	if (err)
		return nx_repl_fail(r, NX_FAULT_VOLUME, err, "comparing the "
				    "live tree with '%s': %s", name, msg);
	snprintf(line, len, "%s", fd.line);
	return 0;
}

/* The snapshot of LIST (N of them) whose identity is UUID, or -1. */
static int find_identity(struct nx_recv *r, const struct nx_snapinfo *list,
			 int n, const unsigned char *uuid)
{
	unsigned char u[NX_SS_UUID_LEN];
	uint64_t ct;
	int i;

	for (i = n - 1; i >= 0; i--)
		if (!nx_snap_identity(r->vol, &list[i], u, &ct) &&
		    !memcmp(u, uuid, NX_SS_UUID_LEN))
			return i;
	return -1;
}

struct first_entry {
	const char *skip;
	char *out;
	size_t len;
};

static int note_first(void *priv, const char *name, size_t namelen,
		      ext2_ino_t ino, unsigned char d_type, uint64_t next)
{
	struct first_entry *fe = priv;

	if ((namelen == 1 && name[0] == '.') ||
	    (namelen == 2 && name[0] == '.' && name[1] == '.') ||
	    (namelen == strlen(NX_SNAPDIR_NAME) &&
	     !memcmp(name, NX_SNAPDIR_NAME, namelen)) ||
	    (fe->skip && namelen == strlen(fe->skip) &&
	     !memcmp(name, fe->skip, namelen)))
		return 0;
	snprintf(fe->out, fe->len, "'/%.*s'", (int)namelen, name);
	return 1;
}

/* Is the live tree empty but for an empty lost+found? *LF: it is there. */
static errcode_t live_empty(struct nx_recv *r, int *lf, char *first,
			    size_t len)
{
	char names[2];
	ext2_ino_t ino;
	size_t xlen = 0;
	int empty;
	errcode_t err;

	*lf = 0;
	first[0] = 0;
	err = nx_lookup(r->vol, EXT2_ROOT_INO, "lost+found", &ino);
	if (!err) {
		err = nx_dir_is_empty(r->vol, ino, &empty);
		*lf = !err && empty;
	}
	if (err && err != ENOENT && err != ENOTDIR)
		return err;
	{
		struct first_entry fe = { *lf ? "lost+found" : NULL, first,
					  len };

		err = nx_readdir(r->vol, EXT2_ROOT_INO, 0, note_first, &fe);
	}
	if (!err && !first[0]) {
		err = nx_listxattr(r->vol, &r->cred, EXT2_ROOT_INO, names,
				   sizeof(names), &xlen);
		if (err == ERANGE || (!err && xlen))
			snprintf(first, len, "attributes of /");
		if (err == ERANGE)
			err = 0;
	}
	return err;
}

/* Check the stream's first command against the target (nothing written). */
static errcode_t check_first(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			     struct nx_snapinfo *list, int n, int *parent,
			     int *lf)
{
	struct nx_cursor *c = &r->cur;
	char ustr[37], pstr[37], line[NX_NAME_MAX * 2 + 64];
	int i, force = (r->flags & NX_RECV_FORCE) != 0;
	errcode_t err;

	*parent = -1;
	if (nx_snap_name_check(c->name))
		return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "the stream's "
				    "snapshot name '%s' is not a valid snapshot "
				    "name", c->name);
	uuid_text(c->uuid, ustr);
	uuid_text(c->parent_uuid, pstr);
	for (i = 0; i < n; i++)
		if (!strcmp(list[i].name, c->name))
			return nx_repl_fail(r, NX_FAULT_STREAM, EEXIST, "a "
					    "snapshot named '%s' exists on the "
					    "target already", c->name);
	/* (the newest only: looking at each would open every view) */
	i = n ? find_identity(r, list + n - 1, 1, c->uuid) : -1;
	if (i >= 0)
		return nx_repl_fail(r, NX_FAULT_STREAM, EEXIST, "the stream's "
				    "snapshot (%s) was received already, as "
				    "'%s'", ustr, list[n - 1].name);
	if (!(c->flags & NX_CUR_INCREMENTAL)) {
		if (n && !force)
			return nx_repl_fail(r, NX_FAULT_STREAM, EEXIST, "a full "
					    "stream needs a target without "
					    "snapshots (it has %d; -F receives "
					    "all the same)", n);
		err = live_empty(r, lf, line, sizeof(line));
		if (err)
			return nx_repl_fail(r, NX_FAULT_VOLUME, err, "reading "
					    "the target: %s",
					    error_message(err));
		if (line[0] && !force)
			return nx_repl_fail(r, NX_FAULT_STREAM, ENOTEMPTY, "a "
					    "full stream needs an empty live "
					    "tree, the target has %s (-F "
					    "empties it first)", line);
		return 0;
	}
	/*
	 * By UUID (the ctransid is the sender's business, as for btrfs).
	 * The newest first: the parent must be it.  An older one is looked
	 * for (to say so) only when it is not, a view opened per snapshot.
	 */
	*parent = n && find_identity(r, list + n - 1, 1,
				     c->parent_uuid) == 0 ? n - 1 :
		  find_identity(r, list, n ? n - 1 : 0, c->parent_uuid);
	if (*parent < 0)
		return nx_repl_fail(r, NX_FAULT_STREAM, ENOENT, "the stream "
				    "is incremental from %s, which the target "
				    "does not have (send a full stream, or from "
				    "a snapshot both sides have)", pstr);
	if (*parent != n - 1)
		return nx_repl_fail(r, NX_FAULT_STREAM, EEXIST, "the stream's "
				    "parent is snapshot '%s', but '%s' is newer "
				    "on the target; delete the newer ones first",
				    list[*parent].name, list[n - 1].name);
	if (force)
		return 0;
	err = live_changed_since(r, list[*parent].name, line, sizeof(line));
	if (err)
		return err;
	if (line[0])
		return nx_repl_fail(r, NX_FAULT_STREAM, EEXIST, "the live tree "
				    "changed since snapshot '%s' (%s); -F rolls "
				    "it back first", list[*parent].name, line);
	return 0;
}

/* Does a resumed stream start as the pending receive did? */
static errcode_t check_resumed(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			       int incremental)
{
	const struct nx_cursor *c = &r->cur;
	char name[NX_NAME_MAX + 1];

	nx_ss_str(cmd, NX_SS_A_PATH, name, sizeof(name));
	if (strcmp(name, c->name) ||
	    memcmp(nx_ss_uuid(cmd, NX_SS_A_UUID), c->uuid, NX_SS_UUID_LEN) ||
	    !incremental != !(c->flags & NX_CUR_INCREMENTAL) ||
	    (incremental && memcmp(nx_ss_uuid(cmd, NX_SS_A_CLONE_UUID),
				   c->parent_uuid, NX_SS_UUID_LEN)) ||
	    r->dec.version != c->version)
		return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "this stream "
				    "(of snapshot '%s') is not the one the "
				    "pending receive of '%s' was applying",
				    name, c->name);
	return 0;
}

/* Record a full stream's root as it is, to roll back to. */
static errcode_t note_root(struct nx_recv *r)
{
	struct ext2_inode_large inode;
	struct timespec ts;
	errcode_t err = nx_inode_read(r->vol, EXT2_ROOT_INO, &inode);

	if (err)
		return err;
	r->cur.root_mode = inode.i_mode;
	r->cur.root_uid = inode_uid(inode);
	r->cur.root_gid = inode_gid(inode);
	nx_inode_get_time(&inode, NX_ATIME, &ts);
	r->cur.root_atime = ts.tv_sec;
	r->cur.root_atime_ns = (uint32_t)ts.tv_nsec;
	nx_inode_get_time(&inode, NX_MTIME, &ts);
	r->cur.root_mtime = ts.tv_sec;
	r->cur.root_mtime_ns = (uint32_t)ts.tv_nsec;
	return 0;
}

static errcode_t abort_pending(struct nx_recv *r);

/*
 * The first command of a fresh receive: check, then start - -F's work,
 * the empty lost+found removed, the cursor written.
 */
static errcode_t start(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	struct nx_snapinfo *list = NULL;
	int n = 0, parent, lf = 0;
	errcode_t err;

	r->cur.version = r->dec.version;
	err = nx_snap_list(r->vol, &list, &n);
	if (err)
		return nx_repl_fail(r, NX_FAULT_VOLUME, err, "listing the "
				    "target's snapshots: %s", error_message(err));
	err = check_first(r, cmd, list, n, &parent, &lf);
	if (err || (r->flags & NX_RECV_CHECK))
		goto out;
	snprintf(r->st.name, sizeof(r->st.name), "%s", r->cur.name);
	r->state = RS_APPLYING;		/* from here on, errors roll back */
	if (parent >= 0) {
		r->st.incremental = 1;
		snprintf(r->st.parent, sizeof(r->st.parent), "%s",
			 list[parent].name);
		r->cur.parent_id = list[parent].id;
		err = nx_snap_view_get(r->vol, list[parent].id, &r->pview);
		if (!err && (r->flags & NX_RECV_FORCE))
			err = nx_repl_revert(r);
	} else {
		/* -F empties the tree, lost+found too; a rollback brings an
		 * empty lost+found back if there was one. */
		err = note_root(r);
		if (!err && (r->flags & NX_RECV_FORCE))
			err = nx_repl_revert_full(r);
		else if (!err && lf)
			err = nx_repl_unlink(r, EXT2_ROOT_INO, "lost+found", 1);
		if (!err && lf)
			r->cur.flags |= NX_CUR_LOST_FOUND;
	}
	if (err) {
		r->state = RS_OPEN;	/* (nothing to keep: -F's own work) */
		err = nx_repl_fail(r, NX_FAULT_VOLUME, err, "preparing the "
				   "target: %s", error_message(err));
		goto out;
	}
	r->cur.index = cmd->index + 1;
	r->cur.offset = r->dec.offset;
	r->cur.hash = r->dec.hash;
	/* Committed at once: from here on the receive is pending. */
	err = write_cursor(r);
	if (!err)
		err = nx_volume_sync(r->vol);
	if (err)
		err = nx_repl_fail(r, nx_errno(err) == ENOSPC ? NX_FAULT_SPACE :
				   NX_FAULT_VOLUME, err, "writing the receive "
				   "cursor: %s", error_message(err));
out:
	free(list);
	return err;
}

/* Take the first command apart into r->cur (identity and name). */
static errcode_t first_command(struct nx_recv *r, const struct nx_ss_cmd *cmd)
{
	int incr = cmd->type == NX_SS_C_SNAPSHOT;
	struct nx_cursor c;

	if (cmd->type != NX_SS_C_SUBVOL && cmd->type != NX_SS_C_SNAPSHOT)
		return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "command 0 "
				    "(%s): a stream starts with a subvol or "
				    "snapshot command",
				    nx_ss_cmd_name(cmd->type));
	if (cmd->attr[NX_SS_A_PATH].len > NX_NAME_MAX)
		return nx_repl_fail(r, NX_FAULT_STREAM, ENAMETOOLONG, "the "
				    "stream's snapshot name is longer than %d "
				    "bytes", NX_NAME_MAX);
	if (r->pending && !(r->flags & NX_RECV_RESUME) &&
	    !(r->flags & NX_RECV_FORCE))
		return nx_repl_fail(r, NX_FAULT_STREAM, EBUSY, "a receive of "
				    "'%s' is pending on the target (stopped "
				    "before command %" PRIu64 "); --resume "
				    "continues it, --abort (or -F) gives it up",
				    r->cur.name, r->cur.index);
	if (r->pending && (r->flags & NX_RECV_RESUME))
		return check_resumed(r, cmd, incr);
	if (r->pending && (r->flags & NX_RECV_CHECK))
		return 0;		/* -F will give the pending one up */
	memset(&c, 0, sizeof(c));
	nx_ss_str(cmd, NX_SS_A_PATH, c.name, sizeof(c.name));
	memcpy(c.uuid, nx_ss_uuid(cmd, NX_SS_A_UUID), NX_SS_UUID_LEN);
	c.ctransid = nx_ss_u64(cmd, NX_SS_A_CTRANSID);
	if (incr) {
		c.flags |= NX_CUR_INCREMENTAL;
		memcpy(c.parent_uuid, nx_ss_uuid(cmd, NX_SS_A_CLONE_UUID),
		       NX_SS_UUID_LEN);
		c.parent_ctransid = nx_ss_u64(cmd, NX_SS_A_CLONE_CTRANSID);
	}
	if (r->pending) {		/* -F: give the pending one up first */
		errcode_t err = abort_pending(r);

		if (err)
			return err;
		r->pending = 0;
	}
	r->cur = c;
	return start(r, cmd);
}

/* ------------------------------------------------------------------ */
/* The end: rolled back, stopped, or complete.                         */

/* The parent's view, again (the store keeps it while the snapshot lives). */
static errcode_t get_parent(struct nx_recv *r)
{
	errcode_t err;

	r->pview = NULL;
	if (!(r->cur.flags & NX_CUR_INCREMENTAL))
		return 0;
	err = nx_snap_view_get(r->vol, r->cur.parent_id, &r->pview);
	if (err)
		return nx_repl_fail(r, NX_FAULT_VOLUME, err, "the parent "
				    "snapshot (id %" PRIu32 ") of the receive of "
				    "'%s' is gone: %s", r->cur.parent_id,
				    r->cur.name, error_message(err));
	return 0;
}

/* Roll the tree back to where the receive in r->cur started, drop it. */
static errcode_t roll_back(struct nx_recv *r)
{
	errcode_t err;

	err = get_parent(r);
	if (!err)
		err = r->pview ? nx_repl_revert(r) : nx_repl_revert_full(r);
	if (!err)
		err = drop_cursor(r->vol);
	if (!err)
		err = nx_volume_sync(r->vol);
	return err;
}

static errcode_t abort_pending(struct nx_recv *r)
{
	char why[sizeof(r->msg)];
	errcode_t err = roll_back(r);

	if (err) {
		snprintf(why, sizeof(why), "%s", r->msg[0] ? r->msg :
			 error_message(err));
		return nx_repl_fail(r, NX_FAULT_VOLUME, err, "giving up the "
				    "pending receive of '%s' failed: %s",
				    r->cur.name, why);
	}
	return 0;
}

/* A command failed (r->msg, r->fault): keep the cursor or roll back. */
static int failed(struct nx_recv *r, errcode_t err)
{
	size_t len = strlen(r->msg);
	errcode_t rerr;

	if (r->state != RS_APPLYING) {
		/*
		 * Nothing of this run applied: nothing changed.  A resumed
		 * stream cut before it reached the cursor is an interruption
		 * like any other cut (the pending receive goes on from the
		 * same cursor); anything else refused this run.
		 */
		r->state = RS_FAILED;
		r->st.resumable = r->pending;
		r->st.refused = !(r->pending && err == EXT2_ET_SHORT_READ);
		return (int)err;
	}
	r->state = RS_FAILED;
	if (r->fault == NX_FAULT_SPACE || err == EXT2_ET_SHORT_READ) {
		rerr = write_cursor(r);
		if (!rerr)
			rerr = nx_volume_sync(r->vol);
		r->st.resumable = 1;
		if (rerr)
			snprintf(r->msg + len, sizeof(r->msg) - len, "; keeping "
				 "the cursor failed too: %s",
				 error_message(rerr));
		return (int)err;
	}
	r->st.resumable = 0;
	rerr = roll_back(r);
	len = strlen(r->msg);
	if (rerr) {
		/* The cursor stays: --abort tries again. */
		r->st.resumable = 1;
		snprintf(r->msg + len, sizeof(r->msg) - len, "; rolling back "
			 "failed (%s): the receive stays pending, --abort "
			 "tries again", error_message(rerr));
	} else {
		r->st.rolled_back = 1;
		if (r->st.incremental)
			snprintf(r->msg + len, sizeof(r->msg) - len, "; the "
				 "live tree is back at snapshot '%s'",
				 r->st.parent);
		else
			snprintf(r->msg + len, sizeof(r->msg) - len, "; the "
				 "live tree is empty again");
	}
	return (int)err;
}

/* END: the parked inodes go, the identity is recorded, the take. */
static int finish(struct nx_recv *r)
{
	unsigned char rec[NX_SNAP_RECEIVED_LEN];
	struct ext2_inode_large root;
	struct nx_attr a;
	uint32_t id;
	ext2_ino_t park;
	errcode_t err;

	err = nx_repl_park_dir(r, 0, &park);
	if (!err && park) {
		/* Removing it changes the root's times: put them back. */
		err = nx_inode_read(r->vol, EXT2_ROOT_INO, &root);
		memset(&a, 0, sizeof(a));
		nx_inode_get_time(&root, NX_ATIME, &a.atime);
		nx_inode_get_time(&root, NX_MTIME, &a.mtime);
		if (!err)
			err = nx_repl_drop_park(r);
		if (!err)
			err = nx_setattr(r->vol, &r->cred, EXT2_ROOT_INO, &a,
					 NX_SET_ATIME | NX_SET_MTIME, NULL);
	}
	id = r->vol->fs->super->s_snapshot_id + 1;
	nx_snap_received_record(id, r->cur.uuid, r->cur.ctransid, rec);
	if (!err)
		err = nx_xattr_private_set(r->vol, EXT2_ROOT_INO,
					   NX_SNAP_RECEIVED_XATTR, rec,
					   sizeof(rec));
	if (!err)
		err = drop_cursor(r->vol);
	if (err)
		return failed(r, nx_repl_fail(r, NX_FAULT_VOLUME, err,
					      "finishing the receive: %s",
					      error_message(err)));
	err = r->env.take(r->env.priv, r->cur.name, &r->st.taken);
	if (!err && r->st.taken.id != id)
		err = EXT2_ET_FILESYSTEM_CORRUPTED;
	if (err) {
		/* Still complete but for the take: stay resumable at END. */
		return failed(r, nx_repl_fail(r, NX_FAULT_SPACE, err, "taking "
					      "snapshot '%s': %s", r->cur.name,
					      error_message(err)));
	}
	r->state = RS_DONE;
	r->st.resumable = 0;
	nx_repl_changed(r, EXT2_ROOT_INO, NULL);
	return NX_RECV_DONE;
}

/* ------------------------------------------------------------------ */
/* Feeding.                                                            */

/* A resumed stream's command before the cursor: check, do not apply. */
static errcode_t reposition(struct nx_recv *r, const struct nx_ss_cmd *cmd,
			    uint64_t hash_before)
{
	const struct nx_cursor *c = &r->cur;

	if (cmd->type == NX_SS_C_RESUME) {
		if (cmd->index != 1 || r->dec.ncmds != c->index ||
		    r->dec.offset != c->offset || r->dec.hash != c->hash)
			return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "this "
					    "resume stream continues at command "
					    "%" PRIu64 " (offset %" PRIu64 "), "
					    "the receive of '%s' stopped before "
					    "command %" PRIu64 " (offset %"
					    PRIu64 ")", r->dec.ncmds,
					    r->dec.offset, c->name, c->index,
					    c->offset);
		r->positioned = 1;
		return 0;
	}
	if (cmd->index < c->index) {
		if (cmd->type == NX_SS_C_END)
			return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "the "
					    "stream ends before command %"
					    PRIu64 ", where the receive of '%s' "
					    "stopped", c->index, c->name);
		r->st.skipped++;
		return 0;
	}
	if (cmd->offset != c->offset || hash_before != c->hash)
		return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "the stream "
				    "differs from the one the receive of '%s' "
				    "was applying before command %" PRIu64,
				    c->name, c->index);
	r->positioned = 1;
	return 0;
}

/* One decoded command. */
static int handle(struct nx_recv *r, const struct nx_ss_cmd *cmd,
		  uint64_t hash_before)
{
	errcode_t err;

	if (cmd->index == 0 && cmd->type != NX_SS_C_RESUME) {
		err = first_command(r, cmd);
		if (err)
			return failed(r, err);
		if (r->flags & NX_RECV_CHECK) {
			r->state = RS_FAILED;	/* (over: only close it) */
			return NX_RECV_CHECKED;
		}
		if (r->pending)
			r->state = RS_OPEN;	/* positioned first, then apply */
		return 0;
	}
	if (r->pending && !r->positioned) {
		err = reposition(r, cmd, hash_before);
		if (err)
			return failed(r, err);
		if (r->positioned) {
			r->state = RS_APPLYING;
			err = get_parent(r);
			if (err)
				return failed(r, err);
		}
		if (cmd->type == NX_SS_C_RESUME || !r->positioned)
			return 0;
	} else if (cmd->type == NX_SS_C_RESUME) {
		return failed(r, nx_repl_fail(r, NX_FAULT_STREAM, EINVAL,
				  "command %" PRIu64 " (resume) at offset %"
				  PRIu64 ": not expected here", cmd->index,
				  cmd->offset));
	}
	if (cmd->type == NX_SS_C_END)
		return finish(r);
	err = nx_repl_apply(r, cmd);
	if (err)
		return failed(r, err);
	r->st.commands++;
	r->cur.index = cmd->index + 1;
	r->cur.offset = r->dec.offset;
	r->cur.hash = r->dec.hash;
	r->cursor_dirty = 1;
	return 0;
}

static errcode_t buffer(struct nx_recv *r, const void *buf, size_t len)
{
	if (nx_grow_by((void **)&r->buf, &r->cap, r->len, len, 1, 65536))
		return ENOMEM;
	memcpy(r->buf + r->len, buf, len);
	r->len += len;
	return 0;
}

/* The cursor as it is now, and a commit when one is due. */
static int checkpoint(struct nx_recv *r)
{
	errcode_t err = 0;

	if (r->state != RS_APPLYING)
		return 0;
	if (r->cursor_dirty)
		err = write_cursor(r);
	if (!err && r->commit_bytes >= COMMIT_BYTES) {
		err = nx_volume_sync(r->vol);
		r->commit_bytes = 0;
	}
	if (err)
		return failed(r, nx_repl_fail(r, nx_errno(err) == ENOSPC ?
				  NX_FAULT_SPACE : NX_FAULT_VOLUME, err,
				  "writing the receive cursor: %s",
				  error_message(err)));
	r->st.next_index = r->cur.index;
	r->st.next_offset = r->cur.offset;
	return 0;
}

int nx_recv_feed(struct nx_recv *r, const void *buf, size_t len)
{
	struct nx_ss_cmd cmd;
	size_t pos = 0, used;
	uint64_t hash_before;
	int rc = 0;

	if (r->state == RS_DONE || r->state == RS_FAILED) {
		if (len && r->state == RS_DONE)
			return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "data "
					    "after the end of the stream");
		return r->state == RS_DONE ? NX_RECV_DONE : EINVAL;
	}
	if (buffer(r, buf, len))
		return failed(r, nx_repl_fail(r, NX_FAULT_VOLUME, ENOMEM,
					      "out of memory"));
	r->st.bytes += len;
	r->commit_bytes += len;
	if (r->state == RS_APPLYING && get_parent(r))
		return failed(r, EINVAL);
	while (rc == 0 && pos < r->len) {
		if (!r->dec.version) {
			rc = nx_ss_decode_header(&r->dec, r->buf, r->len,
						 &used);
			if (rc && rc != NX_SS_MORE)
				rc = failed(r, nx_repl_fail(r, NX_FAULT_STREAM,
						rc, "%s", r->dec.msg));
		} else {
			hash_before = r->dec.hash;
			rc = nx_ss_decode_cmd(&r->dec, r->buf + pos,
					      r->len - pos, &cmd, &used);
			if (rc == 0)
				rc = handle(r, &cmd, hash_before);
			else if (rc != NX_SS_MORE)
				rc = failed(r, nx_repl_fail(r, NX_FAULT_STREAM,
						rc, "%s", r->dec.msg));
		}
		if (rc == NX_SS_MORE) {
			rc = 0;
			break;
		}
		if (rc == NX_RECV_CHECKED)
			break;
		if (rc == 0 || rc == NX_RECV_DONE)
			pos += used;
		if (rc == NX_RECV_DONE && pos < r->len)
			return nx_repl_fail(r, NX_FAULT_STREAM, EINVAL, "data "
					    "after the end of the stream");
	}
	memmove(r->buf, r->buf + pos, r->len - pos);
	r->len -= pos;
	if (rc == 0)
		rc = checkpoint(r);
	return rc;
}

int nx_recv_eof(struct nx_recv *r)
{
	if (r->state == RS_DONE)
		return NX_RECV_DONE;
	if (r->state == RS_FAILED)
		return EINVAL;
	nx_ss_dec_truncated(&r->dec, r->len);
	return failed(r, nx_repl_fail(r, NX_FAULT_STREAM, EXT2_ET_SHORT_READ,
				      "%s", r->dec.msg));
}

errcode_t nx_recv_stop(struct nx_recv *r)
{
	errcode_t err = 0;

	if (r->state == RS_APPLYING) {
		err = write_cursor(r);
		if (!err)
			err = nx_volume_sync(r->vol);
		r->state = RS_FAILED;
		r->st.resumable = 1;
	}
	return err;
}

/* ------------------------------------------------------------------ */
/* A pending receive, seen from outside.                               */

int nx_recv_pending(struct nx_volume *vol, struct nx_ss_token *tok,
		    char name[NX_NAME_MAX + 1])
{
	struct nx_cursor c;
	int rc = read_cursor(vol, &c);

	if (rc <= 0)
		return rc < 0 ? -rc : 0;
	memset(tok, 0, sizeof(*tok));
	tok->version = c.version;
	memcpy(tok->uuid, c.uuid, NX_SS_UUID_LEN);
	tok->ctransid = c.ctransid;
	if (c.flags & NX_CUR_INCREMENTAL) {
		memcpy(tok->parent_uuid, c.parent_uuid, NX_SS_UUID_LEN);
		tok->parent_ctransid = c.parent_ctransid;
	}
	tok->index = c.index;
	tok->offset = c.offset;
	tok->hash = c.hash;
	snprintf(name, NX_NAME_MAX + 1, "%s", c.name);
	return 1;
}

errcode_t nx_recv_abort(struct nx_volume *vol, const struct nx_recv_env *env,
			char *msg, size_t msglen)
{
	struct nx_recv *r;
	errcode_t err;

	err = nx_recv_open(vol, NX_RECV_RESUME, env, &r, msg, msglen);
	if (err)
		return err;
	err = abort_pending(r);
	if (err)
		nx_set_msg(msg, msglen, "%s", r->msg);
	nx_recv_close(r);
	return err;
}

void nx_recv_status(const struct nx_recv *r, struct nx_volume *vol,
		    struct nx_ioc_recv_status *st)
{
	uint64_t session = st->session;
	struct nx_ss_token tok;
	char name[NX_NAME_MAX + 1];
	int rc;

	memset(st, 0, sizeof(*st));
	st->session = session;
	if (r) {
		const struct nx_recv_stats *s = &r->st;

		st->state = r->state == RS_DONE ? NX_IOC_RECV_DONE :
			    r->state == RS_FAILED ? NX_IOC_RECV_FAILED :
			    NX_IOC_RECV_RUNNING;
		st->flags = (s->resumable ? NX_IOC_RECV_RESUMABLE : 0) |
			    (s->rolled_back ? NX_IOC_RECV_ROLLED_BACK : 0) |
			    (s->incremental ? NX_IOC_RECV_INCREMENTAL : 0) |
			    (s->refused ? NX_IOC_RECV_REFUSED : 0);
		st->commands = s->commands;
		st->bytes = s->bytes;
		st->data_bytes = s->data_bytes;
		st->skipped = s->skipped;
		st->ignored_xattrs = s->ignored_xattrs;
		st->next_index = s->next_index;
		st->next_offset = s->next_offset;
		st->taken_sec = s->taken.taken.tv_sec;
		st->taken_nsec = (uint32_t)s->taken.taken.tv_nsec;
		st->snap_id = s->taken.id;
		snprintf(st->name, sizeof(st->name), "%s", s->name);
		snprintf(st->parent, sizeof(st->parent), "%s", s->parent);
		snprintf(st->msg, sizeof(st->msg), "%s", r->msg);
		vol = r->vol;
		if (!s->resumable)
			return;
	}
	rc = nx_recv_pending(vol, &tok, name);
	if (rc == 1) {
		nx_ss_token_encode(&tok, st->token);
		if (!r) {
			st->state = NX_IOC_RECV_PENDING;
			st->flags = NX_IOC_RECV_RESUMABLE |
				    (tok.parent_uuid[0] || memcmp(tok.parent_uuid,
				    tok.parent_uuid + 1, NX_SS_UUID_LEN - 1) ?
				    NX_IOC_RECV_INCREMENTAL : 0);
			st->next_index = tok.index;
			st->next_offset = tok.offset;
			snprintf(st->name, sizeof(st->name), "%s", name);
		}
	} else if (!r) {
		st->state = NX_IOC_RECV_NONE;
		if (rc)
			snprintf(st->msg, sizeof(st->msg), "the receive cursor "
				 "is unreadable: %s", strerror(rc));
	}
}
