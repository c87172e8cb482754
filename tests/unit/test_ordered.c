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
 */
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
 * What one run does (a child process: a cut may make anything fail).
 * Block-mapped: 300 KiB in 1 KiB blocks need 12 direct blocks, an
 * indirect block for the next 256, then a double indirect block and an
 * indirect block below it.  Extents: every other block of 40, so 20
 * extents, more than the 4 the inode holds.
 */
struct run {
	const char *image;
	char spec[64];
	int extents;
	int opened, grown, closed;	/* returned 0 */
	uint64_t writes;		/* device writes done */
};

static void grow_one_file(void *p)
{
	struct run *r = p;
	struct nx_faults *plan;
	struct nx_volume *vol;
	char msg[256];
	ext2_ino_t ino;
	errcode_t err;
	int i;

	setenv("NEXTFS_FAULTS", r->spec, 1);
	err = nx_volume_open(r->image, 0, &vol, msg, sizeof(msg));
	unsetenv("NEXTFS_FAULTS");
	if (err)
		return;
	r->opened = 1;
	plan = nx_blkio_faults(vol->io);
	err = nx_mknod(vol, &root, EXT2_ROOT_INO, "grown", S_IFREG | 0644, 0,
		       &ino);
	if (r->extents) {
		for (i = 0; !err && i < 40; i += 2)
			err = write_pattern(vol, ino, (uint64_t)i * 1024, 1024,
					    2);
	} else if (!err) {
		err = write_pattern(vol, ino, 0, 300 * 1024, 2);
	}
	if (!err)
		err = nx_volume_sync(vol);
	r->grown = !err;
	r->writes = plan ? plan->writes_done : 0;
	r->closed = !nx_volume_close(vol);
}

/* The image after a run: "" if e2fsck -fn finds no garbage, else why. */
static void judge(const char *image, int strict, char *why, size_t len)
{
	static char out[8192];
	int rc = nxt_fsck_capture(image, "-fn", out, sizeof(out));
	const char *bad = strstr(out, "Illegal");

	why[0] = 0;
	if ((strict && rc) || rc >= 8 || bad)
		snprintf(why, len, "e2fsck -fn exit %d: %.300s", rc,
			 bad ? bad : out);
}

/* One run on a fresh copy of BASE with the fault spec "cut=N:drop". */
static void run_once(const char *base, const char *work, uint64_t n,
		     int extents, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->image = work;
	r->extents = extents;
	snprintf(r->spec, sizeof(r->spec), "cut=%llu:drop",
		 (unsigned long long)n);
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	nxt_in_child(grow_one_file, r, 30);
}

START_TEST(test_cut_during_tree_growth)
{
	char base[256], work[300], why[400];
	static char failures[3000];
	struct run *r;
	uint64_t total, n;
	int nfail = 0;

	nxt_root_cred(&root);
	nxt_mkfs(base, flavours[_i].mkfs, IMAGE_MB);
	snprintf(work, sizeof(work), "%s.work", base);
	make_base(base);
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(r, MAP_FAILED);

	/* Without a cut: it all works, and this many writes are cut at. */
	run_once(base, work, UINT64_MAX, flavours[_i].extents, r);
	ck_assert_msg(r->opened && r->grown && r->closed, "%s: the run "
		      "without a cut failed", flavours[_i].name);
	judge(work, 1, why, sizeof(why));
	ck_assert_msg(!why[0], "%s, no cut: %s", flavours[_i].name, why);
	total = r->writes;
	ck_assert_uint_gt(total, 5);

	failures[0] = 0;
	for (n = 1; n <= total; n++) {
		size_t used = strlen(failures);

		run_once(base, work, n, flavours[_i].extents, r);
		judge(work, 0, why, sizeof(why));
		if (!why[0])
			continue;
		nfail++;
		fprintf(stderr, "%s, cut=%llu: %s\n", flavours[_i].name,
			(unsigned long long)n, why);
		if (used + 200 < sizeof(failures))
			snprintf(failures + used, sizeof(failures) - used,
				 "  cut=%llu: %.150s\n", (unsigned long long)n,
				 why);
	}
	munmap(r, sizeof(*r));
	unlink(work);
	nxt_unlink(base);
	ck_assert_msg(nfail == 0, "%s: %d of %llu cut points leave garbage "
		      "read as a block map:\n%s", flavours[_i].name, nfail,
		      (unsigned long long)total, failures);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ordered");
	TCase *tc = tcase_create("cut");

	tcase_add_loop_test(tc, test_cut_during_tree_growth, 0,
			    (int)(sizeof(flavours) / sizeof(flavours[0])));
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
