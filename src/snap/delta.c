/*
 * delta.c - the one classifier of what changed between two trees
 * (delta.h), whatever lists them: the block maps of snapshot views
 * (diff.c) or a stat walk through a mount (the nextfs tool).
 *
 * ext4 keeps no parent pointer in an inode, so a change is named by the
 * directory entries that point at it: the source remembers the entries
 * that may have changed on each side, and per inode the two sets of
 * (parent, name) decide.  Different identity (inode number reused:
 * generation or type differs, or absent on one side) -> a new file;
 * same identity -> the names only on one side were lost or gained
 * (exactly one of each is a rename), and the source says whether the
 * attributes, data or xattrs changed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nextfs/delta.h"
#include "nextfs/grow.h"
#include "snap_internal.h"

struct rec {
	ext2_ino_t ino;
	int have[2];			/* attr[s] came with a name */
	struct nx_delta_attr attr[2];
	struct nx_delta_name *names[2];
	size_t nnames[2], cap[2];
};

struct nx_delta_work {
	struct nx_delta_source *src;
	unsigned flags;
	struct nx_blkmap index;		/* ino -> slot in recs */
	struct rec *recs;
	size_t nrecs, caprecs;
};

static struct rec *get_rec(struct nx_delta_work *w, ext2_ino_t ino)
{
	blk64_t i;

	if (nx_blkmap_get(&w->index, ino, &i))
		return &w->recs[i];
	if (nx_grow((void **)&w->recs, &w->caprecs, w->nrecs,
		    sizeof(*w->recs), 256) ||
	    nx_blkmap_put(&w->index, ino, w->nrecs))
		return NULL;
	memset(&w->recs[w->nrecs], 0, sizeof(w->recs[0]));
	w->recs[w->nrecs].ino = ino;
	return &w->recs[w->nrecs++];
}

/* A name whose path is owned: NAME points after its last '/'. */
static errcode_t set_name(struct nx_delta_name *n, ext2_ino_t parent,
			  const char *path, mode_t type)
{
	const char *slash;

	n->path = strdup(path);
	if (!n->path)
		return EXT2_ET_NO_MEMORY;
	slash = strrchr(n->path, '/');
	n->name = slash ? (char *)slash + 1 : n->path;
	n->parent = parent;
	n->type = type & S_IFMT;
	return 0;
}

errcode_t nx_delta_remember(struct nx_delta_work *w, int s, ext2_ino_t ino,
			    ext2_ino_t parent, const char *path, mode_t type,
			    const struct nx_delta_attr *a)
{
	struct rec *r = get_rec(w, ino);
	errcode_t err;

	if (!r)
		return EXT2_ET_NO_MEMORY;
	err = nx_grow((void **)&r->names[s], &r->cap[s], r->nnames[s],
		      sizeof(*r->names[s]), 1);
	if (!err)
		err = set_name(&r->names[s][r->nnames[s]], parent, path, type);
	if (err)
		return err;
	r->nnames[s]++;
	if (a && !r->have[s]) {
		r->attr[s] = *a;
		r->have[s] = 1;
	}
	return 0;
}

static void free_names(struct nx_delta_name *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(v[i].path);
	free(v);
}

const struct nx_delta_name *nx_delta_find_name(const struct nx_delta_name *v,
					       size_t n,
					       const struct nx_delta_name *l)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i].parent == l->parent && !strcmp(v[i].name, l->name))
			return &v[i];
	return NULL;
}

/* How many names of side S the other side lacks; *ONE is one of them. */
static size_t count_only(const struct nx_delta_inode *d, int s,
			 const struct nx_delta_name **one)
{
	size_t i, n = 0;

	for (i = 0; i < d->nnames[s]; i++)
		if (!nx_delta_find_name(d->names[!s], d->nnames[!s],
					&d->names[s][i])) {
			n++;
			*one = &d->names[s][i];
		}
	return n;
}

