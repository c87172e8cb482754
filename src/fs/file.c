/*
 * file.c - the file data path: read, write, SEEK_DATA/SEEK_HOLE, inline
 * data, and the block-map cursor (struct nx_fmap) the data path shares.
 *
 * Reads and writes never go block by block.  The block map is asked for
 * runs (a whole extent, or a stretch of one indirect block), and each run
 * becomes one nx_volume_pread (which also serves snapshot views) or
 * nx_blkio_pwrite_data straight between the caller's buffer and the device;
 * only the partial first and last block of a write that lands on new or
 * unwritten blocks goes through a one-block bounce buffer to zero-fill
 * it.  Reads merge physically adjacent runs further.
 *
 * The inode travels through a call as the caller's copy: libext2fs's
 * extent code updates it in place (and writes its first 128 bytes when the
 * root of the tree changes), allocation updates i_block/i_blocks in it,
 * and the public functions write it back once at the end.
 *
 * Overwrites of written blocks are decided in prepare_overwrite() and
 * move_whole_blocks(), which ask the volume's overwrite policy
 * (overwrite.h: the hooks the snapshot layer registers in cow.c): it may
 * give the file new blocks for the range, and the write path then merges
 * partial blocks from the old location and leaves the old blocks
 * untouched.  Reads of a snapshot view ask the same policy where its
 * blocks are (batch_flush).
 */
#define NX_FILE_INTERNAL
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/file.h"
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/overwrite.h"
#include "nextfs/reserve.h"

/* Exported by libext2fs 1.47 but missing from its public header. */
errcode_t ext2fs_inline_data_ea_remove(ext2_filsys fs, ext2_ino_t ino);

/* First logical block past what an extent can address. */
#define NX_LBLK_END	((blk64_t)1 << 32)
/* Length of "a hole up to the end of everything". */
#define NX_HOLE_FOREVER	((blk64_t)1 << 62)

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static int is_inline(const struct ext2_inode_large *inode)
{
	return (inode->i_flags & EXT4_INLINE_DATA_FL) != 0;
}

static errcode_t check_regular(const struct ext2_inode_large *inode)
{
	if (LINUX_S_ISDIR(inode->i_mode))
		return EISDIR;
	if (!LINUX_S_ISREG(inode->i_mode))
		return EINVAL;
	return 0;
}

/* ---------------------------------------------------------------------
 * Size limits
 */

/*
 * The kernel's s_maxbytes: extents address 2^32 - 1 blocks; block maps
 * address 12 + p + p^2 + p^3 blocks (p pointers per block).  Without
 * huge_file, i_blocks counts 512-byte sectors in 32 bits and that, with
 * the mapping blocks it has to count too, may be the tighter limit.
 */
uint64_t nx_file_max_bytes(ext2_filsys fs,
			   const struct ext2_inode_large *inode)
{
	unsigned int bits = EXT2_BLOCK_SIZE_BITS(fs->super);
	int huge = ext2fs_has_feature_huge_file(fs->super);
	uint64_t sectors = huge ? (1ULL << 48) - 1 : (1ULL << 32) - 1;
	uint64_t limit = sectors >> (bits - 9);	/* in fs blocks */
	uint64_t p = fs->blocksize / 4, tree, meta, left, res;
	int extents = (inode->i_flags & EXT4_EXTENTS_FL) ||
		      (is_inline(inode) &&
		       ext2fs_has_feature_extents(fs->super));

	if (extents) {
		res = (1ULL << 32) - 1;
		if (!huge && res > limit)
			res = limit;
	} else {
		tree = EXT2_NDIR_BLOCKS + p + p * p + p * p * p;
		meta = 1 + (1 + p) + (1 + p + p * p);
		if (tree + meta <= limit) {
			res = tree;
		} else {
			/* Leave i_blocks room for the blocks that map LIMIT. */
			left = limit - EXT2_NDIR_BLOCKS - p;
			meta = 1;
			if (left < p * p) {
				meta += 1 + (left + p - 1) / p;
			} else {
				meta += 1 + p;
				left -= p * p;
				meta += 1 + (left + p - 1) / p +
					(left + p * p - 1) / (p * p);
			}
			res = limit - meta;
		}
	}
	if (res > ((uint64_t)INT64_MAX >> bits))
		return INT64_MAX;
	return res << bits;
}

/* ---------------------------------------------------------------------
 * The block-map cursor
 */

static void run_hole(blk64_t lblk, blk64_t next, struct nx_fmap_run *r)
{
	r->lblk = lblk;
	r->len = next > lblk ? next - lblk : NX_HOLE_FOREVER;
	r->pblk = 0;
	r->uninit = 0;
}

static void run_from_extent(const struct ext2fs_extent *ex, blk64_t lblk,
			    struct nx_fmap_run *r)
{
	r->lblk = lblk;
	r->len = ex->e_lblk + ex->e_len - lblk;
	r->pblk = ex->e_pblk + (lblk - ex->e_lblk);
	r->uninit = (ex->e_flags & EXT2_EXTENT_FLAGS_UNINIT) != 0;
}

errcode_t nx_fmap_open(struct nx_fmap *m, struct nx_volume *vol,
		       ext2_ino_t ino, struct ext2_inode_large *inode)
{
	memset(m, 0, sizeof(*m));
	m->vol = vol;
	m->ino = ino;
	m->inode = inode;
	if (is_inline(inode))
		return EXT2_ET_INLINE_DATA_CANT_ITERATE;
	if (!(inode->i_flags & EXT4_EXTENTS_FL))
		return 0;
	return ext2fs_extent_open2(vol->fs, ino, (struct ext2_inode *)inode,
				   &m->handle);
}

void nx_fmap_close(struct nx_fmap *m)
{
	int i;

	if (m->handle)
		ext2fs_extent_free(m->handle);
	m->handle = NULL;
	for (i = 0; i < 3; i++) {
		free(m->ind_buf[i]);
		m->ind_buf[i] = NULL;
		m->ind_blk[i] = 0;
	}
	m->have_last = 0;
}

/*
 * Another handle (the snapshot layer's remapping, ext2fs_punch) may have
 * reshaped the tree, even changed its depth, which an open handle caches:
 * open a fresh one.
 */
