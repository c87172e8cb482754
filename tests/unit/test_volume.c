/*
 * test_volume.c - the contract of volume.h, which the layers above lean
 * on: a writer marks the volume in use on disk and clean again at close
 * (so that e2fsck and the kernel know a crash from an unmount), holds it
 * alone (docs/design.md P12), and a read-only open or a refusal writes
 * nothing (P13).  The integration tests see the same through a mount;
 * these see it at the library's edge, without FUSE.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/bitmaps.h"
#include "nextfs/blkio.h"

/* The primary superblock as it is on disk now. */
static void read_super(const char *path, struct ext2_super_block *sb)
{
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, sb, sizeof(*sb), 1024), sizeof(*sb));
	close(fd);
}

/*
 * Open for writing: not clean on disk (with a journal: needs recovery),
 * one more mount counted; close: clean, recovery not needed, fsck clean.
 */
START_TEST(test_writer_marks_in_use_and_clean_at_close)
{
	struct ext2_super_block sb;
	struct nx_volume *vol;
	char path[256];
	uint16_t mounts;
	int journal;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	read_super(path, &sb);
	ck_assert(sb.s_state & EXT2_VALID_FS);
	mounts = sb.s_mnt_count;
	journal = ext2fs_has_feature_journal(&sb);

	vol = nxt_open(path);
	read_super(path, &sb);
	ck_assert(!(sb.s_state & EXT2_VALID_FS));
	ck_assert_int_eq(ext2fs_has_feature_journal_needs_recovery(&sb),
			 journal);
	ck_assert_uint_eq(sb.s_mnt_count, mounts + 1);

	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	read_super(path, &sb);
	ck_assert(sb.s_state & EXT2_VALID_FS);
	ck_assert(!ext2fs_has_feature_journal_needs_recovery(&sb));
	nxt_unlink(path);
}
END_TEST

static errcode_t try_open(const char *path, int flags, struct nx_volume **vol,
			  char *msg, size_t len)
{
	*vol = NULL;
	return nx_open_volume(path, flags, vol, msg, len);
}

/*
 * One writer: while a writer has the volume, neither a second writer nor
 * a reader gets it ("in use", EBUSY); readers share it with each other
 * but keep writers out.
 */
