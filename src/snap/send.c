/*
 * send.c - a btrfs send stream (version 1) from a delta (send.h says in
 * which order the changes go and why).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/send.h"
#include "nextfs/sendstream.h"
#include "nextfs/xattr.h"

/* Data per WRITE command: what btrfs sends in version 1. */
#define SEND_CHUNK	(48 * 1024)
/* Data per read: fewer, larger requests where they go through FUSE. */
#define SEND_READ	(16 * SEND_CHUNK)
/* Stream bytes kept before they are written out. */
#define SEND_FLUSH	(1024 * 1024)

struct sender {
	const struct nx_delta *delta;
	struct nx_send_reader *rd;
	const struct nx_send_params *p;
	struct nx_send_stats *st;
	struct nx_ss_enc enc;
	char *msg;
	size_t msglen;
	char **orphan;			/* per inode: its orphan name, if moved */
	const char **primary;		/* per inode: its path in the new tree */
	char *buf;			/* SEND_CHUNK bytes */
	char **dead;			/* orphans of removed directories */
	size_t ndead, capdead;
	int skipping;			/* resuming: not at the token's command */
};

/* One name to remove or to make: inode I's name K. */
struct nameop {
	size_t i, k;
	int depth;
	const char *path;
};

struct oplist {
	struct nameop *v;
	size_t n, cap;
};

static int depth_of(const char *path)
{
	int d = 0;

	for (; *path; path++)
		d += *path == '/';
	return d;
}

static errcode_t add_op(struct oplist *l, size_t i, size_t k,
			const char *path)
{
	errcode_t err = nx_grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v),
				64);

	if (err)
		return err;
	l->v[l->n].i = i;
	l->v[l->n].k = k;
	l->v[l->n].depth = depth_of(path);
	l->v[l->n].path = path;
	l->n++;
	return 0;
}

static int deepest_first(const void *a, const void *b)
{
	const struct nameop *x = a, *y = b;

	if (x->depth != y->depth)
		return y->depth - x->depth;
	return strcmp(x->path, y->path);
}

static int shallowest_first(const void *a, const void *b)
{
	return -deepest_first(a, b);
}

/* "/a/b" -> "a/b"; "/" -> "" (the subvolume's root). */
static const char *rel(const char *path)
{
	return path[0] == '/' ? path + 1 : path;
}

static errcode_t fail(struct sender *s, errcode_t err, const char *what,
		      const char *path)
{
	if (!s->msg[0])
		snprintf(s->msg, s->msglen, "%s %s: %s", what,
			 path && path[0] ? path : "/", error_message(err));
	return err;
}

/* ------------------------------------------------------------------ */
/* Commands.                                                           */

static errcode_t begin_stream(struct sender *s, struct nx_ss_enc *e);

/* The complete commands of E to where the stream goes (send.h). */
static errcode_t flush_out(struct sender *s, struct nx_ss_enc *e)
{
	const struct nx_send_out *o = &s->p->out;
	size_t n = e->in_cmd ? e->cmd_start : e->len;
	errcode_t err;

	if (!o->write)
		return nx_ss_enc_flush(e, o->fd);
	err = n ? o->write(o->priv, e->buf, n) : 0;
	if (!err)
		nx_ss_enc_consume(e, n);
	return err;
}

/*
 * Resuming (p->resume): the stream is made as always, and its commands
 * before the token's are dropped; at that command the token's offset and
 * prefix hash must be the stream's, then the header, the first command
 * and RESUME go out, and the rest as always.
 */