errcode_t nx_fmap_forget(struct nx_fmap *m)
{
	int i;

	m->have_last = 0;
	for (i = 0; i < 3; i++)
		m->ind_blk[i] = 0;
	if (!m->handle)
		return 0;
	ext2fs_extent_free(m->handle);
	m->handle = NULL;
	return ext2fs_extent_open2(m->vol->fs, m->ino,
				   (struct ext2_inode *)m->inode, &m->handle);
}

/* The handle points at m->last; LBLK is where it ends: step to the next. */
static errcode_t ext_lookup_next(struct nx_fmap *m, blk64_t lblk,
				 struct nx_fmap_run *r)
{
	struct ext2fs_extent ex;
	errcode_t err;

	err = ext2fs_extent_get(m->handle, EXT2_EXTENT_NEXT_LEAF, &ex);
	if (err == EXT2_ET_EXTENT_NO_NEXT ||
	    (!err && ex.e_lblk <= m->last.e_lblk)) {
		/* Nothing further; the handle has wandered up the tree. */
		m->have_last = 0;
		run_hole(lblk, 0, r);
		return 0;
	}
	if (err) {
		m->have_last = 0;
		return err;
	}
	m->last = ex;
	if (ex.e_lblk > lblk)
		run_hole(lblk, ex.e_lblk, r);
	else if (lblk < ex.e_lblk + ex.e_len)
		run_from_extent(&ex, lblk, r);
	else
		return EXT2_ET_EXTENT_HEADER_BAD;	/* out of order */
	return 0;
}

/*
 * Extents recently found by walking a file's tree, a few per inode: a
 * walk re-reads every node from the root and re-verifies its checksum,
 * which is a good part of a small random read.  An entry is only good
 * while nothing at all has been written since it was filled
 * (nx_blkio_write_gen): any change to any tree, inode or block empties
 * it.  Live volumes only (views never change, but resolve blocks their
 * own way).
 */
#define XCACHE_SLOTS	4
#define XCACHE_EXTENTS	8

struct nx_xcache {
	ext2_ino_t ino;
	uint64_t wgen;
	unsigned n, next;
	struct ext2fs_extent ex[XCACHE_EXTENTS];
};

/* INO's entry if still valid; with CREATE, a fresh one otherwise. */
static struct nx_xcache *xcache_entry(struct nx_fmap *m, int create)
{
	struct nx_volume *vol = m->vol;
	struct nx_xcache *c;
	uint64_t gen;

	if (!vol->io)
		return NULL;
	if (!vol->xcache) {
		if (!create)
			return NULL;
		vol->xcache = calloc(XCACHE_SLOTS, sizeof(*vol->xcache));
		if (!vol->xcache)
			return NULL;
	}
	c = &vol->xcache[m->ino % XCACHE_SLOTS];
	gen = nx_blkio_write_gen(vol->io);
	if (c->ino == m->ino && c->wgen == gen)
		return c;
	if (!create)
		return NULL;
	c->ino = m->ino;
	c->wgen = gen;
	c->n = c->next = 0;
	return c;
}

static int xcache_find(struct nx_fmap *m, blk64_t lblk,
		       struct ext2fs_extent *ex)
{
	struct nx_xcache *c = xcache_entry(m, 0);
	unsigned i;

	for (i = 0; c && i < c->n; i++)
		if (lblk >= c->ex[i].e_lblk &&
		    lblk < c->ex[i].e_lblk + c->ex[i].e_len) {
			*ex = c->ex[i];
			return 1;
		}
	return 0;
}

static void xcache_add(struct nx_fmap *m, const struct ext2fs_extent *ex)
{
	struct nx_xcache *c = xcache_entry(m, 1);

	if (!c)
		return;
	c->ex[c->next] = *ex;
	c->next = (c->next + 1) % XCACHE_EXTENTS;
	if (c->n < XCACHE_EXTENTS)
		c->n++;
}

static errcode_t ext_lookup(struct nx_fmap *m, blk64_t lblk,
			    struct nx_fmap_run *r)
{
	struct ext2fs_extent ex;
	errcode_t err;

	/* Sequential callers ask for the block right after the last run. */
	if (m->have_last) {
		blk64_t end = m->last.e_lblk + m->last.e_len;

		if (lblk >= m->last.e_lblk && lblk < end) {
			run_from_extent(&m->last, lblk, r);
			return 0;
		}
		if (lblk == end)
			return ext_lookup_next(m, lblk, r);
	}
	m->have_last = 0;
	if (xcache_find(m, lblk, &ex)) {
		/* (The handle stays where it was: no have_last.) */
		run_from_extent(&ex, lblk, r);
		return 0;
	}
	err = ext2fs_extent_goto(m->handle, lblk);
	if (err == EXT2_ET_EXTENT_NO_NEXT)	/* an empty tree */
		err = EXT2_ET_EXTENT_NOT_FOUND;
	if (err && err != EXT2_ET_EXTENT_NOT_FOUND)
		return err;
	if (!err) {
		err = ext2fs_extent_get(m->handle, EXT2_EXTENT_CURRENT, &ex);
		if (err)
			return err;
		m->last = ex;
		m->have_last = 1;
		xcache_add(m, &ex);
		run_from_extent(&ex, lblk, r);
		return 0;
	}
	/* A hole: the handle sits at the extent before it (or after). */
	err = ext2fs_extent_get(m->handle, EXT2_EXTENT_CURRENT, &ex);
	if (err == EXT2_ET_NO_CURRENT_NODE) {
		run_hole(lblk, 0, r);
		return 0;
	}
	if (err)
		return err;
	m->last = ex;
	m->have_last = 1;
	if (ex.e_lblk > lblk) {
		run_hole(lblk, ex.e_lblk, r);
		return 0;
	}
	return ext_lookup_next(m, lblk, r);
}

