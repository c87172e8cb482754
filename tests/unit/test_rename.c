/*
 * test_rename.c - rename(2)/renameat2(): replacing files and empty
 * directories, the error matrix, RENAME_NOREPLACE, RENAME_EXCHANGE,
 * '..' and link counts, timestamps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/dir.h"
#include "nextfs/inode.h"

#define ROOT EXT2_ROOT_INO

static ext2_ino_t mkfile(struct nx_volume *vol, const struct nx_cred *c,
			 ext2_ino_t dir, const char *name)
{
	ext2_ino_t ino = 0;

	ck_assert_int_eq(nx_mknod(vol, c, dir, name, S_IFREG | 0644, 0, &ino),
			 0);
	return ino;
}

static ext2_ino_t mkdirp(struct nx_volume *vol, const struct nx_cred *c,
			 ext2_ino_t dir, const char *name)
{
	ext2_ino_t ino = 0;

	ck_assert_int_eq(nx_mkdir(vol, c, dir, name, 0755, &ino), 0);
	return ino;
}

static unsigned nlink_of(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	return inode.i_links_count;
}

static ext2_ino_t lookup(struct nx_volume *vol, ext2_ino_t dir,
			 const char *name)
{
	ext2_ino_t ino = 0;
	errcode_t err = nx_lookup(vol, dir, name, &ino);

	ck_assert(err == 0 || err == ENOENT);
	return err ? 0 : ino;
}

static void age_inode(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;
	struct timespec old = { 1000, 0 };

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	nx_inode_set_time(&inode, NX_MTIME, &old);
	nx_inode_set_time(&inode, NX_CTIME, &old);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
}

/* ctime moved on; mtime too if MTIME, else untouched. */
static void assert_touched(struct nx_volume *vol, ext2_ino_t ino, int mtime)
{
	struct stat st;

	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	ck_assert_int_gt(st.st_ctim.tv_sec, 1000);
	if (mtime)
		ck_assert_int_gt(st.st_mtim.tv_sec, 1000);
	else
		ck_assert_int_eq(st.st_mtim.tv_sec, 1000);
}

static void release(struct nx_volume *vol, ext2_ino_t ino)
{
	ck_assert_uint_eq(nlink_of(vol, ino), 0);
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
}

static int count_entries(void *priv, const char *name, size_t len,
			 ext2_ino_t ino, unsigned char type, uint64_t next)
{
	(*(size_t *)priv)++;
	return 0;
}

static size_t entries_in(struct nx_volume *vol, ext2_ino_t dir)
{
	size_t n = 0;

	ck_assert_int_eq(nx_readdir(vol, dir, 0, count_entries, &n), 0);
	return n;
}

