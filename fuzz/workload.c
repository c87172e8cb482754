/*
 * workload.c - nextfs-fuzz-workload: fill a base image for the fuzzer
 * through the nextfs library itself, so that the bases hold what nextfs
 * writes (htree directories it converted, inline data, xattr blocks,
 * ACLs, unwritten extents) and snapshots with real preserved blocks.
 *
 *   nextfs-fuzz-workload IMAGE STEP...
 *     populate        directories (one big enough to become an htree),
 *                     small/medium/large/sparse/fragmented files, fast and slow
 *                     symlinks, a hard link, device nodes, xattrs, an ACL,
 *                     preallocated space
 *     take:NAME       take a snapshot
 *     churn:N         overwrite, append, truncate, unlink, create, rename
 *                     (round N) so the active snapshot preserves blocks
 *     delete:NAME     delete a snapshot (hands blocks to an older one)
 *     orphan:NAME     create NAME with data, unlink it while it is still
 *                     "open" (no release) and commit: it stays on the
 *                     orphan list (the process never closes it)
 *     crash           the steps after it end in a commit whose device
 *                     writes stop right after its commit block: the
 *                     image is left with that transaction in the journal
 *                     (needs replay) and none of it in place
 *
 * Steps that a flavour cannot do (fallocate on ext2, say) only warn.
 *
 * "crash" uses a fault plan (faults.h): the whole workload is run once
 * counting device writes from the marker on, which finds the transaction
 * and its commit block in the log, then again from a copy of the
 * original image with the writes cut after N, for the least N that has
 * the commit block on the device (binary search: that is monotone).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <et/com_err.h>
#include <fcntl.h>
#include <unistd.h>
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/faults.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"
#include "fzjournal.h"

static struct nx_cred root;
static int failures;

static void warn(const char *what, errcode_t err)
{
	if (err)
		fprintf(stderr, "nextfs-fuzz-workload: %s: %s\n", what,
			error_message(err));
}

/* Steps the base must have: a failure here fails the seed build. */
static void must(const char *what, errcode_t err)
{
	if (err) {
		warn(what, err);
		failures++;
	}
}

static ext2_ino_t path_ino(struct nx_volume *vol, const char *path)
{
	char buf[512], *name, *save = NULL;
	ext2_ino_t ino = EXT2_ROOT_INO;

	snprintf(buf, sizeof(buf), "%s", path);
	for (name = strtok_r(buf, "/", &save); name;
	     name = strtok_r(NULL, "/", &save))
		if (nx_lookup(vol, ino, name, &ino))
			return 0;
	return ino;
}

static void fill(char *buf, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)('a' + (i * 7 + seed * 13 + i / 97) % 26);
}

static ext2_ino_t make_file(struct nx_volume *vol, ext2_ino_t dir,
			    const char *name, uint64_t off, size_t len,
			    unsigned seed)
{
	ext2_ino_t ino = 0;
	size_t done = 0;
	char *buf;

	if (nx_lookup(vol, dir, name, &ino)) {
		must(name, nx_mknod(vol, &root, dir, name, S_IFREG | 0644, 0,
				    &ino));
		if (!ino)
			return 0;
	}
	if (!len)
		return ino;
	buf = malloc(len);
	if (!buf)
		abort();
	fill(buf, len, seed);
	must(name, nx_file_write(vol, ino, buf, len, off, &done));
	free(buf);
	return ino;
}

static void remove_name(struct nx_volume *vol, const char *dirpath,
			const char *name)
{
	ext2_ino_t dir = path_ino(vol, dirpath), victim = 0;

	if (!dir)
		return;
	warn(name, nx_unlink(vol, &root, dir, name, &victim));
	if (victim)
		warn(name, nx_inode_release(vol, victim));
}

/* An access ACL in the kernel's xattr format: u::rw-,u:1000:r--,g::r--,m::r--,o::r--. */
static void set_acl(struct nx_volume *vol, ext2_ino_t ino)
{
	static const struct { uint16_t tag, perm; uint32_t id; } e[] = {
		{ 0x01, 6, ~0u }, { 0x02, 4, 1000 }, { 0x04, 4, ~0u },
		{ 0x10, 4, ~0u }, { 0x20, 4, ~0u },
	};
	unsigned char buf[4 + sizeof(e)];
	uint32_t version = 2;

	memcpy(buf, &version, 4);
	memcpy(buf + 4, e, sizeof(e));
	warn("acl", nx_setxattr(vol, &root, ino, "system.posix_acl_access",
				buf, sizeof(buf), 0));
}

