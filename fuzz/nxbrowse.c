/*
 * nxbrowse.c - bounded, read-only tour of a volume and its snapshots.
 *
 * Everything is capped (depth, directories, entries, bytes) so that a
 * corrupt image cannot make one run take long; a real hang inside a
 * single fs-layer call is left for the fuzzer's timeout to catch.
 * Directories are listed the way FUSE lists them: a few entries per
 * nx_readdir call, resuming from the last entry's cookie, so cookie
 * handling is exercised as much as the entries themselves.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/perm.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"
#include "nxbrowse.h"

#define NXB_MAX_DEPTH		10
#define NXB_MAX_DIRS		128	/* per tree */
#define NXB_MAX_ENTRIES		512	/* listed per tree */
#define NXB_MAX_VISITS		24	/* entries looked at per directory */
#define NXB_MAX_DIR_CALLS	256	/* nx_readdir calls per directory */
#define NXB_BATCH		13	/* entries per nx_readdir call */
#define NXB_READ_CHUNK		8192
#define NXB_MAX_BYTES		(128u << 10)	/* file bytes per tree */
#define NXB_MAX_XATTRS		16	/* values read per inode */
#define NXB_MAX_VIEWS		8

uint64_t nxb_max_dir_size;

struct nxb_dent {
	char name[NX_NAME_MAX + 1];
	ext2_ino_t ino;
	unsigned char type;
	uint64_t next;
};

struct nxb_batch {
	struct nxb_dent v[NXB_BATCH];
	int n;
	int bad;			/* a name that breaks the contract */
	int odd;			/* names with NUL or '/' inside */
};

struct nxb_walk {
	struct nx_volume *vol;
	struct nxb_stats *st;
	struct nx_cred cred;		/* root: sees trusted.* too */
	ext2_ino_t visited[NXB_MAX_DIRS];
	int nvisited;
	unsigned long entries;		/* budget used in this tree */
	unsigned long bytes;
	char *buf;			/* NXB_READ_CHUNK bytes */
};

