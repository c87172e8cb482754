/*
 * send_ops.c - "nextfs send" on a mountpoint, made by the daemon: the
 * NX_IOC_SEND_START and NX_IOC_SEND_STATUS ioctls (nxioctl.h).
 *
 * Reading a snapshot through FUSE costs a lookup, an open and a request
 * per 128 KiB of every file, and "tar -c" of .snapshots/NAME pays the
 * same: a send that reads that way can only be as fast as tar.  Here
 * the daemon runs the sender itself (send.h, nx_send_snapshot) on its
 * own views, in a worker thread, and writes the stream into a FIFO the
 * tool reads: file data never crosses FUSE, only the stream does, once,
 * through a pipe.  The worker takes the volume lock per piece of work,
 * never for the whole send, so the mount keeps serving (and copying on
 * write) meanwhile.
 *
 * The FIFO: the tool makes it in a directory of its own and opens it
 * for reading; START names it.  The daemon (often root) must not be
 * made to open or write anything else: it opens the path with O_PATH
 * and O_NOFOLLOW (no device is opened, no symbolic link followed at the
 * end), accepts it only if it is a FIFO owned by the caller, and only
 * then opens that very inode for writing through /proc/self/fd,
 * O_NONBLOCK (no reader: ENXIO, nothing waits).  Whoever reads a FIFO
 * its owner made could have been handed the stream by the owner, who
 * may read every byte of the volume anyway (the same rule as the delta:
 * root and the user who mounted it).
 *
 * A job lives from START until its status was read or NX_SEND_JOBS newer
 * ones finished.  Its worker stops when the reader goes away (EPIPE)
 * and at unmount (nx_fuse_send_shutdown: every write waits in poll() at
 * most a moment before it looks again whether it must stop).
 */
#include "fuse_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/nxioctl.h"
#include "nextfs/send.h"

/* How long a blocked write waits before it looks at the stop flag. */
#define SEND_POLL_MS	200

struct send_job {
	uint64_t handle;		/* 0: a free slot */
	uid_t uid;			/* who started it */
	unsigned long age;		/* for reusing the oldest */
	int started;			/* the worker runs or is not joined */
	int done;			/* the worker finished: result below */
	atomic_int stop;
	pthread_t thread;
	int fd;				/* the FIFO, the worker's */
	struct nx_volume *vol;
	uint32_t old_id, new_id;
	char resume[sizeof(((struct nx_ioc_send_start *)0)->resume)];
	errcode_t err;
	struct nx_send_stats st;
	char msg[sizeof(((struct nx_ioc_send_status *)0)->msg)];
};

static struct send_job jobs[NX_SEND_JOBS];
static unsigned long job_clock;
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;

/* Write all of BUF into the FIFO, unless told to stop. */
static errcode_t job_write(void *priv, const void *buf, size_t len)
{
	struct send_job *j = priv;
	struct pollfd pfd = { .fd = j->fd, .events = POLLOUT };
	const char *p = buf;
	ssize_t n;

	while (len) {
		if (atomic_load(&j->stop))
			return ECANCELED;
		n = write(j->fd, p, len);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EAGAIN) {
			poll(&pfd, 1, SEND_POLL_MS);
		} else if (n < 0 && errno != EINTR) {
			return errno;		/* EPIPE: the reader is gone */
		} else if (n == 0) {
			return EIO;
		}
	}
	return 0;
}

static void *send_worker(void *arg)
{
	struct send_job *j = arg;
	struct nx_send_out out = { .fd = -1, .write = job_write, .priv = j };
	struct nx_send_stats st;
	char msg[sizeof(j->msg)];
	errcode_t err;

	err = nx_send_snapshot(j->vol, j->old_id, j->new_id,
			       j->resume[0] ? j->resume : NULL, &out, &st, msg,
			       sizeof(msg));
	pthread_mutex_lock(&jobs_lock);
	j->err = err;
	j->st = st;
	memcpy(j->msg, msg, sizeof(msg));
	j->done = 1;
	pthread_mutex_unlock(&jobs_lock);
	/* The reader's end of file: after the result, which it asks next. */
	close(j->fd);
	return NULL;
}

/* jobs_lock held, or the worker is known to be done.  Free J's slot. */
static void job_forget(struct send_job *j)
{
	if (j->started)
		pthread_join(j->thread, NULL);
	memset(j, 0, sizeof(*j));
}

/* jobs_lock held.  A free slot, else the oldest finished one; NULL. */
static struct send_job *job_slot(void)
{
	struct send_job *best = NULL;
	size_t i;

	for (i = 0; i < NX_SEND_JOBS; i++) {
		struct send_job *j = &jobs[i];

		if (!j->handle)
			return j;
		if (j->done && (!best || j->age < best->age))
			best = j;
	}
	if (best)
		job_forget(best);	/* its worker has ended: quick */
	return best;
}

/*
 * The FIFO at PATH, opened for writing: only a FIFO owned by UID (see
 * the top of the file).  -1 with errno and MSG.
 */
