/*
 * diff.c - the block-map source of the classifier (delta.h): what changed
 * between two snapshots, or a snapshot and the live tree, as the
 * snapshots' block maps tell it ("nextfs diff", like "zfs diff", and the
 * delta "nextfs send" streams).  Offline on an image, and in the daemon,
 * which has the views open.
 *
 * A block that reads the same physical block in both trees
 * (nx_snap_resolve) is unchanged.  So:
 *  - an inode whose inode-table block resolves to the same physical block
 *    in both trees is unchanged, without reading it (every change of an
 *    inode, its data included, rewrites that block: data writes update
 *    mtime/ctime, and a preserved block is never overwritten in place);
 *  - a directory whose inode and blocks resolve the same lists the same
 *    entries;
 *  - a changed file's data differs at most where its block maps differ:
 *    those are its changed extents, and bytes are compared only there.
 * ext4 keeps no parent pointer in a file's inode, so naming a changed
 * file still needs the directories: both trees are listed (directory
 * blocks only), but only entries of changed directories and entries for
 * changed inodes are remembered (delta.c decides from them).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/snaptool.h"
#include "nextfs/delta.h"
#include "nextfs/inode.h"
#include "nextfs/dir.h"
#include "nextfs/grow.h"
#include "snap_internal.h"

struct side {
	struct nx_volume *v;		/* a view (the store's) or the live volume */
	ext2_filsys fs;
	int idx;			/* snapshot index, -1 = live */
};

struct differ {
	struct nx_delta_source src;	/* first: the source is the differ */
	struct nx_delta_work *work;	/* while walking */
	struct nx_volume *vol;
	struct nx_snapstore *store;
	struct side side[2];		/* [0] old, [1] new */
	int full;			/* no old side: everything is new */
	ext2fs_block_bitmap blk_checked, blk_differs;
	ext2fs_inode_bitmap ino_checked, ino_changed;
	const struct nx_progress *prog;
	uint64_t walked, total;
	unsigned isize;			/* bytes of an inode we compare */
	char *ibuf[2];
};

/* ------------------------------------------------------------------ */
/* What changed, by block maps.                                        */

static errcode_t resolve(struct differ *d, int s, blk64_t n, blk64_t *phys)
{
	if (d->side[s].idx < 0) {
		*phys = n;
		return 0;
	}
	return nx_snap_resolve(d->store, d->side[s].idx, n, phys);
}

/* Does block N read differently in the two trees? */
static int block_differs(struct differ *d, blk64_t n)
{
	ext2_filsys fs = d->vol->fs;
	blk64_t a, b;

	if (n < fs->super->s_first_data_block ||
	    n >= ext2fs_blocks_count(fs->super))
		return 1;
	if (ext2fs_test_block_bitmap2(d->blk_checked, n))
		return ext2fs_test_block_bitmap2(d->blk_differs, n) != 0;
	ext2fs_mark_block_bitmap2(d->blk_checked, n);
	if (resolve(d, 0, n, &a) || resolve(d, 1, n, &b) || a != b) {
		ext2fs_mark_block_bitmap2(d->blk_differs, n);
		return 1;
	}
	return 0;
}

/* Read INO on side S; zero bytes for fields that change without a change
 * of the file (atime, checksums). */
static errcode_t read_cmp_inode(struct differ *d, int s, ext2_ino_t ino,
				char *buf)
{
	struct ext2_inode_large *in = (struct ext2_inode_large *)buf;
	errcode_t err;

	memset(buf, 0, d->isize);
	err = ext2fs_read_inode2(d->side[s].fs, ino, (struct ext2_inode *)buf,
				 d->isize, READ_INODE_NOCSUM);
	if (err)
		return err;
	in->i_atime = 0;
	in->osd2.linux2.l_i_checksum_lo = 0;
	if (d->isize > EXT2_GOOD_OLD_INODE_SIZE &&
	    in->i_extra_isize >= offsetof(struct ext2_inode_large,
					  i_atime_extra) + 4 -
					  EXT2_GOOD_OLD_INODE_SIZE) {
		in->i_checksum_hi = 0;
		in->i_atime_extra = 0;
	}
	return 0;
}

