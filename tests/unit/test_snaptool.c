/*
 * test_snaptool.c - the offline snapshot tools: check finds (and repairs
 * what is safe of) injected corruption, export writes images stock
 * e2fsck accepts with the snapshot's content, diff reports exactly the
 * changes made, send reads ahead what a plain send reads, restore brings
 * the live tree back and leaves every snapshot valid.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"
#include "nextfs/image.h"
#include "nextfs/send.h"
#include "nextfs/snaptool.h"

static struct nx_cred root;

/* ---------------------------------------------------------------- helpers */

static void pattern(char *buf, size_t len, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)((off + i) * 131 + seed * 17 + ((off + i) >> 10));
}

/* Inode of PATH ("a" or "d/x"), 0 if absent. */
static ext2_ino_t lookup_path(ext2_filsys fs, const char *path)
{
	char buf[256], *p, *save = NULL;
	ext2_ino_t ino = EXT2_ROOT_INO;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save))
		if (ext2fs_lookup(fs, ino, p, strlen(p), NULL, &ino))
			return 0;
	return ino;
}

static void split(const char *path, char *dir, char *name)
{
	const char *slash = strrchr(path, '/');

	if (!slash) {
		strcpy(dir, "");
		strcpy(name, path);
		return;
	}
	memcpy(dir, path, slash - path);
	dir[slash - path] = 0;
	strcpy(name, slash + 1);
}

static ext2_ino_t parent_of(ext2_filsys fs, const char *path, char *name)
{
	char dir[256];

	split(path, dir, name);
	return dir[0] ? lookup_path(fs, dir) : EXT2_ROOT_INO;
}

/*
 * Changes go through the fs layer, exactly as the FUSE daemon makes them
 * (copy-on-write moves, timestamps, link counts).
 */
static void write_file(struct nx_volume *vol, const char *path, uint64_t off,
		       size_t len, unsigned seed)
{
	ext2_ino_t ino = lookup_path(vol->fs, path), dir;
	char name[256], *buf = malloc(len ? len : 1);
	size_t done = 0;

	ck_assert_ptr_nonnull(buf);
	if (!ino) {
		dir = parent_of(vol->fs, path, name);
		ck_assert_uint_ne(dir, 0);
		ck_assert_int_eq(nx_mknod(vol, &root, dir, name, S_IFREG | 0644,
					  0, &ino), 0);
	}
	pattern(buf, len, seed, off);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, len, off, &done), 0);
	ck_assert_uint_eq(done, len);
	free(buf);
}

static void make_dir(struct nx_volume *vol, const char *path)
{
	char name[256];
	ext2_ino_t dir = parent_of(vol->fs, path, name), ino;

	ck_assert_int_eq(nx_mkdir(vol, &root, dir, name, 0755, &ino), 0);
}

static void remove_file(struct nx_volume *vol, const char *path)
{
	char name[256];
	ext2_ino_t dir = parent_of(vol->fs, path, name), victim = 0;

	ck_assert_int_eq(nx_unlink(vol, &root, dir, name, &victim), 0);
	ck_assert_int_eq(nx_inode_release(vol, victim), 0);
}

static void rename_file(struct nx_volume *vol, const char *from,
			const char *to)
{
	char oname[256], nname[256];
	ext2_ino_t odir = parent_of(vol->fs, from, oname);
	ext2_ino_t ndir = parent_of(vol->fs, to, nname), replaced = 0;

	ck_assert_int_eq(nx_rename(vol, &root, odir, oname, ndir, nname, 0,
				   &replaced), 0);
	ck_assert_uint_eq(replaced, 0);
}

/* FNV-1a of the content of PATH in FS, or 0 if it does not exist. */
static uint64_t file_hash(ext2_filsys fs, const char *path)
{
	ext2_ino_t ino = lookup_path(fs, path);
	uint64_t h = 1469598103934665603ULL;
	char buf[4096];
	unsigned int got, i;
	ext2_file_t file;

	if (!ino)
		return 0;
	ck_assert_int_eq(ext2fs_file_open(fs, ino, 0, &file), 0);
	do {
		ck_assert_int_eq(ext2fs_file_read(file, buf, sizeof(buf), &got),
				 0);
		for (i = 0; i < got; i++)
			h = (h ^ (unsigned char)buf[i]) * 1099511628211ULL;
	} while (got);
	ck_assert_int_eq(ext2fs_file_close(file), 0);
	return h ? h : 1;
}

static uint64_t snap_hash(struct nx_volume *vol, const char *snap,
			  const char *path)
{
	struct nx_snapinfo info;
	struct nx_volume *view;
	uint64_t h;

	ck_assert_int_eq(nx_snap_find(vol, snap, &info), 0);
	ck_assert_int_eq(nx_snap_view_open(vol, info.ino, &view), 0);
	h = file_hash(view->fs, path);
	nx_snap_view_close(view);
	return h;
}

