/*
 * txn.c - transactions: hold metadata, defer frees, commit (see txn.h).
 *
 * The pieces, and why each is there:
 *  - blkio holds every metadata write in memory; the COW hook runs when a
 *    block is first held, while the device still has the content the
 *    active snapshot needs (blkio.c);
 *  - the flush hook (volume.h; the snapshot layer's nx_snap_flush) brings
 *    bitmaps, descriptors, superblock and the snapshot's pending block
 *    map into the held set, to a fixed point;
 *  - the held set is logged as one JBD2 transaction and only then written
 *    in place (journal.c) - or, without a journal, written in the P10
 *    order (write_ordered);
 *  - frees are held back until their commit is durable: libext2fs would
 *    hand a block freed a moment ago to the next allocation, whose data
 *    or snapshot copy (written at once) would then overwrite a block the
 *    committed metadata still gives to a file.  The commit writes them
 *    as free all the same (nx_meta_write_as_free).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <et/com_err.h>
#include "nextfs/txn.h"
#include "nextfs/blkio.h"
#include "nextfs/journal.h"
#include "nextfs/meta.h"
#include "nextfs/volume.h"

/* Commit at the latest at this many held blocks (memory: 8192 x 4 KiB). */
#define MAX_HELD 8192

struct nx_txn {
	struct nx_volume *vol;
	struct nx_journal *journal;	/* NULL: ext2, ordered writes only */
	ext2fs_block_bitmap deferred;	/* freed since the last commit */
	blk64_t ndeferred;
	ext2fs_block_bitmap fresh;	/* allocated since it, unreferenced */
	struct timespec started;	/* first change since the last commit */
	int dirty;
	int committing;			/* inside nx_txn_commit */
	errcode_t error;		/* the volume failed (fail_volume) */
	void (*old_stats)(ext2_filsys, blk64_t, int);
	void (*old_range_stats)(ext2_filsys, blk64_t, blk_t, int);
};

static struct nx_txn *txn_of(ext2_filsys fs)
{
	return nx_volume_of(fs)->txn;
}

static void note_change(struct nx_txn *t)
{
	if (!t->dirty) {
		clock_gettime(CLOCK_MONOTONIC, &t->started);
		t->dirty = 1;
	}
}

/*
 * A block was freed (INUSE < 0) or allocated.  Keep a freed block marked
 * in the bitmap until the commit, unless space is short: then reuse wins
 * over the guarantee for deleted files' contents (never over P10, which
 * snapshots' moves keep by themselves).  This runs before the snapshot
 * layer's callback, which may take the block over (+1) at once.
 */
static void track_block(struct nx_txn *t, ext2_filsys fs, blk64_t blk,
			int inuse)
{
	int in_range = blk >= fs->super->s_first_data_block &&
		       blk < ext2fs_blocks_count(fs->super);

	if (!in_range)
		return;
	if (inuse > 0) {
		if (t->ndeferred && ext2fs_test_block_bitmap2(t->deferred, blk)) {
			/* The last commit still gives it to its old owner. */
			ext2fs_unmark_block_bitmap2(t->deferred, blk);
			t->ndeferred--;
		} else {
			/*
			 * Fresh: no committed metadata owns it.  (Except a
			 * block freed in this same commit while space was
			 * short, below: not deferred, it looks fresh, and a
			 * crash may leave the deleted owner, still on disk,
			 * with its new content - the price of reuse there,
			 * whichever step writes it.)
			 */
			ext2fs_mark_block_bitmap2(t->fresh, blk);
		}
		return;
	}
	ext2fs_unmark_block_bitmap2(t->fresh, blk);
	if (t->ndeferred >= ext2fs_free_blocks_count(fs->super) / 2)
		return;
	if (ext2fs_test_block_bitmap2(t->deferred, blk))
		return;
	ext2fs_mark_block_bitmap2(fs->block_map, blk);
	ext2fs_mark_block_bitmap2(t->deferred, blk);
	t->ndeferred++;
}

