/*
 * test_dir.c - namespace: lookup, readdir cookies, mknod, mkdir, rmdir,
 * symlink, link, unlink, name limits, permissions, ENOSPC.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "fixture.h"
#include "nextfs/dir.h"
#include "nextfs/inode.h"

#define ROOT EXT2_ROOT_INO

/* ---- readdir helpers ---------------------------------------------- */

struct dent {
	char name[NX_NAME_MAX + 1];
	ext2_ino_t ino;
	unsigned char type;
	uint64_t next;
};

struct listing {
	struct dent *v;
	size_t n, cap;
	size_t limit;	/* entries taken per nx_readdir call (0: all) */
	size_t taken;
};

static int collect(void *priv, const char *name, size_t len, ext2_ino_t ino,
		   unsigned char type, uint64_t next)
{
	struct listing *l = priv;

	if (l->limit && l->taken == l->limit)
		return 1;
	ck_assert_uint_le(len, NX_NAME_MAX);
	ck_assert_uint_eq(strlen(name), len);
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		ck_assert_ptr_nonnull(l->v);
	}
	memcpy(l->v[l->n].name, name, len);
	l->v[l->n].name[len] = 0;
	l->v[l->n].ino = ino;
	l->v[l->n].type = type;
	l->v[l->n].next = next;
	l->n++;
	l->taken++;
	return 0;
}

/* List DIR the way FUSE does: CHUNK entries per call, resuming each time. */
static void list_dir(struct nx_volume *vol, ext2_ino_t dir, size_t chunk,
		     struct listing *l)
{
	uint64_t pos = 0;
	unsigned calls = 0;

	memset(l, 0, sizeof(*l));
	l->limit = chunk;
	for (;;) {
		size_t before = l->n;

		l->taken = 0;
		ck_assert_int_eq(nx_readdir(vol, dir, pos, collect, l), 0);
		if (l->n == before)
			break;
		pos = l->v[l->n - 1].next;
		ck_assert_uint_lt(++calls, 1000000);
	}
}

static const struct dent *find_dent(const struct listing *l, const char *name)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->v[i].name, name))
			return &l->v[i];
	return NULL;
}

static int cmp_dent(const void *a, const void *b)
{
	return strcmp(((const struct dent *)a)->name,
		      ((const struct dent *)b)->name);
}

/* Every name of L appears once; returns how many there are. */
static size_t assert_unique(struct listing *l)
{
	struct dent *copy = malloc(l->n * sizeof(*copy) + 1);
	size_t i;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, l->v, l->n * sizeof(*copy));
	qsort(copy, l->n, sizeof(*copy), cmp_dent);
	for (i = 1; i < l->n; i++)
		ck_assert_msg(strcmp(copy[i - 1].name, copy[i].name),
			      "duplicate entry %s", copy[i].name);
	free(copy);
	return l->n;
}

/* ---- other helpers ------------------------------------------------- */

static void make_name(char *buf, unsigned i)
{
	/* Varied lengths so that leaves split at odd places. */
	snprintf(buf, NX_NAME_MAX + 1, "file-%u-%.*s", i, (int)(i % 37),
		 "abcdefghijklmnopqrstuvwxyz0123456789abcdefgh");
}

static ext2_ino_t mkfile(struct nx_volume *vol, const struct nx_cred *c,
			 ext2_ino_t dir, const char *name)
{
	ext2_ino_t ino = 0;

	ck_assert_int_eq(nx_mknod(vol, c, dir, name, S_IFREG | 0644, 0, &ino),
			 0);
	ck_assert_uint_ne(ino, 0);
	return ino;
}

static ext2_ino_t mkdirp(struct nx_volume *vol, const struct nx_cred *c,
			 ext2_ino_t dir, const char *name, mode_t mode)
{
	ext2_ino_t ino = 0;

	ck_assert_int_eq(nx_mkdir(vol, c, dir, name, mode, &ino), 0);
	return ino;
}

static unsigned nlink_of(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	return inode.i_links_count;
}

static void release(struct nx_volume *vol, ext2_ino_t ino)
{
	ck_assert_uint_eq(nlink_of(vol, ino), 0);
	ck_assert_int_eq(nx_inode_release(vol, ino), 0);
}

