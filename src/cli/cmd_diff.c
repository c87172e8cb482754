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
#include "nextfs/open.h"
#include "nextfs/snaptool.h"
#include "cli.h"
#include "output.h"
#include "safepath.h"

int nx_cli_open_image(const char *image, struct nx_volume **vol)
{
	char msg[512] = "";
	errcode_t err = nx_open_volume(image, NX_VOL_RDONLY, vol, msg,
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

/* The output is complete only if every line reached stdout. */
static int finish_output(void)
{
	int bad = ferror(stdout);

	if (fflush(stdout) || bad) {
		nx_cli_error("writing the list: %s", strerror(errno ? errno :
							      EIO));
		return NX_CLI_FAIL;
	}
	return 0;
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
	return finish_output();
}

/* ------------------------------------------------------------------ */
/* Mountpoint mode.                                                    */

struct mloc {
	ino_t parent;
	char *name, *path;		/* path: from the tree's root */
	struct mloc *next;
};

struct mrec {
	ino_t ino;
	struct stat st[2];
	unsigned gen[2];
	int have[2];
	struct mloc *locs[2];
};

struct mdiff {
	int root[2];			/* each tree's root directory */
	uint64_t mnt_id;		/* the mount both are on */
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

/*
 * The inode generation of NAME in DIR (tells a reused inode number).
 * Only files and directories are opened: opening a device node would
 * reach its driver.
 */
static unsigned generation_at(int dir, const char *name,
			      const struct stat *st)
{
	unsigned gen = 0;
	int fd;

	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
		return 0;
	fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (ioctl(fd, FS_IOC_GETVERSION, &gen) < 0)
		gen = 0;
	close(fd);
	return gen;
}

/* The real mtime of the directory FD (NX_IOC_GET_MTIME); 0 if the mount
 * cannot say. */
static int real_mtime(int fd, struct nx_ioc_time *t)
{
	return ioctl(fd, NX_IOC_GET_MTIME, t) == 0;
}

/*
 * Was the root modified, as far as its mtime tells?  stat() shows a
 * snapshot root's take time, so the real mtimes are asked of the daemon;
 * a mount that cannot answer leaves it to TOUCHED: an entry of the root
 * came, went or moved (which is what moves a directory's mtime).
 */
static int root_mtime_moved(int a, int b, int touched)
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

/* Ask the daemon how the tree at the directory FD numbers its inodes. */
static void get_inomap(int fd, struct nx_ioc_inomap *map)
{
	if (ioctl(fd, NX_IOC_GET_INOMAP, map) < 0) {
		map->base = 0;		/* not nextfs: as they are */
		map->mask = ~0ULL;
	}
}

static int mrec_add(struct mdiff *md, int s, const char *rel, ino_t parent,
		    const char *name, ino_t ino, const struct stat *st,
		    unsigned gen)
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
		r->gen[s] = gen;
	}
	return 0;
nomem:
	if (l) {
		free(l->name);
		free(l->path);
		free(l);
	}
	errno = ENOMEM;
	return -1;
}

/*
 * Walking one tree with directory descriptors: every name is opened
 * relative to its directory with O_NOFOLLOW and checked to be on the
 * mount (a user swapping a directory for a symbolic link while root
 * walks cannot lead the walk out of the tree), and paths are built in a
 * buffer that grows, so trees of any depth are walked.  A directory's
 * entries are listed (and stat'ed) when it is entered; its descriptor is
 * kept while subdirectories remain to be entered, and no more than
 * MAX_OPEN are kept: one closed early is opened again by name from the
 * nearest open one above when it is needed.
 */
#define MAX_OPEN	64

struct msub {
	char *name;
	ino_t st_ino;
};

struct mframe {
	int fd;			/* the directory, or -1 (see above) */
	char *name;		/* its name in the frame above */
	ino_t st_ino;		/* what it was when listed */
	ino_t ext;		/* its inode number in the tree */
	size_t rlen;		/* the path up to it */
	struct msub *subs;	/* its subdirectories */
	size_t nsubs, next;
};

struct mwalk {
	struct mdiff *md;
	int s;
	struct mframe *f;
	size_t n, cap, open;
	char *rel;		/* the path of the entry at hand */
	size_t rcap;
};

/* REL = REL[0..LEN) "/" NAME; its new length, or 0 out of memory. */
static size_t rel_at(struct mwalk *w, size_t len, const char *name)
{
	size_t need = len + 1 + strlen(name) + 1;

	if (need > w->rcap) {
		size_t cap = need > 2 * w->rcap ? need : 2 * w->rcap;
		char *more = realloc(w->rel, cap);

		if (!more)
			return 0;
		w->rel = more;
		w->rcap = cap;
	}
	w->rel[len] = '/';
	strcpy(w->rel + len + 1, name);
	return need - 1;
}

static int add_sub(struct mframe *f, const char *name, ino_t st_ino)
{
	struct msub *more = realloc(f->subs, (f->nsubs + 1) * sizeof(*more));

	if (!more)
		return -1;
	f->subs = more;
	more[f->nsubs].st_ino = st_ino;
	more[f->nsubs].name = strdup(name);
	return more[f->nsubs++].name ? 0 : -1;
}

/* Record every entry of the frame F (just entered). */
static int list_dir(struct mwalk *w, struct mframe *f)
{
	struct mdiff *md = w->md;
	int fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0), rc = 0;
	DIR *dir = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;
	struct stat st;
	size_t len;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (errno = 0; !rc && (de = readdir(dir)); errno = 0) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (w->n == 1 && !strcmp(de->d_name, NX_SNAPDIR_NAME))
			continue;
		len = rel_at(w, f->rlen, de->d_name);
		if (!len) {
			errno = ENOMEM;
			rc = -1;
		} else if (fstatat(f->fd, de->d_name, &st,
				   AT_SYMLINK_NOFOLLOW) < 0 ||
			   mrec_add(md, w->s, w->rel, f->ext, de->d_name,
				    ext_ino(md, w->s, st.st_ino), &st,
				    generation_at(f->fd, de->d_name, &st)) ||
			   (S_ISDIR(st.st_mode) &&
			    add_sub(f, de->d_name, st.st_ino))) {
			rc = -1;
		}
	}
	if (!rc && errno)
		rc = -1;		/* readdir failed */
	closedir(dir);
	return rc;
}

