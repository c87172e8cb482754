/*
 * test_defrag.c - the defrag engine (defrag.h) below FUSE: a file
 * fragmented by overwrites under a snapshot is moved in small steps,
 * with writes to it between the steps as a mount would interleave them;
 * the file ends up in fewer extents holding what a model of it says, the
 * snapshot still reads what it held at take time, and e2fsck finds the
 * volume clean.  The refusals: not a regular file, nothing to gain.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fixture.h"
#include "nextfs/defrag.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"

#define FILE_BYTES	(1U << 20)

static struct nx_cred root;

static ext2_ino_t new_file(struct nx_volume *vol, const char *name)
{
	struct ext2_inode_large inode;
	ext2_ino_t ino;

	ck_assert_int_eq(nx_inode_new(vol, &root, EXT2_ROOT_INO,
				      S_IFREG | 0644, &ino, &inode), 0);
	ck_assert_int_eq(ext2fs_link(vol->fs, EXT2_ROOT_INO, name, ino,
				     EXT2_FT_REG_FILE), 0);
	return ino;
}

static void put(struct nx_volume *vol, ext2_ino_t ino, char *model,
		uint64_t off, size_t len, unsigned seed)
{
	size_t i, done;

	for (i = 0; i < len; i++)
		model[off + i] = (char)(seed * 131 + i * 7 + (i >> 8));
	ck_assert_int_eq(nx_file_write(vol, ino, model + off, len, off,
				       &done), 0);
	ck_assert_uint_eq(done, len);
}

static int same_content(struct nx_volume *vol, ext2_ino_t ino,
			const char *want, size_t len)
{
	char *buf = malloc(len);
	size_t got;
	int same;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(nx_file_read(vol, ino, buf, len, 0, &got), 0);
	same = got == len && !memcmp(buf, want, len);
	free(buf);
	return same;
}

static int snapshot_reads(struct nx_volume *vol, const char *snap,
			  ext2_ino_t ino, const char *want, size_t len)
{
	struct nx_snapinfo info;
	struct nx_volume *view;
	int same;

	ck_assert_int_eq(nx_snap_find(vol, snap, &info), 0);
	ck_assert_int_eq(nx_snap_view_open(vol, info.ino, &view), 0);
	same = same_content(view, ino, want, len);
	nx_snap_view_close(view);
	return same;
}

START_TEST(test_defrag_in_steps_keeps_snapshot)
{
	char path[256], *model = malloc(FILE_BYTES), *taken = malloc(FILE_BYTES);
	struct nx_volume *vol;
	struct nx_defrag d;
	unsigned bs, i, seed = 1;
	ext2_ino_t ino;
	int done = 0, steps = 0;

	ck_assert_ptr_nonnull(model);
	ck_assert_ptr_nonnull(taken);
	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 64);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	ino = new_file(vol, "f");
	put(vol, ino, model, 0, FILE_BYTES, seed++);
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	memcpy(taken, model, FILE_BYTES);
	srand(7);
	for (i = 0; i < 150; i++)	/* each moves a block under s1 */
		put(vol, ino, model, (uint64_t)(rand() % (FILE_BYTES / bs)) * bs,
		    bs, seed++);

	ck_assert_int_eq(nx_defrag_begin(vol, ino, &d), 0);
	ck_assert_int_eq(d.verdict, NX_DEFRAG_MOVE);
	ck_assert_uint_gt(d.extents_before, 20);
	while (!done) {
		ck_assert_int_eq(nx_defrag_step(vol, &d, 7, &done), 0);
		/* A writer between two steps, before and after the cursor. */
		if (++steps % 5 == 0)
			put(vol, ino, model, (uint64_t)(rand() %
					     (FILE_BYTES / bs)) * bs, bs,
			    seed++);
	}
	ck_assert_int_gt(steps, 10);
	ck_assert_uint_gt(d.kept, 0);
	ck_assert_int_eq(nx_defrag_finish(vol, &d), 0);
	ck_assert_uint_lt(d.extents_after, d.extents_before / 4);
	ck_assert(same_content(vol, ino, model, FILE_BYTES));
	ck_assert(snapshot_reads(vol, "s1", ino, taken, FILE_BYTES));
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	vol = nxt_open(path);		/* as it was committed */
	ck_assert(same_content(vol, ino, model, FILE_BYTES));
	ck_assert(snapshot_reads(vol, "s1", ino, taken, FILE_BYTES));
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
	nxt_unlink(path);
	free(model);
	free(taken);
}
END_TEST

START_TEST(test_defrag_refuses_what_it_must_not_touch)
{
	char path[256], *model = malloc(8 << 10);
	struct nx_volume *vol;
	struct nx_defrag d;
	ext2_ino_t ino;

	ck_assert_ptr_nonnull(model);
	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 16);
	vol = nxt_open(path);
	ck_assert_int_eq(nx_defrag_begin(vol, EXT2_ROOT_INO, &d), EINVAL);
	ino = new_file(vol, "one");
	put(vol, ino, model, 0, 8 << 10, 3);
	ck_assert_int_eq(nx_defrag_begin(vol, ino, &d), 0);
	ck_assert_int_eq(d.verdict, NX_DEFRAG_CONTIGUOUS);
	ck_assert_uint_eq(d.extents_before, d.extents_after);
	ck_assert_int_eq(nx_defrag_finish(vol, &d), 0);
	ck_assert(same_content(vol, ino, model, 8 << 10));
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
	free(model);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("defrag");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_defrag_in_steps_keeps_snapshot, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_defrag_refuses_what_it_must_not_touch, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
