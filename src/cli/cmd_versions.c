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
 * size and mtime agree and so does the content.  Content is compared
 * only when it could differ: an unchanged inode keeps its ctime in every
 * snapshot (P1), so equal ctimes settle it without reading; otherwise
 * the daemon compares the two files by their block maps
 * (NX_IOC_SAME_DATA: blocks that resolve to the same device block are
 * equal unread, like the delta of "nextfs diff"), and for callers it
 * does not answer (docs/security.md) the data is read through the mount
 * and compared byte for byte (a symlink's target always is).  Mode, owner and
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
 *
 * Run by root on a path a user controls (an allow_other mount), nothing
 * here may be redirected (safepath.h): PATH and DEST are resolved once
 * into open directories; every occurrence is looked up below the mount's
 * root without following any symbolic link, so a directory that was a
 * link when a snapshot was taken is not followed out of the snapshot;
 * the copy is made in DEST's directory, held open, and renamed within it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/ioctl.h>
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

/* One place the file is found: a snapshot (snap >= 0) or the live tree. */
struct occ {
	int snap;		/* index into the snapshot list, -1: live */
	char *rel;		/* below the mount's root: ".snapshots/S/a/b" */
	struct stat st;		/* st_mode 0: absent */
	int why;		/* absent: the errno that said so */
};

struct version {
	struct occ *first;	/* the oldest occurrence: shown, compared */
	int *snaps;		/* snapshots holding it, oldest first */
	int nsnaps;
	int live;
};

struct history {
	struct nx_sp_place where;	/* PATH: its mount, held open */
	int ctl;			/* its root, open for ioctls; -1 */
	int walk;			/* the daemon does not compare for us */
	char *rel;		/* "/a/b" ("" is the root), no snapshot view */
	int in_view;		/* PATH named it inside a snapshot view */
	struct nx_cli_snaps snaps;
	struct occ *occ;	/* one per snapshot + live */
	struct version *v;
	int nv;
	int found;		/* occurrences present */
};

#define TEMP_PREFIX	".nextfs-restore."

/* Where REL is in snapshot SNAP (NULL: the live tree), below the root. */
static char *rel_in(const char *snap, const char *rel)
{
	char *p = NULL;

	if (snap ? asprintf(&p, "%s/%s%s", NX_SNAPDIR_NAME, snap, rel) < 0
		 : asprintf(&p, "%s", rel) < 0)
		return NULL;
	return p;
}

/*
 * A path inside a snapshot view names the same file as its live path:
 * strip "/.snapshots/NAME" from REL.  Returns whether it did.
 */
static int strip_snapshot_view(char *rel)
{
	size_t n = strlen("/" NX_SNAPDIR_NAME "/");
	char *rest;

	if (strncmp(rel, "/" NX_SNAPDIR_NAME "/", n))
		return 0;
	rest = strchr(rel + n, '/');
	memmove(rel, rest ? rest : "", strlen(rest ? rest : "") + 1);
	return 1;
}

static int same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* The tree of occurrence O: a snapshot id, 0 for the live tree. */
static uint32_t tree_id(const struct history *h, const struct occ *o)
{
	return o->snap < 0 ? 0 : h->snaps.s[o->snap].id;
}

/*
 * Do the regular files of occurrences A and B hold different bytes (1,
 * 0; -1: unreadable)?  Asked of the daemon; read through the mount by
 * those it does not answer (EPERM) and where it cannot (an older one).
 */
static int contents_differ(struct history *h, const struct occ *a,
			   const struct occ *b)
{
	struct nx_ioc_same_data q;

	if (h->ctl >= 0 && !h->walk) {
		memset(&q, 0, sizeof(q));
		q.id[0] = tree_id(h, a);
		q.id[1] = tree_id(h, b);
		q.st_ino[0] = a->st.st_ino;
		q.st_ino[1] = b->st.st_ino;
		if (ioctl(h->ctl, NX_IOC_SAME_DATA, &q) == 0)
			return !q.same;
		if (errno == EPERM || errno == ENOTTY)
			h->walk = 1;	/* it will not: ask no more */
	}
	return nx_cli_files_differ(h->where.mnt.fd, a->rel, h->where.mnt.fd,
				   b->rel);
}

/* Is occurrence O the version V (see the top of the file)? */
static int is_version(struct history *h, const struct occ *o,
		      const struct version *v)
{
	const struct stat *a = &o->st, *b = &v->first->st;
	int root = h->where.mnt.fd;

	if ((a->st_mode & S_IFMT) != (b->st_mode & S_IFMT) ||
	    a->st_size != b->st_size || !same_time(&a->st_mtim, &b->st_mtim))
		return 0;
	if (same_time(&a->st_ctim, &b->st_ctim) || S_ISDIR(a->st_mode))
		return 1;
	/* unreadable (-1) counts as another version */
	if (S_ISREG(a->st_mode))
		return !contents_differ(h, o, v->first);
	if (S_ISLNK(a->st_mode))
		return !nx_cli_links_differ(root, o->rel, root, v->first->rel);
	return a->st_rdev == b->st_rdev;
}

static int add_occurrence(struct history *h, struct occ *o)
{
	struct version *v;
	int i;

	for (i = 0; i < h->nv; i++)
		if (is_version(h, o, &h->v[i]))
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
		free(h->occ[i].rel);
	for (i = 0; i < h->nv; i++)
		free(h->v[i].snaps);
	free(h->occ);
	free(h->v);
	free(h->rel);
	if (h->ctl >= 0)
		close(h->ctl);
	nx_sp_place_free(&h->where);
	nx_cli_snaps_free(&h->snaps);
}

/*
 * stat() shows the take time as the mtime of a snapshot's root (so that
 * ls -lt sorts snapshots); the root's history needs its real mtime.
 */
static void real_root_mtime(int root, const char *rel, struct stat *st)
{
	int fd = nx_sp_open(root, rel, O_RDONLY | O_DIRECTORY);
	struct nx_ioc_time t;

	if (fd < 0)
		return;
	if (ioctl(fd, NX_IOC_GET_MTIME, &t) == 0) {
		st->st_mtim.tv_sec = t.sec;
		st->st_mtim.tv_nsec = t.nsec;
	}
	close(fd);
}

/* PATH could not be resolved: say why, in the words of safepath.h. */
static void path_error(const char *what, const char *path, int err)
{
	if (err == EMEDIUMTYPE)
		nx_cli_error("%s%s is not on a nextfs mount", what, path);
	else
		nx_cli_error("%s%s: %s", what, path, nx_sp_why(err));
}

/* Absent, or could not be looked at? */
static int means_absent(int err)
{
	/* ELOOP, EXDEV: a directory of the path is a symbolic link or a
	 * mountpoint there; what it leads to is not in that tree. */
	return err == ENOENT || err == ENOTDIR || err == ELOOP ||
	       err == EXDEV;
}

/*
 * Find PATH's mount and snapshots and sort its occurrences (there may be
 * none: h->found).
 */
static int history_get(const char *path, struct history *h)
{
	int i, root;

	memset(h, 0, sizeof(*h));
	h->where.mnt.fd = h->where.dirfd = -1;
	h->ctl = -1;
	if (nx_sp_locate(path, NX_SP_FUSE, &h->where)) {
		path_error("", path, errno);
		return NX_CLI_FAIL;
	}
	root = h->where.mnt.fd;
	/* the root itself, reopened: no name is looked up */
	h->ctl = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	h->rel = strdup(h->where.rel);
	if (!h->rel)
		goto nomem;
	h->in_view = strip_snapshot_view(h->rel);
	if (nx_cli_mount_snapshots(h->where.mnt.path, &h->snaps.s,
				   &h->snaps.n, &h->snaps.blocksize))
		return NX_CLI_FAIL;
	h->occ = calloc(h->snaps.n + 1, sizeof(*h->occ));
	h->v = calloc(h->snaps.n + 1, sizeof(*h->v));
	if (!h->occ || !h->v)
		goto nomem;
	for (i = 0; i <= h->snaps.n; i++) {
		struct occ *o = &h->occ[i];

		o->snap = i < h->snaps.n ? i : -1;
		o->rel = rel_in(o->snap < 0 ? NULL : h->snaps.s[i].name,
				h->rel);
		if (!o->rel)
			goto nomem;
		if (nx_sp_lstat(root, o->rel, &o->st) < 0) {
			if (!means_absent(errno)) {
				nx_cli_error("%s/%s: %s", h->where.mnt.path,
					     o->rel, strerror(errno));
				return NX_CLI_FAIL;
			}
			o->why = errno;
			o->st.st_mode = 0;	/* absent here */
			continue;
		}
		if (!h->rel[0])
			real_root_mtime(root, o->rel, &o->st);
		h->found++;
		if (add_occurrence(h, o))
			goto nomem;
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
	nx_json_str(&j, "mount", h->where.mnt.path);
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

/* Copy IN's data to FD, leaving holes where IN has them. */
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
			ssize_t n = pread(in, buf, sizeof(buf), pos);

			if (n < 0 || (n && nx_cli_pwrite_all(fd, buf, (size_t)n,
							     pos)))
				return -1;
			if (n == 0)
				break;
			pos += n;
		}
		if (pos < hole)
			break;			/* shorter than it said */
	}
	return ftruncate(fd, size);
}

