/* test_xattr.c - extended attributes, POSIX ACLs and inode flags. */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/posix_acl.h>
#include "fixture.h"
#include "nextfs/inode.h"
#include "nextfs/xattr.h"

/* The fixture's flavours plus one with 128-byte inodes (no in-inode area). */
#define NFLAV (NXT_NFLAVOURS + 1)
#define INLINE_FLAVOUR 3	/* ext4 + inline_data */
#define ACC "system.posix_acl_access"
#define NX_TEST_BIG 65537	/* one byte past XATTR_SIZE_MAX */

static const char *flavour(int i)
{
	return i < NXT_NFLAVOURS ? nxt_flavours[i] : "-t ext2 -b 1024 -I 128";
}

static struct nx_volume *setup(char *path, int i)
{
	nxt_mkfs(path, flavour(i), 16);
	return nxt_open(path);
}

static void finish(struct nx_volume *vol, const char *path)
{
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}

static ext2_ino_t new_file(struct nx_volume *vol, const struct nx_cred *cred,
			   ext2_ino_t dir, mode_t mode, const char *name)
{
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(nx_inode_new(vol, cred, dir, mode, &ino, &inode), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, dir, name, ino,
				     EXT2_FT_REG_FILE), 0);
	return ino;
}

static ext2_ino_t new_symlink(struct nx_volume *vol,
			      const struct nx_cred *cred, const char *name)
{
	static const char target[] = "target";
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(nx_inode_new(vol, cred, EXT2_ROOT_INO,
				      S_IFLNK | 0777, &ino, &inode), 0);
	inode.i_size = sizeof(target) - 1;
	memcpy(inode.i_block, target, sizeof(target) - 1);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, EXT2_ROOT_INO, name, ino,
				     EXT2_FT_SYMLINK), 0);
	return ino;
}

/* A real directory (with . and ..) owned by UID:GID with MODE. */
static ext2_ino_t new_dir(struct nx_volume *vol, ext2_ino_t parent,
			  const char *name, uid_t uid, mode_t mode)
{
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(ext2fs_mkdir(vol->fs, parent, 0, name), 0);
	ck_assert_int_eq(ext2fs_lookup(vol->fs, parent, name, strlen(name),
				       NULL, &ino), 0);
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	inode.i_uid = uid;
	inode.i_gid = uid;
	inode.i_mode = S_IFDIR | mode;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	return ino;
}

static struct ext2_inode_large get_inode(struct nx_volume *vol,
					 ext2_ino_t ino)
{
	struct ext2_inode_large inode;

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	return inode;
}

/* Push ctime into the past so that a later update is visible. */
static void age_ctime(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode = get_inode(vol, ino);
	struct timespec old = { 1000000, 0 };

	nx_inode_set_time(&inode, NX_CTIME, &old);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
}

static int ctime_is_recent(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode = get_inode(vol, ino);
	struct timespec ts;

	nx_inode_get_time(&inode, NX_CTIME, &ts);
	return ts.tv_sec > 1000000;
}

static int set(struct nx_volume *vol, const struct nx_cred *c,
	       ext2_ino_t ino, const char *name, const char *value)
{
	return (int)nx_setxattr(vol, c, ino, name, value, strlen(value), 0);
}

/* Does INO have NAME = VALUE (as seen by C)? */
static void assert_value(struct nx_volume *vol, const struct nx_cred *c,
			 ext2_ino_t ino, const char *name, const void *value,
			 size_t len)
{
	char *buf = malloc(len + 1);
	size_t got = 0;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(nx_getxattr(vol, c, ino, name, NULL, 0, &got), 0);
	ck_assert_uint_eq(got, len);
	ck_assert_int_eq(nx_getxattr(vol, c, ino, name, buf, len + 1, &got),
			 0);
	ck_assert_uint_eq(got, len);
	ck_assert_int_eq(memcmp(buf, value, len), 0);
	free(buf);
}

/* Is NAME in the list C gets for INO?  The list must be well formed. */
static int listed(struct nx_volume *vol, const struct nx_cred *c,
		  ext2_ino_t ino, const char *name)
{
	char buf[8192];
	size_t len = 0, off;
	int found = 0;

	ck_assert_int_eq(nx_listxattr(vol, c, ino, buf, sizeof(buf), &len), 0);
	ck_assert(len == 0 || buf[len - 1] == '\0');
	for (off = 0; off < len; off += strlen(buf + off) + 1)
		if (strcmp(buf + off, name) == 0)
			found++;
	ck_assert_int_le(found, 1);
	return found;
}

