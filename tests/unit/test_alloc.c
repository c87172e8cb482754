/*
 * test_alloc.c - block allocation when free space is cut into short runs.
 *
 * The test holds free blocks in use itself (a "hog" bitmap, with the
 * accounting done as for any allocation) to cut the free space up in a
 * known pattern, with the volume's last block in use, then allocates,
 * writes and fallocates into what is left.  Every case runs in libcheck's
 * forked child under its timeout: an allocator that searches forever
 * (libext2fs 1.47.0's ext2fs_new_range with EXT2_NEWRANGE_MIN_LENGTH in
 * exactly this state) fails the case instead of hanging the suite.
 * Before closing, the hogged blocks are given back, so that e2fsck -fn
 * sees a clean volume.
 */
/* White-box: nx_fmap_new_blocks itself is under test. */
#define NX_FILE_INTERNAL
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"

/* Which free blocks stay free: every other, every third. */
static int every_other(blk64_t b)
{
	return b % 2 == 0;
}

static int every_third(blk64_t b)
{
	return b % 3 == 0;
}

/*
 * Take every free block that STAYS_FREE rejects, and the volume's last
 * block, into HOG.
 */
static ext2fs_block_bitmap fragment(struct nx_volume *vol,
				    int (*stays_free)(blk64_t))
{
	ext2_filsys fs = vol->fs;
	blk64_t b, last = ext2fs_blocks_count(fs->super) - 1;
	ext2fs_block_bitmap hog;

	ck_assert_int_eq(ext2fs_allocate_block_bitmap(fs, "hog", &hog), 0);
	for (b = fs->super->s_first_data_block; b <= last; b++) {
		if (ext2fs_test_block_bitmap2(fs->block_map, b) ||
		    (stays_free(b) && b != last))
			continue;
		ext2fs_block_alloc_stats2(fs, b, +1);
		ext2fs_mark_block_bitmap2(hog, b);
	}
	return hog;
}

/* Give the hogged blocks in [FROM, TO] back, and commit the frees. */
static void unhog(struct nx_volume *vol, ext2fs_block_bitmap hog,
		  blk64_t from, blk64_t to)
{
	blk64_t b;

	for (b = from; b <= to; b++) {
		if (!ext2fs_test_block_bitmap2(hog, b))
			continue;
		ext2fs_unmark_block_bitmap2(hog, b);
		ext2fs_block_alloc_stats2(vol->fs, b, -1);
	}
	/* Frees are reused only after their commit (txn.h). */
	ck_assert_int_eq(nx_volume_sync(vol), 0);
}

static void unhog_all(struct nx_volume *vol, ext2fs_block_bitmap hog)
{
	unhog(vol, hog, vol->fs->super->s_first_data_block,
	      ext2fs_blocks_count(vol->fs->super) - 1);
	ext2fs_free_block_bitmap(hog);
}

/*
 * Free space in 1-block runs: every request, however large, gets one
 * free block, from wherever its goal lies, until exactly the free blocks
 * are used up; then ENOSPC.
 */
START_TEST(test_allocation_takes_every_fragment)
{
	int (*const patterns[2])(blk64_t) = { every_other, every_third };
	char path[256];
	struct nx_volume *vol;
	ext2fs_block_bitmap hog, mine;
	blk64_t free0, taken = 0, goal, pblk, got, last, b;
	errcode_t err;
	int p;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	vol = nxt_open(path);
	last = ext2fs_blocks_count(vol->fs->super) - 1;
	for (p = 0; p < 2; p++) {
		hog = fragment(vol, patterns[p]);
		ck_assert_int_eq(ext2fs_allocate_block_bitmap(vol->fs, "mine",
							      &mine), 0);
		free0 = ext2fs_free_blocks_count(vol->fs->super);
		ck_assert_uint_gt(free0, 100);
		/* The goal moves about: middle, last block, start. */
		goal = last / 2;
		for (taken = 0;; taken += got) {
			err = nx_fmap_new_blocks(vol, goal, 256, 0, &pblk,
						 &got);
			if (err)
				break;
			ck_assert_uint_eq(got, 1);
			ck_assert(!ext2fs_test_block_bitmap2(hog, pblk));
			ck_assert(!ext2fs_test_block_bitmap2(mine, pblk));
			ext2fs_mark_block_bitmap2(mine, pblk);
			goal = taken % 3 == 0 ? last :
			       taken % 3 == 1 ? 0 : pblk + 1;
		}
		ck_assert_int_eq(err, ENOSPC);
		ck_assert_uint_eq(taken, free0);
		ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), 0);
		for (b = vol->fs->super->s_first_data_block; b <= last; b++)
			if (ext2fs_test_block_bitmap2(mine, b))
				ext2fs_block_alloc_stats2(vol->fs, b, -1);
		ext2fs_free_block_bitmap(mine);
		unhog_all(vol, hog);
	}
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * The start of LEN blocks in the second half of the volume that are all
 * either free or in HOG (short free runs lie before it).
 */
static blk64_t hogged_window(struct nx_volume *vol, ext2fs_block_bitmap hog,
			     blk64_t len)
{
	ext2_filsys fs = vol->fs;
	blk64_t b, start = ext2fs_blocks_count(fs->super) / 2;

	for (b = start; b < ext2fs_blocks_count(fs->super); b++) {
		if (ext2fs_test_block_bitmap2(fs->block_map, b) &&
		    !ext2fs_test_block_bitmap2(hog, b))
			start = b + 1;
		else if (b + 1 - start == len)
			return start;
	}
	ck_abort_msg("no window of %llu blocks to free", (unsigned long long)len);
	return 0;
}

