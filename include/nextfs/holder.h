/*
 * holder.h - who holds a volume, and how to wait for one that lets go.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: whoever opens a volume holds it until everything it wrote is
 * durable.  nx_lock_device() takes an advisory lock on the image or
 * device (exclusive for writers, shared for readers); for writers,
 * nx_claim_device() also opens a block device with O_EXCL, so that a
 * kernel mount or another exclusive opener (mkfs, e2fsck, a second
 * nextfs) gets EBUSY while nextfs has it.
 *
 * A nextfs-fuse daemon also keeps a status channel (nx_holder_start): an
 * abstract Unix socket named after its volume and one named after its
 * mount (nx_holder_volume_key, nx_holder_mount_key).  To every client it
 * says "serving" at once, "finishing" when the kernel has ended the
 * session, and "done" with its exit status and last error after the
 * volume is closed and its lock released; then it hangs up.  A daemon
 * that dies hangs up without "done".  Clients are accepted only from
 * root and the daemon's own user, and check the same of the daemon.
 *
 * "nextfs umount" waits on the mount's channel (or the volume's) of the
 * daemon that names its mountpoint.  nx_lock_device(), when
 * the lock is taken by a daemon that is finishing, waits on the volume's
 * channel for at most NX_HOLDER_WAIT_SECONDS instead of failing "in use";
 * a daemon that is still serving is refused at once, naming its mount.
 */
#ifndef NEXTFS_HOLDER_H
#define NEXTFS_HOLDER_H

#include <limits.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>

/* How long an opener waits for a finishing nextfs-fuse to let go. */
#define NX_HOLDER_WAIT_SECONDS	30

/*
 * Lock DEVICE against other nextfs processes: *FDP holds the lock until
 * closed.  A lock held by a finishing daemon is waited for (see above);
 * otherwise EBUSY with MSG saying who has it.
 */
errcode_t nx_lock_device(const char *device, int exclusive, int *fdp,
			 char *msg, size_t msglen);

/*
 * For a writer: if DEVICE is a block device, claim it (O_EXCL) into *FDP;
 * else *FDP = -1.  EBUSY ("busy (mounted?)") when someone else has.
 */
errcode_t nx_claim_device(const char *device, int *fdp, char *msg,
			  size_t msglen);

/* Channel names (abstract socket addresses, without the leading NUL). */
#define NX_HOLDER_KEY_MAX	64
int nx_holder_volume_key(const char *device, char *key, size_t len);
void nx_holder_mount_key(unsigned major, unsigned minor, char *key,
			 size_t len);

/* ---- daemon side ---- */
struct nx_holder;

/*
 * Bind the channels of DEVICE and of the mount at MOUNTPOINT (found in
 * /proc/self/mountinfo): right after mounting, so that no client finds
 * the mount without them.  A name that is taken (by the daemon of an
 * earlier mount, still finishing) is tried again while serving, for
 * NX_HOLDER_WAIT_SECONDS; one that cannot be bound at all is left out;
 * NULL if neither can be ours.  The mount's name is let go at
 * nx_holder_finishing() (the next mount may get its number).  Then, in the
 * process that serves (after daemonising: a fork keeps no threads),
 * nx_holder_serve() starts answering; clients queue until then.
 */
struct nx_holder *nx_holder_start(const char *device, const char *mountpoint);
int nx_holder_serve(struct nx_holder *h);
/* The session has ended; tell the clients.  H may be NULL. */
void nx_holder_finishing(struct nx_holder *h);
/* Closed and released: tell the clients STATUS and MSG, hang up, free. */
void nx_holder_done(struct nx_holder *h, int status, const char *msg);

/* ---- client side ---- */
enum nx_holder_state {
	NX_HOLDER_NONE,			/* nothing said yet */
	NX_HOLDER_SERVING,
	NX_HOLDER_FINISHING,
	NX_HOLDER_DONE,			/* status and msg are set */
	NX_HOLDER_GONE,			/* hung up without "done" */
};

struct nx_holder_conn {
	int fd;
	size_t len;			/* bytes in buf */
	char buf[8 * PATH_MAX + 1024];	/* one line: escaped paths */
	/* what the daemon said */
	enum nx_holder_state state;
	pid_t pid;
	int status;			/* its exit status ("done") */
	char device[PATH_MAX];
	char mountpoint[PATH_MAX];
	char msg[512];			/* its last error ("done", status != 0) */
};

/*
 * Connect to the channel KEY.  0, or -1 when no daemon answers there (or
 * it runs as a user other than root, ours and ALSO_UID; -1: none).
 */
int nx_holder_connect(const char *key, uid_t also_uid,
		      struct nx_holder_conn *c);
/*
 * Wait up to TIMEOUT_MS (-1: for ever) for the daemon's next word and
 * update C->state.  0 when something new arrived (or it hung up), ETIMEDOUT.
 */
int nx_holder_next(struct nx_holder_conn *c, int timeout_ms);
void nx_holder_disconnect(struct nx_holder_conn *c);

/* ---- mounts ---- */
struct nx_mountinfo {
	unsigned major, minor;		/* st_dev of the mounted file system */
	char fstype[64];		/* "fuse.nextfs", "fuseblk.nextfs", ... */
	char source[PATH_MAX];		/* what was mounted (nextfs: the volume) */
	uid_t owner;			/* FUSE: user_id=, the mounting user; or -1 */
};

/*
 * The topmost mount at MOUNTPOINT (an absolute path without symlinks) in
 * /proc/self/mountinfo.  0, ENOENT if nothing is mounted there, errno.
 */
int nx_mountinfo_find(const char *mountpoint, struct nx_mountinfo *mi);

#endif