START_TEST(test_set_get_list_remove)
{
	char path[256], buf[64];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root;
	ext2_ino_t ino;
	size_t len;

	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	age_ctime(vol, ino);
	ck_assert_int_eq(set(vol, &root, ino, "user.colour", "blue"), 0);
	ck_assert(ctime_is_recent(vol, ino));
	ck_assert_int_eq(set(vol, &root, ino, "security.label", "s0"), 0);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.empty", "", 0, 0),
			 0);

	assert_value(vol, &root, ino, "user.colour", "blue", 4);
	assert_value(vol, &root, ino, "security.label", "s0", 2);
	assert_value(vol, &root, ino, "user.empty", "", 0);
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, "user.colour", buf, 3,
				     &len), ERANGE);
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, "user.none", buf,
				     sizeof(buf), &len), ENODATA);

	/* list: size 0 gives the length, a short buffer ERANGE. */
	ck_assert_int_eq(nx_listxattr(vol, &root, ino, NULL, 0, &len), 0);
	ck_assert_uint_eq(len, sizeof("user.colour") + sizeof("security.label")
			  + sizeof("user.empty"));
	ck_assert_int_eq(nx_listxattr(vol, &root, ino, buf, len - 1, &len),
			 ERANGE);
	ck_assert(listed(vol, &root, ino, "user.colour"));
	ck_assert(listed(vol, &root, ino, "security.label"));

	/* Replace keeps one copy. */
	ck_assert_int_eq(set(vol, &root, ino, "user.colour", "green!"), 0);
	assert_value(vol, &root, ino, "user.colour", "green!", 6);
	ck_assert(listed(vol, &root, ino, "user.colour"));

	age_ctime(vol, ino);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.colour"), 0);
	ck_assert(ctime_is_recent(vol, ino));
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, "user.colour", buf,
				     sizeof(buf), &len), ENODATA);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.colour"),
			 ENODATA);
	ck_assert(!listed(vol, &root, ino, "user.colour"));
	assert_value(vol, &root, ino, "security.label", "s0", 2);

	/* Directories take user.* too. */
	ck_assert_int_eq(set(vol, &root, EXT2_ROOT_INO, "user.d", "1"), 0);
	assert_value(vol, &root, EXT2_ROOT_INO, "user.d", "1", 1);
	finish(vol, path);
}
END_TEST

START_TEST(test_create_replace_flags)
{
	char path[256];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root;
	ext2_ino_t ino;

	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.a", "1", 1,
				     XATTR_REPLACE), ENODATA);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.a", "1", 1,
				     XATTR_CREATE), 0);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.a", "2", 1,
				     XATTR_CREATE), EEXIST);
	assert_value(vol, &root, ino, "user.a", "1", 1);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.a", "22", 2,
				     XATTR_REPLACE), 0);
	assert_value(vol, &root, ino, "user.a", "22", 2);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.a", "3", 1, 4),
			 EINVAL);
	assert_value(vol, &root, ino, "user.a", "22", 2);
	finish(vol, path);
}
END_TEST

START_TEST(test_names)
{
	char path[256], name[300], buf[16];
	struct nx_volume *vol = setup(path, _i);
	static const char *const unsupported[] = {
		"foo.bar", "system.data", "system.foo", "system.richacl",
		"system.posix_acl_accessX", "User.x",
	};
	struct nx_cred root;
	ext2_ino_t ino;
	size_t len, i;

	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	for (i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		ck_assert_int_eq(set(vol, &root, ino, unsupported[i], "x"),
				 EOPNOTSUPP);
		ck_assert_int_eq(nx_getxattr(vol, &root, ino, unsupported[i],
					     buf, sizeof(buf), &len),
				 EOPNOTSUPP);
		ck_assert_int_eq(nx_removexattr(vol, &root, ino,
						unsupported[i]), EOPNOTSUPP);
	}
	ck_assert_int_eq(set(vol, &root, ino, "user.", "x"), EINVAL);
	ck_assert_int_eq(set(vol, &root, ino, "", "x"), ERANGE);

	/* 255 characters is the longest name; one more is ERANGE. */
	memset(name, 'n', 256);
	memcpy(name, "user.", 5);
	name[256] = '\0';
	ck_assert_int_eq(set(vol, &root, ino, name, "v"), ERANGE);
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, name, buf, sizeof(buf),
				     &len), ERANGE);
	name[255] = '\0';
	ck_assert_int_eq(set(vol, &root, ino, name, "v"), 0);
	assert_value(vol, &root, ino, name, "v", 1);
	ck_assert(listed(vol, &root, ino, name));
	finish(vol, path);
}
END_TEST

/* Free blocks and i_file_acl of INO, to follow the external block. */
static blk64_t ea_block(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode = get_inode(vol, ino);

	return ext2fs_file_acl_block(vol->fs, (struct ext2_inode *)&inode);
}