/* Open NAME below the directory DIR: O_NOFOLLOW, on the mount, the
 * directory that was listed (ST_INO). */
static int open_subdir(struct mwalk *w, int dir, const char *name,
		       ino_t st_ino)
{
	int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return -1;
	if (nx_sp_on_mount(fd, w->md->mnt_id) == 0 && fstat(fd, &st) == 0) {
		if (st.st_ino == st_ino)
			return fd;
		errno = ESTALE;		/* replaced while we walked */
	}
	close(fd);
	return -1;
}

/* At most MAX_OPEN descriptors: close the shallowest (not the root's). */
static void limit_open(struct mwalk *w)
{
	size_t i;

	for (i = 1; w->open > MAX_OPEN && i < w->n; i++)
		if (w->f[i].fd >= 0) {
			close(w->f[i].fd);
			w->f[i].fd = -1;
			w->open--;
		}
}

/* Open the frame I again, by names from the nearest open one above. */
static int reopen(struct mwalk *w, size_t i)
{
	size_t j = i, k;

	while (w->f[j].fd < 0)
		j--;			/* the root's is always open */
	for (k = j + 1; k <= i; k++) {
		w->f[k].fd = open_subdir(w, w->f[k - 1].fd, w->f[k].name,
					 w->f[k].st_ino);
		if (w->f[k].fd < 0)
			return -1;
		w->open++;
		limit_open(w);
	}
	return 0;
}

/* Enter the directory FD (taken), NAME in the top frame. */
static int push_dir(struct mwalk *w, int fd, char *name, ino_t st_ino)
{
	struct mframe *f, *up = w->n ? &w->f[w->n - 1] : NULL;

	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		struct mframe *more = realloc(w->f, cap * sizeof(*more));

		if (!more) {
			close(fd);
			free(name);
			errno = ENOMEM;
			return -1;
		}
		w->f = more;
		w->cap = cap;
		up = w->n ? &w->f[w->n - 1] : NULL;
	}
	f = &w->f[w->n++];
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	f->name = name;
	f->st_ino = st_ino;
	f->ext = ext_ino(w->md, w->s, st_ino);
	w->open++;
	if (up) {
		f->rlen = rel_at(w, up->rlen, name);
		if (!f->rlen) {
			errno = ENOMEM;
			return -1;
		}
	}
	return list_dir(w, f);
}

