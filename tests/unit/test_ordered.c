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
 *
 * A snapshot delete hands the deleted snapshot's blocks over to the next
 * older one in slices (src/snap/handover.c): one commit maps blocks into
 * the older snapshot and takes them out of the deleted one.  Cut inside
 * that commit, the older snapshot must still show every block it showed
 * (through the deleted one or its own map, never neither: docs/design.md
 * P10), the volume must open read-write, and finishing the hand-over
 * must leave a volume e2fsck finds clean.  test_cut_during_handover
 * cuts at every write of one slice.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
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

/* Open R's image for its check, without faults; NULL (judged) if not. */
static struct nx_volume *open_to_judge(struct run *r)
{
	struct nx_volume *vol;
	char msg[256];

	if (!nx_open_volume(r->image, 0, &vol, msg, sizeof(msg)))
		return vol;
	snprintf(r->why, sizeof(r->why), "does not open: %.150s", msg);
	r->judged = 1;
	return NULL;
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

/* What VOL shows of file NAME (in the root; at most 1 MiB of it). */
static void look_at(struct nx_volume *vol, const char *name, struct seen *s)
{
	static char buf[1 << 20];
	struct stat st;
	ext2_ino_t ino;
	size_t got = 0;

	memset(s, 0, sizeof(*s));
	if (nx_lookup(vol, EXT2_ROOT_INO, name, &ino) ||
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
	look_at(vol, "live", &at_take);
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
	errcode_t err;

	if (!(vol = open_to_judge(r)))
		return;
	err = nx_snap_find(vol, "S2", &info);
	if (!err)
		err = nx_snap_view_open(vol, info.ino, &view);
	if (!err) {
		look_at(view, "live", &now);
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

/* ---------------------------------------------------- delete hand-over */

#define HO_CHUNK	(16 * 1024)
#define HO_CHUNKS	48
#define HO_FILES	2

static const char *const ho_files[HO_FILES] = { "a", "F" };

/* What "old" and "new" show of each file at their takes. */
static struct seen ho_seen[2][HO_FILES];
static const char *const ho_snaps[2] = { "old", "new" };

/*
 * And block by block: the hash of every block in use at the take that
 * no snapshot file owned then (0: not compared).  A block a snapshot
 * shows only through another one's map (an inode-table block, say) is
 * in no file of it.
 */
static uint64_t ho_blocks[2][IMAGE_MB << 10];

static int mark_owned(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t cnt,
		      blk64_t ref, int off, void *priv)
{
	(void)fs; (void)cnt; (void)ref; (void)off;
	ext2fs_mark_block_bitmap2(priv, *blocknr);
	return 0;
}

/* Blocks of the snapshot files on the list now. */
static ext2fs_block_bitmap snapshot_owned(struct nx_volume *vol)
{
	ext2_ino_t ino = vol->fs->super->s_snapshot_list;
	struct ext2_inode inode;
	ext2fs_block_bitmap owned;

	ck_assert_int_eq(ext2fs_allocate_block_bitmap(vol->fs, "owned",
						      &owned), 0);
	for (; ino; ino = inode.osd1.linux1.l_i_version) {
		ck_assert_int_eq(ext2fs_block_iterate3(vol->fs, ino,
						       BLOCK_FLAG_READ_ONLY,
						       NULL, mark_owned,
						       owned), 0);
		ck_assert_int_eq(ext2fs_read_inode(vol->fs, ino, &inode), 0);
	}
	return owned;
}

static struct nx_volume *ho_view(struct nx_volume *vol, const char *name)
{
	struct nx_snapinfo info;
	struct nx_volume *view;

	if (nx_snap_find(vol, name, &info) ||
	    nx_snap_view_open(vol, info.ino, &view))
		return NULL;
	return view;
}

static uint64_t ho_block_hash(struct nx_volume *view, blk64_t blk)
{
	static char buf[1024];
	uint64_t h;

	if (nx_snap_view_pread(view, buf, sizeof(buf), blk * sizeof(buf)))
		return 1;
	h = nxt_fnv(NXT_FNV_INIT, buf, sizeof(buf));
	return h > 1 ? h : 2;
}

/* Right after the take of ho_snaps[SNAP]: what it must show. */
static void ho_record_blocks(struct nx_volume *vol, int snap)
{
	ext2fs_block_bitmap owned = snapshot_owned(vol);
	struct nx_volume *view = ho_view(vol, ho_snaps[snap]);
	blk64_t blk;

	ck_assert_ptr_nonnull(view);
	ck_assert_int_eq(ext2fs_read_block_bitmap(view->fs), 0);
	ck_assert_uint_eq(ext2fs_blocks_count(view->fs->super),
			  sizeof(ho_blocks[0]) / sizeof(ho_blocks[0][0]));
	for (blk = view->fs->super->s_first_data_block;
	     blk < ext2fs_blocks_count(view->fs->super); blk++)
		if (ext2fs_test_block_bitmap2(view->fs->block_map, blk) &&
		    !ext2fs_test_block_bitmap2(owned, blk))
			ho_blocks[snap][blk] = ho_block_hash(view, blk);
	nx_snap_view_close(view);
	ext2fs_free_block_bitmap(owned);
}

static void ho_record(struct nx_volume *vol, int snap)
{
	int i;

	for (i = 0; i < HO_FILES; i++) {
		look_at(vol, ho_files[i], &ho_seen[snap][i]);
		ck_assert(ho_seen[snap][i].found);
	}
}

/*
 * Files, "old", S holding every other chunk of F (punched out of F
 * after S's take), "new"; then S deleted, its hand-over not started.
 */
static void make_handover_base(const char *path)
{
	struct nx_volume *vol = nxt_open(path);
	ext2_ino_t a, f;
	int i;

	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, "a",
				  S_IFREG | 0644, 0, &a), 0);
	ck_assert_int_eq(write_pattern(vol, a, 0, 30000, 1), 0);
	ck_assert_int_eq(nx_mknod(vol, &root, EXT2_ROOT_INO, "F",
				  S_IFREG | 0644, 0, &f), 0);
	ck_assert_int_eq(write_pattern(vol, f, 0, HO_CHUNK * HO_CHUNKS, 5), 0);
	ck_assert_int_eq(nx_snap_take(vol, "old", NULL), 0);
	ho_record(vol, 0);
	ho_record_blocks(vol, 0);
	ck_assert_int_eq(write_pattern(vol, a, 0, 30000, 2), 0);
	ck_assert_int_eq(nx_file_fallocate(vol, f, FALLOC_FL_PUNCH_HOLE |
					   FALLOC_FL_KEEP_SIZE, HO_CHUNK,
					   HO_CHUNK), 0);
	ck_assert_int_eq(nx_snap_take(vol, "S", NULL), 0);
	for (i = 0; i < HO_CHUNKS; i += 2)
		ck_assert_int_eq(nx_file_fallocate(vol, f,
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(uint64_t)i * HO_CHUNK, HO_CHUNK), 0);
	ck_assert_int_eq(nx_snap_take(vol, "new", NULL), 0);
	ho_record(vol, 1);
	ho_record_blocks(vol, 1);
	ck_assert_int_eq(nx_snap_delete(vol, "S"), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(path), 0);
}

/*
 * Slices of the hand-over as the daemon runs them, several to a commit:
 * first slices without time (one run of S's map each), a commit (SYNC)
 * after the sixth, then one that does all the rest.  The seventh, S's
 * copy of F's indirect block (which "old" has a copy of too: freed, not
 * handed over), is the first change of this commit to S's indirect
 * block that maps it, the eighth hands over data blocks mapped in the
 * same indirect block of S and of "old": S's change comes first.
 */
#define SYNC	UINT_MAX

static void handover_slices(void *p)
{
	static const unsigned budget_ms[] = {
		0, 0, 0, 0, 0, 0, SYNC, 0, 0, SYNC, 60000,
	};
	struct run *r = p;
	struct nx_volume *vol = open_with_plan(r);
	errcode_t err = 0;
	int more = 0;
	size_t i;

	if (!vol)
		return;
	for (i = 0; !err && i < sizeof(budget_ms) / sizeof(budget_ms[0]); i++)
		err = budget_ms[i] == SYNC ? nx_volume_sync(vol) :
		      nx_snap_reclaim(vol, budget_ms[i], &more);
	finish_run(r, vol, err);
}

/* "" if "old" and "new" show what they showed at their takes. */
static void ho_check_snaps(struct nx_volume *vol, struct run *r,
			   const char *when)
{
	const blk64_t nblocks = sizeof(ho_blocks[0]) / sizeof(ho_blocks[0][0]);
	struct nx_volume *view;
	struct seen now;
	blk64_t b;
	int s, i;

	for (s = 0; s < 2 && !r->why[0]; s++) {
		if (!(view = ho_view(vol, ho_snaps[s]))) {
			snprintf(r->why, sizeof(r->why), "%s: no view of %s",
				 when, ho_snaps[s]);
			return;
		}
		for (i = 0; i < HO_FILES && !r->why[0]; i++) {
			look_at(view, ho_files[i], &now);
			if (!now.found || now.size != ho_seen[s][i].size ||
			    now.hash != ho_seen[s][i].hash)
				snprintf(r->why, sizeof(r->why), "%s: %s shows "
					 "\"%s\" changed", when, ho_snaps[s],
					 ho_files[i]);
		}
		for (b = 0; b < nblocks && !r->why[0]; b++)
			if (ho_blocks[s][b] &&
			    ho_block_hash(view, b) != ho_blocks[s][b])
				snprintf(r->why, sizeof(r->why), "%s: %s shows "
					 "block %llu changed", when,
					 ho_snaps[s], (unsigned long long)b);
		nx_snap_view_close(view);
	}
}

/* e2fsck -fn on a copy of IMAGE with HAS_SNAPSHOT masked; its exit. */
static int masked_fsck(const char *image, char *out, size_t len)
{
	char copy[300];
	int rc;

	snprintf(copy, sizeof(copy), "%s.masked", image);
	ck_assert_int_eq(nxt_masked_copy(image, copy), 0);
	rc = nxt_fsck_capture(copy, "-fn", out, len);
	unlink(copy);
	return rc;
}

/*
 * What e2fsck -fn may still find after a crash without a journal, which
 * writes counts, bitmaps and inodes after the block maps: blocks marked
 * in use that nothing owns ("-" only: a block owned but marked free
 * could be handed out twice), counts, and a snapshot inode's block count
 * not yet updated for blocks its map has.  NULL if OUT holds nothing
 * else; else the first other line.
 */
static int starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static const char *beyond_crash_residue(const char *out)
{
	static const char *const ok[] = {
		"e2fsck ", "Pass ", "Fix? no", "Free blocks count wrong",
		"Free inodes count wrong", "Inode ", "/", "",
	};
	const char *line, *end;
	size_t i;

	for (line = out; *line; line = *end ? end + 1 : end) {
		end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line);
		if (starts(line, "Block bitmap differences:")) {
			if (memchr(line, '+', end - line))
				return line;
			continue;
		}
		if (starts(line, "Inode ") &&
		    !memmem(line, end - line, ", i_blocks is ", 14))
			return line;
		for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
			if (ok[i][0] ? starts(line, ok[i]) : line == end)
				break;
		if (i == sizeof(ok) / sizeof(ok[0]))
			return line;
	}
	return NULL;
}

/* Fill the free space with a new file: what nobody maps gets reused. */
static errcode_t fill_free_space(struct nx_volume *vol)
{
	static char buf[64 * 1024];
	ext2_ino_t ino;
	uint64_t off = 0;
	size_t done;
	errcode_t err;

	err = nx_mknod(vol, &root, EXT2_ROOT_INO, "fill", S_IFREG | 0644, 0,
		       &ino);
	memset(buf, 0x5a, sizeof(buf));
	while (!err) {
		done = 0;
		err = nx_file_write(vol, ino, buf, sizeof(buf), off, &done);
		off += done;
		if (!err && !done)
			break;
	}
	return err == ENOSPC || err == EXT2_ET_BLOCK_ALLOC_FAIL ? 0 : err;
}

/* Set HAS_SNAPSHOT again on a masked copy IMAGE (ext2: no checksum). */
static void unmask(const char *image)
{
	struct ext2_super_block sb;
	int fd = open(image, O_RDWR);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET),
			 sizeof(sb));
	sb.s_feature_ro_compat |= EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT;
	ck_assert_int_eq(pwrite(fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET),
			 sizeof(sb));
	close(fd);
}