START_TEST(test_large_value_spills_and_block_is_freed)
{
	char path[256];
	struct nx_volume *vol = setup(path, _i);
	unsigned bs = vol->fs->blocksize;
	int in_inode = EXT2_INODE_SIZE(vol->fs->super) >
		       EXT2_GOOD_OLD_INODE_SIZE;
	struct nx_cred root;
	blk64_t free0;
	ext2_ino_t ino;
	char *big = malloc(NX_TEST_BIG);
	size_t i;
	struct stat st;

	ck_assert_ptr_nonnull(big);
	for (i = 0; i < NX_TEST_BIG; i++)
		big[i] = (char)(i * 7 + 3);
	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	free0 = ext2fs_free_blocks_count(vol->fs->super);

	/* A small value lives in the inode when there is room there. */
	ck_assert_int_eq(set(vol, &root, ino, "user.small", "tiny"), 0);
	if (in_inode) {
		ck_assert_uint_eq(ea_block(vol, ino), 0);
		ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super),
				  free0);
	} else {
		ck_assert_uint_ne(ea_block(vol, ino), 0);
	}

	/* Half a block goes to the external block. */
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.big", big, bs / 2,
				     0), 0);
	ck_assert_uint_ne(ea_block(vol, ino), 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), free0 - 1);
	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	ck_assert_int_eq(st.st_blocks, bs / 512);
	assert_value(vol, &root, ino, "user.big", big, bs / 2);
	assert_value(vol, &root, ino, "user.small", "tiny", 4);

	/* A whole block cannot fit anywhere; nothing changes. */
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.huge", big, bs, 0),
			 ENOSPC);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.big", big, bs, 0),
			 ENOSPC);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.huge", big,
				     NX_TEST_BIG, 0), E2BIG);
	assert_value(vol, &root, ino, "user.big", big, bs / 2);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), free0 - 1);

	/* Removing the last attribute in the block frees the block. */
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.big"), 0);
	if (in_inode) {
		ck_assert_uint_eq(ea_block(vol, ino), 0);
		ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super),
				  free0);
		ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
		ck_assert_int_eq(st.st_blocks, 0);
	}
	assert_value(vol, &root, ino, "user.small", "tiny", 4);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.small"), 0);
	ck_assert_uint_eq(ea_block(vol, ino), 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super), free0);

	/* Shrinking a block value so that it moves into the inode. */
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, "user.big", big, bs / 2,
				     0), 0);
	ck_assert_int_eq(set(vol, &root, ino, "user.big", "now small"), 0);
	assert_value(vol, &root, ino, "user.big", "now small", 9);
	if (in_inode)
		ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super),
				  free0);
	free(big);
	finish(vol, path);
}
END_TEST

START_TEST(test_many_attrs_until_full)
{
	char path[256], name[32], value[32];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root;
	ext2_ino_t ino;
	int n, i;
	errcode_t err = 0;

	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	for (n = 0; n < 1000; n++) {
		snprintf(name, sizeof(name), "user.attribute%04d", n);
		snprintf(value, sizeof(value), "value-%d", n * 31);
		err = set(vol, &root, ino, name, value);
		if (err)
			break;
	}
	ck_assert_int_eq(err, ENOSPC);
	ck_assert_int_gt(n, 10);
	ck_assert(!listed(vol, &root, ino, name));	/* the failed one */
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "user.attribute%04d", i);
		snprintf(value, sizeof(value), "value-%d", i * 31);
		assert_value(vol, &root, ino, name, value, strlen(value));
		ck_assert(listed(vol, &root, ino, name));
	}
	/* Remove every other one; the rest stays intact. */
	for (i = 0; i < n; i += 2) {
		snprintf(name, sizeof(name), "user.attribute%04d", i);
		ck_assert_int_eq(nx_removexattr(vol, &root, ino, name), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "user.attribute%04d", i);
		snprintf(value, sizeof(value), "value-%d", i * 31);
		if (i % 2)
			assert_value(vol, &root, ino, name, value,
				     strlen(value));
		else
			ck_assert(!listed(vol, &root, ino, name));
	}
	finish(vol, path);
}
END_TEST

START_TEST(test_trusted_needs_root)
{
	char path[256], buf[16];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root, owner;
	ext2_ino_t ino;
	size_t len;

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	ino = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0666, "f");
	ck_assert_int_eq(set(vol, &owner, ino, "trusted.t", "x"), EPERM);
	ck_assert_int_eq(set(vol, &root, ino, "trusted.t", "secret"), 0);
	ck_assert_int_eq(set(vol, &owner, ino, "user.u", "open"), 0);

	ck_assert(!listed(vol, &owner, ino, "trusted.t"));
	ck_assert(listed(vol, &owner, ino, "user.u"));
	ck_assert_int_eq(nx_listxattr(vol, &owner, ino, NULL, 0, &len), 0);
	ck_assert_uint_eq(len, sizeof("user.u"));
	ck_assert(listed(vol, &root, ino, "trusted.t"));
	ck_assert_int_eq(nx_getxattr(vol, &owner, ino, "trusted.t", buf,
				     sizeof(buf), &len), ENODATA);
	assert_value(vol, &root, ino, "trusted.t", "secret", 6);
	ck_assert_int_eq(nx_removexattr(vol, &owner, ino, "trusted.t"), EPERM);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "trusted.t"), 0);
	finish(vol, path);
}
END_TEST