START_TEST(test_rename_file_over_file)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t a, b, d, replaced;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	d = mkdirp(vol, &root, ROOT, "d");
	a = mkfile(vol, &root, ROOT, "a");
	b = mkfile(vol, &root, d, "b");
	age_inode(vol, ROOT);
	age_inode(vol, d);
	age_inode(vol, a);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "a", d, "b", 0,
				   &replaced), 0);
	ck_assert_uint_eq(replaced, b);
	ck_assert_uint_eq(lookup(vol, ROOT, "a"), 0);
	ck_assert_uint_eq(lookup(vol, d, "b"), a);
	ck_assert_uint_eq(nlink_of(vol, a), 1);
	assert_touched(vol, a, 0);
	assert_touched(vol, ROOT, 1);
	assert_touched(vol, d, 1);
	release(vol, b);
	/* Plain move within one directory, to a new name. */
	ck_assert_int_eq(nx_rename(vol, &root, d, "b", d, "c", 0, &replaced),
			 0);
	ck_assert_uint_eq(replaced, 0);
	ck_assert_uint_eq(lookup(vol, d, "c"), a);
	ck_assert_uint_eq(lookup(vol, d, "b"), 0);
	ck_assert_uint_eq(entries_in(vol, d), 3);
	ck_assert_int_eq(nx_rename(vol, &root, d, "b", d, "x", 0, &replaced),
			 ENOENT);
	ck_assert_int_eq(nx_rename(vol, &root, d, "c", d, "x", 4, &replaced),
			 EINVAL);
	ck_assert_int_eq(nx_rename(vol, &root, d, "c", d, "x",
				   RENAME_NOREPLACE | RENAME_EXCHANGE,
				   &replaced), EINVAL);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_rename_dirs)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t d1, d2, x, y, full, deep, replaced, f;
	unsigned n1, n2;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	d1 = mkdirp(vol, &root, ROOT, "d1");
	d2 = mkdirp(vol, &root, ROOT, "d2");
	x = mkdirp(vol, &root, d1, "x");
	mkfile(vol, &root, x, "inside");
	y = mkdirp(vol, &root, d2, "y");
	full = mkdirp(vol, &root, d2, "full");
	mkfile(vol, &root, full, "f");
	f = mkfile(vol, &root, d2, "file");
	deep = mkdirp(vol, &root, x, "deep");
	n1 = nlink_of(vol, d1);
	n2 = nlink_of(vol, d2);

	/* The error matrix first: nothing may change. */
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", d2, "full", 0,
				   &replaced), ENOTEMPTY);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", d2, "file", 0,
				   &replaced), ENOTDIR);
	ck_assert_int_eq(nx_rename(vol, &root, d2, "file", d2, "y", 0,
				   &replaced), EISDIR);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", deep, "x2", 0,
				   &replaced), EINVAL);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", x, "x2", 0,
				   &replaced), EINVAL);
	ck_assert_int_eq(nx_rename(vol, &root, x, "deep", d1, "x", 0,
				   &replaced), ENOTEMPTY);
	ck_assert_int_eq(nx_rename(vol, &root, d1, ".", d2, "z", 0,
				   &replaced), EBUSY);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", d2, "..",
				   RENAME_NOREPLACE, &replaced), EEXIST);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", d2, "y",
				   RENAME_NOREPLACE, &replaced), EEXIST);
	ck_assert_uint_eq(lookup(vol, d1, "x"), x);
	ck_assert_uint_eq(lookup(vol, d2, "y"), y);
	ck_assert_uint_eq(nlink_of(vol, d1), n1);

	/* Directory over an empty directory in another parent. */
	age_inode(vol, x);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "x", d2, "y", 0,
				   &replaced), 0);
	ck_assert_uint_eq(replaced, y);
	ck_assert_uint_eq(nlink_of(vol, y), 0);
	release(vol, y);
	ck_assert_uint_eq(lookup(vol, d2, "y"), x);
	ck_assert_uint_eq(lookup(vol, x, ".."), d2);
	ck_assert_uint_eq(lookup(vol, x, "inside") != 0, 1);
	ck_assert_uint_eq(nlink_of(vol, d1), n1 - 1);
	ck_assert_uint_eq(nlink_of(vol, d2), n2);
	ck_assert_uint_eq(nlink_of(vol, x), 3);
	assert_touched(vol, x, 0);

	/* Directory to a new name in another parent. */
	ck_assert_int_eq(nx_rename(vol, &root, d2, "y", d1, "back", 0,
				   &replaced), 0);
	ck_assert_uint_eq(replaced, 0);
	ck_assert_uint_eq(lookup(vol, x, ".."), d1);
	ck_assert_uint_eq(nlink_of(vol, d1), n1);
	ck_assert_uint_eq(nlink_of(vol, d2), n2 - 1);

	/* Within one parent the count stays. */
	ck_assert_int_eq(nx_rename(vol, &root, d1, "back", d1, "again", 0,
				   &replaced), 0);
	ck_assert_uint_eq(nlink_of(vol, d1), n1);
	ck_assert_uint_eq(lookup(vol, x, ".."), d1);
	/* Replacing an empty sibling directory drops one link. */
	mkdirp(vol, &root, d1, "sib");
	ck_assert_uint_eq(nlink_of(vol, d1), n1 + 1);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "again", d1, "sib", 0,
				   &replaced), 0);
	ck_assert_uint_eq(nlink_of(vol, d1), n1);
	release(vol, replaced);
	(void)f;
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_rename_same_inode_noop)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t a, replaced = 99;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	a = mkfile(vol, &root, ROOT, "a");
	ck_assert_int_eq(nx_link(vol, &root, a, ROOT, "b"), 0);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "a", ROOT, "b", 0,
				   &replaced), 0);
	ck_assert_uint_eq(replaced, 0);
	ck_assert_uint_eq(lookup(vol, ROOT, "a"), a);
	ck_assert_uint_eq(lookup(vol, ROOT, "b"), a);
	ck_assert_uint_eq(nlink_of(vol, a), 2);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "a", ROOT, "a", 0,
				   &replaced), 0);
	ck_assert_uint_eq(lookup(vol, ROOT, "a"), a);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_rename_noreplace)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t a, b;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	a = mkfile(vol, &root, ROOT, "a");
	b = mkfile(vol, &root, ROOT, "b");
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "a", ROOT, "b",
				   RENAME_NOREPLACE, NULL), EEXIST);
	ck_assert_uint_eq(lookup(vol, ROOT, "b"), b);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "a", ROOT, "c",
				   RENAME_NOREPLACE, NULL), 0);
	ck_assert_uint_eq(lookup(vol, ROOT, "c"), a);
	ck_assert_uint_eq(lookup(vol, ROOT, "a"), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_rename_exchange)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t d1, d2, f, g, h, replaced;
	unsigned n1, n2;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	d1 = mkdirp(vol, &root, ROOT, "d1");
	d2 = mkdirp(vol, &root, ROOT, "d2");
	f = mkfile(vol, &root, d1, "f");
	g = mkdirp(vol, &root, d2, "g");
	mkfile(vol, &root, g, "content");
	n1 = nlink_of(vol, d1);
	n2 = nlink_of(vol, d2);

	ck_assert_int_eq(nx_rename(vol, &root, d1, "f", d2, "missing",
				   RENAME_EXCHANGE, &replaced), ENOENT);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "missing", d2, "g",
				   RENAME_EXCHANGE, &replaced), ENOENT);
	/* A directory cannot swap with something inside itself. */
	h = mkfile(vol, &root, g, "h");
	ck_assert_int_eq(nx_rename(vol, &root, d2, "g", g, "h",
				   RENAME_EXCHANGE, &replaced), EINVAL);
	ck_assert_int_eq(nx_rename(vol, &root, g, "h", d2, "g",
				   RENAME_EXCHANGE, &replaced), EINVAL);

	age_inode(vol, d1);
	age_inode(vol, d2);
	age_inode(vol, f);
	age_inode(vol, g);
	ck_assert_int_eq(nx_rename(vol, &root, d1, "f", d2, "g",
				   RENAME_EXCHANGE, &replaced), 0);
	ck_assert_uint_eq(replaced, 0);
	ck_assert_uint_eq(lookup(vol, d1, "f"), g);
	ck_assert_uint_eq(lookup(vol, d2, "g"), f);
	ck_assert_uint_eq(lookup(vol, g, ".."), d1);
	ck_assert_uint_eq(lookup(vol, g, "h"), h);
	ck_assert_uint_eq(nlink_of(vol, d1), n1 + 1);
	ck_assert_uint_eq(nlink_of(vol, d2), n2 - 1);
	ck_assert_uint_eq(nlink_of(vol, f), 1);
	ck_assert_uint_eq(nlink_of(vol, g), 2);
	assert_touched(vol, f, 0);
	assert_touched(vol, g, 0);
	assert_touched(vol, d1, 1);
	assert_touched(vol, d2, 1);
	{
		/* The directory entry types were swapped too. */
		struct ext2_inode_large inode;

		ck_assert_int_eq(nx_inode_read(vol, g, &inode), 0);
		ck_assert(LINUX_S_ISDIR(inode.i_mode));
	}
	/* And back, within one directory too. */
	ck_assert_int_eq(nx_rename(vol, &root, d2, "g", d1, "f",
				   RENAME_EXCHANGE, NULL), 0);
	ck_assert_uint_eq(lookup(vol, g, ".."), d2);
	ck_assert_uint_eq(nlink_of(vol, d1), n1);
	ck_assert_uint_eq(nlink_of(vol, d2), n2);
	mkfile(vol, &root, d1, "other");
	ck_assert_int_eq(nx_rename(vol, &root, d1, "f", d1, "other",
				   RENAME_EXCHANGE, NULL), 0);
	ck_assert_uint_eq(lookup(vol, d1, "other"), f);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_rename_permissions)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root, alice;
	ext2_ino_t a1, a2, locked;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	nxt_user_cred(&alice, 1000, 1000);
	root.umask = 0;
	ck_assert_int_eq(nx_mkdir(vol, &root, ROOT, "pub", 0777, &a2), 0);
	/* Alice may not create in root's 0755 root directory. */
	ck_assert_int_eq(nx_rename(vol, &alice, a2, "nothing", ROOT, "x", 0,
				   NULL), ENOENT);
	mkfile(vol, &alice, a2, "mine");
	ck_assert_int_eq(nx_rename(vol, &alice, a2, "mine", ROOT, "x", 0,
				   NULL), EACCES);
	/* A directory she cannot write cannot change parent ('..'). */
	ck_assert_int_eq(nx_mkdir(vol, &root, a2, "locked", 0555, &locked), 0);
	ck_assert_int_eq(nx_rename(vol, &alice, a2, "locked", a2, "renamed",
				   0, NULL), 0);
	ck_assert_int_eq(nx_mkdir(vol, &alice, a2, "target", 0755, &a1), 0);
	ck_assert_int_eq(nx_rename(vol, &alice, a2, "renamed", a1, "moved",
				   0, NULL), EACCES);
	ck_assert_int_eq(nx_rename(vol, &root, a2, "renamed", a1, "moved", 0,
				   NULL), 0);
	ck_assert_uint_eq(lookup(vol, locked, ".."), a1);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Many renames inside one big (htree) directory and across to another. */