/*
 * A search that found no long run is not repeated on every allocation;
 * but once blocks are freed into a long run, the next request gets it
 * whole.
 */
START_TEST(test_long_run_found_again_after_frees)
{
	char path[256];
	struct nx_volume *vol;
	ext2fs_block_bitmap hog;
	blk64_t pblk, got, pblk2, got2, from;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	vol = nxt_open(path);
	hog = fragment(vol, every_other);
	ck_assert_int_eq(nx_fmap_new_blocks(vol, 0, 256, 0, &pblk, &got), 0);
	ck_assert_uint_eq(got, 1);
	from = hogged_window(vol, hog, 300);
	unhog(vol, hog, from, from + 299);
	ck_assert_int_eq(nx_fmap_new_blocks(vol, 0, 256, 0, &pblk2, &got2),
			 0);
	ck_assert_uint_eq(got2, 256);
	ck_assert_uint_ge(pblk2, from);
	ck_assert_uint_le(pblk2 + got2, from + 300);
	ext2fs_block_alloc_stats_range(vol->fs, pblk2, (blk_t)got2, -1);
	ext2fs_block_alloc_stats2(vol->fs, pblk, -1);
	unhog_all(vol, hog);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static ext2_ino_t new_file(struct nx_volume *vol, const char *name)
{
	struct nx_cred root;
	ext2_ino_t ino = 0;

	nxt_root_cred(&root);
	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, name,
				  S_IFREG | 0644, 0, &ino), 0);
	return ino;
}

/* Write LEN bytes of pattern SEED at OFF, all of it. */
static void put(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
		size_t len, unsigned seed)
{
	char *buf = malloc(len);
	size_t done = 0;

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, seed, off);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, len, off, &done), 0);
	ck_assert_uint_eq(done, len);
	free(buf);
}

/* Bytes [OFF, OFF + LEN) of INO (of VOL: live or a view) are SEED's. */
static void check(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
		  size_t len, unsigned seed)
{
	char *buf = malloc(len), *want = malloc(len);
	size_t got = 0;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(want);
	nxt_pattern(want, len, seed, off);
	ck_assert_int_eq(nx_file_read(vol, ino, buf, len, off, &got), 0);
	ck_assert_uint_eq(got, len);
	ck_assert(memcmp(buf, want, len) == 0);
	free(buf);
	free(want);
}

static void check_zeros(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
			size_t len)
{
	char *buf = malloc(len), *zero = calloc(1, len);
	size_t got = 0;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(zero);
	ck_assert_int_eq(nx_file_read(vol, ino, buf, len, off, &got), 0);
	ck_assert_uint_eq(got, len);
	ck_assert(memcmp(buf, zero, len) == 0);
	free(buf);
	free(zero);
}

/*
 * The data path in 1-block fragments: a new file, an append, fallocate
 * (extent-mapped files), and an overwrite under a snapshot (the
 * overwritten blocks move into it, the file gets new ones), all read back.
 */
START_TEST(test_write_into_fragments)
{
	const size_t mib = 1 << 20;
	char path[256];
	struct nx_volume *vol, *view;
	struct nx_snapinfo info;
	ext2fs_block_bitmap hog;
	ext2_ino_t a, b;
	struct stat st;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	a = new_file(vol, "a");
	put(vol, a, 0, mib, 1);
	ck_assert_int_eq(nx_snap_take(vol, "s", &info), 0);
	hog = fragment(vol, every_other);

	b = new_file(vol, "b");
	put(vol, b, 0, mib, 2);
	put(vol, b, mib, 100000, 3);
	put(vol, a, 4096, mib / 2, 4);
	if (_i >= 2) {
		ck_assert_int_eq(nx_file_fallocate(vol, b, 0, 2 * mib,
						   mib / 4), 0);
		ck_assert_int_eq(nx_getattr(vol, b, &st), 0);
		ck_assert_uint_eq(st.st_size, 2 * mib + mib / 4);
		ck_assert_int_eq(nx_file_fallocate(vol, b,
						   FALLOC_FL_ZERO_RANGE,
						   mib / 2, 8192), 0);
	}
	check(vol, b, 0, mib / 2, 2);
	if (_i >= 2) {
		check_zeros(vol, b, mib / 2, 8192);
		check(vol, b, mib / 2 + 8192, mib / 2 - 8192, 2);
		check_zeros(vol, b, mib + 100000, mib - 100000 + mib / 4);
	} else {
		check(vol, b, mib / 2, mib / 2, 2);
	}
	check(vol, b, mib, 100000, 3);
	check(vol, a, 0, 4096, 1);
	check(vol, a, 4096, mib / 2, 4);
	check(vol, a, 4096 + mib / 2, mib / 2 - 4096, 1);
	ck_assert_int_eq(nx_snap_view_open(vol, info.ino, &view), 0);
	check(view, a, 0, mib, 1);
	nx_snap_view_close(view);

	unhog_all(vol, hog);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * A case per test (CK_RUN_CASE picks one), each flavour in its own
 * forked child; the timeout turns an allocator that never returns into
 * a failure (a passing case takes about a second, three under ASan).
 */
static Suite *alloc_suite(void)
{
	const TTest *const cases[] = {
		test_allocation_takes_every_fragment,
		test_long_run_found_again_after_frees,
		test_write_into_fragments,
	};
	Suite *s = suite_create("alloc");
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		TCase *tc = tcase_create(cases[i]->name);

		tcase_set_timeout(tc, 15);
		tcase_add_loop_test(tc, cases[i], 0, NXT_NFLAVOURS);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	return nxt_run_suite(alloc_suite());
}
