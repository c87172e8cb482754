/*
 * mount_helper.c - the nextfs tool as mount(8)'s helper: /sbin/mount.nextfs
 * and /sbin/mount.fuse.nextfs are links to "nextfs" (nextfs.c dispatches
 * on the name it was called by), so that "mount -t nextfs DEV MNT" and an
 * fstab line of type nextfs or fuse.nextfs start nextfs-fuse.
 *
 * mount(8) calls a helper as
 *   mount.TYPE SOURCE MOUNTPOINT [-sfnv] [-N NAMESPACE] [-o OPTIONS] [-t TYPE]
 * with OPTIONS the fstab options minus what mount(8) keeps to itself
 * (x-*, comment=, X-mount.*) plus the VFS flags it implies (user gives
 * noexec,nosuid,nodev).  Some that remain mean something only to mount(8)
 * or to systemd (noauto, nofail, _netdev, user, ...): they are dropped
 * here, as mount.fuse3 drops them, because libfuse refuses an option it
 * does not know.  Everything else goes to nextfs-fuse, which decides.
 *
 * For a "user" fstab line mount(8) runs the helper as the calling user,
 * without privileges: nextfs-fuse then mounts with fusermount3, as when
 * that user runs it.  The daemon is the nextfs-fuse next to this program
 * (/proc/self/exe), or in a build tree the build's (daemon_path).
 *
 * After a mount we record "helper=nextfs" for it in libmount's utab
 * (/run/mount/utab, as root; skipped with -n), under the source and
 * mountpoint mountinfo lists for the mount that serves SOURCE: nextfs-fuse
 * resolved both paths itself (docs/paths.md), and a name resolved again
 * here could lead elsewhere by now.  Without an utab entry,
 * umount(8) of util-linux 2.38 takes the type from statfs(2), which says
 * plain "fuse", and runs no helper: it would return before the daemon
 * has written the volume back.  With it umount(8) reads mountinfo and runs
 * /sbin/umount.nextfs, i.e. "nextfs umount", which waits.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <libmount.h>
#include "cli.h"

extern char **environ;

/*
 * Options for mount(8), systemd or mount.fuse3's own use (fstab(5),
 * mount(8), systemd.mount(5)), never for the file system.  A trailing '='
 * matches any value; "x-" and "X-" prefixes are matched separately.
 */
static const char *const dropped_opts[] = {
	"defaults", "auto", "noauto", "nofail", "_netdev", "user", "users",
	"nouser", "owner", "group", "user=", "comment=", NULL,
};

static int is_dropped_opt(const char *opt, size_t len)
{
	const char *const *d;
	size_t dl;

	if (len >= 2 && (opt[0] == 'x' || opt[0] == 'X') && opt[1] == '-')
		return 1;
	for (d = dropped_opts; *d; d++) {
		dl = strlen(*d);
		if ((*d)[dl - 1] == '=' ? len >= dl && !memcmp(opt, *d, dl) :
		    len == dl && !memcmp(opt, *d, dl))
			return 1;
	}
	return 0;
}

/*
 * OPTS without the dropped options, into OUT (as long as OPTS).  Commas
 * inside double quotes (fsname="a,b", as libmount quotes) do not split.
 */
static void filter_options(const char *opts, char *out)
{
	const char *p = opts, *start;
	int quoted;

	*out = 0;
	while (*p) {
		start = p;
		for (quoted = 0; *p && (quoted || *p != ','); p++)
			if (*p == '"')
				quoted = !quoted;
		if (p > start && !is_dropped_opt(start, p - start)) {
			if (*out)
				strcat(out, ",");
			strncat(out, start, p - start);
		}
		if (*p == ',')
			p++;
	}
}

/*
 * The nextfs-fuse installed beside this program, else the one of the
 * build tree this program belongs to (src/cli/nextfs: src/fuse/nextfs-fuse),
 * else PATH's.
 */
static void daemon_path(char *out, size_t len)
{
	static const char *const where[] = { "nextfs-fuse",
					     "../fuse/nextfs-fuse" };
	char self[PATH_MAX], *slash = NULL, *real;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t i;

	if (n > 0) {
		self[n] = 0;
		slash = strrchr(self, '/');
	}
	if (slash) {
		*slash = 0;
		for (i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
			if (snprintf(out, len, "%s/%s", self, where[i]) >=
			    (int)len || access(out, X_OK) != 0)
				continue;
			real = realpath(out, NULL);	/* as -v prints it */
			if (real && strlen(real) < len)
				strcpy(out, real);
			free(real);
			return;
		}
	}
	snprintf(out, len, "nextfs-fuse");
}

