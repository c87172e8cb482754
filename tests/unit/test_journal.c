/*
 * test_journal.c - the journal nextfs writes is the kernel's JBD2: stock
 * e2fsck replays it, and nextfs replays what e2fsprogs writes.
 *
 *  - e2fsck replays ours: a commit (new directory, files, a large
 *    transaction spanning several descriptor blocks) is cut off after
 *    every one of its device writes in turn; stock "e2fsck -fy" then
 *    leaves a clean volume in which the change is either wholly absent or
 *    wholly present - and present whenever the commit block was written
 *    (e2fsck says it recovered the journal).  The same with nextfs's own
 *    replay on open.
 *  - escaping: a +C file overwritten under a snapshot is logged as data;
 *    a block that starts with the JBD2 magic survives a replay intact.
 *  - nextfs replays e2fsprogs: debugfs writes a transaction into the log
 *    ("journal_write"); opening with nextfs puts its block in place and
 *    leaves the log empty, and e2fsck -fn is clean.
 *  - orphans: a file unlinked while in use and committed is freed after
 *    a crash by the next open (and by e2fsck).
 *  - a journal inode with a hole in its block map is refused at open,
 *    before anything is written (a log write would land on block 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/faults.h"
#include "nextfs/file.h"
#include "nextfs/open.h"
#include "nextfs/xattr.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"

static struct nx_cred root;

/* Journaled flavours: ext3 with 1 KiB blocks (many tags per commit), and
 * the ext3/ext4 flavours of the fixture. */
static const char *const jflavours[] = {
	"-t ext3 -b 1024",
	"-t ext3 -b 4096",
	"-t ext4",
	"-t ext4 -O 64bit,metadata_csum,inline_data -I 256",
};
#define NJFLAVOURS (sizeof(jflavours) / sizeof(jflavours[0]))

#define NFILES 300
#define FILE_LEN 3000

static void fill(char *buf, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)((i * 7 + seed * 13) | 1);
}

/* The change under test: /d with NFILES small files.  Errors ignored. */
static void make_change(struct nx_volume *vol)
{
	char name[32], buf[FILE_LEN];
	ext2_ino_t d, ino;
	size_t done;
	int i;

	nx_volume_lock(vol);
	if (nx_mkdir(vol, &root, EXT2_ROOT_INO, "d", 0755, &d) == 0) {
		for (i = 0; i < NFILES; i++) {
			snprintf(name, sizeof(name), "f%03d", i);
			fill(buf, sizeof(buf), i);
			if (nx_mknod(vol, &root, d, name, S_IFREG | 0644, 0,
				     &ino) == 0)
				nx_file_write(vol, ino, buf, sizeof(buf), 0,
					      &done);
		}
	}
	nx_volume_sync(vol);
	nx_volume_unlock(vol);
}

/*
 * 0: the change is absent; 1: wholly present; -1: partly there or wrong.
 */
static int change_state(const char *path)
{
	char msg[256], name[32], want[FILE_LEN], got[FILE_LEN];
	struct nx_volume *vol;
	ext2_ino_t d, ino;
	size_t n;
	int i, state = 1;

	if (nx_open_volume(path, NX_VOL_RDONLY, &vol, msg, sizeof(msg)))
		return -1;
	if (nx_lookup(vol, EXT2_ROOT_INO, "d", &d)) {
		nx_volume_close(vol);
		return 0;
	}
	for (i = 0; i < NFILES && state == 1; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		fill(want, sizeof(want), i);
		if (nx_lookup(vol, d, name, &ino) ||
		    nx_file_read(vol, ino, got, sizeof(got), 0, &n) ||
		    n != sizeof(got) || memcmp(got, want, n))
			state = -1;
	}
	nx_volume_close(vol);
	return state;
}

