/*
 * loop.c - the multi-threaded request loop (see fuse_ops.h).
 *
 * Leader and followers.  One thread at a time, the leader, waits on
 * /dev/fuse; the other idle threads wait for their turn here.  A request
 * that only runs under the volume lock and never waits for the kernel
 * (lookup, getattr, create, unlink, a small write, ...) is served by the
 * leader itself, which then reads the next one: a sequence of such
 * requests (tar, rm -rf) runs on one warm thread, with no hand-over.
 * Everything else is handed over first - the leader lets a follower
 * (or a new thread) take its place and then serves the request: reads,
 * whose device I/O runs outside the lock and should overlap; large
 * writes, so that the next one is received while this one is written;
 * requests that may wait for the kernel (open with O_TRUNC and ioctls
 * send it notifications, which can need other requests answered),
 * snapshot take and delete (mkdir, rmdir), and anything not named
 * below.
 *
 * Why not libfuse's fuse_session_loop_mt: its idle workers all block in
 * read() on /dev/fuse, and the kernel hands each request to the one that
 * has waited longest, so consecutive requests rotate through all of them
 * (10): on the 2-core VM untar then cost the daemon 360-400 ticks of
 * CPU against 200-210 with one thread (-s), rm -rf 78-91 against 43-52.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/fuse.h>

/* Writes of at least this much are handed over (see above). */
#define NX_LOOP_BIG_WRITE	(128U << 10)

struct nx_loop {
	struct fuse_session *se;
	pthread_mutex_t mu;
	pthread_cond_t turn;		/* followers wait for the lead here */
	sem_t finished;			/* a worker saw the session end */
	int has_leader;
	unsigned nidle;			/* followers waiting for the lead */
	int exiting;
	int error;			/* how the session ended (<0: error) */
	unsigned nthreads;
	pthread_t threads[NX_LOOP_MAX_THREADS];
};

/* May the leader serve this request itself (see the top of the file)? */
static int serve_inline(const struct fuse_buf *buf)
{
	const struct fuse_in_header *in = buf->mem;

	if ((buf->flags & FUSE_BUF_IS_FD) || buf->size < sizeof(*in))
		return 0;
	switch (in->opcode) {
	case FUSE_WRITE:
		return in->len < NX_LOOP_BIG_WRITE;
	case FUSE_LOOKUP:
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_GETATTR:
	case FUSE_SETATTR:
	case FUSE_READLINK:
	case FUSE_SYMLINK:
	case FUSE_MKNOD:
	case FUSE_UNLINK:
	case FUSE_LINK:
	case FUSE_RENAME:
	case FUSE_RENAME2:
	case FUSE_STATFS:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
	case FUSE_OPENDIR:
	case FUSE_READDIR:
	case FUSE_READDIRPLUS:
	case FUSE_SETXATTR:
	case FUSE_GETXATTR:
	case FUSE_LISTXATTR:
	case FUSE_REMOVEXATTR:
	case FUSE_ACCESS:
	case FUSE_CREATE:
	case FUSE_FALLOCATE:
	case FUSE_LSEEK:
	/* A commit holds the volume lock: nothing could run meanwhile. */
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
		return 1;
	default:
		return 0;
	}
}

static void *worker_main(void *arg);

/*
 * One more worker (lock held).  Workers block every signal, so that the
 * signal handlers libfuse installed run on the main thread, whose wait
 * they interrupt (nx_fuse_loop).
 */
static int start_worker(struct nx_loop *l)
{
	sigset_t all, old;
	int err;

	if (l->nthreads >= NX_LOOP_MAX_THREADS)
		return -1;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	err = pthread_create(&l->threads[l->nthreads], NULL, worker_main, l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return -err;
	l->nthreads++;
	return 0;
}

/* The leader is about to serve a request: someone else takes the lead. */
static void hand_over(struct nx_loop *l)
{
	pthread_mutex_lock(&l->mu);
	l->has_leader = 0;
	if (l->nidle)
		pthread_cond_signal(&l->turn);
	else
		start_worker(l);	/* at the limit: whoever is done first */
	pthread_mutex_unlock(&l->mu);
}

/* Wait until this thread may lead; 0 when the loop ends instead. */
static int take_lead(struct nx_loop *l)
{
	int lead;

	pthread_mutex_lock(&l->mu);
	l->nidle++;
	while (l->has_leader && !l->exiting)
		pthread_cond_wait(&l->turn, &l->mu);
	l->nidle--;
	lead = !l->exiting;
	if (lead)
		l->has_leader = 1;
	pthread_mutex_unlock(&l->mu);
	return lead;
}

static void end_loop(struct nx_loop *l, int res)
{
	pthread_mutex_lock(&l->mu);
	if (!l->exiting)
		l->error = res;
	l->exiting = 1;
	pthread_cond_broadcast(&l->turn);
	pthread_mutex_unlock(&l->mu);
	sem_post(&l->finished);
}

static void free_buf(void *arg)
{
	struct fuse_buf *buf = arg;

	free(buf->mem);
	buf->mem = NULL;
}

/* Lead, follow, serve, until the loop ends. */
static void serve(struct nx_loop *l, struct fuse_buf *buf)
{
	int leader = 0, res;

	for (;;) {
		if (!leader && !(leader = take_lead(l)))
			return;
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		res = fuse_session_receive_buf(l->se, buf);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		if (res == -EINTR)
			continue;
		if (res <= 0) {
			end_loop(l, res);
			return;
		}
		if (!serve_inline(buf)) {
			hand_over(l);
			leader = 0;
		}
		fuse_session_process_buf(l->se, buf);
	}
}

static void *worker_main(void *arg)
{
	struct nx_loop *l = arg;
	struct fuse_buf buf;

	memset(&buf, 0, sizeof(buf));
	/* Cancelled (at unmount or signal) only while waiting for a request. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cleanup_push(free_buf, &buf);
	serve(l, &buf);
	pthread_cleanup_pop(1);
	return NULL;
}

int nx_fuse_loop(struct fuse_session *se)
{
	struct nx_loop *l = calloc(1, sizeof(*l));
	struct timespec at;
	unsigned i;
	int err;

	if (!l)
		return -ENOMEM;
	l->se = se;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->turn, NULL);
	sem_init(&l->finished, 0, 0);
	pthread_mutex_lock(&l->mu);
	err = start_worker(l);
	pthread_mutex_unlock(&l->mu);
	/* Until a worker saw the end, or a signal handler ended the session. */
	while (!err && !fuse_session_exited(se)) {
		clock_gettime(CLOCK_REALTIME, &at);
		at.tv_sec += 1;
		if (sem_timedwait(&l->finished, &at) == 0)
			break;
	}
	pthread_mutex_lock(&l->mu);
	l->exiting = 1;
	pthread_cond_broadcast(&l->turn);
	for (i = 0; i < l->nthreads; i++)
		pthread_cancel(l->threads[i]);
	pthread_mutex_unlock(&l->mu);
	for (i = 0; i < l->nthreads; i++)
		pthread_join(l->threads[i], NULL);
	if (!err)
		err = l->error < 0 ? l->error : 0;
	sem_destroy(&l->finished);
	pthread_cond_destroy(&l->turn);
	pthread_mutex_destroy(&l->mu);
	free(l);
	fuse_session_reset(se);
	return err;
}
