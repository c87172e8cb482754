/*
 * cmd_versions.c - "nextfs versions PATH [--json]" and "nextfs versions
 * PATH --restore NAME [--to DEST]": a file's history across the
 * snapshots of its mount, and getting one version back (like httm).
 *
 * PATH is a file, symlink or directory on a nextfs-fuse mount, live or
 * gone (then only its parent must exist), or inside a snapshot view
 * (MNT/.snapshots/NAME/REL means REL).  Each snapshot S is looked at as
 * MNT/.snapshots/S/REL, oldest first, then the live tree.
 *
 * Distinct versions: two occurrences are the same version when type,
 * size and mtime agree and so does the content.  Content is read only
 * when it could differ: an unchanged inode keeps its ctime in every
 * snapshot (P1), so equal ctimes settle it without reading; otherwise the
 * data (symlink: target) is compared byte for byte.  Mode, owner and
 * xattr changes alone are not new versions (they show as the attributes
 * of the version's first occurrence).  Inode numbers are not compared:
 * every snapshot view numbers its files differently by design (P14).  A
 * directory's version is its size and mtime (what changes when entries
 * come and go).  A version that comes back later (times restored) is
 * the same version: its line lists every snapshot that holds it.
 *
 * Restore copies data (holes stay holes), mode, owner (where the user
 * may: root, or a group of theirs), atime/mtime and xattrs (those the
 * user may set) into a temporary file beside DEST, then renames it over
 * DEST, so DEST is the old or the restored version, never a mix.  The
 * snapshot is only read.  Directories are refused (cp -a copies them
 * from the snapshot view; a merge with what is there now is a decision
 * only the user can make).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/ioctl.h>
#include "nextfs/nxioctl.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

/* One place the file is found: a snapshot (snap >= 0) or the live tree. */
struct occ {
	int snap;		/* index into the snapshot list, -1: live */
	char *path;
	struct stat st;
};

struct version {
	struct occ *first;	/* the oldest occurrence: shown, compared */
	int *snaps;		/* snapshots holding it, oldest first */
	int nsnaps;
	int live;
};

struct history {
	char *mnt, *rel;	/* rel: "/a/b" ("" is the root) */
	struct nx_cli_snaps snaps;
	struct occ *occ;	/* one per snapshot (st_mode 0: absent) + live */
	struct version *v;
	int nv;
};

static void versions_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs versions [--json] PATH\n"
		"       nextfs versions PATH [--restore NAME [--to DEST]]\n"
		"\n"
		"List the distinct versions of PATH (a file, symlink or directory\n"
		"on a nextfs-fuse mount; it may be gone from the live tree) in the\n"
		"snapshots and the live tree, oldest first: one line per distinct\n"
		"size, mtime and content, with the snapshots that hold it ('(live)':\n"
		"the live tree).  --restore copies the version snapshot NAME holds\n"
		"(data, mode, owner where permitted, times, xattrs) to DEST\n"
		"(default: PATH), replacing it atomically; the snapshot is only\n"
		"read.  DEST an existing directory: into it.  Directories are not\n"
		"restored (copy them with cp -a from MNT/.snapshots/NAME).\n");
}

static char *path_in(const char *mnt, const char *snap, const char *rel)
{
	char *p = NULL;

	if (snap ? asprintf(&p, "%s/%s/%s%s", mnt, NX_SNAPDIR_NAME, snap,
			    rel) < 0
		 : asprintf(&p, "%s%s", mnt, rel[0] ? rel : "/") < 0)
		return NULL;
	return p;
}

/*
 * A path inside a snapshot view names the same file as its live path:
 * strip "/.snapshots/NAME" from REL.
 */
static void strip_snapshot_view(char *rel)
{
	size_t n = strlen("/" NX_SNAPDIR_NAME "/");
	char *rest;

	if (strncmp(rel, "/" NX_SNAPDIR_NAME "/", n))
		return;
	rest = strchr(rel + n, '/');
	memmove(rel, rest ? rest : "", strlen(rest ? rest : "") + 1);
}

