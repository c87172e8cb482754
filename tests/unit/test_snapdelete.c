/*
 * test_snapdelete.c - a snapshot delete changes no other snapshot, block
 * for block (docs/snapshots.md, "Delete").
 *
 * The oracle is the strictest form of P5: at every take, the content of
 * every block the snapshot will show for ever - in use at the take, not
 * owned by a snapshot file, not the journal's - is hashed as read
 * through the view.
 * After every delete, and after a remount, every kept snapshot must read
 * the same in each of those blocks: data, block maps, inode tables,
 * directories, bitmaps, descriptors.  The workload spreads writes over a
 * sparse file that reaches past the triple-indirect limit of ext2's
 * 1 KiB blocks, truncates and punches it, and writes a second file
 * through libext2fs's own block allocator (ext2fs_file_write), whose
 * ext2fs_alloc_block() zeroes a block before marking it in use - the
 * door through which issue 15's corruption came.
 *
 * test_delete_hands_over_reused_copies builds the second way issue 15's
 * soak found: a snapshot's only copy of a block dropped at a delete
 * because an older snapshot had meanwhile reused the block itself.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"

#define MAXSNAPS 8

struct kept {
	char name[16];
	blk64_t nblocks;
	uint64_t *hash;		/* per block; 0 = not shown by the snapshot */
};

struct run {
	struct nx_volume *vol;
	char path[256];
	struct nx_cred root;
	ext2_ino_t big, lib;
	unsigned seed;
	struct kept snaps[MAXSNAPS];
	int nsnaps, taken;
};

static unsigned next_rand(struct run *r)
{
	r->seed = r->seed * 1103515245u + 12345u;
	return r->seed >> 8;
}

static uint64_t rand64(struct run *r, uint64_t below)
{
	uint64_t v = ((uint64_t)next_rand(r) << 24) ^ next_rand(r);

	return v % below;
}

static ext2_ino_t new_file(struct run *r, const char *name)
{
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(nx_inode_new(r->vol, &r->root, EXT2_ROOT_INO,
				      S_IFREG | 0644, &ino, &inode), 0);
	ck_assert_int_eq(ext2fs_link(r->vol->fs, EXT2_ROOT_INO, name, ino,
				     EXT2_FT_REG_FILE), 0);
	return ino;
}

static int mark_owned(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t cnt,
		      blk64_t ref, int off, void *priv)
{
	(void)fs; (void)cnt; (void)ref; (void)off;
	ext2fs_mark_block_bitmap2(priv, *blocknr);
	return 0;
}

/*
 * Blocks a snapshot does not show: those snapshot files own now (deleted
 * ones whose hand-over is pending too: they are on the list), and the
 * journal's (written raw and never preserved: a view's log reads through
 * to the live one, and its superblock says there is nothing to replay).
 */
static ext2fs_block_bitmap not_shown(struct run *r)
{
	ext2_ino_t journal = r->vol->fs->super->s_journal_inum;
	ext2_ino_t ino = r->vol->fs->super->s_snapshot_list;
	struct ext2_inode inode;
	ext2fs_block_bitmap owned;

	ck_assert_int_eq(ext2fs_allocate_block_bitmap(r->vol->fs, "owned",
						      &owned), 0);
	if (journal)
		ck_assert_int_eq(ext2fs_block_iterate3(r->vol->fs, journal,
						       BLOCK_FLAG_READ_ONLY,
						       NULL, mark_owned,
						       owned), 0);
	while (ino) {
		ck_assert_int_eq(ext2fs_block_iterate3(r->vol->fs, ino,
						       BLOCK_FLAG_READ_ONLY,
						       NULL, mark_owned,
						       owned), 0);
		ck_assert_int_eq(ext2fs_read_inode(r->vol->fs, ino, &inode),
				 0);
		ino = inode.osd1.linux1.l_i_version;
	}
	return owned;
}

static struct nx_volume *open_view(struct run *r, const char *name)
{
	struct nx_snapinfo info;
	struct nx_volume *view;

	ck_assert_int_eq(nx_snap_find(r->vol, name, &info), 0);
	ck_assert_int_eq(nx_snap_view_open(r->vol, info.ino, &view), 0);
	return view;
}

