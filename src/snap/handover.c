/*
 * handover.c - deleting a snapshot: gone at once, its blocks handed over
 * in bounded slices afterwards (docs/snapshots.md, "Delete").
 *
 * Deleting S unnames it and nothing more: its inode gets
 * EXT4_SNAPFILE_DELETED_FL, its entry in /.snapshots another name (so
 * that a new take can use the old one), and if it was active, the next
 * older snapshot becomes active.  S stays on the snapshot list, so the
 * views of the older snapshots still read, through it, what it holds for
 * them.  Then, slice by slice, the blocks S maps move to the next older
 * snapshot that is not deleted (T) where T needs them - in use at T's
 * take, not mapped by T - and are freed otherwise; the last slice takes
 * S off the list and frees its inode.
 *
 * The cursor is S's own block map: a slice takes the first blocks S
 * still maps, maps the needed ones into T, and punches that range out of
 * S, all under the volume lock, so that every commit sees whole slices
 * (docs/design.md P10).  After a crash or an unmount the open finds S
 * flagged on the list, with what is left in its map, and the work goes
 * on from there: nothing else is recorded.
 *
 * Several deletes may be pending.  The oldest deleted snapshot on the
 * list goes first, so that it is the first of the deleted ones above T
 * that T's view reads through: what it maps, T showed.  A newer deleted
 * one, handled later, gives T only what T still needs then.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "snap_internal.h"

/*
 * What one slice moves or frees at most: the data blocks, and the runs
 * of them (each a change of T's map).  Slices also end when their time
 * is up; these bound the collection that comes first, and the punch
 * that comes last (about half a microsecond a block: freeing each, and
 * taking back each one moved), which the time budget does not see.
 */
#define SLICE_BLOCKS	16384
#define SLICE_RUNS	2048

struct ho_run {
	blk64_t n, b, len;		/* logical N.. at physical B.. */
};

struct nx_handover {
	struct nx_snap *from;		/* the deleted snapshot being done */
	struct nx_snap *target;		/* next older one not deleted, or NULL */
	ext2fs_block_bitmap take;	/* TARGET's take-time block bitmap */
	ext2fs_block_bitmap keep;	/* physical blocks moved this slice */
	struct ho_run *runs;
	size_t nruns, caprun;
	blk64_t nblocks;
	int nomem;
};

