/*
 * cmd_diff.c - "nextfs diff [-F] IMAGE_OR_MOUNTPOINT OLD [NEW]".
 *
 * One line per change, zfs diff style, paths from the volume's root:
 *   - PATH            removed
 *   + PATH            created
 *   M PATH            content or attributes changed
 *   R OLD -> NEW      renamed (a renamed directory's contents are implied)
 * Bytes below '!', '\', DEL and bytes that are not printable UTF-8 are
 * written as \ooo (octal, output.h), so every line splits unambiguously
 * on spaces.  -F adds the file type
 * (F file, / directory, @ symlink, B/C device, | fifo, = socket).
 *
 * On an unmounted image the library compares block maps (cost grows with
 * what changed).  On a nextfs-fuse mountpoint the volume is busy, so the
 * trees MOUNTPOINT/.snapshots/OLD and .../NEW (or the live tree) are
 * walked through the kernel instead: every entry is stat'ed, content is
 * read only where the inode changed (ctime) but size and mtime did not.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/fs.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/snaptool.h"
#include "cli.h"
#include "output.h"

int nx_cli_open_image(const char *image, struct nx_volume **vol)
{
	char msg[512] = "";
	errcode_t err = nx_volume_open(image, NX_VOL_RDONLY, vol, msg,
				       sizeof(msg));

	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

static char type_char(mode_t type)
{
	switch (type & S_IFMT) {
	case S_IFDIR:
		return '/';
	case S_IFLNK:
		return '@';
	case S_IFBLK:
		return 'B';
	case S_IFCHR:
		return 'C';
	case S_IFIFO:
		return '|';
	case S_IFSOCK:
		return '=';
	default:
		return 'F';
	}
}

static int print_entry(void *priv, const struct nx_diff_entry *e)
{
	int *show_type = priv;

	putchar(e->kind);
	if (*show_type)
		printf(" %c", type_char(e->type));
	putchar(' ');
	nx_out_escape(stdout, e->path);
	if (e->kind == NX_DIFF_RENAMED) {
		printf(" -> ");
		nx_out_escape(stdout, e->newpath);
	}
	putchar('\n');
	return ferror(stdout) != 0;
}

static int diff_image(const char *image, const char *old, const char *new,
		      int show_type)
{
	struct nx_volume *vol;
	struct nx_progress prog;
	char msg[512] = "";
	errcode_t err;

	if (nx_cli_open_image(image, &vol))
		return NX_CLI_FAIL;
	nx_volume_lock(vol);
	nx_cli_progress_begin(&prog);
	err = nx_snap_diff(vol, old, new, print_entry, &show_type, &prog, msg,
			   sizeof(msg));
	nx_cli_progress_end(&prog);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return fflush(stdout) ? NX_CLI_FAIL : 0;
}

/* ------------------------------------------------------------------ */
/* Mountpoint mode.                                                    */

struct mloc {
	ino_t parent;
	char *name, *path;
	struct mloc *next;
};

struct mrec {
	ino_t ino;
	struct stat st[2];
	unsigned gen[2];
	int have[2];
	char *any[2];			/* a full path on each side */
	struct mloc *locs[2];
};

struct mdiff {
	const char *root[2];
	struct nx_ioc_inomap map[2];	/* each tree's inode numbering */
	ino_t root_ino[2];
	int root_touched;		/* an entry of the root came or went */
	struct mrec *recs;
	size_t n, cap;
	size_t *slots, nslots;
	struct nx_diff_entry *out;
	size_t nout, capout;
	int err;
};

/* Open hashing on inode numbers: index + 1 into recs, 0 = empty. */
static size_t mslot(const struct mdiff *md, ino_t ino)
{
	return (size_t)(((uint64_t)ino * 0x9E3779B97F4A7C15ULL) >> 20) &
	       (md->nslots - 1);
}