static uint64_t view_block_hash(struct nx_volume *view, blk64_t blk,
				char *buf)
{
	unsigned bs = view->fs->blocksize;
	uint64_t h;

	ck_assert_int_eq(nx_snap_view_pread(view, buf, bs, blk * bs), 0);
	h = nxt_fnv(NXT_FNV_INIT, buf, bs);
	return h ? h : 1;
}

static void take(struct run *r)
{
	struct kept *k = &r->snaps[r->nsnaps];
	ext2fs_block_bitmap owned;
	struct nx_volume *view;
	blk64_t blk;
	char *buf;

	ck_assert_int_lt(r->nsnaps, MAXSNAPS);
	snprintf(k->name, sizeof(k->name), "s%d", r->taken++);
	ck_assert_int_eq(nx_snap_take(r->vol, k->name, NULL), 0);
	r->nsnaps++;
	owned = not_shown(r);
	view = open_view(r, k->name);
	ck_assert_int_eq(ext2fs_read_block_bitmap(view->fs), 0);
	k->nblocks = ext2fs_blocks_count(view->fs->super);
	k->hash = calloc(k->nblocks, sizeof(*k->hash));
	buf = malloc(view->fs->blocksize);
	ck_assert(k->hash && buf);
	for (blk = view->fs->super->s_first_data_block; blk < k->nblocks;
	     blk++)
		if (ext2fs_test_block_bitmap2(view->fs->block_map, blk) &&
		    !ext2fs_test_block_bitmap2(owned, blk))
			k->hash[blk] = view_block_hash(view, blk, buf);
	free(buf);
	nx_snap_view_close(view);
	ext2fs_free_block_bitmap(owned);
}

static void check_all(struct run *r, const char *what)
{
	int i;

	for (i = 0; i < r->nsnaps; i++) {
		struct kept *k = &r->snaps[i];
		struct nx_volume *view = open_view(r, k->name);
		char *buf = malloc(view->fs->blocksize);
		blk64_t blk, bad = 0, first = 0;

		ck_assert_ptr_nonnull(buf);
		for (blk = 0; blk < k->nblocks; blk++)
			if (k->hash[blk] &&
			    view_block_hash(view, blk, buf) != k->hash[blk] &&
			    !bad++)
				first = blk;
		free(buf);
		nx_snap_view_close(view);
		ck_assert_msg(!bad, "%s: snapshot %s reads %llu changed "
			      "block(s), first %llu", what, k->name,
			      (unsigned long long)bad,
			      (unsigned long long)first);
	}
}

static void forget(struct run *r, int i)
{
	free(r->snaps[i].hash);
	memmove(&r->snaps[i], &r->snaps[i + 1],
		(r->nsnaps - i - 1) * sizeof(r->snaps[0]));
	r->nsnaps--;
}

/*
 * The hand-over after a delete goes on in slices (handover.c): leave it
 * pending, do a few slices of one run each (budget 0), or all of it -
 * what the other snapshots show must not depend on where it stands.
 */
static void reclaim_some(struct run *r)
{
	int more = 1, k;

	switch (next_rand(r) % 3) {
	case 0:
		break;
	case 1:
		for (k = 1 + next_rand(r) % 8; k-- && more; )
			ck_assert_int_eq(nx_snap_reclaim(r->vol, 0, &more), 0);
		break;
	default:
		ck_assert_int_eq(nx_snap_reclaim_all(r->vol), 0);
	}
}

static void delete_now(struct run *r, int i)
{
	ck_assert_int_eq(nx_snap_delete(r->vol, r->snaps[i].name), 0);
	ck_assert_int_eq(nx_snap_reclaim_all(r->vol), 0);
	forget(r, i);
	check_all(r, "after a delete handed over at once");
}

static void delete_at(struct run *r, int i)
{
	char what[64];

	snprintf(what, sizeof(what), "after deleting %s", r->snaps[i].name);
	ck_assert_int_eq(nx_snap_delete(r->vol, r->snaps[i].name), 0);
	/* Gone at once, whatever is left to hand over. */
	ck_assert_int_eq(nx_snap_find(r->vol, r->snaps[i].name, NULL), ENOENT);
	forget(r, i);
	check_all(r, what);
	reclaim_some(r);
	check_all(r, what);
}