START_TEST(test_user_and_security_rules)
{
	char path[256], buf[16];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root, owner, other;
	ext2_ino_t priv, shared, link, sticky;
	size_t len;

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	nxt_user_cred(&other, 2000, 2000);
	priv = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0600, "priv");
	shared = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0666, "shared");
	link = new_symlink(vol, &owner, "link");
	sticky = new_dir(vol, EXT2_ROOT_INO, "tmp", 1000, 01777);

	/* user.* follows the file's read/write permission. */
	ck_assert_int_eq(set(vol, &owner, priv, "user.a", "1"), 0);
	ck_assert_int_eq(set(vol, &other, priv, "user.a", "2"), EACCES);
	ck_assert_int_eq(nx_getxattr(vol, &other, priv, "user.a", buf,
				     sizeof(buf), &len), EACCES);
	ck_assert_int_eq(nx_removexattr(vol, &other, priv, "user.a"), EACCES);
	/* Names are public. */
	ck_assert(listed(vol, &other, priv, "user.a"));
	ck_assert_int_eq(set(vol, &root, priv, "user.b", "3"), 0);
	ck_assert_int_eq(set(vol, &other, shared, "user.a", "4"), 0);
	assert_value(vol, &other, shared, "user.a", "4", 1);

	/* ... only on regular files and directories. */
	ck_assert_int_eq(set(vol, &owner, link, "user.a", "1"), EPERM);
	ck_assert_int_eq(set(vol, &root, link, "user.a", "1"), EPERM);
	ck_assert_int_eq(nx_getxattr(vol, &owner, link, "user.a", buf,
				     sizeof(buf), &len), ENODATA);
	ck_assert_int_eq(set(vol, &root, link, "trusted.a", "1"), 0);

	/* Sticky directory: writable by all, labelled by its owner only. */
	ck_assert_int_eq(set(vol, &other, sticky, "user.a", "1"), EPERM);
	ck_assert_int_eq(set(vol, &owner, sticky, "user.a", "1"), 0);

	/* security.*: owner or root writes, anyone reads. */
	ck_assert_int_eq(set(vol, &other, shared, "security.x", "1"), EPERM);
	ck_assert_int_eq(set(vol, &owner, priv, "security.x", "lbl"), 0);
	assert_value(vol, &other, priv, "security.x", "lbl", 3);
	ck_assert_int_eq(nx_removexattr(vol, &other, priv, "security.x"),
			 EPERM);
	/* File capabilities are root's only. */
	ck_assert_int_eq(set(vol, &owner, priv, "security.capability", "c"),
			 EPERM);
	ck_assert_int_eq(set(vol, &root, priv, "security.capability", "c"), 0);
	ck_assert_int_eq(nx_removexattr(vol, &owner, priv,
					"security.capability"), EPERM);
	finish(vol, path);
}
END_TEST

/* ---- ACLs ------------------------------------------------------------- */

struct ace {
	uint16_t tag, perm;
	uint32_t id;
};

#define NOID 0xffffffffu

/* The kernel's posix_acl_xattr format: version 2, {tag, perm, id}. */
static size_t acl_xattr(void *buf, const struct ace *e, size_t n,
			uint32_t version)
{
	unsigned char *p = buf;
	uint32_t v = htole32(version);
	size_t i;

	memcpy(p, &v, 4);
	for (i = 0; i < n; i++) {
		uint16_t tag = htole16(e[i].tag), perm = htole16(e[i].perm);
		uint32_t id = htole32(e[i].id);

		memcpy(p + 4 + 8 * i, &tag, 2);
		memcpy(p + 6 + 8 * i, &perm, 2);
		memcpy(p + 8 + 8 * i, &id, 4);
	}
	return 4 + 8 * n;
}

static mode_t mode_of(struct nx_volume *vol, ext2_ino_t ino)
{
	return get_inode(vol, ino).i_mode & 07777;
}

/* The value as stored on disk (ext4 format), via libext2fs in raw mode. */
static size_t raw_acl(struct nx_volume *vol, ext2_ino_t ino,
		      const char *name, unsigned char *out)
{
	struct ext2_xattr_handle *h;
	unsigned int flags = XATTR_HANDLE_FLAG_RAW;
	void *value;
	size_t len;

	ck_assert_int_eq(ext2fs_xattrs_open(vol->fs, ino, &h), 0);
	ck_assert_int_eq(ext2fs_xattrs_flags(h, &flags, NULL), 0);
	ck_assert_int_eq(ext2fs_xattrs_read(h), 0);
	ck_assert_int_eq(ext2fs_xattr_get(h, name, &value, &len), 0);
	memcpy(out, value, len);
	ext2fs_free_mem(&value);
	ext2fs_xattrs_close(&h);
	return len;
}

static const struct ace full_acl[] = {
	{ ACL_USER_OBJ, 6, NOID },
	{ ACL_USER, 4, 2000 },
	{ ACL_GROUP_OBJ, 4, NOID },
	{ ACL_GROUP, 7, 3000 },
	{ ACL_MASK, 6, NOID },
	{ ACL_OTHER, 0, NOID },
};

#define NACE(a) (sizeof(a) / sizeof((a)[0]))