static int same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* Is occurrence O the version V (see the top of the file)? */
static int is_version(const struct occ *o, const struct version *v)
{
	const struct stat *a = &o->st, *b = &v->first->st;

	if ((a->st_mode & S_IFMT) != (b->st_mode & S_IFMT) ||
	    a->st_size != b->st_size || !same_time(&a->st_mtim, &b->st_mtim))
		return 0;
	if (same_time(&a->st_ctim, &b->st_ctim) || S_ISDIR(a->st_mode))
		return 1;
	if (S_ISREG(a->st_mode))
		return !nx_cli_files_differ(o->path, v->first->path);
	if (S_ISLNK(a->st_mode))
		return !nx_cli_links_differ(o->path, v->first->path);
	return a->st_rdev == b->st_rdev;
}

static int add_occurrence(struct history *h, struct occ *o)
{
	struct version *v;
	int i;

	for (i = 0; i < h->nv; i++)
		if (is_version(o, &h->v[i]))
			break;
	v = &h->v[i];
	if (i == h->nv) {
		memset(v, 0, sizeof(*v));
		v->first = o;
		v->snaps = calloc(h->snaps.n + 1, sizeof(*v->snaps));
		if (!v->snaps)
			return -1;
		h->nv++;
	}
	if (o->snap < 0)
		v->live = 1;
	else
		v->snaps[v->nsnaps++] = o->snap;
	return 0;
}

static void history_free(struct history *h)
{
	int i;

	for (i = 0; h->occ && i <= h->snaps.n; i++)
		free(h->occ[i].path);
	for (i = 0; i < h->nv; i++)
		free(h->v[i].snaps);
	free(h->occ);
	free(h->v);
	free(h->mnt);
	free(h->rel);
	nx_cli_snaps_free(&h->snaps);
}

/*
 * stat() shows the take time as the mtime of a snapshot's root (so that
 * ls -lt sorts snapshots); the root's history needs its real mtime.
 */
static void real_root_mtime(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct nx_ioc_time t;

	if (fd < 0)
		return;
	if (ioctl(fd, NX_IOC_GET_MTIME, &t) == 0) {
		st->st_mtim.tv_sec = t.sec;
		st->st_mtim.tv_nsec = t.nsec;
	}
	close(fd);
}

/* Find PATH's mount and snapshots and sort its occurrences. */
static int history_get(const char *path, struct history *h)
{
	int i, found = 0;

	memset(h, 0, sizeof(*h));
	if (nx_cli_mount_of_path(path, &h->mnt, &h->rel))
		return NX_CLI_FAIL;
	strip_snapshot_view(h->rel);
	if (nx_cli_snaps_get(h->mnt, &h->snaps, NULL))
		return NX_CLI_FAIL;
	h->occ = calloc(h->snaps.n + 1, sizeof(*h->occ));
	h->v = calloc(h->snaps.n + 1, sizeof(*h->v));
	if (!h->occ || !h->v)
		goto nomem;
	for (i = 0; i <= h->snaps.n; i++) {
		struct occ *o = &h->occ[i];

		o->snap = i < h->snaps.n ? i : -1;
		o->path = path_in(h->mnt, o->snap < 0 ? NULL :
				  h->snaps.s[i].name, h->rel);
		if (!o->path)
			goto nomem;
		if (lstat(o->path, &o->st) < 0) {
			if (errno != ENOENT && errno != ENOTDIR) {
				nx_cli_error("%s: %s", o->path,
					     strerror(errno));
				return NX_CLI_FAIL;
			}
			o->st.st_mode = 0;	/* absent here */
			continue;
		}
		if (!h->rel[0])
			real_root_mtime(o->path, &o->st);
		found++;
		if (add_occurrence(h, o))
			goto nomem;
	}
	if (!found) {
		nx_cli_error("%s: in no snapshot and not in the live tree",
			     path);
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
nomem:
	nx_cli_error("out of memory");
	return NX_CLI_FAIL;
}

static const char *type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "file";
	case S_IFDIR:
		return "directory";
	case S_IFLNK:
		return "symlink";
	case S_IFIFO:
		return "fifo";
	case S_IFSOCK:
		return "socket";
	default:
		return "device";
	}
}