/* Writes over a 1 GB sparse file: deep indirect trees on ext2/ext3. */
static void write_big(struct run *r)
{
	size_t len = 1 + rand64(r, 40000), done;
	uint64_t off = rand64(r, 1000000000ULL);
	char *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, next_rand(r), off);
	ck_assert_int_eq(nx_file_write(r->vol, r->big, buf, len, off, &done),
			 0);
	ck_assert_uint_eq(done, len);
	free(buf);
}

/* Writes through libext2fs's allocator (ext2fs_alloc_block). */
static void write_lib(struct run *r)
{
	unsigned len = 1 + (unsigned)rand64(r, 20000), done;
	uint64_t off = rand64(r, 64ULL << 20);
	ext2_file_t file;
	char *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, next_rand(r), off);
	ck_assert_int_eq(ext2fs_file_open(r->vol->fs, r->lib, EXT2_FILE_WRITE,
					  &file), 0);
	ck_assert_int_eq(ext2fs_file_llseek(file, off, EXT2_SEEK_SET, NULL),
			 0);
	ck_assert_int_eq(ext2fs_file_write(file, buf, len, &done), 0);
	ck_assert_uint_eq(done, len);
	ck_assert_int_eq(ext2fs_file_close(file), 0);
	free(buf);
}

static void change(struct run *r, int n)
{
	while (n--) {
		unsigned op = next_rand(r) % 16;

		if (op < 9)
			write_big(r);
		else if (op < 12)
			write_lib(r);
		else if (op < 13)
			ck_assert_int_eq(nx_file_truncate(r->vol, r->big,
				rand64(r, 1000000000ULL)), 0);
		else
			ck_assert_int_eq(nx_file_fallocate(r->vol, r->big,
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				rand64(r, 1000000000ULL), 1 + rand64(r, 1 << 20)),
				0);
	}
}

static void remount(struct run *r)
{
	ck_assert_int_eq(nx_volume_close(r->vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(r->path), 0);
	r->vol = nxt_open(r->path);
	check_all(r, "after a remount");
}

/*
 * _i: flavour.  Rounds of changes and takes; deletes of the one before
 * the active (everything it frees is in the active's COW set), the
 * oldest, a middle one and the newest; a remount now and then.
 */
START_TEST(test_delete_keeps_every_block)
{
	struct run r = { 0 };
	int round;

	nxt_root_cred(&r.root);
	r.seed = (getenv("NEXTFS_SEED") ? (unsigned)atoi(getenv("NEXTFS_SEED"))
					  : 1234) + _i;
	nxt_mkfs(r.path, nxt_flavours[_i], 64);
	r.vol = nxt_open(r.path);
	r.big = new_file(&r, "big");
	r.lib = new_file(&r, "lib");
	for (round = 0; round < 9; round++) {
		change(&r, 60);
		take(&r);
		change(&r, 30);
		switch (round % 7) {
		case 1: case 3: case 5:
			if (r.nsnaps > 1)
				delete_at(&r, r.nsnaps - 2);
			break;
		case 2:
			delete_at(&r, 0);
			break;
		case 4:
			if (r.nsnaps > 2)
				delete_at(&r, 1);
			break;
		case 6:
			delete_at(&r, r.nsnaps - 1);
			remount(&r);
			break;
		}
		if (r.nsnaps == MAXSNAPS)
			delete_at(&r, 0);
	}
	change(&r, 60);
	check_all(&r, "at the end");
	while (r.nsnaps)
		delete_at(&r, (int)rand64(&r, r.nsnaps));
	ck_assert_int_eq(nx_snap_reclaim_all(r.vol), 0);
	ck_assert(!ext2fs_has_feature_has_snapshot(r.vol->fs->super));
	ck_assert_int_eq(nxt_close_and_fsck(r.vol, r.path), 0);
	nxt_unlink(r.path);
}
END_TEST

/* Write block LBLK of INO (one fs block of pattern SEED). */
static void write_block(struct run *r, ext2_ino_t ino, blk64_t lblk,
			unsigned seed)
{
	unsigned bs = r->vol->fs->blocksize;
	char *buf = malloc(bs);
	size_t done;

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, bs, seed, lblk * bs);
	ck_assert_int_eq(nx_file_write(r->vol, ino, buf, bs, lblk * bs, &done),
			 0);
	free(buf);
}

