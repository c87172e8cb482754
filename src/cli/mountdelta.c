/*
 * mountdelta.c - the delta (delta.h) of two trees of a nextfs-fuse mount
 * (the live tree, .snapshots/NAME): asked of the daemon, which runs the
 * block-map classifier on the views it has open (NX_IOC_DELTA_START),
 * or, for the callers the daemon does not hand it to (docs/security.md),
 * made by the stat-walk source of the same classifier here: both trees
 * walked through the kernel.  The
 * kernel checks every directory against the caller, so the walk shows
 * exactly what the caller may see; a directory or file it may not read
 * is an error, not a guess.
 *
 * Every entry is stat'ed and remembered (a walk cannot tell which
 * directories changed without listing them); a file on both sides is
 * modified when its type, mode, owner, size, links, device or mtime
 * differ, unchanged when its ctime did not move (every change of an
 * inode moves it), and otherwise compared: content (symlink: target),
 * then xattrs.  A file is matched across the trees by the inode number
 * ext gave it (NX_IOC_GET_INOMAP) and its generation (FS_IOC_GETVERSION).
 */
#include <dirent.h>
#include <stddef.h>
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
#include "nextfs/delta.h"
#include "nextfs/grow.h"
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"

struct mwsrc {
	struct nx_delta_source src;	/* first: the source is the walker */
	struct nx_delta_work *work;
	int root[2];			/* each tree's root directory */
	uint64_t mnt_id;		/* the mount both are on */
	struct nx_ioc_inomap map[2];	/* each tree's inode numbering */
	int reported;			/* an error was already printed */
};

/*
 * The tree's own inode number of what stat() calls ST_INO: a snapshot
 * view shows its files under numbers of its own (nxioctl.h), and a file
 * is matched across the two trees by the number ext gave it.
 */
static ext2_ino_t ext_ino(const struct mwsrc *md, int s, ino_t st_ino)
{
	return (ext2_ino_t)((st_ino - md->map[s].base) & md->map[s].mask);
}

/* Ask the daemon how the tree at the directory FD numbers its inodes. */
static void get_inomap(int fd, struct nx_ioc_inomap *map)
{
	if (ioctl(fd, NX_IOC_GET_INOMAP, map) < 0) {
		map->base = 0;		/* not nextfs: as they are */
		map->mask = ~0ULL;
	}
}

/*
 * The inode generation of NAME in DIR (tells a reused inode number), or
 * NX_NO_GEN if it cannot be read (a file the caller may not open).  Only
 * files and directories are opened: opening a device node would reach
 * its driver; the others count as 0.
 */
#define NX_NO_GEN	((uint64_t)1 << 32)

static uint64_t generation_at(int dir, const char *name,
			      const struct stat *st)
{
	unsigned gen = 0;
	int fd;

	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
		return 0;
	fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC);
	if (fd < 0)
		return NX_NO_GEN;
	if (ioctl(fd, FS_IOC_GETVERSION, &gen) < 0) {
		close(fd);
		return NX_NO_GEN;
	}
	close(fd);
	return gen;
}

static void stat_to_attr(const struct stat *st, uint64_t gen,
			 struct nx_delta_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = st->st_mode;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->nlink = (uint32_t)st->st_nlink;
	a->gen = (uint32_t)gen;
	a->gen_unknown = gen == NX_NO_GEN;
	a->size = (uint64_t)st->st_size;
	a->rdev = st->st_rdev;
	a->atime = st->st_atim;
	a->mtime = st->st_mtim;
	a->ctime = st->st_ctim;
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
	ext2_ino_t ext;		/* its inode number in the tree */
	size_t rlen;		/* the path up to it */
	struct msub *subs;	/* its subdirectories */
	size_t nsubs, scap, next;
};

struct mwalk {
	struct mwsrc *md;
	int s;
	struct mframe *f;
	size_t n, cap, open;
	char *rel;		/* the path of the entry at hand */
	size_t rcap;
};

static size_t rel_at(struct mwalk *w, size_t len, const char *name)
{
	return nx_delta_path_at(&w->rel, &w->rcap, len, name);
}

static int add_sub(struct mframe *f, const char *name, ino_t st_ino)
{
	struct msub *sub;

	if (nx_grow((void **)&f->subs, &f->scap, f->nsubs, sizeof(*sub), 16)) {
		errno = ENOMEM;
		return -1;
	}
	sub = &f->subs[f->nsubs];
	sub->st_ino = st_ino;
	sub->name = strdup(name);
	f->nsubs++;		/* freed with the frame, even if NULL */
	return sub->name ? 0 : -1;
}