/* Indirect block BLK at tree level LEVEL, through the one-per-level cache. */
errcode_t nx_fmap_ind_block(struct nx_fmap *m, int level, blk64_t blk,
			    uint32_t **tab)
{
	ext2_filsys fs = m->vol->fs;
	errcode_t err;

	if (blk < fs->super->s_first_data_block ||
	    blk >= ext2fs_blocks_count(fs->super))
		return EXT2_ET_BAD_IND_BLOCK;
	if (!m->ind_buf[level]) {
		m->ind_buf[level] = malloc(fs->blocksize);
		if (!m->ind_buf[level])
			return EXT2_ET_NO_MEMORY;
	} else if (m->ind_blk[level] == blk) {
		*tab = m->ind_buf[level];
		return 0;
	}
	m->ind_blk[level] = 0;
	err = io_channel_read_blk64(fs->io, blk, 1, m->ind_buf[level]);
	if (err)
		return err;
	m->ind_blk[level] = blk;
	*tab = m->ind_buf[level];
	return 0;
}

/*
 * Where logical block LBLK sits in a block-mapped file: LEVELS indirect
 * blocks below the inode slot *SLOT, at index OFF of that subtree, which
 * spans *SPAN blocks.  Returns 0 levels for the direct blocks and -1 past
 * the triple-indirect tree.
 */
int nx_fmap_ind_path(ext2_filsys fs, blk64_t lblk, int *slot, blk64_t *off,
		     blk64_t *span)
{
	blk64_t p = fs->blocksize / 4, o;

	if (lblk < EXT2_NDIR_BLOCKS) {
		*slot = (int)lblk;
		*off = 0;
		*span = 1;
		return 0;
	}
	o = lblk - EXT2_NDIR_BLOCKS;
	if (o < p) {
		*slot = EXT2_IND_BLOCK;
		*off = o;
		*span = p;
		return 1;
	}
	o -= p;
	if (o < p * p) {
		*slot = EXT2_DIND_BLOCK;
		*off = o;
		*span = p * p;
		return 2;
	}
	o -= p * p;
	if (o < p * p * p) {
		*slot = EXT2_TIND_BLOCK;
		*off = o;
		*span = p * p * p;
		return 3;
	}
	return -1;
}

static errcode_t ind_lookup(struct nx_fmap *m, blk64_t lblk,
			    struct nx_fmap_run *r)
{
	ext2_filsys fs = m->vol->fs;
	blk64_t p = fs->blocksize / 4, off, span, first, i, n, cnt;
	uint32_t *tab = m->inode->i_block, ptr;
	int levels, slot, d;

	levels = nx_fmap_ind_path(fs, lblk, &slot, &off, &span);
	if (levels < 0) {
		run_hole(lblk, 0, r);
		return 0;
	}
	if (levels == 0) {
		i = lblk;
		n = EXT2_NDIR_BLOCKS;
	} else {
		ptr = ext2fs_le32_to_cpu(tab[slot]);
		for (d = 0; ; d++) {
			errcode_t err;

			if (!ptr) {
				/* The whole rest of this subtree is a hole. */
				run_hole(lblk, lblk + span - off, r);
				return 0;
			}
			err = nx_fmap_ind_block(m, d, ptr, &tab);
			if (err)
				return err;
			span /= p;
			i = off / span;
			if (d == levels - 1)
				break;
			off %= span;
			ptr = ext2fs_le32_to_cpu(tab[i]);
		}
		n = p;
	}
	first = ext2fs_le32_to_cpu(tab[i]);
	for (cnt = 1; i + cnt < n; cnt++) {
		blk64_t b = ext2fs_le32_to_cpu(tab[i + cnt]);

		if (first ? b != first + cnt : b != 0)
			break;
	}
	if (first && first + cnt > ext2fs_blocks_count(fs->super))
		return EXT2_ET_BAD_BLOCK_NUM;
	r->lblk = lblk;
	r->len = cnt;
	r->pblk = first;
	r->uninit = 0;
	return 0;
}

errcode_t nx_fmap_lookup(struct nx_fmap *m, blk64_t lblk,
			 struct nx_fmap_run *run)
{
	if (m->handle)
		return ext_lookup(m, lblk, run);
	return ind_lookup(m, lblk, run);
}

/* ---------------------------------------------------------------------
 * Inline data
 */

/* Inline data can never exceed i_block plus the in-inode xattr space. */
static size_t inline_cap(ext2_filsys fs)
{
	return EXT4_MIN_INLINE_DATA_SIZE + EXT2_INODE_SIZE(fs->super);
}

/* Copy the first LEN bytes of INO's inline data to DST (zero-filled). */
static errcode_t inline_get(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, char *dst,
			    size_t len)
{
	size_t cap = inline_cap(vol->fs), have = 0;
	char *tmp = calloc(1, cap);
	errcode_t err;

	if (!tmp)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_inline_data_size(vol->fs, ino, &have);
	if (!err && have > cap)
		err = EXT2_ET_INLINE_DATA_NO_SPACE;	/* corrupt */
	if (!err)
		err = ext2fs_inline_data_get(vol->fs, ino,
					     (struct ext2_inode *)inode, tmp,
					     &have);
	if (!err) {
		memset(dst, 0, len);
		memcpy(dst, tmp, min_u64(len, have));
	}
	free(tmp);
	return err;
}

/*
 * Store BUF (LEN bytes) as INO's inline data, exactly: i_block is filled
 * (zero-padded) and the system.data xattr holds the rest, or nothing.
 * INODE is re-read afterwards since the xattr code rewrites the inode.
 */
static errcode_t inline_put(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, const char *buf,
			    size_t len)
{
	char pad[EXT4_MIN_INLINE_DATA_SIZE];
	errcode_t err;

	if (len > EXT4_MIN_INLINE_DATA_SIZE) {
		err = ext2fs_inline_data_set(vol->fs, ino,
					     (struct ext2_inode *)inode,
					     (void *)buf, len);
	} else {
		/* ext2fs_inline_data_set would leave a longer xattr behind. */
		memset(pad, 0, sizeof(pad));
		memcpy(pad, buf, len);
		memcpy(inode->i_block, pad, sizeof(pad));
		err = nx_inode_write(vol, ino, inode);
		if (!err)
			err = ext2fs_inline_data_init(vol->fs, ino);
	}
	if (err)
		return err;
	return nx_inode_read(vol, ino, inode);
}

static int inline_no_space(errcode_t err)
{
	return err == EXT2_ET_INLINE_DATA_NO_SPACE ||
	       err == EXT2_ET_EA_NO_SPACE;
}