/*
 * After e2fsck -fy (what a volume without a journal needs after a crash:
 * it frees the blocks the crash left marked but unowned), new data over
 * all free space: a block a snapshot shows only because nothing reused
 * it yet is overwritten now.  Then e2fsck -fn must find nothing.
 */
static void judge_after_repair(struct run *r, char *out, size_t len)
{
	char copy[300], msg[256];
	struct nx_volume *vol;
	errcode_t err;
	int rc;

	snprintf(copy, sizeof(copy), "%s.repaired", r->image);
	ck_assert_int_eq(nxt_masked_copy(r->image, copy), 0);
	rc = nxt_fsck_capture(copy, "-fy", out, len);
	if (rc >= 4)
		snprintf(r->why, sizeof(r->why), "e2fsck -fy exit %d", rc);
	unmask(copy);
	if (!r->why[0] && nx_open_volume(copy, 0, &vol, msg, sizeof(msg)))
		snprintf(r->why, sizeof(r->why), "after e2fsck -fy: does not "
			 "open: %.150s", msg);
	else if (!r->why[0]) {
		err = fill_free_space(vol);
		if (err)
			snprintf(r->why, sizeof(r->why), "filling: %ld",
				 (long)err);
		if (!r->why[0])
			ho_check_snaps(vol, r, "after e2fsck -fy and filling "
				       "the free space");
		err = nx_volume_close(vol);
		if (err && !r->why[0])
			snprintf(r->why, sizeof(r->why), "close: %ld",
				 (long)err);
	}
	if (!r->why[0] && (rc = masked_fsck(copy, out, len)))
		snprintf(r->why, sizeof(r->why), "after e2fsck -fy and "
			 "filling: e2fsck -fn exit %d", rc);
	unlink(copy);
}