void nx_handover_free(struct nx_snapstore *store)
{
	struct nx_handover *h = store->ho;

	if (!h)
		return;
	if (h->take)
		ext2fs_free_block_bitmap(h->take);
	if (h->keep)
		ext2fs_free_block_bitmap(h->keep);
	free(h->runs);
	free(h);
	store->ho = NULL;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------------ */
/* Names of deleted snapshots.                                          */

static int name_taken(struct nx_snapstore *store, const char *name)
{
	int i;

	for (i = 0; i < store->nsnaps; i++)
		if (!strcmp(store->snaps[i]->name, name))
			return 1;
	return 0;
}

/*
 * Give S's entry in /.snapshots a name no snapshot has and that is not
 * AVOID: ".deleted-ID", with a counter if a user chose that name.  The
 * new name first: linking may need a new directory block, and when that
 * fails (a full volume) nothing has changed yet.
 */
static errcode_t rename_entry(struct nx_snapstore *store, struct nx_snap *s,
			      const char *avoid)
{
	ext2_filsys fs = store->vol->fs;
	char name[NX_NAME_MAX + 1];
	unsigned k = 0;
	errcode_t err;

	do {
		if (k)
			snprintf(name, sizeof(name), ".deleted-%u.%u", s->id, k);
		else
			snprintf(name, sizeof(name), ".deleted-%u", s->id);
		k++;
	} while (!strcmp(name, avoid) || name_taken(store, name));
	err = nx_snap_link_name(fs, store->dir, name, s->ino,
				EXT2_FT_REG_FILE);
	if (err)
		return err;
	err = ext2fs_unlink(fs, store->dir, s->name, s->ino, 0);
	/* (an unnamed snapshot: libext2fs says "no space" for not found) */
	if (err && err != EXT2_ET_DIR_NO_SPACE)
		return err;
	memcpy(s->name, name, strlen(name) + 1);
	return 0;
}

errcode_t nx_handover_free_name(struct nx_snapstore *store, const char *name)
{
	errcode_t err;
	int i;

	for (i = 0; i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];

		if (s->deleted && !strcmp(s->name, name)) {
			err = rename_entry(store, s, name);
			if (err)
				return err;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* The delete itself: bounded, whatever the snapshot holds.             */

static errcode_t mark_deleted(struct nx_snapstore *store, struct nx_snap *s)
{
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read(store->vol, s->ino, &inode);
	if (err)
		return err;
	inode.i_flags |= EXT4_SNAPFILE_DELETED_FL;
	return nx_inode_write(store->vol, s->ino, &inode);
}

/*
 * Deleting the active snapshot S: the next older one that is not
 * deleted, OLDER, becomes active before anything is written, so that
 * what the delete itself changes is preserved for it like any other
 * change.  What S holds that OLDER needs is not: S holds what OLDER
 * showed there, and hands it over (nx_cow_needs_preserve asks the
 * deleted snapshots above the active one).
 */
errcode_t nx_snap_delete(struct nx_volume *vol, const char *name)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	blk64_t reserve = fs->super->s_snapshot_r_blocks_count;
	struct nx_snap *s, *older = NULL;
	int was_active;
	errcode_t err;

	if (!store || !(s = nx_snap_by_name(store, name)))
		return ENOENT;
	if (nx_volume_rdonly(vol))
		return EROFS;
	err = nx_cow_apply_pending(store);
	if (err)
		return err;
	was_active = s == store->active;
	s->deleted = 1;		/* what it maps is no longer preserved */
	if (was_active) {
		older = nx_snap_older_live(store, nx_snap_index(store, s->ino));
		fs->super->s_snapshot_inum = older ? older->ino : 0;
		if (!older)
			fs->super->s_snapshot_r_blocks_count = 0;
		ext2fs_mark_super_dirty(fs);
		err = nx_cow_set_active(store, older, NULL);
	}
	/* The one step that may need space (a directory block). */
	if (!err)
		err = rename_entry(store, s, "");
	if (err) {
		/* Nothing named changed: S stays, active again if it was. */
		s->deleted = 0;
		if (was_active) {
			fs->super->s_snapshot_inum = s->ino;
			fs->super->s_snapshot_r_blocks_count = reserve;
			if (!nx_cow_set_active(store, s, NULL))
				nx_cow_count_draws(store);
		}
		return err;
	}
	nx_snap_relist(store);	/* shrinks: cannot fail */
	nx_snap_retire_view(store, s);
	err = mark_deleted(store, s);
	if (!err)
		err = nx_volume_sync(vol);
	/* An older snapshot may be active now, holding what it holds. */
	if (!err)
		err = nx_cow_count_draws(store);
	return err;
}

/* ------------------------------------------------------------------ */
/* One slice.                                                           */

/*
 * Add [N, N + LEN) at B to the slice.  An extent comes whole (at most
 * 32 Ki blocks), so that the slice's end never cuts one: a whole extent
 * that moves leaves S's map in one change (unmap_moved_extents).
 */
static errcode_t add_run(struct nx_handover *h, blk64_t n, blk64_t b,
			 blk64_t len)
{
	struct ho_run *r = h->nruns ? &h->runs[h->nruns - 1] : NULL;

	h->nblocks += len;
	if (r && r->n + r->len == n && r->b + r->len == b) {
		r->len += len;
		return 0;
	}
	if (nx_grow((void **)&h->runs, &h->caprun, h->nruns, sizeof(*h->runs),
		    64)) {
		h->nomem = 1;
		return EXT2_ET_NO_MEMORY;
	}
	h->runs[h->nruns].n = n;
	h->runs[h->nruns].b = b;
	h->runs[h->nruns].len = len;
	h->nruns++;
	return 0;
}

static int slice_full(const struct nx_handover *h)
{
	return h->nblocks >= SLICE_BLOCKS || h->nruns >= SLICE_RUNS;
}

static int collect_block(ext2_filsys fs, blk64_t *blocknr,
			 e2_blkcnt_t blockcnt, blk64_t ref_blk, int ref_offset,
			 void *priv)
{
	struct nx_handover *h = priv;

	if (blockcnt < 0)
		return 0;
	if (add_run(h, blockcnt, *blocknr, 1))
		return BLOCK_ABORT;
	return slice_full(h) ? BLOCK_ABORT : 0;
}

/* The first data runs S still maps, in logical order, into H->runs. */
static errcode_t collect_runs(struct nx_snapstore *store, struct nx_snap *s,
			      struct nx_handover *h)
{
	ext2_filsys fs = store->vol->fs;
	struct ext2fs_extent ex;
	ext2_extent_handle_t eh;
	errcode_t err;

	h->nruns = 0;
	h->nblocks = 0;
	h->nomem = 0;
	err = ext2fs_extent_open2(fs, s->ino, NULL, &eh);
	if (err == EXT2_ET_INODE_NOT_EXTENT) {
		err = ext2fs_block_iterate3(fs, s->ino, BLOCK_FLAG_READ_ONLY |
					    BLOCK_FLAG_DATA_ONLY, NULL,
					    collect_block, h);
		return err ? err : h->nomem ? EXT2_ET_NO_MEMORY : 0;
	}
	if (err)
		return err;
	err = ext2fs_extent_get(eh, EXT2_EXTENT_ROOT, &ex);
	while (!err && !slice_full(h)) {
		if ((ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) && ex.e_len) {
			err = add_run(h, ex.e_lblk, ex.e_pblk, ex.e_len);
			if (err)
				break;
		}
		err = ext2fs_extent_get(eh, EXT2_EXTENT_NEXT, &ex);
	}
	ext2fs_extent_free(eh);
	if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE)
		err = 0;
	return err;
}

/* How many blocks from N (at most MAX) MAP has set alike to N. */
static blk64_t same_bits(ext2fs_block_bitmap map, blk64_t n, blk64_t max)
{
	blk64_t hit;
	errcode_t err;

	if (max <= 1)
		return max;
	if (ext2fs_test_block_bitmap2(map, n))
		err = ext2fs_find_first_zero_block_bitmap2(map, n + 1,
							   n + max - 1, &hit);
	else
		err = ext2fs_find_first_set_block_bitmap2(map, n + 1,
							  n + max - 1, &hit);
	if (!err)
		return hit - n;
	return err == ENOENT ? max : 1;
}

/*
 * Does the target need the blocks [N, N + *LEN) of the snapshot being
 * done (in use at its take, not mapped by it)?  *LEN (<= MAX) becomes
 * the run over which the answer is the same.
 */
static int target_needs(struct nx_snapstore *store, struct nx_handover *h,
			blk64_t n, blk64_t max, blk64_t *len)
{
	ext2_filsys fs = store->vol->fs;
	blk64_t first = fs->super->s_first_data_block;
	blk64_t count = ext2fs_blocks_count(fs->super), l;

	*len = max;
	if (!h->target || n >= count)
		return 0;
	if (n < first) {
		*len = first - n < max ? first - n : max;
		return 0;
	}
	if (max > count - n)
		*len = max = count - n;
	l = same_bits(h->take, n, max);
	if (l < *len)
		*len = l;
	l = same_bits(h->target->mapped, n, max);
	if (l < *len)
		*len = l;
	return ext2fs_test_block_bitmap2(h->take, n) &&
	       !ext2fs_test_block_bitmap2(h->target->mapped, n);
}

/*
 * Blocks of [B, B + LEN) that the target maps already, because a slice
 * was cut after it had mapped them and before S dropped them (attach
 * found them in store->handed): S drops them without freeing them.
 */
static void keep_handed(struct nx_snapstore *store, struct nx_handover *h,
			blk64_t b, blk64_t len)
{
	blk64_t i;

	for (i = 0; store->handed && i < len; i++)
		if (ext2fs_test_block_bitmap2(store->handed, b + i))
			ext2fs_mark_block_bitmap2(h->keep, b + i);
}

/* S no longer maps the blocks of the runs below END: none is handed. */
static void forget_handed(struct nx_snapstore *store, struct nx_handover *h,
			  blk64_t end)
{
	size_t i;

	for (i = 0; store->handed && i < h->nruns && h->runs[i].n < end; i++) {
		struct ho_run *r = &h->runs[i];
		blk64_t len = r->n + r->len <= end ? r->len : end - r->n;

		ext2fs_unmark_block_bitmap_range2(store->handed, r->b, len);
	}
}

/*
 * Map what the target needs of H->runs into it, and mark the physical
 * blocks in H->keep.  Stops once DEADLINE (µs) has passed; *END is the
 * logical block after the last run done (all of whose needed blocks are
 * mapped), or the first run's start if none.  *MOVED: something was.
 */
static errcode_t adopt_runs(struct nx_snapstore *store, struct nx_handover *h,
			    uint64_t deadline, blk64_t *end, int *moved)
{
	struct nx_snap *t = h->target;
	struct ext2_inode_large inode;
	errcode_t err = 0, e2;
	size_t i;

	*end = h->runs[0].n;
	*moved = 0;
	if (t) {
		err = nx_inode_read(store->vol, t->ino, &inode);
		if (err)
			return err;
	}
	store->for_snapshot = 1;
	for (i = 0; i < h->nruns && !err; i++) {
		struct ho_run *r = &h->runs[i];
		blk64_t n = r->n, len;

		while (n < r->n + r->len) {
			if (target_needs(store, h, n, r->n + r->len - n,
					 &len)) {
				err = nx_cow_map_run(store, t->ino, &inode, n,
						     r->b + (n - r->n), len);
				if (err)
					break;
				ext2fs_mark_block_bitmap_range2(t->mapped, n,
								len);
				ext2fs_mark_block_bitmap_range2(h->keep,
						r->b + (n - r->n), len);
				*moved = 1;
			} else {
				keep_handed(store, h, r->b + (n - r->n), len);
			}
			n += len;
			*end = n;	/* all before it is done */
		}
		if (err || now_us() >= deadline)
			break;
	}
	store->for_snapshot = 0;
	if (*moved) {
		e2 = nx_inode_write(store->vol, t->ino, &inode);
		if (!err)
			err = e2;
	}
	return err;
}

/*
 * Is every block of [B, B + LEN) set in MAP?  (Test the first: the
 * rb-tree bitmaps of libext2fs 1.47.0 find no zero at all in a bitmap
 * with nothing set.)
 */
static int all_set(ext2fs_block_bitmap map, blk64_t b, blk64_t len)
{
	blk64_t hit;

	return ext2fs_test_block_bitmap2(map, b) &&
	       ext2fs_find_first_zero_block_bitmap2(map, b, b + len - 1,
						    &hit) == ENOENT;
}

/* The first extent of the map (EXT2_ET_EXTENT_NO_NEXT: none). */
static errcode_t first_leaf_extent(ext2_extent_handle_t eh,
				   struct ext2fs_extent *ex)
{
	errcode_t err = ext2fs_extent_get(eh, EXT2_EXTENT_ROOT, ex);

	while (!err && !(ex->e_flags & EXT2_EXTENT_FLAGS_LEAF))
		err = ext2fs_extent_get(eh, EXT2_EXTENT_NEXT, ex);
	return err;
}

/*
 * The extents at the start of extent-mapped S that lie below END and
 * were moved whole (H->keep): out of S's map without freeing their
 * blocks, one extent change each.  Freeing them in the punch below and
 * taking each block back costs two allocator calls per block, most of
 * a hand-over's time.  Stops at the first extent that is not such.
 */
static errcode_t unmap_moved_extents(struct nx_snapstore *store,
				     struct nx_snap *s, struct nx_handover *h,
				     blk64_t end)
{
	ext2_filsys fs = store->vol->fs;
	struct ext2_inode_large inode;
	struct ext2fs_extent ex;
	ext2_extent_handle_t eh;
	blk64_t gone = 0, next = 0;
	errcode_t err;

	err = ext2fs_extent_open2(fs, s->ino, NULL, &eh);
	if (err)
		return err == EXT2_ET_INODE_NOT_EXTENT ? 0 : err;
	err = first_leaf_extent(eh, &ex);
	while (!err && ex.e_len && ex.e_lblk >= next &&
	       ex.e_lblk + ex.e_len <= end &&
	       all_set(h->keep, ex.e_pblk, ex.e_len)) {
		err = ext2fs_extent_delete(eh, 0);
		if (err)
			break;
		gone += ex.e_len;
		next = ex.e_lblk + ex.e_len;
		/*
		 * The next extent slid into the deleted one's place, unless
		 * that emptied the leaf (then libext2fs removed it): from the
		 * root again.
		 */
		err = ext2fs_extent_get(eh, EXT2_EXTENT_CURRENT, &ex);
		if (err || !(ex.e_flags & EXT2_EXTENT_FLAGS_LEAF))
			err = first_leaf_extent(eh, &ex);
	}
	ext2fs_extent_free(eh);
	if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE)
		err = 0;
	if (!gone)
		return err;
	/* The data blocks are the target's now: off S's count. */
	if (!nx_inode_read(store->vol, s->ino, &inode)) {
		ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)&inode, gone);
		if (!err)
			err = nx_inode_write(store->vol, s->ino, &inode);
	}
	return err;
}