/* Open the image behind the engine's back, to inject corruption. */
static ext2_filsys raw_open(const char *path)
{
	ext2_filsys fs;

	ck_assert_int_eq(ext2fs_open2(path, NULL, EXT2_FLAG_RW |
				      EXT2_FLAG_64BITS | EXT2_FLAG_FORCE, 0, 0,
				      unix_io_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	return fs;
}

static void raw_close(ext2_filsys fs)
{
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
}

static void raw_inode(ext2_filsys fs, ext2_ino_t ino,
		      struct ext2_inode_large *inode, int write)
{
	if (write)
		ck_assert_int_eq(ext2fs_write_inode_full(fs, ino,
				 (struct ext2_inode *)inode, sizeof(*inode)),
				 0);
	else
		ck_assert_int_eq(ext2fs_read_inode_full(fs, ino,
				 (struct ext2_inode *)inode, sizeof(*inode)),
				 0);
}

static ext2_ino_t snap_ino(const char *path, const char *name)
{
	struct nx_volume *vol = nxt_open(path);
	struct nx_snapinfo info;

	ck_assert_int_eq(nx_snap_find(vol, name, &info), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	return info.ino;
}

struct findings {
	int n;
	char text[4096];
};

static void collect(void *priv, enum nx_check_level level, const char *msg)
{
	struct findings *f = priv;
	size_t used = strlen(f->text);

	if (level == NX_CHECK_INFO)
		return;
	f->n++;
	snprintf(f->text + used, sizeof(f->text) - used, "%s\n", msg);
}

static struct nx_check_result check(const char *path, int repair,
				    struct findings *f)
{
	struct nx_check_result res;
	char msg[256] = "";

	memset(f, 0, sizeof(*f));
	ck_assert_msg(nx_check(path, repair ? NX_CHECK_REPAIR : 0, collect, f,
			       NULL, &res, msg, sizeof(msg)) == 0,
		      "nx_check: %s", msg);
	return res;
}

static void assert_clean(const char *path)
{
	struct findings f;
	struct nx_check_result res = check(path, 0, &f);

	ck_assert_msg(res.errors == 0 && res.fixed == 0,
		      "not clean: %u errors, %u fixed:\n%s", res.errors,
		      res.fixed, f.text);
}

/* Image with snapshots s1 and s2 of files a, b, c and changes since. */
struct scene {
	uint64_t a1, b1, a2, c2;
};

static void build_scene(const char *path, struct scene *sc)
{
	struct nx_volume *vol = nxt_open(path);

	write_file(vol, "a", 0, 200000, 1);
	write_file(vol, "b", 0, 70000, 2);
	sc->a1 = file_hash(vol->fs, "a");
	sc->b1 = file_hash(vol->fs, "b");
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	write_file(vol, "a", 4096, 50000, 3);
	remove_file(vol, "b");
	write_file(vol, "c", 0, 30000, 4);
	sc->a2 = file_hash(vol->fs, "a");
	sc->c2 = file_hash(vol->fs, "c");
	ck_assert_int_eq(nx_snap_take(vol, "s2", NULL), 0);
	write_file(vol, "a", 0, 300000, 5);
	write_file(vol, "c", 10000, 5000, 6);
	ck_assert_int_eq(nx_volume_close(vol), 0);
}

static void assert_scene_snapshots(const char *path, const struct scene *sc)
{
	struct nx_volume *vol = nxt_open(path);

	ck_assert_int_eq(nx_snap_count(vol), 2);
	ck_assert_uint_eq(snap_hash(vol, "s1", "a"), sc->a1);
	ck_assert_uint_eq(snap_hash(vol, "s1", "b"), sc->b1);
	ck_assert_uint_eq(snap_hash(vol, "s1", "c"), 0);
	ck_assert_uint_eq(snap_hash(vol, "s2", "a"), sc->a2);
	ck_assert_uint_eq(snap_hash(vol, "s2", "c"), sc->c2);
	ck_assert_int_eq(nx_volume_close(vol), 0);
}

/* ------------------------------------------------------------------ check */

START_TEST(test_check_clean)
{
	struct findings f;
	struct nx_check_result res;
	struct scene sc;
	char path[256];

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	res = check(path, 0, &f);
	ck_assert_msg(!res.errors && !res.warnings, "%s", f.text);
	ck_assert_int_eq(res.nsnaps, 0);
	build_scene(path, &sc);
	res = check(path, 0, &f);
	ck_assert_msg(!res.errors && !res.fixed && !res.warnings, "%s", f.text);
	ck_assert_int_eq(res.nsnaps, 2);
	ck_assert(res.views_checked);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

/* _i: flavour, bit 2: break the superblock's head instead of a link. */
START_TEST(test_check_repairs_broken_chain)
{
	int flavour = _i % NXT_NFLAVOURS, head = _i / NXT_NFLAVOURS;
	struct ext2_inode_large inode;
	struct nx_check_result res;
	struct nx_volume *vol;
	struct findings f;
	struct scene sc;
	char path[256], msg[256];
	ext2_ino_t s2;
	ext2_filsys fs;
	uint64_t before;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[flavour], 32);
	build_scene(path, &sc);
	s2 = snap_ino(path, "s2");
	fs = raw_open(path);
	if (head) {
		fs->super->s_snapshot_list = 5;		/* a reserved inode */
		ext2fs_mark_super_dirty(fs);
	} else {
		raw_inode(fs, s2, &inode, 0);
		inode.osd1.linux1.l_i_version = 0;	/* drops s1 */
		raw_inode(fs, s2, &inode, 1);
	}
	raw_close(fs);
	before = nxt_file_hash(path);
	if (head) {
		/*
		 * The engine refuses (to write, and to read snapshots),
		 * names the damage, points at the checker and writes
		 * nothing; a salvaging read goes on without the snapshots.
		 */
		ck_assert_int_ne(nx_open_volume(path, 0, &vol, msg,
						sizeof(msg)), 0);
		ck_assert_ptr_null(vol);
		ck_assert_ptr_nonnull(strstr(msg, "nextfs check --repair"));
		ck_assert_ptr_nonnull(strstr(msg, "inode 5"));
		ck_assert_uint_eq(nxt_file_hash(path), before);
		ck_assert_int_ne(nx_open_volume(path, NX_VOL_RDONLY, &vol, msg,
						sizeof(msg)), 0);
		ck_assert_ptr_nonnull(strstr(msg, "nextfs check --repair"));
		ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY |
						NX_VOL_SALVAGE, &vol, msg,
						sizeof(msg)), 0);
		ck_assert_int_eq(nx_snap_count(vol), 0);
		nx_volume_close(vol);
	}
	res = check(path, 0, &f);
	ck_assert_msg(res.errors > 0 && !res.fixed, "%s", f.text);
	ck_assert_ptr_nonnull(strstr(f.text, "snapshot list"));
	ck_assert_uint_eq(nxt_file_hash(path), before);	/* no repair: no change */

	res = check(path, 1, &f);
	ck_assert_msg(res.errors == 0 && res.fixed > 0, "%s", f.text);
	assert_clean(path);
	assert_scene_snapshots(path, &sc);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_check_repairs_flags)
{
	struct ext2_inode_large inode;
	struct nx_check_result res;
	struct findings f;
	struct scene sc;
	char path[256];
	ext2_ino_t s1, c;
	ext2_filsys fs;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);
	s1 = snap_ino(path, "s1");
	fs = raw_open(path);
	c = lookup_path(fs, "c");
	raw_inode(fs, s1, &inode, 0);
	inode.i_flags &= ~EXT4_SNAPFILE_FL;		/* a snapshot loses it */
	ext2fs_inode_size_set(fs, (struct ext2_inode *)&inode, 12345);
	raw_inode(fs, s1, &inode, 1);
	raw_inode(fs, c, &inode, 0);
	inode.i_flags |= EXT4_SNAPFILE_FL;		/* a user file gets it */
	raw_inode(fs, c, &inode, 1);
	fs->super->s_flags |= EXT2_FLAGS_IS_SNAPSHOT;
	ext2fs_mark_super_dirty(fs);
	raw_close(fs);

	res = check(path, 0, &f);
	ck_assert_msg(res.errors >= 4, "%s", f.text);
	ck_assert_ptr_nonnull(strstr(f.text, "lacks the snapshot flag"));
	ck_assert_ptr_nonnull(strstr(f.text, "is not a snapshot"));
	ck_assert_ptr_nonnull(strstr(f.text, "has size 12345"));
	res = check(path, 1, &f);
	ck_assert_msg(res.errors == 0 && res.fixed >= 4, "%s", f.text);
	assert_clean(path);
	fs = raw_open(path);
	raw_inode(fs, c, &inode, 0);
	ck_assert(!(inode.i_flags & EXT4_SNAPFILE_FL));
	raw_close(fs);
	assert_scene_snapshots(path, &sc);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

static int first_data_block(ext2_filsys fs, blk64_t *blocknr,
			    e2_blkcnt_t blockcnt, blk64_t ref_blk,
			    int ref_offset, void *priv)
{
	if (blockcnt < 0)
		return 0;
	*(blk64_t *)priv = *blocknr;
	return BLOCK_ABORT;
}

START_TEST(test_check_finds_double_owned_block)
{
	struct nx_check_result res;
	struct findings f;
	struct scene sc;
	char path[256], want[128];
	blk64_t sblk = 0, zero = 0, old0 = 0, free2 = 0;
	ext2_ino_t s1, c;
	ext2_filsys fs;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);
	assert_clean(path);
	s1 = snap_ino(path, "s1");
	fs = raw_open(path);
	c = lookup_path(fs, "c");
	ck_assert_int_eq(ext2fs_block_iterate3(fs, s1, BLOCK_FLAG_READ_ONLY,
					       NULL, first_data_block, &sblk),
			 0);
	ck_assert_uint_ne(sblk, 0);
	ck_assert_int_eq(ext2fs_bmap2(fs, c, NULL, NULL, 0, 0, NULL, &old0),
			 0);
	ck_assert_int_eq(ext2fs_bmap2(fs, c, NULL, NULL, 0, 2, NULL, &free2),
			 0);
	/* c's first block now points into the snapshot (its old one leaks) */
	ck_assert_int_eq(ext2fs_bmap2(fs, c, NULL, NULL, BMAP_SET, 0, NULL,
				      &sblk), 0);
	/* and its third is marked free while c still owns it */
	ext2fs_unmark_block_bitmap2(fs->block_map, free2);
	ext2fs_mark_bb_dirty(fs);
	raw_close(fs);
	(void)zero;

	res = check(path, 1, &f);
	ck_assert_msg(res.errors >= 2, "%s", f.text);
	snprintf(want, sizeof(want), "block %llu is owned by",
		 (unsigned long long)sblk);
	ck_assert_msg(strstr(f.text, want) != NULL, "%s", f.text);
	ck_assert_ptr_nonnull(strstr(f.text, "snapshot 's1'"));
	/* exactly those two blocks, as the bitmaps are compared in runs */
	snprintf(want, sizeof(want), "1 blocks are marked in use but owned by "
		 "nothing (first: %llu)", (unsigned long long)old0);
	ck_assert_msg(strstr(f.text, want) != NULL, "%s", f.text);
	snprintf(want, sizeof(want), "1 owned blocks are marked free in the "
		 "block bitmap (first: %llu)", (unsigned long long)free2);
	ck_assert_msg(strstr(f.text, want) != NULL, "%s", f.text);
	/* not something a repair may guess at */
	res = check(path, 1, &f);
	ck_assert_uint_gt(res.errors, 0);
	nxt_unlink(path);
}
END_TEST

