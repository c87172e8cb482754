/*
 * test_crash.c - the crash-point sweep (docs/design.md P10: a crash never
 * changes a snapshot taken before it).
 *
 * For every flavour, and for two variants of the workload (snapshot S1
 * deleted during it or not):
 *
 *  1. A base image gets a tree (several file sizes, a directory tree, a
 *     sparse file, a symlink, a hard link) and snapshot S1; S1's manifest
 *     (path -> type, mode, owner, links, size, content hash, times) is
 *     recorded through its view.
 *  2. The reference run: the fixed workload W (do_step(), the only copy
 *     of it) runs on a copy of the base with a fault plan that never cuts,
 *     to count the device writes T, including those of the open and of
 *     the close.  It records the live manifest after every step and S2's
 *     manifest at its take, and asserts that every step succeeds and that
 *     S1 and S2 read back right while the volume is open.
 *  3. A control run: the same path as each cut point, with a plan that
 *     never cuts.  Every check must pass (strictly, also on ext2): this
 *     is what proves the harness right.
 *  4. For each cut point N (1..min(T-1,40) plus NEXTFS_CRASH_POINTS,
 *     default 40, spread evenly up to T-1; "all" for every one): on a
 *     fresh copy of the base, a child process opens the volume with
 *     NEXTFS_FAULTS=cut=N:drop (writes after the Nth vanish, syncs still
 *     report success: a crash at write N from the disk's point of view),
 *     runs W up to the cut (after it only the close; errors after the
 *     cut are ignored), and closes.  Another child then opens the image
 *     WITHOUT faults (nx_open_volume does any recovery) and checks:
 *     (a) the open succeeds (and the close after the checks);
 *     (b) every snapshot whose take completed before the cut exists and
 *         its view matches its manifest exactly (S1 always, unless W had
 *         started deleting it; S2 if its take returned 0 with no cut yet);
 *         a snapshot whose take or delete was cut may be present or
 *         absent, but if present it must match its manifest too; no
 *         other snapshot exists;
 *     (c) the live tree equals the manifest at a sync point: the last one
 *         that completed before the cut (returned 0, no cut yet) or a
 *         later one that had started before the cut (its commit may
 *         have landed before it returned).  Sync points: the open (it
 *         writes the superblock), nx_volume_sync, the take of S2, the
 *         delete of S1 and the close.  Times are not compared (they
 *         differ from run to run), except for S1 which is the same image
 *         in every run;
 *     (d) after the close, stock e2fsck -fn on a copy with HAS_SNAPSHOT
 *         masked is clean and nx_check() reports no errors.
 *     Also a failure: W reporting an error, or dying, before the cut.
 *     (After the cut, dying is only a note: the disk is gone anyway.)
 *
 * The workload is built so that (c) is decidable: between two sync
 * points it overwrites in place only blocks that the active snapshot
 * protects (they are moved, so the committed file keeps its old block),
 * and it never rewrites a range twice under the same snapshot.  It does
 * contain the classic journaling hazard on purpose: a file created and
 * synced after the last take is deleted and a new file written before
 * the next sync point, so its freed blocks may be reused while the last
 * committed state still refers to them.
 *
 * ext2 has no journal: after a crash it is, like any ext2, a volume that
 * needs e2fsck, and the design only promises P10 for it.  So for ext2
 * (a) and (b) are asserted, and (c)/(d) are reported as notes, with
 * (d) weakened to "repairable": e2fsck -fy on the masked copy leaves it
 * clean, and e2fsck -fn runs to its end (exit below 8): what it finds
 * are counts, bitmaps and links, never a directory or indirect block
 * that was allocated but not yet written when the crash came (the
 * ordered commit writes new blocks before what points at them).
 * NEXTFS_CRASH_STRICT=1 asserts (c)/(d) on ext2 as well.
 *
 * Environment:
 *   NEXTFS_CRASH_POINTS=N|all   how many cut points to spread (default 40)
 *   NEXTFS_CRASH_ONLY=N[,N...]  just these cut points
 *   NEXTFS_CRASH_FLAVOUR=ext2|ext3|ext4|ext4-inline, NEXTFS_CRASH_VARIANT=
 *                               0|1: run only that (the others pass idle)
 *   NEXTFS_CRASH_CONTINUE=1     run every step of W after the cut too,
 *                               instead of going straight to the close
 *   NEXTFS_CRASH_STRICT=1       (c) and (d) strictly on ext2 too
 *   NEXTFS_KEEP_FAILED=1        keep the crashed image (before recovery)
 *                               of every failing cut point
 * Failing cut points are listed on stderr with every finding, and in the
 * failure message with the first one.  The number of device writes can
 * differ by a few from run to run (blocks whose bytes did not change are
 * not rewritten, and that depends on timestamps), so a cut point N is
 * about, not exactly, the same place in every run.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
#include "nextfs/snaptool.h"

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

#define IMAGE_MB	32
#define S1		"S1"
#define S2		"S2"

static const char *const flavour_names[NXT_NFLAVOURS] = {
	"ext2", "ext3", "ext4", "ext4-inline",
};

static struct nx_cred root;

/* ------------------------------------------------------------ content */


/* ----------------------------------------------------------- manifests */

#define MAX_ENT		96
#define PATH_LEN	96

struct ment {
	char path[PATH_LEN];
	uint32_t mode;			/* type and permission bits */
	uint32_t uid, gid, nlink;
	uint64_t size;			/* 0 for directories (layout) */
	uint64_t hash;			/* content or link target */
	struct timespec mtime, ctime;	/* compared only WITH_TIMES */
};

struct manifest {
	int valid;
	int n;
	char err[160];			/* why the walk failed */
	struct ment e[MAX_ENT];
};

struct dirlist {
	int n;
	struct {
		char name[64];
		ext2_ino_t ino;
	} v[MAX_ENT];
	int overflow;
};