static int mrehash(struct mdiff *md, size_t nslots)
{
	size_t *slots = calloc(nslots, sizeof(*slots)), i, j;

	if (!slots)
		return -1;
	free(md->slots);
	md->slots = slots;
	md->nslots = nslots;
	for (i = 0; i < md->n; i++) {
		for (j = mslot(md, md->recs[i].ino); md->slots[j];
		     j = (j + 1) & (nslots - 1))
			;
		md->slots[j] = i + 1;
	}
	return 0;
}

static struct mrec *mrec_get(struct mdiff *md, ino_t ino)
{
	size_t j;

	if ((md->n + 1) * 2 > md->nslots &&
	    mrehash(md, md->nslots ? md->nslots * 2 : 1024))
		return NULL;
	for (j = mslot(md, ino); md->slots[j]; j = (j + 1) & (md->nslots - 1))
		if (md->recs[md->slots[j] - 1].ino == ino)
			return &md->recs[md->slots[j] - 1];
	if (md->n == md->cap) {
		size_t cap = md->cap ? md->cap * 2 : 256;
		struct mrec *more = realloc(md->recs, cap * sizeof(*more));

		if (!more)
			return NULL;
		md->recs = more;
		md->cap = cap;
	}
	memset(&md->recs[md->n], 0, sizeof(md->recs[0]));
	md->recs[md->n].ino = ino;
	md->slots[j] = ++md->n;
	return &md->recs[md->n - 1];
}

static unsigned generation_of(const char *path, const struct stat *st)
{
	unsigned gen = 0;
	int fd;

	if (S_ISLNK(st->st_mode))
		return 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (ioctl(fd, FS_IOC_GETVERSION, &gen) < 0)
		gen = 0;
	close(fd);
	return gen;
}

/* The real mtime of PATH (NX_IOC_GET_MTIME); 0 if the mount cannot say. */
static int real_mtime(const char *path, struct nx_ioc_time *t)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ok;

	if (fd < 0)
		return 0;
	ok = ioctl(fd, NX_IOC_GET_MTIME, t) == 0;
	close(fd);
	return ok;
}

/*
 * Was the root modified, as far as its mtime tells?  stat() shows a
 * snapshot root's take time, so the real mtimes are asked of the daemon;
 * a mount that cannot answer leaves it to TOUCHED: an entry of the root
 * came, went or moved (which is what moves a directory's mtime).
 */
static int root_mtime_moved(const char *a, const char *b, int touched)
{
	struct nx_ioc_time ta, tb;

	if (!real_mtime(a, &ta) || !real_mtime(b, &tb))
		return touched;
	return ta.sec != tb.sec || ta.nsec != tb.nsec;
}

/*
 * The tree's own inode number of what stat() calls ST_INO: a snapshot
 * view shows its files under numbers of its own (nxioctl.h), and a file
 * is matched across the two trees by the number ext gave it.
 */
static ino_t ext_ino(const struct mdiff *md, int s, ino_t st_ino)
{
	return (ino_t)((st_ino - md->map[s].base) & md->map[s].mask);
}

/* Ask the daemon how the tree at ROOT numbers its inodes. */
static void get_inomap(const char *root, struct nx_ioc_inomap *map)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || ioctl(fd, NX_IOC_GET_INOMAP, map) < 0) {
		map->base = 0;		/* not nextfs: as they are */
		map->mask = ~0ULL;
	}
	if (fd >= 0)
		close(fd);
}

static int mrec_add(struct mdiff *md, int s, const char *full,
		    const char *rel, ino_t parent, const char *name,
		    ino_t ino, const struct stat *st)
{
	struct mrec *r = mrec_get(md, ino);
	struct mloc *l = calloc(1, sizeof(*l));

	if (!r || !l)
		goto nomem;
	l->parent = parent;
	l->name = strdup(name);
	l->path = strdup(rel);
	if (!l->name || !l->path)
		goto nomem;
	l->next = r->locs[s];
	r->locs[s] = l;
	if (!r->have[s]) {
		r->have[s] = 1;
		r->st[s] = *st;
		r->gen[s] = generation_of(full, st);
		r->any[s] = strdup(full);
		if (!r->any[s])
			goto nomem;
	}
	return 0;
nomem:
	if (l) {
		free(l->name);
		free(l->path);
		free(l);
	}
	md->err = ENOMEM;
	return -1;
}