/* Device writes the change makes from open to close, and where it began. */
static void count_writes(const char *base, const char *work,
			 uint64_t *first, uint64_t *last)
{
	struct nx_faults plan = { 0 };
	struct nx_volume *vol;

	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	vol = nxt_open(work);
	plan.cut_after = UINT64_MAX;
	nx_blkio_set_faults(vol->io, &plan);
	*first = plan.writes_done;
	make_change(vol);
	*last = plan.writes_done;
	nx_blkio_set_faults(vol->io, NULL);
	ck_assert_int_eq(nx_volume_close(vol), 0);
}

/* Run the change on a copy of BASE with every write after CUT dropped. */
static void crash_at(const char *base, const char *work, uint64_t cut)
{
	struct nx_faults plan = { 0 };
	struct nx_volume *vol;

	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	vol = nxt_open(work);
	plan.cut_after = cut;
	nx_blkio_set_faults(vol->io, &plan);
	make_change(vol);
	nx_volume_close(vol);	/* its writes vanish: the crash */
}

static void make_base(char *base, const char *flavour)
{
	struct nx_volume *vol;

	nxt_mkfs(base, flavour, 24);
	vol = nxt_open(base);	/* first use: journal features as the kernel's */
	ck_assert_int_eq(nxt_close_and_fsck(vol, base), 0);
}

START_TEST(test_e2fsck_replays_ours)
{
	char base[200], work[256], out[8192];
	uint64_t first, last, cut, step;
	int recovered_present = 0, absent = 0, rc, state;

	nxt_root_cred(&root);
	make_base(base, jflavours[_i]);
	snprintf(work, sizeof(work), "%s.work", base);
	count_writes(base, work, &first, &last);
	ck_assert_uint_gt(last, first + 3);
	step = (last - first) / 40 + 1;
	for (cut = first; cut <= last; cut += step) {
		crash_at(base, work, cut);
		rc = nxt_fsck_capture(work, "-fy", out, sizeof(out));
		ck_assert_msg(rc == 0 || rc == 1, "cut %llu: e2fsck -fy exit "
			      "%d:\n%s", (unsigned long long)cut, rc, out);
		ck_assert_msg(nxt_fsck(work) == 0, "cut %llu: not clean after "
			      "e2fsck's replay", (unsigned long long)cut);
		state = change_state(work);
		ck_assert_msg(state >= 0, "cut %llu: change half there",
			      (unsigned long long)cut);
		if (state && strstr(out, "recovering journal"))
			recovered_present++;
		absent += !state;
	}
	/* The sweep saw both sides, and e2fsck's replay made the difference. */
	ck_assert_int_gt(absent, 0);
	ck_assert_int_gt(recovered_present, 0);
	nxt_unlink(work);
	nxt_unlink(base);
}
END_TEST

START_TEST(test_nextfs_replays_ours)
{
	char base[200], work[256], msg[256];
	uint64_t first, last, cut, step;
	struct nx_volume *vol;
	int present = 0, absent = 0, state;

	nxt_root_cred(&root);
	make_base(base, jflavours[_i]);
	snprintf(work, sizeof(work), "%s.work", base);
	count_writes(base, work, &first, &last);
	step = (last - first) / 25 + 1;
	for (cut = first; cut <= last; cut += step) {
		crash_at(base, work, cut);
		/* Read-only opens refuse a log with transactions in it. */
		if (nx_open_volume(work, NX_VOL_RDONLY, &vol, msg,
				   sizeof(msg)) == 0)
			nx_volume_close(vol);
		else
			ck_assert_msg(strstr(msg, "recovery") != NULL, "%s",
				      msg);
		vol = nxt_open(work);	/* replays */
		ck_assert_int_eq(nxt_close_and_fsck(vol, work), 0);
		state = change_state(work);
		ck_assert_msg(state >= 0, "cut %llu: change half there",
			      (unsigned long long)cut);
		present += state;
		absent += !state;
	}
	ck_assert_int_gt(absent, 0);
	ck_assert_int_gt(present, 0);
	nxt_unlink(work);
	nxt_unlink(base);
}
END_TEST

/*
 * A chattr +C file "nocow" whose first block holds OLD (BS bytes), then
 * snapshot "s" of it.  Volume lock held.
 */