struct helper_args {
	const char *source, *mountpoint, *options;
	int fake, verbose, nomtab;
};

/* Start nextfs-fuse; its exit status (it returns once mounted). */
static int run_daemon(const char *prog, char **dargv)
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		nx_cli_error("cannot fork: %s", strerror(errno));
		return NX_CLI_FAIL;
	}
	if (pid == 0) {
		if (strchr(prog, '/'))
			execve(prog, dargv, environ);
		else
			execvp(prog, dargv);
		nx_cli_error("cannot run %s: %s", prog, strerror(errno));
		_exit(NX_CLI_FAIL);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return NX_CLI_FAIL;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	nx_cli_error("%s killed by signal %d", prog, WTERMSIG(st));
	return NX_CLI_FAIL;
}

/*
 * The utab entry that makes umount(8) run our helper (file comment).
 * Only root may write utab; a user's mount goes without (umount(8) then
 * finds the mount in mountinfo anyway, as it does for every user).
 * Failing here does not undo the mount: "nextfs umount" still waits.
 */
static void record_umount_helper(const struct helper_args *h)
{
	struct libmnt_update *upd = mnt_new_update();
	struct libmnt_fs *fs = mnt_new_fs();
	char *src = NULL, *tgt = nx_cli_find_mount(h->source, &src);
	int rc = tgt ? -ENOMEM : -ENOENT;

	if (upd && fs && src && tgt && !mnt_fs_set_source(fs, src) &&
	    !mnt_fs_set_target(fs, tgt) &&
	    !mnt_fs_set_options(fs, "helper=nextfs")) {
		rc = mnt_update_set_fs(upd, 0, NULL, fs);
		if (rc == 0)
			rc = mnt_update_table(upd, NULL);
	}
	if (rc < 0 && geteuid() == 0)
		nx_cli_error("warning: cannot record %s in utab (%s): a plain "
			     "umount will not wait for the write-back; use "
			     "'nextfs umount %s'", tgt ? tgt : h->mountpoint,
			     strerror(-rc), tgt ? tgt : h->mountpoint);
	free(src);
	free(tgt);
	mnt_free_fs(fs);
	mnt_free_update(upd);
}

int nx_cmd_mount_helper(struct nx_cli_args *a)
{
	struct helper_args h = {
		.source = a->pos[0],
		.mountpoint = a->pos[1],
		.options = a->val[NX_OPT_MOUNT_OPTIONS],
		.fake = a->opt[NX_OPT_FAKE],
		.verbose = a->opt[NX_OPT_VERBOSE],
		.nomtab = a->opt[NX_OPT_NOMTAB],
	};
	char daemon[PATH_MAX], *opts = NULL;
	char *dargv[6];
	int ret, n = 0;

	if (a->opt[NX_OPT_NAMESPACE])
		return nx_cli_usage_error(a, "-N (another mount namespace) is "
					  "not supported");
	daemon_path(daemon, sizeof(daemon));
	dargv[n++] = daemon;
	if (h.options) {
		opts = malloc(strlen(h.options) + 1);
		if (!opts) {
			nx_cli_error("out of memory");
			return NX_CLI_FAIL;
		}
		filter_options(h.options, opts);
		if (*opts) {
			dargv[n++] = "-o";
			dargv[n++] = opts;
		}
	}
	dargv[n++] = (char *)h.source;
	dargv[n++] = (char *)h.mountpoint;
	dargv[n] = NULL;
	if (h.verbose || h.fake)
		printf("%s%s%s%s %s %s\n", daemon, n == 5 ? " -o '" : "",
		       n == 5 ? opts : "", n == 5 ? "'" : "", h.source,
		       h.mountpoint);
	if (h.fake) {
		free(opts);
		return NX_CLI_OK;
	}
	/* nextfs-fuse's exit status is mount(8)'s verdict. */
	ret = run_daemon(daemon, dargv);
	if (ret == 0 && !h.nomtab && geteuid() == 0)
		record_umount_helper(&h);
	free(opts);
	return ret;
}

/* Run as mount.nextfs: messages and the usage name it by ARGV[0]. */