/*
 * A snapshot that maps blocks which were free when it was taken keeps
 * something it never saw: check names the count and the first one.
 */
START_TEST(test_check_finds_preserved_free_blocks)
{
	struct findings f;
	struct scene sc;
	char path[256], want[160];
	blk64_t n, p[2], k;
	ext2_ino_t s1;
	ext2_filsys fs;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);
	s1 = snap_ino(path, "s1");
	fs = raw_open(path);
	/* free now and never used: free at the take too */
	n = ext2fs_blocks_count(fs->super) - 20;
	for (k = 0; k < 2; k++) {
		ck_assert(!ext2fs_test_block_bitmap2(fs->block_map, n + k));
		ck_assert_int_eq(ext2fs_new_block2(fs, 0, NULL, &p[k]), 0);
		ext2fs_block_alloc_stats2(fs, p[k], +1);
		ck_assert_int_eq(ext2fs_bmap2(fs, s1, NULL, NULL,
					      BMAP_SET | BMAP_ALLOC, n + k,
					      NULL, &p[k]), 0);
	}
	raw_close(fs);

	check(path, 0, &f);
	snprintf(want, sizeof(want), "snapshot 's1' preserves 2 blocks that "
		 "were free when it was taken (first: %llu)",
		 (unsigned long long)n);
	ck_assert_msg(strstr(f.text, want) != NULL, "%s", f.text);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_check_clears_stale_feature)
{
	struct nx_check_result res;
	struct findings f;
	char path[256];
	ext2_filsys fs;

	nxt_mkfs(path, nxt_flavours[_i], 32);
	fs = raw_open(path);
	ext2fs_set_feature_has_snapshot(fs->super);
	fs->super->s_snapshot_r_blocks_count = 100;
	ext2fs_mark_super_dirty(fs);
	raw_close(fs);
	ck_assert_int_ne(nxt_fsck(path), 0);	/* stock e2fsck refuses */
	res = check(path, 1, &f);
	ck_assert_msg(res.fixed == 1 && res.errors == 0, "%s", f.text);
	ck_assert_int_eq(nxt_fsck(path), 0);
	assert_clean(path);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_bad_input_changes_nothing)
{
	struct nx_check_result res;
	struct nx_restore_result rres;
	struct nx_volume *vol, *ro;
	struct nx_imgsrc *src;
	char path[256], junk[300], msg[256];
	uint64_t before;
	int fd;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[2], 32);
	vol = nxt_open(path);
	write_file(vol, "a", 0, 5000, 1);
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	/* a volume in use (as by nextfs-fuse) is refused through the lock */
	ck_assert_int_eq(nx_check(path, 0, NULL, NULL, NULL, &res, msg,
				  sizeof(msg)), EBUSY);
	ck_assert_ptr_nonnull(strstr(msg, "in use"));
	ck_assert_int_eq(nx_snap_restore(path, "s1", 0, NULL, &rres, msg,
					 sizeof(msg)), EBUSY);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	before = nxt_file_hash(path);
	ck_assert_int_eq(nx_snap_restore(path, "nope", 0, NULL, &rres, msg,
					 sizeof(msg)), ENOENT);
	ck_assert_ptr_nonnull(strstr(msg, "no snapshot named 'nope'"));
	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &ro, msg,
					sizeof(msg)), 0);
	ck_assert_int_eq(nx_imgsrc_open_export(ro, "nope", &src, msg,
					       sizeof(msg)), ENOENT);
	ck_assert_int_eq(nx_snap_diff(ro, "nope", NULL, NULL, NULL, NULL, msg,
				      sizeof(msg)), ENOENT);
	ck_assert_int_eq(nx_volume_close(ro), 0);
	ck_assert_uint_eq(nxt_file_hash(path), before);

	/* not a file system at all */
	snprintf(junk, sizeof(junk), "%s.junk", path);
	fd = open(junk, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
	close(fd);
	ck_assert_int_ne(nx_check(junk, NX_CHECK_REPAIR, NULL, NULL, NULL,
				  &res, msg, sizeof(msg)), 0);
	ck_assert_ptr_nonnull(strstr(msg, "not an ext2/3/4 file system: "
				     "its first"));
	unlink(junk);
	nxt_unlink(path);
}
END_TEST