START_TEST(test_acl_roundtrip)
{
	char path[256];
	unsigned char val[256], raw[256], got[256];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root, owner, other;
	ext2_ino_t ino;
	size_t len, n;

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	nxt_user_cred(&other, 2000, 2000);
	ino = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	len = acl_xattr(val, full_acl, NACE(full_acl), 2);

	ck_assert_int_eq(nx_setxattr(vol, &other, ino, ACC,
				     val, len, 0), EPERM);
	age_ctime(vol, ino);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, ACC,
				     val, len, XATTR_CREATE), 0);
	ck_assert(ctime_is_recent(vol, ino));
	/* Byte for byte what was set, readable by anyone. */
	assert_value(vol, &other, ino, ACC, val, len);
	ck_assert(listed(vol, &other, ino, ACC));
	/* The group class bits now show the mask. */
	ck_assert_uint_eq(mode_of(vol, ino), 0660);
	/* On disk: ext4 format, version 1, short entries without an id. */
	n = raw_acl(vol, ino, ACC, raw);
	ck_assert_uint_eq(n, 4 + 4 + 8 + 4 + 8 + 4 + 4);
	ck_assert_uint_eq(raw[0], 1);
	ck_assert_uint_eq(raw[4], ACL_USER_OBJ);
	ck_assert_uint_eq(raw[8], ACL_USER);
	ck_assert_uint_eq(raw[12] | raw[13] << 8, 2000);

	/* A short buffer is ERANGE. */
	ck_assert_int_eq(nx_getxattr(vol, &owner, ino, ACC,
				     got, len - 1, &n), ERANGE);

	/* ACL names ignore XATTR_CREATE/REPLACE like the kernel. */
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, ACC,
				     val, len, XATTR_CREATE), 0);

	ck_assert_int_eq(nx_removexattr(vol, &owner, ino, ACC), 0);
	ck_assert_int_eq(nx_getxattr(vol, &owner, ino, ACC,
				     got, sizeof(got), &n), ENODATA);
	/* Removing an absent ACL is not an error (setfacl -b). */
	ck_assert_int_eq(nx_removexattr(vol, &owner, ino, ACC), 0);
	finish(vol, path);
}
END_TEST

START_TEST(test_acl_validation_and_minimal)
{
	char path[256];
	unsigned char val[256], got[256];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred owner;
	ext2_ino_t ino, link;
	size_t len, n;
	const char *acc = ACC;
	static const struct ace no_mask[] = {
		{ ACL_USER_OBJ, 6, NOID }, { ACL_USER, 4, 2000 },
		{ ACL_GROUP_OBJ, 4, NOID }, { ACL_OTHER, 0, NOID },
	};
	static const struct ace bad_order[] = {
		{ ACL_GROUP_OBJ, 4, NOID }, { ACL_USER_OBJ, 6, NOID },
		{ ACL_OTHER, 0, NOID },
	};
	static const struct ace bad_perm[] = {
		{ ACL_USER_OBJ, 8, NOID }, { ACL_GROUP_OBJ, 4, NOID },
		{ ACL_OTHER, 0, NOID },
	};
	static const struct ace bad_tag[] = {
		{ ACL_USER_OBJ, 6, NOID }, { ACL_GROUP_OBJ, 4, NOID },
		{ 0x40, 0, NOID }, { ACL_OTHER, 0, NOID },
	};
	static const struct ace minimal[] = {
		{ ACL_USER_OBJ, 7, NOID }, { ACL_GROUP_OBJ, 5, NOID },
		{ ACL_OTHER, 0, NOID },
	};

	nxt_user_cred(&owner, 1000, 1000);
	ino = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 02644, "f");
	link = new_symlink(vol, &owner, "l");

	len = acl_xattr(val, no_mask, NACE(no_mask), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0),
			 EINVAL);
	len = acl_xattr(val, bad_order, NACE(bad_order), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0),
			 EINVAL);
	len = acl_xattr(val, bad_perm, NACE(bad_perm), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0),
			 EINVAL);
	len = acl_xattr(val, bad_tag, NACE(bad_tag), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0),
			 EINVAL);
	len = acl_xattr(val, minimal, NACE(minimal), 1);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0),
			 EOPNOTSUPP);
	len = acl_xattr(val, minimal, NACE(minimal), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, 6, 0), EINVAL);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, 3, 0), EINVAL);
	ck_assert_int_eq(nx_setxattr(vol, &owner, link, acc, val, len, 0),
			 EOPNOTSUPP);
	ck_assert_int_eq(nx_getxattr(vol, &owner, link, acc, got, sizeof(got),
				     &n), EOPNOTSUPP);
	ck_assert_uint_eq(mode_of(vol, ino), 02644);

	/* An ACL the mode can express only changes the mode. */
	len = acl_xattr(val, minimal, NACE(minimal), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0), 0);
	/* The owner is in the group, so setgid survives. */
	ck_assert_uint_eq(mode_of(vol, ino), 02750);
	ck_assert_int_eq(nx_getxattr(vol, &owner, ino, acc, got, sizeof(got),
				     &n), ENODATA);
	ck_assert(!listed(vol, &owner, ino, acc));

	/* A full ACL followed by a minimal one removes the stored ACL. */
	len = acl_xattr(val, full_acl, NACE(full_acl), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0), 0);
	ck_assert(listed(vol, &owner, ino, acc));
	len = acl_xattr(val, minimal, NACE(minimal), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0), 0);
	ck_assert(!listed(vol, &owner, ino, acc));
	ck_assert_uint_eq(ea_block(vol, ino), 0);

	/* A bare header means "no ACL". */
	len = acl_xattr(val, full_acl, NACE(full_acl), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, len, 0), 0);
	ck_assert_int_eq(nx_setxattr(vol, &owner, ino, acc, val, 4, 0), 0);
	ck_assert(!listed(vol, &owner, ino, acc));
	finish(vol, path);
}
END_TEST

