/*
 * test_ordered.c - a commit without a journal writes new tree blocks
 * before what points at them (docs/design.md P10, the ordered commit of
 * src/volume/txn.c).
 *
 * A volume without a journal (ext2, ext4 without has_journal) has no log
 * to replay: a crash in the middle of a commit leaves whichever of its
 * blocks were written.  The commit writes every block allocated since the
 * last commit first, and syncs, so that no inode, indirect block or
 * extent node on the device points at a new block whose content never
 * arrived: e2fsck would read the block's old content (here: the data of
 * a deleted file) as block numbers, find them illegal and give up.
 *
 * Per flavour: a base image whose free blocks all hold old file data (a
 * file filled them, was committed, deleted and committed again).  Then,
 * in one transaction, a file is created and grown through its whole
 * block map - on ext2 the direct blocks, the indirect block, the double
 * indirect block and one below it; on ext4 more extents than the inode
 * holds, so that the tree gets a leaf block - and the volume is synced
 * and closed.  The device is cut after each write of that run in turn
 * (NEXTFS_FAULTS cut=N:drop, include/nextfs/faults.h), and e2fsck -fn
 * must then find no illegal block and be able to finish (exit below 8):
 * what a crash may leave on a volume without a journal is counts,
 * bitmaps and links to repair, never garbage read as a block map.
 *
 * The same commit also writes the inodes of the snapshots, and the
 * inode-table block of an older snapshot holds live inodes too: after a
 * take, the first change to such a block is copied into the new, active
 * snapshot, whose inode roots the block map that maps the copy.  That
 * inode must be durable before the block is overwritten in place, or a
 * crash in between leaves the active snapshot reading the block's new
 * content (docs/design.md P10: a crash never changes a snapshot taken
 * before it).  test_cut_after_take_keeps_snapshot cuts at every write
 * of a take and the change after it, and looks at the file through the
 * snapshot.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/faults.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"

#define IMAGE_MB	4
#define JUNK_SIZE	(3 << 20)	/* most of the free space */

/* The flavours without a journal: their commits write in order. */
static const struct {
	const char *name, *mkfs;
	int extents;
} flavours[] = {
	{ "ext2", "-t ext2 -b 1024", 0 },
	{ "ext4 without a journal", "-t ext4 -b 1024 -O ^has_journal", 1 },
};

static struct nx_cred root;

static errcode_t write_pattern(struct nx_volume *vol, ext2_ino_t ino,
			       uint64_t off, size_t len, unsigned seed)
{
	char *buf = malloc(len);
	size_t done = 0;
	errcode_t err;

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	nxt_pattern(buf, len, seed, off);
	err = nx_file_write(vol, ino, buf, len, off, &done);
	free(buf);
	return !err && done != len ? EIO : err;
}

/*
 * Free blocks that hold a deleted file's data, not zeros.  (A block map
 * block of the deleted file was zeroed when it was emptied: the new file
 * must not find its own map blocks exactly there, hence one block of
 * another deleted file in front, which shifts the layouts apart.)
 */
static void make_base(const char *path)
{
	static const char *const names[] = { "pad", "junk" };
	static const size_t sizes[] = { 1024, JUNK_SIZE };
	struct nx_volume *vol = nxt_open(path);
	ext2_ino_t ino, victim;
	int i;

	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, names[i],
					  S_IFREG | 0644, 0, &ino), 0);
		ck_assert_int_eq(write_pattern(vol, ino, 0, sizes[i], 1), 0);
	}
	ck_assert_int_eq(nx_volume_close(vol), 0);
	vol = nxt_open(path);
	for (i = 0; i < 2; i++) {
		victim = 0;
		ck_assert_int_eq(nx_unlink(vol, &root, EXT2_ROOT_INO,
					   names[i], &victim), 0);
		ck_assert_int_eq(nx_inode_release(vol, victim), 0);
	}
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
}

/*
 * One run of a test and its judgement, each in a child process (a cut
 * may make anything fail), sharing this with the test.
 */
