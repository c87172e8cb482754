/*
 * nxbrowse.c - bounded, read-only tour of a volume and its snapshots, and
 * the read-write session built around it (nxb_rw_session, at the end).
 *
 * Everything is capped (depth, directories, entries, bytes) so that a
 * corrupt image cannot make one run take long; a real hang inside a
 * single fs-layer call is left for the fuzzer's timeout to catch.
 * Directories are listed the way FUSE lists them: a few entries per
 * nx_readdir call, resuming from the last entry's cookie, so cookie
 * handling is exercised as much as the entries themselves.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/perm.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"
#include "nxbrowse.h"

#define NXB_MAX_DEPTH		10
#define NXB_MAX_DIRS		128	/* per tree */
#define NXB_MAX_ENTRIES		512	/* listed per tree */
#define NXB_MAX_VISITS		24	/* entries looked at per directory */
#define NXB_MAX_DIR_CALLS	256	/* nx_readdir calls per directory */
#define NXB_BATCH		13	/* entries per nx_readdir call */
#define NXB_READ_CHUNK		8192
#define NXB_MAX_BYTES		(128u << 10)	/* file bytes per tree */
#define NXB_MAX_XATTRS		16	/* values read per inode */
#define NXB_MAX_VIEWS		8

uint64_t nxb_max_dir_size;

struct nxb_dent {
	char name[NX_NAME_MAX + 1];
	ext2_ino_t ino;
	unsigned char type;
	uint64_t next;
};

struct nxb_batch {
	struct nxb_dent v[NXB_BATCH];
	int n;
	int bad;			/* a name that breaks the contract */
	int odd;			/* names with NUL or '/' inside */
};

struct nxb_walk {
	struct nx_volume *vol;
	struct nxb_stats *st;
	struct nx_cred cred;		/* root: sees trusted.* too */
	ext2_ino_t visited[NXB_MAX_DIRS];
	int nvisited;
	unsigned long entries;		/* budget used in this tree */
	unsigned long bytes;
	char *buf;			/* NXB_READ_CHUNK bytes */
};

