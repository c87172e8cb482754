/*
 * nextfs_fuse.c - the nextfs-fuse command: argument parsing and checks.
 *
 * nextfs-fuse [-f] [-d] [-s] [-o OPTIONS] IMAGE_OR_DEVICE MOUNTPOINT
 *
 * Our own options are taken out with fuse_opt_parse(); every other -o
 * option goes to libfuse, which rejects what it does not know.  We
 * always add default_permissions (the kernel enforces the permission
 * model), fsname=<image> and subtype=nextfs unless the user named them.
 *
 * Block devices: as root they are mounted as fuseblk unless -o noblkdev
 * says otherwise.  Then the kernel itself claims the device (no kernel
 * mount or exclusive opener gets it) and a plain umount waits until the
 * daemon has written everything back (FUSE_DESTROY).  Without fuseblk the
 * daemon claims the device with O_EXCL, and "nextfs umount" waits.
 *
 * Both paths are resolved once, under the rules of safepath.h (root may
 * be mounting on or serving paths through other users' directories): the
 * volume's name is pinned to the file found (devname.h), and root mounts
 * on the very directory found (nx_sp_mount_name).  docs/paths.md.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fuse_opt.h>
#include "nextfs/crc32c.h"
#include "nextfs/devname.h"
#include "nextfs/retention.h"
#include "nextfs/safepath.h"

#define PROG "nextfs-fuse"

struct cli {
	char *device;
	char *mountpoint;
	int foreground, singlethread, rdonly;
	int blkdev;			/* -1 default, 0 noblkdev, 1 blkdev */
	int help, version;
	int ino32;			/* -o ino32 */
	int auto_unmount;		/* -o auto_unmount (libfuse's) */
	int have_fsname, have_subtype, have_default_permissions;
	int fakeroot;			/* -o fakeroot: ours, not libfuse's */
	char *read_ahead;		/* -o read_ahead_kb=N as given */
	char *snapshot_every;		/* -o snapshot_every=DURATION */
	char *snapshot_keep;		/* -o snapshot_keep=SPEC */
	char *snapshot_group;		/* -o snapshot_group=GROUP */
};

enum {
	KEY_HELP, KEY_VERSION, KEY_FOREGROUND, KEY_DEBUG, KEY_SINGLE,
	KEY_RO, KEY_RW, KEY_FSNAME, KEY_SUBTYPE, KEY_DEFAULT_PERMISSIONS,
	KEY_BLKDEV, KEY_NOBLKDEV, KEY_AUTO_UNMOUNT,
};

