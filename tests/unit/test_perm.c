/* test_perm.c - the kernel's permission rules as nextfs applies them. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/perm.h"

static void set_inode(struct ext2_inode *inode, mode_t mode, uid_t uid,
		      gid_t gid)
{
	memset(inode, 0, sizeof(*inode));
	inode->i_mode = mode;
	inode->i_uid = uid;
	inode->i_gid = gid;
}

START_TEST(test_mode_bits_pick_one_class)
{
	struct ext2_inode inode;
	struct nx_cred c;

	nxt_user_cred(&c, 1000, 100);
	/* Owner class applies even when it grants less than "other". */
	set_inode(&inode, S_IFREG | 0047, 1000, 100);
	ck_assert_int_eq(nx_perm_access(&c, &inode, R_OK), EACCES);
	set_inode(&inode, S_IFREG | 0407, 1000, 100);
	ck_assert_int_eq(nx_perm_access(&c, &inode, R_OK), 0);
	ck_assert_int_eq(nx_perm_access(&c, &inode, W_OK), EACCES);
	/* group class via supplementary group */
	set_inode(&inode, S_IFREG | 0060, 1, 555);
	ck_assert_int_eq(nx_perm_access(&c, &inode, R_OK | W_OK), EACCES);
	c.groups[c.ngroups++] = 555;
	ck_assert_int_eq(nx_perm_access(&c, &inode, R_OK | W_OK), 0);
}
END_TEST

START_TEST(test_root_override)
{
	struct ext2_inode inode;
	struct nx_cred root;

	nxt_root_cred(&root);
	set_inode(&inode, S_IFREG | 0000, 1000, 1000);
	ck_assert_int_eq(nx_perm_access(&root, &inode, R_OK | W_OK), 0);
	/* root may execute only if someone may */
	ck_assert_int_eq(nx_perm_access(&root, &inode, X_OK), EACCES);
	set_inode(&inode, S_IFREG | 0001, 1000, 1000);
	ck_assert_int_eq(nx_perm_access(&root, &inode, X_OK), 0);
	set_inode(&inode, S_IFDIR | 0000, 1000, 1000);
	ck_assert_int_eq(nx_perm_access(&root, &inode, X_OK), 0);
}
END_TEST

START_TEST(test_sticky_directory)
{
	struct ext2_inode dir, victim;
	struct nx_cred alice, bob, root;

	nxt_user_cred(&alice, 1001, 1001);
	nxt_user_cred(&bob, 1002, 1002);
	nxt_root_cred(&root);
	set_inode(&dir, S_IFDIR | 01777, 0, 0);
	set_inode(&victim, S_IFREG | 0666, 1001, 1001);
	ck_assert_int_eq(nx_perm_may_delete(&alice, &dir, &victim), 0);
	ck_assert_int_eq(nx_perm_may_delete(&bob, &dir, &victim), EPERM);
	ck_assert_int_eq(nx_perm_may_delete(&root, &dir, &victim), 0);
	/* without the sticky bit, write+search on the directory suffices */
	set_inode(&dir, S_IFDIR | 0777, 0, 0);
	ck_assert_int_eq(nx_perm_may_delete(&bob, &dir, &victim), 0);
	set_inode(&dir, S_IFDIR | 0755, 0, 0);
	ck_assert_int_eq(nx_perm_may_delete(&bob, &dir, &victim), EACCES);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("perm");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_mode_bits_pick_one_class);
	tcase_add_test(tc, test_root_override);
	tcase_add_test(tc, test_sticky_directory);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