START_TEST(test_rename_many_in_htree)
{
	char path[256], name[64], name2[64];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t d, e, *inos;
	size_t i, n = 2000;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	d = mkdirp(vol, &root, ROOT, "d");
	e = mkdirp(vol, &root, ROOT, "e");
	inos = calloc(n, sizeof(*inos));
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "orig-%zu", i);
		inos[i] = mkfile(vol, &root, d, name);
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "orig-%zu", i);
		snprintf(name2, sizeof(name2), "renamed-name-%zu", i);
		ck_assert_int_eq(nx_rename(vol, &root, d, name,
					   i % 2 ? d : e, name2, 0, NULL), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "orig-%zu", i);
		snprintf(name2, sizeof(name2), "renamed-name-%zu", i);
		ck_assert_uint_eq(lookup(vol, d, name), 0);
		ck_assert_uint_eq(lookup(vol, i % 2 ? d : e, name2), inos[i]);
	}
	ck_assert_uint_eq(entries_in(vol, d), n / 2 + 2);
	ck_assert_uint_eq(entries_in(vol, e), n / 2 + 2);
	free(inos);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

Suite *rename_suite(void)
{
	Suite *s = suite_create("rename");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_rename_file_over_file, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_dirs, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_same_inode_noop, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_noreplace, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_exchange, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_permissions, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_rename_many_in_htree, 0, NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(rename_suite());
}