static void violation(struct nxb_stats *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void violation(struct nxb_stats *st, const char *fmt, ...)
{
	va_list ap;

	if (!st->violations++) {
		va_start(ap, fmt);
		vsnprintf(st->violation, sizeof(st->violation), fmt, ap);
		va_end(ap);
	}
}

/*
 * A failed call is fine on a corrupt image, but its code must be one the
 * FUSE layer can turn into an errno: a small positive errno or a code of
 * the ext2 com_err table.
 */
static int note_err(struct nxb_walk *w, errcode_t err, const char *what)
{
	if (!err)
		return 0;
	w->st->errors++;
	if (err < 0 || (err >= 4096 && (err < EXT2_ET_BASE ||
					 err >= EXT2_ET_BASE + 256)))
		violation(w->st, "%s returned %ld", what, (long)err);
	return 1;
}

static int collect(void *priv, const char *name, size_t len, ext2_ino_t ino,
		   unsigned char type, uint64_t next)
{
	struct nxb_batch *b = priv;
	struct nxb_dent *d;

	if (b->n == NXB_BATCH)
		return 1;
	if (len > NX_NAME_MAX || name[len]) {
		b->bad = 1;
		return 1;
	}
	/*
	 * An empty name, or a NUL or '/' inside one, is on-disk corruption
	 * that the kernel's ext4 passes through as well (its getdents then
	 * fails with EIO, as FUSE's does).  Counted, not fatal.
	 */
	if (!len || strlen(name) != len || memchr(name, '/', len))
		b->odd++;
	d = &b->v[b->n++];
	memcpy(d->name, name, len + 1);
	d->ino = ino;
	d->type = type;
	d->next = next;
	return 0;
}

static int visited(struct nxb_walk *w, ext2_ino_t ino)
{
	int i;

	for (i = 0; i < w->nvisited; i++)
		if (w->visited[i] == ino)
			return 1;
	return 0;
}

static void read_at(struct nxb_walk *w, ext2_ino_t ino, uint64_t off,
		    uint64_t isize)
{
	size_t want = NXB_READ_CHUNK, got = 0;
	errcode_t err;

	if (w->bytes >= NXB_MAX_BYTES)
		return;
	err = nx_file_read(w->vol, ino, w->buf, want, off, &got);
	if (note_err(w, err, "nx_file_read"))
		return;
	if (got > want)
		violation(w->st, "nx_file_read(ino %u) got %zu > %zu", ino,
			  got, want);
	else if (off >= isize && got)
		violation(w->st, "nx_file_read(ino %u) read %zu bytes past "
			  "EOF", ino, got);
	else if (off < isize && got > isize - off)
		violation(w->st, "nx_file_read(ino %u) crossed EOF", ino);
	w->bytes += got;
	w->st->bytes += got;
}

static void seek_file(struct nxb_walk *w, ext2_ino_t ino, uint64_t isize)
{
	uint64_t res = 0;
	errcode_t err;

	err = nx_file_seek(w->vol, ino, 0, SEEK_DATA, &res);
	if (!err && res > isize)
		violation(w->st, "SEEK_DATA(ino %u) beyond EOF", ino);
	if (err != ENXIO)
		note_err(w, err, "nx_file_seek");
	err = nx_file_seek(w->vol, ino, 0, SEEK_HOLE, &res);
	if (!err && res > isize)
		violation(w->st, "SEEK_HOLE(ino %u) beyond EOF", ino);
	if (err != ENXIO)
		note_err(w, err, "nx_file_seek");
}

/* Start, middle, tail and past the end: every mapping layer gets asked. */
static void read_file(struct nxb_walk *w, ext2_ino_t ino, const struct stat *s)
{
	uint64_t isize = (uint64_t)s->st_size;

	w->st->files++;
	read_at(w, ino, 0, isize);
	if (isize > NXB_READ_CHUNK) {
		read_at(w, ino, isize / 2, isize);
		read_at(w, ino, isize - 1, isize);
	}
	read_at(w, ino, isize + 1, isize);
	seek_file(w, ino, isize);
}

static void read_link(struct nxb_walk *w, ext2_ino_t ino)
{
	char target[4097];
	size_t len = 0;
	errcode_t err;

	err = nx_readlink(w->vol, ino, target, sizeof(target), &len);
	if (note_err(w, err, "nx_readlink"))
		return;
	/*
	 * A target with a NUL inside (corrupt) is fine: FUSE sends the
	 * string, as the kernel's readlink stops at the NUL too.
	 */
	if (len < sizeof(target) && target[len])
		violation(w->st, "nx_readlink(ino %u) not NUL terminated at "
			  "%zu", ino, len);
}

static void read_xattrs(struct nxb_walk *w, ext2_ino_t ino)
{
	size_t len = 0, total, vlen, off;
	char *names;
	int n = 0;
	errcode_t err;

	err = nx_listxattr(w->vol, &w->cred, ino, NULL, 0, &len);
	if (note_err(w, err, "nx_listxattr") || !len)
		return;
	if (len > 65536) {
		violation(w->st, "nx_listxattr(ino %u) size %zu", ino, len);
		return;
	}
	names = malloc(len);
	if (!names)
		return;
	err = nx_listxattr(w->vol, &w->cred, ino, names, len, &total);
	if (note_err(w, err, "nx_listxattr"))
		goto out;
	if (total > len) {
		violation(w->st, "nx_listxattr(ino %u) grew", ino);
		goto out;
	}
	for (off = 0; off < total && n < NXB_MAX_XATTRS; n++) {
		const char *name = names + off;
		size_t nl = strnlen(name, total - off);

		if (nl == total - off) {
			violation(w->st, "nx_listxattr(ino %u) names not NUL "
				  "terminated", ino);
			break;
		}
		off += nl + 1;
		err = nx_getxattr(w->vol, &w->cred, ino, name, NULL, 0,
				  &vlen);
		if (note_err(w, err, "nx_getxattr"))
			continue;
		if (vlen <= NXB_READ_CHUNK) {
			size_t got = 0;

			err = nx_getxattr(w->vol, &w->cred, ino, name, w->buf,
					  NXB_READ_CHUNK, &got);
			if (!note_err(w, err, "nx_getxattr"))
				w->st->xattrs++;
		}
	}
out:
	free(names);
}

static void walk_dir(struct nxb_walk *w, ext2_ino_t dir, int depth);

/* Everything about one entry except recursion into subdirectories. */
static void visit(struct nxb_walk *w, ext2_ino_t dir, const struct nxb_dent *d,
		  int depth)
{
	ext2_ino_t ino = 0;
	struct stat s;
	unsigned flags;
	errcode_t err;

	err = nx_lookup(w->vol, dir, d->name, &ino);
	if (note_err(w, err, "nx_lookup"))
		ino = d->ino;
	err = nx_getattr(w->vol, ino, &s);
	if (note_err(w, err, "nx_getattr"))
		return;
	if (note_err(w, nx_get_iflags(w->vol, ino, &flags), "nx_get_iflags"))
		flags = 0;
	read_xattrs(w, ino);
	if (S_ISREG(s.st_mode))
		read_file(w, ino, &s);
	else if (S_ISLNK(s.st_mode))
		read_link(w, ino);
	else if (S_ISDIR(s.st_mode) && depth < NXB_MAX_DEPTH &&
		 (!nxb_max_dir_size ||
		  (uint64_t)s.st_size <= nxb_max_dir_size))
		walk_dir(w, ino, depth + 1);
}

/*
 * List DIR in batches.  A call that resumes at POS and hands back a full
 * batch all carrying POS as their cookie again would make the kernel's
 * getdents loop forever: that is a violation, not a clean error.
 */
static void walk_dir(struct nxb_walk *w, ext2_ino_t dir, int depth)
{
	struct nxb_batch *b;
	uint64_t pos = 0;
	int calls, i, visits = 0;
	errcode_t err;

	if (visited(w, dir) || w->nvisited == NXB_MAX_DIRS)
		return;
	w->visited[w->nvisited++] = dir;
	w->st->dirs++;
	b = malloc(sizeof(*b));
	if (!b)
		return;
	for (calls = 0; calls < NXB_MAX_DIR_CALLS; calls++) {
		int stuck;

		b->n = 0;
		b->bad = 0;
		b->odd = 0;
		err = nx_readdir(w->vol, dir, pos, collect, b);
		if (b->bad)
			violation(w->st, "nx_readdir(dir %u) gave a bad name",
				  dir);
		w->st->odd_names += b->odd;
		if (note_err(w, err, "nx_readdir") || !b->n)
			break;
		stuck = pos && b->n == NXB_BATCH;
		for (i = 0; i < b->n; i++)
			if (b->v[i].next != pos)
				stuck = 0;
		if (stuck) {
			violation(w->st, "nx_readdir(dir %u) does not progress "
				  "from cookie %llu", dir,
				  (unsigned long long)pos);
			break;
		}
		pos = b->v[b->n - 1].next;
		for (i = 0; i < b->n; i++) {
			const struct nxb_dent *d = &b->v[i];

			w->st->entries++;
			if (++w->entries > NXB_MAX_ENTRIES)
				goto out;
			if (!d->name[0] || !strcmp(d->name, ".") ||
			    !strcmp(d->name, "..") || ++visits > NXB_MAX_VISITS)
				continue;
			visit(w, dir, d, depth);
		}
	}
out:
	free(b);
}

void nxb_walk(struct nx_volume *vol, struct nxb_stats *st)
{
	struct nxb_walk w;
	struct statvfs sv;
	struct stat s;

	memset(&w, 0, sizeof(w));
	w.vol = vol;
	w.st = st;
	w.buf = malloc(NXB_READ_CHUNK);
	if (!w.buf)
		return;
	w.cred.uid = 0;
	w.cred.gid = 0;
	note_err(&w, nx_volume_statfs(vol, &sv), "nx_volume_statfs");
	if (note_err(&w, nx_getattr(vol, EXT2_ROOT_INO, &s), "nx_getattr"))
		s.st_size = 0;
	else
		read_xattrs(&w, EXT2_ROOT_INO);
	if (!nxb_max_dir_size || (uint64_t)s.st_size <= nxb_max_dir_size)
		walk_dir(&w, EXT2_ROOT_INO, 0);
	free(w.buf);
}

void nxb_browse(struct nx_volume *vol, struct nxb_stats *st)
{
	struct nx_snapinfo *list = NULL, info;
	struct nxb_walk w = { .vol = vol, .st = st };
	int n = 0, i;
	errcode_t err;

	nxb_walk(vol, st);
	err = nx_snap_list(vol, &list, &n);
	if (note_err(&w, err, "nx_snap_list"))
		return;
	for (i = 0; i < n && i < NXB_MAX_VIEWS; i++) {
		struct nx_volume *view = NULL;

		err = nx_snap_find(vol, list[i].name, &info);
		if (!note_err(&w, err, "nx_snap_find") &&
		    info.ino != list[i].ino)
			violation(st, "nx_snap_find(%s) found another "
				  "snapshot", list[i].name);
		err = nx_snap_view_open(vol, list[i].ino, &view);
		if (note_err(&w, err, "nx_snap_view_open"))
			continue;
		st->views++;
		nxb_walk(view, st);
		nx_snap_view_close(view);
	}
	free(list);
}

int nxb_open_and_browse(const char *path, struct nxb_stats *st)
{
	struct nx_volume *vol = NULL;
	struct nxb_walk w = { .st = st };
	errcode_t err;

	memset(st, 0, sizeof(*st));
	err = nx_open_volume(path, NX_VOL_RDONLY, &vol, st->open_msg,
			     sizeof(st->open_msg));
	st->open_err = err;
	if (err) {
		note_err(&w, err, "nx_open_volume");
		st->errors--;		/* a refusal is the expected outcome */
		return st->violations ? -1 : 0;
	}
	nx_volume_lock(vol);
	nxb_browse(vol, st);
	nx_volume_unlock(vol);
	err = nx_volume_close(vol);
	if (err)
		violation(st, "read-only nx_volume_close failed: %s",
			  error_message(err));
	return st->violations ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* read-write sessions                                                */
/* ------------------------------------------------------------------ */

errcode_t nxb_disk_state(const char *path, uint32_t *jstart,
			 uint32_t *last_orphan)
{
	int flags = EXT2_FLAG_64BITS | EXT2_FLAG_FORCE | EXT2_FLAG_SKIP_MMP |
		    EXT2_FLAG_IGNORE_CSUM_ERRORS;
	struct ext2_inode inode;
	unsigned char *buf = NULL;
	ext2_filsys fs;
	blk64_t blk = 0;
	errcode_t err;

	*jstart = 0;
	*last_orphan = 0;
	err = ext2fs_open2(path, NULL, flags, 0, 0, unix_io_manager, &fs);
	if (err)
		return err;
	*last_orphan = fs->super->s_last_orphan;
	if (!ext2fs_has_feature_journal(fs->super) ||
	    !fs->super->s_journal_inum)
		goto out;
	err = ext2fs_read_inode(fs, fs->super->s_journal_inum, &inode);
	if (!err)
		err = ext2fs_bmap2(fs, fs->super->s_journal_inum, &inode, NULL,
				   0, 0, NULL, &blk);
	if (!err && !blk)
		err = EXT2_ET_BAD_BLOCK_NUM;
	if (!err)
		err = ext2fs_get_mem(fs->blocksize, &buf);
	if (!err)
		err = io_channel_read_blk64(fs->io, blk, 1, buf);
	/* Big endian, at 0x1C of the journal superblock. */
	if (!err)
		*jstart = (uint32_t)buf[0x1c] << 24 | (uint32_t)buf[0x1d] << 16 |
			  (uint32_t)buf[0x1e] << 8 | buf[0x1f];
	ext2fs_free_mem(&buf);
out:
	ext2fs_close_free(&fs);
	return err;
}

/* Note a result of the write workload: errors fine, odd codes not. */
static int wnote(struct nxb_walk *w, errcode_t err, const char *what)
{
	if (!err)
		w->st->writes_ok++;
	return note_err(w, err, what);
}

/*
 * The write workload: a handful of fs-layer calls, bounded.  Sets
 * *LEFT_OPEN to the inode it unlinked but did not release.
 */
static void rw_workload(struct nx_volume *vol, struct nxb_stats *st,
			ext2_ino_t *left_open)
{
	struct nxb_walk w = { .vol = vol, .st = st };
	struct nx_snapinfo info;
	struct statvfs sv;
	ext2_ino_t ino = 0, dir = 0, open_ino = 0, victim = 0;
	size_t done = 0, i;
	char *buf = malloc(NXB_READ_CHUNK);
	errcode_t err;

	*left_open = 0;
	if (!buf)
		return;
	for (i = 0; i < NXB_READ_CHUNK; i++)
		buf[i] = (char)('A' + (i * 7 + i / 1021) % 26);
	err = nx_mknod(vol, &w.cred, EXT2_ROOT_INO, "fz-new", S_IFREG | 0644,
		       0, &ino);
	if (!wnote(&w, err, "nx_mknod")) {
		err = nx_file_write(vol, ino, buf, NXB_READ_CHUNK, 0, &done);
		if (!wnote(&w, err, "nx_file_write") && done > NXB_READ_CHUNK)
			violation(st, "nx_file_write(ino %u) wrote %zu > %u",
				  ino, done, NXB_READ_CHUNK);
	}
	wnote(&w, nx_mkdir(vol, &w.cred, EXT2_ROOT_INO, "fz-dir", 0755, &dir),
	      "nx_mkdir");
	err = nx_mknod(vol, &w.cred, EXT2_ROOT_INO, "fz-open", S_IFREG | 0644,
		       0, &open_ino);
	if (!wnote(&w, err, "nx_mknod")) {
		wnote(&w, nx_file_write(vol, open_ino, buf, 3000, 0, &done),
		      "nx_file_write");
		/* Unlinked while "open": no nx_inode_release, an orphan. */
		err = nx_unlink(vol, &w.cred, EXT2_ROOT_INO, "fz-open",
				&victim);
		if (!wnote(&w, err, "nx_unlink") && victim)
			*left_open = victim;
	}
	if (!nx_volume_statfs(vol, &sv) && sv.f_bfree > 64) {
		err = nx_snap_take(vol, "fz-snap", &info);
		if (!wnote(&w, err, "nx_snap_take"))
			st->snap_taken = 1;
	}
	/* After the take: the active snapshot preserves the old block. */
	if (ino) {
		memset(buf, 'z', 1024);
		wnote(&w, nx_file_write(vol, ino, buf, 1024, 0, &done),
		      "nx_file_write");
	}
	wnote(&w, nx_volume_sync(vol), "nx_volume_sync");
	free(buf);
}

/*
 * Does the allocation state agree with the inodes?  Every inode in use
 * (links, mode, no dtime) is marked in the inode bitmap, and every block
 * of its map (data and map blocks; reserved inodes: the root's and the
 * journal's) is marked in the block bitmap and claimed by no other inode.
 * If not, a write may reuse a block or an inode that is still in use -
 * as the kernel's ext4 would; finding that is e2fsck's job - so what the
 * next open finds is no longer nextfs's contract.  Snapshot files are
 * left out (their maps are the snapshot engine's, checked by it).
 */
struct claim {
	ext2_filsys fs;
	ext2fs_block_bitmap claimed;
	int bad;
};

static int claim_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		       blk64_t ref_blk, int ref_offset, void *priv)
{
	struct claim *c = priv;
	blk64_t b = *blocknr;

	if (b < fs->super->s_first_data_block ||
	    b >= ext2fs_blocks_count(fs->super) ||
	    !ext2fs_test_block_bitmap2(fs->block_map, b) ||
	    ext2fs_test_block_bitmap2(c->claimed, b)) {
		c->bad = 1;
		return BLOCK_ABORT;
	}
	ext2fs_mark_block_bitmap2(c->claimed, b);
	return 0;
}

static int accounting_ok(struct nx_volume *vol)
{
	ext2_filsys fs = vol->fs;
	struct claim c = { .fs = fs };
	struct ext2_inode_large inode;
	ext2_inode_scan scan = NULL;
	ext2_ino_t ino;
	errcode_t err;

	if (ext2fs_allocate_block_bitmap(fs, "claimed", &c.claimed))
		return 0;
	if (ext2fs_open_inode_scan(fs, 0, &scan)) {
		c.bad = 1;
		goto out;
	}
	/* Every inode table, whatever INODE_UNINIT says (it may lie). */
	ext2fs_inode_scan_flags(scan, 0, EXT2_SF_DO_LAZY);
	while (!c.bad) {
		err = ext2fs_get_next_inode_full(scan, &ino,
				(struct ext2_inode *)&inode, sizeof(inode));
		if (err == EXT2_ET_BAD_BLOCK_IN_INODE_TABLE ||
		    err == EXT2_ET_INODE_CSUM_INVALID ||
		    err == EXT2_ET_INODE_IS_GARBAGE)
			continue;
		if (err) {
			c.bad = 1;
			break;
		}
		if (!ino)
			break;
		if (!inode.i_links_count || !inode.i_mode || inode.i_dtime ||
		    inode.i_flags & EXT4_SNAPFILE_FL)
			continue;
		if (ino < EXT2_FIRST_INO(fs->super) && ino != EXT2_ROOT_INO &&
		    ino != fs->super->s_journal_inum)
			continue;
		if (!ext2fs_test_inode_bitmap2(fs->inode_map, ino)) {
			c.bad = 1;
			break;
		}
		if (ext2fs_file_acl_block(fs, (struct ext2_inode *)&inode) &&
		    !ext2fs_test_block_bitmap2(fs->block_map,
				ext2fs_file_acl_block(fs,
					(struct ext2_inode *)&inode))) {
			c.bad = 1;
			break;
		}
		if (!ext2fs_inode_has_valid_blocks2(fs,
					(struct ext2_inode *)&inode))
			continue;
		if (ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY, NULL,
					  claim_block, &c))
			c.bad = 1;
	}
out:
	if (scan)
		ext2fs_close_inode_scan(scan);
	ext2fs_free_block_bitmap(c.claimed);
	return !c.bad;
}