static errcode_t resume_here(struct sender *s)
{
	const struct nx_ss_token *t = s->p->resume;
	struct nx_ss_enc b;
	errcode_t err;

	if (s->enc.offset != t->offset || s->enc.hash != t->hash) {
		snprintf(s->msg, s->msglen, "the resume token does not fit "
			 "this stream: the receiver stopped at command %llu "
			 "of another one", (unsigned long long)t->index);
		return EINVAL;
	}
	nx_ss_enc_consume(&s->enc, s->enc.len);
	nx_ss_enc_init(&b, NX_SS_VERSION_1);
	err = begin_stream(s, &b);
	if (!err)
		err = nx_ss_enc_resume(&b, t->index, t->offset, t->hash);
	if (!err)
		err = flush_out(s, &b);
	nx_ss_enc_free(&b);
	s->skipping = 0;
	return err;
}

static errcode_t end_cmd(struct sender *s)
{
	errcode_t err = nx_ss_enc_end(&s->enc);

	s->st->commands++;
	if (!err && s->skipping) {
		if (s->enc.ncmds == s->p->resume->index)
			return resume_here(s);
		nx_ss_enc_consume(&s->enc, s->enc.len);
		return 0;
	}
	if (!err && s->enc.len >= SEND_FLUSH)
		err = flush_out(s, &s->enc);
	return err;
}

static errcode_t cmd_path(struct sender *s, unsigned type, const char *path)
{
	nx_ss_enc_begin(&s->enc, type);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	return end_cmd(s);
}

static errcode_t cmd_two(struct sender *s, unsigned type, const char *path,
			 int attr, const char *other)
{
	nx_ss_enc_begin(&s->enc, type);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_str(&s->enc, attr, other);
	return end_cmd(s);
}

static errcode_t cmd_u64(struct sender *s, unsigned type, const char *path,
			 int attr, uint64_t v)
{
	nx_ss_enc_begin(&s->enc, type);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_u64(&s->enc, attr, v);
	return end_cmd(s);
}

static errcode_t cmd_chown(struct sender *s, const char *path,
			   const struct nx_delta_attr *a)
{
	nx_ss_enc_begin(&s->enc, NX_SS_C_CHOWN);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_u64(&s->enc, NX_SS_A_UID, a->uid);
	nx_ss_enc_u64(&s->enc, NX_SS_A_GID, a->gid);
	return end_cmd(s);
}

static errcode_t cmd_utimes(struct sender *s, const char *path,
			    const struct nx_delta_attr *a)
{
	nx_ss_enc_begin(&s->enc, NX_SS_C_UTIMES);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_time(&s->enc, NX_SS_A_ATIME, a->atime.tv_sec,
		       (uint32_t)a->atime.tv_nsec);
	nx_ss_enc_time(&s->enc, NX_SS_A_MTIME, a->mtime.tv_sec,
		       (uint32_t)a->mtime.tv_nsec);
	nx_ss_enc_time(&s->enc, NX_SS_A_CTIME, a->ctime.tv_sec,
		       (uint32_t)a->ctime.tv_nsec);
	return end_cmd(s);
}

static errcode_t cmd_xattr(struct sender *s, const char *path,
			   const char *name, const void *value, size_t len)
{
	nx_ss_enc_begin(&s->enc, value ? NX_SS_C_SET_XATTR :
			NX_SS_C_REMOVE_XATTR);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_str(&s->enc, NX_SS_A_XATTR_NAME, name);
	if (value)
		nx_ss_enc_bytes(&s->enc, NX_SS_A_XATTR_DATA, value, len);
	return end_cmd(s);
}