static void violation(struct nxb_stats *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void violation(struct nxb_stats *st, const char *fmt, ...)
{
	va_list ap;

	if (!st->violations++) {
		va_start(ap, fmt);
		vsnprintf(st->violation, sizeof(st->violation), fmt, ap);
		va_end(ap);
	}
}

/*
 * A failed call is fine on a corrupt image, but its code must be one the
 * FUSE layer can turn into an errno: a small positive errno or a code of
 * the ext2 com_err table.
 */
static int note_err(struct nxb_walk *w, errcode_t err, const char *what)
{
	if (!err)
		return 0;
	w->st->errors++;
	if (err < 0 || (err >= 4096 && (err < EXT2_ET_BASE ||
					 err >= EXT2_ET_BASE + 256)))
		violation(w->st, "%s returned %ld", what, (long)err);
	return 1;
}

static int collect(void *priv, const char *name, size_t len, ext2_ino_t ino,
		   unsigned char type, uint64_t next)
{
	struct nxb_batch *b = priv;
	struct nxb_dent *d;

	if (b->n == NXB_BATCH)
		return 1;
	if (len > NX_NAME_MAX || name[len]) {
		b->bad = 1;
		return 1;
	}
	/*
	 * An empty name, or a NUL or '/' inside one, is on-disk corruption
	 * that the kernel's ext4 passes through as well (its getdents then
	 * fails with EIO, as FUSE's does).  Counted, not fatal.
	 */
	if (!len || strlen(name) != len || memchr(name, '/', len))
		b->odd++;
	d = &b->v[b->n++];
	memcpy(d->name, name, len + 1);
	d->ino = ino;
	d->type = type;
	d->next = next;
	return 0;
}

static int visited(struct nxb_walk *w, ext2_ino_t ino)
{
	int i;

	for (i = 0; i < w->nvisited; i++)
		if (w->visited[i] == ino)
			return 1;
	return 0;
}

static void read_at(struct nxb_walk *w, ext2_ino_t ino, uint64_t off,
		    uint64_t isize)
{
	size_t want = NXB_READ_CHUNK, got = 0;
	errcode_t err;

	if (w->bytes >= NXB_MAX_BYTES)
		return;
	err = nx_file_read(w->vol, ino, w->buf, want, off, &got);
	if (note_err(w, err, "nx_file_read"))
		return;
	if (got > want)
		violation(w->st, "nx_file_read(ino %u) got %zu > %zu", ino,
			  got, want);
	else if (off >= isize && got)
		violation(w->st, "nx_file_read(ino %u) read %zu bytes past "
			  "EOF", ino, got);
	else if (off < isize && got > isize - off)
		violation(w->st, "nx_file_read(ino %u) crossed EOF", ino);
	w->bytes += got;
	w->st->bytes += got;
}

static void seek_file(struct nxb_walk *w, ext2_ino_t ino, uint64_t isize)
{
	uint64_t res = 0;
	errcode_t err;

	err = nx_file_seek(w->vol, ino, 0, SEEK_DATA, &res);
	if (!err && res > isize)
		violation(w->st, "SEEK_DATA(ino %u) beyond EOF", ino);
	if (err != ENXIO)
		note_err(w, err, "nx_file_seek");
	err = nx_file_seek(w->vol, ino, 0, SEEK_HOLE, &res);
	if (!err && res > isize)
		violation(w->st, "SEEK_HOLE(ino %u) beyond EOF", ino);
	if (err != ENXIO)
		note_err(w, err, "nx_file_seek");
}

/* Start, middle, tail and past the end: every mapping layer gets asked. */
static void read_file(struct nxb_walk *w, ext2_ino_t ino, const struct stat *s)
{
	uint64_t isize = (uint64_t)s->st_size;

	w->st->files++;
	read_at(w, ino, 0, isize);
	if (isize > NXB_READ_CHUNK) {
		read_at(w, ino, isize / 2, isize);
		read_at(w, ino, isize - 1, isize);
	}
	read_at(w, ino, isize + 1, isize);
	seek_file(w, ino, isize);
}

static void read_link(struct nxb_walk *w, ext2_ino_t ino)
{
	char target[4097];
	size_t len = 0;
	errcode_t err;

	err = nx_readlink(w->vol, ino, target, sizeof(target), &len);
	if (note_err(w, err, "nx_readlink"))
		return;
	/*
	 * A target with a NUL inside (corrupt) is fine: FUSE sends the
	 * string, as the kernel's readlink stops at the NUL too.
	 */
	if (len < sizeof(target) && target[len])
		violation(w->st, "nx_readlink(ino %u) not NUL terminated at "
			  "%zu", ino, len);
}

static void read_xattrs(struct nxb_walk *w, ext2_ino_t ino)
{
	size_t len = 0, total, vlen, off;
	char *names;
	int n = 0;
	errcode_t err;

	err = nx_listxattr(w->vol, &w->cred, ino, NULL, 0, &len);
	if (note_err(w, err, "nx_listxattr") || !len)
		return;
	if (len > 65536) {
		violation(w->st, "nx_listxattr(ino %u) size %zu", ino, len);
		return;
	}
	names = malloc(len);
	if (!names)
		return;
	err = nx_listxattr(w->vol, &w->cred, ino, names, len, &total);
	if (note_err(w, err, "nx_listxattr"))
		goto out;
	if (total > len) {
		violation(w->st, "nx_listxattr(ino %u) grew", ino);
		goto out;
	}
	for (off = 0; off < total && n < NXB_MAX_XATTRS; n++) {
		const char *name = names + off;
		size_t nl = strnlen(name, total - off);

		if (nl == total - off) {
			violation(w->st, "nx_listxattr(ino %u) names not NUL "
				  "terminated", ino);
			break;
		}
		off += nl + 1;
		err = nx_getxattr(w->vol, &w->cred, ino, name, NULL, 0,
				  &vlen);
		if (note_err(w, err, "nx_getxattr"))
			continue;
		if (vlen <= NXB_READ_CHUNK) {
			size_t got = 0;

			err = nx_getxattr(w->vol, &w->cred, ino, name, w->buf,
					  NXB_READ_CHUNK, &got);
			if (!note_err(w, err, "nx_getxattr"))
				w->st->xattrs++;
		}
	}
out:
	free(names);
}

static void walk_dir(struct nxb_walk *w, ext2_ino_t dir, int depth);

/* Everything about one entry except recursion into subdirectories. */
static void visit(struct nxb_walk *w, ext2_ino_t dir, const struct nxb_dent *d,
		  int depth)
{
	ext2_ino_t ino = 0;
	struct stat s;
	unsigned flags;
	errcode_t err;

	err = nx_lookup(w->vol, dir, d->name, &ino);
	if (note_err(w, err, "nx_lookup"))
		ino = d->ino;
	err = nx_getattr(w->vol, ino, &s);
	if (note_err(w, err, "nx_getattr"))
		return;
	if (note_err(w, nx_get_iflags(w->vol, ino, &flags), "nx_get_iflags"))
		flags = 0;
	read_xattrs(w, ino);
	if (S_ISREG(s.st_mode))
		read_file(w, ino, &s);
	else if (S_ISLNK(s.st_mode))
		read_link(w, ino);
	else if (S_ISDIR(s.st_mode) && depth < NXB_MAX_DEPTH &&
		 (!nxb_max_dir_size ||
		  (uint64_t)s.st_size <= nxb_max_dir_size))
		walk_dir(w, ino, depth + 1);
}

/*
 * List DIR in batches.  A call that resumes at POS and hands back a full
 * batch all carrying POS as their cookie again would make the kernel's
 * getdents loop forever: that is a violation, not a clean error.
 */
static void walk_dir(struct nxb_walk *w, ext2_ino_t dir, int depth)
{
	struct nxb_batch *b;
	uint64_t pos = 0;
	int calls, i, visits = 0;
	errcode_t err;

	if (visited(w, dir) || w->nvisited == NXB_MAX_DIRS)
		return;
	w->visited[w->nvisited++] = dir;
	w->st->dirs++;
	b = malloc(sizeof(*b));
	if (!b)
		return;
	for (calls = 0; calls < NXB_MAX_DIR_CALLS; calls++) {
		int stuck;

		b->n = 0;
		b->bad = 0;
		b->odd = 0;
		err = nx_readdir(w->vol, dir, pos, collect, b);
		if (b->bad)
			violation(w->st, "nx_readdir(dir %u) gave a bad name",
				  dir);
		w->st->odd_names += b->odd;
		if (note_err(w, err, "nx_readdir") || !b->n)
			break;
		stuck = pos && b->n == NXB_BATCH;
		for (i = 0; i < b->n; i++)
			if (b->v[i].next != pos)
				stuck = 0;
		if (stuck) {
			violation(w->st, "nx_readdir(dir %u) does not progress "
				  "from cookie %llu", dir,
				  (unsigned long long)pos);
			break;
		}
		pos = b->v[b->n - 1].next;
		for (i = 0; i < b->n; i++) {
			const struct nxb_dent *d = &b->v[i];

			w->st->entries++;
			if (++w->entries > NXB_MAX_ENTRIES)
				goto out;
			if (!d->name[0] || !strcmp(d->name, ".") ||
			    !strcmp(d->name, "..") || ++visits > NXB_MAX_VISITS)
				continue;
			visit(w, dir, d, depth);
		}
	}
out:
	free(b);
}

void nxb_walk(struct nx_volume *vol, struct nxb_stats *st)
{
	struct nxb_walk w;
	struct statvfs sv;
	struct stat s;

	memset(&w, 0, sizeof(w));
	w.vol = vol;
	w.st = st;
	w.buf = malloc(NXB_READ_CHUNK);
	if (!w.buf)
		return;
	w.cred.uid = 0;
	w.cred.gid = 0;
	note_err(&w, nx_volume_statfs(vol, &sv), "nx_volume_statfs");
	if (note_err(&w, nx_getattr(vol, EXT2_ROOT_INO, &s), "nx_getattr"))
		s.st_size = 0;
	else
		read_xattrs(&w, EXT2_ROOT_INO);
	if (!nxb_max_dir_size || (uint64_t)s.st_size <= nxb_max_dir_size)
		walk_dir(&w, EXT2_ROOT_INO, 0);
	free(w.buf);
}

void nxb_browse(struct nx_volume *vol, struct nxb_stats *st)
{
	struct nx_snapinfo *list = NULL, info;
	struct nxb_walk w = { .vol = vol, .st = st };
	int n = 0, i;
	errcode_t err;

	nxb_walk(vol, st);
	err = nx_snap_list(vol, &list, &n);
	if (note_err(&w, err, "nx_snap_list"))
		return;
	for (i = 0; i < n && i < NXB_MAX_VIEWS; i++) {
		struct nx_volume *view = NULL;

		err = nx_snap_find(vol, list[i].name, &info);
		if (!note_err(&w, err, "nx_snap_find") &&
		    info.ino != list[i].ino)
			violation(st, "nx_snap_find(%s) found another "
				  "snapshot", list[i].name);
		err = nx_snap_view_open(vol, list[i].ino, &view);
		if (note_err(&w, err, "nx_snap_view_open"))
			continue;
		st->views++;
		nxb_walk(view, st);
		nx_snap_view_close(view);
	}
	free(list);
}

int nxb_open_and_browse(const char *path, struct nxb_stats *st)
{
	struct nx_volume *vol = NULL;
	struct nxb_walk w = { .st = st };
	errcode_t err;

	memset(st, 0, sizeof(*st));
	err = nx_volume_open(path, NX_VOL_RDONLY, &vol, st->open_msg,
			     sizeof(st->open_msg));
	st->open_err = err;
	if (err) {
		note_err(&w, err, "nx_volume_open");
		st->errors--;		/* a refusal is the expected outcome */
		return st->violations ? -1 : 0;
	}
	nx_volume_lock(vol);
	nxb_browse(vol, st);
	nx_volume_unlock(vol);
	err = nx_volume_close(vol);
	if (err)
		violation(st, "read-only nx_volume_close failed: %s",
			  error_message(err));
	return st->violations ? -1 : 0;
}
