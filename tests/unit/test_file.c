/*
 * test_file.c - the file data path: reads and writes against an in-memory
 * reference, sparse files across the indirect-tree boundaries, large
 * streaming I/O (and how few device requests it takes), truncate,
 * fallocate (keep-size, punch, zero-range), SEEK_DATA/SEEK_HOLE, inline
 * data, ENOSPC, EFBIG and overwrites under a snapshot.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

/* Start the generator at BASE; NXT_SEED=n runs other operations. */
static void rnd_seed(uint64_t base)
{
	const char *env = getenv("NXT_SEED");

	rng_state = base + (env ? strtoull(env, NULL, 0) << 8 : 0);
}

/* Byte I of a file written with pattern SEED. */
static void pattern(char *buf, size_t len, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)(((off + i) * 131 + seed * 17 +
				 ((off + i) >> 11)) | 1);
}

static ext2_ino_t new_file(struct nx_volume *vol, const char *name)
{
	struct ext2_inode_large inode;
	struct nx_cred root;
	ext2_ino_t ino;
	errcode_t err;

	nxt_root_cred(&root);
	ck_assert_int_eq(nx_inode_new(vol, &root, EXT2_ROOT_INO,
				      S_IFREG | 0644, &ino, &inode), 0);
	err = ext2fs_link(vol->fs, EXT2_ROOT_INO, name, ino, EXT2_FT_REG_FILE);
	if (err == EXT2_ET_DIR_NO_SPACE) {
		ck_assert_int_eq(ext2fs_expand_dir(vol->fs, EXT2_ROOT_INO), 0);
		err = ext2fs_link(vol->fs, EXT2_ROOT_INO, name, ino,
				  EXT2_FT_REG_FILE);
	}
	ck_assert_int_eq(err, 0);
	return ino;
}

static void write_all(struct nx_volume *vol, ext2_ino_t ino, const void *buf,
		      size_t len, uint64_t off)
{
	size_t done = 0;
	errcode_t err = nx_file_write(vol, ino, buf, len, off, &done);

	ck_assert_msg(err == 0, "write %zu at %llu: %ld", len,
		      (unsigned long long)off, (long)err);
	ck_assert_uint_eq(done, len);
}

static void write_pattern(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
			  size_t len, unsigned seed)
{
	char *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	pattern(buf, len, seed, off);
	write_all(vol, ino, buf, len, off);
	free(buf);
}

static struct stat file_stat(struct nx_volume *vol, ext2_ino_t ino)
{
	struct stat st;

	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	return st;
}

static uint64_t file_size(struct nx_volume *vol, ext2_ino_t ino)
{
	return (uint64_t)file_stat(vol, ino).st_size;
}

/* Read [OFF, OFF + LEN) and compare with EXPECT (NULL: all zeros). */
static void expect_bytes(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
			 size_t len, const char *expect)
{
	char *buf = malloc(len ? len : 1);
	size_t got = 0, i;

	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x5a, len);
	ck_assert_int_eq(nx_file_read(vol, ino, buf, len, off, &got), 0);
	ck_assert_uint_eq(got, len);
	/* (One assertion per byte would make libcheck crawl.) */
	for (i = 0; i < len; i++) {
		char want = expect ? expect[i] : 0;

		if (buf[i] != want)
			ck_abort_msg("byte %llu: got %02x want %02x",
				     (unsigned long long)(off + i),
				     (unsigned char)buf[i],
				     (unsigned char)want);
	}
	free(buf);
}

static void expect_pattern(struct nx_volume *vol, ext2_ino_t ino,
			   uint64_t off, size_t len, unsigned seed)
{
	char *want = malloc(len);

	ck_assert_ptr_nonnull(want);
	pattern(want, len, seed, off);
	expect_bytes(vol, ino, off, len, want);
	free(want);
}

/* The whole file equals REF (its size included), read in odd pieces. */
static void expect_file(struct nx_volume *vol, ext2_ino_t ino,
			const char *ref, uint64_t size)
{
	uint64_t off = 0, piece = 100003;
	size_t got;
	char c;

	ck_assert_uint_eq(file_size(vol, ino), size);
	while (off < size) {
		size_t len = (size_t)(size - off < piece ? size - off : piece);

		expect_bytes(vol, ino, off, len, ref + off);
		off += len;
	}
	ck_assert_int_eq(nx_file_read(vol, ino, &c, 1, size, &got), 0);
	ck_assert_uint_eq(got, 0);
}

static int count_block(ext2_filsys fs, blk64_t *blk, e2_blkcnt_t cnt,
		       blk64_t ref_blk, int ref_off, void *priv)
{
	if (cnt >= 0)
		(*(blk64_t *)priv)++;
	return 0;
}

/*
 * The file maps exactly WANT data blocks, and st_blocks counts them plus
 * at most a few mapping (indirect or extent tree) blocks.
 */
static void expect_data_blocks(struct nx_volume *vol, ext2_ino_t ino,
			       blk64_t want)
{
	blk64_t n = 0, per = vol->fs->blocksize / 512;
	blkcnt_t st = file_stat(vol, ino).st_blocks;

	ck_assert_int_eq(ext2fs_block_iterate3(vol->fs, ino,
					       BLOCK_FLAG_READ_ONLY |
					       BLOCK_FLAG_DATA_ONLY, NULL,
					       count_block, &n), 0);
	ck_assert_uint_eq(n, want);
	ck_assert_int_ge(st, (blkcnt_t)(want * per));
	ck_assert_int_le(st, (blkcnt_t)((want + 3) * per));
}