/*
 * Like ext4, an empty regular file on an inline_data volume starts out
 * inline if its first data fits in the inode.
 */
static int may_become_inline(ext2_filsys fs,
			     const struct ext2_inode_large *inode,
			     uint64_t end)
{
	const struct ext3_extent_header *eh = (const void *)inode->i_block;
	size_t room;
	int i;

	if (!ext2fs_has_feature_inline_data(fs->super) ||
	    !LINUX_S_ISREG(inode->i_mode) || EXT2_I_SIZE(inode) != 0 ||
	    EXT2_INODE_SIZE(fs->super) <= EXT2_GOOD_OLD_INODE_SIZE +
					  inode->i_extra_isize)
		return 0;
	room = EXT4_MIN_INLINE_DATA_SIZE + EXT2_INODE_SIZE(fs->super) -
	       EXT2_GOOD_OLD_INODE_SIZE - inode->i_extra_isize;
	if (end > room)
		return 0;
	if (inode->i_flags & EXT4_EXTENTS_FL)
		return ext2fs_le16_to_cpu(eh->eh_entries) == 0 &&
		       eh->eh_depth == 0;
	for (i = 0; i < EXT2_N_BLOCKS; i++)
		if (inode->i_block[i])
			return 0;
	return 1;
}

/* Turn the empty, block-less file INO into an empty inline-data file. */
static errcode_t inline_create(struct nx_volume *vol, ext2_ino_t ino,
			       struct ext2_inode_large *inode)
{
	errcode_t err;

	err = ext2fs_inline_data_init(vol->fs, ino);
	if (err)
		return err;
	err = nx_inode_read(vol, ino, inode);
	if (err)
		return err;
	inode->i_flags &= ~EXT4_EXTENTS_FL;
	inode->i_flags |= EXT4_INLINE_DATA_FL;
	memset(inode->i_block, 0, sizeof(inode->i_block));
	return nx_inode_write(vol, ino, inode);
}

static errcode_t inline_read(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, char *buf,
			     size_t size, uint64_t offset)
{
	size_t cap = inline_cap(vol->fs), n = 0;
	char *tmp = malloc(cap);
	errcode_t err;

	if (!tmp)
		return EXT2_ET_NO_MEMORY;
	/* (A corrupt i_size larger than the inode holds reads zeros.) */
	err = inline_get(vol, ino, inode, tmp, cap);
	if (!err) {
		if (offset < cap)
			n = min_u64(size, cap - offset);
		memcpy(buf, tmp + offset, n);
		memset(buf + n, 0, size - n);
	}
	free(tmp);
	return err;
}

/*
 * Write into an inline file, or make an empty file inline.  Returns
 * EXT2_ET_INLINE_DATA_NO_SPACE when the result does not fit: the caller
 * then expands the file into blocks.
 */
static errcode_t inline_write(struct nx_volume *vol, ext2_ino_t ino,
			      struct ext2_inode_large *inode,
			      const char *buf, size_t size, uint64_t offset)
{
	uint64_t isize = EXT2_I_SIZE(inode), end = offset + size;
	uint64_t nsize = max_u64(isize, end);
	char *tmp;
	errcode_t err;

	if (nsize > inline_cap(vol->fs))
		return EXT2_ET_INLINE_DATA_NO_SPACE;
	if (!is_inline(inode)) {
		err = inline_create(vol, ino, inode);
		if (err)
			return inline_no_space(err) ?
			       EXT2_ET_INLINE_DATA_NO_SPACE : err;
	}
	tmp = calloc(1, nsize);
	if (!tmp)
		return EXT2_ET_NO_MEMORY;
	err = inline_get(vol, ino, inode, tmp, isize);
	if (!err) {
		memcpy(tmp + offset, buf, size);
		err = inline_put(vol, ino, inode, tmp, nsize);
	}
	free(tmp);
	if (inline_no_space(err))
		return EXT2_ET_INLINE_DATA_NO_SPACE;
	return err;
}

/* An extent tree root mapping logical block 0 to PBLK (or nothing). */
static void init_extent_root(struct ext2_inode_large *inode, blk64_t pblk)
{
	struct ext3_extent_header *eh = (void *)inode->i_block;
	struct ext3_extent *ex = (void *)(eh + 1);

	eh->eh_magic = ext2fs_cpu_to_le16(EXT3_EXT_MAGIC);
	eh->eh_max = ext2fs_cpu_to_le16((sizeof(inode->i_block) -
					 sizeof(*eh)) / sizeof(*ex));
	eh->eh_depth = 0;
	eh->eh_generation = 0;
	eh->eh_entries = ext2fs_cpu_to_le16(pblk ? 1 : 0);
	if (pblk) {
		ex->ee_block = 0;
		ex->ee_len = ext2fs_cpu_to_le16(1);
		ex->ee_start = ext2fs_cpu_to_le32((uint32_t)pblk);
		ex->ee_start_hi = ext2fs_cpu_to_le16((uint16_t)(pblk >> 32));
	}
	inode->i_flags |= EXT4_EXTENTS_FL;
}

/*
 * The data goes to a freshly written block first, so that running out of
 * space leaves the inline file as it was.
 */
errcode_t nx_file_inline_expand(struct nx_volume *vol, ext2_ino_t ino,
				struct ext2_inode_large *inode)
{
	ext2_filsys fs = vol->fs;
	uint64_t size = EXT2_I_SIZE(inode);
	blk64_t pblk = 0, got;
	char *blk = NULL;
	errcode_t err;