/*
 * Take [0, END) out of S's map (nothing is left below the slice): its
 * blocks in H->keep stay allocated (the target maps them now), the
 * others are freed (cow.c's allocator callback sees store->keep).
 * From 0, not from the slice's first block: libext2fs 1.47.0 punches
 * an indirect map from the middle wrongly (it passes the count less the
 * offset of each indirect block down, which frees blocks past the end
 * of the range), and from 0 that count is the right one.
 */
static errcode_t punch_done(struct nx_snapstore *store, struct nx_snap *s,
			    struct nx_handover *h, blk64_t end)
{
	struct ext2_inode_large inode;
	blk64_t first;
	errcode_t err;

	if (!end)
		return 0;
	err = nx_inode_read(store->vol, s->ino, &inode);
	if (err)
		return err;
	store->keep = h->keep;
	err = nx_punch(store->vol, s->ino, &inode, 0, end - 1);
	if (!err)
		err = nx_inode_write(store->vol, s->ino, &inode);
	store->keep = NULL;
	first = store->vol->fs->super->s_first_data_block;
	if (end > first)
		ext2fs_unmark_block_bitmap_range2(s->mapped, first,
						  end - first);
	return err;
}

/* Unhook S (index IDX) from the on-disk chain. */
static errcode_t unchain(struct nx_snapstore *store, int idx)
{
	struct nx_snap *s = store->snaps[idx];
	ext2_filsys fs = store->vol->fs;
	struct ext2_inode_large inode;
	errcode_t err;

	if (idx + 1 < store->nsnaps) {
		struct nx_snap *newer = store->snaps[idx + 1];

		err = nx_inode_read(store->vol, newer->ino, &inode);
		if (err)
			return err;
		snap_next(&inode) = s->next;
		newer->next = s->next;
		return nx_inode_write(store->vol, newer->ino, &inode);
	}
	fs->super->s_snapshot_list = s->next;
	ext2fs_mark_super_dirty(fs);
	return 0;
}