/* Make inode D (new on side 1) at PATH. */
static errcode_t cmd_create(struct sender *s, const struct nx_delta_inode *d,
			    const char *path, const char *tree_path)
{
	const struct nx_delta_attr *a = &d->attr[1];
	char *target = NULL;
	unsigned type;
	errcode_t err;

	switch (a->mode & S_IFMT) {
	case S_IFDIR:
		type = NX_SS_C_MKDIR;
		break;
	case S_IFLNK:
		type = NX_SS_C_SYMLINK;
		err = s->rd->readlink(s->rd, 1, d->ino, tree_path, &target);
		if (err)
			return fail(s, err, "reading the symlink", tree_path);
		break;
	case S_IFCHR:
	case S_IFBLK:
		type = NX_SS_C_MKNOD;
		break;
	case S_IFIFO:
		type = NX_SS_C_MKFIFO;
		break;
	case S_IFSOCK:
		type = NX_SS_C_MKSOCK;
		break;
	default:
		type = NX_SS_C_MKFILE;
		break;
	}
	nx_ss_enc_begin(&s->enc, type);
	nx_ss_enc_str(&s->enc, NX_SS_A_PATH, path);
	nx_ss_enc_u64(&s->enc, NX_SS_A_INO, d->ino);
	if (target)
		nx_ss_enc_str(&s->enc, NX_SS_A_PATH_LINK, target);
	if (type == NX_SS_C_MKNOD || type == NX_SS_C_MKFIFO ||
	    type == NX_SS_C_MKSOCK) {
		nx_ss_enc_u64(&s->enc, NX_SS_A_MODE, a->mode);
		nx_ss_enc_u64(&s->enc, NX_SS_A_RDEV, a->rdev);
	}
	free(target);
	return end_cmd(s);
}

/* ------------------------------------------------------------------ */
/* Names.                                                              */

/* Is the inode number INO a different file on the two sides? */
static int reused(const struct nx_delta *delta, ext2_ino_t ino)
{
	size_t i;

	for (i = 0; i < delta->n; i++)
		if (delta->v[i].ino == ino)
			return (delta->v[i].what & NX_DELTA_NEW) != 0;
	return 0;
}

/*
 * Does inode D keep name K of side S on the other side?  Not when its
 * directory's inode number names a different directory there.
 */
static int kept(const struct nx_delta *delta, const struct nx_delta_inode *d,
		int s, size_t k)
{
	const struct nx_delta_name *l = &d->names[s][k];

	if (d->what & NX_DELTA_NEW)
		return 0;
	return nx_delta_find_name(d->names[!s], d->nnames[!s], l) &&
	       !reused(delta, l->parent);
}

static int has_kept(const struct nx_delta *delta,
		    const struct nx_delta_inode *d)
{
	size_t k;

	for (k = 0; k < d->nnames[1]; k++)
		if (kept(delta, d, 1, k))
			return 1;
	return 0;
}

/* A file that is on both sides (not new, not removed). */
static int survives(const struct nx_delta_inode *d)
{
	return !(d->what & NX_DELTA_NEW) && d->attr[1].mode &&
	       d->nnames[1];
}

/* "o<ino>-<gen>-<TAG>" of inode D on side S: a name in the root. */
static char *orphan_name(const struct nx_delta_inode *d, int s, int tag)
{
	char *name = NULL;

	if (asprintf(&name, "o%u-%u-%d", d->ino, d->attr[s].gen, tag) < 0)
		return NULL;
	return name;
}

/* Move name K of inode I (old side) out of the way. */
static errcode_t drop_name(struct sender *s, const struct nameop *op)
{
	const struct nx_delta_inode *d = &s->delta->v[op->i];
	const char *path = rel(op->path);
	int dir = S_ISDIR(d->names[0][op->k].type);
	char *orphan;
	errcode_t err;

	if (!dir && (!survives(d) || has_kept(s->delta, d) || s->orphan[op->i]))
		return cmd_path(s, NX_SS_C_UNLINK, path);
	orphan = orphan_name(d, 0, 0);
	if (!orphan)
		return EXT2_ET_NO_MEMORY;
	err = cmd_two(s, NX_SS_C_RENAME, path, NX_SS_A_PATH_TO, orphan);
	if (err) {
		free(orphan);
		return err;
	}
	if (survives(d)) {
		s->orphan[op->i] = orphan;
		return 0;
	}
	err = nx_grow((void **)&s->dead, &s->capdead, s->ndead,
		      sizeof(*s->dead), 16);
	if (err) {
		free(orphan);
		return err;
	}
	s->dead[s->ndead++] = orphan;
	return 0;
}