START_TEST(test_default_acl_and_inheritance)
{
	char path[256];
	unsigned char val[256], exp[256];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root, owner;
	struct ext2_inode_large inode;
	ext2_ino_t dir, plain, file, sub, f2;
	size_t len, elen;
	const char *def = "system.posix_acl_default";
	const char *acc = ACC;
	static const struct ace dacl[] = {
		{ ACL_USER_OBJ, 7, NOID }, { ACL_USER, 7, 2000 },
		{ ACL_GROUP_OBJ, 5, NOID }, { ACL_MASK, 7, NOID },
		{ ACL_OTHER, 5, NOID },
	};
	/* dacl masked by mode 0666 (posix_acl_create_masq) */
	static const struct ace file_acl[] = {
		{ ACL_USER_OBJ, 6, NOID }, { ACL_USER, 7, 2000 },
		{ ACL_GROUP_OBJ, 5, NOID }, { ACL_MASK, 6, NOID },
		{ ACL_OTHER, 4, NOID },
	};
	/* ... and after chmod 0640 (posix_acl_chmod) */
	static const struct ace chmod_acl[] = {
		{ ACL_USER_OBJ, 6, NOID }, { ACL_USER, 7, 2000 },
		{ ACL_GROUP_OBJ, 5, NOID }, { ACL_MASK, 4, NOID },
		{ ACL_OTHER, 0, NOID },
	};

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	dir = new_dir(vol, EXT2_ROOT_INO, "d", 1000, 0755);
	plain = new_dir(vol, EXT2_ROOT_INO, "p", 1000, 0755);
	file = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0644, "f");

	len = acl_xattr(val, dacl, NACE(dacl), 2);
	ck_assert_int_eq(nx_setxattr(vol, &owner, file, def, val, len, 0),
			 EACCES);
	ck_assert_int_eq(nx_removexattr(vol, &owner, file, def), 0);
	ck_assert_int_eq(nx_setxattr(vol, &owner, dir, def, val, len, 0), 0);
	assert_value(vol, &owner, dir, def, val, len);
	/* A default ACL leaves the directory's own mode alone. */
	ck_assert_uint_eq(mode_of(vol, dir), 0755);

	/* A file created in d inherits; the umask does not apply. */
	ck_assert_int_eq(nx_inode_new(vol, &owner, dir, S_IFREG | 0666, &f2,
				      &inode), 0);
	ck_assert_int_eq(nx_acl_inherit(vol, dir, f2, &inode, 077), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, dir, "f2", f2,
				     EXT2_FT_REG_FILE), 0);
	ck_assert_uint_eq(inode.i_mode, S_IFREG | 0664);
	ck_assert_uint_eq(mode_of(vol, f2), 0664);
	elen = acl_xattr(exp, file_acl, NACE(file_acl), 2);
	assert_value(vol, &owner, f2, acc, exp, elen);
	ck_assert(!listed(vol, &owner, f2, def));

	/* A subdirectory also gets the default ACL. */
	sub = new_dir(vol, dir, "sub", 1000, 0777);
	inode = get_inode(vol, sub);
	ck_assert_int_eq(nx_acl_inherit(vol, dir, sub, &inode, 022), 0);
	assert_value(vol, &owner, sub, def, val, len);
	ck_assert_uint_eq(mode_of(vol, sub), 0775);

	/* Without a default ACL the umask applies and nothing is stored. */
	ck_assert_int_eq(nx_inode_new(vol, &owner, plain, S_IFREG | 0666, &f2,
				      &inode), 0);
	ck_assert_int_eq(nx_acl_inherit(vol, plain, f2, &inode, 022), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, plain, "f", f2,
				     EXT2_FT_REG_FILE), 0);
	ck_assert_uint_eq(mode_of(vol, f2), 0644);
	ck_assert(!listed(vol, &owner, f2, acc));

	/* chmod keeps the ACL in step. */
	ck_assert_int_eq(ext2fs_lookup(vol->fs, dir, "f2", 2, NULL, &f2), 0);
	inode = get_inode(vol, f2);
	inode.i_mode = S_IFREG | 0640;
	ck_assert_int_eq(nx_inode_write(vol, f2, &inode), 0);
	ck_assert_int_eq(nx_acl_chmod(vol, f2, 0640), 0);
	elen = acl_xattr(exp, chmod_acl, NACE(chmod_acl), 2);
	assert_value(vol, &owner, f2, acc, exp, elen);
	ck_assert_uint_eq(mode_of(vol, f2), 0640);
	/* ... and is a no-op without one. */
	ck_assert_int_eq(nx_acl_chmod(vol, file, 0600), 0);
	finish(vol, path);
}
END_TEST

/* ---- inline data, features ------------------------------------------- */