/* Free what is left of the snapshot file S (its map) and its inode. */
static errcode_t release_snapshot_file(struct nx_snapstore *store,
				       struct nx_snap *s)
{
	struct nx_volume *vol = store->vol;
	struct ext2_inode_large inode;
	errcode_t err;

	/*
	 * nx_punch, not ext2fs_punch: a snapshot often maps the volume's
	 * last block, which libext2fs 1.47.0 fails to free (see nx_punch).
	 */
	err = nx_inode_read(vol, s->ino, &inode);
	if (!err)
		err = nx_punch(vol, s->ino, &inode, 0, ~0ULL);
	if (!err)
		err = nx_inode_write(vol, s->ino, &inode);
	if (err)
		return err;
	err = ext2fs_unlink(vol->fs, store->dir, s->name, s->ino, 0);
	if (err && err != EXT2_ET_DIR_NO_SPACE)
		return err;
	err = nx_inode_read(vol, s->ino, &inode);
	if (err)
		return err;
	inode.i_links_count = 0;
	err = nx_inode_write(vol, s->ino, &inode);
	if (!err)
		err = nx_inode_release(vol, s->ino);
	return err;
}

/* S (index IDX) has handed everything over: off the list, and freed. */
static errcode_t finish(struct nx_snapstore *store, int idx)
{
	struct nx_snap *s = store->snaps[idx];
	ext2_filsys fs = store->vol->fs;
	errcode_t err;

	nx_handover_free(store);
	err = unchain(store, idx);
	if (!err)
		err = release_snapshot_file(store, s);
	if (err)
		return err;
	memmove(&store->snaps[idx], &store->snaps[idx + 1],
		(store->nsnaps - idx - 1) * sizeof(*store->snaps));
	store->nsnaps--;
	nx_snap_relist(store);
	nx_snap_free(s);
	if (!store->nsnaps) {
		ext2fs_clear_feature_has_snapshot(fs->super);
		fs->super->s_snapshot_inum = 0;
		fs->super->s_snapshot_list = 0;
		fs->super->s_snapshot_r_blocks_count = 0;
		err = nx_snap_remove_dir(store);
	}
	ext2fs_mark_super_dirty(fs);
	if (!err)
		err = nx_cow_count_draws(store);
	return err;
}