static int is_extent_flavour(int i)
{
	return i >= 2;
}

/* ------------------------------------------------------------------ */

static const int falloc_modes[4] = {
	0,
	FALLOC_FL_KEEP_SIZE,
	FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
	FALLOC_FL_ZERO_RANGE,
};

START_TEST(test_random_io_matches_reference)
{
	const uint64_t cap = 5 << 20;
	char path[256], *ref, *buf;
	struct nx_volume *vol;
	uint64_t size = 0;
	ext2_ino_t ino;
	int op;

	rnd_seed(0x9e3779b97f4a7c15ULL + (uint64_t)_i);
	nxt_mkfs(path, nxt_flavours[_i], 48);
	vol = nxt_open(path);
	ino = new_file(vol, "f");
	ref = calloc(1, cap + (1 << 20));
	buf = malloc(1 << 20);
	ck_assert_ptr_nonnull(ref);
	ck_assert_ptr_nonnull(buf);
	for (op = 0; op < 200; op++) {
		uint64_t kind = rnd_below(100), off, len;
		size_t done;

		if (kind < 70) {
			uint64_t k = rnd_below(100);

			len = k < 50 ? 1 + rnd_below(5000) :
			      k < 85 ? 1 + rnd_below(70000) :
				       1 + rnd_below(600000);
			off = rnd_below(cap - len);
			if (rnd_below(4) == 0)
				off -= off % vol->fs->blocksize;
			pattern(buf, len, (unsigned)op, off);
			ck_assert_int_eq(nx_file_write(vol, ino, buf, len, off,
						       &done), 0);
			ck_assert_uint_eq(done, len);
			memcpy(ref + off, buf, len);
			if (off + len > size)
				size = off + len;
		} else if (kind < 78) {
			uint64_t nsize = rnd_below(cap);

			ck_assert_int_eq(nx_file_truncate(vol, ino, nsize), 0);
			if (nsize < size)
				memset(ref + nsize, 0, size - nsize);
			size = nsize;
		} else if (kind < 85) {
			int mode = falloc_modes[rnd_below(4)];
			errcode_t want = 0;

			len = 1 + rnd_below(300000);
			off = rnd_below(cap - len);
			if (!is_extent_flavour(_i) &&
			    !(mode & FALLOC_FL_PUNCH_HOLE))
				want = EOPNOTSUPP;
			ck_assert_int_eq(nx_file_fallocate(vol, ino, mode, off,
							   len), want);
			if (want)
				continue;
			if (mode & (FALLOC_FL_PUNCH_HOLE |
				    FALLOC_FL_ZERO_RANGE) && off < size)
				memset(ref + off, 0, off + len < size ?
				       len : size - off);
			if (!(mode & FALLOC_FL_KEEP_SIZE) && off + len > size)
				size = off + len;
		} else {
			off = rnd_below(size + 10000);
			len = rnd_below(300000);
			memset(buf, 0x77, len);
			ck_assert_int_eq(nx_file_read(vol, ino, buf, len, off,
						      &done), 0);
			if (off >= size)
				ck_assert_uint_eq(done, 0);
			else
				ck_assert_uint_eq(done, off + len > size ?
						  size - off : len);
			ck_assert(memcmp(buf, ref + off, done) == 0);
		}
		if (op % 40 == 39)
			expect_file(vol, ino, ref, size);
	}
	expect_file(vol, ino, ref, size);
	/* Still the same after a remount. */
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	vol = nxt_open(path);
	expect_file(vol, ino, ref, size);
	free(ref);
	free(buf);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Small writes straddling every boundary of the block-mapping tree. */
START_TEST(test_sparse_across_mapping_boundaries)
{
	char path[256];
	struct nx_volume *vol;
	uint64_t bs, p, idx[6], gap;
	ext2_ino_t ino;
	int k;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	p = bs / 4;
	idx[0] = 11;
	idx[1] = 12;			/* first indirect */
	idx[2] = 12 + p - 1;
	idx[3] = 12 + p;		/* first double indirect */
	idx[4] = 12 + p + p * p - 1;
	idx[5] = 12 + p + p * p;	/* first triple indirect */
	ino = new_file(vol, "sparse");
	for (k = 0; k < 6; k++)
		write_pattern(vol, ino, idx[k] * bs - 5, 10, k);
	ck_assert_uint_eq(file_size(vol, ino), idx[5] * bs + 5);
	for (k = 0; k < 6; k++) {
		expect_pattern(vol, ino, idx[k] * bs - 5, 10, k);
		/* The holes around read as zeros. */
		gap = k < 5 ? (idx[k + 1] - idx[k]) * bs - 10 : 0;
		expect_bytes(vol, ino, idx[k] * bs + 5,
			     gap < 3 * bs ? gap : 3 * bs, NULL);
	}
	expect_bytes(vol, ino, 0, 11 * bs - 5, NULL);
	/* Few blocks: data plus the mapping blocks, nothing for the holes. */
	ck_assert_int_le(file_stat(vol, ino).st_blocks * 512, 32 * bs);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);

	vol = nxt_open(path);
	for (k = 0; k < 6; k++)
		expect_pattern(vol, ino, idx[k] * bs - 5, 10, k);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 0), 0);
	ck_assert_int_eq(file_stat(vol, ino).st_blocks, 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static int count_extents(struct nx_volume *vol, ext2_ino_t ino)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent ex;
	int n = 0, op = EXT2_EXTENT_ROOT;

	ck_assert_int_eq(ext2fs_extent_open(vol->fs, ino, &h), 0);
	while (ext2fs_extent_get(h, op, &ex) == 0) {
		op = EXT2_EXTENT_NEXT;
		if ((ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) &&
		    !(ex.e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT))
			n++;
	}
	ext2fs_extent_free(h);
	return n;
}