static int inode_changed(struct differ *d, ext2_ino_t ino)
{
	int changed;

	if (d->full)
		return 1;
	if (ext2fs_test_inode_bitmap2(d->ino_checked, ino))
		return ext2fs_test_inode_bitmap2(d->ino_changed, ino) != 0;
	ext2fs_mark_inode_bitmap2(d->ino_checked, ino);
	changed = block_differs(d, nx_inode_table_block(d->vol->fs, ino)) &&
		  (read_cmp_inode(d, 0, ino, d->ibuf[0]) ||
		   read_cmp_inode(d, 1, ino, d->ibuf[1]) ||
		   memcmp(d->ibuf[0], d->ibuf[1], d->isize));
	if (changed)
		ext2fs_mark_inode_bitmap2(d->ino_changed, ino);
	return changed;
}

struct map_check {
	struct differ *d;
	int differs;
};

static int check_mapped(ext2_filsys fs, blk64_t *blocknr,
			e2_blkcnt_t blockcnt, blk64_t ref_blk, int ref_offset,
			void *priv)
{
	struct map_check *mc = priv;

	if (block_differs(mc->d, *blocknr)) {
		mc->differs = 1;
		return BLOCK_ABORT;
	}
	return 0;
}

/* Do DIR's entries read the same in both trees? */
static int dir_changed(struct differ *d, ext2_ino_t dir)
{
	struct map_check mc = { d, 0 };
	struct ext2_inode_large inode;
	blk64_t ea;

	if (inode_changed(d, dir))
		return 1;
	if (ext2fs_read_inode_full(d->side[1].fs, dir,
				   (struct ext2_inode *)&inode, sizeof(inode)))
		return 1;
	ea = ext2fs_file_acl_block(d->side[1].fs, (struct ext2_inode *)&inode);
	if (ea && block_differs(d, ea))
		return 1;	/* inline directory data may live there */
	if ((inode.i_flags & EXT4_INLINE_DATA_FL) ||
	    !ext2fs_inode_has_valid_blocks2(d->side[1].fs,
					    (struct ext2_inode *)&inode))
		return 0;
	if (ext2fs_block_iterate3(d->side[1].fs, dir, BLOCK_FLAG_READ_ONLY,
				  NULL, check_mapped, &mc))
		return 1;
	return mc.differs;
}

/* ------------------------------------------------------------------ */
/* Walking one tree.                                                   */

struct dent {
	ext2_ino_t ino;
	int ftype;
	char name[EXT2_NAME_LEN + 1];
};

struct dent_list {
	struct dent *v;
	size_t n, cap;
	int err;
};

static int collect_dent(struct ext2_dir_entry *dirent, int offset,
			int blocksize, char *buf, void *priv)
{
	struct dent_list *dl = priv;
	int len = ext2fs_dirent_name_len(dirent);

	if (!dirent->inode || (len == 1 && dirent->name[0] == '.') ||
	    (len == 2 && dirent->name[0] == '.' && dirent->name[1] == '.'))
		return 0;
	if (nx_grow((void **)&dl->v, &dl->cap, dl->n, sizeof(*dl->v), 32)) {
		dl->err = ENOMEM;
		return DIRENT_ABORT;
	}
	dl->v[dl->n].ino = dirent->inode;
	dl->v[dl->n].ftype = ext2fs_dirent_file_type(dirent);
	memcpy(dl->v[dl->n].name, dirent->name, len);
	dl->v[dl->n].name[len] = 0;
	dl->n++;
	return 0;
}

static mode_t ftype_mode(int ftype)
{
	switch (ftype) {
	case EXT2_FT_DIR:
		return S_IFDIR;
	case EXT2_FT_SYMLINK:
		return S_IFLNK;
	case EXT2_FT_CHRDEV:
		return S_IFCHR;
	case EXT2_FT_BLKDEV:
		return S_IFBLK;
	case EXT2_FT_FIFO:
		return S_IFIFO;
	case EXT2_FT_SOCK:
		return S_IFSOCK;
	default:
		return S_IFREG;
	}
}

/*
 * Walking one tree: depth first with a stack of its own (a tree may be
 * deeper than the C stack allows) and the path in a buffer that grows
 * (names are not limited to PATH_MAX).  Directories cannot be hard
 * linked, so one met twice is a loop in a damaged tree.
 */
struct wframe {
	ext2_ino_t dir;
	struct dent_list dl;
	size_t next;			/* the entry to look at next */
	size_t plen;			/* the path up to this directory */
	int changed;
};

struct walk {
	struct differ *d;
	int s;
	struct wframe *f;
	size_t n, cap;
	char *path;
	size_t pcap;
	ext2fs_inode_bitmap seen;	/* directories entered */
};