static int same_file(const struct nx_delta_attr *a)
{
	return a[0].mode && a[1].mode &&
	       (a[0].gen == a[1].gen || a[0].gen_unknown ||
		a[1].gen_unknown) &&
	       (a[0].mode & S_IFMT) == (a[1].mode & S_IFMT);
}

static errcode_t add_inode(struct nx_delta *delta, struct nx_delta_inode *d)
{
	errcode_t err = nx_grow((void **)&delta->v, &delta->cap, delta->n,
				sizeof(*delta->v), 64);

	if (!err)
		delta->v[delta->n++] = *d;
	return err;
}

static void free_inode(struct nx_delta_inode *d)
{
	free_names(d->names[0], d->nnames[0]);
	free_names(d->names[1], d->nnames[1]);
	free(d->ext);
}

/* Decide what happened to the inode of R; its names move into DELTA. */
static errcode_t classify(struct nx_delta_work *w, struct rec *r,
			  struct nx_delta *delta)
{
	struct nx_delta_source *src = w->src;
	struct nx_delta_inode d;
	const struct nx_delta_name *one;
	errcode_t err = 0;
	int s;

	memset(&d, 0, sizeof(d));
	d.ino = r->ino;
	for (s = 0; s < 2; s++) {
		d.names[s] = r->names[s];
		d.nnames[s] = r->nnames[s];
		r->names[s] = NULL;
		r->nnames[s] = 0;
		if (r->have[s])
			d.attr[s] = r->attr[s];
		else if (!(s == 0 && (w->flags & NX_DELTA_FULL)))
			err = src->attr(src, s, r->ino, &d.attr[s]);
		if (err)
			goto out;
	}
	if (!same_file(d.attr)) {
		d.what = NX_DELTA_NEW;
		if ((w->flags & NX_DELTA_WANT_EXTENTS) &&
		    S_ISREG(d.attr[1].mode) && src->extents)
			err = src->extents(src, &d);
	} else {
		if (count_only(&d, 0, &one) || count_only(&d, 1, &one))
			d.what |= NX_DELTA_NAMES;
		err = src->compare(src, &d, w->flags);
	}
	/* The root always: a sender sets its times (orphans pass there). */
	if (!err && (d.what || d.ino == EXT2_ROOT_INO)) {
		err = add_inode(delta, &d);
		if (!err)
			return 0;
	}
out:
	free_inode(&d);
	return err;
}

static void work_free(struct nx_delta_work *w)
{
	size_t i;

	for (i = 0; i < w->nrecs; i++) {
		free_names(w->recs[i].names[0], w->recs[i].nnames[0]);
		free_names(w->recs[i].names[1], w->recs[i].nnames[1]);
	}
	free(w->recs);
	nx_blkmap_free(&w->index);
}

errcode_t nx_delta_compute(struct nx_delta_source *src, unsigned flags,
			   struct nx_delta *delta)
{
	struct nx_delta_work w = { .src = src, .flags = flags };
	errcode_t err = 0;
	size_t i;
	int s;

	memset(delta, 0, sizeof(*delta));
	delta->blocksize = src->blocksize;
	for (s = (flags & NX_DELTA_FULL) ? 1 : 0; s < 2 && !err; s++) {
		err = src->walk(src, &w, s);
		/* The root has no entry: remember it by hand. */
		if (!err)
			err = nx_delta_remember(&w, s, EXT2_ROOT_INO, 0, "/",
						S_IFDIR, NULL);
	}
	for (i = 0; i < w.nrecs && !err; i++)
		err = classify(&w, &w.recs[i], delta);
	work_free(&w);
	if (err)
		nx_delta_free(delta);
	return err;
}

void nx_delta_free(struct nx_delta *delta)
{
	size_t i;

	for (i = 0; i < delta->n; i++)
		free_inode(&delta->v[i]);
	free(delta->v);
	memset(delta, 0, sizeof(*delta));
}

