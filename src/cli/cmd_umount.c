/*
 * cmd_umount.c - "nextfs umount [-v] MOUNTPOINT": unmount a nextfs-fuse
 * mount and return only when its daemon has written everything back and
 * released the volume, with its verdict.
 *
 * The kernel forgets a plain FUSE mount the moment umount returns; the
 * daemon only then hears of it and still commits, empties the journal
 * and marks the volume clean.  So: before unmounting, connect to the
 * daemon's status channel for this mount (holder.h; its name comes from
 * the mount's MAJ:MIN in /proc/self/mountinfo; the daemon must name our
 * mountpoint: see connect_daemon), unmount (umount2() as
 * root, fusermount3 -u for a user's own mount), then read what the
 * daemon says until "done" - with its exit status and last error - or
 * until it hangs up without (it died).  A daemon that never says
 * "finishing" still serves: the file system is mounted elsewhere too.
 * Without a channel (a daemon that already died, or one in another
 * network namespace) we wait for the volume lock of the mount's source.
 *
 * As an umount helper (/sbin/umount.nextfs, umount.fuse.nextfs and
 * umount.fuseblk.nextfs are links to nextfs: nextfs.c; mount_helper.c says
 * why umount(8) finds them): umount(8) calls helpers as
 * "HELPER MOUNTPOINT [-flnrv] [-t TYPE]"; -n, -v and -t TYPE are accepted
 * here, and the unmount itself never goes through umount(8), so a helper
 * cannot call itself.
 *
 * Exit status: 0 unmounted, written back and released; 1 nothing
 * unmounted (not mounted, busy, not nextfs); 2 usage; 3 unmounted, but
 * the daemon ended badly or did not let go (what it said is printed).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include "nextfs/holder.h"
#include "nextfs/safepath.h"
#include "cli.h"

#define UMOUNT_DAEMON_FAILED	3

/* How long a daemon may take to notice its mount is gone. */
#define FINISHING_WAIT_MS	10000

extern char **environ;

struct umount_ctx {
	char path[PATH_MAX];
	struct nx_mountinfo mi;
	struct nx_holder_conn *conn;	/* NULL without a channel */
	int verbose;
};

/*
 * The mount point as mountinfo spells it.  A dead FUSE mount (ENOTCONN)
 * or one we may not look into (EACCES: another user's) cannot be
 * resolved itself: resolve its directory and add the name.
 */
static int mount_path(const char *arg, char *out)
{
	char *r = realpath(arg, NULL), *copy, *dir, *base;
	int e;

	if (r) {
		snprintf(out, PATH_MAX, "%s", r);
		free(r);
		return 0;
	}
	e = errno;
	if (e != ENOTCONN && e != EACCES)
		return e;
	copy = strdup(arg);
	if (!copy)
		return ENOMEM;
	base = basename(copy);
	r = strdup(base);
	dir = realpath(dirname(copy), NULL);
	if (dir && r)
		snprintf(out, PATH_MAX, "%s%s%s", dir,
			 strcmp(dir, "/") ? "/" : "", r);
	e = dir && r ? 0 : e;
	free(dir);
	free(r);
	free(copy);
	return e;
}

static int is_nextfs_type(const char *fstype)
{
	return !strcmp(fstype, "fuse.nextfs") ||
	       !strcmp(fstype, "fuseblk.nextfs");
}

/*
 * Is the daemon on the channel KEY the one of this very mount?  It says
 * so first: "serving PID DEVICE MOUNTPOINT".  (It may already be
 * finishing: its lines can come together.)
 */
static int serves_this_mount(struct umount_ctx *u, const char *key,
			     struct nx_holder_conn *c, int wait_ms)
{
	if (nx_holder_connect(key, u->mi.owner, c) != 0)
		return 0;
	if (nx_holder_next(c, wait_ms) == 0 && c->state != NX_HOLDER_NONE &&
	    c->state != NX_HOLDER_GONE && !strcmp(c->mountpoint, u->path))
		return 1;
	nx_holder_disconnect(c);
	return 0;
}

/*
 * How long to look for the channel.  The kernel gives a mount's number
 * to the next mount as soon as it forgets the mount, so the daemon of an
 * earlier mount with our number may still have the name when ours comes
 * up (it is finishing, or has just said "done"); ours binds the name once
 * that one has let go (holder.c).  Meanwhile the volume's channel may
 * answer.  Without the daemon we could only wait for the volume lock,
 * and the shared lock of -o ro is no wait at all.
 */