static const struct fuse_opt cli_opts[] = {
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("--debug", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_KEY("-s", KEY_SINGLE),
	FUSE_OPT_KEY("ro", KEY_RO),
	FUSE_OPT_KEY("rw", KEY_RW),
	FUSE_OPT_KEY("fsname=", KEY_FSNAME),
	FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
	FUSE_OPT_KEY("default_permissions", KEY_DEFAULT_PERMISSIONS),
	FUSE_OPT_KEY("blkdev", KEY_BLKDEV),
	FUSE_OPT_KEY("noblkdev", KEY_NOBLKDEV),
	FUSE_OPT_KEY("auto_unmount", KEY_AUTO_UNMOUNT),
	{ "read_ahead_kb=%s", offsetof(struct cli, read_ahead), 0 },
	{ "fakeroot", offsetof(struct cli, fakeroot), 1 },
	{ "ino32", offsetof(struct cli, ino32), 1 },
	{ "snapshot_every=%s", offsetof(struct cli, snapshot_every), 0 },
	{ "snapshot_keep=%s", offsetof(struct cli, snapshot_keep), 0 },
	{ "snapshot_group=%s", offsetof(struct cli, snapshot_group), 0 },
	FUSE_OPT_END
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-f] [-d] [-s] [-o OPTIONS] IMAGE_OR_DEVICE MOUNTPOINT\n"
"\n"
"Serve an ext2, ext3 or ext4 file system image or block device at\n"
"MOUNTPOINT through FUSE.  Unmount with 'nextfs umount MOUNTPOINT': it\n"
"returns once everything is written back and the volume is released,\n"
"so 'nextfs umount MNT && e2fsck -fn IMAGE' checks the final image\n"
"(fusermount3 -u returns while the daemon is still writing).\n"
"\n"
"Options:\n"
"  -f               stay in the foreground\n"
"  -d               print every FUSE request (implies -f)\n"
"  -s               handle one request at a time (single thread)\n"
"  -o ro            open the volume read-only: nothing is ever written\n"
"  -o blkdev        mount a block device as fuseblk: the kernel holds the\n"
"                   device and a plain umount waits for the write-back\n"
"                   (the default for root on a block device; root only)\n"
"  -o noblkdev      a plain FUSE mount even then (nextfs-fuse holds the\n"
"                   device with O_EXCL itself; unmount with nextfs umount)\n"
"  -o OPT[,OPT...]  FUSE mount options, e.g. allow_other, allow_root,\n"
"                   auto_unmount, fsname=NAME, subtype=TYPE, max_read=N\n"
"  -o read_ahead_kb=N  kernel readahead for files of this mount, in KiB\n"
"                   (default 4096; 0 leaves the kernel's 128; set only\n"
"                   when the daemon may write /sys/class/bdi, i.e. root)\n"
"  -o fakeroot      act as the volume's root: files root owns on the\n"
"                   volume show as yours, what you create is recorded as\n"
"                   root's (for images made by root; see the man page)\n"
"  -o ino32         inode numbers of snapshot files fit 32 bits, for old\n"
"                   32-bit programs; they may then collide (see the man\n"
"                   page); default: 64-bit numbers, never colliding\n"
"  -o snapshot_every=DURATION  take a snapshot named @GMT-YYYY.MM.DD-\n"
"                   HH.MM.SS (UTC) whenever the time is a multiple of\n"
"                   DURATION (30s, 15m, 1h, 1d, ...)\n"
"  -o snapshot_keep=SPEC  after each, delete the @GMT snapshots SPEC\n"
"                   does not keep: last=N:hourly=N:daily=N:weekly=N:\n"
"                   monthly=N:yearly=N, any of them (see nextfs(1),\n"
"                   snapshot prune); other snapshots are never deleted\n"
"  -o snapshot_group=GROUP  members of GROUP (a name or a gid) may take\n"
"                   and delete snapshots (mkdir and rmdir in .snapshots)\n"
"                   besides root and the owner of the volume's root\n"
"                   directory; with allow_other (see docs/security.md)\n"
"  -h, --help       show this help and the FUSE options, then exit\n"
"  -V, --version    show the version, then exit\n"
"\n"
"Permissions: the file system is always mounted with default_permissions,\n"
"so the kernel checks access against file modes, owners, groups and POSIX\n"
"ACLs, enforces the sticky bit and the ownership rules of chmod, chown\n"
"and utimes, and clears setuid/setgid bits on write and chown.  Without\n"
"-o allow_other only the mounting user can access the mount.\n"
"\n"
"Damaged volumes (what the kernel's mount-time checks find) are never\n"
"written: they are refused with one line naming the damage and the fix,\n"
"and served with -o ro.\n"
"\n"
"Exit status: 0 after a clean unmount, 1 on a usage or mount error (or\n"
"when the volume could not be written back at unmount), 2 when the\n"
"volume was refused (not ext2/3/4, unsupported features, damaged, in use\n"
"or busy).\n");
}

static void version(void)
{
	const char *e2ver = NULL, *e2date = NULL;

	ext2fs_get_library_version(&e2ver, &e2date);
	printf(PROG " " NEXTFS_VERSION "\n");
	printf("libfuse %s, libext2fs %s (%s)\n", fuse_pkgversion(),
	       e2ver ? e2ver : "?", e2date ? e2date : "?");
	printf("metadata checksums: crc32c %s\n", nx_crc32c_name());
}

static int positional(struct cli *c, const char *arg)
{
	if (!c->device) {
		c->device = strdup(arg);
		return c->device ? 0 : -1;
	}
	if (!c->mountpoint) {
		c->mountpoint = strdup(arg);
		return c->mountpoint ? 0 : -1;
	}
	fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n",
		arg);
	return -1;
}