static int walk_tree(struct mdiff *md, int s, char *full, size_t flen,
		     char *rel, size_t rlen, ino_t dir_ino)
{
	DIR *dir = opendir(full);
	struct dirent *de;

	if (!dir) {
		nx_cli_error("%s: %s", full, strerror(errno));
		md->err = errno;
		return -1;
	}
	while ((de = readdir(dir))) {
		size_t nlen = strlen(de->d_name);
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!rlen && !strcmp(de->d_name, NX_SNAPDIR_NAME))
			continue;
		if (flen + nlen + 2 >= PATH_MAX || rlen + nlen + 2 >= PATH_MAX)
			continue;
		full[flen] = '/';
		memcpy(full + flen + 1, de->d_name, nlen + 1);
		rel[rlen] = '/';
		memcpy(rel + rlen + 1, de->d_name, nlen + 1);
		if (lstat(full, &st) < 0 ||
		    mrec_add(md, s, full, rel, dir_ino, de->d_name,
			     ext_ino(md, s, st.st_ino), &st) ||
		    (S_ISDIR(st.st_mode) &&
		     walk_tree(md, s, full, flen + 1 + nlen, rel,
			       rlen + 1 + nlen, ext_ino(md, s, st.st_ino)))) {
			if (!md->err)
				md->err = errno ? errno : EIO;
			break;
		}
		full[flen] = 0;
		rel[rlen] = 0;
	}
	closedir(dir);
	return md->err ? -1 : 0;
}

static int xattrs_differ(const char *a, const char *b)
{
	char la[65536], lb[65536], va[65536], vb[65536];
	ssize_t na = llistxattr(a, la, sizeof(la));
	ssize_t nb = llistxattr(b, lb, sizeof(lb));
	ssize_t i;

	if (na < 0 || nb < 0)
		return na != nb;
	if (na != nb)
		return 1;
	for (i = 0; i < na; i += strlen(la + i) + 1) {
		ssize_t xa = lgetxattr(a, la + i, va, sizeof(va));
		ssize_t xb = lgetxattr(b, la + i, vb, sizeof(vb));

		if (xa != xb || (xa > 0 && memcmp(va, vb, xa)))
			return 1;
	}
	return 0;
}

static int mrec_modified(struct mrec *r)
{
	const struct stat *a = &r->st[0], *b = &r->st[1];

	if (a->st_mode != b->st_mode || a->st_uid != b->st_uid ||
	    a->st_gid != b->st_gid || a->st_size != b->st_size ||
	    a->st_nlink != b->st_nlink || a->st_rdev != b->st_rdev ||
	    a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
	    a->st_mtim.tv_nsec != b->st_mtim.tv_nsec)
		return 1;
	/* Every change of an inode moves its ctime. */
	if (a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	    a->st_ctim.tv_nsec == b->st_ctim.tv_nsec)
		return 0;
	if (S_ISLNK(a->st_mode) && nx_cli_links_differ(r->any[0], r->any[1]))
		return 1;
	if (S_ISREG(a->st_mode) && nx_cli_files_differ(r->any[0], r->any[1]))
		return 1;
	return xattrs_differ(r->any[0], r->any[1]);
}