static void populate(struct nx_volume *vol)
{
	ext2_ino_t d1 = 0, sub = 0, big = 0, ino = 0, medium;
	char name[32], value[700];
	int i;

	must("d1", nx_mkdir(vol, &root, EXT2_ROOT_INO, "d1", 0755, &d1));
	must("sub", nx_mkdir(vol, &root, d1, "sub", 0750, &sub));
	must("big", nx_mkdir(vol, &root, EXT2_ROOT_INO, "big", 0755, &big));
	/* Enough names to outgrow one 1 KiB block: becomes an htree. */
	for (i = 0; i < 90; i++) {
		snprintf(name, sizeof(name), "entry-with-a-long-name-%03d", i);
		must(name, nx_mknod(vol, &root, big, name, S_IFREG | 0644, 0,
				    &ino));
	}
	ino = make_file(vol, EXT2_ROOT_INO, "small", 0, 40, 1);
	warn("user.small", nx_setxattr(vol, &root, ino, "user.small", "v", 1,
				       0));
	medium = make_file(vol, EXT2_ROOT_INO, "medium", 0, 5000, 2);
	fill(value, sizeof(value), 3);
	warn("user.big", nx_setxattr(vol, &root, medium, "user.big", value,
				     sizeof(value), 0));
	warn("trusted.t", nx_setxattr(vol, &root, d1, "trusted.t", "xyz", 3,
				      0));
	set_acl(vol, medium);
	/* 40 KiB: past the 12 direct blocks of a 1 KiB-block file. */
	make_file(vol, EXT2_ROOT_INO, "large", 0, 40 << 10, 4);
	/* Data at 300 KiB: double-indirect on block-mapped volumes. */
	make_file(vol, EXT2_ROOT_INO, "sparse", 300 << 10, 1024, 5);
	make_file(vol, sub, "deep", 0, 3000, 6);
	/* Every other block: more extents than fit in the inode. */
	for (i = 0; i < 10; i++)
		make_file(vol, EXT2_ROOT_INO, "frag", (uint64_t)i * 2048, 1024,
			  7 + i);
	must("fast", nx_symlink(vol, &root, EXT2_ROOT_INO, "fast", "small",
				&ino));
	memset(value, 'p', 200);
	value[200] = 0;
	memcpy(value, "d1/", 3);
	must("slow", nx_symlink(vol, &root, EXT2_ROOT_INO, "slow", value,
				&ino));
	must("link", nx_link(vol, &root, medium, d1, "medium-link"));
	must("null", nx_mknod(vol, &root, d1, "null", S_IFCHR | 0666,
			      makedev(1, 3), &ino));
	must("fifo", nx_mknod(vol, &root, d1, "fifo", S_IFIFO | 0644, 0,
			      &ino));
	ino = make_file(vol, EXT2_ROOT_INO, "prealloc", 0, 0, 0);
	warn("fallocate", nx_file_fallocate(vol, ino, 0, 0, 8192));
}

static void churn(struct nx_volume *vol, unsigned round)
{
	char name[64];
	ext2_ino_t ino;
	int i;

	make_file(vol, EXT2_ROOT_INO, "medium", 100, 2000, 10 + round);
	ino = path_ino(vol, "large");
	if (ino) {
		make_file(vol, EXT2_ROOT_INO, "large", 40 << 10, 3000,
			  20 + round);
		warn("truncate", nx_file_truncate(vol, ino, 20 << 10));
	}
	ino = path_ino(vol, "sparse");
	if (ino)
		warn("truncate", nx_file_truncate(vol, ino, 100 << 10));
	snprintf(name, sizeof(name), "new-%u", round);
	make_file(vol, EXT2_ROOT_INO, name, 0, 7000, 30 + round);
	snprintf(name, sizeof(name), "newdir-%u", round);
	warn(name, nx_mkdir(vol, &root, EXT2_ROOT_INO, name, 0755, &ino));
	for (i = round * 10; i < (int)round * 10 + 10; i++) {
		snprintf(name, sizeof(name), "entry-with-a-long-name-%03d", i);
		remove_name(vol, "big", name);
	}
	if (round == 1) {
		remove_name(vol, "d1/sub", "deep");
		warn("rename", nx_rename(vol, &root, EXT2_ROOT_INO, "small",
					 path_ino(vol, "d1"), "small-moved",
					 0, NULL));
	}
	ino = path_ino(vol, "d1");
	if (ino)
		warn("user.churn", nx_setxattr(vol, &root, ino, "user.churn",
					       name, strlen(name), 0));
}

/* Unlinked while in use: an orphan, committed. */
static void orphan(struct nx_volume *vol, const char *name)
{
	ext2_ino_t ino = make_file(vol, EXT2_ROOT_INO, name, 0, 5000, 40),
		   victim = 0;

	if (!ino)
		return;
	must(name, nx_unlink(vol, &root, EXT2_ROOT_INO, name, &victim));
	must("sync", nx_volume_sync(vol));
	if (vol->fs->super->s_last_orphan != victim) {
		fprintf(stderr, "nextfs-fuzz-workload: %s is not on the orphan "
			"list\n", name);
		failures++;
	}
}