START_TEST(test_large_file_streaming)
{
	const size_t chunk = 1 << 20, total = 64 << 20;
	char path[256], *buf, *want;
	struct nx_volume *vol;
	size_t off;
	ext2_ino_t ino;

	nxt_mkfs(path, nxt_flavours[_i], 128);
	vol = nxt_open(path);
	ino = new_file(vol, "big");
	buf = malloc(chunk);
	want = malloc(chunk);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(want);
	for (off = 0; off < total; off += chunk)
		write_pattern(vol, ino, off, chunk, 3);
	ck_assert_uint_eq(file_size(vol, ino), total);
	ck_assert_int_ge(file_stat(vol, ino).st_blocks * 512, total);
	/* Appending in pieces still gives few, long extents. */
	if (is_extent_flavour(_i))
		ck_assert_int_le(count_extents(vol, ino), 8);
	for (off = 0; off < total; off += chunk) {
		size_t got;

		ck_assert_int_eq(nx_file_read(vol, ino, buf, chunk, off, &got),
				 0);
		ck_assert_uint_eq(got, chunk);
		pattern(want, chunk, 3, off);
		ck_assert(memcmp(buf, want, chunk) == 0);
	}
	free(buf);
	free(want);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_large_read_few_device_requests)
{
	const size_t len = 8 << 20;
	char path[256], *buf, *want;
	struct nx_blkio_stats before, after;
	struct nx_volume *vol;
	uint64_t blocks, calls;
	ext2_ino_t ino;
	size_t got;

	nxt_mkfs(path, nxt_flavours[_i], 64);
	vol = nxt_open(path);
	ino = new_file(vol, "contig");
	write_pattern(vol, ino, 0, len, 5);
	blocks = len / vol->fs->blocksize;
	buf = malloc(len);
	want = malloc(len);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(want);
	nx_blkio_get_stats(vol->io, &before);
	ck_assert_int_eq(nx_file_read(vol, ino, buf, len, 0, &got), 0);
	nx_blkio_get_stats(vol->io, &after);
	ck_assert_uint_eq(got, len);
	pattern(want, len, 5, 0);
	ck_assert(memcmp(buf, want, len) == 0);
	calls = after.read_calls - before.read_calls;
	/* Extents: a handful; block maps: about two per indirect block. */
	if (is_extent_flavour(_i))
		ck_assert_uint_le(calls, 4);
	ck_assert_msg(calls * 16 < blocks, "%llu reads for %llu blocks",
		      (unsigned long long)calls, (unsigned long long)blocks);
	/* Writing it again in place is as cheap. */
	nx_blkio_get_stats(vol->io, &before);
	write_all(vol, ino, want, len, 0);
	nx_blkio_get_stats(vol->io, &after);
	ck_assert_uint_lt((after.write_calls - before.write_calls) * 16,
			  blocks);
	free(buf);
	free(want);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Streaming into preallocated space converts it without fragmenting. */
START_TEST(test_write_into_preallocated)
{
	const size_t len = 8 << 20, chunk = 64 << 10;
	char path[256];
	struct nx_volume *vol;
	ext2_ino_t ino;
	size_t off;

	nxt_mkfs(path, nxt_flavours[_i], 64);
	vol = nxt_open(path);
	ino = new_file(vol, "pre");
	if (!is_extent_flavour(_i)) {
		ck_assert_int_eq(nx_file_fallocate(vol, ino, 0, 0, len),
				 EOPNOTSUPP);
		goto done;
	}
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_KEEP_SIZE, 0,
					   len), 0);
	ck_assert_uint_eq(file_size(vol, ino), 0);
	expect_data_blocks(vol, ino, len / vol->fs->blocksize);
	for (off = 0; off < len; off += chunk)
		write_pattern(vol, ino, off, chunk, 4);
	expect_data_blocks(vol, ino, len / vol->fs->blocksize);
	ck_assert_int_le(count_extents(vol, ino), 4);
	for (off = 0; off < len; off += 1 << 20)
		expect_pattern(vol, ino, off, 1 << 20, 4);
	/* An unaligned write in the middle of an unwritten extent. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, 0, len, 64 << 10), 0);
	write_pattern(vol, ino, len + 5000, 3000, 5);
	expect_bytes(vol, ino, len, 5000, NULL);
	expect_pattern(vol, ino, len + 5000, 3000, 5);
	expect_bytes(vol, ino, len + 8000, (64 << 10) - 8000, NULL);
done:
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * Writing into the middle of an unwritten extent splits it, and a full
 * extent root needs a new tree block for that.  With no block left the
 * extent is written out with zeros instead; the write still succeeds.
 */