static size_t path_at(struct walk *w, size_t len, const char *name)
{
	return nx_delta_path_at(&w->path, &w->pcap, len, name);
}

/* Enter DIR, whose path is PATH[0..PLEN): list its entries. */
static errcode_t enter_dir(struct walk *w, ext2_ino_t dir, size_t plen)
{
	struct differ *d = w->d;
	struct wframe *f;
	errcode_t err;

	if (!dir || dir > d->vol->fs->super->s_inodes_count ||
	    ext2fs_test_inode_bitmap2(w->seen, dir))
		return EXT2_ET_DIR_CORRUPTED;	/* a directory loop */
	ext2fs_mark_inode_bitmap2(w->seen, dir);
	if (nx_grow((void **)&w->f, &w->cap, w->n, sizeof(*w->f), 64))
		return EXT2_ET_NO_MEMORY;
	f = &w->f[w->n++];
	memset(f, 0, sizeof(*f));
	f->dir = dir;
	f->plen = plen;
	f->changed = dir_changed(d, dir);
	err = ext2fs_dir_iterate(d->side[w->s].fs, dir, 0, NULL, collect_dent,
				 &f->dl);
	return err ? err : f->dl.err;
}

static void leave_dir(struct walk *w)
{
	struct differ *d = w->d;
	struct wframe *f = &w->f[--w->n];

	d->walked += f->dl.n + 1;
	if (d->prog && d->prog->fn)
		d->prog->fn(d->prog->priv, "comparing", d->walked, d->total);
	free(f->dl.v);
}

/* The next entry of the innermost directory: remember it, enter it. */
static errcode_t walk_step(struct walk *w)
{
	struct differ *d = w->d;
	struct wframe *f = &w->f[w->n - 1];
	const struct dent *e;
	size_t len;

	if (f->next == f->dl.n) {
		leave_dir(w);
		return 0;
	}
	e = &f->dl.v[f->next++];
	if (f->dir == EXT2_ROOT_INO && !strcmp(e->name, NX_SNAPDIR_NAME))
		return 0;		/* the snapshots themselves */
	len = path_at(w, f->plen, e->name);
	if (!len)
		return EXT2_ET_NO_MEMORY;
	if (f->changed || inode_changed(d, e->ino)) {
		errcode_t err = nx_delta_remember(d->work, w->s, e->ino,
						  f->dir, w->path,
						  ftype_mode(e->ftype), NULL);

		if (err)
			return err;
	}
	if (e->ftype == EXT2_FT_DIR)
		return enter_dir(w, e->ino, len);
	return 0;
}

static errcode_t walk_tree(struct differ *d, int s)
{
	struct walk w = { .d = d, .s = s };
	errcode_t err;

	err = ext2fs_allocate_inode_bitmap(d->vol->fs, "walked", &w.seen);
	if (!err) {
		w.path = malloc(w.pcap = 256);
		if (!w.path)
			err = EXT2_ET_NO_MEMORY;
	}
	if (!err) {
		w.path[0] = 0;
		err = enter_dir(&w, EXT2_ROOT_INO, 0);
	}
	while (!err && w.n)
		err = walk_step(&w);
	while (w.n)
		free(w.f[--w.n].dl.v);
	free(w.f);
	free(w.path);
	if (w.seen)
		ext2fs_free_inode_bitmap(w.seen);
	return err;
}

/* ------------------------------------------------------------------ */
/* Comparing one file that exists on both sides.                       */

struct blkvec {
	blk64_t *l, *p;
	size_t n, cap;
};

static int collect_block(ext2_filsys fs, blk64_t *blocknr,
			 e2_blkcnt_t blockcnt, blk64_t ref_blk, int ref_offset,
			 void *priv)
{
	struct blkvec *v = priv;
	size_t capl = v->cap, capp = v->cap;	/* parallel: one size */

	if (nx_grow((void **)&v->l, &capl, v->n, sizeof(*v->l), 64) ||
	    nx_grow((void **)&v->p, &capp, v->n, sizeof(*v->p), 64))
		return BLOCK_ABORT;
	v->cap = capl;
	v->l[v->n] = blockcnt;
	v->p[v->n] = *blocknr;
	v->n++;
	return 0;
}