/* ----------------------------------------------------------------- export */

static void export_to(struct nx_volume *vol, const char *name,
		      const char *out, int how)
{
	struct nx_imgsrc *src;
	char msg[256] = "";
	int fd;

	ck_assert_msg(nx_imgsrc_open_export(vol, name, &src, msg,
					    sizeof(msg)) == 0, "%s", msg);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(nx_imgsrc_write(src, fd, how, NULL, NULL), 0);
	close(fd);
	nx_imgsrc_close(src);
}

START_TEST(test_export_is_standalone)
{
	struct nx_volume *vol, *ex;
	struct scene sc;
	char path[256], out[300], out2[320], cmd[700];
	const char *names[] = { "s1", "s2" };
	int i;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);
	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, NULL, 0),
			 0);
	for (i = 0; i < 2; i++) {
		snprintf(out, sizeof(out), "%s.%s", path, names[i]);
		export_to(vol, names[i], out, NX_WRITE_FILE);
		ck_assert_int_eq(nxt_fsck(out), 0);
		ck_assert_int_eq(nx_open_volume(out, NX_VOL_RDONLY, &ex, NULL,
						0), 0);
		ck_assert(!ext2fs_has_feature_has_snapshot(ex->fs->super));
		ck_assert(!(ex->fs->super->s_flags & EXT2_FLAGS_IS_SNAPSHOT));
		ck_assert_int_eq(nx_snap_count(ex), 0);
		ck_assert_uint_eq(lookup_path(ex->fs, NX_SNAPDIR_NAME), 0);
		ck_assert_uint_eq(file_hash(ex->fs, "a"),
				  i ? sc.a2 : sc.a1);
		ck_assert_uint_eq(file_hash(ex->fs, "b"), i ? 0 : sc.b1);
		ck_assert_uint_eq(file_hash(ex->fs, "c"), i ? sc.c2 : 0);
		ck_assert_int_eq(nx_volume_close(ex), 0);
		/* a stream has the same bytes */
		snprintf(out2, sizeof(out2), "%s.stream", out);
		export_to(vol, names[i], out2, NX_WRITE_STREAM);
		snprintf(cmd, sizeof(cmd), "cmp -s %s %s", out, out2);
		ck_assert_int_eq(system(cmd), 0);
		unlink(out2);
		unlink(out);
	}
	ck_assert_int_eq(nx_volume_close(vol), 0);
	/* the source was only read */
	assert_clean(path);
	assert_scene_snapshots(path, &sc);
	nxt_unlink(path);
}
END_TEST