/* 0: consumed, 1: keep for libfuse, -1: error (already reported). */
static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct cli *c = data;

	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		return positional(c, arg);
	case FUSE_OPT_KEY_OPT:
		if (arg[0] == '-') {
			fprintf(stderr, PROG ": unknown option '%s' "
				"(see --help)\n", arg);
			return -1;
		}
		return 1;	/* a -o option: libfuse decides */
	case KEY_HELP:
		c->help = 1;
		return 0;
	case KEY_VERSION:
		c->version = 1;
		return 0;
	case KEY_FOREGROUND:
		c->foreground = 1;
		return 0;
	case KEY_DEBUG:
		c->foreground = 1;
		return 1;
	case KEY_SINGLE:
		c->singlethread = 1;
		return 0;
	case KEY_RO:
		c->rdonly = 1;
		return 1;
	case KEY_RW:
		c->rdonly = 0;
		return 1;
	case KEY_FSNAME:
		c->have_fsname = 1;
		return 1;
	case KEY_SUBTYPE:
		c->have_subtype = 1;
		return 1;
	case KEY_DEFAULT_PERMISSIONS:
		c->have_default_permissions = 1;
		return 1;
	case KEY_BLKDEV:
		c->blkdev = 1;
		return 0;	/* added back by add_our_options() */
	case KEY_NOBLKDEV:
		c->blkdev = 0;
		return 0;
	case KEY_AUTO_UNMOUNT:
		c->auto_unmount = 1;
		return 1;
	}
	return 1;
}

/* -o read_ahead_kb=N: 0..NX_MAX_READ_AHEAD_KB, else one error line. */
static int parse_read_ahead(const char *arg, unsigned *kb)
{
	unsigned long v;
	char *end;

	*kb = NX_DEFAULT_READ_AHEAD_KB;
	if (!arg)
		return 0;
	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || arg[0] == '-' ||
	    v > NX_MAX_READ_AHEAD_KB) {
		fprintf(stderr, PROG ": bad read_ahead_kb '%s' (want 0 to %u)\n",
			arg, NX_MAX_READ_AHEAD_KB);
		return -1;
	}
	*kb = (unsigned)v;
	return 0;
}

/*
 * -o snapshot_every / snapshot_keep: checked before anything touches the
 * volume; one error line.  KEEP is set when *HAVE_KEEP.
 */
static int parse_timeline(const struct cli *c, unsigned *every,
			  struct nx_keep_spec *keep, int *have_keep)
{
	char msg[256];

	*every = 0;
	*have_keep = 0;
	if (c->snapshot_keep && !c->snapshot_every) {
		fprintf(stderr, PROG ": snapshot_keep needs snapshot_every "
			"(or prune with 'nextfs snapshot prune')\n");
		return -1;
	}
	if (!c->snapshot_every)
		return 0;
	if (c->rdonly) {
		fprintf(stderr, PROG ": snapshot_every needs a writable "
			"mount (not -o ro)\n");
		return -1;
	}
	if (nx_duration_parse(c->snapshot_every, every, msg, sizeof(msg))) {
		fprintf(stderr, PROG ": snapshot_every: %s\n", msg);
		return -1;
	}
	if (c->snapshot_keep) {
		if (nx_keep_parse(c->snapshot_keep, keep, msg, sizeof(msg))) {
			fprintf(stderr, PROG ": snapshot_keep: %s\n", msg);
			return -1;
		}
		*have_keep = 1;
	}
	return 0;
}

/*
 * -o snapshot_group=GROUP: a group name, else a number; one error line.
 * A name that is all digits is a name if such a group exists (as chgrp).
 */
static int parse_snapshot_group(const char *arg, gid_t *gid, int *have)
{
	struct group *gr;
	unsigned long v;
	char *end;

	*have = 0;
	if (!arg)
		return 0;
	gr = *arg ? getgrnam(arg) : NULL;
	if (gr) {
		*gid = gr->gr_gid;
	} else {
		errno = 0;
		v = strtoul(arg, &end, 10);
		if (!*arg || errno || *end || arg[0] == '-' ||
		    v >= (gid_t)-1) {
			fprintf(stderr, PROG ": snapshot_group: no group '%s'\n",
				arg);
			return -1;
		}
		*gid = (gid_t)v;
	}
	*have = 1;
	return 0;
}

