/*
 * test_meta.c - write-back of only the changed allocation metadata
 * (src/volume/meta.c): stock e2fsck finds the volume clean after
 * allocations and frees in many groups, net-zero changes inside one
 * group, first allocations in BLOCK_UNINIT groups and meta_bg layouts;
 * and a one-block change costs the same few writes on a volume with 2
 * groups as on one with 512.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/meta.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"

static struct nx_cred root;

/* mke2fs with flavour FLAVOUR plus EXTRA (geometry) on SIZE_MB MiB. */
static void mkimg(char *path, int flavour, const char *extra, unsigned size_mb)
{
	char args[256];

	snprintf(args, sizeof(args), "%s %s", nxt_flavours[flavour], extra);
	nxt_mkfs(path, args, size_mb);
}

static ext2_ino_t create(struct nx_volume *vol, ext2_ino_t dir,
			 const char *name)
{
	ext2_ino_t ino = 0;

	ck_assert_int_eq(nx_mknod(vol, &root, dir, name, S_IFREG | 0644, 0,
				  &ino), 0);
	return ino;
}

static void fill(struct nx_volume *vol, ext2_ino_t ino, uint64_t off,
		 size_t len, int seed)
{
	char *buf = malloc(len);
	size_t done = 0;

	ck_assert_ptr_nonnull(buf);
	memset(buf, 'a' + seed % 26, len);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, len, off, &done), 0);
	ck_assert_uint_eq(done, len);
	free(buf);
}

static void delete(struct nx_volume *vol, ext2_ino_t dir, const char *name)
{
	ext2_ino_t victim = 0;

	ck_assert_int_eq(nx_unlink(vol, &root, dir, name, &victim), 0);
	ck_assert_int_eq(nx_inode_release(vol, victim), 0);
}

static blk64_t first_block(struct nx_volume *vol, ext2_ino_t ino)
{
	blk64_t pblk = 0;

	ck_assert_int_eq(ext2fs_bmap2(vol->fs, ino, NULL, NULL, 0, 0, NULL,
				      &pblk), 0);
	ck_assert_uint_ne(pblk, 0);
	return pblk;
}

static dgrp_t group_of_ino(ext2_filsys fs, ext2_ino_t ino)
{
	return (ino - 1) / fs->super->s_inodes_per_group;
}

/* Device writes nx_volume_sync() issues (the metadata write-back). */
static uint64_t sync_writes(struct nx_volume *vol, uint64_t *bytes)
{
	struct nx_blkio_stats a, b;

	nx_blkio_get_stats(vol->io, &a);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	nx_blkio_get_stats(vol->io, &b);
	if (bytes)
		*bytes = b.bytes_written - a.bytes_written;
	return b.write_calls - a.write_calls;
}

/*
 * Give the empty regular file INO one block, the first free one at or
 * after GOAL, the way libext2fs allocates (new_block2 + alloc_stats2).
 */
static blk64_t give_block(struct nx_volume *vol, ext2_ino_t ino, blk64_t goal)
{
	struct ext2_inode_large inode;
	blk64_t blk = 0;

	ck_assert_int_eq(ext2fs_new_block2(vol->fs, goal, NULL, &blk), 0);
	ext2fs_block_alloc_stats2(vol->fs, blk, +1);
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	ck_assert_int_eq(ext2fs_bmap2(vol->fs, ino, (struct ext2_inode *)&inode,
				      NULL, BMAP_SET, 0, NULL, &blk), 0);
	ext2fs_iblk_add_blocks(vol->fs, (struct ext2_inode *)&inode, 1);
	inode.i_size = vol->fs->blocksize;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	return blk;
}

