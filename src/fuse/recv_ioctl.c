/*
 * recv_ioctl.c - "nextfs receive" into a mount: the daemon's side of the
 * NX_IOC_RECV_* ioctls (nxioctl.h).  The tool reads the stream and hands
 * it over in chunks; the receive (receive.h) runs here, under the volume
 * lock, one chunk per request, so the mount keeps serving in between.
 *
 * One session per mount, owned by the client process that began it:
 * another client's BEGIN is EBUSY while that process lives, and stops a
 * session whose client died (the cursor stays: resumable).  Unmounting
 * stops it the same way (nx_fuse_recv_shutdown).
 *
 * The receive changes the live tree behind the kernel's back: every
 * entry and inode it touches is queued under the lock and, after the
 * reply, the kernel is told to forget what it cached of them (as
 * invalidate_attrs does for our own changes).
 */
#include "fuse_internal.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nextfs/grow.h"
#include "nextfs/nxioctl.h"
#include "nextfs/receive.h"
#include "nextfs/snapshot.h"

struct inval {
	ext2_ino_t ino;			/* a directory, or the inode itself */
	char *name;			/* an entry of it, or NULL */
};

struct invals {
	struct inval *v;
	size_t n, cap;
};

/* The session: all of it under the live volume's lock. */
static struct {
	struct nx_recv *r;
	uint64_t id;
	pid_t pid;			/* the client */
	struct invals q;		/* to tell the kernel after the reply */
	int took;			/* a snapshot was taken */
} sess;

static uint64_t next_id;

static void queue(struct invals *q, ext2_ino_t ino, const char *name)
{
	if (q->n && q->v[q->n - 1].ino == ino &&
	    (q->v[q->n - 1].name ? name && !strcmp(q->v[q->n - 1].name, name) :
	     !name))
		return;			/* (the same as the last) */
	if (nx_grow((void **)&q->v, &q->cap, q->n, sizeof(*q->v), 64))
		return;			/* the cache times out anyway */
	q->v[q->n].ino = ino;
	q->v[q->n].name = name ? strdup(name) : NULL;
	if (!name || q->v[q->n].name)
		q->n++;
}

/* Tell the kernel (no lock held, after the reply); free Q. */
static void flush(struct nx_fuse *live, struct invals *q)
{
	size_t i;

	for (i = 0; i < q->n; i++) {
		fuse_ino_t node = q->v[i].ino == EXT2_ROOT_INO ? FUSE_ROOT_ID :
				  q->v[i].ino;

		if (live->se && q->v[i].name)
			fuse_lowlevel_notify_inval_entry(live->se, node,
							 q->v[i].name,
							 strlen(q->v[i].name));
		else if (live->se)
			fuse_lowlevel_notify_inval_inode(live->se, node, 0, 0);
		free(q->v[i].name);
	}
	free(q->v);
	memset(q, 0, sizeof(*q));
}

static errcode_t env_release(void *priv, ext2_ino_t ino)
{
	struct nx_fuse *live = priv;

	return nx_nodes_unlinked(live->nodes, live->vol, ino);
}

static errcode_t env_take(void *priv, const char *name,
			  struct nx_snapinfo *info)
{
	struct nx_fuse *live = priv;
	errcode_t err = nx_snap_take(live->vol, name, info);

	if (!err)
		sess.took = 1;
	return err;
}

static void env_changed(void *priv, ext2_ino_t dir, const char *name)
{
	queue(&sess.q, dir, name);
}

static void env_of(struct nx_fuse *live, struct nx_recv_env *env)
{
	memset(env, 0, sizeof(*env));
	env->release = env_release;
	env->take = env_take;
	env->changed = env_changed;
	env->priv = live;
}

/* Locked.  Stop the session (the cursor stays), free it. */
static void end_session(void)
{
	if (sess.r) {
		nx_recv_stop(sess.r);
		nx_recv_close(sess.r);
	}
	sess.r = NULL;
	sess.id = 0;
	sess.pid = 0;
}

static int alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static void begin(fuse_req_t req, struct nx_fuse *live,
		  const struct nx_ioc_recv_begin *in)
{
	struct nx_ioc_recv_begin out;
	struct invals q = { 0 };
	struct nx_recv_env env;
	pid_t pid = fuse_req_ctx(req)->pid;
	errcode_t err;
	int flags;

	memset(&out, 0, sizeof(out));
	env_of(live, &env);
	nx_volume_lock(live->vol);
	if (sess.r && sess.pid != pid && alive(sess.pid)) {
		nx_volume_unlock(live->vol);
		fuse_reply_err(req, EBUSY);
		return;
	}
	end_session();			/* a dead client's, or our own */
	if (in->flags & NX_IOC_RECV_ABORT) {
		err = nx_recv_abort(live->vol, &env, out.msg, sizeof(out.msg));
	} else {
		flags = ((in->flags & NX_IOC_RECV_FORCE) ? NX_RECV_FORCE : 0) |
			((in->flags & NX_IOC_RECV_RESUME) ? NX_RECV_RESUME : 0);
		err = nx_recv_open(live->vol, flags, &env, &sess.r, out.msg,
				   sizeof(out.msg));
		if (!err) {
			/* Unique in this daemon; the permission check is
			 * what protects a session, not its number. */
			sess.id = ++next_id ^ ((uint64_t)time(NULL) << 24);
			sess.pid = pid;
			out.session = sess.id;
		}
	}
	q = sess.q;
	memset(&sess.q, 0, sizeof(sess.q));
	nx_volume_unlock(live->vol);
	out.error = err ? (uint32_t)nx_errno(err) : 0;
	fuse_reply_ioctl(req, 0, &out, sizeof(out));
	flush(live, &q);
}