/* Compare logical block LBLK (of SIZE-byte files) by content. */
static int block_content_differs(struct differ *d, ext2_file_t f[2],
				 blk64_t lblk, uint64_t size)
{
	unsigned bs = d->vol->fs->blocksize;
	uint64_t off = lblk * bs;
	unsigned want = size - off < bs ? (unsigned)(size - off) : bs;
	char *buf[2];
	unsigned got[2];
	int s, differs = 1;

	buf[0] = malloc(bs);
	buf[1] = malloc(bs);
	for (s = 0; s < 2 && buf[0] && buf[1]; s++)
		if (ext2fs_file_llseek(f[s], off, EXT2_SEEK_SET, NULL) ||
		    ext2fs_file_read(f[s], buf[s], want, &got[s]))
			goto out;
	if (buf[0] && buf[1] && got[0] == got[1])
		differs = memcmp(buf[0], buf[1], got[0]) != 0;
out:
	free(buf[0]);
	free(buf[1]);
	return differs;
}

/* Inline data has no block map: compare the bytes (at most an inode's). */
static int inline_content_differs(struct differ *d, const ext2_ino_t ino[2],
				  uint64_t size)
{
	ext2_file_t f[2] = { NULL, NULL };
	blk64_t lb, nblocks = (size + d->vol->fs->blocksize - 1) /
			      d->vol->fs->blocksize;
	int s, differs = 1;

	for (s = 0; s < 2; s++)
		if (ext2fs_file_open(d->side[s].fs, ino[s], 0, &f[s]))
			goto out;
	for (lb = 0; lb < nblocks; lb++)
		if (block_content_differs(d, f, lb, size))
			goto out;
	differs = 0;
out:
	for (s = 0; s < 2; s++)
		if (f[s])
			ext2fs_file_close(f[s]);
	return differs;
}

static void free_blkvec(struct blkvec *v)
{
	free(v->l);
	free(v->p);
}

/* The data blocks of INO on side S, by logical block. */
static errcode_t read_map(struct differ *d, int s, ext2_ino_t ino,
			  struct blkvec *v)
{
	return ext2fs_block_iterate3(d->side[s].fs, ino, BLOCK_FLAG_READ_ONLY |
				     BLOCK_FLAG_DATA_ONLY, NULL, collect_block,
				     v);
}

static uint64_t blocks_of(struct differ *d, uint64_t size)
{
	unsigned bs = d->vol->fs->blocksize;

	return (size + bs - 1) / bs;
}

/*
 * The data of regular files INO[0] on side 0 and INO[1] on side 1 (IN):
 * does a byte differ (*DIFFERS), compared only where the mappings
 * differ?  With WANT_EXT every logical block whose mapping differs (a
 * hole on one side included) becomes an extent of DI; without (DI may
 * be NULL), it stops at the first difference.
 */
static errcode_t compare_data(struct differ *d, const ext2_ino_t ino[2],
			      struct nx_delta_inode *di,
			      const struct ext2_inode_large in[2],
			      int want_ext, int *differs)
{
	uint64_t size[2] = { EXT2_I_SIZE(&in[0]), EXT2_I_SIZE(&in[1]) };
	uint64_t common = size[0] < size[1] ? size[0] : size[1];
	blk64_t ncommon = blocks_of(d, common), nblocks, lb;
	struct blkvec v[2] = { { 0 }, { 0 } };
	ext2_file_t f[2] = { NULL, NULL };
	size_t i[2] = { 0, 0 };
	errcode_t err = 0;
	int s;

	nblocks = blocks_of(d, size[0] > size[1] ? size[0] : size[1]);
	*differs = size[0] != size[1];
	if ((in[0].i_flags | in[1].i_flags) & EXT4_INLINE_DATA_FL) {
		if (!*differs)
			*differs = inline_content_differs(d, ino, common);
		return want_ext ? nx_delta_add_extent(di, 0,
						      blocks_of(d, size[1])) : 0;
	}
	for (s = 0; s < 2 && !err; s++) {
		err = read_map(d, s, ino[s], &v[s]);
		if (!err)
			err = ext2fs_file_open(d->side[s].fs, ino[s], 0, &f[s]);
	}
	/* Walk both maps (sorted by logical block) together. */
	for (lb = 0; lb < nblocks && !err;) {
		blk64_t pa = 0, pb = 0, ra = 0, rb = 1, next = nblocks;

		while (i[0] < v[0].n && v[0].l[i[0]] < lb)
			i[0]++;
		while (i[1] < v[1].n && v[1].l[i[1]] < lb)
			i[1]++;
		if (i[0] < v[0].n && v[0].l[i[0]] == lb)
			pa = v[0].p[i[0]];
		if (i[1] < v[1].n && v[1].l[i[1]] == lb)
			pb = v[1].p[i[1]];
		if (!pa && !pb) {
			/* A hole on both sides: skip to the next mapping. */
			if (i[0] < v[0].n && v[0].l[i[0]] < next)
				next = v[0].l[i[0]];
			if (i[1] < v[1].n && v[1].l[i[1]] < next)
				next = v[1].l[i[1]];
			lb = next;
			continue;
		}
		if (pa && pb && (resolve(d, 0, pa, &ra) ||
				 resolve(d, 1, pb, &rb)))
			ra = 0, rb = 1;
		if (!pa || !pb || ra != rb) {
			if (want_ext)
				err = nx_delta_add_extent(di, lb, 1);
			if (!*differs && lb < ncommon)
				*differs = block_content_differs(d, f, lb,
								 common);
			if (*differs && !want_ext)
				break;
		}
		lb++;
	}
	for (s = 0; s < 2; s++) {
		if (f[s])
			ext2fs_file_close(f[s]);
		free_blkvec(&v[s]);
	}
	return err;
}