/* The group descriptor of G as it is on disk now. */
static void disk_group(const char *path, dgrp_t g, uint16_t *flags,
		       uint32_t *free_blocks, blk64_t test_blk, int *in_use)
{
	ext2_filsys fs;

	ck_assert_int_eq(ext2fs_open(path, EXT2_FLAG_64BITS, 0, 0,
				     unix_io_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	*flags = ext2fs_bg_flags(fs, g);
	*free_blocks = ext2fs_bg_free_blocks_count(fs, g);
	if (in_use)
		*in_use = ext2fs_test_block_bitmap2(fs->block_map, test_blk) != 0;
	ext2fs_close_free(&fs);
}

/* Small groups, few inodes: files and directories land in many groups. */
#define MANY_GROUPS "-g 1024 -N 256"

START_TEST(test_alloc_free_in_many_groups)
{
	char path[256], name[32];
	struct nx_volume *vol;
	ext2_ino_t dirs[4], ino, maxino = 0;
	int i;

	nxt_root_cred(&root);
	/* Sizes leave the last group short: its bitmap needs padding. */
	mkimg(path, _i, MANY_GROUPS, _i == 0 ? 25 : 98);
	vol = nxt_open(path);
	for (i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		ck_assert_int_eq(nx_mkdir(vol, &root, EXT2_ROOT_INO, name,
					  0755, &dirs[i]), 0);
	}
	for (i = 0; i < 80; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		ino = create(vol, dirs[i % 4], name);
		if (ino > maxino)
			maxino = ino;
		fill(vol, ino, 0, 1000 + (size_t)(i % 7) * 60000, i);
		if (i == 40)
			ck_assert_int_eq(nx_volume_sync(vol), 0);
	}
	/* Spread well beyond group 0. */
	ck_assert_uint_ge(group_of_ino(vol->fs, maxino), 3);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	for (i = 0; i < 80; i += 3) {
		snprintf(name, sizeof(name), "f%d", i);
		delete(vol, dirs[i % 4], name);
	}
	for (i = 1; i < 80; i += 5) {
		if (i % 3 == 0)
			continue;	/* deleted above */
		snprintf(name, sizeof(name), "f%d", i);
		ck_assert_int_eq(nx_lookup(vol, dirs[i % 4], name, &ino), 0);
		fill(vol, ino, 300000, 70000, i);
	}
	ck_assert_int_eq(nx_mkdir(vol, &root, dirs[3], "late", 0755, &ino), 0);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	for (i = 2; i < 80; i += 6) {
		snprintf(name, sizeof(name), "f%d", i);
		if (i % 3)
			delete(vol, dirs[i % 4], name);
	}
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * Between two write-backs one group gains a block and loses another (and
 * likewise an inode): its counts are as before, only the bitmaps differ.
 * A stale bitmap on disk is what e2fsck would report.
 */
START_TEST(test_net_zero_change_in_one_group)
{
	char path[256];
	struct nx_volume *vol;
	ext2_ino_t x, y, z;
	blk64_t xb, yb;
	dgrp_t g, gi;
	uint32_t free_b, free_i;
	size_t bs;

	nxt_root_cred(&root);
	mkimg(path, _i, "", 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	x = create(vol, EXT2_ROOT_INO, "x");
	fill(vol, x, 0, 2 * bs, 1);
	y = create(vol, EXT2_ROOT_INO, "y");
	xb = first_block(vol, x);
	ck_assert_int_eq(nx_volume_sync(vol), 0);

	g = ext2fs_group_of_blk2(vol->fs, xb);
	gi = group_of_ino(vol->fs, x);
	free_b = ext2fs_bg_free_blocks_count(vol->fs, g);
	free_i = ext2fs_bg_free_inodes_count(vol->fs, gi);
	fill(vol, y, 0, 2 * bs, 2);		/* takes two new blocks... */
	ck_assert_int_eq(nx_file_truncate(vol, x, 0), 0); /* ...frees two */
	z = create(vol, EXT2_ROOT_INO, "z");	/* a new inode... */
	delete(vol, EXT2_ROOT_INO, "x");	/* ...and one less */
	yb = first_block(vol, y);
	ck_assert_uint_ne(yb, xb);
	ck_assert_uint_eq(ext2fs_group_of_blk2(vol->fs, yb), g);
	ck_assert_uint_eq(group_of_ino(vol->fs, z), gi);
	ck_assert_uint_eq(ext2fs_bg_free_blocks_count(vol->fs, g), free_b);
	ck_assert_uint_eq(ext2fs_bg_free_inodes_count(vol->fs, gi), free_i);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* A group mke2fs left BLOCK_UNINIT (past group 0), or 0 if none. */
static dgrp_t uninit_group(ext2_filsys fs, dgrp_t after)
{
	dgrp_t g;

	if (!ext2fs_has_group_desc_csum(fs))
		return 0;
	for (g = after + 1; g + 1 < fs->group_desc_count; g++)
		if (ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
			return g;
	return 0;
}

START_TEST(test_first_allocation_in_uninit_group)
{
	char path[256];
	struct nx_volume *vol;
	ext2_filsys fs;
	ext2_ino_t f, big;
	dgrp_t g, h;
	blk64_t blk, tmp;
	uint16_t flags;
	uint32_t nfree;
	int in_use;

	nxt_root_cred(&root);
	mkimg(path, _i, MANY_GROUPS, _i == 0 ? 25 : 98);
	vol = nxt_open(path);
	fs = vol->fs;
	g = uninit_group(fs, 0);
	h = g ? uninit_group(fs, g) : 0;
	if (ext2fs_has_group_desc_csum(fs))
		ck_assert_msg(g && h, "mke2fs left no BLOCK_UNINIT groups");
	if (!g) {	/* ext2/ext3: every bitmap is initialised */
		g = 5;
		h = 9;
	}
	/* One block, through the per-block allocation callback. */
	f = create(vol, EXT2_ROOT_INO, "f");
	blk = give_block(vol, f, ext2fs_group_first_block2(fs, g));
	ck_assert_uint_eq(ext2fs_group_of_blk2(fs, blk), g);
	ck_assert(!ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT));
	/* Taken and given back before the write-back: counts unchanged. */
	ck_assert_int_eq(ext2fs_new_block2(fs, ext2fs_group_first_block2(fs, h),
					   NULL, &tmp), 0);
	ck_assert_uint_eq(ext2fs_group_of_blk2(fs, tmp), h);
	ext2fs_block_alloc_stats2(fs, tmp, +1);
	ext2fs_block_alloc_stats2(fs, tmp, -1);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	/* A file growing through later groups (range allocations). */
	big = create(vol, EXT2_ROOT_INO, "big");
	fill(vol, big, 0, 20 << 20, 3);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);

	disk_group(path, g, &flags, &nfree, blk, &in_use);
	ck_assert(!(flags & EXT2_BG_BLOCK_UNINIT));
	ck_assert(in_use);
	nxt_unlink(path);
}
END_TEST

/*
 * meta_bg: descriptor block D lives in group D * (descriptors per block).
 * _i: 0 with 64-bit descriptors, 1 with 32-bit ones.
 */
START_TEST(test_meta_bg_descriptors)
{
	char path[256];
	struct nx_volume *vol;
	ext2_filsys fs;
	ext2_ino_t f1, f2;
	blk64_t b1, b2;
	dgrp_t g1, g2, per;
	uint16_t flags;
	uint32_t want1, want2, nfree;
	int in_use;

	nxt_root_cred(&root);
	nxt_mkfs(path, _i ? "-t ext4 -O meta_bg,^resize_inode,^64bit -g 1024 "
		 "-N 4096" : "-t ext4 -O meta_bg,^resize_inode -g 1024 -N 4096",
		 1024);
	vol = nxt_open(path);
	fs = vol->fs;
	ck_assert(ext2fs_has_feature_meta_bg(fs->super));
	ck_assert_uint_ge(fs->desc_blocks, 2);
	per = EXT2_DESC_PER_BLOCK(fs->super);
	f1 = create(vol, EXT2_ROOT_INO, "f1");
	f2 = create(vol, EXT2_ROOT_INO, "f2");
	/* Groups described by the second and by the last descriptor block. */
	b1 = give_block(vol, f1, ext2fs_group_first_block2(fs, per + 3));
	b2 = give_block(vol, f2, ext2fs_group_first_block2(fs,
				fs->group_desc_count - 2));
	g1 = ext2fs_group_of_blk2(fs, b1);
	g2 = ext2fs_group_of_blk2(fs, b2);
	ck_assert_uint_eq(g1 / per, 1);
	ck_assert_uint_eq(g2 / per, fs->desc_blocks - 1);
	want1 = ext2fs_bg_free_blocks_count(fs, g1);
	want2 = ext2fs_bg_free_blocks_count(fs, g2);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);

	/* Read back from the primary descriptors, where libext2fs looks. */
	disk_group(path, g1, &flags, &nfree, b1, &in_use);
	ck_assert(in_use);
	ck_assert_uint_eq(nfree, want1);
	disk_group(path, g2, &flags, &nfree, b2, &in_use);
	ck_assert(in_use);
	ck_assert_uint_eq(nfree, want2);
	nxt_unlink(path);
}
END_TEST

/* Writes the sync after a one-block write costs on a fresh image. */
static uint64_t one_block_cost(int flavour, const char *extra, unsigned mb,
			       dgrp_t *groups, uint64_t *bytes)
{
	char path[256];
	struct nx_volume *vol;
	ext2_ino_t f;
	uint64_t n, freed;

	mkimg(path, flavour, extra, mb);
	vol = nxt_open(path);
	*groups = vol->fs->group_desc_count;
	f = create(vol, EXT2_ROOT_INO, "f");
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	fill(vol, f, 0, vol->fs->blocksize, 1);
	n = sync_writes(vol, bytes);
	/* libext2fs sees nothing dirty: ext2fs_close() will write nothing. */
	ck_assert_int_eq(vol->fs->flags & (EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY |
					   EXT2_FLAG_IB_DIRTY), 0);
	ck_assert_int_eq(nx_file_truncate(vol, f, 0), 0);
	freed = sync_writes(vol, NULL);
	ck_assert_uint_eq(freed, n);
	/* Nothing changed: nothing to write. */
	ck_assert_uint_eq(sync_writes(vol, NULL), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
	return n;
}

/*
 * 2 groups and 512: 1k blocks make 8 MiB groups, 4k ones with -g 4096
 * 16 MiB groups.  Few inodes and a small journal keep mke2fs quick.
 */
#define GEO_1K "-N 4096"
#define GEO_4K "-b 4096 -g 4096 -N 4096 -J size=4"
#define SMALL_MB(i) ((i) == 0 ? 16 : 32)
#define BIG_MB(i) ((i) == 0 ? 4096 : 8192)

START_TEST(test_write_cost_independent_of_groups)
{
	const char *geo = _i == 0 ? GEO_1K : GEO_4K;
	dgrp_t small_groups, big_groups;
	uint64_t small, big, small_bytes, big_bytes;

	nxt_root_cred(&root);
	small = one_block_cost(_i, geo, SMALL_MB(_i), &small_groups,
			       &small_bytes);
	big = one_block_cost(_i, geo, BIG_MB(_i), &big_groups, &big_bytes);
	ck_assert_uint_eq(small_groups, 2);
	ck_assert_uint_eq(big_groups, 512);
	/*
	 * A block bitmap, its descriptor block, the superblock (each logged
	 * first and then written in place when there is a journal): the
	 * same on 512 groups as on 2, where ext2fs_flush2() would write
	 * every group's bitmaps.
	 */
	ck_assert_uint_le(small, 16);
	ck_assert_uint_eq(big, small);
	ck_assert_uint_eq(big_bytes, small_bytes);
}
END_TEST

/* Taking a snapshot writes as little on 512 groups as on 2. */
static uint64_t take_cost(int flavour, const char *extra, unsigned mb)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_blkio_stats a, b;

	mkimg(path, flavour, extra, mb);
	vol = nxt_open(path);
	ck_assert_int_eq(nx_snap_take(vol, "first", NULL), 0);
	fill(vol, create(vol, EXT2_ROOT_INO, "f"), 0, 3 * vol->fs->blocksize,
	     1);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	nx_blkio_get_stats(vol->io, &a);
	ck_assert_int_eq(nx_snap_take(vol, "second", NULL), 0);
	nx_blkio_get_stats(vol->io, &b);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
	return b.write_calls - a.write_calls;
}

START_TEST(test_snapshot_take_cost_independent_of_groups)
{
	const char *geo = _i == 0 ? GEO_1K : GEO_4K;
	uint64_t small, big;

	nxt_root_cred(&root);
	small = take_cost(_i, geo, SMALL_MB(_i));
	big = take_cost(_i, geo, BIG_MB(_i));
	/* Not one write per group: a few more bitmaps at most. */
	ck_assert_uint_le(big, small + 4);
	ck_assert_uint_lt(big, 64);
}
END_TEST

/* Read or overwrite block BLK of the image behind the volume's back. */
static void raw_block(const char *path, blk64_t blk, unsigned bs, void *buf,
		      int write)
{
	int fd = open(path, write ? O_WRONLY : O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	n = write ? pwrite(fd, buf, bs, (off_t)(blk * bs))
		  : pread(fd, buf, bs, (off_t)(blk * bs));
	ck_assert_int_eq(n, (ssize_t)bs);
	close(fd);
}

/*
 * Group 0's bitmaps are wiped on disk while the volume is open: a sync
 * leaves them alone (nothing changed in memory), nx_meta_dirty_all()
 * makes the next one rewrite everything.  Read-only volumes track nothing.
 */
START_TEST(test_dirty_all_and_read_only)
{
	char path[256], msg[256];
	struct nx_volume *vol;
	blk64_t bb, ib;
	unsigned bs;
	char *zero, *buf;

	nxt_root_cred(&root);
	mkimg(path, _i, MANY_GROUPS, _i == 0 ? 25 : 98);
	vol = nxt_open(path);
	ck_assert_ptr_nonnull(vol->meta);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	bs = vol->fs->blocksize;
	bb = ext2fs_block_bitmap_loc(vol->fs, 0);
	ib = ext2fs_inode_bitmap_loc(vol->fs, 0);
	zero = calloc(1, bs);
	buf = malloc(bs);
	ck_assert_ptr_nonnull(zero);
	ck_assert_ptr_nonnull(buf);
	raw_block(path, bb, bs, zero, 1);
	raw_block(path, ib, bs, zero, 1);
	vol->fs->super->s_mtime++;	/* something for the sync to write */
	ext2fs_mark_super_dirty(vol->fs);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	/* Unchanged in memory, so not rewritten. */
	raw_block(path, bb, bs, buf, 0);
	ck_assert(!memcmp(buf, zero, bs));
	raw_block(path, ib, bs, buf, 0);
	ck_assert(!memcmp(buf, zero, bs));
	nx_meta_dirty_all(vol);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	raw_block(path, bb, bs, buf, 0);
	ck_assert(memcmp(buf, zero, bs));
	raw_block(path, ib, bs, buf, 0);
	ck_assert(memcmp(buf, zero, bs));
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);

	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, msg,
					sizeof(msg)), 0);
	ck_assert_ptr_null(vol->meta);
	nx_meta_dirty_block(vol, 100);
	nx_meta_dirty_inode(vol, EXT2_ROOT_INO);
	nx_meta_dirty_all(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck(path), 0);
	free(zero);
	free(buf);
	nxt_unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("meta");
	TCase *tc = tcase_create("write-back");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_alloc_free_in_many_groups, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_net_zero_change_in_one_group, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_first_allocation_in_uninit_group, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_meta_bg_descriptors, 0, 2);
	tcase_add_loop_test(tc, test_write_cost_independent_of_groups, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_snapshot_take_cost_independent_of_groups,
			    0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_dirty_all_and_read_only, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