/* The names that go, deepest first. */
static errcode_t drop_names(struct sender *s)
{
	const struct nx_delta *delta = s->delta;
	struct oplist l = { 0 };
	errcode_t err = 0;
	size_t i, k;

	for (i = 0; i < delta->n && !err; i++)
		for (k = 0; k < delta->v[i].nnames[0] && !err; k++)
			if (delta->v[i].ino != EXT2_ROOT_INO &&
			    !kept(delta, &delta->v[i], 0, k))
				err = add_op(&l, i, k,
					     delta->v[i].names[0][k].path);
	if (!err && l.n)
		qsort(l.v, l.n, sizeof(*l.v), deepest_first);
	for (i = 0; i < l.n && !err; i++)
		err = drop_name(s, &l.v[i]);
	free(l.v);
	return err;
}

/*
 * A new file is made at the receiver somewhere else than in its own
 * directory, then moved there: that directory may have a default ACL at
 * the receiver, and Linux gives a new file an ACL (a new directory also
 * the default ACL) from it - which a btrfs receive would leave on a file
 * that has none here, as the stream sets only the xattrs the file has.
 * It is made in the root, as btrfs send does, as o<ino>-<gen>-1 (the
 * "-0" names are those of files moved out of the way, one of which may
 * be this inode number's old file).  A symlink has no ACL, and a file
 * of the root is made where it goes.
 */
static int made_in_place(const struct nx_delta_inode *d, const char *path)
{
	return S_ISLNK(d->attr[1].mode) || depth_of(path) <= 1;
}

/* Make the new file D, its first name PATH (in the new tree). */
static errcode_t create_file(struct sender *s, const struct nx_delta_inode *d,
			     const char *path)
{
	char *staging;
	errcode_t err;

	if (made_in_place(d, path))
		return cmd_create(s, d, rel(path), path);
	staging = orphan_name(d, 1, 1);
	if (!staging)
		return EXT2_ET_NO_MEMORY;
	err = cmd_create(s, d, staging, path);
	if (!err)
		err = cmd_two(s, NX_SS_C_RENAME, staging, NX_SS_A_PATH_TO,
			      rel(path));
	free(staging);
	return err;
}

/*
 * The names that come.  First one per file, shallowest first: created,
 * or moved back from its orphan name (a file that kept a name needs
 * none); then the others as hard links to it.
 */
static errcode_t make_names(struct sender *s)
{
	const struct nx_delta *delta = s->delta;
	struct oplist first = { 0 }, links = { 0 };
	errcode_t err = 0;
	size_t i, k, best;

	for (i = 0; i < delta->n && !err; i++) {
		const struct nx_delta_inode *d = &delta->v[i];
		int keeps;

		if (!d->attr[1].mode || !d->nnames[1])
			continue;
		if (d->ino == EXT2_ROOT_INO) {
			s->primary[i] = "/";
			continue;
		}
		keeps = has_kept(delta, d);
		best = d->nnames[1];
		for (k = 0; k < d->nnames[1]; k++) {
			if (kept(delta, d, 1, k)) {
				if (!s->primary[i])
					s->primary[i] = d->names[1][k].path;
				continue;
			}
			if (best == d->nnames[1] ||
			    depth_of(d->names[1][k].path) <
			    depth_of(d->names[1][best].path))
				best = k;
		}
		for (k = 0; k < d->nnames[1] && !err; k++) {
			if (kept(delta, d, 1, k))
				continue;
			if (k == best && !keeps) {
				err = add_op(&first, i, k,
					     d->names[1][k].path);
				s->primary[i] = d->names[1][k].path;
			} else {
				err = add_op(&links, i, k,
					     d->names[1][k].path);
			}
		}
	}
	if (!err && first.n)
		qsort(first.v, first.n, sizeof(*first.v), shallowest_first);
	for (i = 0; i < first.n && !err; i++) {
		const struct nameop *op = &first.v[i];
		const struct nx_delta_inode *d = &delta->v[op->i];

		if (s->orphan[op->i])
			err = cmd_two(s, NX_SS_C_RENAME, s->orphan[op->i],
				      NX_SS_A_PATH_TO, rel(op->path));
		else
			err = create_file(s, d, op->path);
	}
	for (i = 0; i < links.n && !err; i++) {
		const struct nameop *op = &links.v[i];

		err = cmd_two(s, NX_SS_C_LINK, rel(op->path),
			      NX_SS_A_PATH_LINK, rel(s->primary[op->i]));
	}
	free(first.v);
	free(links.v);
	return err;
}

