/*
 * cow.c - copy-on-write into the active snapshot.
 *
 * Three doors lead to a block changing, and each is watched here:
 *  - a write through the block I/O layer (metadata, +C file data, anything
 *    libext2fs writes): the old content is *copied* into a newly allocated
 *    snapshot block (cow_write_hook);
 *  - a block being freed (truncate, punch, unlink, extent tree shrink):
 *    the block is kept allocated and *moved* into the snapshot as it is
 *    (on_block_stats);
 *  - a file data overwrite: the file gets a new block and the old one is
 *    moved into the snapshot without copying (the overwrite policy the
 *    data path asks, overwrite.h: nx_snap_overwrite_ops below).
 *
 * The snapshot inode's own block map cannot be updated while libext2fs is
 * in the middle of the operation that triggered the preservation (the
 * hook runs inside ext2fs_write_inode, ext2fs_punch, ...).  Decisions are
 * therefore recorded at once in the snapshot's "mapped" bitmap and in
 * store->moved (blocks moved as they are, N -> N, as runs) or
 * store->pending (copies, N -> B), and written into the snapshot inode by
 * nx_cow_apply_pending() at the commit.  Until then every reader asks
 * nx_pending_get().
 *
 * Who pays for a copy.  The COW reserve (s_snapshot_r_blocks_count) is
 * sized at the take for one copy of every superblock, descriptor, bitmap
 * and inode-table block plus the snapshot's own block map; those copies
 * and map blocks are "draws" on it, and what live allocations must leave
 * free shrinks with every draw (vol->cow_reserve), so that df and the
 * writers' limits do not move when the snapshot takes what was held for
 * it.  Every other copy - a directory, extent, indirect or xattr block,
 * the data of a +C file - is the writer's: it comes out of the space
 * that writer may use, checked before the write (+C data: preserve_span
 * says NX_PRESERVE_COPY) or before the request starts
 * (reserve.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/blkio.h"
#include "nextfs/inode.h"
#include "nextfs/file.h"
#include "nextfs/reserve.h"
#include "nextfs/txn.h"
#include "snap_internal.h"

static int in_fs_range(ext2_filsys fs, blk64_t blk)
{
	return blk >= fs->super->s_first_data_block &&
	       blk < ext2fs_blocks_count(fs->super);
}

/* Tell the layers below how much live allocations must leave free. */
static void publish_reserve(struct nx_snapstore *store)
{
	struct nx_volume *vol = store->vol;
	blk64_t r = vol->fs->super->s_snapshot_r_blocks_count;

	vol->cow_active = store->active != NULL;
	vol->cow_reserve = store->headroom ? nx_snap_headroom(vol->fs) : 0;
	if (store->active && r > store->draws)
		vol->cow_reserve += r - store->draws;
}

static void note_draw(struct nx_snapstore *store)
{
	store->draws++;
	publish_reserve(store);
}

static int is_fixed(struct nx_snapstore *store, blk64_t blk)
{
	return store->fixed && in_fs_range(store->vol->fs, blk) &&
	       ext2fs_test_block_bitmap2(store->fixed, blk);
}

/*
 * The blocks whose copies the reserve holds space for: every group's
 * superblock and descriptor blocks (backups included, though only the
 * primaries are ever written), bitmaps and inode table.
 */
