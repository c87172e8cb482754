/*
 * dir.c - directory contents: name checks, lookup, readdir and the
 * one-entry primitives (add, repoint, remove) that namei.c and rename.c
 * build the namespace operations from.
 *
 * Three directory layouts exist on disk and everything here handles all
 * of them:
 *  - inline-data directories: the parent's inode number and the dirents
 *    live in i_block (60 bytes) and in the "system.data" xattr;
 *  - linear block directories: a chain of dirents in every block;
 *  - htree (dir_index) directories: block 0 is the dx root, some blocks
 *    are index nodes and the rest are leaves of ordinary dirents; the
 *    index maps name hashes to leaves.
 *
 * New entries go in through ext2fs_link(), which knows how to insert
 * into and split htree leaves.  We add what it lacks: growing a full
 * directory, and turning a full one-block directory into an htree as
 * the kernel's make_indexed_dir() does, so that big directories get
 * hashed lookups.
 *
 * readdir cookies: linear directories use the byte position of the next
 * entry (entries never move there); htree directories use the name hash
 * like ext4 does, because leaf splits move entries between blocks;
 * inline directories use the offset in the inline area.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nextfs/dir.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"

#define DX_ROOT_INFO_OFF	24	/* after '.' (12) and '..' (12) */
#define DX_BLOCK_MASK		EXT4_DX_BLOCK_MASK

/* One directory being worked on; INODE is a snapshot taken at open. */
struct dirctx {
	struct nx_volume *vol;
	ext2_filsys fs;
	ext2_ino_t ino;
	struct ext2_inode_large inode;
	unsigned bs;
	blk64_t nblocks;
	int is_inline;
	int is_dx;
};

errcode_t nx_name_check(const char *name)
{
	size_t len;

	if (!name || !*name)
		return ENOENT;
	len = strnlen(name, NX_NAME_MAX + 1);
	if (len > NX_NAME_MAX)
		return ENAMETOOLONG;
	if (memchr(name, '/', len))
		return EINVAL;
	return 0;
}

int nx_dir_file_type(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return EXT2_FT_REG_FILE;
	case S_IFDIR:
		return EXT2_FT_DIR;
	case S_IFCHR:
		return EXT2_FT_CHRDEV;
	case S_IFBLK:
		return EXT2_FT_BLKDEV;
	case S_IFIFO:
		return EXT2_FT_FIFO;
	case S_IFSOCK:
		return EXT2_FT_SOCK;
	case S_IFLNK:
		return EXT2_FT_SYMLINK;
	}
	return EXT2_FT_UNKNOWN;
}

static unsigned char ft_to_dtype(int ft)
{
	static const unsigned char map[EXT2_FT_MAX] = {
		[EXT2_FT_UNKNOWN] = DT_UNKNOWN,
		[EXT2_FT_REG_FILE] = DT_REG,
		[EXT2_FT_DIR] = DT_DIR,
		[EXT2_FT_CHRDEV] = DT_CHR,
		[EXT2_FT_BLKDEV] = DT_BLK,
		[EXT2_FT_FIFO] = DT_FIFO,
		[EXT2_FT_SOCK] = DT_SOCK,
		[EXT2_FT_SYMLINK] = DT_LNK,
	};

	return ft >= 0 && ft < EXT2_FT_MAX ? map[ft] : DT_UNKNOWN;
}

static int is_dot_or_dotdot(const char *name, unsigned len)
{
	return (len == 1 && name[0] == '.') ||
	       (len == 2 && name[0] == '.' && name[1] == '.');
}

static int dx_dir(ext2_filsys fs, const struct ext2_inode_large *inode)
{
	return (inode->i_flags & EXT2_INDEX_FL) &&
	       !(inode->i_flags & EXT4_INLINE_DATA_FL) &&
	       ext2fs_has_feature_dir_index(fs->super);
}

static errcode_t dirctx_open(struct nx_volume *vol, ext2_ino_t ino,
			     struct dirctx *d)
{
	errcode_t err;

	d->vol = vol;
	d->fs = vol->fs;
	d->ino = ino;
	d->bs = vol->fs->blocksize;
	err = nx_inode_read(vol, ino, &d->inode);
	if (err)
		return err;
	if (!LINUX_S_ISDIR(d->inode.i_mode))
		return d->inode.i_mode ? ENOTDIR : ENOENT;
	d->is_inline = (d->inode.i_flags & EXT4_INLINE_DATA_FL) != 0;
	d->is_dx = dx_dir(d->fs, &d->inode);
	/*
	 * Without largedir a directory's size is 32 bits, as the kernel
	 * reads it: a corrupt i_size_high must not make a listing walk 2^48
	 * bytes of holes with the volume locked.
	 */
	d->nblocks = (ext2fs_has_feature_largedir(d->fs->super) ?
		      EXT2_I_SIZE(&d->inode) : d->inode.i_size) / d->bs;
	return 0;
}

/*
 * The dirent at OFF in BUF whose area ends at END, checked for sanity
 * before anybody trusts its lengths: a corrupt directory must give EIO,
 * never a walk off the end of the buffer.
 */
static errcode_t dent_get(ext2_filsys fs, char *buf, unsigned off,
			  unsigned end, struct ext2_dir_entry **dep,
			  unsigned *rec_lenp)
{
	struct ext2_dir_entry *de;
	unsigned rec_len;
	errcode_t err;

	if (off + 8 > end || (off & 3))
		return EXT2_ET_DIR_CORRUPTED;
	de = (struct ext2_dir_entry *)(buf + off);
	err = ext2fs_get_rec_len(fs, de, &rec_len);
	if (err)
		return err;
	if (rec_len < 8 || (rec_len & 3) || rec_len > end - off ||
	    (unsigned)ext2fs_dirent_name_len(de) + 8 > rec_len)
		return EXT2_ET_DIR_CORRUPTED;
	*dep = de;
	*rec_lenp = rec_len;
	return 0;
}