static ext2_ino_t nocow_under_snapshot(struct nx_volume *vol, const char *old,
				       size_t bs)
{
	ext2_ino_t ino;
	unsigned flags;
	size_t n;

	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, "nocow",
				  S_IFREG | 0644, 0, &ino), 0);
	ck_assert_int_eq(nx_get_iflags(vol, ino, &flags), 0);
	ck_assert_int_eq(nx_set_iflags(vol, &root, ino, flags | FS_NOCOW_FL),
			 0);
	ck_assert_int_eq(nx_file_write(vol, ino, old, bs, 0, &n), 0);
	ck_assert_int_eq(nx_snap_take(vol, "s", NULL), 0);
	return ino;
}

/* A +C block that starts with the journal magic, logged and replayed. */
START_TEST(test_escaped_block_survives_replay)
{
	static const unsigned char magic[4] = { 0xC0, 0x3B, 0x39, 0x98 };
	char base[200], work[256], *buf, *got, *old;
	struct nx_faults plan = { 0 };
	struct nx_volume *vol;
	uint64_t first, last, cut;
	ext2_ino_t ino;
	size_t n, bs;
	int replayed_new = 0;

	nxt_root_cred(&root);
	make_base(base, jflavours[_i]);
	vol = nxt_open(base);
	bs = vol->fs->blocksize;
	buf = calloc(1, bs);
	got = calloc(1, bs);
	old = calloc(1, bs);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(got);
	ck_assert_ptr_nonnull(old);
	fill(old, bs, 1);
	nx_volume_lock(vol);
	ino = nocow_under_snapshot(vol, old, bs);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	/* The overwrite: old content copied to the snapshot, new one logged. */
	fill(buf, bs, 2);
	memcpy(buf, magic, sizeof(magic));
	snprintf(work, sizeof(work), "%s.work", base);
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	vol = nxt_open(work);
	plan.cut_after = UINT64_MAX;
	nx_blkio_set_faults(vol->io, &plan);
	first = plan.writes_done;
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, bs, 0, &n), 0);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	nx_volume_unlock(vol);
	last = plan.writes_done;
	nx_blkio_set_faults(vol->io, NULL);
	ck_assert_int_eq(nx_volume_close(vol), 0);

	for (cut = first; cut < last; cut++) {
		ck_assert_int_eq(nxt_copy_image(base, work), 0);
		vol = nxt_open(work);
		memset(&plan, 0, sizeof(plan));
		plan.cut_after = cut;
		nx_blkio_set_faults(vol->io, &plan);
		nx_volume_lock(vol);
		nx_file_write(vol, ino, buf, bs, 0, &n);
		nx_volume_sync(vol);
		nx_volume_unlock(vol);
		nx_volume_close(vol);

		vol = nxt_open(work);
		nx_volume_lock(vol);
		ck_assert_int_eq(nx_file_read(vol, ino, got, bs, 0, &n), 0);
		nx_volume_unlock(vol);
		ck_assert_int_eq(nx_volume_close(vol), 0);
		ck_assert_int_eq(nxt_fsck_masked(work), 0);
		if (!memcmp(got, buf, bs))
			replayed_new++;
		else
			ck_assert_msg(!memcmp(got, old, bs), "cut %llu: file "
				      "neither old nor new",
				      (unsigned long long)cut);
	}
	ck_assert_int_gt(replayed_new, 0);
	free(buf);
	free(got);
	free(old);
	nxt_unlink(work);
	nxt_unlink(base);
}
END_TEST

/*
 * A +C block written twice before a commit: the first write copied its
 * old content into the snapshot, whose mapping of the copy is durable
 * only at the commit, so neither write may reach the device before that
 * (docs/design.md P10).  The second one used to go straight to the
 * device: a crash before the commit left the snapshot reading it.
 */