/*
 * The volume opens read-write; "old" and "new" show their take-time
 * content right after the cut and after the rest of the hand-over;
 * e2fsck -fn then finds no more than a crash without a journal leaves;
 * and once that is repaired, no new data changes them.
 */
static void judge_handover(void *p)
{
	static char out[8192];
	struct run *r = p;
	const char *bad;
	struct nx_volume *vol;
	errcode_t err;
	int rc;

	if (!(vol = open_to_judge(r)))
		return;
	ho_check_snaps(vol, r, "after the cut");
	err = nx_snap_reclaim_all(vol);
	if (err && !r->why[0])
		snprintf(r->why, sizeof(r->why), "finishing the hand-over: "
			 "%ld", (long)err);
	if (!r->why[0])
		ho_check_snaps(vol, r, "after the hand-over");
	err = nx_volume_close(vol);
	if (err && !r->why[0])
		snprintf(r->why, sizeof(r->why), "close: %ld", (long)err);
	if (!r->why[0]) {
		rc = masked_fsck(r->image, out, sizeof(out));
		bad = r->uncut ? out : beyond_crash_residue(out);
		if (rc && (rc >= 8 || bad))
			snprintf(r->why, sizeof(r->why), "e2fsck -fn "
				 "(snapshot feature masked) exit %d: %.200s",
				 rc, bad ? bad : out);
	}
	if (!r->why[0])
		judge_after_repair(r, out, sizeof(out));
	r->judged = 1;
}

START_TEST(test_cut_during_handover)
{
	const struct sweep sw = {
		"-t ext2 -b 1024", make_handover_base, handover_slices,
		judge_handover, 0,
	};
	static char failures[3000];
	int nfail = sweep_cuts(&sw, failures, sizeof(failures));

	ck_assert_msg(nfail == 0, "%d cut points in a hand-over fail:\n%s",
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
	tcase_add_test(tc, test_cut_during_handover);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