/* ------------------------------------------------------------------ */
/* Content and attributes.                                             */

static int all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

/* Send bytes [OFF, END) of the new file D; SPARSE: skip zero chunks. */
static errcode_t send_range(struct sender *s, const struct nx_delta_inode *d,
			    uint64_t off, uint64_t end, int sparse)
{
	const char *tree_path = s->primary[d - s->delta->v];
	errcode_t err = 0;
	size_t got, at, n;

	while (off < end && !err) {
		size_t want = end - off < SEND_READ ? (size_t)(end - off) :
			      SEND_READ;

		err = s->rd->pread(s->rd, 1, d->ino, tree_path, s->buf, want,
				   off, &got);
		if (err)
			return fail(s, err, "reading", tree_path);
		if (!got)
			break;		/* the file is shorter than it said */
		for (at = 0; at < got && !err; at += n) {
			n = got - at < SEND_CHUNK ? got - at : SEND_CHUNK;
			if (sparse && all_zero(s->buf + at, n))
				continue;
			nx_ss_enc_begin(&s->enc, NX_SS_C_WRITE);
			nx_ss_enc_str(&s->enc, NX_SS_A_PATH, rel(tree_path));
			nx_ss_enc_u64(&s->enc, NX_SS_A_FILE_OFFSET, off + at);
			nx_ss_enc_bytes(&s->enc, NX_SS_A_DATA, s->buf + at, n);
			err = end_cmd(s);
			s->st->data_bytes += n;
		}
		off += got;
	}
	return err;
}

/*
 * Range K (from 0) of the new file D's data that goes into the stream:
 * [*OFF, *END), clipped to its size; 0 after the last.  Without extents
 * (or a block size), all of it.
 */
static int data_range(const struct nx_delta_inode *d, uint64_t bs, size_t k,
		      uint64_t *off, uint64_t *end)
{
	uint64_t size = d->attr[1].size;

	if (!d->extents_known || !bs) {
		*off = 0;
		*end = size;
		return k == 0;
	}
	if (k >= d->next || d->ext[k].lblk * bs >= size)
		return 0;
	*off = d->ext[k].lblk * bs;
	*end = (d->ext[k].lblk + d->ext[k].count) * bs;
	if (*end > size)
		*end = size;
	return 1;
}

static errcode_t send_data(struct sender *s, const struct nx_delta_inode *d,
			   int created)
{
	uint64_t off, end;
	errcode_t err = 0;
	size_t k;

	for (k = 0; !err && data_range(d, s->delta->blocksize, k, &off, &end);
	     k++)
		err = send_range(s, d, off, end, created);
	return err;
}

static const void *xattr_value(const struct nx_send_xattrs *x,
			       const char *name, size_t *len)
{
	size_t i;

	for (i = 0; i < x->n; i++)
		if (!strcmp(x->names[i], name)) {
			*len = x->lens[i];
			return x->values[i];
		}
	return NULL;
}

/*
 * nextfs's own records (xattr.h: the receive cursor, the identity of a
 * received snapshot) are this volume's bookkeeping: a reader that reads
 * the image raw (sendview.c) sees them, but they never leave the volume
 * - btrfs receive refuses a system.* name it does not know, and another
 * nextfs has its own.
 */