/* Map directory block LBLK (0 for a hole) and read it if mapped. */
static errcode_t dir_read_block(struct dirctx *d, blk64_t lblk, char *buf,
				blk64_t *pblk)
{
	int ret_flags = 0;
	errcode_t err;

	*pblk = 0;
	err = ext2fs_bmap2(d->fs, d->ino, EXT2_INODE(&d->inode), NULL, 0,
			   lblk, &ret_flags, pblk);
	if (err)
		return err;
	if (ret_flags & BMAP_RET_UNINIT)
		*pblk = 0;
	if (!*pblk)
		return 0;
	return ext2fs_read_dir_block4(d->fs, *pblk, buf, 0, d->ino);
}

/* d_type of an entry: from the dirent, or the inode without filetype. */
static unsigned char entry_dtype(struct dirctx *d, ext2_ino_t ino, int ft)
{
	struct ext2_inode_large inode;

	if (ext2fs_has_feature_filetype(d->fs->super))
		return ft_to_dtype(ft & 7);
	if (nx_inode_read(d->vol, ino, &inode))
		return DT_UNKNOWN;
	return IFTODT(inode.i_mode);
}

/* ---------------------------------------------------------------- */
/* Inline-data directories                                            */
/* ---------------------------------------------------------------- */

/* Whole inline area: i_block (parent + dirents) then system.data. */
static errcode_t inline_get(struct dirctx *d, char **bufp, size_t *sizep)
{
	size_t size;
	char *buf;
	errcode_t err;

	err = ext2fs_inline_data_size(d->fs, d->ino, &size);
	if (err)
		return err;
	if (size < EXT4_MIN_INLINE_DATA_SIZE)
		size = EXT4_MIN_INLINE_DATA_SIZE;
	buf = calloc(1, size);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_inline_data_get(d->fs, d->ino, NULL, buf, &size);
	if (err) {
		free(buf);
		return err;
	}
	*bufp = buf;
	*sizep = size;
	return 0;
}

/* The dirent areas of an inline directory: [4, 60) and [60, size). */
static unsigned inline_area_start(int area)
{
	return area == 0 ? EXT4_INLINE_DATA_DOTDOT_SIZE :
			   EXT4_MIN_INLINE_DATA_SIZE;
}

static unsigned inline_area_end(int area, size_t size)
{
	return area == 0 ? EXT4_MIN_INLINE_DATA_SIZE : (unsigned)size;
}

/* ---------------------------------------------------------------- */
/* Finding, repointing and removing one entry                         */
/* ---------------------------------------------------------------- */

enum dent_op { DENT_FIND, DENT_SET, DENT_REMOVE };

struct dent_req {
	const char *name;
	unsigned len;
	enum dent_op op;
	ext2_ino_t set_ino;	/* DENT_SET */
	int set_ft;
	ext2_ino_t ino;		/* out: what the entry named */
	int ft;
	int found;
};

/*
 * Apply REQ to the entry of its name in [START, END) of BUF.  Removal
 * folds the entry into its predecessor (or clears the inode of the
 * first entry of the area), exactly like ext4_generic_delete_entry(),
 * so no other entry moves.
 */
static errcode_t dent_apply(ext2_filsys fs, char *buf, unsigned start,
			    unsigned end, struct dent_req *r)
{
	struct ext2_dir_entry *de, *prev = NULL;
	unsigned off, rec_len, prev_len = 0;
	errcode_t err;

	for (off = start; off < end; off += rec_len) {
		err = dent_get(fs, buf, off, end, &de, &rec_len);
		if (err)
			return err;
		if (de->inode && (unsigned)ext2fs_dirent_name_len(de) ==
		    r->len && !memcmp(de->name, r->name, r->len))
			break;
		prev = de;
		prev_len = rec_len;
	}
	if (off >= end)
		return 0;
	r->found = 1;
	r->ino = de->inode;
	r->ft = ext2fs_dirent_file_type(de);
	switch (r->op) {
	case DENT_FIND:
		break;
	case DENT_SET:
		de->inode = r->set_ino;
		if (ext2fs_has_feature_filetype(fs->super))
			ext2fs_dirent_set_file_type(de, r->set_ft);
		break;
	case DENT_REMOVE:
		if (prev)
			return ext2fs_set_rec_len(fs, prev_len + rec_len, prev);
		de->inode = 0;
		break;
	}
	return 0;
}

static errcode_t inline_entry_op(struct dirctx *d, struct dent_req *r)
{
	char *buf;
	size_t size;
	errcode_t err;
	int area;

	err = inline_get(d, &buf, &size);
	if (err)
		return err;
	for (area = 0; area < 2 && !r->found; area++) {
		err = dent_apply(d->fs, buf, inline_area_start(area),
				 inline_area_end(area, size), r);
		if (err)
			goto out;
	}
	if (!r->found)
		err = ENOENT;
	else if (r->op != DENT_FIND)
		err = ext2fs_inline_data_set(d->fs, d->ino, NULL, buf, size);
out:
	free(buf);
	return err;
}

/* Apply R to directory block LBLK; writes the block back if changed. */
static errcode_t block_entry_op(struct dirctx *d, blk64_t lblk, char *buf,
				struct dent_req *r)
{
	blk64_t pblk;
	errcode_t err;