static int memit(struct mdiff *md, int kind, mode_t type, const char *path,
		 const char *newpath)
{
	struct nx_diff_entry *e;

	if (md->nout == md->capout) {
		size_t cap = md->capout ? md->capout * 2 : 64;
		struct nx_diff_entry *more = realloc(md->out,
						     cap * sizeof(*more));

		if (!more)
			return -1;
		md->out = more;
		md->capout = cap;
	}
	e = &md->out[md->nout++];
	e->kind = kind;
	e->type = type;
	e->path = path;
	e->newpath = newpath;
	return 0;
}

static struct mloc *mfind(struct mloc *list, const struct mloc *l)
{
	for (; list; list = list->next)
		if (list->parent == l->parent && !strcmp(list->name, l->name))
			return list;
	return NULL;
}

static int mcount_only(struct mloc *list, struct mloc *other,
		       struct mloc **one)
{
	int n = 0;

	for (; list; list = list->next)
		if (!mfind(other, list)) {
			n++;
			*one = list;
		}
	return n;
}

/* Adding, removing or renaming an entry of the root changes the root. */
static void note_root(struct mdiff *md, int s, const struct mloc *l)
{
	if (l->parent == md->root_ino[s])
		md->root_touched = 1;
}

static int mclassify(struct mdiff *md, struct mrec *r)
{
	struct mloc *l, *o1 = NULL, *n1 = NULL;
	int same = r->have[0] && r->have[1] && r->gen[0] == r->gen[1] &&
		   (r->st[0].st_mode & S_IFMT) == (r->st[1].st_mode & S_IFMT);
	int renamed = 0, rc = 0;

	if (!same) {
		for (l = r->locs[0]; l && !rc; l = l->next) {
			note_root(md, 0, l);
			rc = memit(md, NX_DIFF_REMOVED, r->st[0].st_mode,
				   l->path, NULL);
		}
		for (l = r->locs[1]; l && !rc; l = l->next) {
			note_root(md, 1, l);
			rc = memit(md, NX_DIFF_ADDED, r->st[1].st_mode, l->path,
				   NULL);
		}
		return rc;
	}
	if (mcount_only(r->locs[0], r->locs[1], &o1) == 1 &&
	    mcount_only(r->locs[1], r->locs[0], &n1) == 1) {
		renamed = 1;
		note_root(md, 0, o1);
		note_root(md, 1, n1);
		rc = memit(md, NX_DIFF_RENAMED, r->st[1].st_mode, o1->path,
			   n1->path);
	} else {
		for (l = r->locs[0]; l && !rc; l = l->next)
			if (!mfind(r->locs[1], l)) {
				note_root(md, 0, l);
				rc = memit(md, NX_DIFF_REMOVED,
					   r->st[0].st_mode, l->path, NULL);
			}
		for (l = r->locs[1]; l && !rc; l = l->next)
			if (!mfind(r->locs[0], l)) {
				note_root(md, 1, l);
				rc = memit(md, NX_DIFF_ADDED, r->st[1].st_mode,
					   l->path, NULL);
			}
	}
	if (rc || !mrec_modified(r))
		return rc;
	for (l = r->locs[1]; l && !rc; l = l->next)
		if (mfind(r->locs[0], l) || (renamed && l == n1))
			rc = memit(md, NX_DIFF_MODIFIED, r->st[1].st_mode,
				   l->path, NULL);
	return rc;
}

static int by_path(const void *a, const void *b)
{
	const struct nx_diff_entry *x = a, *y = b;
	int c = strcmp(x->path, y->path);

	return c ? c : x->kind - y->kind;
}

static void mfree(struct mdiff *md)
{
	size_t i;
	int s;

	for (i = 0; i < md->n; i++)
		for (s = 0; s < 2; s++) {
			struct mloc *l = md->recs[i].locs[s], *next;

			free(md->recs[i].any[s]);
			for (; l; l = next) {
				next = l->next;
				free(l->name);
				free(l->path);
				free(l);
			}
		}
	free(md->recs);
	free(md->slots);
	free(md->out);
}

