/*
 * test_crc32c.c - the process-wide ext2fs_crc32c_le() (crc32c.h): every
 * implementation computes libext2fs's function exactly, and libext2fs's
 * own checksum code really runs ours.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "fixture.h"
#include "nextfs/crc32c.h"

static unsigned rnd_state = 12345;

static unsigned rnd(void)
{
	rnd_state = rnd_state * 1103515245U + 12345U;
	return rnd_state >> 8;
}

/* The CRC-32C check value of "123456789" (RFC 3720, appendix B.4). */
START_TEST(test_known_answer)
{
	const unsigned char *s = (const unsigned char *)"123456789";

	ck_assert_uint_eq(~ext2fs_crc32c_le(~0U, s, 9), 0xE3069283U);
	ck_assert_uint_eq(~nx_crc32c_table(~0U, s, 9), 0xE3069283U);
}
END_TEST

/*
 * Every implementation against libext2fs's own, for every length up to
 * 80, around the block sizes checksummed most (1 KiB, 4 KiB) and random
 * ones, at every misalignment up to 7, with seeds 0, ~0 and random ones
 * (checksums chain: seed = previous result).
 */
START_TEST(test_implementations_match_libext2fs)
{
	nx_crc32c_fn ref = nx_crc32c_libext2fs(), hw = nx_crc32c_hardware();
	unsigned char *buf = malloc(9000 + 8);
	size_t len, off, i;
	static const size_t edges[] = { 1023, 1024, 1025, 4095, 4096, 4097,
					8192 };
	int round;

	ck_assert_ptr_nonnull(ref);
	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < 9008; i++)
		buf[i] = (unsigned char)rnd();
	for (round = 0; round < 800; round++) {
		__u32 seed = round % 3 == 0 ? 0 : round % 3 == 1 ? ~0U : rnd();
		__u32 want;

		if (round < 81)
			len = (size_t)round;
		else if (round < 81 + 8 * 7)
			len = edges[(round - 81) / 8];
		else
			len = rnd() % 9000;
		off = (size_t)round % 8;
		want = ref(seed, buf + off, len);
		ck_assert_uint_eq(ext2fs_crc32c_le(seed, buf + off, len), want);
		ck_assert_uint_eq(nx_crc32c_table(seed, buf + off, len), want);
		if (hw)
			ck_assert_uint_eq(hw(seed, buf + off, len), want);
	}
	free(buf);
}
END_TEST

static __u32 wrong_crc(__u32 crc, unsigned char const *p, size_t len)
{
	return nx_crc32c_table(crc, p, len) ^ 0x5a5a5a5aU;
}

/*
 * libext2fs's superblock checksum (metadata_csum) goes through the
 * active implementation: replacing it with a wrong one changes what
 * libext2fs computes, and putting it back restores libext2fs's answer.
 */
START_TEST(test_libext2fs_checksums_through_us)
{
	nx_crc32c_fn ref = nx_crc32c_libext2fs(), prev;
	char path[256];
	struct nx_volume *vol;
	struct ext2_super_block sb;
	__u32 good;

	nxt_mkfs(path, "-t ext4 -O metadata_csum", 16);
	vol = nxt_open(path);
	ck_assert(ext2fs_has_feature_metadata_csum(vol->fs->super));
	memcpy(&sb, vol->fs->super, sizeof(sb));
	ext2fs_superblock_csum_set(vol->fs, &sb);
	good = sb.s_checksum;
	ck_assert_uint_eq(good, ref(~0U, (unsigned char *)&sb,
				    offsetof(struct ext2_super_block,
					     s_checksum)));

	prev = nx_crc32c_use(wrong_crc);
	ext2fs_superblock_csum_set(vol->fs, &sb);
	nx_crc32c_use(prev);
	ck_assert_uint_ne(sb.s_checksum, good);
	ext2fs_superblock_csum_set(vol->fs, &sb);
	ck_assert_uint_eq(sb.s_checksum, good);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* The hardware is used wherever it exists. */
START_TEST(test_hardware_chosen_when_present)
{
	if (nx_crc32c_hardware())
		ck_assert_str_eq(nx_crc32c_name(), "sse4.2");
	else
		ck_assert_str_ne(nx_crc32c_name(), "sse4.2");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_known_answer);
	tcase_add_test(tc, test_implementations_match_libext2fs);
	tcase_add_test(tc, test_libext2fs_checksums_through_us);
	tcase_add_test(tc, test_hardware_chosen_when_present);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