/* ------------------------------------------------------------------- diff */

struct diff_out {
	char text[8192];
};

static int add_line(void *priv, const struct nx_diff_entry *e)
{
	struct diff_out *d = priv;
	size_t used = strlen(d->text);

	if (e->kind == NX_DIFF_RENAMED)
		snprintf(d->text + used, sizeof(d->text) - used, "R %s -> %s\n",
			 e->path, e->newpath);
	else
		snprintf(d->text + used, sizeof(d->text) - used, "%c %s\n",
			 e->kind, e->path);
	return 0;
}

static void diff(struct nx_volume *vol, const char *old, const char *new,
		 struct diff_out *d)
{
	char msg[256] = "";

	memset(d, 0, sizeof(*d));
	ck_assert_msg(nx_snap_diff(vol, old, new, add_line, d, NULL, msg,
				   sizeof(msg)) == 0, "%s", msg);
}

START_TEST(test_diff_reports_changes)
{
	struct nx_volume *vol;
	struct ext2_inode_large inode;
	struct diff_out d;
	char path[256], msg[256];
	ext2_ino_t ino;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	write_file(vol, "keep", 0, 40000, 1);
	write_file(vol, "mod", 0, 100000, 2);
	write_file(vol, "gone", 0, 3000, 3);
	write_file(vol, "moved", 0, 3000, 4);
	write_file(vol, "tiny", 0, 10, 10);	/* inline data where possible */
	make_dir(vol, "dir");
	write_file(vol, "dir/inner", 0, 9000, 5);
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	write_file(vol, "mod", 50000, 1000, 6);		/* content */
	remove_file(vol, "gone");
	rename_file(vol, "moved", "dir/moved2");
	rename_file(vol, "tiny", "tiny2");
	write_file(vol, "new", 0, 500, 7);
	ino = lookup_path(vol->fs, "keep");		/* chmod */
	ck_assert_int_eq(nx_inode_read(vol, ino, &inode), 0);
	ck_assert_int_eq(nx_inode_write(vol, ino, &inode), 0);
	ck_assert_int_eq(nx_snap_take(vol, "s2", NULL), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, NULL, 0),
			 0);
	diff(vol, "s1", "s2", &d);
	/* root and dir changed their entries (mtime); keep is untouched */
	ck_assert_str_eq(d.text,
			 "M /\n"
			 "M /dir\n"
			 "- /gone\n"
			 "M /mod\n"
			 "R /moved -> /dir/moved2\n"
			 "+ /new\n"
			 "R /tiny -> /tiny2\n");
	diff(vol, "s2", NULL, &d);
	ck_assert_str_eq(d.text, "");			/* live == s2 */
	diff(vol, "s1", "s1", &d);
	ck_assert_str_eq(d.text, "");
	ck_assert_int_eq(nx_snap_diff(vol, "s2", "s1", add_line, &d, NULL, msg,
				      sizeof(msg)), EINVAL);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	vol = nxt_open(path);				/* changes after s2 */
	write_file(vol, "keep", 0, 10, 8);
	make_dir(vol, "d2");
	write_file(vol, "d2/x", 0, 100, 9);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, NULL, 0),
			 0);
	diff(vol, "s2", NULL, &d);
	ck_assert_str_eq(d.text,
			 "M /\n"
			 "+ /d2\n"
			 "+ /d2/x\n"
			 "M /keep\n");
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

static const struct nx_delta_inode *delta_ino(const struct nx_delta *d,
					      ext2_ino_t ino)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		if (d->v[i].ino == ino)
			return &d->v[i];
	return NULL;
}

static uint64_t extent_blocks(const struct nx_delta_inode *di)
{
	uint64_t n = 0;
	size_t i;

	for (i = 0; i < di->next; i++)
		n += di->ext[i].count;
	return n;
}

static int has_block(const struct nx_delta_inode *di, uint64_t lblk)
{
	size_t i;

	for (i = 0; i < di->next; i++)
		if (lblk >= di->ext[i].lblk &&
		    lblk < di->ext[i].lblk + di->ext[i].count)
			return 1;
	return 0;
}

/*
 * The delta send streams: the blocks whose mapping changed (only those),
 * a new sparse file's data ranges without its hole, a full delta with
 * every file; and the byte form the daemon hands out round-trips and
 * refuses a cut one.
 */