static void pop_dir(struct mwalk *w)
{
	struct mframe *f = &w->f[--w->n];
	size_t i;

	if (f->fd >= 0) {
		close(f->fd);
		w->open--;
	}
	for (i = 0; i < f->nsubs; i++)
		free(f->subs[i].name);
	free(f->subs);
	free(f->name);
}

/* Walk side S from its root directory ROOT (not taken). */
static int walk_tree(struct mdiff *md, int s, int root)
{
	struct mwalk w = { .md = md, .s = s };
	struct stat st;
	struct msub *sub;
	struct mframe *f;
	int fd, rc = -1;

	fd = fcntl(root, F_DUPFD_CLOEXEC, 0);
	w.rel = malloc(w.rcap = 256);
	if (fd < 0 || !w.rel || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		goto out;
	}
	w.rel[0] = 0;
	if (push_dir(&w, fd, NULL, st.st_ino))
		goto out;
	while (w.n) {
		f = &w.f[w.n - 1];
		if (f->next == f->nsubs) {
			pop_dir(&w);
			continue;
		}
		sub = &f->subs[f->next++];
		if (f->fd < 0 && reopen(&w, w.n - 1))
			goto out;
		fd = open_subdir(&w, f->fd, sub->name, sub->st_ino);
		if (fd < 0) {
			rel_at(&w, f->rlen, sub->name);
			goto out;
		}
		if (f->next == f->nsubs && w.n > 1) {
			close(f->fd);	/* not needed again */
			f->fd = -1;
			w.open--;
		}
		if (push_dir(&w, fd, sub->name, sub->st_ino)) {
			sub->name = NULL;
			goto out;
		}
		sub->name = NULL;
		limit_open(&w);
	}
	rc = 0;
out:
	if (rc) {
		md->err = errno ? errno : EIO;
		nx_cli_error("walking %s: %s", w.rel && w.rel[0] ? w.rel :
			     "/", strerror(md->err));
	}
	while (w.n)
		pop_dir(&w);
	free(w.f);
	free(w.rel);
	return rc;
}

/* Do the xattrs of A (below ROOT A) and B differ?  -1: unreadable. */
static int xattrs_differ(int ra, const char *a, int rb, const char *b)
{
	int fa = nx_sp_open(ra, a, O_PATH), fb = -1, rc = -1, ua, ub;
	char *la = NULL, *lb = NULL, *va = NULL, *vb = NULL;
	size_t na = 0, nb = 0, xa, xb, i;

	if (fa < 0 || (fb = nx_sp_open(rb, b, O_PATH)) < 0)
		goto out;
	la = nx_sp_listxattr(fa, &na);
	ua = !la && errno == ENOTSUP;
	lb = nx_sp_listxattr(fb, &nb);
	ub = !lb && errno == ENOTSUP;
	if ((!la && !ua) || (!lb && !ub))
		goto out;
	rc = na != nb;
	for (i = 0; !rc && i < na; i += strlen(la + i) + 1) {
		free(va);
		free(vb);
		va = nx_sp_getxattr(fa, la + i, &xa);
		vb = va ? nx_sp_getxattr(fb, la + i, &xb) : NULL;
		if (!va || !vb)
			rc = errno == ENODATA ? 1 : -1;
		else
			rc = xa != xb || memcmp(va, vb, xa);
	}
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	free(la);
	free(lb);
	free(va);
	free(vb);
	return rc;
}

/* 1 modified, 0 not, -1 could not tell (errno). */
static int mrec_modified(const struct mdiff *md, struct mrec *r)
{
	const struct stat *a = &r->st[0], *b = &r->st[1];
	const char *pa = r->locs[0]->path, *pb = r->locs[1]->path;
	int rc;

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
	if (S_ISLNK(a->st_mode)) {
		rc = nx_cli_links_differ(md->root[0], pa, md->root[1], pb);
		if (rc)
			return rc;
	}
	if (S_ISREG(a->st_mode)) {
		rc = nx_cli_files_differ(md->root[0], pa, md->root[1], pb);
		if (rc)
			return rc;
	}
	return xattrs_differ(md->root[0], pa, md->root[1], pb);
}