static int sendable(const char *name)
{
	return strncmp(name, NX_XATTR_PRIVATE, strlen(NX_XATTR_PRIVATE)) != 0;
}

/* Set what is new or different, remove what went (OLD may be NULL). */
static errcode_t send_xattrs(struct sender *s, const struct nx_delta_inode *d,
			     int created)
{
	struct nx_send_xattrs x[2] = { { 0 }, { 0 } };
	const char *path = rel(s->primary[d - s->delta->v]);
	errcode_t err;
	size_t i, len;
	const void *v;

	err = s->rd->xattrs(s->rd, 1, d->ino, s->primary[d - s->delta->v],
			    &x[1]);
	if (!err && !created && d->nnames[0])
		err = s->rd->xattrs(s->rd, 0, d->ino, d->names[0][0].path,
				    &x[0]);
	if (err) {
		fail(s, err, "reading the xattrs of",
		     s->primary[d - s->delta->v]);
		goto out;
	}
	for (i = 0; i < x[1].n && !err; i++) {
		if (!sendable(x[1].names[i]))
			continue;
		v = xattr_value(&x[0], x[1].names[i], &len);
		if (!v || len != x[1].lens[i] ||
		    memcmp(v, x[1].values[i], len))
			err = cmd_xattr(s, path, x[1].names[i], x[1].values[i],
					x[1].lens[i]);
	}
	for (i = 0; i < x[0].n && !err; i++)
		if (sendable(x[0].names[i]) &&
		    !xattr_value(&x[1], x[0].names[i], &len))
			err = cmd_xattr(s, path, x[0].names[i], NULL, 0);
out:
	nx_send_xattrs_free(&x[0]);
	nx_send_xattrs_free(&x[1]);
	return err;
}

/* Is the new file D's content (its size, maybe data) sent? */
static int content_changed(const struct nx_delta_inode *d)
{
	return S_ISREG(d->attr[1].mode) &&
	       ((d->what & (NX_DELTA_NEW | NX_DELTA_DATA)) || d->next ||
		d->attr[0].size != d->attr[1].size);
}

/* ... and its data (a size change alone is a truncate)? */
static int data_sent(const struct nx_delta_inode *d)
{
	return content_changed(d) &&
	       ((d->what & (NX_DELTA_NEW | NX_DELTA_DATA)) || d->extents_known);
}

/* Does inode I, on the new side, go through send_inode()? */
static int inode_sent(const struct sender *s, size_t i)
{
	return s->primary[i] && (s->delta->v[i].what ||
				 s->delta->v[i].ino != EXT2_ROOT_INO);
}

/* Everything but the times of inode D, which is on the new side. */
static errcode_t send_inode(struct sender *s, const struct nx_delta_inode *d)
{
	const struct nx_delta_attr *a = &d->attr[0], *b = &d->attr[1];
	const char *path = rel(s->primary[d - s->delta->v]);
	int created = (d->what & NX_DELTA_NEW) != 0;
	errcode_t err = 0;

	s->st->inodes++;
	if (content_changed(d) && (created ? b->size != 0 : a->size != b->size))
		err = cmd_u64(s, NX_SS_C_TRUNCATE, path, NX_SS_A_SIZE, b->size);
	if (!err && data_sent(d))
		err = send_data(s, d, created);
	if (!err && (created || (d->what & NX_DELTA_XATTR)))
		err = send_xattrs(s, d, created);
	if (!err && (created || a->uid != b->uid || a->gid != b->gid))
		err = cmd_chown(s, path, b);
	/* after chown, which clears set-id bits; symlinks have no mode */
	if (!err && !S_ISLNK(b->mode) &&
	    (created || a->mode != b->mode || a->uid != b->uid ||
	     a->gid != b->gid))
		err = cmd_u64(s, NX_SS_C_CHMOD, path, NX_SS_A_MODE,
			      b->mode & 07777);
	return err;
}