	if (!is_inline(inode))
		return 0;
	if (size > 0) {
		if (size > fs->blocksize)
			return EXT2_ET_INLINE_DATA_NO_SPACE;	/* corrupt */
		blk = calloc(1, fs->blocksize);
		if (!blk)
			return EXT2_ET_NO_MEMORY;
		err = inline_get(vol, ino, inode, blk, size);
		if (err)
			goto out;
		err = nx_fmap_new_blocks(vol,
				ext2fs_find_inode_goal(fs, ino,
					(struct ext2_inode *)inode, 0),
				1, 0, &pblk, &got);
		if (err)
			goto out;
		err = nx_blkio_pwrite_data(vol->io, blk, fs->blocksize,
				      pblk * fs->blocksize);
		if (err)
			goto out;
	}
	err = ext2fs_inline_data_ea_remove(fs, ino);
	if (err)
		goto out;
	err = nx_inode_read(vol, ino, inode);
	if (err)
		goto out;
	inode->i_flags &= ~EXT4_INLINE_DATA_FL;
	memset(inode->i_block, 0, sizeof(inode->i_block));
	if (ext2fs_has_feature_extents(fs->super))
		init_extent_root(inode, pblk);
	else
		inode->i_block[0] = ext2fs_cpu_to_le32((uint32_t)pblk);
	if (pblk)
		ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)inode, 1);
	err = nx_inode_write(vol, ino, inode);
	if (!err)
		pblk = 0;	/* the file owns it now */
out:
	if (pblk)
		ext2fs_block_alloc_stats2(fs, pblk, -1);
	free(blk);
	return err;
}

errcode_t nx_file_inline_resize(struct nx_volume *vol, ext2_ino_t ino,
				struct ext2_inode_large *inode, uint64_t size)
{
	uint64_t isize = EXT2_I_SIZE(inode);
	char *tmp;
	errcode_t err;

	if (size <= inline_cap(vol->fs)) {
		tmp = calloc(1, size ? size : 1);
		if (!tmp)
			return EXT2_ET_NO_MEMORY;
		err = inline_get(vol, ino, inode, tmp, min_u64(size, isize));
		if (!err)
			err = inline_put(vol, ino, inode, tmp, size);
		free(tmp);
		if (!inline_no_space(err))
			return err;
	}
	/* Growing past what the inode holds: blocks, with a sparse tail. */
	return nx_file_inline_expand(vol, ino, inode);
}

/* ---------------------------------------------------------------------
 * Read
 */

/* A device read being gathered from physically adjacent runs. */
struct read_batch {
	uint64_t dev;
	char *dst;
	uint64_t len;
	struct nx_file_rd *rd;	/* plan device reads here, or NULL: read */
};

errcode_t nx_file_rd_add(struct nx_file_rd *rd, uint64_t dev, char *dst,
			 uint64_t len)
{
	if (nx_grow((void **)&rd->seg, &rd->cap, rd->n, sizeof(*rd->seg), 4))
		return EXT2_ET_NO_MEMORY;
	rd->seg[rd->n].dev = dev;
	rd->seg[rd->n].dst = dst;
	rd->seg[rd->n].len = len;
	rd->n++;
	return 0;
}

static errcode_t batch_flush(struct nx_volume *vol, struct read_batch *b)
{
	errcode_t err = 0;

	if (!b->len)
		return 0;
	/* Blocks a transaction holds can only be read under the lock. */
	if (b->rd && !vol->io)
		err = vol->overwrite->view_plan(vol, b->dst, b->len, b->dev,
						b->rd);
	else if (b->rd && !nx_blkio_range_held(vol->io, b->dev, b->len))
		err = nx_file_rd_add(b->rd, b->dev, b->dst, b->len);
	else
		err = nx_volume_pread(vol, b->dst, b->len, b->dev);
	b->len = 0;
	return err;
}

static errcode_t batch_add(struct nx_volume *vol, struct read_batch *b,
			   uint64_t dev, char *dst, uint64_t len)
{
	errcode_t err;

	if (b->len && b->dev + b->len == dev && b->dst + b->len == dst) {
		b->len += len;
		return 0;
	}
	err = batch_flush(vol, b);
	b->dev = dev;
	b->dst = dst;
	b->len = len;
	return err;
}

static errcode_t read_blocks(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, char *buf,
			     uint64_t size, uint64_t offset,
			     struct nx_file_rd *rd)
{
	uint64_t bs = vol->fs->blocksize, pos = offset, end = offset + size;
	struct read_batch batch = { .rd = rd };
	struct nx_fmap map;
	struct nx_fmap_run run;
	errcode_t err;

	err = nx_fmap_open(&map, vol, ino, inode);
	while (!err && pos < end) {
		uint64_t lblk = pos / bs, stop;
		char *dst = buf + (pos - offset);

		err = nx_fmap_lookup(&map, lblk, &run);
		if (err)
			break;
		/* (Clamp first: a hole may run on "forever".) */
		stop = min_u64(end, (lblk + min_u64(run.len, end / bs + 1 -
						    lblk)) * bs);
		if (!run.pblk || run.uninit)
			memset(dst, 0, stop - pos);
		else
			err = batch_add(vol, &batch,
					run.pblk * bs + (pos - lblk * bs),
					dst, stop - pos);
		pos = stop;
	}
	if (!err)
		err = batch_flush(vol, &batch);
	nx_fmap_close(&map);
	return err;
}

static errcode_t file_read(struct nx_volume *vol, ext2_ino_t ino, void *buf,
			   size_t size, uint64_t offset, size_t *got,
			   struct nx_file_rd *rd)
{
	struct ext2_inode_large inode;
	uint64_t isize;
	errcode_t err;

	*got = 0;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	err = check_regular(&inode);
	if (err)
		return err;
	isize = EXT2_I_SIZE(&inode);
	if (offset >= isize || size == 0)
		return 0;
	if (size > isize - offset)
		size = isize - offset;
	if (is_inline(&inode))
		err = inline_read(vol, ino, &inode, buf, size, offset);
	else
		err = read_blocks(vol, ino, &inode, buf, size, offset, rd);
	if (!err)
		*got = size;
	return err;
}

errcode_t nx_file_read(struct nx_volume *vol, ext2_ino_t ino, void *buf,
		       size_t size, uint64_t offset, size_t *got)
{
	return file_read(vol, ino, buf, size, offset, got, NULL);
}

errcode_t nx_file_read_begin(struct nx_volume *vol, ext2_ino_t ino,
			     void *buf, size_t size, uint64_t offset,
			     struct nx_file_rd *rd, size_t *got)
{
	errcode_t err;

	memset(rd, 0, sizeof(*rd));
	/* A snapshot view reads the live device. */
	rd->io = vol->parent ? vol->parent->io : vol->io;
	err = file_read(vol, ino, buf, size, offset, got, rd);
	if (err) {
		free(rd->seg);
		rd->seg = NULL;
		rd->n = 0;
	}
	return err;
}