static int diff_mount(const char *mnt, const char *old, const char *new,
		      int show_type)
{
	static char full[PATH_MAX], rel[PATH_MAX];
	struct mdiff md = { { NULL, NULL } };
	char roots[2][PATH_MAX];
	struct stat st;
	size_t i;
	int s, rc = 0;

	for (s = 0; s < 2; s++) {
		const char *name = s ? new : old;

		if (name)
			snprintf(roots[s], sizeof(roots[s]), "%s/%s/%s", mnt,
				 NX_SNAPDIR_NAME, name);
		else
			snprintf(roots[s], sizeof(roots[s]), "%s", mnt);
		if (stat(roots[s], &st) < 0 || !S_ISDIR(st.st_mode)) {
			nx_cli_error("%s: %s", roots[s], name && errno ==
				     ENOENT ? "no such snapshot" :
				     strerror(errno));
			return NX_CLI_FAIL;
		}
		md.root[s] = roots[s];
		get_inomap(roots[s], &md.map[s]);
		md.root_ino[s] = ext_ino(&md, s, st.st_ino);
		snprintf(full, sizeof(full), "%s", roots[s]);
		rel[0] = 0;
		if (walk_tree(&md, s, full, strlen(full), rel, 0,
			      md.root_ino[s])) {
			nx_cli_error("walking %s failed: %s", roots[s],
				     strerror(md.err));
			mfree(&md);
			return NX_CLI_FAIL;
		}
	}
	for (i = 0; i < md.n && !rc; i++)
		rc = mclassify(&md, &md.recs[i]);
	/*
	 * The root has no entry: it counts as modified when its mtime moved
	 * (root_mtime_moved) or its owner, mode, link count or xattrs
	 * differ.
	 */
	if (!rc) {
		struct stat a, b;

		rc = stat(roots[0], &a) || stat(roots[1], &b);
		if (!rc && (root_mtime_moved(roots[0], roots[1],
					     md.root_touched) ||
			    a.st_mode != b.st_mode ||
			    a.st_uid != b.st_uid || a.st_gid != b.st_gid ||
			    a.st_nlink != b.st_nlink ||
			    xattrs_differ(roots[0], roots[1])))
			rc = memit(&md, NX_DIFF_MODIFIED, S_IFDIR, "/", NULL);
	}
	if (rc) {
		nx_cli_error("out of memory");
		mfree(&md);
		return NX_CLI_FAIL;
	}
	if (md.nout)
		qsort(md.out, md.nout, sizeof(*md.out), by_path);
	for (i = 0; i < md.nout; i++)
		if (print_entry(&show_type, &md.out[i]))
			break;
	mfree(&md);
	return fflush(stdout) ? NX_CLI_FAIL : 0;
}

static void diff_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs diff [-F] IMAGE_OR_MOUNTPOINT OLD [NEW]\n"
		"\n"
		"List what changed from snapshot OLD to snapshot NEW (default: the\n"
		"live tree): '- PATH' removed, '+ PATH' created, 'M PATH' changed,\n"
		"'R OLD -> NEW' renamed.  -F adds the file type.\n");
}

int nx_cmd_diff(int argc, char **argv)
{
	const char *args[3] = { NULL, NULL, NULL };
	int n, show_type = 0, rc;
	const struct nx_cli_opt opts[] = {
		{ "-F", &show_type, 1 },
		{ NULL, NULL, 0 },
	};
	struct stat st;

	rc = nx_cli_parse(argc, argv, "diff", opts, args, 3, &n);
	if (rc == NX_CLI_HELP) {
		diff_usage(stdout);
		return NX_CLI_OK;
	}
	if (rc || n < 2 || n > 3) {
		diff_usage(stderr);
		return NX_CLI_USAGE;
	}
	if (stat(args[0], &st) == 0 && S_ISDIR(st.st_mode))
		return diff_mount(args[0], args[1], args[2], show_type);
	return diff_image(args[0], args[1], args[2], show_type);
}