/* A file new on side 1: its mapped ranges (holes are not listed). */
static errcode_t new_extents(struct nx_delta_source *src,
			     struct nx_delta_inode *di)
{
	struct differ *d = (struct differ *)src;
	struct ext2_inode_large in;
	struct blkvec v = { 0 };
	errcode_t err;
	size_t i;

	di->extents_known = 1;
	err = ext2fs_read_inode_full(d->side[1].fs, di->ino,
				     (struct ext2_inode *)&in, sizeof(in));
	if (err)
		return err;
	if (in.i_flags & EXT4_INLINE_DATA_FL)
		return nx_delta_add_extent(di, 0,
					   blocks_of(d, EXT2_I_SIZE(&in)));
	err = read_map(d, 1, di->ino, &v);
	for (i = 0; i < v.n && !err; i++)
		err = nx_delta_add_extent(di, v.l[i], 1);
	free_blkvec(&v);
	return err;
}

struct xattr_list {
	char **names;
	void **values;
	size_t *lens;
	size_t n, cap;
};

static int collect_xattr(char *name, char *value, size_t value_len,
			 void *priv)
{
	struct xattr_list *xl = priv;
	size_t capn = xl->cap, capv = xl->cap, capl = xl->cap;

	if (!strcmp(name, "system.data"))
		return 0;	/* inline data, compared as content */
	/* Parallel arrays: each grows to the same size. */
	if (nx_grow((void **)&xl->names, &capn, xl->n, sizeof(*xl->names), 8) ||
	    nx_grow((void **)&xl->values, &capv, xl->n, sizeof(*xl->values),
		    8) ||
	    nx_grow((void **)&xl->lens, &capl, xl->n, sizeof(*xl->lens), 8))
		return XATTR_ABORT;
	xl->cap = capn;
	xl->names[xl->n] = strdup(name);
	xl->values[xl->n] = malloc(value_len ? value_len : 1);
	if (!xl->names[xl->n] || !xl->values[xl->n])
		return XATTR_ABORT;
	memcpy(xl->values[xl->n], value, value_len);
	xl->lens[xl->n] = value_len;
	xl->n++;
	return 0;
}

static void free_xattrs(struct xattr_list *xl)
{
	size_t i;

	for (i = 0; i < xl->n; i++) {
		free(xl->names[i]);
		free(xl->values[i]);
	}
	free(xl->names);
	free(xl->values);
	free(xl->lens);
}

static errcode_t read_xattrs(ext2_filsys fs, ext2_ino_t ino,
			     struct xattr_list *xl)
{
	struct ext2_xattr_handle *h;
	errcode_t err;

	err = ext2fs_xattrs_open(fs, ino, &h);
	if (err)
		return err;
	err = ext2fs_xattrs_read(h);
	if (!err)
		err = ext2fs_xattrs_iterate(h, collect_xattr, xl);
	ext2fs_xattrs_close(&h);
	return err;
}