START_TEST(test_unwritten_split_without_space)
{
	char path[256], *ref;
	struct nx_volume *vol;
	blk64_t *hog, nhog = 0, b;
	uint64_t bs;
	ext2_ino_t ino;
	int k;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	vol = nxt_open(path);
	if (!is_extent_flavour(_i))
		goto done;
	bs = vol->fs->blocksize;
	ref = calloc(1, 20 * bs);
	ck_assert_ptr_nonnull(ref);
	ino = new_file(vol, "u");
	/* Three written extents and one unwritten: the root is full. */
	for (k = 0; k < 3; k++) {
		pattern(ref + 2 * k * bs, bs, k, 2 * k * bs);
		write_all(vol, ino, ref + 2 * k * bs, bs, 2 * k * bs);
	}
	ck_assert_int_eq(nx_file_fallocate(vol, ino, 0, 10 * bs, 10 * bs), 0);
	ck_assert_int_eq(count_extents(vol, ino), 4);
	/* Take every free block away. */
	hog = malloc(sizeof(*hog) * ext2fs_blocks_count(vol->fs->super));
	ck_assert_ptr_nonnull(hog);
	while (!ext2fs_new_block2(vol->fs, 0, NULL, &b)) {
		ext2fs_block_alloc_stats2(vol->fs, b, +1);
		hog[nhog++] = b;
	}
	write_all(vol, ino, "abc", 3, 15 * bs + 7);
	memcpy(ref + 15 * bs + 7, "abc", 3);
	expect_file(vol, ino, ref, 20 * bs);
	ck_assert_int_le(count_extents(vol, ino), 4);
	/* Zeroing part of it cannot split either: zeros get written. */
	pattern(ref + 10 * bs, 10 * bs, 9, 10 * bs);
	write_all(vol, ino, ref + 10 * bs, 10 * bs, 10 * bs);
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_ZERO_RANGE,
					   11 * bs + 5, 3 * bs + 4), 0);
	memset(ref + 11 * bs + 5, 0, 3 * bs + 4);
	/* (Holes to fill are another matter: no space is no space.) */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_ZERO_RANGE,
					   2 * bs, 13 * bs), ENOSPC);
	expect_file(vol, ino, ref, 20 * bs);
	while (nhog)
		ext2fs_block_alloc_stats2(vol->fs, hog[--nhog], -1);
	free(hog);
	free(ref);
done:
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static void set_old_times(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;
	struct timespec old = { 1000000000, 0 };

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	nx_inode_set_time(&inode, NX_MTIME, &old);
	nx_inode_set_time(&inode, NX_CTIME, &old);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
}

static int times_are_old(struct nx_volume *vol, ext2_ino_t ino)
{
	struct stat st = file_stat(vol, ino);

	ck_assert_int_eq(st.st_mtim.tv_sec == 1000000000,
			 st.st_ctim.tv_sec == 1000000000);
	return st.st_mtim.tv_sec == 1000000000;
}