static int memit(struct mdiff *md, int kind, mode_t type, const char *path,
		 const char *newpath)
{
	struct nx_diff_entry *e;

	if (md->nout == md->capout) {
		size_t cap = md->capout ? md->capout * 2 : 64;
		struct nx_diff_entry *more = realloc(md->out,
						     cap * sizeof(*more));

		if (!more) {
			errno = ENOMEM;
			return -1;
		}
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
	int renamed = 0, rc = 0, modified;

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
	if (rc)
		return rc;
	modified = mrec_modified(md, r);
	if (modified < 0) {
		nx_cli_error("comparing %s: %s", r->locs[1]->path,
			     strerror(errno));
		return -1;
	}
	for (l = r->locs[1]; l && !rc && modified; l = l->next)
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

			for (; l; l = next) {
				next = l->next;
				free(l->name);
				free(l->path);
				free(l);
			}
		}
	for (s = 0; s < 2; s++)
		if (md->root[s] >= 0)
			close(md->root[s]);
	free(md->recs);
	free(md->slots);
	free(md->out);
}

/* Open the tree NAME (NULL: the live tree) of the mount at ROOT. */
static int open_side(const char *mnt, int root, const char *name)
{
	char *rel = NULL;
	int fd;

	if (name && nx_snap_name_check(name)) {
		errno = ENOENT;
		fd = -1;
	} else if (name && asprintf(&rel, "%s/%s", NX_SNAPDIR_NAME,
				    name) < 0) {
		rel = NULL;
		errno = ENOMEM;
		fd = -1;
	} else {
		fd = nx_sp_open(root, name ? rel : "", O_RDONLY | O_DIRECTORY);
	}
	if (fd < 0)
		nx_cli_error("%s%s%s: %s", mnt, name ? "/" : "",
			     name ? rel : "", name && errno == ENOENT ?
			     "no such snapshot" : strerror(errno));
	free(rel);
	return fd;
}

/* Write the entries; NX_CLI_FAIL if stdout did not take them. */
static int print_all(const struct nx_diff_entry *e, size_t n,
		     int show_type)
{
	size_t i;

	for (i = 0; i < n && !ferror(stdout); i++)
		print_entry(&show_type, &e[i]);
	return finish_output();
}

static int diff_mount(const char *mnt, const char *old, const char *new,
		      int show_type)
{
	struct mdiff md = { .root = { -1, -1 } };
	struct nx_sp_place p;
	struct stat a, b;
	size_t i;
	int s, rc = 0;

	if (nx_sp_locate(mnt, NX_SP_FUSE | NX_SP_FOLLOW_LAST, &p)) {
		nx_cli_error("%s: %s", mnt, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	if (p.rel[0]) {
		nx_cli_error("%s is not the mountpoint of a nextfs volume "
			     "(it is below the one at %s)", mnt, p.mnt.path);
		nx_sp_place_free(&p);
		return NX_CLI_FAIL;
	}
	md.mnt_id = p.mnt.id;
	for (s = 0; s < 2 && !rc; s++) {
		md.root[s] = open_side(p.mnt.path, p.mnt.fd, s ? new : old);
		if (md.root[s] < 0 || fstat(md.root[s], &a) < 0) {
			rc = -1;
			break;
		}
		get_inomap(md.root[s], &md.map[s]);
		md.root_ino[s] = ext_ino(&md, s, a.st_ino);
		rc = walk_tree(&md, s, md.root[s]);
	}
	nx_sp_place_free(&p);
	if (rc) {
		mfree(&md);
		return NX_CLI_FAIL;
	}
	for (i = 0; i < md.n && !rc; i++)
		rc = mclassify(&md, &md.recs[i]);
	/*
	 * The root has no entry: it counts as modified when its mtime moved
	 * (root_mtime_moved) or its owner, mode, link count or xattrs
	 * differ.
	 */
	if (!rc) {
		rc = fstat(md.root[0], &a) || fstat(md.root[1], &b);
		if (!rc && (root_mtime_moved(md.root[0], md.root[1],
					     md.root_touched) ||
			    a.st_mode != b.st_mode ||
			    a.st_uid != b.st_uid || a.st_gid != b.st_gid ||
			    a.st_nlink != b.st_nlink ||
			    xattrs_differ(md.root[0], "", md.root[1], "")))
			rc = memit(&md, NX_DIFF_MODIFIED, S_IFDIR, "/", NULL);
	}
	if (rc) {
		if (errno == ENOMEM)
			nx_cli_error("out of memory");
		mfree(&md);
		return NX_CLI_FAIL;
	}
	if (md.nout)
		qsort(md.out, md.nout, sizeof(*md.out), by_path);
	rc = print_all(md.out, md.nout, show_type);
	mfree(&md);
	return rc;
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
