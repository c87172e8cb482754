/*
 * test_repl.c - replication below the CLI: snapshot identity
 * (nx_snap_uuid, snapshot.h), nextfs's private records (xattr.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fixture.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"

/*
 * The derivation is RFC 4122's version 5 (as Python's uuid.uuid5 computes
 * it, which gave the expected bytes), so any other implementation - a
 * receiver in another language - can reproduce it.
 */
START_TEST(test_snapshot_uuid_known_answer)
{
	static const unsigned char vol[16] = { 0x00, 0x11, 0x22, 0x33, 0x44,
		0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
		0xff };
	static const unsigned char want[16] = { 0xa4, 0x36, 0x14, 0xdc, 0x26,
		0xd6, 0x57, 0x8c, 0x86, 0x60, 0x98, 0xc3, 0x7b, 0x4d, 0x8a,
		0x4e };
	struct timespec t = { 1700000000, 500000000 };
	unsigned char u[16], v[16];

	nx_snap_uuid(vol, 1, &t, u);
	ck_assert_mem_eq(u, want, 16);
	nx_snap_uuid(vol, 2, &t, v);		/* another id */
	ck_assert(memcmp(u, v, 16) != 0);
	t.tv_nsec++;				/* another take time */
	nx_snap_uuid(vol, 1, &t, v);
	ck_assert(memcmp(u, v, 16) != 0);
}
END_TEST

/* Stable across reopening, the same from a view, unique per snapshot. */
START_TEST(test_snapshot_uuid_on_a_volume)
{
	struct nx_snapinfo a, b, a2;
	struct nx_volume *vol, *view;
	unsigned char ua[16], ub[16], again[16];
	char path[256];

	nxt_mkfs(path, "-t ext4", 16);
	vol = nxt_open(path);
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_snap_take(vol, "a", &a), 0);
	ck_assert_int_eq(nx_snap_take(vol, "b", &b), 0);
	nx_snap_uuid_of(vol, &a, ua);
	nx_snap_uuid_of(vol, &b, ub);
	ck_assert(memcmp(ua, ub, 16) != 0);
	ck_assert_int_eq(ua[6] >> 4, 5);	/* version 5 */
	ck_assert_int_eq(nx_snap_view_open(vol, b.ino, &view), 0);
	nx_snap_uuid_of(view, &a, again);
	nx_snap_view_close(view);
	ck_assert_mem_eq(again, ua, 16);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	vol = nxt_open(path);
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_snap_find(vol, "a", &a2), 0);
	nx_snap_uuid_of(vol, &a2, again);
	ck_assert_mem_eq(again, ua, 16);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * Private records: stored and read back, not changing ctime, invisible
 * and untouchable through the user calls (so no stream can forge one),
 * their external block given back when the last goes; e2fsck clean.
 */
START_TEST(test_private_records)
{
	struct ext2_inode_large before, after;
	struct nx_volume *vol;
	struct nx_cred root;
	char path[256], list[256], big[700];
	void *v;
	size_t len;
	int f;

	nxt_root_cred(&root);
	memset(big, 'x', sizeof(big));
	for (f = 0; f < NXT_NFLAVOURS; f++) {
		nxt_mkfs(path, nxt_flavours[f], 16);
		vol = nxt_open(path);
		nx_volume_lock(vol);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &before), 0);
		ck_assert_int_eq(nx_xattr_private_set(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", big, sizeof(big)), 0);
		ck_assert_int_eq(nx_xattr_private_get(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", &v, &len), 0);
		ck_assert_uint_eq(len, sizeof(big));
		ck_assert_mem_eq(v, big, len);
		free(v);
		ck_assert_int_eq(nx_listxattr(vol, &root, EXT2_ROOT_INO, list,
					      sizeof(list), &len), 0);
		ck_assert_uint_eq(len, 0);
		ck_assert_int_eq(nx_getxattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", list, sizeof(list),
				 &len), EOPNOTSUPP);
		ck_assert_int_eq(nx_setxattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", "x", 1, 0),
				 EOPNOTSUPP);
		ck_assert_int_eq(nx_removexattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), EOPNOTSUPP);
		ck_assert_int_eq(nx_xattr_private_set(vol, EXT2_ROOT_INO,
				 "user.x", "x", 1), EINVAL);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &after), 0);
		ck_assert_uint_eq(after.i_ctime, before.i_ctime);
		ck_assert_int_eq(nx_xattr_private_remove(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), 0);
		ck_assert_int_eq(nx_xattr_private_remove(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), ENODATA);
		ck_assert_int_eq(nx_xattr_private_get(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", &v, &len), ENODATA);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &after), 0);
		ck_assert_uint_eq(after.i_file_acl, 0);
		nx_volume_unlock(vol);
		ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
		nxt_unlink(path);
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("repl");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_snapshot_uuid_known_answer);
	tcase_add_test(tc, test_snapshot_uuid_on_a_volume);
	tcase_add_test(tc, test_private_records);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(suite());
}