static int xattrs_differ(struct differ *d, ext2_ino_t ino)
{
	struct xattr_list xl[2] = { { 0 }, { 0 } };
	int differs = 1;
	size_t i, j;

	if (read_xattrs(d->side[0].fs, ino, &xl[0]) ||
	    read_xattrs(d->side[1].fs, ino, &xl[1]) || xl[0].n != xl[1].n)
		goto out;
	for (i = 0; i < xl[0].n; i++) {
		for (j = 0; j < xl[1].n; j++)
			if (!strcmp(xl[0].names[i], xl[1].names[j]))
				break;
		if (j == xl[1].n || xl[0].lens[i] != xl[1].lens[j] ||
		    memcmp(xl[0].values[i], xl[1].values[j], xl[0].lens[i]))
			goto out;
	}
	differs = 0;
out:
	free_xattrs(&xl[0]);
	free_xattrs(&xl[1]);
	return differs;
}

/* The target of symlink INO on side S, malloced (*LEN bytes). */
static char *read_target(struct differ *d, int s, ext2_ino_t ino,
			 size_t *len)
{
	size_t size = 256;
	char *buf = NULL, *more;

	for (;;) {
		more = realloc(buf, size);
		if (!more)
			break;
		buf = more;
		if (nx_readlink(d->side[s].v, ino, buf, size, len))
			break;
		if (*len < size)
			return buf;
		size = *len + 1;	/* it said how long it is */
	}
	free(buf);
	return NULL;
}

static int symlink_differs(struct differ *d, ext2_ino_t ino)
{
	size_t la = 0, lb = 0;
	char *a = read_target(d, 0, ino, &la);
	char *b = a ? read_target(d, 1, ino, &lb) : NULL;
	int differs = !a || !b || la != lb || memcmp(a, b, la);

	free(a);
	free(b);
	return differs;
}

/* Inode data as the user sees it: owner, mode, size, mtime, ... */
static int attrs_differ(const struct ext2_inode_large *a,
			const struct ext2_inode_large *b, int large)
{
	if (a->i_mode != b->i_mode || a->i_uid != b->i_uid ||
	    a->i_gid != b->i_gid ||
	    inode_uid(*a) != inode_uid(*b) ||
	    inode_gid(*a) != inode_gid(*b) ||
	    EXT2_I_SIZE(a) != EXT2_I_SIZE(b) || a->i_mtime != b->i_mtime ||
	    a->i_links_count != b->i_links_count ||
	    ((a->i_flags ^ b->i_flags) & EXT2_FL_USER_MODIFIABLE))
		return 1;
	if (large && a->i_mtime_extra != b->i_mtime_extra)
		return 1;
	if ((LINUX_S_ISCHR(a->i_mode) || LINUX_S_ISBLK(a->i_mode)) &&
	    (a->i_block[0] != b->i_block[0] || a->i_block[1] != b->i_block[1]))
		return 1;
	return 0;
}

/* INO on side S as the user sees it; mode 0 if it is not there. */
static errcode_t read_attr(struct nx_delta_source *src, int s, ext2_ino_t ino,
			   struct nx_delta_attr *a)
{
	struct differ *d = (struct differ *)src;
	struct ext2_inode_large in;
	struct stat st;

	memset(a, 0, sizeof(*a));
	if (!d->side[s].fs || !ino ||
	    ino > d->side[s].fs->super->s_inodes_count)
		return 0;
	memset(&in, 0, sizeof(in));
	if (ext2fs_read_inode_full(d->side[s].fs, ino, (struct ext2_inode *)&in,
				   sizeof(in)) ||
	    !in.i_links_count || !in.i_mode)
		return 0;	/* unreadable or free: not there */
	nx_inode_to_stat(d->side[s].v, ino, &in, &st);
	a->mode = st.st_mode;
	a->uid = st.st_uid;
	a->gid = st.st_gid;
	a->nlink = (uint32_t)st.st_nlink;
	a->gen = in.i_generation;
	a->flags = in.i_flags & EXT2_FL_USER_VISIBLE;
	a->size = (uint64_t)st.st_size;
	a->rdev = st.st_rdev;
	a->atime = st.st_atim;
	a->mtime = st.st_mtim;
	a->ctime = st.st_ctim;
	return 0;
}

/* Same file on both sides: what of its content or attributes changed? */
static errcode_t compare_file(struct nx_delta_source *src,
			      struct nx_delta_inode *di, unsigned flags)
{
	struct differ *d = (struct differ *)src;
	unsigned need = offsetof(struct ext2_inode_large, i_mtime_extra) + 4 -
			EXT2_GOOD_OLD_INODE_SIZE;
	int want_ext = (flags & NX_DELTA_WANT_EXTENTS) != 0;
	struct ext2_inode_large in[2];
	int large, s, differs = 0;
	errcode_t err;