START_TEST(test_nocow_rewrite_waits_for_commit)
{
	char base[200], *buf, *dev, *old;
	struct nx_volume *vol, *view;
	struct nx_snapinfo info;
	ext2_ino_t ino;
	blk64_t pblk = 0;
	size_t n, bs;
	int fd;

	nxt_root_cred(&root);
	make_base(base, nxt_flavours[_i]);
	vol = nxt_open(base);
	bs = vol->fs->blocksize;
	buf = calloc(1, bs);
	dev = calloc(1, bs);
	old = calloc(1, bs);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(dev);
	ck_assert_ptr_nonnull(old);
	fill(old, bs, 1);
	nx_volume_lock(vol);
	ino = nocow_under_snapshot(vol, old, bs);
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	ck_assert_int_eq(ext2fs_bmap2(vol->fs, ino, NULL, NULL, 0, 0, NULL,
				      &pblk), 0);
	ck_assert_uint_ne(pblk, 0);

	fill(buf, bs, 2);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, bs, 0, &n), 0);
	fill(buf, bs, 3);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, bs, 0, &n), 0);
	fd = open(base, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, dev, bs, (off_t)(pblk * bs)), (ssize_t)bs);
	ck_assert_msg(!memcmp(dev, old, bs), "a +C rewrite reached the "
		      "device before the commit made its copy durable");
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	ck_assert_int_eq(pread(fd, dev, bs, (off_t)(pblk * bs)), (ssize_t)bs);
	ck_assert(!memcmp(dev, buf, bs));
	close(fd);

	/* The snapshot still reads the old content, the live file the new. */
	ck_assert_int_eq(nx_snap_find(vol, "s", &info), 0);
	ck_assert_int_eq(nx_snap_view_open(vol, info.ino, &view), 0);
	ck_assert_int_eq(nx_file_read(view, ino, dev, bs, 0, &n), 0);
	ck_assert(!memcmp(dev, old, bs));
	nx_snap_view_close(view);
	ck_assert_int_eq(nx_file_read(vol, ino, dev, bs, 0, &n), 0);
	ck_assert(!memcmp(dev, buf, bs));
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(base), 0);
	free(buf);
	free(dev);
	free(old);
	nxt_unlink(base);
}
END_TEST

/* debugfs (e2fsprogs' own JBD2 writer) logs a block; nextfs replays it. */
START_TEST(test_nextfs_replays_debugfs)
{
	char base[200], data[256], cmd[1024], *blk, *got;
	struct nx_volume *vol;
	size_t bs;
	blk64_t target;
	FILE *f;

	make_base(base, jflavours[_i]);
	vol = nxt_open(base);
	bs = vol->fs->blocksize;
	/* A free block far from everything: nothing else will touch it. */
	target = ext2fs_blocks_count(vol->fs->super) - 10;
	ck_assert(!ext2fs_test_block_bitmap2(vol->fs->block_map, target));
	ck_assert_int_eq(nx_volume_close(vol), 0);

	blk = malloc(bs);
	got = malloc(bs);
	ck_assert_ptr_nonnull(blk);
	ck_assert_ptr_nonnull(got);
	fill(blk, bs, 77);
	snprintf(data, sizeof(data), "%s.blk", base);
	f = fopen(data, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(blk, 1, bs, f), bs);
	fclose(f);
	/* debugfs -f reads commands from stdin; -R and -f do not mix. */
	snprintf(cmd, sizeof(cmd),
		 "printf 'jo\\njw -b %llu %s\\njc\\n' | debugfs -w -f - %s "
		 ">/dev/null 2>&1", (unsigned long long)target, data, base);
	ck_assert_int_eq(system(cmd), 0);

	vol = nxt_open(base);	/* replays the transaction */
	ck_assert_int_eq(nx_blkio_pread(vol->io, got, bs, target * bs), 0);
	ck_assert_msg(!memcmp(got, blk, bs), "debugfs's block not replayed");
	ck_assert_int_eq(nxt_close_and_fsck(vol, base), 0);
	free(blk);
	free(got);
	unlink(data);
	nxt_unlink(base);
}
END_TEST

/*
 * A file unlinked while still in use, committed, then the process dies:
 * the inode is on the orphan list, and the next read-write open frees it
 * (blocks and inode), leaving a clean volume - for nextfs and e2fsck.
 */