static int first_map_block(ext2_filsys fs, blk64_t *blocknr,
			   e2_blkcnt_t cnt, blk64_t ref, int off, void *priv)
{
	(void)fs; (void)ref; (void)off;
	if (cnt < 0 && !*(blk64_t *)priv)
		*(blk64_t *)priv = *blocknr;
	return 0;
}

/* An indirect or extent-tree block of INO. */
static blk64_t map_block_of(struct run *r, ext2_ino_t ino)
{
	blk64_t blk = 0;

	ck_assert_int_eq(ext2fs_block_iterate3(r->vol->fs, ino,
					       BLOCK_FLAG_READ_ONLY, NULL,
					       first_map_block, &blk), 0);
	ck_assert_uint_ne(blk, 0);
	return blk;
}

/*
 * The next map block libext2fs allocates (ext2fs_alloc_block), forced to
 * the worst choice.  Until then the block is hidden from every other
 * allocation (marked in the bitmap, counts untouched), so that the
 * snapshot copies made on the way do not take it first.
 */
static blk64_t forced_pick;

static void hide_forced_pick(ext2_filsys fs, blk64_t blk)
{
	forced_pick = blk;
	ext2fs_mark_block_bitmap2(fs->block_map, blk);
}

static errcode_t pick_forced(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	/*
	 * ext2fs_new_block2() calls this hook too, with fs->get_alloc_block
	 * cleared for the call; ext2fs_alloc_block() leaves it set.  Only
	 * the latter allocates block-map blocks.
	 */
	if (forced_pick && fs->get_alloc_block == pick_forced) {
		/* alloc_block marks it (and counts it) right after. */
		ext2fs_unmark_block_bitmap2(fs->block_map, forced_pick);
		*ret = forced_pick;
		forced_pick = 0;
		return 0;
	}
	return ext2fs_new_block2(fs, goal, NULL, ret);
}

#define PAD_BYTES (5 << 20)
#define G_BLOCKS 400	/* more extents than a leaf block holds (340) */

/*
 * _i: flavour.  Snapshots P, Q, O, S, oldest first.  File F's map block
 * N is in use at O's take; with S active, F's map changes (S copies N)
 * and F is truncated (N becomes free: S's copy is the only one of what
 * O shows there).  Deleting Q makes P adopt blocks, and the allocator
 * gives P's new map block exactly N.  Deleting S must then still hand
 * its copy of N to O, although an older snapshot owns N now: deciding
 * by the current owner dropped it and O read P's block map as F's.
 */
START_TEST(test_delete_hands_over_reused_copies)
{
	void *old_cb = NULL;
	struct run r = { 0 };
	ext2_ino_t f, g, h, pad;
	blk64_t n, i;
	int flavour = _i;

	nxt_root_cred(&r.root);
	nxt_mkfs(r.path, nxt_flavours[flavour], 64);
	r.vol = nxt_open(r.path);
	f = new_file(&r, "f");
	g = new_file(&r, "g");
	h = new_file(&r, "h");
	pad = new_file(&r, "pad");
	/* Keep G's blocks away from what P maps anyway (metadata, dirs). */
	for (i = 0; i < PAD_BYTES / r.vol->fs->blocksize; i++)
		write_block(&r, pad, i, 6);
	/* F: every other block (extents need a leaf, block maps an IND). */
	for (i = 0; i < 40; i += 2)
		write_block(&r, f, i, 1);
	/*
	 * G: fragmented, so that P adopting its blocks needs new map blocks:
	 * indirect blocks, or a split of a full extent leaf.
	 */
	for (i = 0; i < G_BLOCKS; i++) {
		write_block(&r, g, i, 2);
		write_block(&r, h, i, 3);
	}
	for (i = 0; i < PAD_BYTES / r.vol->fs->blocksize; i++)
		write_block(&r, pad, PAD_BYTES / r.vol->fs->blocksize + i, 6);
	n = map_block_of(&r, f);
	take(&r);				/* P */
	take(&r);				/* Q */
	for (i = 0; i < G_BLOCKS; i++)		/* moved into Q; P needs them */
		write_block(&r, g, i, 4);
	take(&r);				/* O: shows F through N */
	take(&r);				/* S */
	write_block(&r, f, 41, 5);		/* S copies N ... */
	write_block(&r, f, 3, 5);
	ck_assert_int_eq(nx_file_truncate(r.vol, f, 0), 0);	/* ... N freed */
	/* (The sync also maps S's copies: no map block for S is due.) */
	ck_assert_int_eq(nx_volume_sync(r.vol), 0);
	ck_assert(!ext2fs_test_block_bitmap2(r.vol->fs->block_map, n));

	hide_forced_pick(r.vol->fs, n);
	ext2fs_set_alloc_block_callback(r.vol->fs, pick_forced,
		(errcode_t (**)(ext2_filsys, blk64_t, blk64_t *))&old_cb);
	delete_now(&r, 1);			/* Q: P adopts, maps with N */
	ext2fs_set_alloc_block_callback(r.vol->fs,
		(errcode_t (*)(ext2_filsys, blk64_t, blk64_t *))old_cb, NULL);
	ck_assert_msg(!forced_pick, "P's adoption allocated no map block");
	ck_assert(ext2fs_test_block_bitmap2(r.vol->fs->block_map, n));

	delete_now(&r, 2);			/* S: O must get its copy of N */
	remount(&r);
	while (r.nsnaps)
		delete_at(&r, 0);
	ck_assert_int_eq(nx_snap_reclaim_all(r.vol), 0);
	ck_assert_int_eq(nxt_close_and_fsck(r.vol, r.path), 0);
	nxt_unlink(r.path);
}
END_TEST