static void on_block_stats(ext2_filsys fs, blk64_t blk, int inuse)
{
	struct nx_txn *t = txn_of(fs);

	if (t) {
		note_change(t);
		track_block(t, fs, blk, inuse);
	}
	if (t && t->old_stats)
		t->old_stats(fs, blk, inuse);
}

/*
 * Is [BLK, BLK + NUM) inside the volume, with no block freed since the
 * last commit in it (track_block would find each of them fresh)?
 */
static int fresh_run(struct nx_txn *t, ext2_filsys fs, blk64_t blk,
		     blk_t num)
{
	blk64_t found;

	if (blk < fs->super->s_first_data_block ||
	    blk + num > ext2fs_blocks_count(fs->super))
		return 0;
	return !t->ndeferred ||
	       ext2fs_find_first_set_block_bitmap2(t->deferred, blk,
						   blk + num - 1, &found) != 0;
}

/* One block of a range (see on_block_range_stats). */
static void track_range_block(struct nx_txn *t, ext2_filsys fs, blk64_t blk,
			      int inuse)
{
	if (inuse < 0 && ext2fs_test_block_bitmap2(t->fresh, blk))
		ext2fs_unmark_block_bitmap2(t->fresh, blk);
	else
		track_block(t, fs, blk, inuse);
}

/*
 * Ranges come from nextfs's allocator (nx_meta_alloc_stats_range: the
 * range as it is; libext2fs 1.47.0 alone would pass NUM = 0).  Its
 * allocations must be marked fresh like any other: a new indirect block
 * is one, and the ordered commit must write it before the inode that
 * points at it.  Its frees are of blocks the same operation just
 * allocated, which no commit has seen in use: they may be reused at
 * once, so they are not held back.
 */
static void on_block_range_stats(ext2_filsys fs, blk64_t blk, blk_t num,
				 int inuse)
{
	struct nx_txn *t = txn_of(fs);
	blk_t i;

	if (t) {
		note_change(t);
		if (inuse > 0 && fresh_run(t, fs, blk, num))
			/* A run of file data, maybe long: in one go. */
			ext2fs_mark_block_bitmap_range2(t->fresh, blk, num);
		else
			for (i = 0; i < num; i++)
				track_range_block(t, fs, blk + i, inuse);
	}
	if (t && t->old_range_stats)
		t->old_range_stats(fs, blk, num, inuse);
}

/*
 * After a commit: the blocks it freed on disk may be reused now.  (The
 * commit wrote them as free - nx_meta_write_as_free - while they stayed
 * marked in memory, so that nothing written before the commit, such as a
 * snapshot copy or a block map written ahead without a journal, could
 * land on a block the old on-disk state still uses.)
 */
static void release_deferred(struct nx_txn *t)
{
	ext2_filsys fs = t->vol->fs;
	blk64_t start = fs->super->s_first_data_block, end, blk;

	if (!t->ndeferred)
		return;
	end = ext2fs_blocks_count(fs->super) - 1;
	while (start <= end &&
	       !ext2fs_find_first_set_block_bitmap2(t->deferred, start, end,
						    &blk)) {
		ext2fs_unmark_block_bitmap2(fs->block_map, blk);
		start = blk + 1;
	}
	ext2fs_clear_block_bitmap(t->deferred);
	t->ndeferred = 0;
}

void nx_txn_release_frees(struct nx_volume *vol)
{
	if (vol->txn)
		release_deferred(vol->txn);
}

errcode_t nx_txn_recover(ext2_filsys fs, struct nx_blkio *io,
			 unsigned *replayed, char *msg, size_t msglen)
{
	struct nx_journal *j = NULL;
	errcode_t err;

	*replayed = 0;
	err = nx_journal_load(fs, io, &j, msg, msglen);
	if (err || !j)
		return err;
	if (nx_journal_needs_recovery(j)) {
		err = nx_journal_recover(j, replayed);
		if (err)
			nx_set_msg(msg, msglen, "journal replay failed: %s; run "
				   "'nextfs check --repair'", error_message(err));
	}
	nx_journal_free(j);
	return err;
}