START_TEST(test_orphan_freed_after_crash)
{
	char base[200], work[256], buf[65536], out[4096];
	struct nx_faults plan = { 0 };
	struct nx_volume *vol;
	blk64_t free_before;
	ext2_ino_t ino;
	size_t n;
	int rc;

	nxt_root_cred(&root);
	nxt_mkfs(base, nxt_flavours[_i], 24);
	vol = nxt_open(base);
	free_before = ext2fs_free_blocks_count(vol->fs->super);
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, "open-file",
				  S_IFREG | 0644, 0, &ino), 0);
	fill(buf, sizeof(buf), 5);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, sizeof(buf), 0, &n), 0);
	ck_assert_int_eq(nx_unlink(vol, &root, EXT2_ROOT_INO, "open-file",
				   NULL), 0);
	/* Still "open": not released.  The commit records the orphan. */
	ck_assert_int_eq(nx_volume_sync(vol), 0);
	ck_assert_uint_eq(vol->fs->super->s_last_orphan, ino);
	plan.cut_after = 1;	/* nothing more reaches the disk: the crash */
	plan.writes_done = 1;
	nx_blkio_set_faults(vol->io, &plan);
	nx_volume_unlock(vol);
	nx_volume_close(vol);

	snprintf(work, sizeof(work), "%s.work", base);
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	/* Stock e2fsck frees it too (it processes the list). */
	rc = nxt_fsck_capture(work, "-fy", out, sizeof(out));
	ck_assert_msg(rc == 0 || rc == 1, "e2fsck -fy %d:\n%s", rc, out);
	ck_assert_int_eq(nxt_fsck(work), 0);

	vol = nxt_open(base);	/* frees the orphan */
	ck_assert_uint_eq(vol->fs->super->s_last_orphan, 0);
	ck_assert_uint_eq(ext2fs_free_blocks_count(vol->fs->super),
			  free_before);
	ck_assert_int_eq(nxt_close_and_fsck(vol, base), 0);
	nxt_unlink(work);
	nxt_unlink(base);
}
END_TEST

/*
 * A journal whose block map has a hole (debugfs punches one) cannot be
 * used: mapping the hole would send log writes to block 0, over the
 * superblock.  A read-write open refuses it with a message naming the
 * journal and writes nothing.
 */
START_TEST(test_journal_with_hole_refused)
{
	char base[200], cmd[512], msg[256] = "";
	struct nx_volume *vol = NULL;
	uint64_t before;
	errcode_t err;

	make_base(base, jflavours[_i]);
	snprintf(cmd, sizeof(cmd), "debugfs -w -R 'punch <8> 100 100' %s "
		 ">/dev/null 2>&1", base);
	ck_assert_int_eq(system(cmd), 0);
	before = nxt_file_hash(base);
	err = nx_open_volume(base, 0, &vol, msg, sizeof(msg));
	ck_assert_int_ne(err, 0);
	ck_assert_ptr_null(vol);
	ck_assert_msg(strstr(msg, "journal") != NULL, "message: %s", msg);
	ck_assert_msg(nxt_file_hash(base) == before, "the refused open wrote");
	nxt_unlink(base);
}
END_TEST

static Suite *journal_suite(void)
{
	Suite *s = suite_create("journal");
	TCase *tc = tcase_create("jbd2");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_e2fsck_replays_ours, 0, NJFLAVOURS);
	tcase_add_loop_test(tc, test_nextfs_replays_ours, 0, NJFLAVOURS);
	tcase_add_loop_test(tc, test_escaped_block_survives_replay, 0,
			    NJFLAVOURS);
	tcase_add_loop_test(tc, test_nextfs_replays_debugfs, 0, NJFLAVOURS);
	tcase_add_loop_test(tc, test_nocow_rewrite_waits_for_commit, 0,
			    NXT_NFLAVOURS);
	tcase_add_loop_test(tc, test_journal_with_hole_refused, 0, NJFLAVOURS);
	tcase_add_loop_test(tc, test_orphan_freed_after_crash, 0,
			    NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(journal_suite());
}
