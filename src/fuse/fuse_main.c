/*
 * fuse_main.c - one mount of a volume, from session creation to close.
 *
 * Order matters for the user: everything that can fail with a useful
 * message (FUSE options, opening the volume, mounting) happens before we
 * daemonise, while stderr is still the user's terminal.  After that,
 * messages go to syslog.  The volume is closed (and so marked clean) only
 * after the kernel can no longer send requests.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/holder.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/periodic.h"
#include "nextfs/perm.h"
#include "nextfs/reserve.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"

static int log_to_syslog;
static char last_error[512];	/* the last nx_err() line: for "done" */

/*
 * Every libfuse and nextfs message: to syslog once in the background,
 * else to stderr with our prefix at the start of each line (libfuse
 * sometimes builds one line from several calls).
 */
static void nx_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
	static int at_line_start = 1;
	char buf[1024];
	size_t len;

	if (log_to_syslog) {
		vsyslog((int)level, fmt, ap);
		return;
	}
	vsnprintf(buf, sizeof(buf), fmt, ap);
	len = strlen(buf);
	if (!len)
		return;
	if (at_line_start && level <= FUSE_LOG_NOTICE)
		fputs("nextfs-fuse: ", stderr);
	fputs(buf, stderr);
	at_line_start = buf[len - 1] == '\n';
}

static void nx_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	va_start(ap, fmt);
	if (log_to_syslog) {
		vsyslog(LOG_ERR, fmt, ap);
	} else {
		fputs("nextfs-fuse: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

static void go_background(void)
{
	openlog("nextfs-fuse", LOG_PID, LOG_DAEMON);
	log_to_syslog = 1;
}

/* One thread with -s, else nx_fuse_loop() (loop.c says why not libfuse's). */
static int run_loop(struct fuse_session *se, int singlethread)
{
	if (singlethread)
		return fuse_session_loop(se);
	return nx_fuse_loop(se);
}

/*
 * The commit timer: once a second (after the previous one) it takes the
 * volume lock and lets nx_volume_unlock() commit the running transaction
 * if it is due (txn.h), so that changes become durable within a few
 * seconds even when no further request arrives.
 */
#define NX_COMMIT_CHECK_SECONDS 1

static errcode_t commit_tick(void *arg)
{
	struct nx_volume *vol = arg;

	nx_volume_lock(vol);
	nx_volume_unlock(vol);	/* commits when the transaction is due */
	return 0;
}

/*
 * The daemon's threads, started once mounted: the commit timer
 * (periodic.h), the hand-over of deleted snapshots (reclaim.c), and the
 * snapshot timer if asked for (timer.c).  A read-only volume has none.
 */
static void start_threads(struct nx_fuse *fs, const struct nx_fuse_config *cfg)
{
	if (fs->vol && !nx_volume_rdonly(fs->vol) &&
	    nx_periodic_start(NX_PERIODIC_INTERVAL, NX_COMMIT_CHECK_SECONDS,
			      commit_tick, fs->vol, &fs->committer) != 0)
		nx_err("cannot start the commit timer; changes become durable "
		       "at fsync and unmount only");
	if (fs->vol && !nx_volume_rdonly(fs->vol) &&
	    nx_fuse_reclaim_start(fs) != 0)
		nx_err("cannot start the thread that finishes snapshot "
		       "deletes; they finish at the next mount");
	if (cfg->snapshot_every &&
	    nx_fuse_timer_start(fs, cfg->snapshot_every,
				cfg->snapshot_keep) != 0)
		nx_err("cannot start the snapshot timer; no timed snapshots "
		       "will be taken");
}

/*
 * ... and stopped here alone, before the volume closes: in destroy (a
 * fuseblk unmount, where destroy runs while the loop still serves the
 * last requests) or after the request loop returns (a plain mount),
 * whichever comes first; the second call finds nothing to stop.  The
 * snapshot timer goes first: its takes and deletes commit.
 */
static void stop_threads(struct nx_fuse *fs)
{
	nx_fuse_timer_stop(fs);
	nx_fuse_reclaim_stop(fs);
	nx_periodic_join(&fs->committer);
}

/*
 * The end of a session.  A plain FUSE mount ends when the request loop
 * sees the connection go, after umount has returned; destroy then runs
 * from fuse_session_destroy(), alone.  A fuseblk mount ends with a
 * DESTROY request that umount waits for: destroy runs in a worker while
 * others may still be answering the last FORGETs the kernel queued when
 * it evicted the inodes.  Those must be done with the volume before
 * destroy closes it, and none may start after: the gate below.  Both ways
 * the status channel hears "finishing" first (holder.h).
 */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int closing;		/* destroy has begun: no forget may start */
	unsigned forgets;	/* forgets in progress */
	struct nx_holder *holder;
} life = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL };

static int forget_begin(void)
{
	int ok;

	pthread_mutex_lock(&life.mu);
	ok = !life.closing;
	if (ok)
		life.forgets++;
	pthread_mutex_unlock(&life.mu);
	return ok;
}

static void forget_end(void)
{
	pthread_mutex_lock(&life.mu);
	if (!--life.forgets)
		pthread_cond_broadcast(&life.cv);
	pthread_mutex_unlock(&life.mu);
}

/* Forgets after destroy began change nothing: destroy frees them all. */
static void life_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	if (!forget_begin()) {
		fuse_reply_none(req);
		return;
	}
	nx_fuse_image_ops.forget(req, ino, nlookup);
	forget_end();
}

static void life_forget_multi(fuse_req_t req, size_t count,
			      struct fuse_forget_data *forgets)
{
	if (!forget_begin()) {
		fuse_reply_none(req);
		return;
	}
	nx_fuse_image_ops.forget_multi(req, count, forgets);
	forget_end();
}

static void life_destroy(void *userdata)
{
	pthread_mutex_lock(&life.mu);
	life.closing = 1;
	while (life.forgets)
		pthread_cond_wait(&life.cv, &life.mu);
	pthread_mutex_unlock(&life.mu);
	nx_holder_finishing(life.holder);
	stop_threads(userdata);
	nx_fuse_image_ops.destroy(userdata);
}

/* What the session runs: the operations, with the gate around them. */
static struct fuse_lowlevel_ops session_ops(void)
{
	struct fuse_lowlevel_ops ops = nx_fuse_image_ops;

	ops.forget = life_forget;
	ops.forget_multi = life_forget_multi;
	ops.destroy = life_destroy;
	return ops;
}

/*
 * If the kernel never completed INIT, destroy never ran: release and
 * close here.  Returns the close result either way.
 */
static errcode_t close_volume(struct nx_fuse *fs)
{
	errcode_t err = 0;

	if (fs->vol) {
		nx_volume_lock(fs->vol);
		err = nx_nodes_release_all(fs->nodes, fs->vol);
		nx_volume_unlock(fs->vol);
		fs->close_err = nx_volume_close(fs->vol);
		if (!fs->close_err)
			fs->close_err = err;
		fs->vol = NULL;
	}
	return fs->close_err;
}

static int open_volume(struct nx_fuse *fs, const struct nx_fuse_config *cfg)
{
	char msg[512];
	errcode_t err;

	/* -o ro serves what it can: the live tree without broken snapshots. */
	err = nx_open_volume(cfg->device, cfg->rdonly ?
			     NX_VOL_RDONLY | NX_VOL_SALVAGE : 0,
			     &fs->vol, msg, sizeof(msg));
	if (err) {
		fs->vol = NULL;
		nx_err("%s", msg[0] ? msg : error_message(err));
		return -1;
	}
	/*
	 * Writers without the right stop at the root-reserved blocks, and
	 * none takes the room a snapshot take needs (snapshot.h).
	 */
	if (!nx_volume_rdonly(fs->vol)) {
		nx_reserve_install(fs->vol);
		nx_snap_keep_headroom(fs->vol);
	}
	return 0;
}

/*
 * A user who mounts a volume whose root directory they may not write
 * (mke2fs leaves it to root) would find out only from an EACCES later,
 * with the daemon in the background: say so now, and what helps.
 */
static void warn_if_root_not_writable(const struct nx_fuse *fs,
				      const struct nx_fuse_config *cfg)
{
	struct ext2_inode_large root;
	struct nx_cred me;

	if (cfg->rdonly || getuid() == 0)
		return;
	nx_cred_self(&me);
	nx_idmap_cred(&fs->idmap, &me);
	nx_volume_lock(fs->vol);
	if (nx_inode_read(fs->vol, EXT2_ROOT_INO, &root) == 0 &&
	    nx_perm_access(&me, (struct ext2_inode *)&root, W_OK | X_OK))
		nx_err("warning: the root directory of %s belongs to uid %u "
		       "gid %u (mode %04o): you cannot create files in it; "
		       "-o fakeroot lets you act as its owner (see "
		       "nextfs-fuse(1))", cfg->device,
		       inode_uid(root), inode_gid(root),
		       root.i_mode & 07777);
	nx_volume_unlock(fs->vol);
}