/*
 * The hand-over of S (index IDX) to the next older snapshot not deleted:
 * what it needs is read once, through its view, and kept while S is
 * being done (its take-time bitmap never changes).
 */
static errcode_t start(struct nx_snapstore *store, int idx,
		       struct nx_handover **ret)
{
	struct nx_snap *s = store->snaps[idx];
	struct nx_snap *t = nx_snap_older_live(store, idx);
	struct nx_handover *h = store->ho;
	errcode_t err;

	if (h && h->from == s && h->target == t) {
		*ret = h;
		return 0;
	}
	nx_handover_free(store);
	h = calloc(1, sizeof(*h));
	if (!h)
		return EXT2_ET_NO_MEMORY;
	h->from = s;
	h->target = t;
	err = ext2fs_allocate_block_bitmap(store->vol->fs, "handover",
					   &h->keep);
	/*
	 * The active snapshot's COW set is that bitmap, less blocks of
	 * snapshot files freed since (which it never shows): no reading.
	 */
	if (!err && t && t == store->active)
		err = ext2fs_copy_bitmap(store->cow_map, &h->take);
	else if (!err && t)
		err = nx_snap_read_take_bitmap(store, nx_snap_index(store,
								    t->ino),
					       &h->take);
	store->ho = h;
	if (err) {
		nx_handover_free(store);
		return err;
	}
	*ret = h;
	return 0;
}