/*
 * Tell the reader every read of file data send_inode() is about to make,
 * in order (send_range reads each range in SEND_READ pieces), so that it
 * can read ahead.
 */
static errcode_t plan_reads(struct sender *s)
{
	const struct nx_delta *delta = s->delta;
	struct nx_send_read *v = NULL;
	size_t n = 0, cap = 0, i, k;
	uint64_t off, end, want;
	errcode_t err = 0;

	for (i = 0; i < delta->n && !err; i++) {
		const struct nx_delta_inode *d = &delta->v[i];

		if (!inode_sent(s, i) || !data_sent(d))
			continue;
		for (k = 0; !err && data_range(d, delta->blocksize, k, &off,
					       &end); k++)
			for (; off < end && !err; off += want) {
				want = end - off < SEND_READ ? end - off :
				       SEND_READ;
				err = nx_grow((void **)&v, &cap, n, sizeof(*v),
					      256);
				if (err)
					break;
				v[n].ino = d->ino;
				v[n].len = (uint32_t)want;
				v[n].off = off;
				n++;
			}
	}
	if (!err && n)
		s->rd->plan(s->rd, v, n);
	free(v);
	return err;
}

/* ------------------------------------------------------------------ */

static errcode_t begin_stream(struct sender *s, struct nx_ss_enc *e)
{
	const struct nx_send_params *p = s->p;

	nx_ss_enc_header(e);
	nx_ss_enc_begin(e, p->parent_id ? NX_SS_C_SNAPSHOT : NX_SS_C_SUBVOL);
	nx_ss_enc_str(e, NX_SS_A_PATH, p->name);
	nx_ss_enc_uuid(e, NX_SS_A_UUID, p->uuid);
	nx_ss_enc_u64(e, NX_SS_A_CTRANSID, p->ctransid);
	if (p->parent_id) {
		nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, p->parent_uuid);
		nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, p->parent_ctransid);
	}
	return nx_ss_enc_end(e);
}

static errcode_t send_all(struct sender *s)
{
	const struct nx_delta *delta = s->delta;
	errcode_t err;
	size_t i;

	err = begin_stream(s, &s->enc);
	if (!err) {
		s->st->commands++;
		if (s->skipping && s->p->resume->index == 1)
			err = resume_here(s);
		else if (s->skipping)
			nx_ss_enc_consume(&s->enc, s->enc.len);
	}
	if (!err)
		err = drop_names(s);
	if (!err)
		err = make_names(s);
	if (!err && s->rd->plan)
		err = plan_reads(s);
	for (i = 0; i < delta->n && !err; i++)
		if (inode_sent(s, i))
			err = send_inode(s, &delta->v[i]);
	for (i = 0; i < s->ndead && !err; i++)
		err = cmd_path(s, NX_SS_C_RMDIR, s->dead[i]);
	/* Times last: every change above moved some. */
	for (i = 0; i < delta->n && !err; i++)
		if (s->primary[i])
			err = cmd_utimes(s, rel(s->primary[i]),
					 &delta->v[i].attr[1]);
	if (!err) {
		nx_ss_enc_begin(&s->enc, NX_SS_C_END);
		err = end_cmd(s);
	}
	if (!err && s->skipping) {
		snprintf(s->msg, s->msglen, "the resume token points past the "
			 "end of this stream");
		err = EINVAL;
	}
	if (!err)
		err = flush_out(s, &s->enc);
	return err;
}

errcode_t nx_send_stream(const struct nx_delta *delta,
			 struct nx_send_reader *rd,
			 const struct nx_send_params *p,
			 struct nx_send_stats *stats, char *msg, size_t msglen)
{
	struct sender s = { .delta = delta, .rd = rd, .p = p, .st = stats,
			    .msg = msg, .msglen = msglen };
	errcode_t err = EXT2_ET_NO_MEMORY;
	size_t i;