START_TEST(test_inline_data_attr_is_private)
{
	char path[256], buf[64];
	struct nx_volume *vol = setup(path, INLINE_FLAVOUR);
	struct ext2_inode_large inode;
	struct nx_cred root;
	ext2_ino_t ino;
	size_t len, size;

	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	inode = get_inode(vol, ino);
	inode.i_flags &= ~EXT4_EXTENTS_FL;
	inode.i_flags |= EXT4_INLINE_DATA_FL;
	memset(inode.i_block, 0, sizeof(inode.i_block));
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(ext2fs_inline_data_init(vol->fs, ino), 0);

	ck_assert_int_eq(set(vol, &root, ino, "user.a", "1"), 0);
	ck_assert_int_eq(nx_listxattr(vol, &root, ino, buf, sizeof(buf), &len),
			 0);
	ck_assert_uint_eq(len, sizeof("user.a"));
	ck_assert_str_eq(buf, "user.a");
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, "system.data", buf,
				     sizeof(buf), &len), EOPNOTSUPP);
	ck_assert_int_eq(set(vol, &root, ino, "system.data", "x"), EOPNOTSUPP);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "system.data"),
			 EOPNOTSUPP);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.a"), 0);
	/* The inline data attribute is still there (i_block's 60 bytes). */
	ck_assert_int_eq(ext2fs_inline_data_size(vol->fs, ino, &size), 0);
	ck_assert_uint_eq(size, EXT4_MIN_INLINE_DATA_SIZE);
	finish(vol, path);
}
END_TEST

START_TEST(test_first_xattr_enables_feature)
{
	char path[256], buf[8];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t ino;
	size_t len;

	nxt_mkfs(path, "-t ext2 -O ^ext_attr", 8);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	ino = new_file(vol, &root, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	ck_assert(!ext2fs_has_feature_xattr(vol->fs->super));
	ck_assert_int_eq(nx_listxattr(vol, &root, ino, buf, sizeof(buf), &len),
			 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(nx_getxattr(vol, &root, ino, "user.a", buf,
				     sizeof(buf), &len), ENODATA);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.a"), ENODATA);
	ck_assert_int_eq(set(vol, &root, ino, "user.a", "1"), 0);
	ck_assert(ext2fs_has_feature_xattr(vol->fs->super));
	assert_value(vol, &root, ino, "user.a", "1", 1);
	finish(vol, path);
}
END_TEST

/* ---- inode flags ------------------------------------------------------- */

static unsigned flags_of(struct nx_volume *vol, ext2_ino_t ino)
{
	unsigned f = 0;

	ck_assert_int_eq(nx_get_iflags(vol, ino, &f), 0);
	return f;
}

START_TEST(test_iflags_get_set)
{
	char path[256];
	struct nx_volume *vol = setup(path, _i);
	int extents = ext2fs_has_feature_extents(vol->fs->super);
	struct nx_cred root, owner, other;
	struct ext2_inode_large inode;
	ext2_ino_t ino, big, link, dir;
	unsigned f0;

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	nxt_user_cred(&other, 2000, 2000);
	ino = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	big = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0644, "big");
	link = new_symlink(vol, &owner, "l");
	dir = new_dir(vol, EXT2_ROOT_INO, "d", 1000, 0755);

	f0 = flags_of(vol, ino);
	ck_assert_uint_eq(f0, extents ? EXT4_EXTENTS_FL : 0);

	age_ctime(vol, ino);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT2_NODUMP_FL | EXT2_NOATIME_FL),
			 0);
	ck_assert_uint_eq(flags_of(vol, ino),
			  f0 | EXT2_NODUMP_FL | EXT2_NOATIME_FL);
	ck_assert(ctime_is_recent(vol, ino));
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0), 0);
	ck_assert_uint_eq(flags_of(vol, ino), f0);

	ck_assert_int_eq(nx_set_iflags(vol, &other, ino, f0 | EXT2_NODUMP_FL),
			 EPERM);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT2_IMMUTABLE_FL), EPERM);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0 | EXT2_APPEND_FL),
			 EPERM);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT3_JOURNAL_DATA_FL), EPERM);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT4_HUGE_FILE_FL), EOPNOTSUPP);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0 | EXT2_DIRSYNC_FL),
			 EOPNOTSUPP);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0 ^ EXT4_EXTENTS_FL),
			 EOPNOTSUPP);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT4_CASEFOLD_FL), EOPNOTSUPP);
	ck_assert_uint_eq(flags_of(vol, ino), f0);

	/* Visible but not modifiable: quietly left alone. */
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino,
				       f0 | EXT4_INLINE_DATA_FL), 0);
	ck_assert_uint_eq(flags_of(vol, ino), f0);

	/* No_COW sticks on empty files and directories only. */
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0 | FS_NOCOW_FL), 0);
	ck_assert_uint_eq(flags_of(vol, ino), f0 | FS_NOCOW_FL);
	inode = get_inode(vol, big);
	inode.i_size = 8192;		/* sparse, but not empty */
	ck_assert_int_eq(nx_inode_write(vol, big, &inode), 0);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, big, f0 | FS_NOCOW_FL), 0);
	ck_assert_uint_eq(flags_of(vol, big), f0);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, dir,
				       flags_of(vol, dir) | FS_NOCOW_FL |
				       EXT2_DIRSYNC_FL), 0);
	ck_assert_uint_ne(flags_of(vol, dir) & FS_NOCOW_FL, 0);
	ck_assert_uint_ne(flags_of(vol, dir) & EXT2_DIRSYNC_FL, 0);

	/* Other file types: only nodump and noatime. */
	ck_assert_int_eq(nx_set_iflags(vol, &owner, link, EXT2_NODUMP_FL), 0);
	ck_assert_uint_eq(flags_of(vol, link), EXT2_NODUMP_FL);
	ck_assert_int_eq(nx_set_iflags(vol, &owner, link, FS_NOCOW_FL),
			 EOPNOTSUPP);

	/* Root may change data journaling. */
	ck_assert_int_eq(nx_set_iflags(vol, &root, ino,
				       f0 | EXT3_JOURNAL_DATA_FL), 0);
	ck_assert_uint_eq(flags_of(vol, ino), f0 | EXT3_JOURNAL_DATA_FL);
	finish(vol, path);
}
END_TEST