static int first_deleted(struct nx_snapstore *store)
{
	int i;

	for (i = 0; i < store->nsnaps; i++)
		if (store->snaps[i]->deleted)
			return i;
	return -1;
}

errcode_t nx_snap_reclaim(struct nx_volume *vol, unsigned budget_ms,
			  int *more)
{
	struct nx_snapstore *store = vol->snap;
	struct nx_handover *h;
	uint64_t deadline = now_us() + (uint64_t)budget_ms * 1000;
	blk64_t end;
	errcode_t err, e2;
	int idx, moved;

	*more = 0;
	if (!store || nx_volume_rdonly(vol) || !store->ndeleted)
		return 0;
	idx = first_deleted(store);
	err = start(store, idx, &h);
	if (!err)
		err = collect_runs(store, h->from, h);
	if (err)
		goto out;
	if (!h->nruns) {
		err = finish(store, idx);
		goto out;
	}
	nx_blkio_begin_batch(vol->io);
	ext2fs_clear_block_bitmap(h->keep);
	err = adopt_runs(store, h, deadline, &end, &moved);
	/*
	 * The target's new mappings are durable before S drops them: a
	 * volume without a journal writes a commit's map blocks in no
	 * particular order among themselves, and one that lost S's mapping
	 * before the target had it would show the target changed
	 * (docs/design.md P10).  Cut in between, both map the blocks;
	 * attach takes that for what it is (store->handed).
	 */
	if (!err && moved)
		err = nx_volume_sync(vol);
	/* What was mapped into the target leaves S also after an error. */
	e2 = unmap_moved_extents(store, h->from, h, end);
	if (!e2)
		e2 = punch_done(store, h->from, h, end);
	if (!e2)
		forget_handed(store, h, end);
	if (!err)
		err = e2;
	e2 = nx_blkio_end_batch(vol->io);
	if (!err)
		err = e2;
out:
	*more = store->ndeleted > 0;
	return err;
}

errcode_t nx_snap_reclaim_all(struct nx_volume *vol)
{
	errcode_t err = 0;
	int more = vol->snap && vol->snap->ndeleted;

	if (!more)
		return 0;
	while (!err && more)
		err = nx_snap_reclaim(vol, 1000, &more);
	/* Durable, and the freed blocks free for reuse. */
	return err ? err : nx_volume_sync(vol);
}

void nx_snap_pending(struct nx_volume *vol, int *snaps, blk64_t *blocks)
{
	struct nx_snapstore *store = vol->snap;
	struct ext2_inode_large inode;
	int i;

	*snaps = 0;
	*blocks = 0;
	for (i = 0; store && i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];

		if (!s->deleted)
			continue;
		(*snaps)++;
		if (!nx_inode_read(vol, s->ino, &inode))
			*blocks += ext2fs_get_stat_i_blocks(vol->fs,
					(struct ext2_inode *)&inode) /
				   (vol->fs->blocksize / 512);
	}
}