static void data(fuse_req_t req, struct nx_fuse *live,
		 const struct nx_ioc_recv_data *in)
{
	struct invals q;
	int rc, took;

	if (in->len > NX_IOC_RECV_CHUNK) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	nx_volume_lock(live->vol);
	if (!sess.r || in->session != sess.id) {
		nx_volume_unlock(live->vol);
		fuse_reply_err(req, ESTALE);
		return;
	}
	rc = nx_recv_feed(sess.r, in->data, in->len);
	if (rc == 0 && (in->flags & NX_IOC_RECV_EOF))
		rc = nx_recv_eof(sess.r);
	q = sess.q;
	memset(&sess.q, 0, sizeof(sess.q));
	took = sess.took;
	sess.took = 0;
	nx_volume_unlock(live->vol);
	if (rc == 0 || rc == NX_RECV_DONE)
		fuse_reply_ioctl(req, rc == NX_RECV_DONE, NULL, 0);
	else
		fuse_reply_err(req, ECANCELED);	/* STATUS says what */
	flush(live, &q);
	if (took)
		nx_fuse_snapdir_changed(live, NULL);
}

static void status(fuse_req_t req, struct nx_fuse *live,
		   const struct nx_ioc_recv_status *in)
{
	struct nx_ioc_recv_status *st = malloc(sizeof(*st));

	if (!st) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	st->session = in->session;
	nx_volume_lock(live->vol);
	if (in->session && (!sess.r || in->session != sess.id)) {
		nx_volume_unlock(live->vol);
		free(st);
		fuse_reply_err(req, ESTALE);
		return;
	}
	nx_recv_status(in->session ? sess.r : NULL, live->vol, st);
	nx_volume_unlock(live->vol);
	fuse_reply_ioctl(req, 0, st, sizeof(*st));
	free(st);
}

static void end(fuse_req_t req, struct nx_fuse *live,
		const struct nx_ioc_recv_end *in)
{
	struct invals q;

	nx_volume_lock(live->vol);
	if (!sess.r || in->session != sess.id) {
		nx_volume_unlock(live->vol);
		fuse_reply_err(req, ESTALE);
		return;
	}
	end_session();
	q = sess.q;
	memset(&sess.q, 0, sizeof(sess.q));
	nx_volume_unlock(live->vol);
	fuse_reply_ioctl(req, 0, NULL, 0);
	flush(live, &q);
}

int nx_fuse_recv_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		       const void *in, size_t in_size, size_t out_size)
{
	struct nx_fuse *live = fuse_req_userdata(req);
	size_t need;

	switch (cmd) {
	case NX_IOC_RECV_BEGIN:
		need = sizeof(struct nx_ioc_recv_begin);
		break;
	case NX_IOC_RECV_DATA:
		need = offsetof(struct nx_ioc_recv_data, data);
		break;
	case NX_IOC_RECV_STATUS:
		need = sizeof(struct nx_ioc_recv_status);
		break;
	case NX_IOC_RECV_END:
		need = sizeof(struct nx_ioc_recv_end);
		break;
	default:
		return 0;		/* not ours */
	}
	if (req_fs(req) != live || nodeid != FUSE_ROOT_ID)
		fuse_reply_err(req, req_fs(req) != live ? EROFS : ENOTTY);
	else if (nx_volume_rdonly(live->vol))
		fuse_reply_err(req, EROFS);
	else if (!nx_fuse_volume_owner_asks(req))	/* it rewrites any file */
		fuse_reply_err(req, EPERM);
	else if (in_size < need || (cmd != NX_IOC_RECV_DATA &&
				    cmd != NX_IOC_RECV_END &&
				    out_size < need))
		fuse_reply_err(req, EINVAL);
	else if (cmd == NX_IOC_RECV_BEGIN)
		begin(req, live, in);
	else if (cmd == NX_IOC_RECV_DATA)
		data(req, live, in);
	else if (cmd == NX_IOC_RECV_STATUS)
		status(req, live, in);
	else
		end(req, live, in);
	return 1;
}

void nx_fuse_recv_shutdown(struct nx_fuse *live)
{
	size_t i;

	if (!live->vol)
		return;
	nx_volume_lock(live->vol);
	end_session();
	/* The kernel is letting go of everything: nothing to tell it. */
	for (i = 0; i < sess.q.n; i++)
		free(sess.q.v[i].name);
	free(sess.q.v);
	memset(&sess.q, 0, sizeof(sess.q));
	nx_volume_unlock(live->vol);
}