struct run {
	const char *image;
	char spec[64];			/* NEXTFS_FAULTS for the run */
	int uncut;			/* the run without a cut */
	int extents;			/* test_cut_during_tree_growth */
	int opened, done;		/* the open, all the run, returned 0 */
	uint64_t writes;		/* device writes let through */
	char why[400];			/* the judgement: "" = fine */
	int judged;
};

/* Open R's image with its fault plan; NULL if that failed. */
static struct nx_volume *open_with_plan(struct run *r)
{
	struct nx_volume *vol;
	char msg[256];
	errcode_t err;

	setenv("NEXTFS_FAULTS", r->spec, 1);
	err = nx_open_volume(r->image, 0, &vol, msg, sizeof(msg));
	unsetenv("NEXTFS_FAULTS");
	r->opened = !err;
	return err ? NULL : vol;
}

/* Sync (if ERR is 0) and close VOL, and say how it all went into R. */
static void finish_run(struct run *r, struct nx_volume *vol, errcode_t err)
{
	struct nx_faults *plan = nx_blkio_faults(vol->io);

	if (!err)
		err = nx_volume_sync(vol);
	r->writes = plan ? plan->writes_done : 0;
	err = nx_volume_close(vol) ?: err;
	r->done = !err;
}

/* What a test sweeps: the volume, its base content, the run, the check. */
struct sweep {
	const char *mkfs;
	void (*make_base)(const char *path);
	void (*run)(void *);		/* in a child, on r->image */
	void (*judge)(void *);		/* the same, after it */
	int extents;
};

static void cut_once(const struct sweep *sw, const char *base,
		     struct run *r, uint64_t n)
{
	r->opened = r->done = r->judged = 0;
	r->uncut = !n;
	r->why[0] = 0;
	snprintf(r->spec, sizeof(r->spec), "cut=%llu:drop",
		 (unsigned long long)(n ? n : UINT64_MAX));
	ck_assert_int_eq(nxt_copy_image(base, r->image), 0);
	nxt_in_child(sw->run, r, 30);
	nxt_in_child(sw->judge, r, 60);
	if (!r->judged)
		snprintf(r->why, sizeof(r->why), "the check died");
}

/*
 * The run on a copy of the base without a cut, which must succeed and
 * pass the check, then cut after each of its device writes in turn.
 * Failing cut points are listed in FAILURES; returns how many.
 */
static int sweep_cuts(const struct sweep *sw, char *failures, size_t len)
{
	char base[256], work[300];
	struct run *r;
	uint64_t total, n;
	int nfail = 0;

	nxt_root_cred(&root);
	nxt_mkfs(base, sw->mkfs, IMAGE_MB);
	snprintf(work, sizeof(work), "%s.work", base);
	sw->make_base(base);
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(r, MAP_FAILED);
	memset(r, 0, sizeof(*r));
	r->image = work;
	r->extents = sw->extents;
	cut_once(sw, base, r, 0);
	ck_assert_msg(r->opened && r->done, "the run without a cut failed");
	ck_assert_msg(!r->why[0], "without a cut: %s", r->why);
	total = r->writes;
	ck_assert_uint_gt(total, 5);
	failures[0] = 0;
	for (n = 1; n <= total; n++) {
		size_t used = strlen(failures);

		cut_once(sw, base, r, n);
		if (!r->why[0])
			continue;
		nfail++;
		fprintf(stderr, "cut=%llu: %s\n", (unsigned long long)n,
			r->why);
		if (used + 200 < len)
			snprintf(failures + used, len - used,
				 "  cut=%llu: %.150s\n", (unsigned long long)n,
				 r->why);
	}
	munmap(r, sizeof(*r));
	unlink(work);
	nxt_unlink(base);
	return nfail;
}

/* ------------------------------------------------------ tree growth */

/*
 * Block-mapped: 300 KiB in 1 KiB blocks need 12 direct blocks, an
 * indirect block for the next 256, then a double indirect block and an
 * indirect block below it.  Extents: every other block of 40, so 20
 * extents, more than the 4 the inode holds.
 */