static void step(struct nx_volume *vol, const char *s)
{
	struct nx_snapinfo info;

	if (!strcmp(s, "populate"))
		populate(vol);
	else if (!strncmp(s, "take:", 5))
		must(s, nx_snap_take(vol, s + 5, &info));
	else if (!strncmp(s, "churn:", 6))
		churn(vol, (unsigned)atoi(s + 6));
	else if (!strncmp(s, "delete:", 7))
		must(s, nx_snap_delete(vol, s + 7));
	else if (!strncmp(s, "orphan:", 7))
		orphan(vol, s + 7);
	else {
		fprintf(stderr, "nextfs-fuzz-workload: unknown step %s\n", s);
		failures++;
	}
}

/* ---- crash: the journal left holding a transaction ---- */

struct jreader {
	struct nx_blkio *io;		/* read through the volume ... */
	int fd;				/* ... or from the image file */
	unsigned bs;
	blk64_t *map;			/* journal block -> device block */
	uint32_t n;
	unsigned char *buf;
};

static const unsigned char *jr_read(void *priv, uint32_t jblk)
{
	struct jreader *r = priv;
	uint64_t off;

	if (jblk >= r->n || !r->map[jblk])
		return NULL;
	off = r->map[jblk] * r->bs;
	if (r->io ? nx_blkio_pread(r->io, r->buf, r->bs, off) != 0 :
		    pread(r->fd, r->buf, r->bs, off) != (ssize_t)r->bs)
		return NULL;
	return r->buf;
}

static int jr_init(struct jreader *r, ext2_filsys fs)
{
	ext2_ino_t jino = fs->super->s_journal_inum;
	struct ext2_inode inode;
	uint32_t i;

	r->bs = fs->blocksize;
	if (!ext2fs_has_feature_journal(fs->super) || !jino ||
	    ext2fs_read_inode(fs, jino, &inode))
		return -1;
	r->n = EXT2_I_SIZE(&inode) / fs->blocksize;
	r->map = calloc(r->n ? r->n : 1, sizeof(*r->map));
	r->buf = malloc(r->bs);
	if (!r->map || !r->buf)
		return -1;
	for (i = 0; i < r->n; i++)
		if (ext2fs_bmap2(fs, jino, &inode, NULL, 0, i, NULL,
				 &r->map[i]))
			return -1;
	return 0;
}

static void jr_free(struct jreader *r)
{
	free(r->map);
	free(r->buf);
}

struct find_commit {
	uint32_t seq, jblk;
	int found;
};

static void on_block(void *priv, const struct fzj_block *e)
{
	struct find_commit *f = priv;

	if (e->kind == FZJ_K_COMMIT && e->seq == f->seq) {
		f->jblk = e->jblk;
		f->found = 1;
	}
}

struct commit_walk {
	struct jreader *r;
	struct find_commit f;
};

static const unsigned char *cw_read(void *priv, uint32_t jblk)
{
	return jr_read(((struct commit_walk *)priv)->r, jblk);
}

static void cw_emit(void *priv, const struct fzj_block *e)
{
	on_block(&((struct commit_walk *)priv)->f, e);
}

/*
 * Right after a complete commit (checkpointed: s_start 0, s_sequence one
 * past it): where its commit block is.  Our log alternates halves, so
 * the transaction starts at the beginning of one of them.
 */
static int locate_commit(struct nx_volume *vol, uint32_t *seq,
			 blk64_t *commit)
{
	struct jreader r = { .io = vol->io, .fd = -1 };
	struct commit_walk cw = { .r = &r };
	const unsigned char *sb;
	struct fzj j;
	uint32_t half, start;
	int ret = -1;

	if (jr_init(&r, vol->fs) || !(sb = jr_read(&r, 0)) ||
	    fzj_parse_sb(sb, r.bs, &j) || j.last > r.n)
		goto out;
	cw.f.seq = j.seq - 1;
	for (half = 0; half < 2 && !cw.f.found; half++) {
		start = j.first + half * ((j.last - j.first) / 2);
		fzj_walk(&j, start, cw.f.seq, cw_read, cw_emit, &cw);
	}
	if (cw.f.found) {
		*seq = cw.f.seq;
		*commit = r.map[cw.f.jblk];
		ret = 0;
	}
out:
	jr_free(&r);
	return ret;
}