void nx_file_read_drop(struct nx_file_rd *rd)
{
	nx_blkio_share_end(rd->io);
	free(rd->seg);
	rd->seg = NULL;
	rd->n = rd->cap = 0;
}

errcode_t nx_file_read_end(struct nx_file_rd *rd)
{
	errcode_t err = 0;
	size_t i;

	for (i = 0; i < rd->n && !err; i++)
		err = nx_blkio_pread_shared(rd->io, rd->seg[i].dst,
					    rd->seg[i].len, rd->seg[i].dev);
	nx_file_read_drop(rd);
	return err;
}

/* ---------------------------------------------------------------------
 * Write
 */

/*
 * The one place where an overwrite of written blocks is decided (see the
 * top of this file).  [LBLK, LBLK + *COUNT) is mapped at *PBLK.  On return
 * the data for the first *COUNT blocks (possibly fewer than asked) goes to
 * *PBLK onwards.  If *PBLK changed, the old blocks now belong to someone
 * else (the active snapshot) and must not be written; a partly written
 * block takes the rest of its content from the old block.  The caller
 * only passes several blocks when each of them is overwritten whole.
 */
static errcode_t prepare_overwrite(struct nx_volume *vol, ext2_ino_t ino,
				   struct ext2_inode_large *inode,
				   blk64_t lblk, blk64_t *count,
				   blk64_t *pblk, int *remapped)
{
	blk64_t old = *pblk, first = 0, nb, i;
	errcode_t err;

	*remapped = 0;
	if (!vol->overwrite)
		return 0;
	for (i = 0; i < *count; i++) {
		err = vol->overwrite->prepare(vol, ino, inode, lblk + i,
					      old + i, &nb);
		if (err) {
			if (i == 0)
				return err;
			break;
		}
		if (nb != old + i)
			*remapped = 1;
		if (i == 0)
			first = nb;
		else if (nb != first + i)
			break;	/* a new run; the caller comes back for it */
	}
	*count = i;
	*pblk = first;
	return 0;
}

/* How the parts of edge blocks that a write leaves alone are filled. */
enum edge_fill {
	FILL_NONE,	/* written in place: the rest stays as it is */
	FILL_ZERO,	/* new or unwritten block: the rest reads as zeros */
	FILL_OLD,	/* moved block: the rest comes from the old block */
};

struct wctx {
	struct nx_volume *vol;
	ext2_ino_t ino;
	struct ext2_inode_large *inode;
	struct nx_fmap map;
	const char *buf;		/* data for bytes [off, end) */
	uint64_t off, end;
	char *bounce;			/* one block, allocated on demand */
	uint64_t done;			/* bytes [off, off + done) are written */
	struct nx_fmap_run *fresh;	/* runs this write allocated */
	size_t nfresh, capfresh;
};

/* Write one whole block at PBLK: SRC at byte FROM of it, the rest filled. */
static errcode_t write_edge_block(struct wctx *w, blk64_t pblk,
				  enum edge_fill fill, blk64_t oldpblk,
				  const char *src, uint64_t from, uint64_t len)
{
	uint64_t bs = w->vol->fs->blocksize;
	errcode_t err;

	if (!w->bounce) {
		w->bounce = malloc(bs);
		if (!w->bounce)
			return EXT2_ET_NO_MEMORY;
	}
	if (fill == FILL_OLD) {
		err = nx_volume_pread(w->vol, w->bounce, bs, oldpblk * bs);
		if (err)
			return err;
	} else {
		memset(w->bounce, 0, bs);
	}
	memcpy(w->bounce + from, src, len);
	return nx_blkio_pwrite_data(w->vol->io, w->bounce, bs, pblk * bs);
}

/*
 * Write the part of [w->off, w->end) that falls in the N blocks at LBLK,
 * mapped at PBLK: the whole blocks straight from the caller's buffer in
 * one request, partial edge blocks completed according to FILL.
 */
static errcode_t write_run(struct wctx *w, blk64_t lblk, blk64_t n,
			   blk64_t pblk, enum edge_fill fill, blk64_t oldpblk)
{
	uint64_t bs = w->vol->fs->blocksize;
	uint64_t rs = lblk * bs, re = (lblk + n) * bs;
	uint64_t from = max_u64(w->off, rs), to = min_u64(w->end, re);
	uint64_t mid_end;
	errcode_t err;

	if (fill == FILL_NONE || (from == rs && to == re))
		return nx_blkio_pwrite_data(w->vol->io, w->buf + (from - w->off),
				       to - from, pblk * bs + (from - rs));
	if (from > rs || to < rs + bs) {
		/* The first block is only partly written. */
		uint64_t piece = min_u64(to, rs + bs) - from;

		err = write_edge_block(w, pblk, fill, oldpblk,
				       w->buf + (from - w->off), from - rs,
				       piece);
		if (err)
			return err;
		from += piece;
		if (from == to)
			return 0;
	}
	mid_end = to < re ? re - bs : to;
	if (mid_end > from) {
		err = nx_blkio_pwrite_data(w->vol->io, w->buf + (from - w->off),
				      mid_end - from,
				      pblk * bs + (from - rs));
		if (err)
			return err;
	}
	if (to < re)
		return write_edge_block(w, pblk + n - 1, fill, oldpblk + n - 1,
					w->buf + (mid_end - w->off), 0,
					to - mid_end);
	return 0;
}

/* Remember that this write allocated [LBLK, LBLK + N) (unmap_unwritten). */
static errcode_t note_fresh(struct wctx *w, blk64_t lblk, blk64_t n)
{
	if (nx_grow((void **)&w->fresh, &w->capfresh, w->nfresh,
		    sizeof(*w->fresh), 8))
		return EXT2_ET_NO_MEMORY;
	w->fresh[w->nfresh].lblk = lblk;
	w->fresh[w->nfresh].len = n;
	w->nfresh++;
	return 0;
}

static int is_nospace(errcode_t err)
{
	return err == ENOSPC || err == EXT2_ET_BLOCK_ALLOC_FAIL;
}