/*
 * IMAGE_OR_DEVICE, resolved once and pinned (see the file comment): the
 * volume's name from now on, its path as the kernel spells it (the mount's
 * source); NULL after one error line.
 */
static char *resolve_device(const char *arg)
{
	int fd = nx_sp_open_volume(arg);
	char *name;

	if (fd < 0) {
		fprintf(stderr, PROG ": %s: %s\n", arg, nx_sp_why(errno));
		return NULL;
	}
	name = nx_sp_fd_path(fd);
	if (!name || nx_dev_pin(name, fd) != 0) {
		fprintf(stderr, PROG ": %s: %s\n", arg, strerror(errno));
		if (!name)
			close(fd);
		free(name);
		return NULL;
	}
	return name;
}

/*
 * MOUNTPOINT, resolved once and held in *FD; *MOUNT_NAME is what libfuse
 * mounts on (nx_sp_mount_name).  With auto_unmount libfuse has root's
 * mount done by fusermount3, which looks the path up again and, for root,
 * checks nothing: only a path no other user can change will do.  Returns
 * the mountpoint's path as the kernel spells it (what mountinfo records),
 * or NULL after one error line.
 */
static char *resolve_mountpoint(const struct cli *c, int *fd,
				char **mount_name)
{
	char *path;
	int fixed;

	*mount_name = NULL;
	*fd = nx_sp_open_path(c->mountpoint, O_PATH | O_DIRECTORY);
	if (*fd < 0) {
		fprintf(stderr, PROG ": %s: %s\n", c->mountpoint,
			nx_sp_why(errno));
		return NULL;
	}
	path = nx_sp_fd_path(*fd);
	if (path && c->auto_unmount && geteuid() == 0) {
		fixed = nx_sp_path_fixed(*fd);
		if (fixed == 1) {
			*mount_name = strdup(path);
		} else {
			fprintf(stderr, PROG ": -o auto_unmount: fusermount3 "
				"would look %s up again by name, and %s; mount "
				"without auto_unmount, or where only root can "
				"change the path\n", path, fixed < 0 ?
				strerror(errno) : "users other than root can "
				"change where it leads");
			free(path);
			return NULL;
		}
	} else if (path) {
		*mount_name = nx_sp_mount_name(*fd, path);
	}
	if (!path || !*mount_name) {
		fprintf(stderr, PROG ": %s: %s\n", c->mountpoint,
			strerror(errno));
		free(path);
		return NULL;
	}
	return path;
}

/*
 * -o blkdev / noblkdev and the default (see the file comment).  A fuseblk
 * mount's source must be the device itself; its block size is the page
 * size, as for a plain FUSE mount.  0 or -1 (reported).
 */
static int decide_blkdev(struct cli *c, const char *device)
{
	struct stat st;
	int isblk = nx_dev_stat(device, &st) == 0 && S_ISBLK(st.st_mode);

	if (c->blkdev < 0)
		c->blkdev = isblk && geteuid() == 0;
	if (!c->blkdev)
		return 0;
	if (!isblk) {
		fprintf(stderr, PROG ": -o blkdev needs a block device; %s is "
			"not one\n", device);
		return -1;
	}
	if (geteuid() != 0) {
		fprintf(stderr, PROG ": -o blkdev needs root (the kernel "
			"opens the device itself)\n");
		return -1;
	}
	if (c->have_fsname) {
		fprintf(stderr, PROG ": -o fsname cannot be set for a fuseblk "
			"mount (its source is the device; -o noblkdev allows "
			"it)\n");
		return -1;
	}
	return 0;
}