static int collect(void *priv, const char *name, size_t namelen,
		   ext2_ino_t ino, unsigned char d_type, uint64_t next)
{
	struct dirlist *l = priv;

	(void)d_type;
	(void)next;
	if ((namelen == 1 && name[0] == '.') ||
	    (namelen == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	if (l->n == MAX_ENT || namelen >= sizeof(l->v[0].name)) {
		l->overflow = 1;
		return 1;
	}
	memcpy(l->v[l->n].name, name, namelen);
	l->v[l->n].name[namelen] = 0;
	l->v[l->n].ino = ino;
	l->n++;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

static void man_fail(struct manifest *m, const char *path, const char *what,
		     errcode_t err)
{
	if (!m->err[0])
		snprintf(m->err, sizeof(m->err), "%s: %s: %ld (%s)",
			 path[0] ? path : "/", what, (long)err,
			 strerror(nx_errno(err)));
}

static uint64_t content_hash(struct nx_volume *vol, ext2_ino_t ino,
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

static void walk(struct nx_volume *vol, ext2_ino_t dir, const char *prefix,
		 struct manifest *m, int depth)
{
	struct dirlist *l = calloc(1, sizeof(*l));
	errcode_t err;
	int i;

	if (!l) {
		man_fail(m, prefix, "out of memory", ENOMEM);
		return;
	}
	err = nx_readdir(vol, dir, 0, collect, l);
	if (err)
		man_fail(m, prefix, "readdir", err);
	if (l->overflow)
		man_fail(m, prefix, "directory too big for the test", E2BIG);
	/* v[] starts with the name: sort by it */
	qsort(l->v, l->n, sizeof(l->v[0]), cmp_names);
	for (i = 0; i < l->n && !m->err[0]; i++) {
		struct ment *e;
		struct stat st;

		if (dir == EXT2_ROOT_INO && depth == 0 &&
		    (!strcmp(l->v[i].name, "lost+found") ||
		     !strcmp(l->v[i].name, NX_SNAPDIR_NAME)))
			continue;
		if (m->n == MAX_ENT) {
			man_fail(m, prefix, "too many entries", E2BIG);
			break;
		}
		e = &m->e[m->n++];
		memset(e, 0, sizeof(*e));
		snprintf(e->path, sizeof(e->path), "%s/%s", prefix,
			 l->v[i].name);
		err = nx_getattr(vol, l->v[i].ino, &st);
		if (err) {
			man_fail(m, e->path, "getattr", err);
			break;
		}
		e->mode = st.st_mode;
		e->uid = st.st_uid;
		e->gid = st.st_gid;
		e->nlink = st.st_nlink;
		e->mtime = st.st_mtim;
		e->ctime = st.st_ctim;
		if (S_ISREG(st.st_mode)) {
			e->size = st.st_size;
			e->hash = content_hash(vol, l->v[i].ino, &err);
			if (err)
				man_fail(m, e->path, "read", err);
		} else if (S_ISLNK(st.st_mode)) {
			char target[256];
			size_t len = 0;

			e->size = st.st_size;
			err = nx_readlink(vol, l->v[i].ino, target,
					  sizeof(target), &len);
			if (err)
				man_fail(m, e->path, "readlink", err);
			else
				e->hash = nxt_fnv(1469598103934665603ULL, target,
					      len);
		} else if (S_ISDIR(st.st_mode)) {
			if (depth > 8)
				man_fail(m, e->path, "too deep", ELOOP);
			else
				walk(vol, l->v[i].ino, e->path, m, depth + 1);
		}
	}
	free(l);
}

/* Manifest of the tree VOL shows (live volume or snapshot view). */
static void manifest_of(struct nx_volume *vol, struct manifest *m)
{
	memset(m, 0, sizeof(*m));
	walk(vol, EXT2_ROOT_INO, "", m, 0);
	m->valid = !m->err[0];
}

/* Manifest of snapshot NAME of VOL: 0, or the error finding it. */
static errcode_t snap_manifest(struct nx_volume *vol, const char *name,
			       struct manifest *m)
{
	struct nx_snapinfo info;
	struct nx_volume *view;
	errcode_t err;

	memset(m, 0, sizeof(*m));
	err = nx_snap_find(vol, name, &info);
	if (err)
		return err;
	err = nx_snap_view_open(vol, info.ino, &view);
	if (err) {
		snprintf(m->err, sizeof(m->err), "view does not open: %ld",
			 (long)err);
		return 0;
	}
	manifest_of(view, m);
	nx_snap_view_close(view);
	return 0;
}

static int ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static int ment_eq(const struct ment *a, const struct ment *b, int times)
{
	return a->mode == b->mode && a->uid == b->uid && a->gid == b->gid &&
	       a->nlink == b->nlink && a->size == b->size &&
	       a->hash == b->hash &&
	       (!times || (ts_eq(&a->mtime, &b->mtime) &&
			   ts_eq(&a->ctime, &b->ctime)));
}

/*
 * Differences between WANT and GOT (a readable list in OUT, at most a
 * few lines); returns how many there are.
 */
static int man_diff(const struct manifest *want, const struct manifest *got,
		    int times, char *out, size_t outlen)
{
	int i = 0, j = 0, nd = 0;
	size_t used;

#define SAY(...) do {							\
		nd++;							\
		used = strlen(out);					\
		if (nd <= 4 && used < outlen)				\
			snprintf(out + used, outlen - used, __VA_ARGS__); \
	} while (0)

	out[0] = 0;
	if (!got->valid) {
		SAY("cannot read the tree: %s", got->err);
		return nd;
	}
	while (i < want->n || j < got->n) {
		int c = i == want->n ? 1 : j == got->n ? -1 :
			strcmp(want->e[i].path, got->e[j].path);
		const struct ment *a = &want->e[i], *b = &got->e[j];

		if (c < 0) {
			SAY(" missing %s;", a->path);
			i++;
		} else if (c > 0) {
			SAY(" unexpected %s;", b->path);
			j++;
		} else {
			if (!ment_eq(a, b, times)) {
				if (a->mode != b->mode)
					SAY(" %s: mode 0%o != 0%o;", a->path,
					    a->mode, b->mode);
				else if (a->size != b->size)
					SAY(" %s: size %llu != %llu;", a->path,
					    (unsigned long long)a->size,
					    (unsigned long long)b->size);
				else if (a->hash != b->hash)
					SAY(" %s: content differs;", a->path);
				else if (a->nlink != b->nlink)
					SAY(" %s: nlink %u != %u;", a->path,
					    a->nlink, b->nlink);
				else if (a->uid != b->uid || a->gid != b->gid)
					SAY(" %s: owner differs;", a->path);
				else
					SAY(" %s: times differ;", a->path);
			}
			i++;
			j++;
		}
	}
	if (nd > 4) {
		used = strlen(out);
		snprintf(out + used, outlen - used, " (%d differences)", nd);
	}
#undef SAY
	return nd;
}

/* ------------------------------------------------------- the operations */

/*
 * Workload context.  STRICT (the reference run): every call must
 * succeed.  Otherwise errors are collected: the first one is kept.
 */
struct wctx {
	struct nx_volume *vol;
	int strict;
	int variant;			/* 1: W deletes S1 */
	errcode_t err;			/* first error in this step */
	char what[160];
};

static void w_err(struct wctx *w, const char *what, const char *path,
		  errcode_t err)
{
	if (!err)
		return;
	ck_assert_msg(!w->strict, "%s %s: %ld (%s)", what, path, (long)err,
		      strerror(nx_errno(err)));
	if (!w->err) {
		w->err = err;
		snprintf(w->what, sizeof(w->what), "%s %s: %ld (%s)", what,
			 path, (long)err, strerror(nx_errno(err)));
	}
}

static errcode_t resolve(struct nx_volume *vol, const char *path,
			 ext2_ino_t *ino)
{
	char buf[PATH_LEN], *p, *save = NULL;
	errcode_t err;

	*ino = EXT2_ROOT_INO;
	snprintf(buf, sizeof(buf), "%s", path);
	for (p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
		err = nx_lookup(vol, *ino, p, ino);
		if (err)
			return err;
	}
	return 0;
}

/* The directory of PATH and its last component. */
static errcode_t resolve_parent(struct nx_volume *vol, const char *path,
				ext2_ino_t *dir, char *name)
{
	char buf[PATH_LEN], *slash;

	snprintf(buf, sizeof(buf), "%s", path);
	slash = strrchr(buf, '/');
	if (!slash) {
		strcpy(name, buf);
		*dir = EXT2_ROOT_INO;
		return 0;
	}
	*slash = 0;
	strcpy(name, slash + 1);
	return resolve(vol, buf, dir);
}

static void w_write(struct wctx *w, const char *path, uint64_t off,
		    size_t len, unsigned seed)
{
	char *buf = malloc(len);
	ext2_ino_t ino;
	size_t done = 0;
	errcode_t err;

	if (!buf) {
		w_err(w, "malloc for", path, ENOMEM);
		return;
	}
	nxt_pattern(buf, len, seed, off);
	err = resolve(w->vol, path, &ino);
	if (!err) {
		err = nx_file_write(w->vol, ino, buf, len, off, &done);
		if (!err && done != len)
			err = EIO;
	}
	w_err(w, "write", path, err);
	free(buf);
}

static void w_create(struct wctx *w, const char *path, size_t len,
		     unsigned seed)
{
	char name[PATH_LEN];
	ext2_ino_t dir, ino;
	errcode_t err;

	err = resolve_parent(w->vol, path, &dir, name);
	if (!err)
		err = nx_mknod(w->vol, &root, dir, name, S_IFREG | 0644, 0,
			       &ino);
	w_err(w, "create", path, err);
	if (!err && len)
		w_write(w, path, 0, len, seed);
}

static void w_mkdir(struct wctx *w, const char *path)
{
	char name[PATH_LEN];
	ext2_ino_t dir, ino;
	errcode_t err;

	err = resolve_parent(w->vol, path, &dir, name);
	if (!err)
		err = nx_mkdir(w->vol, &root, dir, name, 0755, &ino);
	w_err(w, "mkdir", path, err);
}

static void w_symlink(struct wctx *w, const char *path, const char *target)
{
	char name[PATH_LEN];
	ext2_ino_t dir, ino;
	errcode_t err;

	err = resolve_parent(w->vol, path, &dir, name);
	if (!err)
		err = nx_symlink(w->vol, &root, dir, name, target, &ino);
	w_err(w, "symlink", path, err);
}

static void w_link(struct wctx *w, const char *existing, const char *path)
{
	char name[PATH_LEN];
	ext2_ino_t dir, ino;
	errcode_t err;

	err = resolve(w->vol, existing, &ino);
	if (!err)
		err = resolve_parent(w->vol, path, &dir, name);
	if (!err)
		err = nx_link(w->vol, &root, ino, dir, name);
	w_err(w, "link", path, err);
}

static void w_unlink(struct wctx *w, const char *path, int isdir)
{
	char name[PATH_LEN];
	ext2_ino_t dir, victim = 0;
	errcode_t err;

	err = resolve_parent(w->vol, path, &dir, name);
	if (!err)
		err = isdir ? nx_rmdir(w->vol, &root, dir, name, &victim)
			    : nx_unlink(w->vol, &root, dir, name, &victim);
	if (!err && victim)
		err = nx_inode_release(w->vol, victim);
	w_err(w, isdir ? "rmdir" : "unlink", path, err);
}

static void w_rename(struct wctx *w, const char *from, const char *to)
{
	char oname[PATH_LEN], nname[PATH_LEN];
	ext2_ino_t odir, ndir, replaced = 0;
	errcode_t err;

	err = resolve_parent(w->vol, from, &odir, oname);
	if (!err)
		err = resolve_parent(w->vol, to, &ndir, nname);
	if (!err)
		err = nx_rename(w->vol, &root, odir, oname, ndir, nname, 0,
				&replaced);
	if (!err && replaced)
		err = nx_inode_release(w->vol, replaced);
	w_err(w, "rename", from, err);
}

static void w_truncate(struct wctx *w, const char *path, uint64_t size)
{
	ext2_ino_t ino;
	errcode_t err = resolve(w->vol, path, &ino);

	if (!err)
		err = nx_file_truncate(w->vol, ino, size);
	w_err(w, "truncate", path, err);
}

static void w_punch(struct wctx *w, const char *path, uint64_t off,
		    uint64_t len)
{
	ext2_ino_t ino;
	errcode_t err = resolve(w->vol, path, &ino);

	if (!err)
		err = nx_file_fallocate(w->vol, ino, FALLOC_FL_PUNCH_HOLE |
					FALLOC_FL_KEEP_SIZE, off, len);
	w_err(w, "punch", path, err);
}

/* --------------------------------------------------------- the workload */

/* The tree S1 sees (built before W, in the base image). */
static void build_base(struct wctx *w)
{
	w_create(w, "small", 100, 1);
	w_create(w, "medium", 20000, 2);
	w_create(w, "big", 300000, 3);
	w_create(w, "sparse", 8192, 4);
	w_write(w, "sparse", 307200, 4096, 5);
	w_write(w, "sparse", 1048576, 4000, 6);
	w_mkdir(w, "d1");
	w_mkdir(w, "d1/d2");
	w_mkdir(w, "d1/d2/d3");
	w_create(w, "d1/a", 5000, 7);
	w_create(w, "d1/b", 70000, 8);
	w_create(w, "d1/d2/c", 12000, 9);
	w_create(w, "d1/d2/d3/deep", 3000, 10);
	w_mkdir(w, "d4");
	w_symlink(w, "link", "d1/a");
	w_link(w, "medium", "d1/hard");
	w_create(w, "tmp_base", 40000, 11);
	w_create(w, "x", 50000, 12);
}

enum step_kind { K_OPEN, K_OPS, K_SYNC, K_TAKE, K_DELETE, K_CLOSE };

/*
 * The steps of W.  Between two sync points, only blocks the active
 * snapshot protects are overwritten in place (see the top comment);
 * offsets and sizes are multiples of 4 KiB where a write must add new
 * blocks only.
 */
static const struct step {
	int kind;
	const char *what;
} steps[] = {
	{ K_OPEN,   "open" },
	{ K_OPS,    "overwrite big, medium; append to d1/a" },
	{ K_OPS,    "create new1, mkdir d4/sub, unlink tmp_base, truncate x" },
	{ K_SYNC,   "sync 1" },
	{ K_OPS,    "rename d1/b, create tmpA, fill a hole of sparse" },
	{ K_OPS,    "punch big, append to new1" },
	{ K_SYNC,   "sync 2" },
	{ K_OPS,    "unlink tmpA, create tmpB (reuses its blocks), symlink" },
	{ K_TAKE,   "take S2" },
	{ K_OPS,    "overwrite new1, big; truncate tmpB" },
	{ K_OPS,    "mkdir d5, create d5/f, rename medium" },
	{ K_SYNC,   "sync 3" },
	{ K_DELETE, "delete S1 (variant 1)" },
	{ K_OPS,    "unlink deep, rmdir d3, create d5/g, link it" },
	{ K_SYNC,   "sync 4" },
	{ K_OPS,    "overwrite small, sparse; create last; append to x" },
	{ K_CLOSE,  "close" },
};
#define NSTEPS ((int)(sizeof(steps) / sizeof(steps[0])))
#define STEP_TAKE	8
#define STEP_DELETE	12

static int step_kind(int i, int variant)
{
	if (steps[i].kind == K_DELETE && !variant)
		return K_OPS;		/* nothing happens in variant 0 */
	return steps[i].kind;
}

static int is_sync_point(int i, int variant)
{
	int k = step_kind(i, variant);

	return k != K_OPS;
}

/* Step I of W (never K_OPEN: the caller opens). */
static void do_step(struct wctx *w, int i)
{
	switch (i) {
	case 1:
		w_write(w, "big", 8192, 8192, 20);
		w_write(w, "medium", 100, 300, 21);
		w_write(w, "d1/a", 5000, 7000, 22);
		break;
	case 2:
		w_create(w, "new1", 32768, 23);
		w_mkdir(w, "d4/sub");
		w_unlink(w, "tmp_base", 0);
		w_truncate(w, "x", 10000);
		break;
	case 4:
		w_rename(w, "d1/b", "d4/sub/b");
		w_create(w, "tmpA", 50000, 24);
		w_write(w, "sparse", 614400, 4096, 25);
		break;
	case 5:
		w_punch(w, "big", 102400, 40960);
		w_write(w, "new1", 32768, 10000, 26);
		break;
	case 7:
		w_unlink(w, "tmpA", 0);
		w_create(w, "tmpB", 60000, 27);
		w_symlink(w, "d4/sub/l2", "../../big");
		break;
	case 9:
		w_write(w, "new1", 0, 5000, 28);
		w_write(w, "big", 8192, 4096, 29);
		w_truncate(w, "tmpB", 0);
		break;
	case 10:
		w_mkdir(w, "d5");
		w_create(w, "d5/f", 8000, 30);
		w_rename(w, "medium", "d5/medium2");
		break;
	case 12:
		if (w->variant) {
			int more;

			/* One slice of its hand-over now, the rest below. */
			w_err(w, "delete", S1, nx_snap_delete(w->vol, S1));
			w_err(w, "reclaim", S1, nx_snap_reclaim(w->vol, 0,
								 &more));
		}
		break;
	case 13: {
		int more = 1;

		w_unlink(w, "d1/d2/d3/deep", 0);
		w_unlink(w, "d1/d2/d3", 1);
		w_create(w, "d5/g", 3000, 31);
		w_link(w, "d5/g", "d1/g_link");
		/* Slices of one run each; step 14 commits them. */
		while (w->variant && more && !w->err)
			w_err(w, "reclaim", S1, nx_snap_reclaim(w->vol, 0,
								 &more));
		break;
	}
	case 15:
		w_write(w, "small", 0, 50, 32);
		w_write(w, "sparse", 0, 100, 33);
		w_create(w, "last", 20000, 34);
		w_write(w, "x", 10000, 5000, 35);
		break;
	case STEP_TAKE:
		w_err(w, "take", S2, nx_snap_take(w->vol, S2, NULL));
		break;
	case 3: case 6: case 11: case 14:
		w_err(w, "sync", "", nx_volume_sync(w->vol));
		break;
	case NSTEPS - 1: {
		errcode_t err = nx_volume_close(w->vol);

		w->vol = NULL;
		w_err(w, "close", "", err);
		break;
	}
	default:
		ck_abort_msg("no step %d", i);
	}
}

/* ------------------------------------------------------- shared records */

/* What a run of W reports (shared memory, written by the child). */
struct wlog {
	int started[NSTEPS], finished[NSTEPS];
	int cut_before[NSTEPS], cut_after[NSTEPS];
	long rc[NSTEPS];
	int cur;			/* step in progress (crash diagnosis) */
	uint64_t writes_done, writes_cut;
	char err_before_cut[200];	/* an error with no cut yet */
	char open_err[200];		/* the open with the plan failed */
	/* the plan after the open: in shared memory, so that the parent
	 * sees how far it got even if the child dies in a step */
	struct nx_faults plan;
	int done;
};

/* Findings about one cut point. */
#define F_A	0x01
#define F_B	0x02
#define F_C	0x04
#define F_D	0x08
#define F_W	0x10			/* W failed before the cut */
#define F_V	0x20			/* the verification crashed */

struct vres {
	int flags;			/* F_* of the problems */
	int noteflags;			/* F_* of notes (lenient) */
	int done;
	char phase[64];
	char text[12288];
};

static void vsay(struct vres *v, int note, int flag, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void vsay(struct vres *v, int note, int flag, const char *fmt, ...)
{
	size_t used = strlen(v->text);
	const char *tag = flag == F_A ? "a" : flag == F_B ? "b" :
			  flag == F_C ? "c" : flag == F_D ? "d" :
			  flag == F_W ? "w" : "v";
	va_list ap;

	if (note)
		v->noteflags |= flag;
	else
		v->flags |= flag;
	if (used + 16 >= sizeof(v->text))
		return;
	used += snprintf(v->text + used, sizeof(v->text) - used, "[%s%s] ",
			 tag, note ? " note" : "");
	va_start(ap, fmt);
	vsnprintf(v->text + used, sizeof(v->text) - used - 1, fmt, ap);
	va_end(ap);
	used = strlen(v->text);
	if (used + 1 < sizeof(v->text)) {
		v->text[used] = '\n';
		v->text[used + 1] = 0;
	}
}

/* ---------------------------------------------------------------- state */

/* Recorded once per test (the children inherit them through fork). */
static struct manifest man_s1;		/* S1 (view), with times */
static struct manifest man_s2;		/* S2 at its take */
static struct manifest man_live[NSTEPS];	/* live tree after step i */
static int lenient;			/* ext2: (c) and (d) are notes */

/* Run W on IMAGE with the fault spec SPEC; results into LOG. */
static void run_workload(const char *image, const char *spec, int variant,
			 int record, struct wlog *log)
{
	struct wctx w = { .variant = variant, .strict = record };
	const char *c = getenv("NEXTFS_CRASH_CONTINUE");
	int cont = c && !strcmp(c, "1");
	struct nx_faults *plan = &log->plan;
	struct nx_faults *envplan;
	char msg[256];
	errcode_t err;
	int i;

	memset(log, 0, sizeof(*log));
	log->cur = 0;
	log->started[0] = 1;
	setenv("NEXTFS_FAULTS", spec, 1);
	err = nx_open_volume(image, 0, &w.vol, msg, sizeof(msg));
	unsetenv("NEXTFS_FAULTS");
	log->finished[0] = 1;
	log->rc[0] = err;
	if (err) {
		/*
		 * The plan went with the failed open, so whether writes had
		 * been cut is unknown; the open writes only a few blocks,
		 * so it can only fail like this for a cut inside it.
		 */
		log->cut_after[0] = 1;
		snprintf(log->open_err, sizeof(log->open_err), "%.190s", msg);
		ck_assert_msg(!record, "open: %s", msg);
		log->done = 1;
		return;
	}
	/* From now on count in a plan that outlives the volume. */
	envplan = nx_blkio_faults(w.vol->io);
	ck_assert_ptr_nonnull(envplan);
	*plan = *envplan;
	nx_blkio_set_faults(w.vol->io, plan);
	log->cut_after[0] = nx_faults_cut(plan);
	log->writes_done = plan->writes_done;
	log->writes_cut = plan->writes_cut;
	if (record) {
		manifest_of(w.vol, &man_live[0]);
		ck_assert_msg(man_live[0].valid, "live: %s", man_live[0].err);
	}
	for (i = 1; i < NSTEPS; i++) {
		/*
		 * After the cut nothing reaches the disk any more, and reads
		 * see the device without the dropped writes, which no real
		 * crash lets a process see: skip to the close (which must
		 * still not write anything), unless NEXTFS_CRASH_CONTINUE=1
		 * asks to run every step anyway (robustness).
		 */
		if (log->writes_cut && i < NSTEPS - 1 && !cont)
			continue;
		log->cur = i;
		log->started[i] = 1;
		log->cut_before[i] = nx_faults_cut(plan);
		w.err = 0;
		w.what[0] = 0;
		do_step(&w, i);
		log->finished[i] = 1;
		log->rc[i] = w.err;
		log->cut_after[i] = nx_faults_cut(plan);
		log->writes_done = plan->writes_done;
		log->writes_cut = plan->writes_cut;
		if (w.err && !log->cut_after[i] && !log->err_before_cut[0])
			snprintf(log->err_before_cut,
				 sizeof(log->err_before_cut), "step %d: %s",
				 i, w.what);
		if (!record)
			continue;
		if (w.vol) {
			manifest_of(w.vol, &man_live[i]);
			ck_assert_msg(man_live[i].valid, "step %d live: %s", i,
				      man_live[i].err);
		} else {
			man_live[i] = man_live[i - 1];
		}
		if (i == STEP_TAKE) {
			char d[512];

			ck_assert_int_eq(snap_manifest(w.vol, S2, &man_s2), 0);
			ck_assert_msg(man_s2.valid, "S2: %s", man_s2.err);
			ck_assert_msg(!man_diff(&man_live[i - 1], &man_s2, 0,
						d, sizeof(d)),
				      "S2 at its take differs from the live "
				      "tree:%s", d);
		}
		if (is_sync_point(i, variant) && w.vol) {
			struct manifest *m = malloc(sizeof(*m));
			char d[512];

			ck_assert_ptr_nonnull(m);
			if (!(variant && i >= STEP_DELETE)) {
				ck_assert_int_eq(snap_manifest(w.vol, S1, m),
						 0);
				ck_assert_msg(!man_diff(&man_s1, m, 1, d,
							sizeof(d)),
					      "S1 after step %d:%s", i, d);
			} else {
				ck_assert_int_eq(snap_manifest(w.vol, S1, m),
						 ENOENT);
			}
			free(m);
		}
	}
	log->cur = NSTEPS;
	log->writes_done = plan->writes_done;
	log->writes_cut = plan->writes_cut;
	log->done = 1;
}

struct findings {
	char text[2048];
};

static void collect_check(void *priv, enum nx_check_level level,
			  const char *msg)
{
	struct findings *f = priv;
	size_t used = strlen(f->text);

	if (level == NX_CHECK_INFO || level == NX_CHECK_WARNING)
		return;
	if (used + 2 < sizeof(f->text))
		snprintf(f->text + used, sizeof(f->text) - used, " %s;", msg);
}

/* Checks (a)-(d) on IMAGE after the run described by LOG. */
static void verify(const char *image, int variant, const struct wlog *log,
		   struct vres *v)
{
	static struct manifest got;
	struct nx_volume *vol = NULL;
	struct nx_snapinfo *list = NULL;
	char msg[256], d[1024], masked[320];
	static char out[4096];
	int i, count = 0, last_done = 0, last_started = 0, matched = -1;
	int take_started, take_done, del_started, del_done;
	errcode_t err;

	unsetenv("NEXTFS_FAULTS");
	/* Which sync points completed, and which started, before the cut */
	for (i = 0; i < NSTEPS; i++) {
		if (!is_sync_point(i, variant))
			continue;
		if (log->started[i] && !log->cut_before[i])
			last_started = i;
		if (log->finished[i] && !log->rc[i] && !log->cut_after[i])
			last_done = i;
	}
	take_started = log->started[STEP_TAKE] && !log->cut_before[STEP_TAKE];
	take_done = log->finished[STEP_TAKE] && !log->rc[STEP_TAKE] &&
		    !log->cut_after[STEP_TAKE];
	del_started = variant && log->started[STEP_DELETE] &&
		      !log->cut_before[STEP_DELETE];
	del_done = del_started && log->finished[STEP_DELETE] &&
		   !log->rc[STEP_DELETE] && !log->cut_after[STEP_DELETE];

	/* (a) */
	snprintf(v->phase, sizeof(v->phase), "open");
	err = nx_open_volume(image, 0, &vol, msg, sizeof(msg));
	if (err) {
		vsay(v, 0, F_A, "the volume does not open: %s", msg);
		v->done = 1;
		return;
	}

	/* (b) */
	snprintf(v->phase, sizeof(v->phase), "snapshot list");
	err = nx_snap_list(vol, &list, &count);
	if (err) {
		vsay(v, 0, F_B, "nx_snap_list: %ld", (long)err);
		count = 0;
	}
	for (i = 0; i < count; i++)
		if (strcmp(list[i].name, S1) && strcmp(list[i].name, S2))
			vsay(v, 0, F_B, "unexpected snapshot '%s'",
			     list[i].name);
	free(list);
	snprintf(v->phase, sizeof(v->phase), "S1's view");
	err = snap_manifest(vol, S1, &got);
	if (err == ENOENT) {
		if (!del_started)
			vsay(v, 0, F_B, "S1 is gone");
	} else if (err) {
		vsay(v, 0, F_B, "S1: nx_snap_find: %ld", (long)err);
	} else {
		if (man_diff(&man_s1, &got, 1, d, sizeof(d)))
			vsay(v, 0, F_B, "S1 differs:%s", d);
		if (del_done)
			vsay(v, lenient, F_C, "S1 is back although its "
			     "delete completed");
	}
	snprintf(v->phase, sizeof(v->phase), "S2's view");
	err = snap_manifest(vol, S2, &got);
	if (err == ENOENT) {
		if (take_done)
			vsay(v, 0, F_B, "S2 is gone although its take "
			     "completed");
	} else if (err) {
		vsay(v, 0, F_B, "S2: nx_snap_find: %ld", (long)err);
	} else if (!take_started) {
		vsay(v, 0, F_B, "S2 exists although its take never started");
	} else if (man_diff(&man_s2, &got, 0, d, sizeof(d))) {
		vsay(v, 0, F_B, "S2 differs%s:%s", take_done ? "" :
		     " (its take was cut)", d);
	}

	/* (c) */
	snprintf(v->phase, sizeof(v->phase), "live tree");
	manifest_of(vol, &got);
	for (i = last_done; i <= last_started && matched < 0; i++)
		if (is_sync_point(i, variant) &&
		    !man_diff(&man_live[i], &got, 0, d, sizeof(d)))
			matched = i;
	if (matched < 0) {
		char other[128] = "";
		size_t used = 0;

		for (i = 0; i < NSTEPS; i++)
			if (!man_diff(&man_live[i], &got, 0, d, sizeof(d)))
				used += snprintf(other + used,
						 sizeof(other) - used, " %d",
						 i);
		man_diff(&man_live[last_done], &got, 0, d, sizeof(d));
		char range[48] = "";

		if (last_started > last_done)
			snprintf(range, sizeof(range), " or a later one up to "
				 "step %d", last_started);
		vsay(v, lenient, F_C, "live tree is not the state of sync "
		     "step %d (%s)%s; against step %d:%s; it equals the "
		     "state after step(s):%s", last_done,
		     steps[last_done].what, range, last_done, d,
		     other[0] ? other : " none");
	}

	snprintf(v->phase, sizeof(v->phase), "close");
	err = nx_volume_close(vol);
	if (err)
		vsay(v, 0, F_A, "close after recovery: %ld (%s)", (long)err,
		     strerror(nx_errno(err)));

	/* (d) */
	snprintf(v->phase, sizeof(v->phase), "e2fsck");
	snprintf(masked, sizeof(masked), "%s.masked", image);
	if (nxt_masked_copy(image, masked)) {
		vsay(v, 0, F_D, "cannot make the masked copy");
	} else {
		int rc = nxt_fsck_capture(masked, "-fn", out, sizeof(out));

		if (rc) {
			char *tail = strstr(out, "Pass 1");

			vsay(v, lenient && rc < 8, F_D, "e2fsck -fn (masked) "
			     "exit %d%s:\n%s", rc, rc >= 8 ? " (could not "
			     "finish: new blocks not written before what "
			     "points at them?)" : "", tail ? tail : out);
			if (lenient) {
				int fy = nxt_fsck_capture(masked, "-fy", out,
							  sizeof(out));

				rc = nxt_fsck_capture(masked, "-fn", out,
						      sizeof(out));
				if (rc)
					vsay(v, 0, F_D, "not repairable: "
					     "e2fsck -fy exit %d, then -fn "
					     "exit %d:\n%s", fy, rc, out);
			}
		}
		unlink(masked);
	}
	snprintf(v->phase, sizeof(v->phase), "nx_check");
	{
		struct findings f = { "" };
		struct nx_check_result res;

		memset(&res, 0, sizeof(res));
		err = nx_check(image, 0, collect_check, &f, NULL, &res, msg,
			       sizeof(msg));
		if (err)
			vsay(v, 0, F_D, "nx_check cannot run: %s", msg);
		else if (res.errors || res.fixed)
			vsay(v, lenient, F_D, "nx_check: %u errors:%s",
			     res.errors, f.text);
	}
	snprintf(v->phase, sizeof(v->phase), "done");
	v->done = 1;
}

/* ----------------------------------------------------------- the sweep */

struct shared {
	struct wlog log;
	struct vres v;
};

struct run_args {
	const char *image;
	char spec[64];
	int variant;
	struct shared *sh;
};

static void child_workload(void *p)
{
	struct run_args *a = p;

	run_workload(a->image, a->spec, a->variant, 0, &a->sh->log);
}

static void child_verify(void *p)
{
	struct run_args *a = p;

	verify(a->image, a->variant, &a->sh->log, &a->sh->v);
}

static const char *status_text(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	return buf;
}

/*
 * One cut point: W with cut=N:drop on a fresh copy of BASE, then the
 * checks.  Returns the F_* flags of its problems (findings in SH->v).
 */
static int run_point(const char *base, const char *work, uint64_t n,
		     int variant, struct shared *sh, int *cut)
{
	struct run_args a = { .image = work, .variant = variant, .sh = sh };
	char st[96];
	int status;

	memset(sh, 0, sizeof(*sh));
	snprintf(a.spec, sizeof(a.spec), "cut=%llu:drop",
		 (unsigned long long)n);
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	status = nxt_in_child(child_workload, &a, 10);
	*cut = nx_faults_cut(&sh->log.plan) || sh->log.cut_after[0];
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !sh->log.done) {
		int step = sh->log.cur;
		int after_cut = nx_faults_cut(&sh->log.plan);

		/* After the cut the disk is gone: a crash is just a crash. */
		vsay(&sh->v, after_cut, F_W, "W %s in step %d (%s)%s",
		     status_text(status, st, sizeof(st)), step,
		     step < NSTEPS ? steps[step].what : "end",
		     after_cut ? ", after the cut" : "");
	}
	if (sh->log.open_err[0])
		vsay(&sh->v, 1, F_W, "the open for W failed: %s",
		     sh->log.open_err);
	if (sh->log.err_before_cut[0])
		vsay(&sh->v, 0, F_W, "error with no cut yet: %s",
		     sh->log.err_before_cut);
	if (getenv("NEXTFS_KEEP_FAILED") &&
	    !strcmp(getenv("NEXTFS_KEEP_FAILED"), "1")) {
		char crashed[320];

		snprintf(crashed, sizeof(crashed), "%s.crashed", work);
		nxt_copy_image(work, crashed);
	}
	status = nxt_in_child(child_verify, &a, 60);
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !sh->v.done)
		vsay(&sh->v, 0, F_V, "verification %s during '%s'",
		     status_text(status, st, sizeof(st)), sh->v.phase);
	return sh->v.flags;
}

/* The step during which the cut happened (NSTEPS: none). */
static int cut_step(const struct wlog *log)
{
	int i;

	for (i = 0; i < NSTEPS; i++)
		if ((log->finished[i] && log->cut_after[i]) ||
		    (log->started[i] && !log->finished[i]))
			return i;
	return NSTEPS;
}

/* The cut points to try, ascending, for T writes; returns how many. */
static int cut_points(uint64_t total, uint64_t **ret)
{
	const char *only = getenv("NEXTFS_CRASH_ONLY");
	const char *env = getenv("NEXTFS_CRASH_POINTS");
	uint64_t *v, n, spread = 40, k;
	int count = 0;

	v = calloc(total + 1, sizeof(*v));
	ck_assert_ptr_nonnull(v);
	if (only && *only) {
		char *end;

		for (; *only; only = *end ? end + 1 : end) {
			n = strtoull(only, &end, 10);
			if (n >= 1 && n < total)
				v[count++] = n;
			if (end == only)
				break;
		}
		*ret = v;
		return count;
	}
	if (env && !strcmp(env, "all"))
		spread = total;
	else if (env && *env)
		spread = strtoull(env, NULL, 10);
	for (n = 1; n < total; n++) {
		int take = n <= 40;

		for (k = 1; k <= spread && !take; k++)
			take = n == (k * (total - 1) + spread - 1) / spread;
		if (take)
			v[count++] = n;
	}
	*ret = v;
	return count;
}

/* _i: flavour in the low two bits; bit 2: W deletes S1. */
START_TEST(test_crash_sweep)
{
	int flavour = _i % NXT_NFLAVOURS, variant = _i / NXT_NFLAVOURS;
	char base[256], work[300];
	static char summary[6144];
	struct wctx w = { .strict = 1, .variant = variant };
	struct shared *sh;
	struct wlog *ref;
	uint64_t total, *points;
	int npoints, p, nfail = 0, nnote = 0, ncut = 0;
	int byflag[6] = { 0 };
	time_t t0 = time(NULL);
	const char *strict = getenv("NEXTFS_CRASH_STRICT");

	const char *only_fl = getenv("NEXTFS_CRASH_FLAVOUR");
	const char *only_var = getenv("NEXTFS_CRASH_VARIANT");

	/* debugging aids: run one flavour / variant only */
	if ((only_fl && *only_fl && strcmp(only_fl, flavour_names[flavour])) ||
	    (only_var && *only_var && atoi(only_var) != variant))
		return;
	nxt_root_cred(&root);
	lenient = flavour == 0 && !(strict && !strcmp(strict, "1"));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	ref = malloc(sizeof(*ref));
	ck_assert_ptr_nonnull(ref);

	/* 1. base image with S1 */
	nxt_mkfs(base, nxt_flavours[flavour], IMAGE_MB);
	snprintf(work, sizeof(work), "%s.work", base);
	w.vol = nxt_open(base);
	build_base(&w);
	ck_assert_int_eq(nx_snap_take(w.vol, S1, NULL), 0);
	ck_assert_int_eq(snap_manifest(w.vol, S1, &man_s1), 0);
	ck_assert_msg(man_s1.valid, "S1: %s", man_s1.err);
	ck_assert_int_gt(man_s1.n, 15);
	{
		struct manifest *live = malloc(sizeof(*live));
		char d[512];

		ck_assert_ptr_nonnull(live);
		manifest_of(w.vol, live);
		ck_assert_msg(!man_diff(live, &man_s1, 0, d, sizeof(d)),
			      "S1 at its take differs from the live tree:%s",
			      d);
		free(live);
	}
	ck_assert_int_eq(nx_volume_close(w.vol), 0);
	ck_assert_int_eq(nxt_fsck_masked(base), 0);

	/* 2. the reference run: count the writes, record the states */
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	run_workload(work, "cut=18446744073709551615:drop", variant, 1, ref);
	ck_assert(ref->done);
	ck_assert_uint_eq(ref->writes_cut, 0);
	total = ref->writes_done;
	ck_assert_uint_gt(total, 20);

	/*
	 * 3. the control run: the same path as a cut point, without a cut;
	 * everything must pass.  (The number of device writes can differ by
	 * a few from run to run: blocks whose bytes did not change are not
	 * rewritten, and whether they changed depends on timestamps.  So a
	 * cut point N is "about" the same place in every run.)
	 */
	{
		int saved = lenient, flags, cut;

		lenient = 0;
		flags = run_point(base, work, UINT64_MAX, variant, sh, &cut);
		lenient = saved;
		ck_assert_msg(!cut, "control run: cut");
		fprintf(stderr, "control run: %llu writes (reference %llu)\n",
			(unsigned long long)sh->log.writes_done,
			(unsigned long long)total);
		ck_assert_msg(flags == 0 && sh->v.noteflags == 0,
			      "control run without a cut fails:\n%s",
			      sh->v.text);
	}

	/* 4. the sweep */
	npoints = cut_points(total, &points);
	fprintf(stderr, "%s variant %d (%s): %llu device writes, %d cut "
		"points\n", flavour_names[flavour], variant,
		variant ? "S1 deleted in W" : "S1 kept",
		(unsigned long long)total, npoints);
	summary[0] = 0;
	for (p = 0; p < npoints; p++) {
		uint64_t n = points[p];
		int flags, cut, f;

		flags = run_point(base, work, n, variant, sh, &cut);
		ncut += cut;
		for (f = 0; f < 6; f++)
			byflag[f] += !!(flags & (1 << f));
		if (flags || sh->v.noteflags) {
			char *nl = strchr(sh->v.text, '\n');
			size_t used = strlen(summary);

			int cs = cut_step(&sh->log);

			fprintf(stderr, "  cut=%llu (in step %d: %s):\n%s",
				(unsigned long long)n, cs, cs < NSTEPS ?
				steps[cs].what : "none", sh->v.text);
			if (getenv("NEXTFS_KEEP_FAILED") &&
			    !strcmp(getenv("NEXTFS_KEEP_FAILED"), "1") &&
			    flags) {
				char crashed[320], kept[400];

				snprintf(crashed, sizeof(crashed),
					 "%s.crashed", work);
				snprintf(kept, sizeof(kept), "%s.%s.v%d.cut%llu"
					 ".img", base, flavour_names[flavour],
					 variant, (unsigned long long)n);
				if (!rename(crashed, kept))
					fprintf(stderr, "  (crashed image kept "
						"as %s)\n", kept);
			}
			if (flags) {
				int len = nl ? (int)(nl - sh->v.text) : 150;

				nfail++;
				/* libcheck's messages are limited to 4 KiB */
				if (used + 200 < 3000)
					snprintf(summary + used,
						 sizeof(summary) - used,
						 "  cut=%llu (step %d): %.*s\n",
						 (unsigned long long)n, cs,
						 len > 150 ? 150 : len,
						 sh->v.text);
			} else {
				nnote++;
			}
		}
	}
	fprintf(stderr, "%s variant %d: %d of %d cut points fail "
		"(a %d, b %d, c %d, d %d, w %d, crash in checks %d), %d with "
		"notes only; %d cut; %ld s\n", flavour_names[flavour], variant,
		nfail, npoints, byflag[0], byflag[1], byflag[2], byflag[3],
		byflag[4], byflag[5], nnote, ncut, (long)(time(NULL) - t0));
	free(points);
	free(ref);
	munmap(sh, sizeof(*sh));
	unlink(work);
	{
		char crashed[320];

		snprintf(crashed, sizeof(crashed), "%s.crashed", work);
		unlink(crashed);
	}
	nxt_unlink(base);
	ck_assert_msg(nfail == 0, "%s, %s: %d of %d cut points fail (a %d, "
		      "b %d, c %d, d %d, w %d, v %d); first finding of "
		      "each:\n%s", flavour_names[flavour],
		      variant ? "S1 deleted in W" : "S1 kept", nfail, npoints,
		      byflag[0], byflag[1], byflag[2], byflag[3], byflag[4],
		      byflag[5], summary);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crash");
	TCase *tc = tcase_create("sweep");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_crash_sweep, 0, 2 * NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