START_TEST(test_truncate_shrink_grow_zeroes_tail)
{
	char path[256];
	struct nx_volume *vol;
	uint64_t bs;
	blkcnt_t full;
	ext2_ino_t ino;
	size_t done;
	char *buf;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	buf = malloc(8 * bs);
	ck_assert_ptr_nonnull(buf);
	ino = new_file(vol, "t");
	memset(buf, 0xaa, 8 * bs);
	write_all(vol, ino, buf, 3 * bs + 100, 0);
	full = file_stat(vol, ino).st_blocks;
	ck_assert_int_eq(full, 4 * bs / 512);

	set_old_times(vol, ino);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 3 * bs + 100), 0);
	ck_assert(times_are_old(vol, ino));	/* size unchanged */

	ck_assert_int_eq(nx_file_truncate(vol, ino, bs + bs / 2), 0);
	ck_assert(!times_are_old(vol, ino));
	ck_assert_uint_eq(file_size(vol, ino), bs + bs / 2);
	ck_assert_int_eq(file_stat(vol, ino).st_blocks, 2 * bs / 512);

	/* Growing is sparse and shows zeros past the old end. */
	ck_assert_int_eq(nx_file_truncate(vol, ino, 5 * bs), 0);
	ck_assert_uint_eq(file_size(vol, ino), 5 * bs);
	ck_assert_int_eq(file_stat(vol, ino).st_blocks, 2 * bs / 512);
	expect_bytes(vol, ino, 0, bs + bs / 2, buf);
	expect_bytes(vol, ino, bs + bs / 2, 5 * bs - (bs + bs / 2), NULL);

	/* The kept block's tail was zeroed on disk, not just hidden. */
	ck_assert_int_eq(nx_file_truncate(vol, ino, bs + 10), 0);
	ck_assert_int_eq(nx_file_write(vol, ino, "x", 1, 6 * bs, &done), 0);
	expect_bytes(vol, ino, 0, bs + 10, buf);
	expect_bytes(vol, ino, bs + 10, 5 * bs - 10, NULL);
	expect_bytes(vol, ino, 6 * bs, 1, "x");

	ck_assert_int_eq(nx_file_truncate(vol, ino, 0), 0);
	ck_assert_uint_eq(file_size(vol, ino), 0);
	ck_assert_int_eq(file_stat(vol, ino).st_blocks, 0);
	free(buf);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_write_times_and_errors)
{
	char path[256];
	struct nx_volume *vol;
	struct ext2_inode_large inode;
	ext2_ino_t ino;
	uint64_t max;
	size_t done;
	char c = 'c';

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	ino = new_file(vol, "w");
	set_old_times(vol, ino);
	ck_assert_int_eq(nx_file_write(vol, ino, &c, 0, 0, &done), 0);
	ck_assert_uint_eq(done, 0);
	ck_assert(times_are_old(vol, ino));
	write_all(vol, ino, &c, 1, 10);
	ck_assert(!times_are_old(vol, ino));
	ck_assert_uint_eq(file_size(vol, ino), 11);
	/* An overwrite inside the file changes times but not the size. */
	set_old_times(vol, ino);
	write_all(vol, ino, &c, 1, 0);
	ck_assert(!times_are_old(vol, ino));
	ck_assert_uint_eq(file_size(vol, ino), 11);

	/* EFBIG at the mapping limit; a write across it is cut short. */
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	max = nx_file_max_bytes(vol->fs, &inode);
	ck_assert_uint_ge(max, (uint64_t)16 << 30);
	ck_assert_int_eq(nx_file_write(vol, ino, &c, 1, max, &done), EFBIG);
	ck_assert_int_eq(nx_file_write(vol, ino, "0123456789", 10, max - 4,
				       &done), 0);
	ck_assert_uint_eq(done, 4);
	ck_assert_uint_eq(file_size(vol, ino), max);
	expect_bytes(vol, ino, max - 4, 4, "0123");
	ck_assert_int_eq(nx_file_truncate(vol, ino, max + 1), EFBIG);
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_KEEP_SIZE |
					   FALLOC_FL_PUNCH_HOLE, max - 4096,
					   8192), EFBIG);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	vol = nxt_open(path);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 20), 0);

	/* Directories are not files. */
	ck_assert_int_eq(nx_file_write(vol, EXT2_ROOT_INO, &c, 1, 0, &done),
			 EISDIR);
	ck_assert_int_eq(nx_file_read(vol, EXT2_ROOT_INO, &c, 1, 0, &done),
			 EISDIR);
	ck_assert_int_eq(nx_file_truncate(vol, EXT2_ROOT_INO, 0), EISDIR);
	ck_assert_int_eq(nx_file_fallocate(vol, EXT2_ROOT_INO, 0, 0, 1),
			 EISDIR);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_fallocate_punch_zero_keep_size)
{
	char path[256], *ref;
	struct nx_volume *vol;
	uint64_t bs, size;
	ext2_ino_t ino;
	int ext = is_extent_flavour(_i);

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	ref = calloc(1, 64 * bs);
	ck_assert_ptr_nonnull(ref);
	ino = new_file(vol, "fa");
	pattern(ref, 16 * bs, 1, 0);
	write_all(vol, ino, ref, 16 * bs, 0);
	size = 16 * bs;
	expect_data_blocks(vol, ino, 16);

	/* Argument rules of fallocate(2). */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_PUNCH_HOLE,
					   0, bs), EOPNOTSUPP);
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_KEEP_SIZE,
					   0, 0), EINVAL);
	ck_assert_int_eq(nx_file_fallocate(vol, ino, 0x100, 0, bs),
			 EOPNOTSUPP);

	/* Punch: partial edges zeroed, the three whole blocks freed. */
	set_old_times(vol, ino);
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_PUNCH_HOLE |
					   FALLOC_FL_KEEP_SIZE, bs + bs / 2,
					   4 * bs), 0);
	ck_assert(!times_are_old(vol, ino));
	memset(ref + bs + bs / 2, 0, 4 * bs);
	expect_data_blocks(vol, ino, 13);
	expect_file(vol, ino, ref, size);
	/* Punching past EOF changes nothing. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_PUNCH_HOLE |
					   FALLOC_FL_KEEP_SIZE, 20 * bs,
					   bs), 0);
	expect_data_blocks(vol, ino, 13);

	if (!ext) {
		/* ext4 preallocates only for extent-mapped files. */
		ck_assert_int_eq(nx_file_fallocate(vol, ino, 0, 0, 64 * bs),
				 EOPNOTSUPP);
		ck_assert_int_eq(nx_file_fallocate(vol, ino,
						   FALLOC_FL_ZERO_RANGE,
						   0, bs), EOPNOTSUPP);
		goto done;
	}

	/* KEEP_SIZE past EOF: allocated, size unchanged, not readable. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_KEEP_SIZE,
					   16 * bs, 16 * bs), 0);
	ck_assert_uint_eq(file_size(vol, ino), size);
	expect_data_blocks(vol, ino, 29);
	expect_file(vol, ino, ref, size);

	/* Mode 0 grows the size; the new range reads as zeros. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, 0, 32 * bs + 100,
					   8 * bs - 100), 0);
	size = 40 * bs;
	expect_data_blocks(vol, ino, 37);
	expect_file(vol, ino, ref, size);

	/* Writing into unwritten blocks: data lands, the rest stays zero. */
	write_all(vol, ino, "0123456789", 10, 20 * bs + 7);
	memcpy(ref + 20 * bs + 7, "0123456789", 10);
	pattern(ref + 24 * bs - 50, 3 * bs, 6, 24 * bs - 50);
	write_all(vol, ino, ref + 24 * bs - 50, 3 * bs, 24 * bs - 50);
	expect_data_blocks(vol, ino, 37);
	expect_file(vol, ino, ref, size);

	/* Zero range over data: allocation stays, bytes become zero. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_ZERO_RANGE |
					   FALLOC_FL_KEEP_SIZE, 8 * bs + 100,
					   4 * bs), 0);
	memset(ref + 8 * bs + 100, 0, 4 * bs);
	expect_data_blocks(vol, ino, 37);
	expect_file(vol, ino, ref, size);
	/* ... over the punched hole: it gets allocated (unwritten). */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_ZERO_RANGE,
					   2 * bs, 3 * bs), 0);
	expect_data_blocks(vol, ino, 40);
	/* ... and past EOF without KEEP_SIZE: the size follows. */
	ck_assert_int_eq(nx_file_fallocate(vol, ino, FALLOC_FL_ZERO_RANGE,
					   40 * bs - 10, 2 * bs + 15), 0);
	size = 42 * bs + 5;
	expect_file(vol, ino, ref, size);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	vol = nxt_open(path);
	expect_file(vol, ino, ref, size);