/* The xattrs of the file IN holds onto the copy FD (descriptors only). */
static int copy_xattrs(int in, int fd, const char *dest)
{
	size_t n, vn, i;
	char *names = nx_sp_listxattr(in, &n), *val = NULL;
	int rc = -1;

	if (!names)
		return errno == ENOTSUP ? 0 : -1;
	for (i = 0; i < n; i += strlen(names + i) + 1) {
		free(val);
		val = nx_sp_getxattr(in, names + i, &vn);
		if (!val)
			goto out;
		if (nx_sp_setxattr(fd, names + i, val, vn) < 0) {
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
static void copy_owner(int fd, const struct stat *st, const char *dest)
{
	struct stat now;

	if (fchownat(fd, "", st->st_uid, st->st_gid, AT_EMPTY_PATH) == 0)
		return;
	if (errno == EPERM)
		fchownat(fd, "", -1, st->st_gid, AT_EMPTY_PATH);
	if (fstat(fd, &now) == 0 &&
	    (now.st_uid != st->st_uid || now.st_gid != st->st_gid))
		warn("owner", dest, EPERM);
}

/*
 * The version O (below the mount's root ROOT) as a new file in the
 * directory DIR, named TMP (NX_SP_TEMP_SIZE bytes; "" when none was
 * made).  Everything through descriptors: the source opened without
 * following anything, the copy made with O_EXCL, then fchown, fchmod,
 * futimens, fsetxattr on it.
 */
static int make_copy(int root, const struct occ *o, int dir, char *tmp,
		     const char *dest)
{
	struct timespec times[2] = { o->st.st_atim, o->st.st_mtim };
	int link = S_ISLNK(o->st.st_mode), in, fd = -1, rc = -1, e;
	char *target = NULL;
	struct stat st;

	tmp[0] = 0;
	in = nx_sp_open(root, o->rel, link ? O_PATH : O_RDONLY);
	if (in < 0 || fstat(in, &st) < 0)
		goto out;
	if ((st.st_mode & S_IFMT) != (o->st.st_mode & S_IFMT)) {
		errno = ESTALE;
		goto out;
	}
	if (link) {
		target = nx_sp_readlink(in, "", NULL);
		if (target)
			fd = nx_sp_temp_symlink(dir, TEMP_PREFIX, target, tmp);
	} else {
		fd = nx_sp_temp_file(dir, TEMP_PREFIX, tmp);
		if (fd >= 0 && copy_data(in, fd, o->st.st_size))
			goto out;
	}
	if (fd < 0) {
		tmp[0] = 0;
		goto out;
	}
	if (copy_xattrs(in, fd, dest))
		goto out;
	copy_owner(fd, &o->st, dest);
	/* after chown, which clears set-id bits */
	if (!link && fchmod(fd, o->st.st_mode & 07777) < 0)
		goto out;
	if (utimensat(fd, "", times, AT_EMPTY_PATH) < 0)
		goto out;
	if (!link && fsync(fd) < 0)
		goto out;
	rc = 0;
out:
	e = errno;
	if (in >= 0)
		close(in);
	if (fd >= 0 && close(fd) < 0 && !rc) {
		e = errno;
		rc = -1;
	}
	free(target);
	errno = e;
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

/*
 * Where the copy goes: the directory *DIR (held open) and *NAME in it.
 * Without TO, PATH itself: the directory PATH was resolved to (or, for
 * a path inside a snapshot view, the live one, walked from the mount's
 * root).  TO is resolved the same way as PATH; an existing directory
 * (not a link to one) takes the file under its own name.
 */
static int restore_dest(const struct history *h, const char *to, int *dir,
			char **name)
{
	const char *base = strrchr(h->rel, '/') + 1;
	struct nx_sp_place d;
	struct stat st;

	*dir = -1;
	*name = NULL;
	if (!to && !h->in_view) {
		*dir = fcntl(h->where.dirfd, F_DUPFD_CLOEXEC, 0);
		*name = strdup(h->where.base);
	} else if (!to) {
		*dir = nx_sp_open_parent(h->where.mnt.fd, h->rel, name);
		if (*dir < 0) {
			nx_cli_error("%s%s: %s", h->where.mnt.path, h->rel,
				     nx_sp_why(errno));
			return NX_CLI_FAIL;
		}
	} else {
		if (nx_sp_locate(to, 0, &d)) {
			path_error("--to ", to, errno);
			return NX_CLI_FAIL;
		}
		if (!d.base[0]) {
			*dir = fcntl(d.mnt.fd, F_DUPFD_CLOEXEC, 0);
			*name = strdup(base);
		} else if (fstatat(d.dirfd, d.base, &st,
				   AT_SYMLINK_NOFOLLOW) == 0 &&
			   S_ISDIR(st.st_mode)) {
			*dir = openat(d.dirfd, d.base, O_PATH | O_DIRECTORY |
				      O_NOFOLLOW | O_CLOEXEC);
			*name = strdup(base);
		} else {
			*dir = fcntl(d.dirfd, F_DUPFD_CLOEXEC, 0);
			*name = strdup(d.base);
		}
		nx_sp_place_free(&d);
	}
	if (*dir < 0 || !*name) {
		nx_cli_error("%s: %s", to ? to : "restore", *dir < 0 ?
			     strerror(errno) : "out of memory");
		if (*dir >= 0)
			close(*dir);
		free(*name);
		*dir = -1;
		*name = NULL;
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}

static int restore_version(const char *path, const char *name,
			   const char *to)
{
	char q[NX_QUOTED_NAME_SIZE], tmp[NX_SP_TEMP_SIZE], *dest = NULL;
	const char *shown = to ? to : path;
	struct history h;
	struct occ *o;
	int i, dir = -1, rc = history_get(path, &h);

	if (rc)
		goto out;
	rc = NX_CLI_FAIL;
	nx_out_quote(q, sizeof(q), name, strlen(name));
	i = find_snapshot(&h, name);
	if (i < 0) {
		nx_cli_error("no snapshot %s on %s", q, h.where.mnt.path);
		goto out;
	}
	o = &h.occ[i];
	if (!o->st.st_mode && o->why == ELOOP) {
		nx_cli_error("%s: not in snapshot %s (a directory of its path "
			     "is a symbolic link there, which is not "
			     "followed)", path, q);
		goto out;
	}
	if (!o->st.st_mode) {
		nx_cli_error("%s: not in snapshot %s", path, q);
		goto out;
	}
	if (!S_ISREG(o->st.st_mode) && !S_ISLNK(o->st.st_mode)) {
		nx_cli_error("%s is a %s in snapshot %s: only files and "
			     "symlinks are restored (copy it with cp -a "
			     "from %s/%s)", path, type_name(o->st.st_mode), q,
			     h.where.mnt.path, o->rel);
		rc = NX_CLI_USAGE;
		goto out;
	}
	if (restore_dest(&h, to, &dir, &dest))
		goto out;
	if (make_copy(h.where.mnt.fd, o, dir, tmp, shown) ||
	    renameat(dir, tmp, dir, dest) < 0) {
		nx_cli_error("cannot restore %s from snapshot %s to %s: %s",
			     path, q, shown, nx_sp_why(errno));
		if (tmp[0])
			unlinkat(dir, tmp, 0);
		goto out;
	}
	rc = NX_CLI_OK;
out:
	if (dir >= 0)
		close(dir);
	free(dest);
	history_free(&h);
	return rc;
}

/* ------------------------------------------------------------------ */

int nx_cmd_versions(struct nx_cli_args *a)
{
	const char *path = a->pos[0], *restore = a->val[NX_OPT_RESTORE];
	struct history h;
	int rc;

	if (a->val[NX_OPT_TO] && !restore)
		return nx_cli_usage_error(a, "--to goes with --restore");
	if (a->opt[NX_OPT_JSON] && restore)
		return nx_cli_usage_error(a, "--json lists, --restore "
					  "restores: one or the other");
	if (restore)
		return restore_version(path, restore, a->val[NX_OPT_TO]);
	rc = history_get(path, &h);
	if (!rc && !h.found) {
		nx_cli_error("%s: in no snapshot and not in the live tree",
			     path);
		rc = NX_CLI_FAIL;
	}
	if (!rc) {
		if (a->opt[NX_OPT_JSON])
			print_json(&h);
		else
			print_text(&h);
		rc = fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
	}
	history_free(&h);
	return rc;
}