/*
 * A crash left the journal needing recovery: replay it before libext2fs
 * reads anything replay may change.  The descriptors may be torn (a crash
 * in the middle of writing them in place), hence a lenient open of our
 * own, closed again without writing anything.  Read-only opens cannot
 * replay: they refuse a log that holds transactions.
 */
errcode_t nx_txn_replay_device(const char *device, int rw, char *msg,
			       size_t msglen)
{
	int rdonly = !rw;
	int oflags = EXT2_FLAG_64BITS | EXT2_FLAG_FORCE | EXT2_FLAG_SKIP_MMP |
		     EXT2_FLAG_IGNORE_CSUM_ERRORS | (rdonly ? 0 : EXT2_FLAG_RW);
	struct nx_journal *j = NULL;
	unsigned replayed = 0;
	ext2_filsys fs;
	errcode_t err;

	if (ext2fs_open2(device, NULL, oflags, 0, 0, nx_blkio_manager,
			 &fs))
		return 0;	/* open_fs() reports why */
	/*
	 * Read-write opens look at the log even without needs_recovery: a
	 * crash during our own first commit leaves a log but no flag yet.
	 */
	if (!ext2fs_has_feature_journal(fs->super) ||
	    (rdonly && !ext2fs_has_feature_journal_needs_recovery(fs->super))) {
		err = 0;
	} else if (rdonly) {
		err = nx_journal_load(fs, nx_blkio_from_channel(fs->io), &j,
				      msg, msglen);
		if (!err && nx_journal_needs_recovery(j)) {
			nx_set_msg(msg, msglen, "the journal needs recovery; "
				   "mount the volume read-write once or run "
				   "'nextfs check --repair' (both replay it)");
			err = EXT2_ET_UNSUPP_FEATURE;
		}
		nx_journal_free(j);
	} else {
		err = nx_txn_recover(fs, nx_blkio_from_channel(fs->io),
				     &replayed, msg, msglen);
		if (!err && replayed)
			fprintf(stderr, "nextfs: %s: replayed %u journal "
				"transaction(s)\n", device, replayed);
	}
	fs->flags &= ~EXT2_FLAG_DIRTY;
	ext2fs_close_free(&fs);
	return err;
}

errcode_t nx_txn_start(struct nx_volume *vol, char *msg, size_t msglen)
{
	ext2_filsys fs = vol->fs;
	struct nx_txn *t;
	errcode_t err;

	t = calloc(1, sizeof(*t));
	if (!t)
		return EXT2_ET_NO_MEMORY;
	t->vol = vol;
	err = nx_journal_load(fs, vol->io, &t->journal, msg, msglen);
	if (!err && t->journal)
		err = nx_journal_prepare(t->journal, fs);
	if (err)
		goto fail;
	err = ext2fs_allocate_block_bitmap(fs, "deferred frees", &t->deferred);
	if (!err)
		err = ext2fs_allocate_block_bitmap(fs, "new blocks", &t->fresh);
	if (err)
		goto fail;
	vol->txn = t;	/* first: the callbacks find it through the fs */
	nx_meta_write_as_free(vol, t->deferred);
	ext2fs_set_block_alloc_stats_callback(fs, on_block_stats,
					      &t->old_stats);
	ext2fs_set_block_alloc_stats_range_callback(fs, on_block_range_stats,
						    &t->old_range_stats);
	nx_blkio_txn_begin(vol->io);
	return 0;
fail:
	if (t->deferred)
		ext2fs_free_block_bitmap(t->deferred);
	nx_journal_free(t->journal);
	free(t);
	return err;
}

/* Ordered write, phase picks (see write_ordered): the block_rank hook. */
static int pick_rank(struct nx_txn *t, uint64_t off, int rank)
{
	const struct nx_volume_hooks *h = t->vol->hooks;

	return h && h->block_rank &&
	       h->block_rank(t->vol, off / t->vol->fs->blocksize) == rank;
}