done:
	free(ref);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static uint64_t seek(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
		     int whence, errcode_t want_err)
{
	uint64_t res = ~0ULL;

	ck_assert_int_eq(nx_file_seek(vol, ino, off, whence, &res), want_err);
	return res;
}

START_TEST(test_seek_data_hole)
{
	char path[256];
	struct nx_volume *vol;
	uint64_t bs, s;
	ext2_ino_t ino, dense;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	ino = new_file(vol, "s");
	write_pattern(vol, ino, 0, 2 * bs, 1);
	write_pattern(vol, ino, 10 * bs, bs, 2);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 16 * bs), 0);
	if (is_extent_flavour(_i))
		ck_assert_int_eq(nx_file_fallocate(vol, ino,
						   FALLOC_FL_KEEP_SIZE,
						   11 * bs, 3 * bs), 0);
	s = 16 * bs;
	ck_assert_uint_eq(seek(vol, ino, 0, SEEK_DATA, 0), 0);
	ck_assert_uint_eq(seek(vol, ino, 100, SEEK_DATA, 0), 100);
	ck_assert_uint_eq(seek(vol, ino, 0, SEEK_HOLE, 0), 2 * bs);
	ck_assert_uint_eq(seek(vol, ino, 100, SEEK_HOLE, 0), 2 * bs);
	ck_assert_uint_eq(seek(vol, ino, 2 * bs, SEEK_DATA, 0), 10 * bs);
	ck_assert_uint_eq(seek(vol, ino, 5 * bs + 3, SEEK_DATA, 0), 10 * bs);
	ck_assert_uint_eq(seek(vol, ino, 5 * bs + 3, SEEK_HOLE, 0),
			  5 * bs + 3);
	ck_assert_uint_eq(seek(vol, ino, 10 * bs + 1, SEEK_HOLE, 0), 11 * bs);
	/* Unwritten extents are holes for SEEK_DATA. */
	seek(vol, ino, 11 * bs, SEEK_DATA, ENXIO);
	ck_assert_uint_eq(seek(vol, ino, 12 * bs, SEEK_HOLE, 0), 12 * bs);
	seek(vol, ino, s, SEEK_DATA, ENXIO);
	seek(vol, ino, s, SEEK_HOLE, ENXIO);
	seek(vol, ino, s + 100, SEEK_HOLE, ENXIO);
	seek(vol, ino, 0, SEEK_SET, EINVAL);

	dense = new_file(vol, "dense");
	write_pattern(vol, dense, 0, 3 * bs + 7, 3);
	ck_assert_uint_eq(seek(vol, dense, bs, SEEK_HOLE, 0), 3 * bs + 7);
	ck_assert_uint_eq(seek(vol, dense, 3 * bs + 6, SEEK_DATA, 0),
			  3 * bs + 6);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static int inode_flags(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	return (int)inode.i_flags;
}

/* Only the inline_data flavour; the others never go inline. */
START_TEST(test_inline_data_grows_into_blocks)
{
	char path[256], ref[8192] = { 0 }, *big;
	struct nx_volume *vol;
	ext2_ino_t ino, other;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	ino = new_file(vol, "inl");
	write_all(vol, ino, "hello", 5, 0);
	memcpy(ref, "hello", 5);
	if (!ext2fs_has_feature_inline_data(vol->fs->super)) {
		ck_assert(!(inode_flags(vol, ino) & EXT4_INLINE_DATA_FL));
		goto done;
	}
	ck_assert(inode_flags(vol, ino) & EXT4_INLINE_DATA_FL);
	ck_assert_int_eq(file_stat(vol, ino).st_blocks, 0);
	expect_file(vol, ino, ref, 5);

	/* Past i_block into the xattr part, with a gap of zeros. */
	write_all(vol, ino, "world, this is inline", 21, 50);
	memcpy(ref + 50, "world, this is inline", 21);
	ck_assert(inode_flags(vol, ino) & EXT4_INLINE_DATA_FL);
	expect_file(vol, ino, ref, 71);

	/* Shrinking and growing inline. */
	ck_assert_int_eq(nx_file_truncate(vol, ino, 55), 0);
	memset(ref + 55, 0, 100);
	expect_file(vol, ino, ref, 55);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 90), 0);
	expect_file(vol, ino, ref, 90);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 20), 0);
	memset(ref + 20, 0, 100);
	ck_assert(inode_flags(vol, ino) & EXT4_INLINE_DATA_FL);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	vol = nxt_open(path);
	expect_file(vol, ino, ref, 20);

	/* Too big for the inode: it moves out into blocks. */
	big = malloc(5000);
	ck_assert_ptr_nonnull(big);
	pattern(big, 5000, 9, 100);
	write_all(vol, ino, big, 5000, 100);
	memcpy(ref + 100, big, 5000);
	ck_assert(!(inode_flags(vol, ino) & EXT4_INLINE_DATA_FL));
	ck_assert(inode_flags(vol, ino) & EXT4_EXTENTS_FL);
	ck_assert_int_gt(file_stat(vol, ino).st_blocks, 0);
	expect_file(vol, ino, ref, 5100);

	/* A first write that does not fit never goes inline. */
	other = new_file(vol, "other");
	write_all(vol, other, big, 5000, 0);
	ck_assert(!(inode_flags(vol, other) & EXT4_INLINE_DATA_FL));
	expect_bytes(vol, other, 0, 5000, big);
	/* fallocate moves inline data out first, as ext4 does. */
	other = new_file(vol, "other2");
	write_all(vol, other, "abc", 3, 0);
	ck_assert(inode_flags(vol, other) & EXT4_INLINE_DATA_FL);
	ck_assert_int_eq(nx_file_fallocate(vol, other, 0, 0, 8192), 0);
	ck_assert(!(inode_flags(vol, other) & EXT4_INLINE_DATA_FL));
	expect_bytes(vol, other, 0, 3, "abc");
	expect_bytes(vol, other, 3, 8189, NULL);
	free(big);