errcode_t nx_cow_init_fixed(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;
	errcode_t err;
	dgrp_t g;

	err = ext2fs_allocate_block_bitmap(fs, "fixed metadata",
					   &store->fixed);
	if (err)
		return err;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t it = ext2fs_inode_table_loc(fs, g);

		ext2fs_reserve_super_and_bgd(fs, g, store->fixed);
		if (in_fs_range(fs, ext2fs_block_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(store->fixed,
					ext2fs_block_bitmap_loc(fs, g));
		if (in_fs_range(fs, ext2fs_inode_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(store->fixed,
					ext2fs_inode_bitmap_loc(fs, g));
		if (in_fs_range(fs, it) &&
		    in_fs_range(fs, it + fs->inode_blocks_per_group - 1))
			ext2fs_mark_block_bitmap_range2(store->fixed, it,
						fs->inode_blocks_per_group);
	}
	return 0;
}

/* Blocks set in A within [FROM, TO]; with B, only those set in both. */
static blk64_t count_set(ext2fs_block_bitmap a, ext2fs_block_bitmap b,
			 blk64_t from, blk64_t to)
{
	blk64_t n = 0, start, stop;

	while (from <= to &&
	       !ext2fs_find_first_set_block_bitmap2(a, from, to, &start)) {
		if (ext2fs_find_first_zero_block_bitmap2(a, start, to, &stop))
			stop = to + 1;
		n += b ? count_set(b, NULL, start, stop - 1) : stop - start;
		from = stop;
	}
	return n;
}

/*
 * What the active snapshot has drawn from its reserve so far, from what
 * it holds (at mount, and after a delete made an older one active):
 * its block-map blocks (all it owns less the blocks it maps) and the
 * copies of fixed metadata among the blocks it maps.
 */
errcode_t nx_cow_count_draws(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;
	struct nx_snap *active = store->active;
	blk64_t first = fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;
	struct ext2_inode_large inode;
	blk64_t owned, mapped;
	errcode_t err;

	store->draws = 0;
	if (active) {
		err = nx_inode_read(store->vol, active->ino, &inode);
		if (err)
			return err;
		owned = ext2fs_get_stat_i_blocks(fs,
				(struct ext2_inode *)&inode) /
			(fs->blocksize / 512);
		mapped = count_set(active->mapped, NULL, first, last);
		if (owned > mapped)
			store->draws = owned - mapped;
		if (store->fixed)
			store->draws += count_set(active->mapped, store->fixed,
						  first, last);
	}
	publish_reserve(store);
	return 0;
}

/*
 * Does a deleted snapshot newer than the active one still hold N?  Then
 * it holds what the active snapshot shows at N, and hands it over
 * (handover.c): the live block is not the active snapshot's to keep.
 */
static int held_by_deleted(struct nx_snapstore *store, blk64_t blk)
{
	int i;

	for (i = store->nsnaps - 1; i >= 0; i--) {
		struct nx_snap *s = store->snaps[i];

		if (s == store->active)
			return 0;
		if (ext2fs_test_block_bitmap2(s->mapped, blk))
			return 1;
	}
	return 0;
}

int nx_cow_needs_preserve(struct nx_snapstore *store, blk64_t blk)
{
	ext2_filsys fs = store->vol->fs;
	struct nx_snap *active = store->active;

	if (!active || !in_fs_range(fs, blk))
		return 0;
	return ext2fs_test_block_bitmap2(store->cow_map, blk) &&
	       !ext2fs_test_block_bitmap2(store->exclude, blk) &&
	       !ext2fs_test_block_bitmap2(active->mapped, blk) &&
	       !held_by_deleted(store, blk);
}

/* Record that the active snapshot now holds [N, N + COUNT) where it is. */
static void record_moved(struct nx_snapstore *store, blk64_t n,
			 blk64_t count)
{
	ext2fs_mark_block_bitmap_range2(store->active->mapped, n, count);
	ext2fs_mark_block_bitmap_range2(store->exclude, n, count);
	ext2fs_mark_block_bitmap_range2(store->moved, n, count);
	store->nmoved += count;
	store->preserved += count;
}

/* Record that the active snapshot now holds the old N at physical B. */
static errcode_t record_preserved(struct nx_snapstore *store, blk64_t n,
				  blk64_t b)
{
	if (n == b) {
		record_moved(store, n, 1);
		return 0;
	}
	ext2fs_mark_block_bitmap2(store->active->mapped, n);
	ext2fs_mark_block_bitmap2(store->exclude, b);
	store->preserved++;
	return nx_blkmap_put(&store->pending, n, b);
}

/*
 * Allocate a block for the snapshot (may use the COW reserve).
 *
 * This runs inside the write hook, i.e. in the middle of whatever
 * libext2fs call is writing.  That is safe as long as no caller holds a
 * block it has chosen but not yet marked in use while it writes some
 * other block: ext2fs_mkdir() and ext2fs_symlink() do exactly that
 * (they write the new inode before marking its block), so nextfs never
 * calls them while a snapshot is active (make_snapdir runs only when
 * none exists); the data path, directory expansion and extent splits
 * mark blocks before writing anything else.
 */
static errcode_t alloc_snapshot_block(struct nx_snapstore *store,
				      blk64_t goal, blk64_t *ret)
{
	ext2_filsys fs = store->vol->fs;
	errcode_t err;

	/*
	 * The block map given explicitly: no allocation hook applies
	 * (reserve.h); a copy keeps what is written, whoever writes.
	 */
	err = ext2fs_new_block2(fs, goal, fs->block_map, ret);
	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && nx_txn_held_frees(store->vol)) {
		/* What the snapshot keeps wins over deleted files (txn.h). */
		nx_txn_release_frees(store->vol);
		err = ext2fs_new_block2(fs, goal, fs->block_map, ret);
	}
	if (err == EXT2_ET_BLOCK_ALLOC_FAIL)
		return ENOSPC;
	if (err)
		return err;
	store->busy++;
	ext2fs_block_alloc_stats2(fs, *ret, +1);
	store->busy--;
	return 0;
}

static void release_block(struct nx_snapstore *store, blk64_t blk)
{
	store->busy++;
	ext2fs_block_alloc_stats2(store->vol->fs, blk, -1);
	store->busy--;
}

/* Copy the old content OLD of block N into the active snapshot. */
static errcode_t preserve_by_copy(struct nx_snapstore *store, blk64_t n,
				  const void *old)
{
	ext2_filsys fs = store->vol->fs;
	blk64_t b;
	errcode_t err;

	err = alloc_snapshot_block(store, store->copy_goal ?
				   store->copy_goal : n, &b);
	if (err)
		return err;
	err = nx_blkio_pwrite_raw(store->vol->io, old, fs->blocksize,
				  b * fs->blocksize);
	if (err) {
		release_block(store, b);
		return err;
	}
	store->copy_goal = b + 1;
	if (is_fixed(store, n))
		note_draw(store);
	return record_preserved(store, n, b);
}

/*
 * A block of the COW set that the active snapshot still needs is never
 * free: freeing one moves it into the snapshot instead.  So a write to a
 * block that is free in the live bitmap preserves nothing.  This matters
 * beyond saving space: ext2fs_alloc_block() zeroes the block it has
 * chosen *before* marking it in use, and preserving it then would
 * allocate the very same block for the copy (two owners, a counter off
 * by one).  Such a block can be in the COW set without being excluded
 * once a snapshot that owned it at the take has been deleted.
 */
static int block_in_use(ext2_filsys fs, blk64_t blk)
{
	return ext2fs_test_block_bitmap2(fs->block_map, blk);
}

/*
 * blkio write hook: before bytes [off, off+len) are overwritten with DATA,
 * copy every block the active snapshot still needs.  A block whose bytes
 * the write leaves unchanged is not preserved: libext2fs rewrites
 * unchanged bitmaps and descriptors on every flush, and copying those
 * would make every snapshot grow with the volume size (P7).
 */
static errcode_t cow_write_hook(void *priv, uint64_t off, uint64_t len,
				const void *data)
{
	struct nx_snapstore *store = priv;
	ext2_filsys fs = store->vol->fs;
	uint64_t bs = fs->blocksize, end = off + len;
	blk64_t blk;
	char *old = NULL;
	errcode_t err = 0;

	if (!store->active || !len)
		return 0;
	for (blk = off / bs; blk * bs < end; blk++) {
		uint64_t from = blk * bs > off ? blk * bs : off;
		uint64_t to = (blk + 1) * bs < end ? (blk + 1) * bs : end;

		if (!nx_cow_needs_preserve(store, blk) ||
		    !block_in_use(fs, blk))
			continue;
		if (!old) {
			old = malloc(bs);
			if (!old)
				return EXT2_ET_NO_MEMORY;
		}
		err = nx_blkio_pread(store->vol->io, old, bs, blk * bs);
		if (err)
			break;
		if (!memcmp(old + (from - blk * bs),
			    (const char *)data + (from - off), to - from))
			continue;
		err = preserve_by_copy(store, blk, old);
		if (err)
			break;
	}
	free(old);
	return err;
}

/*
 * A block is being freed.  If the active snapshot still needs it, keep it
 * allocated and hand it to the snapshot as it is (a move, no copy).
 */
static void note_freed_block(struct nx_snapstore *store, blk64_t blk)
{
	ext2_filsys fs = store->vol->fs;

	if (store->keep && in_fs_range(fs, blk) &&
	    ext2fs_test_block_bitmap2(store->keep, blk)) {
		/* A deleted snapshot's block that an older one inherits. */
		store->busy++;
		ext2fs_block_alloc_stats2(fs, blk, +1);
		store->busy--;
		ext2fs_mark_block_bitmap2(store->exclude, blk);
		return;
	}
	if (nx_cow_needs_preserve(store, blk)) {
		store->busy++;
		ext2fs_block_alloc_stats2(fs, blk, +1);
		store->busy--;
		/*
		 * Out of memory here would lose the mapping of a block we
		 * keep allocated: the block leaks (e2fsck finds it) but no
		 * snapshot content is lost.  Nothing better is possible from
		 * inside libext2fs's void callback.
		 */
		(void)record_preserved(store, blk, blk);
		return;
	}
	if (in_fs_range(fs, blk) &&
	    ext2fs_test_block_bitmap2(store->exclude, blk)) {
		/*
		 * A deleted snapshot's block.  Snapshot files were excluded
		 * at the active's take, so the active never needs it: off
		 * its COW set too, or whoever reuses the block would have it
		 * preserved for nothing.
		 */
		ext2fs_unmark_block_bitmap2(store->exclude, blk);
		if (store->cow_map)
			ext2fs_unmark_block_bitmap2(store->cow_map, blk);
	}
}

static void note_allocated_block(struct nx_snapstore *store, blk64_t blk)
{
	if (store->for_snapshot) {
		ext2fs_mark_block_bitmap2(store->exclude, blk);
		note_draw(store);	/* the active's block map grows */
	}
}

static void on_block_stats(ext2_filsys fs, blk64_t blk, int inuse)
{
	struct nx_snapstore *store = fs_store(fs);

	if (store->old_stats)
		store->old_stats(fs, blk, inuse);
	if (store->busy)
		return;
	if (inuse > 0)
		note_allocated_block(store, blk);
	else
		note_freed_block(store, blk);
}

static void on_block_range_stats(ext2_filsys fs, blk64_t blk, blk_t num,
				 int inuse)
{
	struct nx_snapstore *store = fs_store(fs);
	blk_t i;

	if (store->old_range_stats)
		store->old_range_stats(fs, blk, num, inuse);
	if (store->busy)
		return;
	for (i = 0; i < num; i++) {
		if (inuse > 0)
			note_allocated_block(store, blk + i);
		else
			note_freed_block(store, blk + i);
	}
}

void nx_cow_install(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;

	ext2fs_set_block_alloc_stats_callback(fs, on_block_stats,
					      &store->old_stats);
	ext2fs_set_block_alloc_stats_range_callback(fs, on_block_range_stats,
						    &store->old_range_stats);
	if (store->vol->io)
		nx_blkio_set_hook(store->vol->io, cow_write_hook, store);
}

void nx_cow_uninstall(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;
	void (*dummy)(ext2_filsys, blk64_t, int);
	void (*dummy_range)(ext2_filsys, blk64_t, blk_t, int);

	if (store->vol->io)
		nx_blkio_set_hook(store->vol->io, NULL, NULL);
	ext2fs_set_block_alloc_stats_callback(fs, store->old_stats, &dummy);
	ext2fs_set_block_alloc_stats_range_callback(fs, store->old_range_stats,
						    &dummy_range);
}

struct mapping {
	blk64_t n, b;
};

static int by_logical(const void *a, const void *b)
{
	const struct mapping *x = a, *y = b;

	return x->n < y->n ? -1 : x->n > y->n;
}

/* Take the pending entries out, sorted by logical block. */
static struct mapping *take_pending(struct nx_snapstore *store, size_t *count)
{
	struct nx_blkmap *p = &store->pending;
	struct mapping *v = malloc((p->count ? p->count : 1) * sizeof(*v));
	size_t i, n = 0;

	if (!v)
		return NULL;
	for (i = 0; i < p->cap; i++)
		if (p->keys[i]) {
			v[n].n = p->keys[i] - 1;
			v[n].b = p->vals[i];
			n++;
		}
	qsort(v, n, sizeof(*v), by_logical);
	nx_blkmap_clear(p);
	*count = n;
	return v;
}

/*
 * Map [N, N + LEN) to [B, B + LEN) in snapshot INO: one extent for an
 * extent-mapped snapshot, block by block for an indirect one.
 */
errcode_t nx_cow_map_run(struct nx_snapstore *store, ext2_ino_t ino,
			 struct ext2_inode_large *inode, blk64_t n, blk64_t b,
			 blk64_t len)
{
	return nx_file_map_blocks(store->vol, ino, inode, n, b, len);
}

static errcode_t map_run(struct nx_snapstore *store,
			 struct ext2_inode_large *inode, blk64_t n, blk64_t b,
			 blk64_t len)
{
	return nx_cow_map_run(store, store->active->ino, inode, n, b, len);
}

/*
 * Map V[0..N) into the snapshot inode, each run of consecutive N ->
 * consecutive B at once.
 */
static errcode_t map_into_snapshot(struct nx_snapstore *store,
				   struct ext2_inode_large *inode,
				   const struct mapping *v, size_t n)
{
	errcode_t err = 0;
	size_t i = 0, len;

	while (i < n && !err) {
		for (len = 1; i + len < n; len++)
			if (v[i + len].n != v[i].n + len ||
			    v[i + len].b != v[i].b + len)
				break;
		err = map_run(store, inode, v[i].n, v[i].b, len);
		i += len;
	}
	return err;
}

/* The first run of moved blocks at or after *N: [*N, *N + *LEN). */
static int next_moved_run(struct nx_snapstore *store, blk64_t *n,
			  blk64_t *len)
{
	ext2_filsys fs = store->vol->fs;
	blk64_t end = ext2fs_blocks_count(fs->super) - 1, stop;

	if (*n > end ||
	    ext2fs_find_first_set_block_bitmap2(store->moved, *n, end, n))
		return 0;
	if (ext2fs_find_first_zero_block_bitmap2(store->moved, *n, end, &stop))
		stop = end + 1;
	*len = stop - *n;
	return 1;
}

/*
 * Map the moved blocks into the snapshot inode, run by run.  A run
 * leaves the bitmap only once it is mapped: on an error the rest stays
 * pending for a retry.
 */
static errcode_t map_moved(struct nx_snapstore *store,
			   struct ext2_inode_large *inode)
{
	blk64_t n = store->vol->fs->super->s_first_data_block, len;
	errcode_t err;

	while (next_moved_run(store, &n, &len)) {
		err = map_run(store, inode, n, n, len);
		if (err)
			return err;
		ext2fs_unmark_block_bitmap_range2(store->moved, n, len);
		store->nmoved = store->nmoved > len ? store->nmoved - len : 0;
		n += len;
	}
	store->nmoved = 0;
	return 0;
}

/*
 * Write the pending mappings into the active snapshot's inode.  Doing so
 * writes the inode and may rewrite metadata the snapshot itself needs
 * (its inode table block), which adds new pending entries: loop until
 * none is left.  Each block is preserved at most once, so this ends.
 */
errcode_t nx_cow_apply_pending(struct nx_snapstore *store)
{
	struct ext2_inode_large inode;
	struct mapping *v;
	errcode_t err = 0, e2;
	size_t n, i;

	if (store->applying || !store->active || !nx_pending_count(store))
		return 0;
	store->applying = 1;
	/*
	 * Mapping updates rewrite the same extent leaf or indirect block
	 * many times: hold those writes and write each block once.
	 */
	nx_blkio_begin_batch(store->vol->io);
	while (nx_pending_count(store) && !err) {
		v = take_pending(store, &n);
		if (!v) {
			err = EXT2_ET_NO_MEMORY;
			break;
		}
		err = nx_inode_read(store->vol, store->active->ino, &inode);
		if (!err) {
			store->for_snapshot = 1;
			err = map_moved(store, &inode);
			if (!err)
				err = map_into_snapshot(store, &inode, v, n);
			store->for_snapshot = 0;
		}
		if (!err)
			err = nx_inode_write(store->vol, store->active->ino,
					     &inode);
		if (err) {
			/* Keep what may not be in the inode yet for a retry. */
			for (i = 0; i < n; i++)
				nx_blkmap_put(&store->pending, v[i].n, v[i].b);
		}
		free(v);
		if (!err && !nx_pending_count(store)) {
			/* Writing the held blocks may preserve more: loop. */
			err = nx_blkio_end_batch(store->vol->io);
			nx_blkio_begin_batch(store->vol->io);
		}
	}
	e2 = nx_blkio_end_batch(store->vol->io);
	if (!err)
		err = e2;
	store->applying = 0;
	return err;
}

static blk64_t preserve_span(struct nx_volume *vol,
			     const struct ext2_inode_large *inode,
			     blk64_t pblk, blk64_t count, int *needs)
{
	struct nx_snapstore *store = vol->snap;
	int kind = (inode->i_flags & FS_NOCOW_FL) ? NX_PRESERVE_COPY :
						     NX_PRESERVE_MOVE;
	blk64_t i;

	*needs = 0;
	if (!store || !store->active || !count)
		return count;
	/* What the write hook will copy: as cow_write_hook decides. */
	for (i = 0; i < count; i++) {
		int n = nx_cow_needs_preserve(store, pblk + i) &&
			(kind == NX_PRESERVE_MOVE ||
			 block_in_use(vol->fs, pblk + i)) ? kind : 0;

		if (!i)
			*needs = n;
		else if (n != *needs)
			break;
	}
	return i;
}

static errcode_t take_moved(struct nx_volume *vol, blk64_t pblk,
			   blk64_t count)
{
	struct nx_snapstore *store = vol->snap;
	blk64_t i;

	for (i = 0; i < count; i++)
		if (!store || !nx_cow_needs_preserve(store, pblk + i))
			return EINVAL;	/* the caller broke the contract */
	record_moved(store, pblk, count);
	return 0;
}

static errcode_t prepare_overwrite(struct nx_volume *vol, ext2_ino_t ino,
				   struct ext2_inode_large *inode,
				   blk64_t lblk, blk64_t pblk,
				   blk64_t *newpblk)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	blk64_t nb;
	errcode_t err;

	*newpblk = pblk;
	if (!store || !nx_cow_needs_preserve(store, pblk))
		return 0;
	if (inode->i_flags & FS_NOCOW_FL)
		return 0;	/* copied by the write hook, stays in place */
	err = nx_reserve_check_cow(vol, 1);
	if (err)
		return err;
	err = ext2fs_new_block2(fs, pblk, NULL, &nb);
	if (err)
		return err == EXT2_ET_BLOCK_ALLOC_FAIL ? ENOSPC : err;
	store->busy++;
	ext2fs_block_alloc_stats2(fs, nb, +1);
	store->busy--;
	/* Remapping may rewrite extent/indirect blocks: those go via the hook. */
	err = ext2fs_bmap2(fs, ino, (struct ext2_inode *)inode, NULL, BMAP_SET,
			   lblk, NULL, &nb);
	if (err) {
		release_block(store, nb);
		return err;
	}
	err = record_preserved(store, pblk, pblk);
	if (err)
		return err;
	*newpblk = nb;
	return 0;
}

const struct nx_overwrite_ops nx_snap_overwrite_ops = {
	.prepare = prepare_overwrite,
	.preserve_span = preserve_span,
	.take_moved = take_moved,
	.view_plan = nx_snap_view_plan,
};

/*
 * Make SNAP the snapshot that receives copy-on-write.  TAKE_MAP is its
 * take-time block bitmap (consumed: the store owns it from here, also on
 * an error), or NULL to read that map through the snapshot's own view.
 */
errcode_t nx_cow_set_active(struct nx_snapstore *store, struct nx_snap *snap,
			    ext2fs_block_bitmap take_map)
{
	errcode_t err = 0;

	if (store->cow_map) {
		ext2fs_free_block_bitmap(store->cow_map);
		store->cow_map = NULL;
	}
	store->active = NULL;
	store->copy_goal = 0;
	store->draws = 0;	/* a new snapshot; nx_cow_count_draws() else */
	publish_reserve(store);
	if (!snap) {
		if (take_map)
			ext2fs_free_block_bitmap(take_map);
		return 0;
	}
	if (!take_map)
		err = nx_snap_read_take_bitmap(store, nx_snap_index(store,
								    snap->ino),
					       &take_map);
	if (err)
		return err;
	store->cow_map = take_map;
	store->active = snap;
	publish_reserve(store);
	return 0;
}
