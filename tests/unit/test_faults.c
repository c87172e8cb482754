/*
 * test_faults.c - the fault layer under blkio (nextfs/faults.h) and how
 * the stack behaves on a failing disk:
 *  - nx_faults_parse accepts the documented specs and refuses the rest
 *    with EINVAL and a message; the decision functions count as specified;
 *  - read_eio on one data block of a file: reading that file fails with
 *    EIO, every other file still reads correctly, and the volume closes
 *    clean (e2fsck -fn);
 *  - cut=N:eio and cut=N:enospc: once the disk starts failing, operations
 *    report an error instead of crashing or claiming success; after the
 *    plan is removed the volume closes and is consistent or repairable,
 *    and the snapshot taken before the failures is unchanged.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/faults.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"

static struct nx_cred root;

/* ------------------------------------------------------------- helpers */


/* Create NAME in DIR holding LEN bytes of pattern SEED (asserting). */
static ext2_ino_t make_file(struct nx_volume *vol, ext2_ino_t dir,
			    const char *name, size_t len, unsigned seed)
{
	char *buf = malloc(len + 1);
	ext2_ino_t ino;
	size_t done = 0;

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, seed, 0);
	ck_assert_int_eq(nx_mknod(vol, &root, dir, name, S_IFREG | 0644, 0,
				  &ino), 0);
	ck_assert_int_eq(nx_file_write(vol, ino, buf, len, 0, &done), 0);
	ck_assert_uint_eq(done, len);
	free(buf);
	return ino;
}

/* Hash of the whole file INO of VOL; the read's error in *ERR. */
static uint64_t file_hash(struct nx_volume *vol, ext2_ino_t ino,
			  errcode_t *err)
{
	static char buf[1 << 16];
	uint64_t h = 1469598103934665603ULL, off = 0;
	size_t got;

	for (;;) {
		*err = nx_file_read(vol, ino, buf, sizeof(buf), off, &got);
		if (*err || !got)
			break;
		h = nxt_fnv(h, buf, got);
		off += got;
	}
	return h;
}

static uint64_t pattern_hash(size_t len, unsigned seed)
{
	char *buf = malloc(len + 1);
	uint64_t h;

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, seed, 0);
	h = nxt_fnv(1469598103934665603ULL, buf, len);
	free(buf);
	return h;
}

static ext2_ino_t lookup(struct nx_volume *vol, ext2_ino_t dir,
			 const char *name)
{
	ext2_ino_t ino = 0;

	if (nx_lookup(vol, dir, name, &ino))
		return 0;
	return ino;
}

/* ----------------------------------------------------------- parsing */