/*
 * _i: flavour.  The hand-over of a delete, slice by slice: the name is
 * free at once (a take may reuse it while the old one's blocks are still
 * being handed over), every slice of budget 0 (one run) leaves less
 * pending and every kept snapshot as it was, and what is pending when the
 * volume closes is found and finished after the next open.
 */
START_TEST(test_handover_slices_and_resume)
{
	struct run r = { 0 };
	blk64_t held, before;
	int snaps, more = 1, slices = 0;

	nxt_root_cred(&r.root);
	r.seed = 77 + _i;
	nxt_mkfs(r.path, nxt_flavours[_i], 64);
	r.vol = nxt_open(r.path);
	r.big = new_file(&r, "big");
	r.lib = new_file(&r, "lib");
	change(&r, 80);
	take(&r);			/* s0: what s1 hands over to */
	change(&r, 80);
	take(&r);			/* s1 */
	change(&r, 80);			/* s1 keeps what this changes */
	take(&r);			/* s2 */
	ck_assert_int_eq(nx_snap_delete(r.vol, "s1"), 0);
	forget(&r, 1);
	nx_snap_pending(r.vol, &snaps, &held);
	ck_assert_int_eq(snaps, 1);
	ck_assert_uint_gt(held, 0);
	/* The name is free: a new s1, while the old one is pending. */
	ck_assert_int_eq(nx_snap_find(r.vol, "s1", NULL), ENOENT);
	change(&r, 10);
	r.taken = 1;
	take(&r);
	ck_assert_str_eq(r.snaps[r.nsnaps - 1].name, "s1");
	check_all(&r, "with the hand-over pending");
	/* A few slices, each leaving less. */
	while (more && slices < 3) {
		before = held;
		ck_assert_int_eq(nx_snap_reclaim(r.vol, 0, &more), 0);
		nx_snap_pending(r.vol, &snaps, &held);
		ck_assert_uint_lt(held, before);
		slices++;
		check_all(&r, "after a slice");
	}
	ck_assert_msg(more, "the hand-over took fewer than 4 slices");
	/* Closed in the middle: the next open finds and finishes it. */
	remount(&r);
	nx_snap_pending(r.vol, &snaps, &held);
	ck_assert_int_eq(snaps, 1);
	ck_assert_int_eq(nx_snap_reclaim_all(r.vol), 0);
	nx_snap_pending(r.vol, &snaps, &held);
	ck_assert_int_eq(snaps, 0);
	check_all(&r, "after the hand-over");
	remount(&r);
	while (r.nsnaps)
		delete_now(&r, 0);
	ck_assert(!ext2fs_has_feature_has_snapshot(r.vol->fs->super));
	ck_assert_int_eq(nxt_close_and_fsck(r.vol, r.path), 0);
	nxt_unlink(r.path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("snapdelete");
	TCase *tc = tcase_create("blocks");

	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, test_delete_keeps_every_block, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_delete_hands_over_reused_copies, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_handover_slices_and_resume, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
