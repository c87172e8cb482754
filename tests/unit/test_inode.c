/* test_inode.c - inode attributes, timestamps, setattr rules, release. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/inode.h"

static errcode_t nx_lookup_for_test(struct nx_volume *vol, const char *name,
				    ext2_ino_t *ino)
{
	return ext2fs_lookup(vol->fs, EXT2_ROOT_INO, name, strlen(name), NULL,
			     ino);
}

static int nx_getattr_blocks_nonzero(struct nx_volume *vol, ext2_ino_t ino)
{
	struct stat st;

	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	return st.st_blocks != 0;
}

static ext2_ino_t new_file(struct nx_volume *vol, const struct nx_cred *cred,
			   mode_t mode, const char *name)
{
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(nx_inode_new(vol, cred, EXT2_ROOT_INO, mode, &ino,
				      &inode), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, EXT2_ROOT_INO, name, ino,
				     S_ISDIR(mode) ? EXT2_FT_DIR :
				     EXT2_FT_REG_FILE), 0);
	return ino;
}

START_TEST(test_new_inode_owner_and_times)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred user;
	struct stat st;
	ext2_ino_t ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_user_cred(&user, 1234, 5678);
	ino = new_file(vol, &user, S_IFREG | 0640, "f");
	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	ck_assert_uint_eq(st.st_uid, 1234);
	ck_assert_uint_eq(st.st_gid, 5678);
	ck_assert_uint_eq(st.st_mode, S_IFREG | 0640);
	ck_assert_uint_eq(st.st_nlink, 1);
	ck_assert_int_eq(st.st_size, 0);
	ck_assert_int_ne(st.st_mtim.tv_sec, 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_nanosecond_timestamps)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	struct nx_attr attr = { 0 };
	struct stat st;
	ext2_ino_t ino;
	int large;

	/* One extra round with 128-byte inodes: seconds only. */
	nxt_mkfs(path, _i < NXT_NFLAVOURS ? nxt_flavours[_i] :
		 "-t ext2 -I 128", 32);
	vol = nxt_open(path);
	large = EXT2_INODE_SIZE(vol->fs->super) > EXT2_GOOD_OLD_INODE_SIZE;
	nxt_root_cred(&root);
	ino = new_file(vol, &root, S_IFREG | 0644, "f");
	attr.atime.tv_sec = 1234567890;
	attr.atime.tv_nsec = 123456789;
	/* Past 2038: needs the epoch bits in i_mtime_extra. */
	attr.mtime.tv_sec = 4102444800LL;
	attr.mtime.tv_nsec = 999999999;
	ck_assert_int_eq(nx_setattr(vol, &root, ino, &attr,
				    NX_SET_ATIME | NX_SET_MTIME, NULL), 0);
	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	ck_assert_int_eq(st.st_atim.tv_sec, 1234567890);
	if (large) {
		ck_assert_int_eq(st.st_atim.tv_nsec, 123456789);
		ck_assert_int_eq(st.st_mtim.tv_sec, 4102444800LL);
		ck_assert_int_eq(st.st_mtim.tv_nsec, 999999999);
	} else {
		ck_assert_int_eq(st.st_atim.tv_nsec, 0);
	}
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_setattr_ownership_rules)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root, owner, other;
	struct nx_attr attr = { 0 };
	struct stat st;
	ext2_ino_t ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	nxt_user_cred(&other, 2000, 2000);
	ino = new_file(vol, &owner, S_IFREG | 06755, "f");

	attr.mode = 0777;
	ck_assert_int_eq(nx_setattr(vol, &other, ino, &attr, NX_SET_MODE, NULL),
			 EPERM);
	attr.uid = 1000;
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_UID, NULL),
			 0);	/* chown to oneself is a no-op, allowed */
	attr.uid = 2000;
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_UID, NULL),
			 EPERM);
	attr.gid = 3000;	/* owner not in group 3000 */
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_GID, NULL),
			 EPERM);
	owner.groups[owner.ngroups++] = 3000;
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_GID, &st),
			 0);
	/* chgrp of a setuid, group-executable file drops both bits */
	ck_assert_uint_eq(st.st_mode & 07777, 0755);
	ck_assert_uint_eq(st.st_gid, 3000);
	/* explicit times: owner only; "now": anyone with write access */
	ck_assert_int_eq(nx_setattr(vol, &other, ino, &attr, NX_SET_MTIME, NULL),
			 EPERM);
	ck_assert_int_eq(nx_setattr(vol, &other, ino, &attr,
				    NX_SET_MTIME_NOW, NULL), EACCES);
	attr.mode = 0666;
	ck_assert_int_eq(nx_setattr(vol, &root, ino, &attr, NX_SET_MODE, NULL),
			 0);
	ck_assert_int_eq(nx_setattr(vol, &other, ino, &attr,
				    NX_SET_MTIME_NOW, NULL), 0);
	/* chmod g+s by a non-member drops setgid */
	attr.mode = 02755;
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_MODE, &st),
			 0);
	ck_assert_uint_eq(st.st_mode & 07777, 02755);	/* member of 3000 */
	owner.ngroups = 0;
	ck_assert_int_eq(nx_setattr(vol, &owner, ino, &attr, NX_SET_MODE, &st),
			 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0755);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_setgid_directory_inheritance)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root, user;
	struct ext2_inode_large inode;
	struct stat st;
	ext2_ino_t dir, ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	nxt_user_cred(&user, 1000, 1000);
	ck_assert_int_eq(ext2fs_mkdir(vol->fs, EXT2_ROOT_INO, 0, "d"), 0);
	ck_assert_int_eq(nx_lookup_for_test(vol, "d", &dir), 0);
	ck_assert_int_eq(nx_inode_read(vol, dir, &inode), 0);
	inode.i_mode = S_IFDIR | 02777;
	inode.i_gid = 4242;
	ck_assert_int_eq(nx_inode_write(vol, dir, &inode), 0);
	ck_assert_int_eq(nx_inode_new(vol, &user, dir, S_IFDIR | 0755, &ino,
				      &inode), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, dir, "sub", ino, EXT2_FT_DIR), 0);
	nx_inode_to_stat(vol, ino, &inode, &st);
	ck_assert_uint_eq(st.st_gid, 4242);
	ck_assert_uint_eq(st.st_mode & 07777, 02755);
	/* make it a valid empty directory for fsck: unlink and release */
	ck_assert_int_eq(ext2fs_unlink(vol->fs, dir, "sub", ino, 0), 0);
	inode.i_links_count = 0;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_release_frees_blocks)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	struct ext2_inode_large inode;
	blk64_t free_before, blk;
	ext2_ino_t ino;
	int i;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	free_before = ext2fs_free_blocks_count(vol->fs->super);
	ino = new_file(vol, &root, S_IFREG | 0644, "f");
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	for (i = 0; i < 20; i++) {
		blk = 0;
		ck_assert_int_eq(ext2fs_bmap2(vol->fs, ino,
					      (struct ext2_inode *)&inode, NULL,
					      BMAP_ALLOC, i, NULL, &blk), 0);
	}
	ck_assert_int_eq(ext2fs_inode_size_set(vol->fs,
			 (struct ext2_inode *)&inode, 20 * vol->fs->blocksize), 0);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_lt(ext2fs_free_blocks_count(vol->fs->super), free_before);
	/* still linked: release must not free anything */
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
	ck_assert_int_eq(nx_getattr_blocks_nonzero(vol, ino), 1);
	ck_assert_int_eq(ext2fs_unlink(vol->fs, EXT2_ROOT_INO, "f", ino, 0), 0);
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	inode.i_links_count = 0;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), free_before);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* A file that owns the volume's last block can be freed (libext2fs bug). */
START_TEST(test_release_file_holding_last_block)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	struct ext2_inode_large inode;
	blk64_t lblk, blk, last, free_before;
	ext2_ino_t ino;
	int holds_last = 0;

	nxt_mkfs(path, "-t ext4 -b 1024 -O ^has_journal", 4);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	free_before = ext2fs_free_blocks_count(vol->fs->super);
	last = ext2fs_blocks_count(vol->fs->super) - 1;
	ino = new_file(vol, &root, S_IFREG | 0644, "f");
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	for (lblk = 0;; lblk++) {
		blk = 0;
		if (ext2fs_bmap2(vol->fs, ino, (struct ext2_inode *)&inode, NULL,
				 BMAP_ALLOC, lblk, NULL, &blk))
			break;
		holds_last |= blk == last;
	}
	ck_assert_msg(holds_last, "the file never got the last block");
	ck_assert_int_eq(ext2fs_inode_size_set(vol->fs,
			 (struct ext2_inode *)&inode, lblk * vol->fs->blocksize),
			 0);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(ext2fs_unlink(vol->fs, EXT2_ROOT_INO, "f", ino, 0), 0);
	inode.i_links_count = 0;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), free_before);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

Suite *inode_suite(void)
{
	Suite *s = suite_create("inode");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_new_inode_owner_and_times, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_nanosecond_timestamps, 0,
			    NXT_NFLAVOURS + 1);
	tcase_add_loop_test(tc, test_setattr_ownership_rules, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_setgid_directory_inheritance, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_release_frees_blocks, 0, NXT_NFLAVOURS);
	tcase_add_test(tc, test_release_file_holding_last_block);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(inode_suite());
}