/* The policy's preserve_span (overwrite.h); without one nothing is kept. */
static blk64_t preserve_span(struct wctx *w, blk64_t pblk, blk64_t count,
			     int *needs)
{
	const struct nx_overwrite_ops *ops = w->vol->overwrite;

	if (!ops) {
		*needs = 0;
		return count;
	}
	return ops->preserve_span(w->vol, w->inode, pblk, count, needs);
}

/*
 * Blocks LBLK.. of a run that this write replaces entirely: if the active
 * snapshot needs them, they move into it as they are (no copy) and the
 * file gets new blocks for the new data.  Done per run, not per block.
 * Extent-mapped files have the run remapped in place (nx_fmap_replace:
 * one extent change, the old blocks never pass through the allocator);
 * the data is then written to *NEWP.  Otherwise the run is punched out
 * (freeing hands it to the snapshot) and *CNT is 0: the caller fills
 * the hole.  If the snapshot does not need the first block, *CNT is the
 * length of the leading span it does not need and *NEWP == PBLK.
 */
static errcode_t move_whole_blocks(struct wctx *w, blk64_t lblk,
				   blk64_t *cnt, blk64_t pblk, blk64_t *newp)
{
	int needs;
	blk64_t k = preserve_span(w, pblk, *cnt, &needs);
	struct nx_fmap_run run;
	errcode_t err;

	*newp = pblk;
	if (needs != NX_PRESERVE_MOVE) {	/* +C blocks are copied in place */
		*cnt = k;
		return 0;
	}
	/* Never leave a hole we cannot fill: check the space first. */
	err = nx_reserve_check_cow(w->vol, k + 8);
	if (err)
		return err;
	if (w->map.handle) {
		err = nx_fmap_replace(&w->map, lblk, k, &run);
		if (run.len) {
			/* Mapped: written below, or unmapped if that fails. */
			errcode_t e2 = note_fresh(w, lblk, run.len);

			if (!err)
				err = w->vol->overwrite->take_moved(w->vol,
						pblk, run.len);
			if (!err)
				err = e2;
			*cnt = run.len;
			*newp = run.pblk;
			return err;
		}
		if (err && !is_nospace(err))
			return err;
		/* No room to split the extent: the punch needs none. */
	}
	err = nx_file_punch_blocks(w->vol, w->ino, w->inode, lblk,
				   lblk + k - 1);
	if (!err)
		err = nx_fmap_forget(&w->map);
	*cnt = 0;
	return err;
}

/*
 * A +C file is overwritten in place and the active snapshot gets a copy
 * of each block it still needs: space the writer pays for like any other
 * write, checked before anything is written (reserve.h).  *CNT shrinks
 * to what the writer may still copy (at least one block, or ENOSPC).
 */
static errcode_t charge_copies(struct wctx *w, blk64_t pblk, blk64_t *cnt)
{
	blk64_t i = 0, k, n = 0;
	int needs;

	while (i < *cnt) {
		k = preserve_span(w, pblk + i, *cnt - i, &needs);
		if (needs == NX_PRESERVE_COPY)
			n += k;
		i += k;
	}
	if (!n || !nx_reserve_room(w->vol, n))
		return 0;
	if (*cnt == 1)
		return ENOSPC;
	*cnt = 1;	/* up to the limit, block by block */
	return charge_copies(w, pblk, cnt);
}

/*
 * Overwrite written blocks [LBLK, LBLK + *N) mapped at PBLK.  A partly
 * written edge block is handled on its own so that prepare_overwrite()
 * only ever sees several blocks when all of them are replaced whole.
 */
static errcode_t overwrite_run(struct wctx *w, blk64_t lblk, blk64_t *n,
			       blk64_t pblk)
{
	uint64_t bs = w->vol->fs->blocksize;
	blk64_t cnt = *n, newp = pblk;
	int remapped;
	errcode_t err;

	if (lblk * bs < w->off)
		cnt = 1;			/* partial first block */
	else if (cnt > 1 && (lblk + cnt) * bs > w->end)
		cnt--;				/* partial last block: later */
	if ((lblk + cnt) * bs <= w->end && lblk * bs >= w->off) {
		err = move_whole_blocks(w, lblk, &cnt, pblk, &newp);
		if (err || !cnt) {
			*n = 0;			/* now a hole: filled next */
			return err;
		}
		if (newp != pblk) {
			*n = cnt;
			return write_run(w, lblk, cnt, newp, FILL_NONE, 0);
		}
	}
	err = prepare_overwrite(w->vol, w->ino, w->inode, lblk, &cnt, &newp,
				&remapped);
	if (err)
		return err;
	if (newp == pblk) {
		err = charge_copies(w, pblk, &cnt);
		if (err)
			return err;
	}
	*n = cnt;
	if (remapped) {
		/* The block map changed under our cursor. */
		err = nx_fmap_forget(&w->map);
		if (err)
			return err;
	}
	if (newp == pblk)
		return write_run(w, lblk, cnt, pblk, FILL_NONE, 0);
	return write_run(w, lblk, cnt, newp, FILL_OLD, pblk);
}

static errcode_t write_blocks(struct wctx *w)
{
	uint64_t bs = w->vol->fs->blocksize;
	blk64_t lblk = w->off / bs, last = (w->end - 1) / bs, n;
	struct nx_fmap_run run;
	errcode_t err;

	while (lblk <= last) {
		err = nx_fmap_lookup(&w->map, lblk, &run);
		if (err)
			return err;
		n = min_u64(run.len, last - lblk + 1);
		if (!run.pblk) {
			err = nx_fmap_alloc(&w->map, lblk, n, 0, &run);
			if (err)
				return err;
			n = run.len;
			err = note_fresh(w, lblk, n);
			if (err)
				return err;
			err = write_run(w, lblk, n, run.pblk, FILL_ZERO, 0);
		} else if (run.uninit) {
			err = write_run(w, lblk, n, run.pblk, FILL_ZERO, 0);
			if (!err)
				err = nx_fmap_convert(&w->map, lblk, n, 0);
		} else {
			err = overwrite_run(w, lblk, &n, run.pblk);
		}
		if (err)
			return err;
		lblk += n;
		w->done = min_u64(w->end, lblk * bs) - w->off;
	}
	return 0;
}