START_TEST(test_delta_extents_and_encoding)
{
	struct nx_delta d, full, back;
	struct nx_snapinfo s1, s2;
	const struct nx_delta_inode *di;
	struct nx_volume *vol;
	char path[256], msg[256], *buf, *buf2;
	size_t len, len2;
	unsigned bs;
	ext2_ino_t mod, sparse;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	write_file(vol, "mod", 0, 40 * bs, 2);
	write_file(vol, "keep", 0, 3 * bs, 3);
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	write_file(vol, "mod", 20 * bs + 10, 100, 6);	/* one block */
	write_file(vol, "sparse", 0, bs, 7);
	write_file(vol, "sparse", 30 * bs, bs, 8);	/* a hole between */
	ck_assert_int_eq(nx_snap_take(vol, "s2", NULL), 0);
	mod = lookup_path(vol->fs, "mod");
	sparse = lookup_path(vol->fs, "sparse");
	ck_assert_int_eq(nx_volume_close(vol), 0);

	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, NULL, 0),
			 0);
	ck_assert_int_eq(nx_snap_find(vol, "s1", &s1), 0);
	ck_assert_int_eq(nx_snap_find(vol, "s2", &s2), 0);
	ck_assert_msg(nx_snap_delta(vol, s1.id, s2.id, NX_DELTA_WANT_EXTENTS,
				    NULL, &d, msg, sizeof(msg)) == 0, "%s",
		      msg);
	di = delta_ino(&d, mod);
	ck_assert_ptr_nonnull(di);
	ck_assert(di->extents_known);
	ck_assert_uint_eq(di->what & NX_DELTA_NEW, 0);
	ck_assert(di->what & NX_DELTA_DATA);
	ck_assert(has_block(di, 20));
	ck_assert_uint_eq(extent_blocks(di), 1);
	di = delta_ino(&d, sparse);
	ck_assert_ptr_nonnull(di);
	ck_assert(di->what & NX_DELTA_NEW);
	ck_assert(has_block(di, 0) && has_block(di, 30) && !has_block(di, 15));
	ck_assert_ptr_null(delta_ino(&d, lookup_path(vol->fs, "keep")));

	ck_assert_msg(nx_snap_delta(vol, 0, s2.id, NX_DELTA_FULL |
				    NX_DELTA_WANT_EXTENTS, NULL, &full, msg,
				    sizeof(msg)) == 0, "%s", msg);
	di = delta_ino(&full, mod);
	ck_assert_ptr_nonnull(di);
	ck_assert(di->what & NX_DELTA_NEW);
	ck_assert_uint_eq(extent_blocks(di), 40);
	ck_assert_ptr_nonnull(delta_ino(&full, EXT2_ROOT_INO));

	ck_assert_int_eq(nx_delta_encode(&d, &buf, &len), 0);
	ck_assert_int_eq(nx_delta_decode(buf, len, &back), 0);
	ck_assert_int_eq(nx_delta_encode(&back, &buf2, &len2), 0);
	ck_assert_uint_eq(len, len2);
	ck_assert_int_eq(memcmp(buf, buf2, len), 0);
	nx_delta_free(&back);
	ck_assert_int_ne(nx_delta_decode(buf, len - 1, &back), 0);
	ck_assert_uint_eq(back.n, 0);
	buf[0] ^= 1;
	ck_assert_int_ne(nx_delta_decode(buf, len, &back), 0);
	free(buf);
	free(buf2);
	nx_delta_free(&d);
	nx_delta_free(&full);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	nxt_unlink(path);
}
END_TEST

/* ---------------------------------------------------------------- restore */

/* ------------------------------------------------------------------ */
/* Send.                                                               */

struct membuf {
	char *p;
	size_t n, cap;
	struct nx_volume *vol;
	const char *del;		/* delete it at the first write */
};

static errcode_t mem_write(void *priv, const void *buf, size_t len)
{
	struct membuf *m = priv;

	if (m->del) {
		nx_volume_lock(m->vol);
		ck_assert_int_eq(nx_snap_delete(m->vol, m->del), 0);
		nx_volume_unlock(m->vol);
		m->del = NULL;
	}
	if (m->n + len > m->cap) {
		m->cap = 2 * (m->n + len);
		m->p = realloc(m->p, m->cap);
		ck_assert_ptr_nonnull(m->p);
	}
	memcpy(m->p + m->n, buf, len);
	m->n += len;
	return 0;
}

/* The stream of ID (from PARENT) made without reading ahead. */
static void send_plain(struct nx_volume *vol, uint32_t parent, uint32_t id,
		       struct membuf *m)
{
	struct nx_send_params p = { .id = id, .parent_id = parent,
				    .out = { -1, mem_write, m } };
	struct nx_snapinfo info[2];
	struct nx_send_reader *rd;
	struct nx_send_stats st;
	struct nx_delta d;
	char msg[256];

	nx_volume_lock(vol);
	ck_assert_int_eq(nx_snap_find_id(vol, id, &info[1]), 0);
	ck_assert_int_eq(nx_snap_identity(vol, &info[1], p.uuid,
					  &p.ctransid), 0);
	if (parent) {
		ck_assert_int_eq(nx_snap_find_id(vol, parent, &info[0]), 0);
		ck_assert_int_eq(nx_snap_identity(vol, &info[0], p.parent_uuid,
						  &p.parent_ctransid), 0);
	}
	ck_assert_int_eq(nx_snap_delta(vol, parent, id, NX_DELTA_WANT_EXTENTS |
				       (parent ? 0 : NX_DELTA_FULL), NULL, &d,
				       msg, sizeof(msg)), 0);
	nx_volume_unlock(vol);
	p.name = info[1].name;
	ck_assert_int_eq(nx_send_view_reader(vol, parent, id, &rd), 0);
	rd->plan = NULL;		/* every read when it is asked */
	ck_assert_msg(nx_send_stream(&d, rd, &p, &st, msg, sizeof(msg)) == 0,
		      "%s", msg);
	nx_send_view_reader_free(rd);
	nx_delta_free(&d);
}