	if (S_ISREG(di->attr[1].mode) && want_ext)
		di->extents_known = 1;
	if (!inode_changed(d, di->ino))
		return 0;
	for (s = 0; s < 2; s++) {
		memset(&in[s], 0, sizeof(in[s]));
		err = ext2fs_read_inode_full(d->side[s].fs, di->ino,
					     (struct ext2_inode *)&in[s],
					     sizeof(in[s]));
		if (err)
			return err;
	}
	large = EXT2_INODE_SIZE(d->vol->fs->super) > EXT2_GOOD_OLD_INODE_SIZE &&
		in[0].i_extra_isize >= need && in[1].i_extra_isize >= need;
	if (attrs_differ(&in[0], &in[1], large))
		di->what |= NX_DELTA_ATTR;
	if ((di->what & NX_DELTA_MODIFIED) && !want_ext)
		return 0;	/* the diff needs no more */
	if (LINUX_S_ISLNK(in[0].i_mode) && symlink_differs(d, di->ino))
		di->what |= NX_DELTA_DATA;
	if (LINUX_S_ISREG(in[0].i_mode)) {
		const ext2_ino_t ino[2] = { di->ino, di->ino };

		err = compare_data(d, ino, di, in, want_ext, &differs);
		if (err)
			return err;
		if (differs)
			di->what |= NX_DELTA_DATA;
	}
	if ((di->what & NX_DELTA_MODIFIED) && !want_ext)
		return 0;
	if (xattrs_differ(d, di->ino))
		di->what |= NX_DELTA_XATTR;
	return 0;
}

/* ------------------------------------------------------------------ */

static errcode_t walk_side(struct nx_delta_source *src,
			   struct nx_delta_work *w, int s)
{
	struct differ *d = (struct differ *)src;

	d->work = w;
	return walk_tree(d, s);
}

/* Side S shows snapshot ID (0: the live tree). */
static errcode_t open_side(struct differ *d, int s, uint32_t id,
			   char *msg, size_t msglen)
{
	struct nx_snapinfo info;
	errcode_t err;

	if (!id) {
		d->side[s].v = d->vol;
		d->side[s].fs = d->vol->fs;
		d->side[s].idx = -1;
		return 0;
	}
	if (nx_snap_find_id(d->vol, id, &info)) {
		snprintf(msg, msglen, "no snapshot with id %u", id);
		return ENOENT;
	}
	err = nx_snap_view_get(d->vol, id, &d->side[s].v);
	if (err) {
		snprintf(msg, msglen, "cannot open snapshot '%s': %s",
			 info.name, error_message(err));
		return err;
	}
	d->side[s].fs = d->side[s].v->fs;
	d->side[s].idx = nx_snap_index(d->store, info.ino);
	return 0;
}

static errcode_t setup(struct differ *d)
{
	ext2_filsys fs = d->vol->fs;
	errcode_t err;

	d->isize = EXT2_INODE_SIZE(fs->super);
	d->ibuf[0] = malloc(d->isize);
	d->ibuf[1] = malloc(d->isize);
	if (!d->ibuf[0] || !d->ibuf[1])
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_allocate_block_bitmap(fs, "checked", &d->blk_checked);
	if (!err)
		err = ext2fs_allocate_block_bitmap(fs, "differs",
						   &d->blk_differs);
	if (!err)
		err = ext2fs_allocate_inode_bitmap(fs, "checked",
						   &d->ino_checked);
	if (!err)
		err = ext2fs_allocate_inode_bitmap(fs, "changed",
						   &d->ino_changed);
	d->total = (d->full ? 1 : 2) *
		   (uint64_t)(fs->super->s_inodes_count -
			      fs->super->s_free_inodes_count);
	return err;
}

static void teardown(struct differ *d)
{
	if (d->blk_checked)
		ext2fs_free_block_bitmap(d->blk_checked);
	if (d->blk_differs)
		ext2fs_free_block_bitmap(d->blk_differs);
	if (d->ino_checked)
		ext2fs_free_inode_bitmap(d->ino_checked);
	if (d->ino_changed)
		ext2fs_free_inode_bitmap(d->ino_changed);
	free(d->ibuf[0]);
	free(d->ibuf[1]);
}