/*
 * Write N to the readahead knob of the mount on the directory MOUNT_FD,
 * held since its path was resolved: the mount is found from that
 * directory (nx_sp_mount_over), never by its path, so a user who renames
 * a directory of the path meanwhile can neither point this at another
 * mount nor make it wait on a FUSE mount of theirs.  A fuseblk mount's
 * knob is "MAJ:MIN-fuseblk" (MAJ:MIN alone is its device's own).
 */
static int write_read_ahead(int mount_fd, unsigned n)
{
	char path[128], type[64];
	unsigned maj, min;
	FILE *f;
	int ok;

	if (mount_fd < 0 || nx_sp_mount_over(mount_fd, &maj, &min, type,
					     sizeof(type)) != 0)
		return 0;
	if (strncmp(type, "fuse", 4)) {
		errno = ENOTCONN;	/* unmounted meanwhile: not ours */
		return 0;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u%s/read_ahead_kb",
		 maj, min, strncmp(type, "fuseblk", 7) ? "" : "-fuseblk");
	f = fopen(path, "we");
	ok = f && fprintf(f, "%u\n", n) > 0;
	if (f && fclose(f) != 0)
		ok = 0;
	return ok;
}

/*
 * Set the mount's readahead window (nx_fuse_config.read_ahead_kb), right
 * after mounting, before the request loop answers INIT: the kernel caps
 * the window with the INIT reply's max_readahead then, which nx_op_init
 * makes at least as large (fuse_ops.c), so the window stays.  Files are
 * opened only after INIT, with the window set.
 */
static void set_read_ahead(const struct nx_fuse_config *cfg)
{
	if (!cfg->read_ahead_kb ||
	    write_read_ahead(cfg->mount_fd, cfg->read_ahead_kb))
		return;
	/* Unprivileged mounts cannot: only say so when it was asked for. */
	if (cfg->read_ahead_given)
		nx_err("cannot set read_ahead_kb=%u: %s", cfg->read_ahead_kb,
		       strerror(errno));
}

/*
 * fuseblk: the kernel claims the device at mount, so ours must go first;
 * if the mount fails, ours comes back before anything more is written.
 * The mount goes on MOUNT_NAME when there is one: the directory MOUNTPOINT
 * was resolved to, not whatever its path leads to by now (and libfuse
 * unmounts through the same name).
 */
static int mount_session(struct fuse_session *se, struct nx_fuse *fs,
			 const struct nx_fuse_config *cfg)
{
	char msg[512];

	if (cfg->blkdev)
		nx_volume_release_claim(fs->vol);
	if (fuse_session_mount(se, cfg->mount_name ? cfg->mount_name :
			       cfg->mountpoint) == 0)
		return 0;
	if (cfg->blkdev && nx_volume_reclaim(fs->vol, msg, sizeof(msg)))
		nx_err("%s", msg);
	else
		nx_err("cannot mount %s on %s", cfg->device, cfg->mountpoint);
	return -1;
}

/*
 * Where the mount is now, as mountinfo spells it, for the status channel
 * (holder.h): where the directory it went on is (readlink of MOUNT_NAME,
 * when that is /proc/self/fd/N: renamed meanwhile, it took the mount
 * along), else MOUNTPOINT.  Malloced, or NULL.
 */
static char *mounted_at(const struct nx_fuse_config *cfg)
{
	char buf[PATH_MAX];
	ssize_t n = -1;

	if (cfg->mount_name && !strncmp(cfg->mount_name, "/proc/self/fd/", 14))
		n = readlink(cfg->mount_name, buf, sizeof(buf) - 1);
	if (n <= 0 || buf[0] != '/')
		return strdup(cfg->mountpoint);
	buf[n] = 0;
	return strdup(buf);
}

/*
 * The largest read the kernel may send: NX_MAX_READ (fuse_ops.h says
 * why), or less if the user asked for less with -o max_read=N.  libfuse
 * wants the INIT reply to name the same value as the mount option, so
 * both come from FS->max_read.
 */