	err = dir_read_block(d, lblk, buf, &pblk);
	if (err || !pblk)
		return err;
	err = dent_apply(d->fs, buf, 0, d->bs, r);
	if (err || !r->found || r->op == DENT_FIND)
		return err;
	return ext2fs_write_dir_block4(d->fs, pblk, buf, 0, d->ino);
}

static errcode_t linear_entry_op(struct dirctx *d, char *buf,
				 struct dent_req *r)
{
	blk64_t lblk;
	errcode_t err;

	for (lblk = 0; lblk < d->nblocks; lblk++) {
		err = block_entry_op(d, lblk, buf, r);
		if (err || r->found)
			return err;
	}
	return ENOENT;
}

/* ---------------------------------------------------------------- */
/* htree index                                                        */
/* ---------------------------------------------------------------- */

struct dx_frame {
	char *buf;
	struct ext2_dx_entry *entries;
	unsigned count;
	unsigned at;
};

struct dx_path {
	unsigned nframes;
	int hash_alg;
	struct dx_frame frames[EXT4_HTREE_LEVEL];
	blk64_t leaf;
};

static void dx_path_free(struct dx_path *p)
{
	unsigned i;

	for (i = 0; i < EXT4_HTREE_LEVEL; i++) {
		free(p->frames[i].buf);
		p->frames[i].buf = NULL;
	}
}

/* Locate the dx entries of a root (ROOT) or node block in F->buf. */
static errcode_t dx_parse_frame(struct dirctx *d, struct dx_frame *f,
				int root)
{
	struct ext2_dx_countlimit *cl;
	unsigned count, limit;
	int off;

	if (ext2fs_get_dx_countlimit(d->fs, (struct ext2_dir_entry *)f->buf,
				     &cl, &off))
		return EXT2_ET_DIR_CORRUPTED;
	if ((off == 8) == root)
		return EXT2_ET_DIR_CORRUPTED;
	count = ext2fs_le16_to_cpu(cl->count);
	limit = ext2fs_le16_to_cpu(cl->limit);
	if (!count || count > limit ||
	    off + limit * sizeof(struct ext2_dx_entry) > d->bs)
		return EXT2_ET_DIR_CORRUPTED;
	f->entries = (struct ext2_dx_entry *)cl;
	f->count = count;
	f->at = 0;
	return 0;
}

static errcode_t dx_load_frame(struct dirctx *d, struct dx_frame *f,
			       blk64_t lblk, int root)
{
	blk64_t pblk;
	errcode_t err;

	if (!f->buf) {
		f->buf = malloc(d->bs);
		if (!f->buf)
			return EXT2_ET_NO_MEMORY;
	}
	if (lblk >= d->nblocks)
		return EXT2_ET_DIR_CORRUPTED;
	err = dir_read_block(d, lblk, f->buf, &pblk);
	if (err)
		return err;
	if (!pblk)
		return EXT2_ET_DIR_CORRUPTED;
	return dx_parse_frame(d, f, root);
}

static errcode_t dx_read_root(struct dirctx *d, struct dx_path *p)
{
	struct ext2_dx_root_info *info;
	errcode_t err;
	int alg;

	err = dx_load_frame(d, &p->frames[0], 0, 1);
	if (err)
		return err;
	info = (struct ext2_dx_root_info *)(p->frames[0].buf +
					    DX_ROOT_INFO_OFF);
	alg = info->hash_version;
	if (alg != EXT2_HASH_LEGACY && alg != EXT2_HASH_HALF_MD4 &&
	    alg != EXT2_HASH_TEA)
		return EXT2_ET_DIRHASH_UNSUPP;
	if (d->fs->super->s_flags & EXT2_FLAGS_UNSIGNED_HASH)
		alg += 3;
	if (info->indirect_levels >= ext2_dir_htree_level(d->fs))
		return EXT2_ET_DIR_CORRUPTED;
	p->hash_alg = alg;
	p->nframes = info->indirect_levels + 1;
	return 0;
}

static errcode_t dx_hash(struct dirctx *d, int alg, const char *name,
			 unsigned len, uint32_t *major, uint32_t *minor)
{
	ext2_dirhash_t h = 0, m = 0;
	errcode_t err;

	err = ext2fs_dirhash2(alg, name, len, d->fs->encoding, 0,
			      d->fs->super->s_hash_seed, &h, &m);
	*major = h;
	*minor = m;
	return err;
}

static blk64_t dx_block(const struct dx_frame *f)
{
	return ext2fs_le32_to_cpu(f->entries[f->at].block) & DX_BLOCK_MASK;
}