/* A phase's picks, counted: a sync after it only if any. */
struct counted_pick {
	struct nx_txn *t;
	size_t picked;
};

static int counted(struct counted_pick *p, int yes)
{
	p->picked += yes != 0;
	return yes;
}

/*
 * Blocks allocated since the last commit (new indirect, extent tree and
 * directory blocks, also of snapshot files' maps): nothing on the device
 * points at them yet, so writing them first can only help.
 */
static int pick_fresh(void *priv, uint64_t off)
{
	struct counted_pick *p = priv;

	return counted(p, ext2fs_test_block_bitmap2(p->t->fresh,
					off / p->t->vol->fs->blocksize));
}

/*
 * Snapshot map blocks written in place: they may point at the fresh
 * blocks, whose content must be durable first - a fresh block often
 * held something else a moment ago (a copy a deleted snapshot dropped),
 * which would read as block pointers.
 */
static int pick_map(void *priv, uint64_t off)
{
	struct counted_pick *p = priv;

	return counted(p, pick_rank(p->t, off, NX_VOL_RANK_MAP));
}

static int pick_active_inode(void *priv, uint64_t off)
{
	struct counted_pick *p = priv;

	return counted(p, pick_rank(p->t, off, NX_VOL_RANK_ACTIVE));
}

/* The other snapshot inodes' blocks. */
static int pick_snap_inodes(void *priv, uint64_t off)
{
	struct counted_pick *p = priv;

	return counted(p, pick_rank(p->t, off, NX_VOL_RANK_INODE));
}

/*
 * No journal: copies are already on the device; make them durable, then
 * the blocks allocated since the last commit (tree blocks before what
 * points at them), then the snapshots' block maps, then the active
 * snapshot's inode, then the other snapshot inodes, then the rest.  The
 * active snapshot's inode comes alone: the block map it roots may be
 * what maps the copy of an inode-table block holding another snapshot's
 * inode (and live inodes), which is written in place only after it.
 * A crash anywhere leaves every block a snapshot maps either
 * unmapped-and-unchanged or mapped-and-durable, and no inode, indirect
 * block or extent pointing at a new block that was never written
 * (e2fsck would read its old content as block pointers or directory
 * entries).
 */
static errcode_t write_ordered(struct nx_txn *t)
{
	static int (*const phases[])(void *, uint64_t) = {
		pick_fresh, pick_map, pick_active_inode, pick_snap_inodes,
	};
	struct nx_blkio *io = t->vol->io;
	errcode_t err;
	size_t i;

	err = nx_blkio_sync(io);
	/* A phase that wrote nothing needs no sync: the last one covers it. */
	for (i = 0; !err && i < sizeof(phases) / sizeof(phases[0]); i++) {
		struct counted_pick p = { t, 0 };

		err = nx_blkio_write_held(io, phases[i], &p);
		if (!err && p.picked)
			err = nx_blkio_sync(io);
	}
	if (!err)
		err = nx_blkio_write_held(io, NULL, NULL);
	if (!err)
		err = nx_blkio_sync(io);
	return err;
}

static errcode_t write_journaled(struct nx_txn *t)
{
	struct nx_blkio *io = t->vol->io;
	struct nx_jblock *v = NULL;
	size_t n = 0;
	errcode_t err;

	err = nx_blkio_held_list(io, &v, &n);
	if (err)
		return err;
	if (!n) {
		free(v);
		return nx_blkio_sync(io);	/* fsync: the data */
	}
	if (nx_journal_cost(t->journal, n) > nx_journal_capacity(t->journal)) {
		free(v);
		fprintf(stderr, "nextfs: %s: a transaction of %zu blocks does "
			"not fit the journal; writing it in order instead\n",
			t->vol->device, n);
		return write_ordered(t);
	}
	err = nx_journal_log(t->journal, v, n);
	free(v);	/* points into blkio's held blocks: done with them */
	/* In place; durable at the next commit's first sync (journal.c). */
	if (!err)
		err = nx_blkio_write_held(io, NULL, NULL);
	if (!err)
		err = nx_journal_checkpointed(t->journal);
	return err;
}