static void grow_one_file(void *p)
{
	struct run *r = p;
	struct nx_volume *vol = open_with_plan(r);
	ext2_ino_t ino;
	errcode_t err;
	int i;

	if (!vol)
		return;
	err = nx_mknod(vol, &root, EXT2_ROOT_INO, "grown", S_IFREG | 0644, 0,
		       &ino);
	if (r->extents) {
		for (i = 0; !err && i < 40; i += 2)
			err = write_pattern(vol, ino, (uint64_t)i * 1024, 1024,
					    2);
	} else if (!err) {
		err = write_pattern(vol, ino, 0, 300 * 1024, 2);
	}
	finish_run(r, vol, err);
}

/*
 * What e2fsck says about a block map whose blocks hold something else:
 * block numbers beyond the volume in a block-mapped file, a tree node
 * without a valid header or an extent beyond the volume in an
 * extent-mapped one.
 */
static const char *garbage_seen(const char *out)
{
	static const char *const said[] = {
		"Illegal", "invalid extent", "xtent header",
	};
	const char *at;
	size_t i;

	for (i = 0; i < sizeof(said) / sizeof(said[0]); i++)
		if ((at = strstr(out, said[i])))
			return at;
	return NULL;
}

/* e2fsck -fn finds no garbage (and nothing at all without a cut). */
static void judge_fsck(void *p)
{
	static char out[8192];
	struct run *r = p;
	int rc = nxt_fsck_capture(r->image, "-fn", out, sizeof(out));
	const char *bad = garbage_seen(out);

	if ((r->uncut && rc) || rc >= 8 || bad)
		snprintf(r->why, sizeof(r->why), "e2fsck -fn exit %d: %.300s",
			 rc, bad ? bad : out);
	r->judged = 1;
}

START_TEST(test_cut_during_tree_growth)
{
	const struct sweep sw = {
		flavours[_i].mkfs, make_base, grow_one_file, judge_fsck,
		flavours[_i].extents,
	};
	static char failures[3000];
	int nfail = sweep_cuts(&sw, failures, sizeof(failures));

	ck_assert_msg(nfail == 0, "%s: %d cut points leave garbage read as a "
		      "block map:\n%s", flavours[_i].name, nfail, failures);
}
END_TEST

/* ------------------------------------------------- snapshot inode blocks */

/* The inode-table block holding INO. */
static blk64_t itable_block(ext2_filsys fs, ext2_ino_t ino)
{
	dgrp_t g = (ino - 1) / fs->super->s_inodes_per_group;
	uint64_t off = (uint64_t)((ino - 1) % fs->super->s_inodes_per_group) *
		       EXT2_INODE_SIZE(fs->super);

	return ext2fs_inode_table_loc(fs, g) + off / fs->blocksize;
}

/* What S2 must show of "live": its size and content at S2's take. */
struct seen {
	int found;
	off_t size;
	uint64_t hash;
};

static struct seen at_take;	/* set before the children are forked */

static void look_at(struct nx_volume *vol, struct seen *s)
{
	static char buf[8192];
	struct stat st;
	ext2_ino_t ino;
	size_t got = 0;

	memset(s, 0, sizeof(*s));
	if (nx_lookup(vol, EXT2_ROOT_INO, "live", &ino) ||
	    nx_getattr(vol, ino, &st) ||
	    nx_file_read(vol, ino, buf, sizeof(buf), 0, &got))
		return;
	s->found = 1;
	s->size = st.st_size;
	s->hash = nxt_fnv(NXT_FNV_INIT, buf, got);
}

/* A new empty file PREFIX<I> in the root directory; its inode. */
static ext2_ino_t new_empty(struct nx_volume *vol, const char *prefix, int i)
{
	char name[32];
	ext2_ino_t ino;

	snprintf(name, sizeof(name), "%s%d", prefix, i);
	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, name,
				  S_IFREG | 0644, 0, &ino), 0);
	return ino;
}