done:
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_enospc_short_write_keeps_data)
{
	const size_t chunk = 1 << 20;
	char path[256], *buf;
	struct nx_volume *vol;
	uint64_t total = 0;
	ext2_ino_t a, b;
	size_t done = 0;
	errcode_t err;
	int shorts = 0;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	vol = nxt_open(path);
	a = new_file(vol, "a");
	write_pattern(vol, a, 0, 10000, 1);
	b = new_file(vol, "b");
	buf = malloc(chunk);
	ck_assert_ptr_nonnull(buf);
	for (;;) {
		pattern(buf, chunk, 2, total);
		err = nx_file_write(vol, b, buf, chunk, total, &done);
		if (err) {
			ck_assert_int_eq(err, ENOSPC);
			ck_assert_uint_eq(done, 0);
			break;
		}
		ck_assert_uint_gt(done, 0);
		total += done;
		if (done < chunk)
			shorts++;
		ck_assert_uint_lt(total, 16 << 20);
	}
	ck_assert_int_ge(shorts, 1);
	ck_assert_uint_gt(total, 4 << 20);
	ck_assert_uint_eq(file_size(vol, b), total);
	ck_assert_uint_lt(ext2fs_free_blocks_count(vol->fs->super), 16);
	/* The other file cannot grow either; its data is intact. */
	ck_assert_int_eq(nx_file_write(vol, a, buf, chunk, 1 << 20, &done),
			 ENOSPC);
	expect_pattern(vol, a, 0, 10000, 1);
	ck_assert_uint_eq(file_size(vol, a), 10000);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);

	vol = nxt_open(path);
	for (done = 0; done < total; done += chunk) {
		size_t len = total - done < chunk ? total - done : chunk;

		expect_pattern(vol, b, done, len, 2);
	}
	/* Freeing space makes room again. */
	ck_assert_int_eq(nx_file_truncate(vol, b, total / 2), 0);
	write_pattern(vol, a, 10000, 100000, 1);
	expect_pattern(vol, a, 0, 110000, 1);
	free(buf);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Depth of INO's extent tree (0: extents in the inode); *NLEAF extents. */
static int extent_shape(struct nx_volume *vol, ext2_ino_t ino, unsigned *nleaf)
{
	struct ext2_extent_info info;
	ext2_extent_handle_t h;
	struct ext2fs_extent ex;
	int op = EXT2_EXTENT_ROOT;
	errcode_t err;

	*nleaf = 0;
	ck_assert_int_eq(ext2fs_extent_open(vol->fs, ino, &h), 0);
	ck_assert_int_eq(ext2fs_extent_get_info(h, &info), 0);
	while (!(err = ext2fs_extent_get(h, op, &ex))) {
		op = EXT2_EXTENT_NEXT_LEAF;
		if (ex.e_flags & EXT2_EXTENT_FLAGS_LEAF)
			(*nleaf)++;
	}
	ck_assert_int_eq(err, EXT2_ET_EXTENT_NO_NEXT);
	ext2fs_extent_free(h);
	return info.max_depth;
}

static void expect_view(struct nx_volume *vol, ext2_ino_t snap_ino,
			ext2_ino_t ino, const char *ref, uint64_t size)
{
	struct nx_volume *view;

	ck_assert_int_eq(nx_snap_view_open(vol, snap_ino, &view), 0);
	expect_file(view, ino, ref, size);
	nx_snap_view_close(view);
}

