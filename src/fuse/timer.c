/*
 * timer.c - timed snapshots in the daemon (fuse_ops.h, nextfs-fuse(1)
 * snapshot_every / snapshot_keep).
 *
 * Ticks are aligned to the wall clock (every=1h takes at the full hour,
 * UTC), so that the names - which are the tick's second - fall on round
 * times and a remount does not shift the timeline.  A tick that comes
 * while the previous one is still busy is skipped, never queued.  The
 * thread holds the volume lock only inside nx_fuse_snap_take() and
 * nx_fuse_snap_delete(), one snapshot at a time: requests wait for one
 * take or one delete at most, as they would behind mkdir or rmdir.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/periodic.h"
#include "nextfs/retention.h"
#include "nextfs/snapshot.h"
#include "fuse_internal.h"

struct nx_timer {
	struct nx_periodic *thread;	/* wall-clock ticks (periodic.h) */
	struct nx_fuse *fs;
	unsigned every;			/* seconds */
	int prune;			/* keep is set */
	struct nx_keep_spec keep;
};

static errcode_t timer_take(void *arg, const char *name)
{
	return nx_fuse_snap_take(arg, name);
}

/* The names of all snapshots, oldest first (no I/O); free each and *OUT. */
static errcode_t snapshot_names(struct nx_fuse *fs, char ***out, int *count)
{
	struct nx_snapinfo info;
	char **names = NULL;
	errcode_t err = 0;
	int i, n;

	nx_volume_lock(fs->vol);
	n = nx_snap_count(fs->vol);
	names = calloc(n ? n : 1, sizeof(*names));
	for (i = 0; names && i < n && !err; i++) {
		err = nx_snap_peek(fs->vol, i, &info);
		if (!err && !(names[i] = strdup(info.name)))
			err = ENOMEM;
	}
	nx_volume_unlock(fs->vol);
	if (!names)
		err = ENOMEM;
	if (err) {
		for (i = 0; names && i < n; i++)
			free(names[i]);
		free(names);
		return err;
	}
	*out = names;
	*count = n;
	return 0;
}

/*
 * Delete the timeline snapshots T->keep does not keep.  A snapshot taken
 * or deleted by someone else meanwhile only makes a delete fail (ENOENT)
 * or a decision stale by one tick; nothing but timeline names is ever
 * deleted.  Every failure is logged; the first is returned.
 */
static errcode_t timer_prune(struct nx_timer *t)
{
	struct nx_keep_item *items = NULL;
	struct timespec now;
	char **names = NULL;
	errcode_t err, failed = 0;
	int i, n = 0;

	err = snapshot_names(t->fs, &names, &n);
	if (!err && !(items = calloc(n ? n : 1, sizeof(*items))))
		err = ENOMEM;
	if (!err) {
		for (i = 0; i < n; i++)
			items[i].name = names[i];
		clock_gettime(CLOCK_REALTIME, &now);
		err = nx_keep_decide(&t->keep, (int64_t)now.tv_sec, items, n);
	}
	for (i = 0; !err && i < n; i++) {
		errcode_t derr;

		if (items[i].keep)
			continue;
		derr = nx_fuse_snap_delete(t->fs, names[i]);
		if (derr && derr != ENOENT) {
			fuse_log(FUSE_LOG_ERR, "timed snapshots: "
				 "cannot delete %s: %s\n", names[i],
				 strerror(nx_errno(derr)));
			if (!failed)
				failed = derr;
		} else if (!derr) {
			nx_fuse_snapdir_changed(t->fs, names[i]);
		}
	}
	if (err)
		fuse_log(FUSE_LOG_ERR, "timed snapshots: cannot "
			 "prune: %s\n", strerror(nx_errno(err)));
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(items);
	return err ? err : failed;
}

/* One tick (periodic.h): take, then prune; the first failure counts. */
static errcode_t timer_tick(void *arg)
{
	struct nx_timer *t = arg;
	char name[NX_TL_NAME_SIZE];
	errcode_t err = nx_tl_take(timer_take, t->fs, name), perr = 0;

	if (err)
		fuse_log(FUSE_LOG_ERR, "timed snapshot %s failed: "
			 "%s; trying again in %u s\n", name,
			 strerror(nx_errno(err)), t->every);
	else
		nx_fuse_snapdir_changed(t->fs, NULL);
	/* Also after a failed take: pruning may make room for the next. */
	if (t->prune)
		perr = timer_prune(t);
	return err ? err : perr;
}

int nx_fuse_timer_start(struct nx_fuse *fs, unsigned every,
			const struct nx_keep_spec *keep)
{
	struct nx_timer *t;
	errcode_t err;

	if (!fs->vol || nx_volume_rdonly(fs->vol) || !every)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->fs = fs;
	t->every = every;
	if (keep) {
		t->keep = *keep;
		t->prune = 1;
	}
	err = nx_periodic_start(NX_PERIODIC_WALLCLOCK, every, timer_tick, t,
				&t->thread);
	if (err) {
		free(t);
		return -EAGAIN;
	}
	fs->timer = t;
	return 0;
}

void nx_fuse_timer_stop(struct nx_fuse *fs)
{
	struct nx_timer *t = fs->timer;

	if (!t)
		return;
	nx_periodic_join(&t->thread);	/* stops it first */
	free(t);
	fs->timer = NULL;
}