errcode_t nx_snap_delta(struct nx_volume *vol, uint32_t old_id,
			uint32_t new_id, unsigned flags,
			const struct nx_progress *prog, struct nx_delta *delta,
			char *msg, size_t msglen)
{
	struct differ d = { 0 };
	errcode_t err;

	memset(delta, 0, sizeof(*delta));
	snprintf(msg, msglen, "%s", "");
	d.src.walk = walk_side;
	d.src.attr = read_attr;
	d.src.compare = compare_file;
	d.src.extents = new_extents;
	d.src.blocksize = vol->fs->blocksize;
	d.vol = vol;
	d.store = vol->snap;
	d.prog = prog;
	d.full = (flags & NX_DELTA_FULL) != 0;
	if (!d.store) {
		snprintf(msg, msglen, "the volume has no snapshot store");
		return EINVAL;
	}
	err = d.full ? 0 : open_side(&d, 0, old_id, msg, msglen);
	if (!err)
		err = open_side(&d, 1, new_id, msg, msglen);
	if (!err && !d.full && d.side[1].idx >= 0 &&
	    (d.side[0].idx < 0 || d.side[0].idx > d.side[1].idx)) {
		snprintf(msg, msglen, "the old tree is newer than the new "
			 "one; name the older snapshot first");
		err = EINVAL;
	}
	if (!err)
		err = setup(&d);
	if (!err)
		err = nx_delta_compute(&d.src, flags, delta);
	if (err && !msg[0])
		snprintf(msg, msglen, "comparing failed: %s",
			 error_message(err));
	teardown(&d);
	return err;
}

errcode_t nx_snap_same_data(struct nx_volume *vol, const uint32_t id[2],
			    const ext2_ino_t ino[2], int *same, char *msg,
			    size_t msglen)
{
	struct ext2_inode_large in[2];
	struct differ d = { 0 };
	errcode_t err = 0;
	int s, differs = 1;

	*same = 0;
	snprintf(msg, msglen, "%s", "");
	d.vol = vol;
	d.store = vol->snap;
	if (!d.store && (id[0] || id[1])) {
		snprintf(msg, msglen, "the volume has no snapshot store");
		return ENOENT;
	}
	for (s = 0; s < 2 && !err; s++) {
		err = open_side(&d, s, id[s], msg, msglen);
		if (err)
			break;
		memset(&in[s], 0, sizeof(in[s]));
		if (!ino[s] || ino[s] > vol->fs->super->s_inodes_count ||
		    ext2fs_read_inode_full(d.side[s].fs, ino[s],
					   (struct ext2_inode *)&in[s],
					   sizeof(in[s])) ||
		    !in[s].i_links_count || !LINUX_S_ISREG(in[s].i_mode)) {
			snprintf(msg, msglen, "inode %u is not a file there",
				 ino[s]);
			err = EINVAL;
		}
	}
	if (!err)
		err = compare_data(&d, ino, NULL, in, 0, &differs);
	if (!err)
		*same = !differs;
	return err;
}

errcode_t nx_snap_diff(struct nx_volume *vol, const char *old_name,
		       const char *new_name, nx_diff_fn fn, void *priv,
		       const struct nx_progress *prog, char *msg,
		       size_t msglen)
{
	struct nx_snapinfo info[2];
	struct nx_delta delta;
	errcode_t err;

	snprintf(msg, msglen, "%s", "");
	if (!vol->snap) {
		snprintf(msg, msglen, "the volume has no snapshot store");
		return EINVAL;
	}
	if (nx_snap_find(vol, old_name, &info[0])) {
		snprintf(msg, msglen, "no snapshot named '%s'", old_name);
		return ENOENT;
	}
	if (new_name && nx_snap_find(vol, new_name, &info[1])) {
		snprintf(msg, msglen, "no snapshot named '%s'", new_name);
		return ENOENT;
	}
	if (new_name && nx_snap_name_index(vol, old_name) >
			nx_snap_name_index(vol, new_name)) {
		snprintf(msg, msglen, "snapshot '%s' is newer than '%s'; name "
			 "the older one first", old_name, new_name);
		return EINVAL;
	}
	err = nx_snap_delta(vol, info[0].id, new_name ? info[1].id : 0, 0,
			    prog, &delta, msg, msglen);
	if (!err) {
		err = nx_delta_diff(&delta, fn, priv);
		if (err)
			snprintf(msg, msglen, "comparing failed: %s",
				 error_message(err));
	}
	nx_delta_free(&delta);
	return err;
}