static void unlink_and_release(struct nx_volume *vol,
			       const struct nx_cred *c, ext2_ino_t dir,
			       const char *name)
{
	ext2_ino_t victim = 0;

	ck_assert_int_eq(nx_unlink(vol, c, dir, name, &victim), 0);
	if (nlink_of(vol, victim) == 0)
		release(vol, victim);
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

/* ---- tests ---------------------------------------------------------- */

#define MANY 3000

START_TEST(test_many_entries_lookup_readdir)
{
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all, part;
	struct ext2_inode_large dinode;
	ext2_ino_t dir, ino, *inos;
	size_t i, chunk;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	dir = mkdirp(vol, &root, ROOT, "big", 0755);
	inos = calloc(MANY, sizeof(*inos));
	for (i = 0; i < MANY; i++) {
		make_name(name, i);
		inos[i] = mkfile(vol, &root, dir, name);
	}
	/* A directory this size is hashed wherever dir_index is on. */
	ck_assert_int_eq(nx_inode_read(vol, dir, &dinode), 0);
	ck_assert(dinode.i_flags & EXT2_INDEX_FL);
	ck_assert(!(dinode.i_flags & EXT4_INLINE_DATA_FL));
	for (i = 0; i < MANY; i++) {
		make_name(name, i);
		ck_assert_int_eq(nx_lookup(vol, dir, name, &ino), 0);
		ck_assert_uint_eq(ino, inos[i]);
	}
	ck_assert_int_eq(nx_lookup(vol, dir, "no-such-name", &ino), ENOENT);

	list_dir(vol, dir, 0, &all);
	ck_assert_uint_eq(assert_unique(&all), MANY + 2);
	ck_assert_uint_eq(find_dent(&all, ".")->ino, dir);
	ck_assert_uint_eq(find_dent(&all, "..")->ino, ROOT);
	ck_assert_uint_eq(find_dent(&all, "..")->type, DT_DIR);
	for (i = 0; i < MANY; i++) {
		const struct dent *e;

		make_name(name, i);
		e = find_dent(&all, name);
		ck_assert_ptr_nonnull(e);
		ck_assert_uint_eq(e->ino, inos[i]);
		ck_assert_uint_eq(e->type, DT_REG);
	}
	/* Resuming at any cookie continues with exactly the next entry. */
	for (i = 0; i < all.n; i++) {
		memset(&part, 0, sizeof(part));
		part.limit = 1;
		ck_assert_int_eq(nx_readdir(vol, dir, all.v[i].next, collect,
					    &part), 0);
		if (i + 1 < all.n) {
			ck_assert_uint_eq(part.n, 1);
			ck_assert_str_eq(part.v[0].name, all.v[i + 1].name);
		} else {
			ck_assert_uint_eq(part.n, 0);
		}
		free(part.v);
	}
	/* Small FUSE buffers: each name once whatever the chunk size. */
	for (chunk = 1; chunk <= 61; chunk += 30) {
		list_dir(vol, dir, chunk, &part);
		ck_assert_uint_eq(assert_unique(&part), MANY + 2);
		free(part.v);
	}
	free(all.v);

	/* Remove every third name; the listing follows. */
	for (i = 0; i < MANY; i += 3) {
		make_name(name, i);
		unlink_and_release(vol, &root, dir, name);
	}
	list_dir(vol, dir, 7, &all);
	ck_assert_uint_eq(assert_unique(&all), MANY - (MANY + 2) / 3 + 2);
	for (i = 0; i < MANY; i++) {
		make_name(name, i);
		ck_assert_int_eq(nx_lookup(vol, dir, name, &ino),
				 i % 3 ? 0 : ENOENT);
		ck_assert((find_dent(&all, name) != NULL) == (i % 3 != 0));
	}
	free(all.v);
	free(inos);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Cookies stay valid while other entries come and go. */
START_TEST(test_readdir_stable_under_changes)
{
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing seen;
	ext2_ino_t dir;
	uint64_t pos = 0;
	size_t i, n = 600, added = 0, old_seen;
	unsigned calls = 0;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	dir = mkdirp(vol, &root, ROOT, "d", 0755);
	for (i = 0; i < n; i++) {
		make_name(name, i);
		mkfile(vol, &root, dir, name);
	}
	memset(&seen, 0, sizeof(seen));
	seen.limit = 5;
	for (;;) {
		size_t before = seen.n;

		seen.taken = 0;
		ck_assert_int_eq(nx_readdir(vol, dir, pos, collect, &seen), 0);
		if (seen.n == before)
			break;
		pos = seen.v[seen.n - 1].next;
		/* New names between calls force leaf splits. */
		for (i = 0; i < 8; i++) {
			snprintf(name, sizeof(name), "new-%zu-padding-padding",
				 added++);
			mkfile(vol, &root, dir, name);
		}
		ck_assert_uint_lt(++calls, 100000);
	}
	/* Old names: each exactly once; new ones at most once. */
	assert_unique(&seen);
	old_seen = 0;
	for (i = 0; i < n; i++) {
		make_name(name, i);
		old_seen += find_dent(&seen, name) != NULL;
	}
	ck_assert_uint_eq(old_seen, n);
	free(seen.v);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Hundreds of leaves: the index grows a level (1k blocks, long names). */
static const char *const deep_flavours[] = {
	"-t ext2 -b 1024",
	"-t ext4 -b 1024 -O 64bit,metadata_csum",
};

START_TEST(test_two_level_htree)
{
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all;
	ext2_ino_t dir, ino;
	char *buf;
	size_t i, n = 1400;

	nxt_mkfs(path, deep_flavours[_i], 64);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	dir = mkdirp(vol, &root, ROOT, "deep", 0755);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%06zu-%0200d", i, 0);
		mkfile(vol, &root, dir, name);
	}
	/* The root's indirect_levels byte is at offset 24 + 6 of block 0. */
	buf = malloc(vol->fs->blocksize);
	{
		struct ext2_inode_large inode;
		blk64_t pblk;

		ck_assert_int_eq(nx_inode_read(vol, dir, &inode), 0);
		ck_assert(inode.i_flags & EXT2_INDEX_FL);
		ck_assert_int_eq(ext2fs_bmap2(vol->fs, dir, EXT2_INODE(&inode),
					      NULL, 0, 0, NULL, &pblk), 0);
		ck_assert_int_eq(io_channel_read_blk64(vol->fs->io, pblk, 1,
						       buf), 0);
		ck_assert_int_eq(buf[24 + 6], 1);
	}
	free(buf);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%06zu-%0200d", i, 0);
		ck_assert_int_eq(nx_lookup(vol, dir, name, &ino), 0);
	}
	list_dir(vol, dir, 13, &all);
	ck_assert_uint_eq(assert_unique(&all), n + 2);
	free(all.v);
	for (i = 0; i < n; i += 2) {
		snprintf(name, sizeof(name), "%06zu-%0200d", i, 0);
		unlink_and_release(vol, &root, dir, name);
	}
	list_dir(vol, dir, 0, &all);
	ck_assert_uint_eq(assert_unique(&all), n / 2 + 2);
	free(all.v);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* No dir_index (linear, many blocks) and no filetype (d_type from mode). */
START_TEST(test_linear_dir_without_filetype)
{
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all, part;
	struct ext2_inode_large dinode;
	ext2_ino_t dir, ino, sub;
	size_t i, n = 400;

	nxt_mkfs(path, "-t ext2 -b 1024 -O ^dir_index,^filetype", 16);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	dir = mkdirp(vol, &root, ROOT, "lin", 0755);
	for (i = 0; i < n; i++) {
		make_name(name, i);
		mkfile(vol, &root, dir, name);
	}
	sub = mkdirp(vol, &root, dir, "sub", 0755);
	ck_assert_int_eq(nx_inode_read(vol, dir, &dinode), 0);
	ck_assert(!(dinode.i_flags & EXT2_INDEX_FL));
	ck_assert_uint_gt(EXT2_I_SIZE(&dinode), 8 * 1024);
	list_dir(vol, dir, 0, &all);
	ck_assert_uint_eq(assert_unique(&all), n + 3);
	ck_assert_uint_eq(find_dent(&all, "sub")->type, DT_DIR);
	ck_assert_uint_eq(find_dent(&all, "sub")->ino, sub);
	ck_assert_uint_eq(find_dent(&all, "file-1-a")->type, DT_REG);
	for (i = 0; i < all.n; i++) {
		memset(&part, 0, sizeof(part));
		part.limit = 1;
		ck_assert_int_eq(nx_readdir(vol, dir, all.v[i].next, collect,
					    &part), 0);
		ck_assert_uint_eq(part.n, i + 1 < all.n);
		if (part.n)
			ck_assert_str_eq(part.v[0].name, all.v[i + 1].name);
		free(part.v);
	}
	free(all.v);
	for (i = 0; i < n; i += 2) {
		make_name(name, i);
		unlink_and_release(vol, &root, dir, name);
	}
	for (i = 0; i < n; i++) {
		make_name(name, i);
		ck_assert_int_eq(nx_lookup(vol, dir, name, &ino),
				 i % 2 ? 0 : ENOENT);
	}
	list_dir(vol, dir, 3, &all);
	ck_assert_uint_eq(assert_unique(&all), n / 2 + 3);
	free(all.v);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_name_limits)
{
	char path[256], n255[NX_NAME_MAX + 1], n256[NX_NAME_MAX + 2];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all;
	ext2_ino_t ino, f, d;

	memset(n255, 'x', 255);
	n255[255] = 0;
	memset(n256, 'y', 256);
	n256[256] = 0;
	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	f = mkfile(vol, &root, ROOT, n255);
	ck_assert_int_eq(nx_lookup(vol, ROOT, n255, &ino), 0);
	ck_assert_uint_eq(ino, f);
	list_dir(vol, ROOT, 0, &all);
	ck_assert_ptr_nonnull(find_dent(&all, n255));
	free(all.v);

	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, n256, S_IFREG | 0644, 0,
				  &ino), ENAMETOOLONG);
	ck_assert_int_eq(nx_mkdir(vol, &root, ROOT, n256, 0755, &ino),
			 ENAMETOOLONG);
	ck_assert_int_eq(nx_symlink(vol, &root, ROOT, n256, "t", &ino),
			 ENAMETOOLONG);
	ck_assert_int_eq(nx_link(vol, &root, f, ROOT, n256), ENAMETOOLONG);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, n255, ROOT, n256, 0,
				   NULL), ENAMETOOLONG);
	ck_assert_int_eq(nx_lookup(vol, ROOT, n256, &ino), ENAMETOOLONG);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "a/b", S_IFREG | 0644, 0,
				  &ino), EINVAL);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "", S_IFREG | 0644, 0,
				  &ino), ENOENT);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, n255, S_IFREG | 0644, 0,
				  &ino), EEXIST);
	ck_assert_int_eq(nx_mkdir(vol, &root, ROOT, ".", 0755, &ino), EEXIST);
	ck_assert_int_eq(nx_name_check(n255), 0);
	ck_assert_int_eq(nx_name_check(n256), ENAMETOOLONG);

	/* A 255-byte directory name holding a 255-byte name. */
	d = mkdirp(vol, &root, ROOT, n255 + 1, 0755);
	mkfile(vol, &root, d, n255);
	ck_assert_int_eq(nx_lookup(vol, d, n255, &ino), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_mkdir_rmdir_link_counts)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	struct stat st;
	ext2_ino_t a, b, f, ino, victim;
	unsigned root_links;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	root_links = nlink_of(vol, ROOT);
	age_inode(vol, ROOT);
	a = mkdirp(vol, &root, ROOT, "a", 0777);
	assert_touched(vol, ROOT, 1);
	ck_assert_uint_eq(nlink_of(vol, ROOT), root_links + 1);
	ck_assert_uint_eq(nlink_of(vol, a), 2);
	ck_assert_int_eq(nx_getattr(vol, a, &st), 0);
	ck_assert_uint_eq(st.st_mode, S_IFDIR | 0755);	/* umask 022 */
	b = mkdirp(vol, &root, a, "b", 0700);
	ck_assert_uint_eq(nlink_of(vol, a), 3);
	ck_assert_int_eq(nx_lookup(vol, b, "..", &ino), 0);
	ck_assert_uint_eq(ino, a);
	ck_assert_int_eq(nx_lookup(vol, b, ".", &ino), 0);
	ck_assert_uint_eq(ino, b);
	f = mkfile(vol, &root, a, "f");

	ck_assert_int_eq(nx_mkdir(vol, &root, ROOT, "a", 0755, &ino), EEXIST);
	ck_assert_int_eq(nx_rmdir(vol, &root, ROOT, "a", &victim), ENOTEMPTY);
	ck_assert_int_eq(nx_rmdir(vol, &root, a, ".", &victim), EINVAL);
	ck_assert_int_eq(nx_rmdir(vol, &root, a, "..", &victim), ENOTEMPTY);
	ck_assert_int_eq(nx_rmdir(vol, &root, a, "f", &victim), ENOTDIR);
	ck_assert_int_eq(nx_rmdir(vol, &root, a, "nope", &victim), ENOENT);
	ck_assert_int_eq(nx_unlink(vol, &root, a, "b", &victim), EISDIR);
	ck_assert_int_eq(nx_mkdir(vol, &root, f, "x", 0755, &ino), ENOTDIR);

	age_inode(vol, a);
	ck_assert_int_eq(nx_rmdir(vol, &root, a, "b", &victim), 0);
	ck_assert_uint_eq(victim, b);
	ck_assert_uint_eq(nlink_of(vol, b), 0);
	ck_assert_uint_eq(nlink_of(vol, a), 2);
	assert_touched(vol, a, 1);
	ck_assert_int_eq(nx_lookup(vol, a, "b", &ino), ENOENT);
	/* A removed directory that is still open takes no new names. */
	ck_assert_int_eq(nx_mknod(vol, &root, b, "late", S_IFREG | 0644, 0,
				  &ino), ENOENT);
	release(vol, b);

	unlink_and_release(vol, &root, a, "f");
	ck_assert_int_eq(nx_rmdir(vol, &root, ROOT, "a", &victim), 0);
	ck_assert_uint_eq(nlink_of(vol, ROOT), root_links);
	release(vol, victim);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Enough entries to push an inline directory out to blocks, then back. */