/*
 * Like the kernel's errors=remount-ro: after a failed commit or a refused
 * metadata write, what memory holds may be half an operation.  Nothing
 * more is committed; the device keeps the last commit (with a journal:
 * exactly; without: as the ordered writes left it), and the volume turns
 * read-only until it is opened again.
 */
static errcode_t fail_volume(struct nx_txn *t, errcode_t err)
{
	if (!t->error) {
		t->error = err;
		fprintf(stderr, "nextfs: %s: %s; the volume is read-only now "
			"(the last commit is intact); unmount and mount it "
			"again\n", t->vol->device, error_message(err));
	}
	t->vol->flags |= NX_VOL_RDONLY;
	return t->error;
}

errcode_t nx_txn_commit(struct nx_volume *vol)
{
	struct nx_txn *t = vol->txn;
	errcode_t err;

	if (!t)
		return 0;
	if (t->error)
		return t->error;
	err = nx_blkio_txn_failed(vol->io);
	if (err)
		return fail_volume(t, err);
	t->committing = 1;
	err = nx_volume_flush(vol);
	t->committing = 0;
	if (!err)
		err = nx_blkio_txn_failed(vol->io);
	if (!err)
		err = t->journal ? write_journaled(t) : write_ordered(t);
	if (err)
		return fail_volume(t, err);
	release_deferred(t);
	ext2fs_clear_block_bitmap(t->fresh);
	t->dirty = 0;
	return 0;
}

int nx_txn_committing(struct nx_volume *vol)
{
	return vol->txn && vol->txn->committing;
}

blk64_t nx_txn_held_frees(struct nx_volume *vol)
{
	return vol->txn ? vol->txn->ndeferred : 0;
}

int nx_txn_due(struct nx_volume *vol)
{
	struct nx_txn *t = vol->txn;
	struct timespec now;
	size_t held;

	if (!t)
		return 0;
	held = nx_blkio_held_count(vol->io);
	if (t->ndeferred > 4096 ||
	    t->ndeferred > ext2fs_free_blocks_count(vol->fs->super) / 8)
		return 1;
	if (held > MAX_HELD ||
	    (t->journal && held > nx_journal_capacity(t->journal) / 2))
		return 1;
	if (!t->dirty && !held)
		return 0;
	if (!t->dirty)
		note_change(t);
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec - t->started.tv_sec >= NX_TXN_COMMIT_INTERVAL;
}

errcode_t nx_txn_stop(struct nx_volume *vol)
{
	struct nx_txn *t = vol->txn;
	errcode_t err;

	if (!t)
		return 0;
	err = nx_txn_commit(vol);
	if (!err && t->journal)
		err = nx_journal_close(t->journal);
	nx_txn_abort(vol);
	return err;
}

void nx_txn_abort(struct nx_volume *vol)
{
	struct nx_txn *t = vol->txn;
	ext2_filsys fs = vol->fs;
	void (*dummy)(ext2_filsys, blk64_t, int);
	void (*dummy_range)(ext2_filsys, blk64_t, blk_t, int);

	if (!t)
		return;
	/* What is still held dies with us, as in a crash. */
	nx_blkio_drop_held(vol->io);
	nx_blkio_txn_end(vol->io);
	nx_meta_write_as_free(vol, NULL);
	ext2fs_set_block_alloc_stats_callback(fs, t->old_stats, &dummy);
	ext2fs_set_block_alloc_stats_range_callback(fs, t->old_range_stats,
						    &dummy_range);
	nx_journal_free(t->journal);
	ext2fs_free_block_bitmap(t->deferred);
	ext2fs_free_block_bitmap(t->fresh);
	free(t);
	vol->txn = NULL;
}