START_TEST(test_parse_good)
{
	struct nx_faults f;
	char msg[256];

	ck_assert_int_eq(nx_faults_parse("cut=120", &f, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(f.cut_after, 120);
	ck_assert_int_eq(f.cut_mode, NX_FAULT_DROP);
	ck_assert_uint_eq(f.unit, 4096);
	ck_assert_uint_eq(f.read_eio_count, 0);
	ck_assert_uint_eq(f.writes_done, 0);
	ck_assert_uint_eq(f.writes_cut, 0);

	ck_assert_int_eq(nx_faults_parse("cut=120:drop", &f, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(f.cut_mode, NX_FAULT_DROP);
	ck_assert_int_eq(nx_faults_parse("cut=1:eio", &f, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(f.cut_after, 1);
	ck_assert_int_eq(f.cut_mode, NX_FAULT_EIO);
	ck_assert_int_eq(nx_faults_parse("cut=7:enospc", &f, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(f.cut_mode, NX_FAULT_ENOSPC);
	ck_assert_int_eq(nx_faults_parse("cut=18446744073709551615", &f, msg,
					 sizeof(msg)), 0);
	ck_assert_uint_eq(f.cut_after, UINT64_MAX);

	ck_assert_int_eq(nx_faults_parse("read_eio=300", &f, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(f.read_eio_first, 300);
	ck_assert_uint_eq(f.read_eio_count, 1);
	ck_assert_uint_eq(f.cut_after, 0);
	ck_assert_int_eq(nx_faults_parse("read_eio=300+4,unit=1024", &f, msg,
					 sizeof(msg)), 0);
	ck_assert_uint_eq(f.read_eio_first, 300);
	ck_assert_uint_eq(f.read_eio_count, 4);
	ck_assert_uint_eq(f.unit, 1024);
	ck_assert_int_eq(nx_faults_parse("unit=512,cut=3:eio,read_eio=0+2", &f,
					 msg, sizeof(msg)), 0);
	ck_assert_uint_eq(f.unit, 512);
	ck_assert_uint_eq(f.cut_after, 3);
	ck_assert_int_eq(f.cut_mode, NX_FAULT_EIO);
	ck_assert_uint_eq(f.read_eio_first, 0);
	ck_assert_uint_eq(f.read_eio_count, 2);
	ck_assert_int_eq(nx_faults_parse("unit=65536", &f, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(f.unit, 65536);
	/* the plan is reset, not merged with a previous one */
	ck_assert_int_eq(nx_faults_parse("read_eio=5", &f, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(f.cut_after, 0);
	ck_assert_uint_eq(f.unit, 4096);
	ck_assert_int_eq(nx_faults_parse("slow_read=20000,cut=9", &f, msg,
					 sizeof(msg)), 0);
	ck_assert_uint_eq(f.slow_read_us, 20000);
	ck_assert_uint_eq(f.cut_after, 9);
	/* a NULL message buffer is allowed */
	ck_assert_int_eq(nx_faults_parse("cut=2", &f, NULL, 0), 0);
	ck_assert_uint_eq(f.slow_read_us, 0);
}
END_TEST

static const char *const bad_specs[] = {
	"cut", "cut=", "cut=0", "cut=abc", "cut=-1", "cut=+5", "cut= 5",
	"cut=5:", "cut=5:bogus", "cut=5:drop:eio", "cut=5:DROP",
	"cut=99999999999999999999999", "read_eio=", "read_eio=x",
	"read_eio=3+", "read_eio=3+0", "read_eio=3x", "read_eio=3+4+5",
	"unit=", "unit=1000", "unit=256", "unit=131072", "unit=4096k",
	"bogus=1", "=5", "cut=5,bogus", "cut=5;read_eio=1", "CUT=5",
	"slow_read=", "slow_read=x", "slow_read=10000001", "slow_read=-1",
};

START_TEST(test_parse_bad)
{
	const char *spec = bad_specs[_i];
	struct nx_faults f;
	char msg[256] = "";
	errcode_t err;

	err = nx_faults_parse(spec, &f, msg, sizeof(msg));
	ck_assert_msg(err == EINVAL, "spec '%s': got %ld, want EINVAL", spec,
		      (long)err);
	ck_assert_msg(msg[0] != 0, "spec '%s': no message", spec);
	ck_assert_msg(strstr(msg, "bad fault spec"), "spec '%s': message '%s'",
		      spec, msg);
	/* without a message buffer: the same answer, no crash */
	ck_assert_int_eq(nx_faults_parse(spec, &f, NULL, 0), EINVAL);
}
END_TEST

/* ------------------------------------------------------- the decisions */

START_TEST(test_decisions)
{
	struct nx_faults f;
	int i;

	/* no plan / empty plan: everything goes through */
	ck_assert_int_eq(nx_faults_on_write(NULL, 0, 4096), 0);
	ck_assert_int_eq(nx_faults_on_read(NULL, 0, 4096), 0);
	ck_assert_int_eq(nx_faults_on_sync(NULL), 0);
	ck_assert(!nx_faults_cut(NULL));
	memset(&f, 0, sizeof(f));
	f.unit = 4096;
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(nx_faults_on_write(&f, i * 4096, 4096), 0);
	ck_assert_int_eq(nx_faults_on_sync(&f), 0);
	ck_assert(!nx_faults_cut(&f));

	/* cut=3:drop: three writes, then everything is skipped */
	ck_assert_int_eq(nx_faults_parse("cut=3", &f, NULL, 0), 0);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), 0);
		ck_assert_int_eq(nx_faults_on_sync(&f), 0);
	}
	ck_assert(!nx_faults_cut(&f));
	ck_assert_uint_eq(f.writes_done, 3);
	ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), NX_FAULT_SKIP);
	ck_assert(nx_faults_cut(&f));
	ck_assert_int_eq(nx_faults_on_write(&f, 8192, 512), NX_FAULT_SKIP);
	ck_assert_int_eq(nx_faults_on_sync(&f), NX_FAULT_SKIP);
	ck_assert_uint_eq(f.writes_done, 3);
	ck_assert_uint_eq(f.writes_cut, 2);
	/* reads are not affected by a cut */
	ck_assert_int_eq(nx_faults_on_read(&f, 0, 1 << 20), 0);

	/* cut=1:eio and cut=1:enospc */
	ck_assert_int_eq(nx_faults_parse("cut=1:eio", &f, NULL, 0), 0);
	ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), 0);
	ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), EIO);
	ck_assert_int_eq(nx_faults_on_sync(&f), EIO);
	ck_assert_int_eq(nx_faults_parse("cut=1:enospc", &f, NULL, 0), 0);
	ck_assert_int_eq(nx_faults_on_sync(&f), 0);
	ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), 0);
	ck_assert_int_eq(nx_faults_on_write(&f, 0, 512), ENOSPC);
	ck_assert_int_eq(nx_faults_on_sync(&f), ENOSPC);

	/* read_eio=10+2 in 1 KiB units: bytes [10240, 12288) fail */
	ck_assert_int_eq(nx_faults_parse("read_eio=10+2,unit=1024", &f, NULL,
					 0), 0);
	ck_assert_int_eq(nx_faults_on_read(&f, 0, 10240), 0);
	ck_assert_int_eq(nx_faults_on_read(&f, 10239, 1), 0);
	ck_assert_int_eq(nx_faults_on_read(&f, 10239, 2), EIO);
	ck_assert_int_eq(nx_faults_on_read(&f, 10240, 1), EIO);
	ck_assert_int_eq(nx_faults_on_read(&f, 12287, 1), EIO);
	ck_assert_int_eq(nx_faults_on_read(&f, 12288, 4096), 0);
	ck_assert_int_eq(nx_faults_on_read(&f, 0, 1 << 20), EIO);
	ck_assert_int_eq(nx_faults_on_read(&f, 10240, 0), 0);
	ck_assert_int_eq(nx_faults_on_write(&f, 10240, 1024), 0);
	ck_assert_int_eq(nx_faults_on_sync(&f), 0);
}
END_TEST

/* ----------------------------------------------------- read_eio on a file */

#define RA_LEN 60000
#define RB_LEN 45000
#define RC_LEN 3000

START_TEST(test_read_eio_one_file)
{
	char path[256], *buf;
	struct nx_volume *vol;
	struct nx_faults plan;
	ext2_ino_t a, b, c, d;
	blk64_t pblk = 0, dblk = 0;
	unsigned bs;
	errcode_t err;
	size_t got;
	char spec[96];
	int i;

	nxt_root_cred(&root);
	nxt_mkfs(path, nxt_flavours[_i], 32);
	vol = nxt_open(path);
	bs = vol->fs->blocksize;
	a = make_file(vol, EXT2_ROOT_INO, "a", RA_LEN, 1);
	b = make_file(vol, EXT2_ROOT_INO, "b", RB_LEN, 2);
	ck_assert_int_eq(nx_mkdir(vol, &root, EXT2_ROOT_INO, "d", 0755, &d), 0);
	/* enough entries that d is a block directory also with inline_data */
	for (i = 0; i < 40; i++) {
		char name[32];
		ext2_ino_t x;

		snprintf(name, sizeof(name), "entry-with-a-long-name-%02d", i);
		ck_assert_int_eq(nx_mknod(vol, &root, d, name, S_IFREG | 0644,
					  0, &x), 0);
	}
	c = make_file(vol, d, "c", RC_LEN, 3);
	ck_assert_int_eq(nx_volume_sync(vol), 0);

	/* the second block of a */
	ck_assert_int_eq(ext2fs_bmap2(vol->fs, a, NULL, NULL, 0, 1, NULL,
				      &pblk), 0);
	ck_assert_uint_ne(pblk, 0);
	ck_assert_int_eq(ext2fs_bmap2(vol->fs, d, NULL, NULL, 0, 0, NULL,
				      &dblk), 0);
	ck_assert_uint_ne(dblk, 0);
	snprintf(spec, sizeof(spec), "read_eio=%llu,unit=%u",
		 (unsigned long long)pblk, bs);
	ck_assert_int_eq(nx_faults_parse(spec, &plan, NULL, 0), 0);
	nx_blkio_set_faults(vol->io, &plan);
	ck_assert_ptr_eq(nx_blkio_faults(vol->io), &plan);

	buf = malloc(RA_LEN);
	ck_assert_ptr_nonnull(buf);
	/* the whole of a, and exactly the bad block: EIO */
	err = nx_file_read(vol, a, buf, RA_LEN, 0, &got);
	ck_assert_msg(nx_errno(err) == EIO, "read a: %ld", (long)err);
	err = nx_file_read(vol, a, buf, 10, (uint64_t)bs + 5, &got);
	ck_assert_msg(nx_errno(err) == EIO, "read a's bad block: %ld",
		      (long)err);
	/* a's first block alone still reads, with the right bytes */
	ck_assert_int_eq(nx_file_read(vol, a, buf, bs, 0, &got), 0);
	ck_assert_uint_eq(got, bs);
	{
		char *want = malloc(bs);

		nxt_pattern(want, bs, 1, 0);
		ck_assert(memcmp(buf, want, bs) == 0);
		free(want);
	}
	/* other files are fine */
	ck_assert_uint_eq(file_hash(vol, b, &err), pattern_hash(RB_LEN, 2));
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(file_hash(vol, c, &err), pattern_hash(RC_LEN, 3));
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(lookup(vol, EXT2_ROOT_INO, "b"), b);
	/* getattr of a does not read data: still works */
	{
		struct stat st;

		ck_assert_int_eq(nx_getattr(vol, a, &st), 0);
		ck_assert_int_eq(st.st_size, RA_LEN);
	}

	/* a failing directory block: lookups in it fail, nothing crashes */
	snprintf(spec, sizeof(spec), "read_eio=%llu,unit=%u",
		 (unsigned long long)dblk, bs);
	ck_assert_int_eq(nx_faults_parse(spec, &plan, NULL, 0), 0);
	{
		ext2_ino_t x = 0;

		err = nx_lookup(vol, d, "c", &x);
		ck_assert_msg(err != 0, "lookup in an unreadable directory "
			      "succeeded (ino %u)", x);
		ck_assert_uint_eq(file_hash(vol, a, &err),
				  pattern_hash(RA_LEN, 1));
		ck_assert_int_eq(err, 0);
	}

	/* the disk recovers: everything reads again */
	nx_blkio_set_faults(vol->io, NULL);
	ck_assert_ptr_null(nx_blkio_faults(vol->io));
	ck_assert_uint_eq(file_hash(vol, a, &err), pattern_hash(RA_LEN, 1));
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(lookup(vol, d, "c"), c);
	free(buf);
	ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
	nxt_unlink(path);
}
END_TEST

/* --------------------------------------------- cut=N:eio / cut=N:enospc */

/*
 * The workload run against a failing disk.  Every call's result is
 * collected, none is asserted: after the cut they are expected to fail.
 * Returns the number of calls that reported an error; *ERRNOS gets a
 * bit per distinct errno seen (EIO, ENOSPC, other).
 */
#define SEEN_EIO	1
#define SEEN_ENOSPC	2
#define SEEN_OTHER	4

struct wres {
	int nerr;
	int seen;
	char first[160];
};

static void note(struct wres *r, const char *what, errcode_t err)
{
	int e = nx_errno(err);

	if (!err)
		return;
	if (!r->nerr)
		snprintf(r->first, sizeof(r->first), "%s: %ld (%s)", what,
			 (long)err, strerror(e));
	r->nerr++;
	r->seen |= e == EIO ? SEEN_EIO : e == ENOSPC ? SEEN_ENOSPC :
		   SEEN_OTHER;
}

static void cut_workload(struct nx_volume *vol, struct wres *r)
{
	static char buf[200000];
	ext2_ino_t a = 0, b = 0, n = 0, d = 0, victim = 0;
	size_t done;
	int i;

	memset(r, 0, sizeof(*r));
	nxt_pattern(buf, sizeof(buf), 9, 0);
	note(r, "lookup a", nx_lookup(vol, EXT2_ROOT_INO, "a", &a));
	note(r, "lookup b", nx_lookup(vol, EXT2_ROOT_INO, "b", &b));
	if (a)	/* overwrite under the snapshot: moves blocks */
		note(r, "overwrite a",
		     nx_file_write(vol, a, buf, 30000, 1000, &done));
	if (b)
		note(r, "append b",
		     nx_file_write(vol, b, buf, 20000, 50000, &done));
	note(r, "sync 1", nx_volume_sync(vol));
	note(r, "create n", nx_mknod(vol, &root, EXT2_ROOT_INO, "n",
				     S_IFREG | 0644, 0, &n));
	if (n)
		note(r, "write n",
		     nx_file_write(vol, n, buf, 150000, 0, &done));
	note(r, "mkdir d", nx_mkdir(vol, &root, EXT2_ROOT_INO, "d", 0755, &d));
	for (i = 0; d && i < 30; i++) {
		char name[40];
		ext2_ino_t x;

		snprintf(name, sizeof(name), "file-in-d-number-%02d", i);
		note(r, "create in d",
		     nx_mknod(vol, &root, d, name, S_IFREG | 0600, 0, &x));
	}
	if (a)
		note(r, "truncate a", nx_file_truncate(vol, a, 7000));
	note(r, "unlink b", nx_unlink(vol, &root, EXT2_ROOT_INO, "b", &victim));
	if (victim)
		note(r, "release b", nx_inode_release(vol, victim));
	note(r, "sync 2", nx_volume_sync(vol));
	note(r, "take s2", nx_snap_take(vol, "s2", NULL));
	if (n)
		note(r, "overwrite n",
		     nx_file_write(vol, n, buf + 7, 100000, 4096, &done));
	note(r, "sync 3", nx_volume_sync(vol));
}

#define FA_LEN 120000
#define FB_LEN 50000

/* Findings of one cut point, written by the child that runs it. */
struct point_result {
	int done;		/* the child got to the end */
	int cut;		/* the cut happened during the workload */
	int nerr;		/* calls that reported an error */
	int fsck_rc;		/* first e2fsck -fn (masked) status */
	int nproblems;
	char text[6144];
};

static void problem(struct point_result *pr, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem(struct point_result *pr, const char *fmt, ...)
{
	size_t used = strlen(pr->text);
	va_list ap;

	pr->nproblems++;
	if (used + 2 >= sizeof(pr->text))
		return;
	va_start(ap, fmt);
	vsnprintf(pr->text + used, sizeof(pr->text) - used - 1, fmt, ap);
	va_end(ap);
	used = strlen(pr->text);
	pr->text[used] = '\n';
	pr->text[used + 1] = 0;
}

static ext2_ino_t path_ino(struct nx_volume *vol, const char *name)
{
	return lookup(vol, EXT2_ROOT_INO, name);
}

/*
 * One cut point, run in a forked child: the workload against a disk that
 * fails after N writes, then the checks.  Nothing here asserts: findings
 * go to PR, and a crash is seen by the parent.
 */
static void run_cut_point(const char *work, const char *masked,
			  const char *spec, int journaled, uint64_t ha,
			  uint64_t hb, struct point_result *pr)
{
	struct nx_volume *vol = NULL, *view;
	struct nx_snapinfo info;
	struct nx_faults plan;
	char msg[256], out[2048];
	struct wres r;
	errcode_t err;
	ext2_ino_t x;
	int rc;

	err = nx_open_volume(work, 0, &vol, msg, sizeof(msg));
	if (err) {
		problem(pr, "open before the workload: %s", msg);
		return;
	}
	nx_faults_parse(spec, &plan, NULL, 0);
	nx_blkio_set_faults(vol->io, &plan);
	cut_workload(vol, &r);
	pr->cut = nx_faults_cut(&plan);
	pr->nerr = r.nerr;
	if (pr->cut && !r.nerr)
		problem(pr, "%llu writes failed but no call reported an error",
			(unsigned long long)plan.writes_cut);
	if (!pr->cut && r.nerr)
		problem(pr, "error without any fault: %s", r.first);
	fprintf(stderr, "%s: %d calls failed (eio %d, enospc %d, other %d), "
		"first: %s\n", spec, r.nerr, !!(r.seen & SEEN_EIO),
		!!(r.seen & SEEN_ENOSPC), !!(r.seen & SEEN_OTHER),
		r.nerr ? r.first : "-");
	nx_blkio_set_faults(vol->io, NULL);
	/*
	 * After a write error the volume has turned read-only (txn.c): the
	 * close then reports that error and writes nothing more.
	 */
	if (pr->cut && !nx_volume_rdonly(vol))
		problem(pr, "a write failed but the volume stayed writable");
	err = nx_volume_close(vol);
	if (err && !(pr->cut && nx_errno(err) == EIO))
		problem(pr, "close after the disk recovered: %ld (%s)",
			(long)err, strerror(nx_errno(err)));

	/* The next mount replays what the journal committed. */
	err = nx_open_volume(work, 0, &vol, msg, sizeof(msg));
	if (err) {
		problem(pr, "open after the disk recovered: %s", msg);
		return;
	}
	err = nx_volume_close(vol);
	if (err)
		problem(pr, "close after recovery: %ld", (long)err);
	if (nxt_masked_copy(work, masked)) {
		problem(pr, "cannot copy the image");
		return;
	}
	rc = pr->fsck_rc = nxt_fsck_capture(masked, "-fn", out, sizeof(out));
	if (rc && journaled)
		problem(pr, "e2fsck -fn exit %d on a journaled volume:\n%s", rc,
			out);
	else if (rc) {
		int fixed = nxt_fsck_capture(masked, "-fy", out, sizeof(out));

		rc = nxt_fsck_capture(masked, "-fn", out, sizeof(out));
		if (rc)
			problem(pr, "e2fsck -fn exit %d, not repairable: -fy "
				"exit %d, then -fn exit %d:\n%s", pr->fsck_rc,
				fixed, rc, out);
	}
	unlink(masked);

	/* s1 unchanged */
	err = nx_open_volume(work, 0, &vol, msg, sizeof(msg));
	if (err) {
		problem(pr, "reopen: %s", msg);
		return;
	}
	if (nx_snap_find(vol, "s1", &info)) {
		problem(pr, "s1 is gone");
	} else if (nx_snap_view_open(vol, info.ino, &view)) {
		problem(pr, "s1's view does not open");
	} else {
		x = path_ino(view, "a");
		if (!x || file_hash(view, x, &err) != ha || err)
			problem(pr, "s1: a changed");
		x = path_ino(view, "b");
		if (!x || file_hash(view, x, &err) != hb || err)
			problem(pr, "s1: b changed");
		if (path_ino(view, "n") || path_ino(view, "d"))
			problem(pr, "s1 shows n or d, created after its take");
		nx_snap_view_close(view);
	}
	err = nx_volume_close(vol);
	if (err)
		problem(pr, "close after the check: %ld", (long)err);
	pr->done = 1;
}

/*
 * _i: flavour in the low two bits, bit 2: ENOSPC instead of EIO.
 *
 * What is asserted, and why:
 * - Nothing crashes, and once the cut has happened at least one call
 *   reports an error (no lost write goes unreported).  The errno is EIO
 *   or ENOSPC; which one depends on where the failure surfaces (a
 *   bitmap write failure comes back as EXT2_ET_BLOCK_BITMAP_WRITE, i.e.
 *   EIO, even in enospc mode), so only "an error" is required.
 * - Once a write has failed the volume is read-only (like ext4's
 *   errors=remount-ro: memory may hold half an operation, so nothing more
 *   is committed), and nx_volume_close() reports EIO; without a fault it
 *   succeeds.
 * - e2fsck -fn (HAS_SNAPSHOT masked) on the result:
 *   - ext3/ext4 (journal): clean after the next open has replayed the
 *     journal.  Metadata reaches its home location only through the
 *     journal, so a failing write can only make a commit fail or tear
 *     its checkpoint, which replay completes.  A finding here means a
 *     half-done operation was committed;
 *   - ext2 (no journal): consistent or at worst repairable.  A sync
 *     that fails half-way writes metadata in place partly, as a real
 *     I/O error on ext2 does, so a non-zero status is accepted if
 *     "e2fsck -fy" then leaves the copy clean.
 *   Every status is printed.
 * - The volume opens again, and snapshot s1 (taken before any fault)
 *   shows exactly its content: a failing write must never change a
 *   snapshot (docs/design.md P9, P10).
 */
START_TEST(test_cut_errors)
{
	int flavour = _i % NXT_NFLAVOURS, enospc = _i / NXT_NFLAVOURS;
	char base[256], work[300], masked[320], spec[64];
	static char summary[8192];
	struct point_result *pr;
	struct nx_volume *vol;
	struct nx_faults plan;
	uint64_t ha, hb, total, n, step;
	struct wres r;
	int tested = 0, nbad = 0, cuts = 0;

	nxt_root_cred(&root);
	nxt_mkfs(base, nxt_flavours[flavour], 32);
	vol = nxt_open(base);
	make_file(vol, EXT2_ROOT_INO, "a", FA_LEN, 1);
	make_file(vol, EXT2_ROOT_INO, "b", FB_LEN, 2);
	ck_assert_int_eq(nx_snap_take(vol, "s1", NULL), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ha = pattern_hash(FA_LEN, 1);
	hb = pattern_hash(FB_LEN, 2);
	snprintf(work, sizeof(work), "%s.work", base);
	snprintf(masked, sizeof(masked), "%s.masked", base);

	/* How many device writes the workload does without faults. */
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	vol = nxt_open(work);
	ck_assert_int_eq(nx_faults_parse("cut=18446744073709551615", &plan,
					 NULL, 0), 0);
	nx_blkio_set_faults(vol->io, &plan);
	cut_workload(vol, &r);
	ck_assert_msg(r.nerr == 0, "workload without faults: %s", r.first);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	total = plan.writes_done;
	ck_assert_uint_gt(total, 10);

	pr = mmap(NULL, sizeof(*pr), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(pr, MAP_FAILED);
	summary[0] = 0;
	/*
	 * Cut points spread over the workload (and its close), and last
	 * a control run whose cut never comes: that one must pass every
	 * check, or the checks themselves are wrong.
	 */
	step = total / 40 ? total / 40 : 1;
	for (n = 1; n <= total; n = n + step < total ? n + step :
	     n == total ? total + 1 : total) {
		size_t used = strlen(summary);
		int status;
		pid_t pid;

		/* the control: a cut that never comes (the number of
		 * writes can vary by a few from run to run) */
		snprintf(spec, sizeof(spec), "cut=%llu:%s",
			 (unsigned long long)(n < total ? n : UINT64_MAX),
			 enospc ? "enospc" : "eio");
		ck_assert_int_eq(nxt_copy_image(base, work), 0);
		memset(pr, 0, sizeof(*pr));
		fflush(NULL);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			/* not libcheck's handler: it would end the test */
			signal(SIGALRM, SIG_DFL);
			alarm(60);
			run_cut_point(work, masked, spec, flavour != 0, ha,
				      hb, pr);
			_exit(0);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			problem(pr, "the run %s (status 0x%x)",
				WIFSIGNALED(status) ? "crashed" : "failed",
				status);
		else if (!pr->done && !pr->nproblems)
			problem(pr, "the run stopped early");
		cuts += pr->cut;
		tested++;
		ck_assert_msg(n < total || (!pr->cut && !pr->nproblems),
			      "control run without a cut failed:\n%s",
			      pr->text);
		fprintf(stderr, "%s: e2fsck -fn (masked) exit %d, %d "
			"problems\n%s", spec, pr->fsck_rc, pr->nproblems,
			pr->text);
		if (pr->nproblems && getenv("NEXTFS_KEEP_FAILED") &&
		    !strcmp(getenv("NEXTFS_KEEP_FAILED"), "1")) {
			char kept[400];

			snprintf(kept, sizeof(kept), "%s.flavour%d.%s.img",
				 base, flavour, spec);
			if (!nxt_copy_image(work, kept))
				fprintf(stderr, "(image kept as %s)\n", kept);
		}
		if (pr->nproblems) {
			char *nl = strchr(pr->text, '\n');

			nbad++;
			snprintf(summary + used, sizeof(summary) - used,
				 "  %s: %.*s%s\n", spec,
				 nl ? (int)(nl - pr->text) : 200, pr->text,
				 pr->nproblems > 1 ? " (...)" : "");
		}
	}
	munmap(pr, sizeof(*pr));
	unlink(work);
	nxt_unlink(base);
	ck_assert_int_gt(tested, 5);
	ck_assert_int_gt(cuts, 0);
	ck_assert_msg(nbad == 0, "%s %s: %d of %d cut points failed (details "
		      "on stderr):\n%s", nxt_flavours[flavour],
		      enospc ? "enospc" : "eio", nbad, tested, summary);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("faults");
	TCase *tc = tcase_create("parse");
	TCase *io = tcase_create("io");

	tcase_add_test(tc, test_parse_good);
	tcase_add_loop_test(tc, test_parse_bad, 0,
			    sizeof(bad_specs) / sizeof(bad_specs[0]));
	tcase_add_test(tc, test_decisions);
	suite_add_tcase(s, tc);
	tcase_set_timeout(io, 240);
	tcase_add_loop_test(io, test_read_eio_one_file, 0, NXT_NFLAVOURS);
	tcase_add_loop_test(io, test_cut_errors, 0, 2 * NXT_NFLAVOURS);
	suite_add_tcase(s, io);
	return nxt_run_suite(s);
}