/* After a successful close: the journal is empty, no stray orphans. */
static void check_closed(const char *path, struct nxb_stats *st,
			 int left_open, const char *which)
{
	uint32_t jstart = 0, orphan = 0;
	errcode_t err = nxb_disk_state(path, &jstart, &orphan);

	if (err)
		violation(st, "%s close succeeded, but libext2fs cannot read "
			  "the volume back: %s", which, error_message(err));
	else if (jstart)
		violation(st, "%s close succeeded with the journal not empty "
			  "(s_start %u)", which, jstart);
	else if (orphan && !left_open)
		violation(st, "%s close succeeded with s_last_orphan %u and "
			  "nothing left open", which, orphan);
}

/* One read-write open; NULL if refused (*ERR, MSG say why). */
static struct nx_volume *rw_open(const char *path, struct nxb_stats *st,
				 errcode_t *err, char *msg, size_t msglen)
{
	struct nxb_walk w = { .st = st };
	struct nx_volume *vol = NULL;

	*err = nx_open_volume(path, 0, &vol, msg, msglen);
	if (*err) {
		note_err(&w, *err, "nx_open_volume");
		st->errors--;		/* a refusal is an expected outcome */
		return NULL;
	}
	if (vol->fs->super->s_last_orphan)
		violation(st, "read-write open left s_last_orphan %u",
			  vol->fs->super->s_last_orphan);
	return vol;
}