/*
 * nx_send_snapshot reads file data ahead of the sender (threads, more
 * than its byte budget here): the stream is the one a send that reads
 * each piece when it needs it makes, full and incremental.  A snapshot
 * deleted while it is sent ends the stream with ENOENT and says so,
 * however much was read ahead.
 */
START_TEST(test_send_reads_ahead)
{
	struct membuf a = { 0 }, b = { 0 };
	struct nx_send_out out = { -1, mem_write, &a };
	struct nx_snapinfo s1, s2;
	struct nx_send_stats st;
	struct nx_volume *vol;
	char path[256], name[64], msg[256];
	unsigned bs;
	int i, k;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 96);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	make_dir(vol, "d");
	for (i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "d/f%d", i);
		write_file(vol, name, 0, (size_t)(i % 7) * bs + (size_t)i, i);
	}
	write_file(vol, "big1", 0, 12 << 20, 100);
	write_file(vol, "big2", 0, 12 << 20, 101);
	ck_assert_int_eq(nx_snap_take(vol, "s1", &s1), 0);
	write_file(vol, "big1", 5 * bs, 3 * bs, 102);
	write_file(vol, "d/f3", 0, 9 * bs, 103);
	remove_file(vol, "d/f4");
	write_file(vol, "new", 0, 2 * bs + 1, 104);
	ck_assert_int_eq(nx_snap_take(vol, "s2", &s2), 0);

	for (k = 0; k < 2; k++) {
		uint32_t parent = k ? s1.id : 0;

		a.n = b.n = 0;
		ck_assert_msg(nx_send_snapshot(vol, parent, s2.id, NULL, &out,
					       &st, msg, sizeof(msg)) == 0,
			      "%s", msg);
		send_plain(vol, parent, s2.id, &b);
		ck_assert_uint_gt(a.n, k ? 3 * bs : 24 << 20);
		ck_assert_uint_eq(a.n, b.n);
		ck_assert(memcmp(a.p, b.p, a.n) == 0);
	}

	a.n = 0;
	a.vol = vol;
	a.del = "s2";
	ck_assert_int_eq(nx_send_snapshot(vol, 0, s2.id, NULL, &out, &st, msg,
					  sizeof(msg)), ENOENT);
	ck_assert_msg(strstr(msg, "'s2' was deleted while it was being sent"),
		      "%s", msg);
	ck_assert_uint_lt(a.n, 24 << 20);
	free(a.p);
	free(b.p);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
}
END_TEST