static int set_max_read(struct nx_fuse *fs, struct fuse_args *args)
{
	static const struct fuse_opt opts[] = {
		{ "max_read=%u", 0, 0 },
		FUSE_OPT_END
	};
	unsigned user = 0;
	char opt[64];

	/* Takes the option out of ARGS; it goes back in below. */
	if (fuse_opt_parse(args, &user, opts, NULL) != 0)
		return -1;
	fs->max_read = user && user < NX_MAX_READ ? user : NX_MAX_READ;
	snprintf(opt, sizeof(opt), "-omax_read=%u", fs->max_read);
	return fuse_opt_add_arg(args, opt);
}

int nx_fuse_main(const struct nx_fuse_config *cfg)
{
	struct fuse_lowlevel_ops base, ops;
	struct nx_fuse fs;
	struct fuse_session *se = NULL;
	int status = NX_EXIT_USAGE, mounted = 0, handlers = 0, ret;
	char *where;
	errcode_t err;

	memset(&fs, 0, sizeof(fs));
	fs.timeout = NX_FUSE_TIMEOUT;
	nx_idmap_init(&fs.idmap, cfg->fakeroot);
	fs.ino32 = cfg->ino32;
	fs.read_ahead_kb = cfg->read_ahead_kb;
	fs.snap_group_set = cfg->snapshot_group;
	fs.snap_group = cfg->snapshot_gid;
	fuse_set_log_func(nx_log);
	fs.nodes = nx_nodes_new();
	if (!fs.nodes) {
		nx_err("out of memory");
		return NX_EXIT_USAGE;
	}
	/* Validates the FUSE options before anything touches the volume. */
	if (set_max_read(&fs, cfg->args) != 0)
		goto out;
	base = session_ops();
	nx_fuse_opstats_wrap(&base, &ops);
	se = fuse_session_new(cfg->args, &ops, sizeof(ops), &fs);
	if (!se)
		goto out;
	fs.se = se;
	/* Early, so that a signal during mount still unmounts cleanly. */
	if (fuse_set_signal_handlers(se) != 0) {
		nx_err("cannot install signal handlers");
		goto out;
	}
	handlers = 1;
	if (open_volume(&fs, cfg) != 0) {
		status = NX_EXIT_REFUSED;
		goto out;
	}
	warn_if_root_not_writable(&fs, cfg);
	if (mount_session(se, &fs, cfg) != 0)
		goto out;
	mounted = 1;
	set_read_ahead(cfg);
	where = mounted_at(cfg);
	life.holder = nx_holder_start(cfg->device, where ? where :
				      cfg->mountpoint);
	free(where);
	if (fuse_daemonize(cfg->foreground) != 0) {
		nx_err("cannot go to the background");
		goto out;
	}
	if (!cfg->foreground)
		go_background();
	/* After daemonizing: a fork keeps only the calling thread. */
	if (nx_holder_serve(life.holder) != 0 && life.holder)
		nx_err("cannot answer on the status channel; nextfs umount "
		       "will wait for the volume lock instead");
	start_threads(&fs, cfg);
	ret = run_loop(se, cfg->singlethread);
	nx_holder_finishing(life.holder);
	last_error[0] = 0;	/* only what goes wrong from here is news */
	stop_threads(&fs);
	/*
	 * An aborted connection (fusectl abort, umount -f) ends the session
	 * like an unmount: the kernel sends nothing more, and we still
	 * unmount and close the volume cleanly below.
	 */
	if (ret == -ECONNABORTED)
		nx_err("the kernel aborted the connection; closing the volume");
	else if (ret < 0)
		nx_err("request loop failed: %s", strerror(-ret));
	if (ret >= 0 || ret == -ECONNABORTED)
		status = NX_EXIT_OK;
out:
	if (se) {
		if (mounted)
			fuse_session_unmount(se);
		if (handlers)
			fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);	/* runs destroy: closes */
	}
	err = close_volume(&fs);
	if (err) {
		nx_err("%s: error writing the volume back: %s", cfg->device,
		       error_message(err));
		status = NX_EXIT_USAGE;
	}
	nx_nodes_free(fs.nodes);
	/* Closed and unlocked: whoever waits may go on. */
	nx_holder_done(life.holder, status, status ? last_error : "");
	life.holder = NULL;
	if (log_to_syslog)
		closelog();
	return status;
}