/* Remember the entry at REL (stat ST) in the directory PARENT. */
static int remember(struct mwsrc *md, int s, const char *rel,
		    ext2_ino_t parent, const struct stat *st, uint64_t gen)
{
	struct nx_delta_attr a;
	errcode_t err;

	stat_to_attr(st, gen, &a);
	err = nx_delta_remember(md->work, s, ext_ino(md, s, st->st_ino),
				parent, rel, st->st_mode, &a);
	if (err)
		errno = ENOMEM;
	return err ? -1 : 0;
}

/* Record every entry of the frame F (just entered). */
static int list_dir(struct mwalk *w, struct mframe *f)
{
	struct mwsrc *md = w->md;
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
			   remember(md, w->s, w->rel, f->ext, &st,
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

	if (nx_grow((void **)&w->f, &w->cap, w->n, sizeof(*w->f), 64)) {
		close(fd);
		free(name);
		errno = ENOMEM;
		return -1;
	}
	up = w->n ? &w->f[w->n - 1] : NULL;	/* the array may have moved */
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
static int walk_tree(struct mwsrc *md, int s, int root)
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
		rc = errno ? errno : EIO;
		nx_cli_error("walking %s: %s", w.rel && w.rel[0] ? w.rel :
			     "/", strerror(rc));
		md->reported = 1;
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

/* The real mtime of the directory FD (NX_IOC_GET_MTIME): stat() shows
 * a snapshot root's take time instead.  0 if the mount cannot say. */
static int real_mtime(int fd, struct timespec *t)
{
	struct nx_ioc_time it;

	if (ioctl(fd, NX_IOC_GET_MTIME, &it) < 0)
		return 0;
	t->tv_sec = (time_t)it.sec;
	t->tv_nsec = (long)it.nsec;
	return 1;
}

static errcode_t mw_walk(struct nx_delta_source *src, struct nx_delta_work *w,
			 int s)
{
	struct mwsrc *md = (struct mwsrc *)src;

	md->work = w;
	return walk_tree(md, s, md->root[s]);
}

/* Only the root is asked for: every other file came with its name. */
static errcode_t mw_attr(struct nx_delta_source *src, int s, ext2_ino_t ino,
			 struct nx_delta_attr *a)
{
	struct mwsrc *md = (struct mwsrc *)src;
	struct stat st;

	memset(a, 0, sizeof(*a));
	if (ino != EXT2_ROOT_INO)
		return 0;
	if (fstat(md->root[s], &st) < 0)
		return errno;
	stat_to_attr(&st, 0, a);
	real_mtime(md->root[s], &a->mtime);
	return 0;
}

/* The root has no entry: its mtime, owner, mode, links or xattrs. */
static errcode_t compare_root(struct mwsrc *md, struct nx_delta_inode *d)
{
	const struct nx_delta_attr *a = &d->attr[0], *b = &d->attr[1];
	int rc;

	if (a->mtime.tv_sec != b->mtime.tv_sec ||
	    a->mtime.tv_nsec != b->mtime.tv_nsec || a->mode != b->mode ||
	    a->uid != b->uid || a->gid != b->gid || a->nlink != b->nlink) {
		d->what |= NX_DELTA_ATTR;
		return 0;
	}
	rc = xattrs_differ(md->root[0], "", md->root[1], "");
	if (rc < 0)
		return errno ? errno : EIO;
	if (rc)
		d->what |= NX_DELTA_XATTR;
	return 0;
}

/* 1 if they differ, 0 not, -1 could not tell (errno). */
static int attrs_differ(const struct nx_delta_attr *a,
			const struct nx_delta_attr *b)
{
	return a->mode != b->mode || a->uid != b->uid || a->gid != b->gid ||
	       a->size != b->size || a->nlink != b->nlink ||
	       a->rdev != b->rdev || a->mtime.tv_sec != b->mtime.tv_sec ||
	       a->mtime.tv_nsec != b->mtime.tv_nsec;
}

static errcode_t mw_compare(struct nx_delta_source *src,
			    struct nx_delta_inode *d, unsigned flags)
{
	struct mwsrc *md = (struct mwsrc *)src;
	const struct nx_delta_attr *a = &d->attr[0], *b = &d->attr[1];
	const char *pa, *pb;
	int rc = 0;

	if (d->ino == EXT2_ROOT_INO)
		return compare_root(md, d);
	if (attrs_differ(a, b)) {
		d->what |= NX_DELTA_ATTR;
		return 0;
	}
	/* Every change of an inode moves its ctime. */
	if (a->ctime.tv_sec == b->ctime.tv_sec &&
	    a->ctime.tv_nsec == b->ctime.tv_nsec)
		return 0;
	pa = d->names[0][0].path;
	pb = d->names[1][0].path;
	if (S_ISLNK(a->mode))
		rc = nx_cli_links_differ(md->root[0], pa, md->root[1], pb);
	else if (S_ISREG(a->mode))
		rc = nx_cli_files_differ(md->root[0], pa, md->root[1], pb);
	if (rc > 0) {
		d->what |= NX_DELTA_DATA;
		return 0;
	}
	if (!rc)
		rc = xattrs_differ(md->root[0], pa, md->root[1], pb);
	if (rc > 0)
		d->what |= NX_DELTA_XATTR;
	if (rc >= 0)
		return 0;
	rc = errno ? errno : EIO;
	nx_cli_error("comparing %s: %s", pb, strerror(rc));
	md->reported = 1;
	return rc;
}

int nx_cli_walk_delta(int root0, int root1, uint64_t mnt_id,
		      struct nx_delta *delta)
{
	struct mwsrc md = { .src = { .walk = mw_walk, .attr = mw_attr,
				     .compare = mw_compare },
			    .root = { root0, root1 }, .mnt_id = mnt_id };
	errcode_t err;
	int s;

	for (s = 0; s < 2; s++)
		get_inomap(md.root[s], &md.map[s]);
	err = nx_delta_compute(&md.src, 0, delta);
	if (err && !md.reported)
		nx_cli_error("comparing: %s", err == EXT2_ET_NO_MEMORY ?
			     "out of memory" : strerror(err));
	return err ? NX_CLI_FAIL : 0;
}

/* ------------------------------------------------------------------ */
/* From the daemon.                                                    */

int nx_cli_daemon_delta(int fd, uint32_t old_id, uint32_t new_id,
			unsigned flags, struct nx_delta *delta)
{
	struct nx_ioc_delta_start q = { .old_id = old_id, .new_id = new_id,
					.flags = flags };
	struct nx_ioc_delta_read *r = NULL;
	char *buf = NULL;
	uint64_t off = 0;
	errcode_t err;
	int rc = -1;

	memset(delta, 0, sizeof(*delta));
	if (ioctl(fd, NX_IOC_DELTA_START, &q) < 0)
		return -1;
	if (q.size > SIZE_MAX - 1) {
		errno = ENOMEM;
		return -1;
	}
	r = malloc(sizeof(*r));
	buf = malloc(q.size ? q.size : 1);
	if (!r || !buf) {
		errno = ENOMEM;
		goto out;
	}
	while (off < q.size) {
		memset(r, 0, offsetof(struct nx_ioc_delta_read, data));
		r->handle = q.handle;
		r->offset = off;
		if (ioctl(fd, NX_IOC_DELTA_READ, r) < 0)
			goto out;
		if (!r->len || r->len > NX_IOC_DELTA_CHUNK ||
		    r->len > q.size - off) {
			errno = EPROTO;
			goto out;
		}
		memcpy(buf + off, r->data, r->len);
		off += r->len;
	}
	err = nx_delta_decode(buf, q.size, delta);
	if (err) {
		errno = err == EXT2_ET_NO_MEMORY ? ENOMEM : EPROTO;
		goto out;
	}
	rc = 0;
out:
	free(r);
	free(buf);
	return rc;
}

int nx_cli_snap_at(int fd, const char *name, struct nx_ioc_snap *q,
		   int *pos)
{
	uint32_t after = 0;

	for (*pos = 0;; (*pos)++) {
		memset(q, 0, sizeof(*q));
		q->after_id = after;
		if (ioctl(fd, NX_IOC_SNAP_NEXT, q) < 0 ||
		    q->namelen >= sizeof(q->name))
			return -1;
		if (q->namelen == strlen(name) &&
		    !memcmp(q->name, name, q->namelen))
			return 0;
		after = q->id;
	}
}