size_t nx_delta_path_at(char **path, size_t *cap, size_t len,
			const char *name)
{
	size_t need = len + 1 + strlen(name) + 1;

	if (nx_grow_by((void **)path, cap, len, need - len, 1, 256))
		return 0;
	(*path)[len] = '/';
	strcpy(*path + len + 1, name);
	return need - 1;
}

errcode_t nx_delta_add_extent(struct nx_delta_inode *d, uint64_t lblk,
			      uint64_t count)
{
	struct nx_delta_extent *last = d->next ? &d->ext[d->next - 1] : NULL;

	if (!count)
		return 0;
	if (last && last->lblk + last->count == lblk) {
		last->count += count;
		return 0;
	}
	/* Grow by doubling: the capacity is the next power of two. */
	if (!(d->next & (d->next - 1))) {
		size_t cap = d->next;

		if (nx_grow((void **)&d->ext, &cap, d->next, sizeof(*d->ext),
			    1))
			return EXT2_ET_NO_MEMORY;
	}
	d->ext[d->next].lblk = lblk;
	d->ext[d->next].count = count;
	d->next++;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The lines of "nextfs diff".                                         */

struct lines {
	struct nx_diff_entry *v;
	size_t n, cap;
};

static errcode_t emit(struct lines *o, int kind, mode_t type,
		      const char *path, const char *newpath)
{
	struct nx_diff_entry *e;

	if (nx_grow((void **)&o->v, &o->cap, o->n, sizeof(*o->v), 64))
		return EXT2_ET_NO_MEMORY;
	e = &o->v[o->n++];
	e->kind = kind;
	e->type = type;
	e->path = path;
	e->newpath = newpath;
	return 0;
}

/* A name of side S that the other side lacks: '-' (0) or '+' (1). */
static errcode_t emit_only(struct lines *o, const struct nx_delta_inode *d,
			   int s, int all)
{
	errcode_t err = 0;
	size_t i;

	for (i = 0; i < d->nnames[s] && !err; i++) {
		const struct nx_delta_name *l = &d->names[s][i];

		if (all ||
		    !nx_delta_find_name(d->names[!s], d->nnames[!s], l))
			err = emit(o, s ? NX_DIFF_ADDED : NX_DIFF_REMOVED,
				   l->type, l->path, NULL);
	}
	return err;
}

static errcode_t inode_lines(struct lines *o, const struct nx_delta_inode *d)
{
	const struct nx_delta_name *o1 = NULL, *n1 = NULL, *l;
	errcode_t err;
	size_t i;

	if (d->what & NX_DELTA_NEW) {
		err = emit_only(o, d, 0, 1);
		return err ? err : emit_only(o, d, 1, 1);
	}
	if (count_only(d, 0, &o1) == 1 && count_only(d, 1, &n1) == 1) {
		err = emit(o, NX_DIFF_RENAMED, n1->type, o1->path, n1->path);
	} else {
		n1 = NULL;
		err = emit_only(o, d, 0, 0);
		if (!err)
			err = emit_only(o, d, 1, 0);
	}
	if (!(d->what & NX_DELTA_MODIFIED))
		return err;
	for (i = 0; i < d->nnames[1] && !err; i++) {
		l = &d->names[1][i];
		if (l == n1 ||
		    nx_delta_find_name(d->names[0], d->nnames[0], l))
			err = emit(o, NX_DIFF_MODIFIED, l->type, l->path, NULL);
	}
	return err;
}

static int kind_rank(int kind)
{
	return kind == NX_DIFF_REMOVED ? 0 : kind == NX_DIFF_ADDED ? 1 :
	       kind == NX_DIFF_MODIFIED ? 2 : 3;
}

static int by_path(const void *a, const void *b)
{
	const struct nx_diff_entry *x = a, *y = b;
	int c = strcmp(x->path, y->path);

	return c ? c : kind_rank(x->kind) - kind_rank(y->kind);
}

errcode_t nx_delta_diff(const struct nx_delta *delta, nx_diff_fn fn,
			void *priv)
{
	struct lines o = { 0 };
	errcode_t err = 0;
	size_t i;

	for (i = 0; i < delta->n && !err; i++)
		err = inode_lines(&o, &delta->v[i]);
	if (!err && o.n)
		qsort(o.v, o.n, sizeof(*o.v), by_path);
	for (i = 0; i < o.n && !err; i++)
		if (fn(priv, &o.v[i]))
			break;
	free(o.v);
	return err;
}

/* ------------------------------------------------------------------ */
/* The byte form: host byte order (the daemon and the tool share a     */
/* machine), every length checked when read back.                      */

#define DELTA_MAGIC	0x4c44584eU	/* "NXDL" */
#define DELTA_VERSION	1

struct wbuf {
	char *p;
	size_t n, cap;
	int err;
};

static void put(struct wbuf *b, const void *src, size_t len)
{
	if (b->err)
		return;
	if (nx_grow_by((void **)&b->p, &b->cap, b->n, len, 1, 4096)) {
		b->err = 1;
		return;
	}
	memcpy(b->p + b->n, src, len);
	b->n += len;
}

static void put32(struct wbuf *b, uint32_t v)
{
	put(b, &v, sizeof(v));
}

static void put64(struct wbuf *b, uint64_t v)
{
	put(b, &v, sizeof(v));
}

static void put_attr(struct wbuf *b, const struct nx_delta_attr *a)
{
	put32(b, a->mode);
	put32(b, a->uid);
	put32(b, a->gid);
	put32(b, a->nlink);
	put32(b, a->gen);
	put32(b, a->gen_unknown);
	put32(b, a->flags);
	put64(b, a->size);
	put64(b, a->rdev);
	put64(b, (uint64_t)a->atime.tv_sec);
	put64(b, (uint64_t)a->atime.tv_nsec);
	put64(b, (uint64_t)a->mtime.tv_sec);
	put64(b, (uint64_t)a->mtime.tv_nsec);
	put64(b, (uint64_t)a->ctime.tv_sec);
	put64(b, (uint64_t)a->ctime.tv_nsec);
}

errcode_t nx_delta_encode(const struct nx_delta *delta, char **buf,
			  size_t *len)
{
	struct wbuf b = { 0 };
	size_t i, j;
	int s;

	put32(&b, DELTA_MAGIC);
	put32(&b, DELTA_VERSION);
	put32(&b, delta->blocksize);
	put32(&b, 0);
	put64(&b, delta->n);
	for (i = 0; i < delta->n; i++) {
		const struct nx_delta_inode *d = &delta->v[i];

		put32(&b, d->ino);
		put32(&b, d->what);
		put32(&b, (uint32_t)d->extents_known);
		put64(&b, d->next);
		for (s = 0; s < 2; s++) {
			put_attr(&b, &d->attr[s]);
			put64(&b, d->nnames[s]);
			for (j = 0; j < d->nnames[s]; j++) {
				const struct nx_delta_name *n =
					&d->names[s][j];
				size_t plen = strlen(n->path);

				put32(&b, n->parent);
				put32(&b, (uint32_t)n->type);
				put64(&b, plen);
				put(&b, n->path, plen);
			}
		}
		for (j = 0; j < d->next; j++) {
			put64(&b, d->ext[j].lblk);
			put64(&b, d->ext[j].count);
		}
	}
	if (b.err) {
		free(b.p);
		return EXT2_ET_NO_MEMORY;
	}
	*buf = b.p;
	*len = b.n;
	return 0;
}

struct rbuf {
	const char *p;
	size_t n, off;
	int bad;
};

static void get(struct rbuf *b, void *dst, size_t len)
{
	if (b->bad || len > b->n - b->off) {
		b->bad = 1;
		memset(dst, 0, len);
		return;
	}
	memcpy(dst, b->p + b->off, len);
	b->off += len;
}

static uint32_t get32(struct rbuf *b)
{
	uint32_t v;

	get(b, &v, sizeof(v));
	return v;
}

static uint64_t get64(struct rbuf *b)
{
	uint64_t v;

	get(b, &v, sizeof(v));
	return v;
}

static void get_attr(struct rbuf *b, struct nx_delta_attr *a)
{
	a->mode = get32(b);
	a->uid = get32(b);
	a->gid = get32(b);
	a->nlink = get32(b);
	a->gen = get32(b);
	a->gen_unknown = get32(b);
	a->flags = get32(b);
	a->size = get64(b);
	a->rdev = get64(b);
	a->atime.tv_sec = (time_t)get64(b);
	a->atime.tv_nsec = (long)get64(b);
	a->mtime.tv_sec = (time_t)get64(b);
	a->mtime.tv_nsec = (long)get64(b);
	a->ctime.tv_sec = (time_t)get64(b);
	a->ctime.tv_nsec = (long)get64(b);
}

/* A count of items of at least MIN bytes each that fits in what is left. */
static size_t get_count(struct rbuf *b, size_t min)
{
	uint64_t n = get64(b);

	if (b->bad || n > (b->n - b->off) / min) {
		b->bad = 1;
		return 0;
	}
	return (size_t)n;
}

static errcode_t get_names(struct rbuf *b, struct nx_delta_inode *d, int s)
{
	size_t n = get_count(b, 16), j;

	if (!n)
		return 0;
	d->names[s] = calloc(n, sizeof(*d->names[s]));
	if (!d->names[s])
		return EXT2_ET_NO_MEMORY;
	for (j = 0; j < n && !b->bad; j++) {
		struct nx_delta_name *nm = &d->names[s][j];
		ext2_ino_t parent = get32(b);
		mode_t type = get32(b);
		size_t plen = get_count(b, 1);
		char *path = malloc(plen + 1);

		if (!path)
			return EXT2_ET_NO_MEMORY;
		get(b, path, plen);
		path[plen] = 0;
		if (b->bad || path[0] != '/' || memchr(path, 0, plen)) {
			free(path);
			b->bad = 1;
			break;
		}
		nm->path = path;
		nm->name = strrchr(path, '/') + 1;
		nm->parent = parent;
		nm->type = type & S_IFMT;
		d->nnames[s]++;
	}
	return 0;
}

static errcode_t get_inode(struct rbuf *b, struct nx_delta_inode *d)
{
	size_t n, j;
	errcode_t err = 0;
	int s;

	d->ino = get32(b);
	d->what = get32(b);
	d->extents_known = (int)get32(b);
	n = get_count(b, 16);
	for (s = 0; s < 2 && !b->bad && !err; s++) {
		get_attr(b, &d->attr[s]);
		err = get_names(b, d, s);
	}
	for (j = 0; j < n && !b->bad && !err; j++) {
		uint64_t l = get64(b), c = get64(b);

		if (c > UINT64_MAX - l)
			b->bad = 1;
		else
			err = nx_delta_add_extent(d, l, c);
	}
	return err;
}

errcode_t nx_delta_decode(const char *buf, size_t len,
			  struct nx_delta *delta)
{
	struct rbuf b = { buf, len, 0, 0 };
	struct nx_delta_inode d;
	errcode_t err = 0;
	size_t n, i;

	memset(delta, 0, sizeof(*delta));
	if (get32(&b) != DELTA_MAGIC || get32(&b) != DELTA_VERSION)
		return EXT2_ET_BAD_MAGIC;
	delta->blocksize = get32(&b);
	get32(&b);
	n = get_count(&b, 24);
	for (i = 0; i < n && !b.bad && !err; i++) {
		memset(&d, 0, sizeof(d));
		err = get_inode(&b, &d);
		if (!err && !b.bad)
			err = add_inode(delta, &d);
		if (err || b.bad)
			free_inode(&d);	/* not added */
	}
	if (!err && (b.bad || b.off != b.n))
		err = EINVAL;
	if (err)
		nx_delta_free(delta);
	return err;
}