static int open_fifo(const char *path, uid_t uid, char *msg, size_t msglen)
{
	char proc[64];
	struct stat st;
	int pfd, fd = -1, e;

	if (path[0] != '/') {
		snprintf(msg, msglen, "the stream's FIFO must be named by an "
			 "absolute path");
		errno = EINVAL;
		return -1;
	}
	pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0) {
		e = errno;
		snprintf(msg, msglen, "the daemon cannot reach %.300s: %s", path,
			 strerror(e));
		errno = e;
		return -1;
	}
	if (fstat(pfd, &st) < 0 || !S_ISFIFO(st.st_mode) ||
	    st.st_uid != uid) {
		snprintf(msg, msglen, "%.300s is not a FIFO of the caller's",
			 path);
		e = EPERM;
		goto out;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	fd = open(proc, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	e = errno;
	if (fd < 0)
		snprintf(msg, msglen, "the daemon cannot open %.300s: %s", path,
			 strerror(e));
out:
	close(pfd);
	errno = e;
	return fd;
}

/* Start J's worker with every signal blocked (the main thread has them). */
static int start_worker(struct send_job *j)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&j->thread, NULL, send_worker, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void nx_fuse_send_start(fuse_req_t req, const void *in, size_t in_size,
			size_t out_bufsz)
{
	struct nx_fuse *live = fuse_req_userdata(req);
	uid_t uid = fuse_req_ctx(req)->uid;
	struct nx_ioc_send_start *q;
	struct send_job *j;
	int fd = -1, rc;

	if (in_size < sizeof(*q) || out_bufsz < sizeof(*q)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (!nx_fuse_volume_owner_asks(req)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	q = malloc(sizeof(*q));
	if (!q) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(q, in, sizeof(*q));
	q->path[sizeof(q->path) - 1] = 0;
	q->resume[sizeof(q->resume) - 1] = 0;
	q->flags = 0;
	q->error = 0;
	q->handle = 0;
	q->msg[0] = 0;
	fd = open_fifo(q->path, uid, q->msg, sizeof(q->msg));
	if (fd < 0) {
		q->error = (uint32_t)errno;
		q->flags = NX_IOC_SEND_PIPE;
		goto reply;
	}
	pthread_mutex_lock(&jobs_lock);
	j = job_slot();
	if (!j) {
		pthread_mutex_unlock(&jobs_lock);
		snprintf(q->msg, sizeof(q->msg), "%d sends from this mount "
			 "are running already", NX_SEND_JOBS);
		q->error = EBUSY;
		goto reply;
	}
	j->handle = nx_fuse_new_handle();
	j->uid = uid;
	j->age = ++job_clock;
	j->fd = fd;
	j->vol = live->vol;
	j->old_id = q->old_id;
	j->new_id = q->new_id;
	memcpy(j->resume, q->resume, sizeof(j->resume));
	rc = start_worker(j);
	if (rc) {
		memset(j, 0, sizeof(*j));
		pthread_mutex_unlock(&jobs_lock);
		snprintf(q->msg, sizeof(q->msg), "the daemon cannot start a "
			 "thread: %s", strerror(rc));
		q->error = (uint32_t)rc;
		goto reply;
	}
	j->started = 1;
	fd = -1;			/* the worker's now */
	q->handle = j->handle;
	pthread_mutex_unlock(&jobs_lock);
reply:
	if (fd >= 0)
		close(fd);
	fuse_reply_ioctl(req, 0, q, sizeof(*q));
	free(q);
}

void nx_fuse_send_status(fuse_req_t req, const void *in, size_t in_size,
			 size_t out_bufsz)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	struct nx_ioc_send_status st;
	int err = ENOENT;
	size_t i;

	if (in_size < sizeof(st) || out_bufsz < sizeof(st)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memcpy(&st, in, sizeof(st));
	pthread_mutex_lock(&jobs_lock);
	for (i = 0; i < NX_SEND_JOBS; i++) {
		struct send_job *j = &jobs[i];

		if (!st.handle || j->handle != st.handle || j->uid != uid)
			continue;
		memset(&st, 0, sizeof(st));
		st.handle = j->handle;
		err = 0;
		if (!j->done)
			break;		/* NX_IOC_SEND_RUNNING */
		st.state = NX_IOC_SEND_DONE;
		st.error = j->err ? (uint32_t)nx_errno(j->err) : 0;
		st.bytes = j->st.bytes;
		st.data_bytes = j->st.data_bytes;
		st.commands = j->st.commands;
		st.inodes = j->st.inodes;
		memcpy(st.msg, j->msg, sizeof(st.msg));
		job_forget(j);
		break;
	}
	pthread_mutex_unlock(&jobs_lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_ioctl(req, 0, &st, sizeof(st));
}

void nx_fuse_send_shutdown(void)
{
	pthread_t t[NX_SEND_JOBS];
	size_t i, n = 0;

	pthread_mutex_lock(&jobs_lock);
	for (i = 0; i < NX_SEND_JOBS; i++)
		if (jobs[i].started) {
			atomic_store(&jobs[i].stop, 1);
			t[n++] = jobs[i].thread;
			jobs[i].started = 0;
		}
	pthread_mutex_unlock(&jobs_lock);
	/* unlocked: a worker takes jobs_lock to finish */
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_lock(&jobs_lock);
	memset(jobs, 0, sizeof(jobs));
	pthread_mutex_unlock(&jobs_lock);
}