START_TEST(test_immutable_and_append_only)
{
	char path[256];
	unsigned char val[256];
	struct nx_volume *vol = setup(path, _i);
	struct nx_cred root, owner;
	struct ext2_inode_large inode;
	ext2_ino_t ino;
	unsigned f0;
	size_t len;

	nxt_root_cred(&root);
	nxt_user_cred(&owner, 1000, 1000);
	ino = new_file(vol, &owner, EXT2_ROOT_INO, S_IFREG | 0644, "f");
	f0 = flags_of(vol, ino);
	ck_assert_int_eq(set(vol, &owner, ino, "user.keep", "1"), 0);

	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, f0 | EXT2_IMMUTABLE_FL),
			 0);
	ck_assert_uint_eq(flags_of(vol, ino), f0 | EXT2_IMMUTABLE_FL);
	inode = get_inode(vol, ino);
	ck_assert(nx_iflags_immutable((struct ext2_inode *)&inode));
	ck_assert(!nx_iflags_append_only((struct ext2_inode *)&inode));

	/* No attribute changes, not even by root. */
	ck_assert_int_eq(set(vol, &owner, ino, "user.x", "1"), EPERM);
	ck_assert_int_eq(set(vol, &root, ino, "trusted.x", "1"), EPERM);
	ck_assert_int_eq(nx_removexattr(vol, &root, ino, "user.keep"), EPERM);
	len = acl_xattr(val, full_acl, NACE(full_acl), 2);
	ck_assert_int_eq(nx_setxattr(vol, &root, ino, ACC, val, len, 0), EPERM);
	assert_value(vol, &owner, ino, "user.keep", "1", 1);
	/* Nor other flags while immutable stays set. */
	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, f0 | EXT2_IMMUTABLE_FL |
				       EXT2_NODUMP_FL), EPERM);
	/* Only root lifts it. */
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0), EPERM);
	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, f0), 0);
	ck_assert_int_eq(set(vol, &owner, ino, "user.x", "1"), 0);

	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, f0 | EXT2_APPEND_FL),
			 0);
	inode = get_inode(vol, ino);
	ck_assert(nx_iflags_append_only((struct ext2_inode *)&inode));
	ck_assert(!nx_iflags_immutable((struct ext2_inode *)&inode));
	ck_assert_int_eq(set(vol, &owner, ino, "user.y", "1"), EPERM);
	/* Append-only may still gain other flags. */
	ck_assert_int_eq(nx_set_iflags(vol, &owner, ino, f0 | EXT2_APPEND_FL |
				       EXT2_NODUMP_FL), 0);
	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, f0), 0);
	finish(vol, path);
}
END_TEST

Suite *xattr_suite(void)
{
	Suite *s = suite_create("xattr");
	TCase *tc = tcase_create("xattr");
	TCase *acl = tcase_create("acl");
	TCase *fl = tcase_create("iflags");

	tcase_add_loop_test(tc, test_set_get_list_remove, 0, NFLAV);
	tcase_add_loop_test(tc, test_create_replace_flags, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_names, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_large_value_spills_and_block_is_freed, 0,
			    NFLAV);
	tcase_add_loop_test(tc, test_many_attrs_until_full, 0, NFLAV);
	tcase_add_loop_test(tc, test_trusted_needs_root, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_user_and_security_rules, 0,
			    NXT_NFLAVOURS);
	tcase_add_test(tc, test_inline_data_attr_is_private);
	tcase_add_test(tc, test_first_xattr_enables_feature);
	suite_add_tcase(s, tc);

	tcase_add_loop_test(acl, test_acl_roundtrip, 0, NFLAV);
	tcase_add_loop_test(acl, test_acl_validation_and_minimal, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(acl, test_default_acl_and_inheritance, 0, NFLAV);
	suite_add_tcase(s, acl);

	tcase_add_loop_test(fl, test_iflags_get_set, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(fl, test_immutable_and_append_only, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, fl);
	return s;
}

int main(void)
{
	return nxt_run_suite(xattr_suite());
}