	memset(stats, 0, sizeof(*stats));
	snprintf(msg, msglen, "%s", "");
	nx_ss_enc_init(&s.enc, NX_SS_VERSION_1);
	/* index 0: nothing was applied, the whole stream goes */
	s.skipping = p->resume && p->resume->index > 0;
	s.orphan = calloc(delta->n + 1, sizeof(*s.orphan));
	s.primary = calloc(delta->n + 1, sizeof(*s.primary));
	/* aligned: large reads of file data may bypass the page cache */
	if (posix_memalign((void **)&s.buf, NX_BLKIO_DIRECT_ALIGN, SEND_READ))
		s.buf = NULL;
	if (s.orphan && s.primary && s.buf)
		err = send_all(&s);
	stats->bytes = s.enc.offset;
	if (err && !msg[0])
		snprintf(msg, msglen, "writing the stream: %s",
			 error_message(err));
	for (i = 0; s.orphan && i < delta->n; i++)
		free(s.orphan[i]);
	for (i = 0; i < s.ndead; i++)
		free(s.dead[i]);
	free(s.dead);
	free(s.orphan);
	free(s.primary);
	free(s.buf);
	nx_ss_enc_free(&s.enc);
	return err;
}

/* ------------------------------------------------------------------ */

errcode_t nx_send_resume_from(struct nx_send_params *p, const char *text,
			      const char *parent, struct nx_ss_token *t,
			      char *msg, size_t msglen)
{
	static const unsigned char none[NX_SS_UUID_LEN];

	if (nx_ss_token_decode(text, t)) {
		snprintf(msg, msglen, "not a resume token: %s", text);
		return EINVAL;
	}
	/* only the stream of the pair it names: their identities */
	if (t->version != NX_SS_VERSION_1 || t->ctransid != p->ctransid ||
	    memcmp(t->uuid, p->uuid, NX_SS_UUID_LEN) ||
	    t->parent_ctransid != (p->parent_id ? p->parent_ctransid : 0) ||
	    memcmp(t->parent_uuid, p->parent_id ? p->parent_uuid : none,
		   NX_SS_UUID_LEN)) {
		snprintf(msg, msglen, "the resume token is for another stream "
			 "than %s%s%s of this volume",
			 p->parent_id ? parent : "",
			 p->parent_id ? " -> " : "", p->name);
		return EINVAL;
	}
	p->resume = t;
	return 0;
}

/* ------------------------------------------------------------------ */

void nx_send_xattrs_free(struct nx_send_xattrs *x)
{
	size_t i;

	for (i = 0; i < x->n; i++) {
		free(x->names[i]);
		free(x->values[i]);
	}
	free(x->names);
	free(x->values);
	free(x->lens);
	memset(x, 0, sizeof(*x));
}

errcode_t nx_send_xattrs_add(struct nx_send_xattrs *x, const char *name,
			     const void *value, size_t len)
{
	size_t cap = x->cap;

	if (nx_grow((void **)&x->names, &cap, x->n, sizeof(*x->names), 8))
		return EXT2_ET_NO_MEMORY;
	cap = x->cap;
	if (nx_grow((void **)&x->values, &cap, x->n, sizeof(*x->values), 8))
		return EXT2_ET_NO_MEMORY;
	cap = x->cap;
	if (nx_grow((void **)&x->lens, &cap, x->n, sizeof(*x->lens), 8))
		return EXT2_ET_NO_MEMORY;
	x->cap = cap;
	x->names[x->n] = strdup(name);
	x->values[x->n] = malloc(len ? len : 1);
	if (!x->names[x->n] || !x->values[x->n]) {
		free(x->names[x->n]);
		free(x->values[x->n]);
		return EXT2_ET_NO_MEMORY;
	}
	memcpy(x->values[x->n], value, len);
	x->lens[x->n++] = len;
	return 0;
}