/* Overwrites under a snapshot: the snapshot keeps the old data. */
START_TEST(test_overwrite_under_snapshot)
{
	char path[256], *ref, *cur;
	struct nx_volume *vol;
	struct nx_snapinfo info;
	uint64_t bs, size;
	ext2_ino_t ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	size = 40 * bs + 123;
	ref = malloc(size);
	cur = malloc(size);
	ck_assert_ptr_nonnull(ref);
	ck_assert_ptr_nonnull(cur);
	ino = new_file(vol, "snapped");
	pattern(ref, size, 1, 0);
	write_all(vol, ino, ref, size, 0);
	memcpy(cur, ref, size);
	ck_assert_int_eq(nx_snap_take(vol, "s", &info), 0);

	/* Partial head, whole blocks, partial tail; then a truncate. */
	pattern(cur + bs / 2, 5 * bs, 7, bs / 2);
	write_all(vol, ino, cur + bs / 2, 5 * bs, bs / 2);
	pattern(cur + 20 * bs + 1, 10, 8, 20 * bs + 1);
	write_all(vol, ino, cur + 20 * bs + 1, 10, 20 * bs + 1);
	ck_assert_int_eq(nx_file_truncate(vol, ino, 30 * bs + 10), 0);
	expect_file(vol, ino, cur, 30 * bs + 10);

	expect_view(vol, info.ino, ino, ref, size);
	free(ref);
	free(cur);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * Overwrites under snapshots remap pieces of extents.  A sequential
 * overwrite keeps the file in one extent (each piece joins the one
 * before).  Random overwrites split extents until the tree is two levels
 * deep (node splits at both levels): the live file follows a reference,
 * every snapshot keeps what it saw, before and after a remount.
 */
START_TEST(test_remap_under_snapshots_matches_reference)
{
	char path[256], *ref0, *ref2, *cur;
	struct nx_snapinfo s1, s2, s3;
	struct nx_volume *vol;
	uint64_t bs, size, seq = 1 << 20, off;
	ext2_ino_t ino, sino;
	unsigned nleaf;
	int op;

	rnd_seed(0x2545f4914f6cdd1dULL + (uint64_t)_i);
	nxt_mkfs(path, nxt_flavours[_i], 64);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	size = 4 << 20;
	ref0 = malloc(size);
	ref2 = malloc(size);
	cur = malloc(size);
	ck_assert(ref0 && ref2 && cur);

	sino = new_file(vol, "seq");
	write_pattern(vol, sino, 0, seq, 1);
	ck_assert_int_eq(nx_snap_take(vol, "s3", &s3), 0);
	for (off = 0; off < seq; off += 64 << 10)
		write_pattern(vol, sino, off, 64 << 10, 2);
	expect_pattern(vol, sino, 0, seq, 2);
	if (is_extent_flavour(_i)) {
		extent_shape(vol, sino, &nleaf);
		ck_assert_uint_le(nleaf, 2);
	}

	ino = new_file(vol, "random");
	pattern(ref0, size, 1, 0);
	write_all(vol, ino, ref0, size, 0);
	memcpy(cur, ref0, size);
	ck_assert_int_eq(nx_snap_take(vol, "s1", &s1), 0);
	for (op = 0; op < 1200; op++) {
		uint64_t k = rnd_below(10), len;

		if (k < 6)
			len = bs;
		else if (k < 9)
			len = (2 + rnd_below(63)) * bs;
		else
			len = 1 + rnd_below(3 * bs);
		off = rnd_below(size - len);
		if (k < 9)
			off -= off % bs;
		pattern(cur + off, len, (unsigned)op + 3, off);
		write_all(vol, ino, cur + off, len, off);
		if (op == 600) {
			ck_assert_int_eq(nx_snap_take(vol, "s2", &s2), 0);
			memcpy(ref2, cur, size);
		}
	}
	if (is_extent_flavour(_i))
		ck_assert_int_ge(extent_shape(vol, ino, &nleaf), 2);
	expect_file(vol, ino, cur, size);
	expect_view(vol, s1.ino, ino, ref0, size);
	expect_view(vol, s2.ino, ino, ref2, size);
	pattern(ref0, seq, 1, 0);
	expect_view(vol, s3.ino, sino, ref0, seq);

	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	vol = nxt_open(path);
	expect_file(vol, ino, cur, size);
	expect_view(vol, s2.ino, ino, ref2, size);
	pattern(ref0, size, 1, 0);
	expect_view(vol, s1.ino, ino, ref0, size);
	free(ref0);
	free(ref2);
	free(cur);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * A commit that has nothing but moved blocks to write into the snapshot
 * still writes them: the second overwrite below changes metadata the
 * snapshot already holds copies of, so it preserves nothing else.  After
 * a remount the snapshot still has the data as it was at the take.
 */
START_TEST(test_moves_alone_reach_the_snapshot)
{
	char path[256], *ref;
	struct nx_snapinfo info;
	struct nx_volume *vol;
	uint64_t size = 1 << 20, half = size / 2;
	ext2_ino_t ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	ref = malloc(size);
	ck_assert_ptr_nonnull(ref);
	ino = new_file(vol, "f");
	pattern(ref, size, 1, 0);
	write_all(vol, ino, ref, size, 0);
	ck_assert_int_eq(nx_snap_take(vol, "s", &info), 0);
	write_pattern(vol, ino, 0, half, 2);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	write_pattern(vol, ino, half, half, 3);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	vol = nxt_open(path);
	expect_view(vol, info.ino, ino, ref, size);
	expect_pattern(vol, ino, 0, half, 2);
	expect_pattern(vol, ino, half, half, 3);
	free(ref);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

/* One case per test, so that CK_RUN_CASE can pick one. */
#define ADD_LOOP(s, t) do {						\
	TCase *tc = tcase_create(#t);					\
	tcase_set_timeout(tc, 300);					\
	tcase_add_loop_test(tc, t, 0, NXT_NFLAVOURS);			\
	suite_add_tcase(s, tc);						\
} while (0)

static Suite *file_suite(void)
{
	Suite *s = suite_create("file");

	ADD_LOOP(s, test_random_io_matches_reference);
	ADD_LOOP(s, test_sparse_across_mapping_boundaries);
	ADD_LOOP(s, test_large_file_streaming);
	ADD_LOOP(s, test_large_read_few_device_requests);
	ADD_LOOP(s, test_write_into_preallocated);
	ADD_LOOP(s, test_unwritten_split_without_space);
	ADD_LOOP(s, test_truncate_shrink_grow_zeroes_tail);
	ADD_LOOP(s, test_write_times_and_errors);
	ADD_LOOP(s, test_fallocate_punch_zero_keep_size);
	ADD_LOOP(s, test_seek_data_hole);
	ADD_LOOP(s, test_inline_data_grows_into_blocks);
	ADD_LOOP(s, test_enospc_short_write_keeps_data);
	ADD_LOOP(s, test_overwrite_under_snapshot);
	ADD_LOOP(s, test_remap_under_snapshots_matches_reference);
	ADD_LOOP(s, test_moves_alone_reach_the_snapshot);
	return s;
}

int main(void)
{
	return nxt_run_suite(file_suite());
}