/* The -o options we always add (unless given): see the file comment. */
static int add_our_options(struct fuse_args *args, const struct cli *c,
			   const char *device)
{
	char *opts = NULL, *fsname = NULL, blksize[32];
	int ret = -1;

	if (c->blkdev) {
		snprintf(blksize, sizeof(blksize), "blksize=%ld",
			 sysconf(_SC_PAGESIZE));
		if (fuse_opt_add_opt(&opts, "blkdev") != 0 ||
		    fuse_opt_add_opt(&opts, blksize) != 0)
			goto out;
	}
	if (!c->have_default_permissions &&
	    fuse_opt_add_opt(&opts, "default_permissions") != 0)
		goto out;
	if (!c->have_subtype && fuse_opt_add_opt(&opts, "subtype=nextfs") != 0)
		goto out;
	if (!c->have_fsname) {
		if (asprintf(&fsname, "fsname=%s", device) < 0) {
			fsname = NULL;
			goto out;
		}
		if (fuse_opt_add_opt_escaped(&opts, fsname) != 0)
			goto out;
	}
	ret = 0;
	if (opts && (fuse_opt_add_arg(args, "-o") != 0 ||
		     fuse_opt_add_arg(args, opts) != 0))
		ret = -1;
out:
	free(fsname);
	free(opts);
	return ret;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct nx_fuse_config cfg;
	struct nx_keep_spec keep;
	struct cli c;
	char *device = NULL, *mountpoint = NULL, *mount_name = NULL;
	unsigned read_ahead_kb, every;
	int status = NX_EXIT_USAGE, have_keep, have_snap_gid = 0;
	int mount_fd = -1;
	gid_t snap_gid = 0;

	/* No volume name is opened but as safepath.h resolves it. */
	nx_dev_set_resolver(nx_sp_open_volume);
	memset(&c, 0, sizeof(c));
	c.blkdev = -1;
	if (fuse_opt_parse(&args, &c, cli_opts, opt_proc) != 0)
		goto out;
	if (c.help) {
		usage(stdout);
		printf("\nFUSE options:\n");
		fflush(stdout);
		fuse_lowlevel_help();
		status = NX_EXIT_OK;
		goto out;
	}
	if (c.version) {
		version();
		status = NX_EXIT_OK;
		goto out;
	}
	if (parse_read_ahead(c.read_ahead, &read_ahead_kb) != 0 ||
	    parse_timeline(&c, &every, &keep, &have_keep) != 0 ||
	    parse_snapshot_group(c.snapshot_group, &snap_gid,
				 &have_snap_gid) != 0)
		goto out;
	if (!c.device || !c.mountpoint) {
		fprintf(stderr, PROG ": missing %s (usage: " PROG " [-f] [-d] "
			"[-s] [-o OPTIONS] IMAGE_OR_DEVICE MOUNTPOINT)\n",
			c.device ? "MOUNTPOINT" : "IMAGE_OR_DEVICE and "
			"MOUNTPOINT");
		goto out;
	}
	device = resolve_device(c.device);
	if (!device)
		goto out;
	mountpoint = resolve_mountpoint(&c, &mount_fd, &mount_name);
	if (!mountpoint || decide_blkdev(&c, device) != 0)
		goto out;
	if (add_our_options(&args, &c, device) != 0) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.device = device;
	cfg.mountpoint = mountpoint;
	cfg.mount_name = mount_name;
	cfg.mount_fd = mount_fd;
	cfg.rdonly = c.rdonly;
	cfg.foreground = c.foreground;
	cfg.singlethread = c.singlethread;
	cfg.blkdev = c.blkdev;
	cfg.read_ahead_kb = read_ahead_kb;
	cfg.read_ahead_given = c.read_ahead != NULL;
	cfg.fakeroot = c.fakeroot;
	cfg.ino32 = c.ino32;
	cfg.snapshot_every = every;
	cfg.snapshot_keep = have_keep ? &keep : NULL;
	cfg.snapshot_group = have_snap_gid;
	cfg.snapshot_gid = snap_gid;
	cfg.args = &args;
	status = nx_fuse_main(&cfg);
out:
	/* Only now: libfuse has unmounted through MOUNT_NAME. */
	if (mount_fd >= 0)
		close(mount_fd);
	free(mount_name);
	free(device);
	free(mountpoint);
	free(c.device);
	free(c.mountpoint);
	free(c.read_ahead);
	free(c.snapshot_every);
	free(c.snapshot_keep);
	free(c.snapshot_group);
	fuse_opt_free_args(&args);
	return status;
}