/* Is the commit block of SEQ at device block BLK of IMAGE? */
static int commit_on_disk(const char *image, unsigned bs, blk64_t blk,
			  uint32_t seq)
{
	unsigned char hdr[12];
	int fd = open(image, O_RDONLY | O_CLOEXEC), ok;

	if (fd < 0)
		return 0;
	ok = pread(fd, hdr, sizeof(hdr), blk * bs) == (ssize_t)sizeof(hdr) &&
	     fzj_be32(hdr) == FZJ_MAGIC && fzj_be32(hdr + 4) == FZJ_COMMIT &&
	     fzj_be32(hdr + 8) == seq;
	close(fd);
	return ok;
}

static int copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, ret = -1;
	ssize_t n;

	if (in < 0)
		return -1;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0)
		goto done;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			goto done;
	ret = n == 0 ? 0 : -1;
done:
	close(in);
	if (out >= 0 && close(out))
		ret = -1;
	return ret;
}

struct crash_run {
	uint64_t cut;			/* UINT64_MAX: count only */
	uint64_t writes;		/* device writes from the marker on */
	uint32_t seq;			/* counting: the crash transaction */
	blk64_t commit;			/* ... and its commit block */
	unsigned bs;
	int located;
};

/*
 * Open IMAGE, run STEPS (NSTEPS, the marker at MARK or -1), close.  With
 * a marker the fault plan is attached there and the steps after it end
 * in one more commit: the crash transaction.
 */
static int run(const char *image, char **steps, int nsteps, int mark,
	       struct crash_run *cr)
{
	struct nx_faults plan = { 0 };
	struct nx_volume *vol;
	char msg[512] = "";
	errcode_t err;
	int i;

	err = nx_open_volume(image, 0, &vol, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "nextfs-fuzz-workload: %s\n",
			msg[0] ? msg : error_message(err));
		return -1;
	}
	nx_volume_lock(vol);
	for (i = 0; i < nsteps; i++) {
		if (i == mark) {
			plan.cut_after = cr->cut;
			nx_blkio_set_faults(vol->io, &plan);
			continue;
		}
		step(vol, steps[i]);
	}
	if (mark >= 0) {
		must("crash commit", nx_volume_sync(vol));
		cr->writes = plan.writes_done;
		cr->bs = vol->fs->blocksize;
		if (cr->cut == UINT64_MAX)
			cr->located = !locate_commit(vol, &cr->seq,
						     &cr->commit);
	}
	nx_volume_unlock(vol);
	/* After a cut this writes nothing: the process "crashed". */
	must("close", nx_volume_close(vol));
	return 0;
}

static int crash_workload(const char *image, char **steps, int nsteps,
			  int mark)
{
	char pristine[4096];
	struct crash_run count = { .cut = UINT64_MAX }, cr;
	uint64_t lo = 1, hi;
	int ret = -1;

	snprintf(pristine, sizeof(pristine), "%s.pristine", image);
	if (copy_file(image, pristine) || run(image, steps, nsteps, mark,
					      &count))
		goto out;
	if (!count.located || failures) {
		fprintf(stderr, "nextfs-fuzz-workload: the crash transaction "
			"is not in the journal\n");
		goto out;
	}
	hi = count.writes;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		cr = (struct crash_run){ .cut = mid };
		if (copy_file(pristine, image) ||
		    run(image, steps, nsteps, mark, &cr))
			goto out;
		if (commit_on_disk(image, count.bs, count.commit, count.seq))
			hi = mid;
		else
			lo = mid + 1;
	}
	cr = (struct crash_run){ .cut = lo };
	if (copy_file(pristine, image) || run(image, steps, nsteps, mark, &cr))
		goto out;
	if (!commit_on_disk(image, count.bs, count.commit, count.seq)) {
		fprintf(stderr, "nextfs-fuzz-workload: no cut leaves the "
			"commit block on the device\n");
		goto out;
	}
	printf("%s: journal holds transaction %u (device writes cut after "
	       "%llu of %llu from the crash marker)\n", image, count.seq,
	       (unsigned long long)lo, (unsigned long long)count.writes);
	ret = 0;
out:
	unlink(pristine);
	return ret;
}

int main(int argc, char **argv)
{
	int i, mark = -1;

	if (argc < 3) {
		fprintf(stderr, "usage: nextfs-fuzz-workload IMAGE STEP...\n");
		return 2;
	}
	for (i = 2; i < argc; i++)
		if (!strcmp(argv[i], "crash"))
			mark = i - 2;
	if (mark >= 0) {
		if (crash_workload(argv[1], argv + 2, argc - 2, mark))
			failures++;
	} else if (run(argv[1], argv + 2, argc - 2, -1, NULL)) {
		return 1;
	}
	return failures ? 1 : 0;
}