/*
 * The base: "live", then the snapshot directory and snapshot S1, whose
 * inodes come next, in the same inode-table block; then enough other
 * files that the next inode, S2's in the runs, lands in a later block.
 * What S2 must show of "live" - the runs take S2 before they change it -
 * goes to at_take.
 */
static void make_snap_base(const char *path)
{
	struct nx_volume *vol = nxt_open(path);
	ext2_filsys fs = vol->fs;
	ext2_ino_t live, last = EXT2_FIRST_INO(fs->super);	/* lost+found */
	struct nx_snapinfo s1;
	int i;

	/* Inodes are handed out in order on a new volume. */
	for (i = 0; itable_block(fs, last + 1) != itable_block(fs, last + 3);
	     i++)
		last = new_empty(vol, "pad", i);
	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, "live",
				  S_IFREG | 0644, 0, &live), 0);
	ck_assert_int_eq(write_pattern(vol, live, 0, 3000, 3), 0);
	ck_assert_int_eq(nx_snap_take(vol, "S1", &s1), 0);
	ck_assert_uint_eq(itable_block(fs, s1.ino), itable_block(fs, live));
	for (i = 0, last = s1.ino;
	     itable_block(fs, last) == itable_block(fs, live); i++)
		last = new_empty(vol, "filler", i);
	look_at(vol, &at_take);
	ck_assert(at_take.found);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
}

/*
 * Take S2, then change "live".  The commit after the take writes S2's
 * first block map, with the copy of the inode-table block of "live" and
 * S1 in it.
 */
static void change_live(void *p)
{
	struct run *r = p;
	struct nx_volume *vol = open_with_plan(r);
	ext2_ino_t ino;
	errcode_t err;

	if (!vol)
		return;
	err = nx_snap_take(vol, "S2", NULL);
	if (!err)
		err = nx_lookup(vol, EXT2_ROOT_INO, "live", &ino);
	if (!err)
		err = write_pattern(vol, ino, 3000, 2000, 4);
	finish_run(r, vol, err);
}

/* S2, if its take made it, still shows "live" as at_take. */
static void judge_s2(void *p)
{
	struct run *r = p;
	struct nx_snapinfo info;
	struct nx_volume *vol, *view;
	struct seen now;
	char msg[256];
	errcode_t err;

	err = nx_open_volume(r->image, 0, &vol, msg, sizeof(msg));
	if (err) {
		snprintf(r->why, sizeof(r->why), "does not open: %.150s", msg);
		r->judged = 1;
		return;
	}
	err = nx_snap_find(vol, "S2", &info);
	if (!err)
		err = nx_snap_view_open(vol, info.ino, &view);
	if (!err) {
		look_at(view, &now);
		nx_snap_view_close(view);
		if (!now.found || now.size != at_take.size ||
		    now.hash != at_take.hash)
			snprintf(r->why, sizeof(r->why), "S2 shows \"live\" "
				 "as it is after the take (size %lld, %lld "
				 "at the take)", (long long)now.size,
				 (long long)at_take.size);
	} else if (err != ENOENT) {	/* ENOENT: the take was cut */
		snprintf(r->why, sizeof(r->why), "S2: %ld", (long)err);
	}
	nx_volume_close(vol);
	r->judged = 1;
}

START_TEST(test_cut_after_take_keeps_snapshot)
{
	const struct sweep sw = {
		"-t ext2 -b 1024", make_snap_base, change_live, judge_s2, 0,
	};
	static char failures[3000];
	int nfail = sweep_cuts(&sw, failures, sizeof(failures));

	ck_assert_msg(nfail == 0, "%d cut points change snapshot S2:\n%s",
		      nfail, failures);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ordered");
	TCase *tc = tcase_create("cut");

	tcase_add_loop_test(tc, test_cut_during_tree_growth, 0,
			    (int)(sizeof(flavours) / sizeof(flavours[0])));
	tcase_add_test(tc, test_cut_after_take_keeps_snapshot);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