/* Last entry of F whose hash is <= HASH (entry 0 covers everything). */
static void dx_search(struct dx_frame *f, uint32_t hash)
{
	unsigned lo = 1, hi = f->count - 1, at = 0;

	while (lo <= hi && hi < f->count) {
		unsigned mid = lo + (hi - lo) / 2;

		if (ext2fs_le32_to_cpu(f->entries[mid].hash) <= hash) {
			at = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	f->at = at;
}

/* Walk from the (already read) root to the leaf that covers HASH. */
static errcode_t dx_probe(struct dirctx *d, struct dx_path *p, uint32_t hash)
{
	unsigned level;
	errcode_t err;

	for (level = 0;; level++) {
		struct dx_frame *f = &p->frames[level];

		dx_search(f, hash);
		if (level + 1 == p->nframes)
			break;
		err = dx_load_frame(d, &p->frames[level + 1], dx_block(f), 0);
		if (err)
			return err;
	}
	p->leaf = dx_block(&p->frames[p->nframes - 1]);
	return p->leaf < d->nblocks ? 0 : EXT2_ET_DIR_CORRUPTED;
}

/*
 * Step P to the next leaf in hash order (like ext4_htree_next_block).
 * Returns 1 at the end of the index; *START gets the lowest hash the
 * new leaf may hold, with bit 0 set when it continues a hash collision
 * from the previous leaf.
 */
static int dx_next_leaf(struct dirctx *d, struct dx_path *p, uint32_t *start,
			errcode_t *errp)
{
	int level = p->nframes - 1;
	unsigned l;

	*errp = 0;
	while (level >= 0 && p->frames[level].at + 1 >= p->frames[level].count)
		level--;
	if (level < 0)
		return 1;
	p->frames[level].at++;
	*start = ext2fs_le32_to_cpu(
		p->frames[level].entries[p->frames[level].at].hash);
	for (l = level; l + 1 < p->nframes; l++) {
		*errp = dx_load_frame(d, &p->frames[l + 1],
				      dx_block(&p->frames[l]), 0);
		if (*errp)
			return 1;
	}
	p->leaf = dx_block(&p->frames[p->nframes - 1]);
	if (p->leaf >= d->nblocks)
		*errp = EXT2_ET_DIR_CORRUPTED;
	return *errp ? 1 : 0;
}

/* Find R's name through the index: its leaf plus collision overflow. */
static errcode_t dx_entry_op(struct dirctx *d, char *buf, struct dent_req *r)
{
	struct dx_path p = { 0 };
	uint32_t hash, minor, start;
	errcode_t err;

	err = dx_read_root(d, &p);
	if (err)
		goto out;
	err = dx_hash(d, p.hash_alg, r->name, r->len, &hash, &minor);
	if (err)
		goto out;
	err = dx_probe(d, &p, hash);
	while (!err) {
		err = block_entry_op(d, p.leaf, buf, r);
		if (err || r->found)
			break;
		/* Equal hashes may spill into the next leaf (bit 0 set). */
		if (dx_next_leaf(d, &p, &start, &err)) {
			if (!err)
				err = ENOENT;
			break;
		}
		if (!(start & 1) || (start & ~1U) != hash) {
			err = ENOENT;
			break;
		}
	}
out:
	dx_path_free(&p);
	return err;
}

static errcode_t dir_entry_op(struct dirctx *d, struct dent_req *r)
{
	char *buf;
	errcode_t err;

	if (d->is_inline)
		return inline_entry_op(d, r);
	buf = malloc(d->bs);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = ENOENT;
	if (d->is_dx) {
		err = dx_entry_op(d, buf, r);
		/* A damaged index must not hide entries: scan the blocks. */
		if (err && err != ENOENT && !r->found)
			err = linear_entry_op(d, buf, r);
	} else {
		err = linear_entry_op(d, buf, r);
	}
	free(buf);
	return err;
}

static errcode_t entry_op(struct nx_volume *vol, ext2_ino_t dir,
			  struct dent_req *r)
{
	struct dirctx d;
	errcode_t err;

	err = nx_name_check(r->name);
	if (err)
		return err;
	r->len = strlen(r->name);
	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	return dir_entry_op(&d, r);
}

/* ---------------------------------------------------------------- */
/* '..'                                                               */
/* ---------------------------------------------------------------- */

/*
 * Read block 0 of a block directory into BUF and find its '..' dirent,
 * which must be the second one, right after '.' (dx roots included).
 */
static errcode_t read_dotdot(struct dirctx *d, char *buf, blk64_t *pblk,
			     unsigned *offp)
{
	struct ext2_dir_entry *de;
	unsigned rec_len, off;
	errcode_t err;

	err = dir_read_block(d, 0, buf, pblk);
	if (err)
		return err;
	if (!*pblk)
		return EXT2_ET_DIR_CORRUPTED;
	err = dent_get(d->fs, buf, 0, d->bs, &de, &rec_len);
	if (err)
		return err;
	if (ext2fs_dirent_name_len(de) != 1 || de->name[0] != '.')
		return EXT2_ET_DIR_CORRUPTED;
	off = rec_len;
	err = dent_get(d->fs, buf, off, d->bs, &de, &rec_len);
	if (err)
		return err;
	if (ext2fs_dirent_name_len(de) != 2 || memcmp(de->name, "..", 2))
		return EXT2_ET_DIR_CORRUPTED;
	*offp = off;
	return 0;
}

static errcode_t dirctx_parent(struct dirctx *d, ext2_ino_t *parent)
{
	blk64_t pblk;
	unsigned off;
	char *buf;
	errcode_t err;

	if (d->is_inline) {
		*parent = ext2fs_le32_to_cpu(d->inode.i_block[0]);
		return 0;
	}
	buf = malloc(d->bs);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = read_dotdot(d, buf, &pblk, &off);
	if (!err)
		*parent = ((struct ext2_dir_entry *)(buf + off))->inode;
	free(buf);
	return err;
}

errcode_t nx_dir_get_parent(struct nx_volume *vol, ext2_ino_t dir,
			    ext2_ino_t *parent)
{
	struct dirctx d;
	errcode_t err = dirctx_open(vol, dir, &d);

	return err ? err : dirctx_parent(&d, parent);
}

errcode_t nx_dir_set_parent(struct nx_volume *vol, ext2_ino_t dir,
			    struct ext2_inode_large *inode, ext2_ino_t parent)
{
	struct dirctx d;
	blk64_t pblk;
	unsigned off;
	char *buf;
	errcode_t err;

	if (inode->i_flags & EXT4_INLINE_DATA_FL) {
		inode->i_block[0] = ext2fs_cpu_to_le32(parent);
		return 0;
	}
	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	buf = malloc(d.bs);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = read_dotdot(&d, buf, &pblk, &off);
	if (!err) {
		((struct ext2_dir_entry *)(buf + off))->inode = parent;
		err = ext2fs_write_dir_block4(d.fs, pblk, buf, 0, dir);
	}
	free(buf);
	return err;
}

/* ---------------------------------------------------------------- */
/* Lookup and entry primitives                                        */
/* ---------------------------------------------------------------- */

errcode_t nx_lookup(struct nx_volume *vol, ext2_ino_t dir, const char *name,
		    ext2_ino_t *ino)
{
	struct dent_req r = { .name = name, .op = DENT_FIND };
	struct dirctx d;
	errcode_t err;

	err = nx_name_check(name);
	if (err)
		return err;
	r.len = strlen(name);
	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	if (r.len == 1 && name[0] == '.') {
		*ino = dir;
		return 0;
	}
	if (r.len == 2 && name[0] == '.' && name[1] == '.')
		return dirctx_parent(&d, ino);
	err = dir_entry_op(&d, &r);
	if (!err)
		*ino = r.ino;
	return err;
}

errcode_t nx_dir_set_entry(struct nx_volume *vol, ext2_ino_t dir,
			   const char *name, ext2_ino_t ino, mode_t mode)
{
	struct dent_req r = {
		.name = name, .op = DENT_SET, .set_ino = ino,
		.set_ft = nx_dir_file_type(mode),
	};

	return entry_op(vol, dir, &r);
}

errcode_t nx_dir_remove_entry(struct nx_volume *vol, ext2_ino_t dir,
			      const char *name)
{
	struct dent_req r = { .name = name, .op = DENT_REMOVE };

	return entry_op(vol, dir, &r);
}

/* ---------------------------------------------------------------- */
/* Adding entries                                                     */
/* ---------------------------------------------------------------- */

/*
 * Pack the live entries of [START, END) of SRC into a fresh leaf block
 * DST (with the checksum tail when the volume has metadata_csum).
 */
static errcode_t pack_leaf(struct dirctx *d, char *src, unsigned start,
			   unsigned end, char *dst)
{
	unsigned csum = ext2fs_has_feature_metadata_csum(d->fs->super) ?
			sizeof(struct ext2_dir_entry_tail) : 0;
	struct ext2_dir_entry *de, *last = NULL;
	unsigned off, rec_len, used = 0, need;
	errcode_t err;

	memset(dst, 0, d->bs);
	for (off = start; off < end; off += rec_len) {
		err = dent_get(d->fs, src, off, end, &de, &rec_len);
		if (err)
			return err;
		if (!de->inode)
			continue;
		need = EXT2_DIR_REC_LEN(ext2fs_dirent_name_len(de));
		if (used + need > d->bs - csum)
			return EXT2_ET_DIR_NO_SPACE;
		memcpy(dst + used, de, 8 + ext2fs_dirent_name_len(de));
		last = (struct ext2_dir_entry *)(dst + used);
		err = ext2fs_set_rec_len(d->fs, need, last);
		if (err)
			return err;
		used += need;
	}
	if (!last) {
		last = (struct ext2_dir_entry *)dst;
		used = 0;
		need = 0;
	} else {
		need = EXT2_DIR_REC_LEN(ext2fs_dirent_name_len(last));
	}
	err = ext2fs_set_rec_len(d->fs, d->bs - csum - (used - need), last);
	if (err)
		return err;
	if (csum)
		ext2fs_initialize_dirent_tail(d->fs,
					      EXT2_DIRENT_TAIL(dst, d->bs));
	return 0;
}

/* Turn block 0 (holding '.' and '..') into a dx root with one leaf. */
static void build_dx_root(struct dirctx *d, char *buf, unsigned dotdot_off)
{
	unsigned csum = ext2fs_has_feature_metadata_csum(d->fs->super) ?
			sizeof(struct ext2_dx_tail) : 0;
	struct ext2_dir_entry *dotdot;
	struct ext2_dx_root_info *info;
	struct ext2_dx_countlimit *cl;
	struct ext2_dx_entry *entries;
	unsigned off = DX_ROOT_INFO_OFF + sizeof(*info);

	dotdot = (struct ext2_dir_entry *)(buf + dotdot_off);
	ext2fs_set_rec_len(d->fs, d->bs - dotdot_off, dotdot);
	memset(buf + DX_ROOT_INFO_OFF, 0, d->bs - DX_ROOT_INFO_OFF);
	info = (struct ext2_dx_root_info *)(buf + DX_ROOT_INFO_OFF);
	info->hash_version = d->fs->super->s_def_hash_version;
	info->info_length = sizeof(*info);
	info->indirect_levels = 0;
	entries = (struct ext2_dx_entry *)(buf + off);
	cl = (struct ext2_dx_countlimit *)entries;
	/* Must equal the kernel's dx_root_limit() or it rejects the root. */
	cl->limit = ext2fs_cpu_to_le16((d->bs - off - csum) /
				       sizeof(struct ext2_dx_entry));
	cl->count = ext2fs_cpu_to_le16(1);
	entries[0].block = ext2fs_cpu_to_le32(1);
}

/*
 * The kernel's make_indexed_dir(): a full one-block directory becomes
 * an htree whose root (block 0) keeps '.' and '..' and whose single
 * leaf (new block 1) gets the other entries; ext2fs_link() then splits
 * leaves and grows the index as entries are added.  The new block is
 * appended first, so a failure leaves a valid linear directory.
 */
static errcode_t dx_make_indexed(struct nx_volume *vol, ext2_ino_t dir)
{
	struct dirctx d;
	char *buf0 = NULL, *leaf = NULL;
	blk64_t pblk0, pblk1;
	unsigned dotdot_off, rec_len;
	struct ext2_dir_entry *de;
	errcode_t err;

	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	buf0 = malloc(d.bs);
	leaf = malloc(d.bs);
	err = EXT2_ET_NO_MEMORY;
	if (!buf0 || !leaf)
		goto out;
	err = read_dotdot(&d, buf0, &pblk0, &dotdot_off);
	if (err)
		goto out;
	if (dotdot_off != 12) {
		err = EXT2_ET_DIR_NO_SPACE;	/* odd layout: stay linear */
		goto out;
	}
	err = dent_get(d.fs, buf0, dotdot_off, d.bs, &de, &rec_len);
	if (!err)
		err = pack_leaf(&d, buf0, dotdot_off + rec_len, d.bs, leaf);
	if (err)
		goto out;
	err = ext2fs_expand_dir(d.fs, dir);
	if (err)
		goto out;
	err = dirctx_open(vol, dir, &d);
	if (!err)
		err = ext2fs_bmap2(d.fs, dir, EXT2_INODE(&d.inode), NULL, 0, 1,
				   NULL, &pblk1);
	if (!err && (d.nblocks != 2 || !pblk1))
		err = EXT2_ET_DIR_CORRUPTED;
	if (!err)
		err = ext2fs_write_dir_block4(d.fs, pblk1, leaf, 0, dir);
	if (err)
		goto out;
	build_dx_root(&d, buf0, dotdot_off);
	err = ext2fs_write_dir_block4(d.fs, pblk0, buf0, 0, dir);
	if (err)
		goto out;
	d.inode.i_flags |= EXT2_INDEX_FL;
	err = nx_inode_write(vol, dir, &d.inode);
out:
	free(buf0);
	free(leaf);
	return err;
}

/* ext2fs_link() found no room: make some the way the kernel would. */
static errcode_t make_room(struct nx_volume *vol, ext2_ino_t dir)
{
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read(vol, dir, &inode);
	if (err)
		return err;
	/* ext2fs_link() already grew the htree as far as it can go. */
	if (inode.i_flags & EXT2_INDEX_FL)
		return EXT2_ET_DIR_NO_SPACE;
	if (!(inode.i_flags & EXT4_INLINE_DATA_FL) &&
	    ext2fs_has_feature_dir_index(vol->fs->super) &&
	    EXT2_I_SIZE(&inode) == vol->fs->blocksize) {
		err = dx_make_indexed(vol, dir);
		if (err != EXT2_ET_DIR_NO_SPACE)
			return err;
	}
	/* Inline directories move to a block; block directories grow. */
	return ext2fs_expand_dir(vol->fs, dir);
}

errcode_t nx_dir_add_entry(struct nx_volume *vol, ext2_ino_t dir,
			   const char *name, ext2_ino_t ino, mode_t mode)
{
	int ft = nx_dir_file_type(mode);
	errcode_t err;
	int tries;

	err = nx_name_check(name);	/* never a corrupt dirent on disk */
	if (err)
		return err;
	if (nx_volume_rdonly(vol))
		return EROFS;
	for (tries = 0; tries < 4; tries++) {
		err = ext2fs_link(vol->fs, dir, name, ino, ft);
		if (err != EXT2_ET_DIR_NO_SPACE)
			return err;
		err = make_room(vol, dir);
		if (err)
			return err;
	}
	return EXT2_ET_DIR_NO_SPACE;
}

/* ---------------------------------------------------------------- */
/* Emptiness                                                          */
/* ---------------------------------------------------------------- */

/* Any live entry other than '.' and '..' in [START, END)? */
static errcode_t area_has_names(ext2_filsys fs, char *buf, unsigned start,
				unsigned end, int *found)
{
	struct ext2_dir_entry *de;
	unsigned off, rec_len;
	errcode_t err;

	for (off = start; off < end; off += rec_len) {
		err = dent_get(fs, buf, off, end, &de, &rec_len);
		if (err)
			return err;
		if (de->inode && !is_dot_or_dotdot(de->name,
					ext2fs_dirent_name_len(de))) {
			*found = 1;
			return 0;
		}
	}
	return 0;
}

errcode_t nx_dir_is_empty(struct nx_volume *vol, ext2_ino_t dir, int *empty)
{
	struct dirctx d;
	blk64_t lblk, pblk;
	size_t size;
	char *buf;
	int found = 0, area;
	errcode_t err;

	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	if (d.is_inline) {
		err = inline_get(&d, &buf, &size);
		if (err)
			return err;
		for (area = 0; area < 2 && !err && !found; area++)
			err = area_has_names(d.fs, buf, inline_area_start(area),
					     inline_area_end(area, size),
					     &found);
	} else {
		buf = malloc(d.bs);
		if (!buf)
			return EXT2_ET_NO_MEMORY;
		/* dx roots and nodes show up as '.', '..' and empty dirents. */
		for (lblk = 0; lblk < d.nblocks && !err && !found; lblk++) {
			err = dir_read_block(&d, lblk, buf, &pblk);
			if (!err && pblk)
				err = area_has_names(d.fs, buf, 0, d.bs,
						     &found);
		}
	}
	free(buf);
	if (!err)
		*empty = !found;
	return err;
}

/* ---------------------------------------------------------------- */
/* Directory link counts (dir_nlink)                                  */
/* ---------------------------------------------------------------- */

/*
 * ext4 lets an indexed directory on a dir_nlink volume have more than
 * EXT2_LINK_MAX subdirectories by pinning its link count at 1; anywhere
 * else, the limit is EMLINK (like EXT4_DIR_LINK_MAX()).
 */
int nx_dir_link_max(ext2_filsys fs, const struct ext2_inode_large *dir)
{
	if (dir->i_links_count < EXT2_LINK_MAX)
		return 0;
	return !(ext2fs_has_feature_dir_nlink(fs->super) && dx_dir(fs, dir));
}

void nx_dir_nlink_inc(ext2_filsys fs, struct ext2_inode_large *dir)
{
	unsigned n = dir->i_links_count;

	if (n == 1 && ext2fs_has_feature_dir_nlink(fs->super))
		return;		/* already past the limit */
	n++;
	if (n > EXT2_LINK_MAX)
		n = 1;
	dir->i_links_count = n;
}

/* ext4_dec_count(): a directory never drops below 2 (or leaves 1). */
void nx_dir_nlink_dec(struct ext2_inode_large *dir)
{
	if (dir->i_links_count > 2)
		dir->i_links_count--;
}

/* ---------------------------------------------------------------- */
/* readdir                                                            */
/* ---------------------------------------------------------------- */

/* Hand one entry to FILL with a NUL-terminated copy of its name. */
static int emit(nx_filldir_fn fill, void *priv, const char *name,
		unsigned len, ext2_ino_t ino, unsigned char dtype,
		uint64_t next)
{
	char tmp[NX_NAME_MAX + 1];

	memcpy(tmp, name, len);
	tmp[len] = 0;
	return fill(priv, tmp, len, ino, dtype, next);
}

/* Cookies 0 and 1: '.' and '..' (used by inline and htree layouts). */
static errcode_t emit_dots(struct dirctx *d, uint64_t pos, uint64_t after,
			   nx_filldir_fn fill, void *priv, int *stop)
{
	ext2_ino_t parent;
	errcode_t err;

	*stop = 0;
	if (pos == 0 && (*stop = emit(fill, priv, ".", 1, d->ino, DT_DIR, 1)))
		return 0;
	if (pos <= 1) {
		err = dirctx_parent(d, &parent);
		if (err)
			return err;
		*stop = emit(fill, priv, "..", 2, parent, DT_DIR, after);
	}
	return 0;
}

/* Live entries of [START, END) at offsets >= FROM; cookie = end offset. */
static errcode_t emit_area(struct dirctx *d, char *buf, unsigned start,
			   unsigned end, uint64_t base, uint64_t from,
			   nx_filldir_fn fill, void *priv, int *stop)
{
	struct ext2_dir_entry *de;
	unsigned off, rec_len;
	errcode_t err;

	for (off = start; off < end; off += rec_len) {
		err = dent_get(d->fs, buf, off, end, &de, &rec_len);
		if (err)
			return err;
		if (!de->inode || base + off < from)
			continue;
		if (emit(fill, priv, de->name, ext2fs_dirent_name_len(de),
			 de->inode, entry_dtype(d, de->inode,
						ext2fs_dirent_file_type(de)),
			 base + off + rec_len)) {
			*stop = 1;
			return 0;
		}
	}
	return 0;
}

static errcode_t readdir_inline(struct dirctx *d, uint64_t pos,
				nx_filldir_fn fill, void *priv)
{
	size_t size;
	char *buf;
	int area, stop;
	errcode_t err;

	err = emit_dots(d, pos, EXT4_INLINE_DATA_DOTDOT_SIZE, fill, priv,
			&stop);
	if (err || stop)
		return err;
	err = inline_get(d, &buf, &size);
	if (err)
		return err;
	for (area = 0; area < 2 && !err && !stop; area++)
		err = emit_area(d, buf, inline_area_start(area),
				inline_area_end(area, size), 0, pos, fill, priv,
				&stop);
	free(buf);
	return err;
}

/* Linear directories: the cookie is the byte offset of the next entry. */
static errcode_t readdir_linear(struct dirctx *d, uint64_t pos,
				nx_filldir_fn fill, void *priv)
{
	blk64_t lblk, pblk;
	char *buf;
	int stop = 0;
	errcode_t err = 0;

	buf = malloc(d->bs);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	for (lblk = pos / d->bs; lblk < d->nblocks && !stop; lblk++) {
		err = dir_read_block(d, lblk, buf, &pblk);
		if (err)
			break;
		if (!pblk)
			continue;
		err = emit_area(d, buf, 0, d->bs, lblk * d->bs, pos, fill,
				priv, &stop);
		if (err)
			break;
	}
	free(buf);
	return err;
}

/*
 * htree directories list in hash order, like ext4.  An entry's position
 * is (major hash >> 1) << 32 | minor hash, which orders entries the way
 * the index does; cookies are position + 2 so that 0 and 1 stay free
 * for '.' and '..'.  Every readdir call probes the index for its start
 * position and walks the leaves from there; entries of a leaf are
 * sorted by position first.
 */
struct hent {
	uint64_t hpos;
	ext2_ino_t ino;
	unsigned char ft;
	unsigned char len;
	uint32_t name_off;
};

struct hbatch {
	struct hent *v;
	size_t n, cap;
	char *names;
	size_t nlen, ncap;
};

static int hent_cmp(const void *a, const void *b, void *names)
{
	const struct hent *x = a, *y = b;
	int c;

	if (x->hpos != y->hpos)
		return x->hpos < y->hpos ? -1 : 1;
	c = memcmp((char *)names + x->name_off, (char *)names + y->name_off,
		   x->len < y->len ? x->len : y->len);
	return c ? c : (int)x->len - (int)y->len;
}

static errcode_t hbatch_push(struct hbatch *b, uint64_t hpos,
			     struct ext2_dir_entry *de)
{
	unsigned len = ext2fs_dirent_name_len(de);

	/*
	 * Allocate even for an empty (corrupt) name: names is never NULL.
	 * One doubling is room enough: a name is shorter than the first 8 KiB.
	 */
	if (nx_grow((void **)&b->v, &b->cap, b->n, sizeof(*b->v), 256) ||
	    nx_grow((void **)&b->names, &b->ncap, b->nlen + len, 1, 8192))
		return EXT2_ET_NO_MEMORY;
	memcpy(b->names + b->nlen, de->name, len);
	b->v[b->n].hpos = hpos;
	b->v[b->n].ino = de->inode;
	b->v[b->n].ft = ext2fs_dirent_file_type(de);
	b->v[b->n].len = len;
	b->v[b->n].name_off = b->nlen;
	b->n++;
	b->nlen += len;
	return 0;
}

/* Collect the entries of leaf P->leaf positioned at or after FROM. */
static errcode_t hbatch_gather(struct dirctx *d, struct dx_path *p,
			       char *buf, uint64_t from, struct hbatch *b)
{
	struct ext2_dir_entry *de;
	unsigned off, rec_len;
	uint32_t major, minor;
	uint64_t hpos;
	blk64_t pblk;
	errcode_t err;

	err = dir_read_block(d, p->leaf, buf, &pblk);
	if (err)
		return err;
	if (!pblk)
		return EXT2_ET_DIR_CORRUPTED;
	for (off = 0; off < d->bs; off += rec_len) {
		err = dent_get(d->fs, buf, off, d->bs, &de, &rec_len);
		if (err)
			return err;
		if (!de->inode)
			continue;
		err = dx_hash(d, p->hash_alg, de->name,
			      ext2fs_dirent_name_len(de), &major, &minor);
		if (err)
			return err;
		hpos = ((uint64_t)(major >> 1) << 32) | minor;
		if (hpos < from)
			continue;
		err = hbatch_push(b, hpos, de);
		if (err)
			return err;
	}
	return 0;
}

static int hbatch_emit(struct dirctx *d, struct hbatch *b, nx_filldir_fn fill,
		       void *priv)
{
	size_t i;

	if (b->n)	/* qsort_r(NULL, 0, ...) is undefined (UBSan) */
		qsort_r(b->v, b->n, sizeof(*b->v), hent_cmp, b->names);
	for (i = 0; i < b->n; i++) {
		const struct hent *e = &b->v[i];
		/*
		 * Entries sharing a position (a full 64-bit hash collision)
		 * cannot be resumed between: come back to the whole group.
		 */
		uint64_t next = e->hpos + 3;

		if (i + 1 < b->n && b->v[i + 1].hpos == e->hpos)
			next = e->hpos + 2;
		if (emit(fill, priv, b->names + e->name_off, e->len, e->ino,
			 entry_dtype(d, e->ino, e->ft), next))
			return 1;
	}
	return 0;
}

static errcode_t readdir_dx(struct dirctx *d, uint64_t pos,
			    nx_filldir_fn fill, void *priv)
{
	struct dx_path p = { 0 };
	struct hbatch b = { 0 };
	uint64_t from;
	uint32_t start;
	char *buf = NULL;
	blk64_t guard;
	int stop, end;
	errcode_t err;

	err = emit_dots(d, pos, 2, fill, priv, &stop);
	if (err || stop)
		return err;
	from = pos > 2 ? pos - 2 : 0;
	buf = malloc(d->bs);
	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = dx_read_root(d, &p);
	if (!err)
		err = dx_probe(d, &p, (uint32_t)(from >> 32) << 1);
	if (!err)
		err = hbatch_gather(d, &p, buf, from, &b);
	for (guard = 0; !err && guard <= d->nblocks; guard++) {
		/* Leaves continuing a hash collision belong to this batch. */
		while (!(end = dx_next_leaf(d, &p, &start, &err)) &&
		       (start & 1)) {
			err = hbatch_gather(d, &p, buf, from, &b);
			if (err)
				break;
		}
		if (err || hbatch_emit(d, &b, fill, priv) || end)
			break;
		b.n = 0;
		b.nlen = 0;
		err = hbatch_gather(d, &p, buf, from, &b);
	}
	free(b.v);
	free(b.names);
	free(buf);
	dx_path_free(&p);
	return err;
}

errcode_t nx_readdir(struct nx_volume *vol, ext2_ino_t dir, uint64_t pos,
		     nx_filldir_fn fill, void *priv)
{
	struct dirctx d;
	errcode_t err;

	err = dirctx_open(vol, dir, &d);
	if (err)
		return err;
	if (d.is_inline)
		return readdir_inline(&d, pos, fill, priv);
	if (d.is_dx) {
		err = readdir_dx(&d, pos, fill, priv);
		/*
		 * An index we cannot use: list the blocks instead (cookies
		 * are then byte offsets, which only this fallback produces).
		 */
		if (err != EXT2_ET_DIRHASH_UNSUPP)
			return err;
	}
	return readdir_linear(&d, pos, fill, priv);
}