int nxb_rw_session(const char *path, struct nxb_stats *st)
{
	struct nxb_walk w = { .st = st };
	struct nx_volume *vol;
	ext2_ino_t left_open = 0;
	errcode_t err;

	memset(st, 0, sizeof(*st));
	st->rw = 1;
	st->reopen_err = -1;
	vol = rw_open(path, st, &st->open_err, st->open_msg,
		      sizeof(st->open_msg));
	if (!vol)
		return st->violations ? -1 : 0;
	nx_volume_lock(vol);
	st->consistent = accounting_ok(vol);
	nxb_browse(vol, st);
	rw_workload(vol, st, &left_open);
	nx_volume_unlock(vol);
	st->left_open = left_open != 0;
	err = nx_volume_close(vol);
	st->close_err = err;
	if (err)
		note_err(&w, err, "nx_volume_close");
	else if (st->consistent)
		check_closed(path, st, st->left_open, "first");

	/* Again: the orphan is freed, the journal has nothing to replay. */
	vol = rw_open(path, st, &st->reopen_err, st->reopen_msg,
		      sizeof(st->reopen_msg));
	if (!vol) {
		if (!st->close_err && st->consistent)
			violation(st, "second read-write open refused after a "
				  "clean close: %s", st->reopen_msg[0] ?
				  st->reopen_msg :
				  error_message(st->reopen_err));
		return st->violations ? -1 : 0;
	}
	nx_volume_lock(vol);
	nxb_browse(vol, st);
	nx_volume_unlock(vol);
	err = nx_volume_close(vol);
	st->close2_err = err;
	if (err)
		note_err(&w, err, "nx_volume_close");
	else if (st->consistent)
		check_closed(path, st, 0, "second");
	return st->violations ? -1 : 0;
}
