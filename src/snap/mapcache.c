/*
 * mapcache.c - an in-memory copy of a snapshot file's block map, for
 * resolving view reads without walking the file's extent tree (or
 * indirect blocks) on the device for every block.
 *
 * A snapshot's content never changes (docs/design.md), but its file's
 * map does: copy-on-write adds blocks to the active snapshot, and a
 * delete hands blocks over to the next older one.  Both write the
 * snapshot inode or its map blocks, so the cache is valid only while the
 * device's write generation (blkio.h) is the one it was loaded at; any
 * write at all makes it stale.  Mappings decided but not yet in the
 * inode (the store's pending and moved blocks) are not in the file's map
 * either: callers look at those first, as without the cache.
 *
 * A stale cache is not reloaded at once: while something writes, every
 * lookup would reload it.  The lookups since it went stale are answered
 * from the device as before, and only once they have cost about what a
 * reload costs (a map block read each) is it reloaded, so a view read
 * during writes costs at most about twice what it cost without a cache.
 */
#include <stdlib.h>
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "snap_internal.h"

/* Lookups answered from the device before a first load. */
#define MAPCACHE_FIRST_MISSES	16
/* Extents a map block holds, about: what one miss costs in a reload. */
#define MAPCACHE_EXTENTS_PER_MISS	256

void nx_mapcache_free(struct nx_mapcache *c)
{
	free(c->ext);
	c->ext = NULL;
	c->n = c->cap = 0;
	c->loaded = 0;
	c->misses = 0;
}

static errcode_t add_run(struct nx_mapcache *c, blk64_t lblk, blk64_t pblk,
			 blk64_t len)
{
	struct nx_mapext *last = c->n ? &c->ext[c->n - 1] : NULL;
	errcode_t err;

	/* Block-mapped files come one block at a time: merge runs. */
	if (last && last->lblk + last->len == lblk &&
	    last->pblk + last->len == pblk) {
		last->len += len;
		return 0;
	}
	err = nx_grow((void **)&c->ext, &c->cap, c->n, sizeof(*c->ext), 64);
	if (err)
		return err;
	c->ext[c->n].lblk = lblk;
	c->ext[c->n].pblk = pblk;
	c->ext[c->n].len = len;
	c->n++;
	return 0;
}

static errcode_t load_extents(ext2_filsys fs, ext2_ino_t ino,
			      struct nx_mapcache *c)
{
	struct ext2fs_extent ex;
	ext2_extent_handle_t h;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;

	err = ext2fs_extent_open2(fs, ino, NULL, &h);
	if (err)
		return err;
	for (;;) {
		err = ext2fs_extent_get(h, op, &ex);
		op = EXT2_EXTENT_NEXT;
		if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE) {
			err = 0;
			break;
		}
		if (err)
			break;
		if (!(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) ||
		    (ex.e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT) || !ex.e_len)
			continue;
		err = add_run(c, ex.e_lblk, ex.e_pblk, ex.e_len);
		if (err)
			break;
	}
	ext2fs_extent_free(h);
	return err;
}

struct block_load {
	struct nx_mapcache *c;
	errcode_t err;
};

static int load_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		      blk64_t ref_blk, int ref_offset, void *priv)
{
	struct block_load *bl = priv;

	(void)fs;
	(void)ref_blk;
	(void)ref_offset;
	if (blockcnt < 0 || !*blocknr)
		return 0;
	bl->err = add_run(bl->c, (blk64_t)blockcnt, *blocknr, 1);
	return bl->err ? BLOCK_ABORT : 0;
}

static errcode_t load_blocks(ext2_filsys fs, ext2_ino_t ino,
			     struct nx_mapcache *c)
{
	struct block_load bl = { c, 0 };
	errcode_t err;

	err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY |
				    BLOCK_FLAG_DATA_ONLY, NULL, load_block,
				    &bl);
	return err ? err : bl.err;
}

static errcode_t load(ext2_filsys fs, struct nx_snap *s, uint64_t gen)
{
	struct nx_mapcache *c = &s->map;
	struct ext2_inode inode;
	errcode_t err;

	c->n = 0;
	c->loaded = 0;
	err = ext2fs_read_inode(fs, s->ino, &inode);
	if (err)
		return err;
	if (inode.i_flags & EXT4_EXTENTS_FL)
		err = load_extents(fs, s->ino, c);
	else
		err = load_blocks(fs, s->ino, c);
	if (err) {
		c->n = 0;
		return err;
	}
	c->loaded = 1;
	c->gen = gen;
	c->misses = 0;
	return 0;
}

/* Has the cache paid for (re)loading it now? */
static int worth_loading(const struct nx_mapcache *c)
{
	size_t due = c->n / MAPCACHE_EXTENTS_PER_MISS;

	if (due < MAPCACHE_FIRST_MISSES)
		due = MAPCACHE_FIRST_MISSES;
	return c->misses >= due;
}

static const struct nx_mapext *find_ext(const struct nx_mapcache *c,
					blk64_t n)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c->ext[mid].lblk + c->ext[mid].len <= n)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < c->n && c->ext[lo].lblk <= n)
		return &c->ext[lo];
	return NULL;
}

int nx_mapcache_lookup(struct nx_snapstore *store, struct nx_snap *s,
		       blk64_t n, blk64_t *phys, blk64_t *len)
{
	uint64_t gen = nx_blkio_write_gen(store->vol->io);
	const struct nx_mapext *e;

	if (!s->map.loaded || s->map.gen != gen) {
		if (s->map.loaded) {	/* stale: from now on a miss */
			s->map.loaded = 0;
			s->map.misses = 0;
		}
		if (!worth_loading(&s->map)) {
			s->map.misses++;
			return 0;
		}
		if (load(store->vol->fs, s, gen)) {
			s->map.misses = 0;	/* the device path says why */
			return 0;
		}
	}
	e = find_ext(&s->map, n);
	if (!e) {
		*phys = 0;
		*len = 0;
		return 1;
	}
	*phys = e->pblk + (n - e->lblk);
	*len = e->lblk + e->len - n;
	return 1;
}