static void print_text(const struct history *h)
{
	char when[NX_TIME_SIZE];
	int i, k, absent = 0;

	printf("%-20s %12s  %-9s %s\n", "MODIFIED", "SIZE", "TYPE",
	       "SNAPSHOTS");
	for (i = 0; i < h->nv; i++) {
		const struct version *v = &h->v[i];

		nx_out_local_time(when, sizeof(when), &v->first->st.st_mtim);
		printf("%-20s %12" PRIu64 "  %-9s", when,
		       (uint64_t)v->first->st.st_size,
		       type_name(v->first->st.st_mode));
		for (k = 0; k < v->nsnaps; k++) {
			putchar(' ');
			nx_out_print_quoted(stdout,
					    h->snaps.s[v->snaps[k]].name);
		}
		if (v->live)
			fputs(" (live)", stdout);
		putchar('\n');
	}
	for (i = 0; i < h->snaps.n; i++)
		if (!h->occ[i].st.st_mode) {
			fputs(absent++ ? " " : "absent from: ", stdout);
			nx_out_print_quoted(stdout, h->snaps.s[i].name);
		}
	if (absent)
		putchar('\n');
}

static void print_json(const struct history *h)
{
	struct nx_json j;
	int i, k;

	nx_json_init(&j, stdout);
	nx_json_open(&j, NULL, '{');
	nx_json_str(&j, "mount", h->mnt);
	nx_json_str(&j, "path", h->rel[0] ? h->rel : "/");
	nx_json_open(&j, "versions", '[');
	for (i = 0; i < h->nv; i++) {
		const struct version *v = &h->v[i];
		const struct stat *st = &v->first->st;

		nx_json_open(&j, NULL, '{');
		nx_json_str(&j, "type", type_name(st->st_mode));
		nx_json_u64(&j, "size", (uint64_t)st->st_size);
		nx_json_time(&j, "mtime", &st->st_mtim);
		nx_json_epoch(&j, "mtime_epoch", &st->st_mtim);
		nx_json_u64(&j, "mode", st->st_mode & 07777);
		nx_json_u64(&j, "uid", st->st_uid);
		nx_json_u64(&j, "gid", st->st_gid);
		nx_json_open(&j, "snapshots", '[');
		for (k = 0; k < v->nsnaps; k++)
			nx_json_str(&j, NULL, h->snaps.s[v->snaps[k]].name);
		nx_json_close(&j, ']');
		nx_json_bool(&j, "live", v->live);
		nx_json_close(&j, '}');
	}
	nx_json_close(&j, ']');
	nx_json_open(&j, "absent", '[');
	for (i = 0; i < h->snaps.n; i++)
		if (!h->occ[i].st.st_mode)
			nx_json_str(&j, NULL, h->snaps.s[i].name);
	nx_json_close(&j, ']');
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

/* ------------------------------------------------------------------ */
/* Restore                                                             */

static void warn(const char *what, const char *path, int err)
{
	char *q = malloc(NX_QUOTE_SIZE(strlen(path)));

	if (q)
		nx_out_quote(q, NX_QUOTE_SIZE(strlen(path)), path,
			     strlen(path));
	nx_cli_error("warning: %s: %s not restored: %s", q ? q : path, what,
		     strerror(err));
	free(q);
}

/* Copy SRC's data to FD, leaving holes where SRC has them. */
static int copy_data(int in, int fd, off_t size)
{
	static char buf[1 << 16];
	off_t pos = 0, data, hole;

	while (pos < size) {
		data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;			/* a hole up to the end */
		if (data < 0) {
			data = pos;		/* no SEEK_DATA: all data */
			hole = size;
		} else {
			hole = lseek(in, data, SEEK_HOLE);
			if (hole < 0)
				hole = size;
		}
		for (pos = data; pos < hole;) {
			ssize_t n = pread(in, buf, sizeof(buf), pos), w;

			if (n < 0)
				return -1;
			if (n == 0)
				break;
			for (w = 0; w < n;) {
				ssize_t k = pwrite(fd, buf + w, n - w,
						   pos + w);

				if (k < 0)
					return -1;
				w += k;
			}
			pos += n;
		}
		if (pos < hole)
			break;			/* shorter than it said */
	}
	return ftruncate(fd, size);
}

/* The xattrs of SRC (not followed) onto TMP (not followed). */
static int copy_xattrs(const char *src, const char *tmp, const char *dest)
{
	ssize_t n = llistxattr(src, NULL, 0), vn, i;
	char *names = NULL, *val = NULL;
	int rc = -1;

	if (n < 0)
		return errno == ENOTSUP ? 0 : -1;
	names = malloc(n + 1);
	if (!names)
		return -1;
	n = llistxattr(src, names, n);
	if (n < 0)
		goto out;
	for (i = 0; i < n; i += strlen(names + i) + 1) {
		vn = lgetxattr(src, names + i, NULL, 0);
		if (vn < 0)
			goto out;
		free(val);
		val = malloc(vn + 1);
		if (!val)
			goto out;
		vn = lgetxattr(src, names + i, val, vn);
		if (vn < 0)
			goto out;
		if (lsetxattr(tmp, names + i, val, vn, 0) < 0) {
			if (errno != EPERM && errno != ENOTSUP &&
			    errno != EACCES)
				goto out;
			warn(names + i, dest, errno);	/* not the user's */
		}
	}
	rc = 0;
out:
	free(names);
	free(val);
	return rc;
}

/* Owner where permitted: all of it, else the group alone, else warn. */
static void copy_owner(const char *tmp, const struct stat *st,
		       const char *dest)
{
	struct stat now;

	if (lchown(tmp, st->st_uid, st->st_gid) == 0)
		return;
	if (errno == EPERM)
		lchown(tmp, -1, st->st_gid);
	if (lstat(tmp, &now) == 0 &&
	    (now.st_uid != st->st_uid || now.st_gid != st->st_gid))
		warn("owner", dest, EPERM);
}

/* A new name beside DEST for the copy: DIR/.nextfs-restore.XXXXXX. */
static char *temp_beside(const char *dest)
{
	const char *slash = strrchr(dest, '/');
	char *tmp = NULL;

	if (asprintf(&tmp, "%.*s.nextfs-restore.XXXXXX",
		     slash ? (int)(slash - dest + 1) : 0, dest) < 0)
		return NULL;
	return tmp;
}

static int make_copy(const char *src, const struct stat *st,
		     const char *tmp, const char *dest)
{
	struct timespec times[2] = { st->st_atim, st->st_mtim };
	int in = -1, fd = -1, rc = -1;
	char target[PATH_MAX];
	ssize_t n;

	if (S_ISLNK(st->st_mode)) {
		n = readlink(src, target, sizeof(target) - 1);
		if (n < 0)
			return -1;
		target[n] = 0;
		unlink(tmp);		/* made by mkstemp: reuse its name */
		if (symlink(target, tmp) < 0)
			return -1;
	} else {
		in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
		if (in < 0 || fd < 0 || copy_data(in, fd, st->st_size))
			goto out;
	}
	if (copy_xattrs(src, tmp, dest))
		goto out;
	copy_owner(tmp, st, dest);
	/* after chown, which clears set-id bits */
	if (!S_ISLNK(st->st_mode) && fchmod(fd, st->st_mode & 07777) < 0)
		goto out;
	if (utimensat(AT_FDCWD, tmp, times, AT_SYMLINK_NOFOLLOW) < 0)
		goto out;
	if (fd >= 0 && fsync(fd) < 0)
		goto out;
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (fd >= 0 && close(fd) < 0)
		rc = -1;
	return rc;
}

static int find_snapshot(const struct history *h, const char *name)
{
	int i;

	for (i = 0; i < h->snaps.n; i++)
		if (!strcmp(h->snaps.s[i].name, name))
			return i;
	return -1;
}

/* DEST, or DEST/BASENAME when DEST is a directory and SRC is not. */
static char *restore_target(const struct history *h, const char *to,
			    const struct stat *src)
{
	const char *base = strrchr(h->rel, '/');
	char *dest = NULL;

	if (!to)
		return path_in(h->mnt, NULL, h->rel);
	if (!S_ISDIR(src->st_mode) && nx_cli_is_dir(to)) {
		if (asprintf(&dest, "%s/%s", to, base ? base + 1 : "") < 0)
			return NULL;
		return dest;
	}
	return strdup(to);
}

static int restore_version(const char *path, const char *name,
			   const char *to)
{
	char q[NX_QUOTED_NAME_SIZE], *dest = NULL, *tmp = NULL;
	struct history h;
	struct occ *o;
	int i, fd, rc = history_get(path, &h);

	if (rc)
		goto out;
	rc = NX_CLI_FAIL;
	nx_out_quote(q, sizeof(q), name, strlen(name));
	i = find_snapshot(&h, name);
	if (i < 0) {
		nx_cli_error("no snapshot %s on %s", q, h.mnt);
		goto out;
	}
	o = &h.occ[i];
	if (!o->st.st_mode) {
		nx_cli_error("%s: not in snapshot %s", path, q);
		goto out;
	}
	if (!S_ISREG(o->st.st_mode) && !S_ISLNK(o->st.st_mode)) {
		nx_cli_error("%s is a %s in snapshot %s: only files and "
			     "symlinks are restored (copy it with cp -a "
			     "from %s)", path, type_name(o->st.st_mode), q,
			     o->path);
		rc = NX_CLI_USAGE;
		goto out;
	}
	dest = restore_target(&h, to, &o->st);
	tmp = dest ? temp_beside(dest) : NULL;
	if (!tmp) {
		nx_cli_error("out of memory");
		goto out;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		nx_cli_error("cannot create a file beside %s: %s", dest,
			     strerror(errno));
		goto out;
	}
	close(fd);
	if (make_copy(o->path, &o->st, tmp, dest) || rename(tmp, dest) < 0) {
		nx_cli_error("cannot restore %s from snapshot %s to %s: %s",
			     path, q, dest, strerror(errno));
		unlink(tmp);
		goto out;
	}
	rc = NX_CLI_OK;
out:
	free(tmp);
	free(dest);
	history_free(&h);
	return rc;
}

/* ------------------------------------------------------------------ */

/* "--opt VALUE" or "--opt=VALUE" at ARGV[*I]; NULL if not OPT. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt,
			     int *missing)
{
	size_t n = strlen(opt);

	if (strncmp(argv[*i], opt, n))
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n])
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
}

int nx_cmd_versions(int argc, char **argv)
{
	const char *path = NULL, *restore = NULL, *to = NULL, *v;
	int i, json = 0, done = 0, missing = 0, rc;
	struct history h;

	for (i = 1; i < argc; i++) {
		if (done || argv[i][0] != '-' || !argv[i][1]) {
			if (path) {
				nx_cli_error("versions: one PATH only");
				return NX_CLI_USAGE;
			}
			path = argv[i];
		} else if (!strcmp(argv[i], "--")) {
			done = 1;
		} else if (!strcmp(argv[i], "-h") ||
			   !strcmp(argv[i], "--help")) {
			versions_usage(stdout);
			return NX_CLI_OK;
		} else if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if ((v = opt_value(argc, argv, &i, "--restore",
					  &missing))) {
			restore = v;
		} else if ((v = opt_value(argc, argv, &i, "--to",
					  &missing))) {
			to = v;
		} else {
			nx_cli_error(missing ? "versions: '%s' needs a value" :
				     "versions: unknown option '%s' (a name "
				     "that starts with '-' goes after '--')",
				     argv[i]);
			return NX_CLI_USAGE;
		}
	}
	if (!path || (to && !restore) || (json && restore)) {
		versions_usage(stderr);
		return NX_CLI_USAGE;
	}
	if (restore)
		return restore_version(path, restore, to);
	rc = history_get(path, &h);
	if (!rc) {
		if (json)
			print_json(&h);
		else
			print_text(&h);
		rc = fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
	}
	history_free(&h);
	return rc;
}