START_TEST(test_restore_rolls_back)
{
	struct nx_restore_result res;
	struct nx_volume *vol;
	struct scene sc;
	char path[256], msg[512];
	uint64_t before;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);

	/* s1 has a newer snapshot: refused, nothing changes */
	before = nxt_file_hash(path);
	ck_assert_int_eq(nx_snap_restore(path, "s1", 0, NULL, &res, msg,
					 sizeof(msg)), EEXIST);
	ck_assert_ptr_nonnull(strstr(msg, "'s2'"));
	ck_assert_uint_eq(nxt_file_hash(path), before);

	/* back to s2: the live tree is s2 again, both snapshots intact */
	ck_assert_msg(nx_snap_restore(path, "s2", 0, NULL, &res, msg,
				      sizeof(msg)) == 0, "%s", msg);
	ck_assert_uint_gt(res.blocks_restored + res.blocks_returned, 0);
	assert_clean(path);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	assert_scene_snapshots(path, &sc);
	vol = nxt_open(path);
	ck_assert_uint_eq(file_hash(vol->fs, "a"), sc.a2);
	ck_assert_uint_eq(file_hash(vol->fs, "b"), 0);
	ck_assert_uint_eq(file_hash(vol->fs, "c"), sc.c2);
	/* the restored tree works: change it, s2 still preserved */
	write_file(vol, "a", 0, 100000, 9);
	remove_file(vol, "c");
	ck_assert_uint_eq(snap_hash(vol, "s2", "a"), sc.a2);
	ck_assert_uint_eq(snap_hash(vol, "s2", "c"), sc.c2);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	assert_clean(path);

	/* back to s1, dropping s2 */
	ck_assert_msg(nx_snap_restore(path, "s1", NX_RESTORE_DESTROY_NEWER,
				      NULL, &res, msg, sizeof(msg)) == 0,
		      "%s", msg);
	ck_assert_int_eq(res.destroyed, 1);
	assert_clean(path);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	vol = nxt_open(path);
	ck_assert_int_eq(nx_snap_count(vol), 1);
	ck_assert_uint_eq(file_hash(vol->fs, "a"), sc.a1);
	ck_assert_uint_eq(file_hash(vol->fs, "b"), sc.b1);
	ck_assert_uint_eq(file_hash(vol->fs, "c"), 0);
	ck_assert_uint_eq(snap_hash(vol, "s1", "a"), sc.a1);
	/* deleting the last snapshot leaves a plain, clean volume */
	ck_assert_int_eq(nx_snap_delete(vol, "s1"), 0);
	ck_assert_int_eq(nx_snap_reclaim_all(vol), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST


/*
 * A snapshot's own blocks can sit where the live tree must get its old
 * content back (a directory block preserved by copy, then freed, then
 * reused for the snapshot's block map): restore moves them first.
 */
START_TEST(test_restore_relocates_snapshot_blocks)
{
	struct nx_restore_result res;
	struct nx_volume *vol;
	char path[256], name[64], msg[512];
	ext2_ino_t victim = 0;
	uint64_t big, f7;
	int i;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	make_dir(vol, "d");
	for (i = 0; i < 150; i++) {
		snprintf(name, sizeof(name), "d/file-with-a-long-name-%03d", i);
		write_file(vol, name, 0, 100, i);
	}
	write_file(vol, "big", 0, 3 << 20, 1);
	big = file_hash(vol->fs, "big");
	f7 = file_hash(vol->fs, "d/file-with-a-long-name-007");
	ck_assert_int_eq(nx_snap_take(vol, "s", NULL), 0);
	for (i = 0; i < 150; i++) {
		snprintf(name, sizeof(name), "d/file-with-a-long-name-%03d", i);
		remove_file(vol, name);
	}
	ck_assert_int_eq(nx_rmdir(vol, &root, EXT2_ROOT_INO, "d", &victim), 0);
	ck_assert_int_eq(nx_inode_release(vol, victim), 0);
	/*
	 * Freed blocks are reused only after the commit that frees them, and
	 * copies are allocated from the preserved block's number up: after
	 * a fresh open, a change to lost+found (whose blocks come before d's)
	 * puts its copy into a freed block of d.
	 */
	ck_assert_int_eq(nx_volume_close(vol), 0);
	vol = nxt_open(path);
	write_file(vol, "lost+found/new", 0, 100, 99);
	for (i = 0; i < 6; i++)
		write_file(vol, "big", (uint64_t)i << 19, 100000, 7 + i);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	assert_clean(path);

	ck_assert_msg(nx_snap_restore(path, "s", 0, NULL, &res, msg,
				      sizeof(msg)) == 0, "%s", msg);
	/*
	 * With 1 KiB blocks the snapshot's indirect blocks land in the freed
	 * directory blocks (the engine allocates them near their data): the
	 * case this test is about.  Other layouts may or may not collide.
	 */
	if (_i == 0)
		ck_assert_uint_gt(res.blocks_relocated, 0);
	assert_clean(path);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	vol = nxt_open(path);
	ck_assert_uint_eq(file_hash(vol->fs, "big"), big);
	ck_assert_uint_eq(file_hash(vol->fs, "d/file-with-a-long-name-007"),
			  f7);
	ck_assert_uint_eq(snap_hash(vol, "s", "big"), big);
	ck_assert_int_eq(nx_snap_delete(vol, "s"), 0);
	ck_assert_int_eq(nx_snap_reclaim_all(vol), 0);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* S's view read through the engine: block BLK of snapshot NAME. */
static void view_block(const char *path, const char *name, blk64_t blk,
		       char *buf)
{
	struct nx_snapinfo info;
	struct nx_volume *vol, *view;

	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, NULL, 0),
			 0);
	ck_assert_int_eq(nx_snap_find(vol, name, &info), 0);
	ck_assert_int_eq(nx_snap_view_open(vol, info.ino, &view), 0);
	ck_assert_int_eq(io_channel_read_blk64(view->fs->io, blk, 1, buf), 0);
	nx_snap_view_close(view);
	ck_assert_int_eq(nx_volume_close(vol), 0);
}

/*
 * If the restore must rewrite a block the snapshot's view still reads from
 * the live volume (here: the snapshot's copy of the superblock block is
 * taken away), the old content is preserved into the snapshot first.
 */
START_TEST(test_restore_guard_preserves)
{
	struct nx_restore_result res;
	struct scene sc;
	char path[256], msg[512], before[4096], after[4096];
	blk64_t sblk;
	ext2_ino_t s2;
	ext2_filsys fs;
	unsigned bs;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	build_scene(path, &sc);
	s2 = snap_ino(path, "s2");
	fs = raw_open(path);
	bs = fs->blocksize;
	sblk = SUPERBLOCK_OFFSET / bs;
	ck_assert_int_eq(ext2fs_punch(fs, s2, NULL, NULL, sblk, sblk), 0);
	raw_close(fs);
	view_block(path, "s2", sblk, before);

	ck_assert_msg(nx_snap_restore(path, "s2", 0, NULL, &res, msg,
				      sizeof(msg)) == 0, "%s", msg);
	ck_assert_uint_gt(res.blocks_guarded, 0);
	view_block(path, "s2", sblk, after);
	ck_assert(!memcmp(before, after, bs));
	assert_clean(path);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	assert_scene_snapshots(path, &sc);
	nxt_unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("snaptool");
	TCase *tc = tcase_create("tools");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_check_clean, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_check_repairs_broken_chain, 0,
			    2 * NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_check_repairs_flags, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_check_finds_double_owned_block, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_check_finds_preserved_free_blocks, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_check_clears_stale_feature, 0,
			    NXT_NFLAVOURS);
	tcase_add_test(tc, test_bad_input_changes_nothing);
	tcase_add_loop_test(tc, test_export_is_standalone, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_diff_reports_changes, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_delta_extents_and_encoding, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_send_reads_ahead, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_restore_rolls_back, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_restore_relocates_snapshot_blocks, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_restore_guard_preserves, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
