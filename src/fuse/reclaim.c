/*
 * reclaim.c - the daemon's thread that finishes snapshot deletes
 * (fuse_ops.h): a delete returns once the snapshot is unnamed, and the
 * hand-over of what it holds (snapshot.h, nx_snap_reclaim) runs here, one
 * slice per hold of the volume lock, so that no request waits longer
 * than a slice (RECLAIM_SLICE_MS) behind it however much it moves.
 *
 * The thread sleeps until a delete (or the mount, which may find work a
 * crash or an unmount left) wakes it, works until nothing is left,
 * commits, and sleeps again.  Between two slices it lets go of the lock
 * for a moment, so that waiting requests get it first (the mutex is not
 * fair).  A slice that fails (ENOSPC, a read-only volume) is logged and
 * tried again RECLAIM_RETRY_S later or at the next delete.  Stopping at
 * unmount goes on for up to RECLAIM_UMOUNT_MS, which finishes the usual
 * delete (freeing is fast, and so is handing over a few GiB), then ends
 * after the slice in progress: the rest stays on disk, and the next
 * mount goes on with it.
 *
 * NEXTFS_RECLAIM_SLOW=MS (for tests that must catch a hand-over in the
 * middle: a kill, an unmount): slices of one run each, MS apart.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/snapshot.h"
#include "fuse_internal.h"

#define RECLAIM_SLICE_MS	10
#define RECLAIM_PAUSE_US	2000
#define RECLAIM_RETRY_S		5
#define RECLAIM_UMOUNT_MS	2000

struct nx_reclaim {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;		/* kicked or stopped */
	int stop, kicked;
	struct timespec stop_by;	/* with stop: finish until then */
	struct nx_volume *vol;
	unsigned slice_ms;		/* RECLAIM_SLICE_MS, 0 when slow */
	struct timespec pause;		/* between two slices */
};

static int stopping(struct nx_reclaim *r)
{
	struct timespec now;
	int stop;

	clock_gettime(CLOCK_MONOTONIC, &now);
	pthread_mutex_lock(&r->mu);
	stop = r->stop && (now.tv_sec > r->stop_by.tv_sec ||
			   (now.tv_sec == r->stop_by.tv_sec &&
			    now.tv_nsec >= r->stop_by.tv_nsec));
	pthread_mutex_unlock(&r->mu);
	return stop;
}

/* Slices until nothing is left (0), a stop, or a failure (returned). */
static errcode_t reclaim_until_done(struct nx_reclaim *r)
{
	errcode_t err = 0;
	int more = 1, worked = 0;

	while (more && !stopping(r)) {
		nx_volume_lock(r->vol);
		err = nx_snap_reclaim(r->vol, r->slice_ms, &more);
		worked = 1;
		nx_volume_unlock(r->vol);
		if (err)
			break;
		if (more)
			nanosleep(&r->pause, NULL);
	}
	/* Done: make it durable now rather than at the next commit. */
	if (!err && worked && !more) {
		nx_volume_lock(r->vol);
		err = nx_volume_sync(r->vol);
		nx_volume_unlock(r->vol);
	}
	return err;
}

static void *reclaim_main(void *arg)
{
	struct nx_reclaim *r = arg;
	struct timespec due;
	errcode_t err;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		int last = r->stop;

		if (!r->kicked && !last) {
			pthread_cond_wait(&r->cv, &r->mu);
			continue;
		}
		r->kicked = 0;
		pthread_mutex_unlock(&r->mu);
		err = reclaim_until_done(r);
		pthread_mutex_lock(&r->mu);
		if (last)
			break;
		if (!err || r->stop)
			continue;
		fuse_log(FUSE_LOG_ERR, "deleted snapshots: cannot hand over "
			 "their blocks: %s; trying again in %d s\n",
			 strerror(nx_errno(err)), RECLAIM_RETRY_S);
		clock_gettime(CLOCK_REALTIME, &due);
		due.tv_sec += RECLAIM_RETRY_S;
		while (!r->stop && !r->kicked &&
		       pthread_cond_timedwait(&r->cv, &r->mu, &due) != ETIMEDOUT)
			;
		r->kicked = 1;
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int nx_fuse_reclaim_start(struct nx_fuse *fs)
{
	struct nx_reclaim *r = calloc(1, sizeof(*r));
	const char *slow = getenv("NEXTFS_RECLAIM_SLOW");

	if (!r)
		return ENOMEM;
	r->vol = fs->vol;
	r->slice_ms = RECLAIM_SLICE_MS;
	r->pause.tv_nsec = RECLAIM_PAUSE_US * 1000L;
	if (slow && atoi(slow) > 0) {
		r->slice_ms = 0;
		r->pause.tv_sec = atoi(slow) / 1000;
		r->pause.tv_nsec = (atoi(slow) % 1000) * 1000000L;
	}
	r->kicked = 1;		/* the mount may find work left */
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (pthread_create(&r->thread, NULL, reclaim_main, r) != 0) {
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
		return EAGAIN;
	}
	fs->reclaim = r;
	return 0;
}

void nx_fuse_reclaim_kick(struct nx_fuse *fs)
{
	struct nx_reclaim *r = fs->reclaim;

	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->kicked = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

void nx_fuse_reclaim_stop(struct nx_fuse *fs)
{
	struct nx_reclaim *r = fs->reclaim;

	if (!r)
		return;
	clock_gettime(CLOCK_MONOTONIC, &r->stop_by);
	r->stop_by.tv_sec += RECLAIM_UMOUNT_MS / 1000;
	r->stop_by.tv_nsec += (RECLAIM_UMOUNT_MS % 1000) * 1000000L;
	if (r->stop_by.tv_nsec >= 1000000000L) {
		r->stop_by.tv_sec++;
		r->stop_by.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
	fs->reclaim = NULL;
}