/*
 * A write that failed part way (an I/O error on the device) may have
 * mapped blocks it never filled: inside the file they would show stale
 * bytes, past the end e2fsck would object.  Unmap what this write
 * allocated from the first block it did not complete on; blocks it was
 * overwriting keep their mapping and content.
 */
static void unmap_unwritten(struct wctx *w)
{
	uint64_t bs = w->vol->fs->blocksize;
	blk64_t first = (w->off + w->done + bs - 1) / bs, from, to;
	size_t i;

	for (i = 0; i < w->nfresh; i++) {
		from = w->fresh[i].lblk > first ? w->fresh[i].lblk : first;
		to = w->fresh[i].lblk + w->fresh[i].len - 1;
		if (from > to)
			continue;
		if (nx_file_punch_blocks(w->vol, w->ino, w->inode, from, to))
			return;
	}
}

errcode_t nx_file_write(struct nx_volume *vol, ext2_ino_t ino,
			const void *buf, size_t size, uint64_t offset,
			size_t *written)
{
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode;
	struct wctx w;
	uint64_t max;
	errcode_t err, err2;

	*written = 0;
	err = nx_inode_read_rw(vol, ino, &inode);
	if (err)
		return err;
	err = check_regular(&inode);
	if (err)
		return err;
	if (inode.i_flags & (EXT2_IMMUTABLE_FL | EXT4_SNAPFILE_FL))
		return EPERM;
	if (size == 0)
		return 0;
	max = nx_file_max_bytes(fs, &inode);
	if (offset >= max)
		return EFBIG;
	if (size > max - offset)
		size = max - offset;

	memset(&w, 0, sizeof(w));
	w.vol = vol;
	w.ino = ino;
	w.inode = &inode;
	w.buf = buf;
	w.off = offset;
	w.end = offset + size;

	/*
	 * Metadata blocks that one write rewrites many times (an extent leaf
	 * or indirect block remapped block by block under a snapshot, the
	 * inode table block) go to the device once, at the end.
	 */
	nx_blkio_begin_batch(vol->io);
	if (is_inline(&inode) || may_become_inline(fs, &inode, w.end)) {
		err = inline_write(vol, ino, &inode, buf, size, offset);
		if (!err) {
			w.done = size;
			goto update;
		}
		if (err != EXT2_ET_INLINE_DATA_NO_SPACE)
			goto out;
		err = nx_file_inline_expand(vol, ino, &inode);
		if (err)
			goto out;
	}
	err = nx_fmap_open(&w.map, vol, ino, &inode);
	if (!err) {
		err = write_blocks(&w);
		if (err && !is_nospace(err))
			unmap_unwritten(&w);
	}
	nx_fmap_close(&w.map);
	free(w.bounce);
	free(w.fresh);
update:
	if (w.done > 0) {
		if (offset + w.done > EXT2_I_SIZE(&inode))
			ext2fs_inode_size_set(fs, (struct ext2_inode *)&inode,
					      offset + w.done);
		nx_inode_touch(&inode, NX_TOUCH_MTIME | NX_TOUCH_CTIME);
	}
	/* Allocation may have changed the inode even if nothing was written. */
	err2 = nx_inode_write(vol, ino, &inode);
	if (w.done > 0 || !err)
		err = err2;	/* a short write is a success */
out:
	err2 = nx_blkio_end_batch(vol->io);
	if (!err)
		err = err2;
	if (!err)
		*written = w.done;
	return is_nospace(err) ? ENOSPC : err;
}

/* Used by truncate and hole punching for the partial edge blocks. */
errcode_t nx_file_zero_in_block(struct nx_fmap *m, uint64_t from, uint64_t to)
{
	uint64_t bs = m->vol->fs->blocksize;
	blk64_t lblk = from / bs, n = 1;
	struct nx_fmap_run run;
	struct wctx w;
	char *zero;
	errcode_t err;

	if (from >= to)
		return 0;
	err = nx_fmap_lookup(m, lblk, &run);
	if (err || !run.pblk || run.uninit)
		return err;		/* reads as zeros already */
	zero = calloc(1, to - from);
	if (!zero)
		return EXT2_ET_NO_MEMORY;
	memset(&w, 0, sizeof(w));
	w.vol = m->vol;
	w.ino = m->ino;
	w.inode = m->inode;
	w.map = *m;
	w.buf = zero;
	w.off = from;
	w.end = to;
	err = overwrite_run(&w, lblk, &n, run.pblk);
	*m = w.map;		/* the cursor may have been reopened */
	free(w.bounce);
	free(zero);
	return err;
}

/* ---------------------------------------------------------------------
 * SEEK_DATA / SEEK_HOLE
 */

errcode_t nx_file_seek(struct nx_volume *vol, ext2_ino_t ino, uint64_t offset,
		       int whence, uint64_t *result)
{
	uint64_t bs = vol->fs->blocksize, isize;
	struct ext2_inode_large inode;
	struct nx_fmap map;
	struct nx_fmap_run run;
	blk64_t lblk, end;
	errcode_t err;

	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return EINVAL;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (!LINUX_S_ISREG(inode.i_mode))
		return EINVAL;
	isize = EXT2_I_SIZE(&inode);
	if (offset >= isize)
		return ENXIO;
	if (is_inline(&inode)) {
		*result = whence == SEEK_DATA ? offset : isize;
		return 0;
	}
	end = (isize + bs - 1) / bs;
	err = nx_fmap_open(&map, vol, ino, &inode);
	for (lblk = offset / bs; !err && lblk < end; lblk += run.len) {
		int data;

		err = nx_fmap_lookup(&map, lblk, &run);
		if (err)
			break;
		/* Unwritten extents count as holes, as in ext4. */
		data = run.pblk && !run.uninit;
		if (data == (whence == SEEK_DATA)) {
			*result = max_u64(offset, lblk * bs);
			goto out;
		}
		if (run.len > end - lblk)
			break;
	}
	if (!err) {
		if (whence == SEEK_DATA)
			err = ENXIO;
		else
			*result = isize;
	}
out:
	nx_fmap_close(&map);
	return err;
}