START_TEST(test_one_writer_or_many_readers)
{
	struct nx_volume *w, *r1, *r2, *x;
	char path[256], msg[512];

	nxt_mkfs(path, "-t ext4", 16);
	w = nxt_open(path);
	ck_assert_int_eq(try_open(path, 0, &x, msg, sizeof(msg)), EBUSY);
	ck_assert_ptr_null(x);
	ck_assert_ptr_nonnull(strstr(msg, "in use"));
	ck_assert_int_eq(try_open(path, NX_VOL_RDONLY, &x, msg, sizeof(msg)),
			 EBUSY);
	ck_assert_int_eq(nx_volume_close(w), 0);

	ck_assert_int_eq(try_open(path, NX_VOL_RDONLY, &r1, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(try_open(path, NX_VOL_RDONLY, &r2, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(try_open(path, 0, &x, msg, sizeof(msg)), EBUSY);
	ck_assert_int_eq(nx_volume_close(r1), 0);
	ck_assert_int_eq(nx_volume_close(r2), 0);
	ck_assert_int_eq(nxt_fsck(path), 0);
	nxt_unlink(path);
}
END_TEST

/* A read-only open, with reads and statfs, leaves every byte as it was. */
START_TEST(test_reader_writes_nothing)
{
	struct nx_volume *vol;
	struct statvfs st;
	char path[256], msg[512], buf[4096];
	uint64_t before;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	before = nxt_file_hash(path);
	ck_assert_int_eq(try_open(path, NX_VOL_RDONLY, &vol, msg,
				  sizeof(msg)), 0);
	ck_assert(nx_volume_rdonly(vol));
	ck_assert_int_eq(nx_volume_pread(vol, buf, sizeof(buf), 0), 0);
	ck_assert_int_eq(nx_volume_statfs(vol, &st), 0);
	ck_assert(st.f_flag & ST_RDONLY);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_uint_eq(nxt_file_hash(path), before);
	nxt_unlink(path);
}
END_TEST

/*
 * A volume that cannot be served for writing is refused with one line
 * naming why, and stays byte-identical; what can be read still opens
 * read-only.
 */
START_TEST(test_refusal_writes_nothing)
{
	struct nx_volume *vol;
	char path[256], msg[512];
	uint64_t before;
	int fd;

	/* a feature nextfs does not keep consistent (quota files) */
	nxt_mkfs(path, "-t ext4 -O quota", 16);
	before = nxt_file_hash(path);
	ck_assert_int_ne(try_open(path, 0, &vol, msg, sizeof(msg)), 0);
	ck_assert_ptr_null(vol);
	ck_assert_ptr_nonnull(strstr(msg, "quota"));
	ck_assert_ptr_null(strchr(msg, '\n'));
	ck_assert_uint_eq(nxt_file_hash(path), before);
	ck_assert_int_eq(try_open(path, NX_VOL_RDONLY, &vol, msg,
				  sizeof(msg)), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_uint_eq(nxt_file_hash(path), before);

	/* not a file system at all: the superblock area wiped */
	fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	memset(msg, 0, sizeof(msg));
	ck_assert_int_eq(pwrite(fd, msg, sizeof(msg), 1024), sizeof(msg));
	close(fd);
	before = nxt_file_hash(path);
	ck_assert_int_ne(try_open(path, 0, &vol, msg, sizeof(msg)), 0);
	ck_assert_ptr_null(vol);
	ck_assert_int_gt(strlen(msg), 0);
	ck_assert_uint_eq(nxt_file_hash(path), before);
	nxt_unlink(path);
}
END_TEST

/*
 * Allocate blocks and inodes in groups spread over the volume with
 * libext2fs itself, so that some groups are initialised and most (on the
 * large sparse image) are not.
 */
static void scatter_allocations(const char *path)
{
	ext2_filsys fs;
	blk64_t blk;
	ext2_ino_t ino;
	dgrp_t g;

	ck_assert_int_eq(ext2fs_open2(path, NULL, EXT2_FLAG_RW |
				      EXT2_FLAG_64BITS, 0, 0,
				      nx_blkio_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	for (g = 1; g < fs->group_desc_count; g += 3) {
		ck_assert_int_eq(ext2fs_new_block2(fs,
				ext2fs_group_first_block2(fs, g) + 7, NULL,
				&blk), 0);
		ext2fs_block_alloc_stats2(fs, blk, +1);
		if (g % 2)
			continue;
		ck_assert_int_eq(ext2fs_new_inode(fs, g *
				fs->super->s_inodes_per_group + 1, 0100644,
				NULL, &ino), 0);
		ext2fs_inode_alloc_stats2(fs, ino, +1, 0);
	}
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
}

static ext2_filsys open_for_bitmaps(const char *path)
{
	ext2_filsys fs;

	ck_assert_int_eq(ext2fs_open2(path, NULL, EXT2_FLAG_64BITS, 0, 0,
				      nx_blkio_manager, &fs), 0);
	fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* as volume.c */
	return fs;
}

static void assert_same_bitmaps(ext2_filsys a, ext2_filsys b)
{
	blk64_t first = a->super->s_first_data_block;
	blk64_t nblk = EXT2_GROUPS_TO_BLOCKS(a->super, a->group_desc_count);
	size_t ni = a->super->s_inodes_count;
	char *x = malloc(nblk / 8 + 1), *y = malloc(nblk / 8 + 1);
	char *p = malloc(ni / 8 + 1), *q = malloc(ni / 8 + 1);
	int tails = EXT2_FLAG_BBITMAP_TAIL_PROBLEM |
		    EXT2_FLAG_IBITMAP_TAIL_PROBLEM;

	ck_assert(x && y && p && q);
	ck_assert_int_eq(ext2fs_get_block_bitmap_range2(a->block_map, first,
							nblk, x), 0);
	ck_assert_int_eq(ext2fs_get_block_bitmap_range2(b->block_map, first,
							nblk, y), 0);
	ck_assert_msg(!memcmp(x, y, nblk / 8), "block bitmaps differ");
	ck_assert_int_eq(ext2fs_get_inode_bitmap_range2(a->inode_map, 1, ni,
							p), 0);
	ck_assert_int_eq(ext2fs_get_inode_bitmap_range2(b->inode_map, 1, ni,
							q), 0);
	ck_assert_msg(!memcmp(p, q, ni / 8), "inode bitmaps differ");
	ck_assert_int_eq(a->flags & tails, b->flags & tails);
	free(x);
	free(y);
	free(p);
	free(q);
}

/* libext2fs's loader and ours, on the same image: same bits or same error. */
static void compare_loaders(const char *path)
{
	ext2_filsys a = open_for_bitmaps(path), b = open_for_bitmaps(path);
	errcode_t ea = ext2fs_read_bitmaps(a), eb = nx_bitmaps_read(b);

	ck_assert_int_eq(eb, ea);
	if (!ea)
		assert_same_bitmaps(a, b);
	else
		ck_assert(!b->block_map && !b->inode_map);
	ext2fs_close_free(&a);
	ext2fs_close_free(&b);
}

/* Flip a byte of group G's block (INODE: inode) bitmap on disk. */
static void damage_bitmap(const char *path, dgrp_t g, int inode)
{
	ext2_filsys fs = open_for_bitmaps(path);
	blk64_t blk = inode ? ext2fs_inode_bitmap_loc(fs, g) :
			      ext2fs_block_bitmap_loc(fs, g);
	off_t off = (off_t)(blk * fs->blocksize) + 100;
	unsigned char c;
	int fd = open(path, O_RDWR);

	ext2fs_close_free(&fs);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, 1, off), 1);
	c ^= 0x10;
	ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/*
 * nx_bitmaps_read() skips uninitialised groups; what it loads must be
 * exactly libext2fs's, on every flavour and on a large sparse volume
 * with lazily initialised groups, and a damaged bitmap must fail it
 * with libext2fs's error (which the refusal names: test_damaged.py).
 */
START_TEST(test_bitmaps_load_like_libext2fs)
{
	char path[256], args[256];
	int big = _i == NXT_NFLAVOURS;

	/* Several groups on every flavour (4 KiB blocks: 16 MiB groups). */
	snprintf(args, sizeof(args), "%s%s", big ?
		 "-t ext4 -E lazy_itable_init=1 -N 65536" : nxt_flavours[_i],
		 _i == 0 ? "" : " -g 4096");
	nxt_mkfs(path, args, big ? 4096 : 96);
	compare_loaders(path);
	scatter_allocations(path);
	compare_loaders(path);
	if (big || _i >= 2) {		/* metadata_csum: damage is seen */
		damage_bitmap(path, 4, 0);	/* group 4 is initialised */
		compare_loaders(path);
		damage_bitmap(path, 4, 0);
		damage_bitmap(path, 4, 1);
		compare_loaders(path);
	}
	nxt_unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("volume");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_writer_marks_in_use_and_clean_at_close,
			    0, NXT_NFLAVOURS);
	tcase_add_test(tc, test_one_writer_or_many_readers);
	tcase_add_loop_test(tc, test_reader_writes_nothing, 0, NXT_NFLAVOURS);
	tcase_add_test(tc, test_refusal_writes_nothing);
	tcase_add_loop_test(tc, test_bitmaps_load_like_libext2fs, 0,
			    NXT_NFLAVOURS + 1);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
