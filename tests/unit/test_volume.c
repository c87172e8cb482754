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

int main(void)
{
	Suite *s = suite_create("volume");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_writer_marks_in_use_and_clean_at_close,
			    0, NXT_NFLAVOURS);
	tcase_add_test(tc, test_one_writer_or_many_readers);
	tcase_add_loop_test(tc, test_reader_writes_nothing, 0, NXT_NFLAVOURS);
	tcase_add_test(tc, test_refusal_writes_nothing);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