#define CONNECT_TRIES		30
#define CONNECT_RETRY_MS	100
#define HELLO_WAIT_MS		2000	/* first: a busy daemon may be slow */
#define HELLO_AGAIN_MS		200

/* The daemon's channel for this mount, if it answers. */
static void connect_daemon(struct umount_ctx *u)
{
	char mkey[NX_HOLDER_KEY_MAX], vkey[NX_HOLDER_KEY_MAX];
	struct nx_holder_conn *c = malloc(sizeof(*c));
	int nextfs = is_nextfs_type(u->mi.fstype), vol, tries;
	struct statfs sfs;

	if (!c)
		return;
	nx_holder_mount_key(u->mi.major, u->mi.minor, mkey, sizeof(mkey));
	vol = nextfs && nx_holder_volume_key(u->mi.source, vkey,
					      sizeof(vkey)) == 0;
	for (tries = 0;; tries++) {
		int wait = tries ? HELLO_AGAIN_MS : HELLO_WAIT_MS;

		if (serves_this_mount(u, mkey, c, wait) ||
		    (vol && serves_this_mount(u, vkey, c, wait))) {
			u->conn = c;
			return;
		}
		if (!nextfs || tries == CONNECT_TRIES)
			break;
		/* A dead daemon answers nowhere (statfs: see below). */
		if (!tries && statfs(u->path, &sfs) != 0 && errno == ENOTCONN)
			break;
		usleep(CONNECT_RETRY_MS * 1000);
	}
	free(c);
}

static int run_fusermount(const char *path)
{
	char *argv[] = { "fusermount3", "-u", "--", (char *)path, NULL };
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) &&
	    posix_spawn(&pid, "/bin/fusermount3", NULL, NULL, argv,
			environ)) {
		nx_cli_error("umount: cannot run fusermount3");
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/*
 * As root: unmount exactly the mount found at u->path.  umount2(path)
 * would walk the path again, and a user who owns a directory on the way
 * could have swapped it for a link to another mountpoint meanwhile.  So
 * the directory holding the mountpoint is opened, the mount on its entry
 * checked (safepath.h: the root of the mount mountinfo lists at u->path,
 * with the device found there), and the entry unmounted from within
 * that directory: umount2(NAME, UMOUNT_NOFOLLOW) with it as the working
 * directory.  (Unmounting through a descriptor of the mount itself is
 * not possible: the descriptor keeps the mount busy.)  O_PATH: a daemon
 * that died cannot answer.
 */
static int unmount_pinned(struct umount_ctx *u)
{
	char *slash = strrchr(u->path, '/'), *dir;
	int parent = -1, here = -1, fd, rc = -1, e = EINVAL;
	struct nx_sp_mount m;
	struct statx sx;

	if (!slash || !slash[1]) {
		errno = EINVAL;
		return -1;
	}
	dir = strndup(u->path, slash == u->path ? 1 : (size_t)(slash -
								u->path));
	if (dir)
		parent = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	fd = parent < 0 ? -1 : openat(parent, slash + 1, O_PATH | O_DIRECTORY |
				      O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || nx_sp_mount_pin(fd, u->path, NX_SP_FUSE |
				      NX_SP_PATH_ONLY, &m)) {
		e = errno;
		goto out;
	}
	rc = statx(m.fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, 0, &sx);
	nx_sp_mount_close(&m);		/* it would keep the mount busy */
	if (rc || sx.stx_dev_major != u->mi.major ||
	    sx.stx_dev_minor != u->mi.minor) {
		e = ESTALE;
		rc = -1;
		goto out;
	}
	here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	rc = -1;
	if (here >= 0 && fchdir(parent) == 0) {
		rc = umount2(slash + 1, UMOUNT_NOFOLLOW);
		e = errno;
		if (fchdir(here) < 0) {
			/* gone meanwhile: nothing after uses it */
		}
	} else {
		e = errno;
	}
out:
	if (here >= 0)
		close(here);
	if (parent >= 0)
		close(parent);
	errno = e;
	return rc;
}

static int do_unmount(struct umount_ctx *u)
{
	if (geteuid() != 0)
		return run_fusermount(u->path);	/* it says why not */
	if (unmount_pinned(u) == 0)
		return 0;
	if (errno == EBUSY)
		nx_cli_error("%s is busy (a process has a file open there, or "
			     "its working directory); nothing was unmounted",
			     u->path);
	else
		nx_cli_error("cannot unmount %s: %s", u->path,
			     nx_sp_why(errno));
	return -1;
}

/* With a channel: "finishing" soon, then "done" or a hang-up. */
static int wait_for_daemon(struct umount_ctx *u)
{
	struct nx_holder_conn *c = u->conn;

	if (c->state == NX_HOLDER_SERVING &&
	    nx_holder_next(c, FINISHING_WAIT_MS) == ETIMEDOUT) {
		nx_cli_error("%s is unmounted, but nextfs-fuse (pid %ld) still "
			     "serves %s: the file system is mounted elsewhere "
			     "too (a bind mount, or another mount namespace); "
			     "unmount that", u->path, (long)c->pid, c->device);
		return UMOUNT_DAEMON_FAILED;
	}
	if (u->verbose && c->state == NX_HOLDER_FINISHING)
		printf("unmounted %s; waiting for nextfs-fuse (pid %ld) to "
		       "write %s back\n", u->path, (long)c->pid, c->device);
	while (c->state != NX_HOLDER_DONE && c->state != NX_HOLDER_GONE)
		nx_holder_next(c, -1);
	if (c->state == NX_HOLDER_GONE) {
		nx_cli_error("%s: nextfs-fuse (pid %ld) ended without saying "
			     "how it left %s (killed?); check it with 'nextfs "
			     "check %s'", u->path, (long)c->pid, c->device,
			     c->device);
		return UMOUNT_DAEMON_FAILED;
	}
	if (c->status) {
		nx_cli_error("%s: nextfs-fuse: %s", u->path, c->msg[0] ?
			     c->msg : "ended with an error");
		return UMOUNT_DAEMON_FAILED;
	}
	if (u->verbose)
		printf("%s: written back and released\n", c->device);
	return NX_CLI_OK;
}

static void on_alarm(int sig)
{
	(void)sig;	/* only interrupts flock() */
}

/* Without a channel: the volume lock says when the daemon let go. */
static int wait_for_lock(struct umount_ctx *u, int was_dead)
{
	struct sigaction sa;
	int fd = open(u->mi.source, O_RDONLY | O_CLOEXEC), got;

	if (fd >= 0) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_alarm;	/* no SA_RESTART */
		sigaction(SIGALRM, &sa, NULL);
		alarm(NX_HOLDER_WAIT_SECONDS);
		got = flock(fd, LOCK_SH) == 0;
		alarm(0);
		close(fd);
		if (!got) {
			nx_cli_error("%s is unmounted, but %s is still held "
				     "after %d s", u->path, u->mi.source,
				     NX_HOLDER_WAIT_SECONDS);
			return UMOUNT_DAEMON_FAILED;
		}
	}
	if (was_dead) {
		nx_cli_error("%s: its nextfs-fuse had died before the unmount "
			     "(crashed or killed); check the volume with "
			     "'nextfs check %s'", u->path, u->mi.source);
		return UMOUNT_DAEMON_FAILED;
	}
	if (u->verbose)
		printf("unmounted %s (nextfs-fuse gave no status)\n", u->path);
	return NX_CLI_OK;
}