START_TEST(test_small_dir_grows)
{
	char path[256], name[64];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all;
	struct ext2_inode_large inode;
	ext2_ino_t d, ino, victim;
	int inline_fs;
	size_t i;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	inline_fs = ext2fs_has_feature_inline_data(vol->fs->super);
	nxt_root_cred(&root);
	d = mkdirp(vol, &root, ROOT, "small", 0755);
	ck_assert_int_eq(nx_inode_read(vol, d, &inode), 0);
	ck_assert_int_eq(!!(inode.i_flags & EXT4_INLINE_DATA_FL), inline_fs);
	for (i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "n%zu", i);
		if (i == 2)
			mkdirp(vol, &root, d, name, 0755);
		else
			mkfile(vol, &root, d, name);
		list_dir(vol, d, 2, &all);
		ck_assert_uint_eq(assert_unique(&all), i + 3);
		ck_assert_uint_eq(find_dent(&all, "..")->ino, ROOT);
		free(all.v);
		ck_assert_int_eq(nx_lookup(vol, d, name, &ino), 0);
	}
	ck_assert_int_eq(nx_inode_read(vol, d, &inode), 0);
	ck_assert(!(inode.i_flags & EXT4_INLINE_DATA_FL));
	ck_assert_uint_eq(nlink_of(vol, d), 3);
	for (i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "n%zu", i);
		if (i == 2) {
			ck_assert_int_eq(nx_rmdir(vol, &root, d, name,
						  &victim), 0);
			release(vol, victim);
		} else {
			unlink_and_release(vol, &root, d, name);
		}
	}
	ck_assert_uint_eq(nlink_of(vol, d), 2);
	ck_assert_int_eq(nx_rmdir(vol, &root, ROOT, "small", &victim), 0);
	release(vol, victim);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_sticky_and_permissions)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root, alice, bob;
	ext2_ino_t tmp, ro, ino, victim, f;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	nxt_user_cred(&alice, 1000, 1000);
	nxt_user_cred(&bob, 1001, 1001);
	root.umask = 0;
	tmp = mkdirp(vol, &root, ROOT, "tmp", 01777);
	ro = mkdirp(vol, &root, ROOT, "ro", 0755);
	f = mkfile(vol, &alice, tmp, "alice-file");
	ck_assert_int_eq(nx_unlink(vol, &bob, tmp, "alice-file", &victim),
			 EPERM);
	ck_assert_int_eq(nx_rename(vol, &bob, tmp, "alice-file", tmp, "mine",
				   0, NULL), EPERM);
	/* Bob may still create his own names there. */
	mkfile(vol, &bob, tmp, "bob-file");
	ck_assert_int_eq(nx_rename(vol, &bob, tmp, "bob-file", tmp,
				   "alice-file", 0, NULL), EPERM);
	ck_assert_int_eq(nx_lookup(vol, tmp, "alice-file", &ino), 0);
	ck_assert_uint_eq(ino, f);
	/* Not writable: EACCES; root is not bound by the mode. */
	ck_assert_int_eq(nx_mknod(vol, &alice, ro, "x", S_IFREG | 0644, 0,
				  &ino), EACCES);
	ck_assert_int_eq(nx_mkdir(vol, &alice, ro, "x", 0755, &ino), EACCES);
	ck_assert_int_eq(nx_symlink(vol, &alice, ro, "x", "t", &ino), EACCES);
	ck_assert_int_eq(nx_link(vol, &alice, f, ro, "x"), EACCES);
	mkfile(vol, &root, ro, "rootfile");
	ck_assert_int_eq(nx_unlink(vol, &alice, ro, "rootfile", &victim),
			 EACCES);
	/* Existing name wins over missing write permission. */
	ck_assert_int_eq(nx_mknod(vol, &alice, ro, "rootfile",
				  S_IFREG | 0644, 0, &ino), EEXIST);
	/* Devices need CAP_MKNOD. */
	ck_assert_int_eq(nx_mknod(vol, &alice, tmp, "dev", S_IFCHR | 0600,
				  makedev(1, 3), &ino), EPERM);
	ck_assert_int_eq(nx_unlink(vol, &alice, tmp, "alice-file", &victim),
			 0);
	release(vol, victim);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_symlinks)
{
	char path[256], target[8192], buf[8192];
	struct nx_volume *vol;
	struct nx_cred root;
	struct stat st;
	struct listing all;
	size_t len, bs, sizes[4], i;
	ext2_ino_t ino, f;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	nxt_root_cred(&root);
	sizes[0] = 1;
	sizes[1] = 59;		/* longest fast symlink */
	sizes[2] = 60;		/* shortest slow one */
	sizes[3] = bs - 1;	/* longest the kernel allows */
	for (i = 0; i < 4; i++) {
		char name[16];
		size_t j;

		for (j = 0; j < sizes[i]; j++)
			target[j] = 'a' + (j * 7 + i) % 26;
		target[sizes[i]] = 0;
		snprintf(name, sizeof(name), "l%zu", i);
		ck_assert_int_eq(nx_symlink(vol, &root, ROOT, name, target,
					    &ino), 0);
		ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
		ck_assert_uint_eq(st.st_mode, S_IFLNK | 0777);
		ck_assert_int_eq(st.st_size, sizes[i]);
		ck_assert_int_eq(st.st_blocks != 0, sizes[i] >= 60);
		memset(buf, 0x55, sizeof(buf));
		ck_assert_int_eq(nx_readlink(vol, ino, buf, sizeof(buf), &len),
				 0);
		ck_assert_uint_eq(len, sizes[i]);
		ck_assert_str_eq(buf, target);
		/* Short buffers get a truncated, unterminated prefix. */
		memset(buf, 0x55, sizeof(buf));
		ck_assert_int_eq(nx_readlink(vol, ino, buf, 1, &len), 0);
		ck_assert_uint_eq(len, sizes[i]);
		ck_assert_int_eq(buf[0], target[0]);
		ck_assert_int_eq(buf[1], 0x55);
	}
	memset(target, 'z', bs);
	target[bs] = 0;
	ck_assert_int_eq(nx_symlink(vol, &root, ROOT, "toolong", target, &ino),
			 ENAMETOOLONG);
	ck_assert_int_eq(nx_symlink(vol, &root, ROOT, "empty", "", &ino),
			 ENOENT);
	ck_assert_int_eq(nx_symlink(vol, &root, ROOT, "l0", "x", &ino),
			 EEXIST);
	f = mkfile(vol, &root, ROOT, "plain");
	ck_assert_int_eq(nx_readlink(vol, f, buf, sizeof(buf), &len), EINVAL);
	list_dir(vol, ROOT, 0, &all);
	ck_assert_uint_eq(find_dent(&all, "l3")->type, DT_LNK);
	free(all.v);
	unlink_and_release(vol, &root, ROOT, "l2");
	unlink_and_release(vol, &root, ROOT, "l3");
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_mknod_types)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	struct stat st;
	struct listing all;
	ext2_ino_t fifo, sock, chr, blk, reg, ino;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "fifo", S_IFIFO | 0666, 0,
				  &fifo), 0);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "sock", S_IFSOCK | 0666,
				  0, &sock), 0);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "null", S_IFCHR | 0666,
				  makedev(1, 3), &chr), 0);
	/* Too big for the old 8:8 encoding. */
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "big", S_IFBLK | 0600,
				  makedev(259, 70000), &blk), 0);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "reg", 0644, 0, &reg), 0);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "dir", S_IFDIR | 0755, 0,
				  &ino), EPERM);
	ck_assert_int_eq(nx_mknod(vol, &root, ROOT, "lnk", S_IFLNK | 0755, 0,
				  &ino), EINVAL);

	ck_assert_int_eq(nx_getattr(vol, fifo, &st), 0);
	ck_assert_uint_eq(st.st_mode, S_IFIFO | 0644);	/* umask 022 */
	ck_assert_int_eq(nx_getattr(vol, sock, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_int_eq(nx_getattr(vol, chr, &st), 0);
	ck_assert(S_ISCHR(st.st_mode));
	ck_assert_uint_eq(st.st_rdev, makedev(1, 3));
	ck_assert_int_eq(nx_getattr(vol, blk, &st), 0);
	ck_assert(S_ISBLK(st.st_mode));
	ck_assert_uint_eq(major(st.st_rdev), 259);
	ck_assert_uint_eq(minor(st.st_rdev), 70000);
	ck_assert_int_eq(nx_getattr(vol, reg, &st), 0);
	ck_assert_uint_eq(st.st_mode, S_IFREG | 0644);

	list_dir(vol, ROOT, 0, &all);
	ck_assert_uint_eq(find_dent(&all, "fifo")->type, DT_FIFO);
	ck_assert_uint_eq(find_dent(&all, "sock")->type, DT_SOCK);
	ck_assert_uint_eq(find_dent(&all, "null")->type, DT_CHR);
	ck_assert_uint_eq(find_dent(&all, "big")->type, DT_BLK);
	ck_assert_uint_eq(find_dent(&all, "reg")->type, DT_REG);
	ck_assert_uint_eq(find_dent(&all, "lost+found")->type, DT_DIR);
	free(all.v);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_hard_links)
{
	char path[256];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t f, d, sub, victim;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	f = mkfile(vol, &root, ROOT, "f");
	d = mkdirp(vol, &root, ROOT, "d", 0755);
	sub = mkdirp(vol, &root, d, "sub", 0755);
	age_inode(vol, f);
	age_inode(vol, d);
	ck_assert_int_eq(nx_link(vol, &root, f, d, "g"), 0);
	ck_assert_uint_eq(nlink_of(vol, f), 2);
	assert_touched(vol, f, 0);		/* ctime only */
	assert_touched(vol, d, 1);
	ck_assert_int_eq(nx_link(vol, &root, f, d, "g"), EEXIST);
	ck_assert_int_eq(nx_link(vol, &root, sub, ROOT, "sub2"), EPERM);
	ck_assert_int_eq(nx_link(vol, &root, f, f, "x"), ENOTDIR);

	age_inode(vol, f);
	ck_assert_int_eq(nx_unlink(vol, &root, ROOT, "f", &victim), 0);
	ck_assert_uint_eq(victim, f);
	ck_assert_uint_eq(nlink_of(vol, f), 1);
	assert_touched(vol, f, 0);
	ck_assert_int_eq(nx_unlink(vol, &root, d, "g", &victim), 0);
	ck_assert_uint_eq(nlink_of(vol, f), 0);
	/* An unlinked inode cannot get a new name (linkat via /proc). */
	ck_assert_int_eq(nx_link(vol, &root, f, ROOT, "back"), ENOENT);
	release(vol, f);
	ck_assert_int_eq(nx_unlink(vol, &root, d, "g", &victim), ENOENT);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

static void set_nlink(struct nx_volume *vol, ext2_ino_t ino, unsigned n)
{
	struct ext2_inode_large inode;

	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	inode.i_links_count = n;
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
}

/* EXT2_LINK_MAX: EMLINK, except dir_nlink's pinned count of 1. */
START_TEST(test_link_limits)
{
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	ext2_ino_t f, p, q, sub, ino, victim;
	int dir_nlink;
	size_t i;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	dir_nlink = ext2fs_has_feature_dir_nlink(vol->fs->super);
	f = mkfile(vol, &root, ROOT, "f");
	set_nlink(vol, f, EXT2_LINK_MAX);
	ck_assert_int_eq(nx_link(vol, &root, f, ROOT, "g"), EMLINK);
	set_nlink(vol, f, 1);

	/* A small (unindexed) parent stops at the limit everywhere. */
	p = mkdirp(vol, &root, ROOT, "p", 0755);
	sub = mkdirp(vol, &root, ROOT, "sub", 0755);
	set_nlink(vol, p, EXT2_LINK_MAX);
	ck_assert_int_eq(nx_mkdir(vol, &root, p, "x", 0755, &ino), EMLINK);
	ck_assert_int_eq(nx_rename(vol, &root, ROOT, "sub", p, "sub", 0,
				   NULL), EMLINK);
	ck_assert_int_eq(nx_lookup(vol, ROOT, "sub", &ino), 0);
	ck_assert_uint_eq(ino, sub);
	mkfile(vol, &root, p, "file-is-fine");
	set_nlink(vol, p, 2);

	/* An indexed parent on a dir_nlink volume goes to 1. */
	q = mkdirp(vol, &root, ROOT, "q", 0755);
	for (i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "%03zu-%0200d", i, 0);
		mkfile(vol, &root, q, name);
	}
	set_nlink(vol, q, EXT2_LINK_MAX);
	if (dir_nlink) {
		ck_assert_int_eq(nx_mkdir(vol, &root, q, "x", 0755, &ino), 0);
		ck_assert_uint_eq(nlink_of(vol, q), 1);
		ck_assert_int_eq(nx_rmdir(vol, &root, q, "x", &victim), 0);
		ck_assert_uint_eq(nlink_of(vol, q), 1);
		release(vol, victim);
	} else {
		ck_assert_int_eq(nx_mkdir(vol, &root, q, "x", 0755, &ino),
				 EMLINK);
	}
	set_nlink(vol, q, 2);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* Running out of inodes or blocks never leaves a half-made name. */
START_TEST(test_enospc_consistent)
{
	static const char *const tiny[] = {
		"-t ext2 -b 1024 -N 2048",
		"-t ext4 -b 1024 -N 2048 -O 64bit,metadata_csum,^has_journal",
	};
	char path[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	struct nx_cred root;
	struct listing all;
	errcode_t err = 0;
	ext2_ino_t d, ino;
	size_t i, made = 0;

	nxt_mkfs(path, tiny[_i], 2);
	vol = nxt_open(path);
	nxt_root_cred(&root);
	d = mkdirp(vol, &root, ROOT, "d", 0755);
	for (i = 0; i < 5000 && !err; i++) {
		uint32_t free_inodes = vol->fs->super->s_free_inodes_count;
		blk64_t free_blocks = ext2fs_free_blocks_count(vol->fs->super);

		/* Long names grow the parent; directories eat blocks. */
		snprintf(name, sizeof(name), "%04zu-%0180d", i, 0);
		err = (i % 4) ? nx_mkdir(vol, &root, d, name, 0755, &ino) :
				nx_mknod(vol, &root, d, name, S_IFREG | 0644, 0,
					 &ino);
		if (!err) {
			made++;
			continue;
		}
		/* The failed call gave back whatever it had taken. */
		ck_assert_uint_eq(vol->fs->super->s_free_inodes_count,
				  free_inodes);
		ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super),
				  free_blocks);
	}
	ck_assert_int_eq(nx_errno(err), ENOSPC);
	ck_assert_uint_gt(made, 10);
	/* Files need no block of their own: only the parent runs out. */
	for (err = 0; i < 10000 && !err; i++) {
		uint32_t free_inodes = vol->fs->super->s_free_inodes_count;

		snprintf(name, sizeof(name), "%04zu-%0180d", i, 0);
		err = nx_mknod(vol, &root, d, name, S_IFREG | 0644, 0, &ino);
		if (!err)
			made++;
		else
			ck_assert_uint_eq(vol->fs->super->s_free_inodes_count,
					  free_inodes);
	}
	ck_assert_int_eq(nx_errno(err), ENOSPC);
	list_dir(vol, d, 0, &all);
	ck_assert_uint_eq(assert_unique(&all), made + 2);
	free(all.v);
	snprintf(name, sizeof(name), "%04zu-%0180d", i - 1, 0);
	ck_assert_int_eq(nx_lookup(vol, d, name, &ino), ENOENT);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

Suite *dir_suite(void)
{
	Suite *s = suite_create("dir");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_many_entries_lookup_readdir, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_readdir_stable_under_changes, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_two_level_htree, 0, 2);
	tcase_add_test(tc, test_linear_dir_without_filetype);
	tcase_add_loop_test(tc, test_name_limits, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_mkdir_rmdir_link_counts, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_small_dir_grows, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_sticky_and_permissions, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_symlinks, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_mknod_types, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_hard_links, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_link_limits, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_enospc_consistent, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(dir_suite());
}