int nx_cmd_umount(struct nx_cli_args *a)
{
	const char *target = a->pos[0];
	struct umount_ctx u;
	struct statfs sfs;
	int ret, e, dead = 0;

	memset(&u, 0, sizeof(u));
	u.verbose = a->opt[NX_OPT_VERBOSE];
	e = mount_path(target, u.path);
	if (e) {
		nx_cli_error("%s: %s", target, strerror(e));
		return NX_CLI_FAIL;
	}
	e = nx_mountinfo_find(u.path, &u.mi);
	if (e) {
		nx_cli_error("%s: %s", u.path, e == ENOENT ? "not mounted" :
			     strerror(e));
		return NX_CLI_FAIL;
	}
	connect_daemon(&u);
	if (!u.conn && !is_nextfs_type(u.mi.fstype)) {
		nx_cli_error("%s is not a nextfs mount (%s); use umount or "
			     "fusermount3 -u", u.path, u.mi.fstype);
		return NX_CLI_FAIL;
	}
	/*
	 * No channel: has its daemon died?  statfs always asks the daemon
	 * (stat may be answered from the kernel's attribute cache).
	 */
	if (!u.conn && statfs(u.path, &sfs) != 0 && errno == ENOTCONN)
		dead = 1;
	if (do_unmount(&u) != 0)
		ret = NX_CLI_FAIL;
	else if (u.conn)
		ret = wait_for_daemon(&u);
	else
		ret = wait_for_lock(&u, dead);
	if (u.conn)
		nx_holder_disconnect(u.conn);
	free(u.conn);
	return ret;
}
