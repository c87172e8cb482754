/*
 * export.c - the image engine (image.h): a snapshot as a standalone ext
 * image, block by block, for "nextfs export", the image files of a mount
 * and "export --since"; and the live volume with HAS_SNAPSHOT masked.
 *
 * Preparing an export copies nothing.  The snapshot's view is opened a
 * second time as a read-write libext2fs file system on an "overlay"
 * device (bytechan.h) that reads through the view and keeps every write
 * in memory.  On that file system the snapshot files, /.snapshots and
 * the inodes on the orphan list (open but unlinked at the take) are
 * removed, the block bitmap is rebuilt from what the remaining inodes own
 * (the snapshot files' own block maps are not trusted: an older
 * snapshot's extent tree is not preserved in a newer snapshot's view),
 * the snapshot fields are cleared (s_snapshot_id becomes the stamp) and
 * the journal is made empty.  Closing it leaves the changed metadata in
 * the overlay.  From then on block b of the image is one of three things
 * (block_kind): the overlay's copy, the view's block b where the export
 * uses it, or zeros.  A read plans the view's blocks like a file read
 * of the view (the device I/O can then be spliced outside the lock);
 * nothing else is ever read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/bytechan.h"
#include "nextfs/devname.h"
#include "nextfs/fdio.h"
#include "nextfs/file.h"
#include "nextfs/grow.h"
#include "nextfs/image.h"
#include "nextfs/journal.h"
#include "snap_internal.h"

/* ------------------------------------------------------------------ */
/* The overlay: writes kept in memory over the snapshot view.        */

struct overlay {
	struct nx_volume *view;		/* the snapshot view (not owned) */
	unsigned unit;			/* = the file system block size */
	struct nx_blkmap slot;		/* block -> index into bufs */
	char **bufs;
	blk64_t *blks;			/* bufs[i] holds block blks[i] */
	size_t nbufs, cap;
};

static char *overlay_block(const struct overlay *ov, blk64_t blk)
{
	blk64_t i;

	return nx_blkmap_get(&ov->slot, blk, &i) ? ov->bufs[i] : NULL;
}

/*
 * N blocks of the view, under the volume lock for just this read: the
 * export is prepared without holding it, so that a served volume keeps
 * serving while the snapshot's inodes are scanned.
 */
static errcode_t lower_read(struct overlay *ov, blk64_t blk, blk64_t n,
			    char *buf)
{
	errcode_t err;

	nx_volume_lock(ov->view);
	err = nx_snap_view_pread(ov->view, buf, n * ov->unit,
				 blk * ov->unit);
	nx_volume_unlock(ov->view);
	return err;
}

static errcode_t overlay_read(void *priv, void *data, uint64_t off,
			      uint64_t len)
{
	struct overlay *ov = priv;
	char *buf = data;
	uint64_t pos = off, end = off + len;
	char *tmp = NULL;
	errcode_t err = 0;

	while (pos < end && !err) {
		blk64_t blk = pos / ov->unit, run = 1;
		uint64_t in = pos - blk * ov->unit;
		uint64_t chunk = ov->unit - in;
		char *held = overlay_block(ov, blk);

		if (chunk > end - pos)
			chunk = end - pos;
		if (held) {
			memcpy(buf + (pos - off), held + in, chunk);
		} else if (!in && chunk == ov->unit) {
			/* Whole blocks the overlay does not hold: one read. */
			while (pos + (run + 1) * ov->unit <= end &&
			       run < 1024 && !overlay_block(ov, blk + run))
				run++;
			chunk = run * ov->unit;
			err = lower_read(ov, blk, run, buf + (pos - off));
		} else {
			if (!tmp && !(tmp = malloc(ov->unit)))
				return EXT2_ET_NO_MEMORY;
			err = lower_read(ov, blk, 1, tmp);
			if (!err)
				memcpy(buf + (pos - off), tmp + in, chunk);
		}
		pos += chunk;
	}
	free(tmp);
	return err;
}

static errcode_t overlay_hold(struct overlay *ov, blk64_t blk, char **ret)
{
	char *b = overlay_block(ov, blk);
	size_t capb, capk;
	errcode_t err;

	if (b) {
		*ret = b;
		return 0;
	}
	/* Parallel arrays: each grows to the same size. */
	capb = capk = ov->cap;
	if (nx_grow((void **)&ov->bufs, &capb, ov->nbufs, sizeof(*ov->bufs),
		    64) ||
	    nx_grow((void **)&ov->blks, &capk, ov->nbufs, sizeof(*ov->blks),
		    64))
		return EXT2_ET_NO_MEMORY;
	ov->cap = capb;
	b = malloc(ov->unit);
	if (!b)
		return EXT2_ET_NO_MEMORY;
	err = lower_read(ov, blk, 1, b);
	if (!err)
		err = nx_blkmap_put(&ov->slot, blk, ov->nbufs);
	if (err) {
		free(b);
		return err;
	}
	ov->bufs[ov->nbufs] = b;
	ov->blks[ov->nbufs++] = blk;
	*ret = b;
	return 0;
}

static errcode_t overlay_write(void *priv, const void *data, uint64_t off,
			       uint64_t len)
{
	struct overlay *ov = priv;
	const char *buf = data;
	uint64_t pos = off, end = off + len;

	while (pos < end) {
		blk64_t blk = pos / ov->unit;
		uint64_t in = pos - blk * ov->unit;
		uint64_t chunk = ov->unit - in;
		char *held;
		errcode_t err = overlay_hold(ov, blk, &held);

		if (err)
			return err;
		if (chunk > end - pos)
			chunk = end - pos;
		memcpy(held + in, buf + (pos - off), chunk);
		pos += chunk;
	}
	return 0;
}

static void overlay_free(struct overlay *ov)
{
	size_t i;

	if (!ov)
		return;
	for (i = 0; i < ov->nbufs; i++)
		free(ov->bufs[i]);
	free(ov->bufs);
	free(ov->blks);
	nx_blkmap_free(&ov->slot);
	free(ov);
}

static struct overlay *overlay_new(struct nx_volume *view, unsigned unit)
{
	struct overlay *ov = calloc(1, sizeof(*ov));

	if (!ov)
		return NULL;
	ov->view = view;
	ov->unit = unit;
	return ov;
}

/* The device under the exported file system (bytechan.h). */
static const struct nx_bytechan_ops overlay_ops = {
	.read = overlay_read,
	.write = overlay_write,
};

/* ------------------------------------------------------------------ */
/* Image sources.                                                      */

enum src_kind { SRC_LIVE, SRC_EXPORT, SRC_FILE };

struct nx_imgsrc {
	enum src_kind kind;
	uint64_t size;
	unsigned bs;
	blk64_t nblocks;
	blk64_t first_data_block;
	int fd;				/* SRC_LIVE, SRC_FILE */
	/* SRC_LIVE */
	struct nx_rawvol *raw;		/* holds the lock */
	struct ext2_super_block sb;	/* masked primary superblock */
	/* SRC_EXPORT */
	struct nx_volume *vol;		/* the live volume (not owned) */
	uint32_t id;			/* the snapshot (SRC_FILE: the stamp) */
	struct nx_volume *view;		/* owned */
	struct overlay *ov;		/* owned: the fixed-up metadata */
	ext2fs_block_bitmap data;	/* blocks read from the view, and the
					   overlay's: what holds data */
	blk64_t ndata;
	/* nx_imgsrc_changes() against the export of snapshot diff_id */
	uint32_t diff_id;
	ext2fs_block_bitmap diff;	/* blocks that may differ */
};

uint64_t nx_imgsrc_size(const struct nx_imgsrc *src)
{
	return src->size;
}

unsigned nx_imgsrc_block_size(const struct nx_imgsrc *src)
{
	return src->bs;
}

uint32_t nx_imgsrc_snapshot_id(const struct nx_imgsrc *src)
{
	return src->id;
}

blk64_t nx_imgsrc_data_blocks(const struct nx_imgsrc *src)
{
	return src->kind == SRC_EXPORT ? src->ndata : src->nblocks;
}

static void set_geometry(struct nx_imgsrc *src, ext2_filsys fs)
{
	src->bs = fs->blocksize;
	src->nblocks = ext2fs_blocks_count(fs->super);
	src->size = src->nblocks * (uint64_t)fs->blocksize;
	src->first_data_block = fs->super->s_first_data_block;
}

static void superblock_csum_set(struct ext2_super_block *sb)
{
	if (sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb->s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)sb,
				offsetof(struct ext2_super_block, s_checksum));
}

static void mask_superblock(struct ext2_super_block *sb)
{
	sb->s_feature_ro_compat &= ~EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT;
	sb->s_flags &= ~EXT2_FLAGS_IS_SNAPSHOT;
	superblock_csum_set(sb);
}

errcode_t nx_imgsrc_open_live(const char *device, struct nx_imgsrc **ret,
			      char *msg, size_t msglen)
{
	struct nx_imgsrc *src = calloc(1, sizeof(*src));
	errcode_t err;

	if (!src)
		return EXT2_ET_NO_MEMORY;
	src->kind = SRC_LIVE;
	src->fd = -1;
	err = nx_raw_open(device, 0, &src->raw, msg, msglen);
	if (err) {
		free(src);
		return err;
	}
	set_geometry(src, src->raw->fs);
	src->fd = nx_dev_open(device, O_RDONLY);
	if (src->fd < 0 ||
	    pread(src->fd, &src->sb, sizeof(src->sb), SUPERBLOCK_OFFSET) !=
	    (ssize_t)sizeof(src->sb)) {
		err = errno ? errno : EIO;
		nx_set_msg(msg, msglen, "%s: %s", device, strerror(err));
		nx_imgsrc_close(src);
		return err;
	}
	mask_superblock(&src->sb);
	/* Only the lock is needed from now on. */
	nx_raw_release_fs(src->raw);
	*ret = src;
	return 0;
}

errcode_t nx_imgsrc_open_fd(int fd, uint64_t size, struct nx_imgsrc **ret)
{
	struct ext2_super_block sb;
	struct nx_imgsrc *src;
	unsigned bs;

	errno = 0;
	if (pread(fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET) != sizeof(sb) ||
	    sb.s_magic != EXT2_SUPER_MAGIC || sb.s_log_block_size > 6 ||
	    size % (bs = EXT2_MIN_BLOCK_SIZE << sb.s_log_block_size)) {
		int e = errno;

		close(fd);
		errno = e;
		return e ? e : EINVAL;
	}
	src = calloc(1, sizeof(*src));
	if (!src) {
		close(fd);
		return EXT2_ET_NO_MEMORY;
	}
	src->kind = SRC_FILE;
	src->fd = fd;
	src->bs = bs;
	src->size = size;
	src->nblocks = size / bs;
	src->id = sb.s_snapshot_id;
	*ret = src;
	return 0;
}

int nx_imgsrc_fd(const struct nx_imgsrc *src)
{
	return src->kind == SRC_FILE ? src->fd : -1;
}

/* LEN bytes at OFF of FD; a short file reads as zeros past its end. */
static errcode_t pread_full(int fd, char *buf, uint64_t len, uint64_t off)
{
	size_t done;
	errcode_t err = nx_read_full(fd, buf, len, (off_t)off, &done);

	if (err)
		return err;
	memset(buf + done, 0, len - done);
	return 0;
}

static errcode_t live_read(struct nx_imgsrc *src, char *buf, uint64_t len,
			   uint64_t off)
{
	errcode_t err = pread_full(src->fd, buf, len, off);

	if (err)
		return err;
	/* The patched superblock replaces the bytes it overlaps. */
	if (off < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE &&
	    off + len > SUPERBLOCK_OFFSET) {
		uint64_t from = off > SUPERBLOCK_OFFSET ? off :
				SUPERBLOCK_OFFSET;
		uint64_t to = off + len < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE ?
			      off + len : SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE;

		memcpy(buf + (from - off),
		       (char *)&src->sb + (from - SUPERBLOCK_OFFSET),
		       to - from);
	}
	return 0;
}

void nx_imgsrc_close(struct nx_imgsrc *src)
{
	if (!src)
		return;
	if (src->fd >= 0)
		close(src->fd);
	nx_raw_close(src->raw);
	if (src->data)
		ext2fs_free_block_bitmap(src->data);
	if (src->diff)
		ext2fs_free_block_bitmap(src->diff);
	overlay_free(src->ov);
	if (src->view)
		nx_snap_view_close(src->view);
	free(src);
}

/* ------------------------------------------------------------------ */
/* Turning a snapshot view into a standalone image.                    */

struct strip {
	ext2_filsys fs;
	ext2_ino_t snapdir;
	ext2_ino_t *drop;		/* snapshot inodes, snapdir, orphans */
	size_t ndrop, cap;
};

static int is_dropped(struct strip *st, ext2_ino_t ino)
{
	size_t i;

	for (i = 0; i < st->ndrop; i++)
		if (st->drop[i] == ino)
			return 1;
	return 0;
}

static errcode_t add_drop(struct strip *st, ext2_ino_t ino)
{
	if (!ino || is_dropped(st, ino))
		return 0;
	if (nx_grow((void **)&st->drop, &st->cap, st->ndrop, sizeof(*st->drop),
		    32))
		return EXT2_ET_NO_MEMORY;
	st->drop[st->ndrop++] = ino;
	return 0;
}

static int drop_entry(struct ext2_dir_entry *dirent, int offset,
		      int blocksize, char *buf, void *priv)
{
	struct strip *st = priv;
	int len = ext2fs_dirent_name_len(dirent);

	if (!dirent->inode || (len == 1 && dirent->name[0] == '.') ||
	    (len == 2 && dirent->name[0] == '.' && dirent->name[1] == '.'))
		return 0;
	return add_drop(st, dirent->inode) ? DIRENT_ABORT : 0;
}

/* The list as the view's superblock saw it, and every name in /.snapshots. */
static errcode_t collect_snapshots(struct strip *st)
{
	ext2_filsys fs = st->fs;
	ext2_ino_t ino = fs->super->s_snapshot_list;
	struct ext2_inode_large inode;
	errcode_t err;
	int hops = 0;

	while (ino >= EXT2_FIRST_INODE(fs->super) &&
	       ino <= fs->super->s_inodes_count && hops++ < 4096) {
		err = add_drop(st, ino);
		if (!err)
			err = ext2fs_read_inode_full(fs, ino,
						     (struct ext2_inode *)&inode,
						     sizeof(inode));
		if (err)
			return err;
		if (!(inode.i_flags & EXT4_SNAPFILE_FL))
			break;
		ino = snap_next(&inode);
	}
	err = ext2fs_lookup(fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME,
			    strlen(NX_SNAPDIR_NAME), NULL, &st->snapdir);
	if (err == EXT2_ET_FILE_NOT_FOUND) {
		st->snapdir = 0;
		return 0;
	}
	if (err)
		return err;
	err = add_drop(st, st->snapdir);
	if (!err)
		err = ext2fs_dir_iterate(fs, st->snapdir, 0, NULL, drop_entry,
					 st);
	return err;
}

/*
 * Inodes on the view's orphan list: files that had lost their last name
 * but were still open when the snapshot was taken.  Mounting the image
 * would free them (the kernel's orphan cleanup); a standalone image
 * leaves them out at once, so that e2fsck -n, which does not process the
 * list, finds nothing.  An orphan that still has links (a truncate the
 * kernel had not finished; nextfs never writes those) stops the walk and
 * stays, as does the rest of a list that does not make sense.
 */
static errcode_t collect_orphans(struct strip *st)
{
	ext2_filsys fs = st->fs;
	ext2_ino_t ino = fs->super->s_last_orphan;
	struct ext2_inode_large inode;
	errcode_t err;
	ext2_ino_t hops = 0;

	while (ino >= EXT2_FIRST_INODE(fs->super) &&
	       ino <= fs->super->s_inodes_count &&
	       hops++ < fs->super->s_inodes_count) {
		err = ext2fs_read_inode_full(fs, ino,
					     (struct ext2_inode *)&inode,
					     sizeof(inode));
		if (err)
			return err;
		if (inode.i_links_count || is_dropped(st, ino))
			break;
		err = add_drop(st, ino);
		if (err)
			return err;
		ino = inode.i_dtime;
	}
	if (is_dropped(st, ino))
		ino = 0;	/* a loop: every inode on it is gone */
	/* The list now starts where the walk stopped (0: it is empty). */
	if (fs->super->s_last_orphan != ino) {
		fs->super->s_last_orphan = ino;
		ext2fs_mark_super_dirty(fs);
	}
	return 0;
}

/* Owner scan: leave out snapshot files (also ones only the flag names). */
static int skip_snapshot(void *priv, ext2_ino_t ino,
			 const struct ext2_inode_large *inode)
{
	struct strip *st = priv;

	if (ino >= EXT2_FIRST_INODE(st->fs->super) &&
	    (inode->i_flags & EXT4_SNAPFILE_FL))
		add_drop(st, ino);
	return is_dropped(st, ino);
}

static errcode_t free_inode(ext2_filsys fs, ext2_ino_t ino)
{
	unsigned size = EXT2_INODE_SIZE(fs->super);
	struct ext2_inode_large *inode = calloc(1, size);
	int isdir;
	errcode_t err;

	if (!inode)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)inode,
				     size);
	if (err)
		goto out;
	isdir = LINUX_S_ISDIR(inode->i_mode);
	memset(inode, 0, size);
	inode->i_dtime = fs->now ? fs->now : time(NULL);
	if (size > EXT2_GOOD_OLD_INODE_SIZE)
		inode->i_extra_isize = sizeof(struct ext2_inode_large) -
				       EXT2_GOOD_OLD_INODE_SIZE;
	err = ext2fs_write_inode_full(fs, ino, (struct ext2_inode *)inode,
				      size);
	if (!err && ext2fs_test_inode_bitmap2(fs->inode_map, ino))
		ext2fs_inode_alloc_stats2(fs, ino, -1, isdir);
out:
	free(inode);
	return err;
}

static errcode_t unlink_snapdir(struct strip *st)
{
	ext2_filsys fs = st->fs;
	struct ext2_inode_large root;
	errcode_t err;

	if (!st->snapdir)
		return 0;
	err = ext2fs_unlink(fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME, st->snapdir, 0);
	if (err)
		return err;
	err = ext2fs_read_inode_full(fs, EXT2_ROOT_INO,
				     (struct ext2_inode *)&root, sizeof(root));
	if (err)
		return err;
	/* Its '..' counted in the root's links (1 means "many": dir_nlink). */
	if (root.i_links_count > 2)
		root.i_links_count--;
	return ext2fs_write_inode_full(fs, EXT2_ROOT_INO,
				       (struct ext2_inode *)&root,
				       sizeof(root));
}

/*
 * The stamp (image.h): s_snapshot_id keeps the id of the snapshot this is
 * the export of.  Without HAS_SNAPSHOT the kernel and stock e2fsck ignore
 * it, and nextfs reads it as the last id issued on the volume, which it
 * also was at the take.  With s_uuid it tells "export --since" which
 * snapshot of which volume a file holds, from one superblock read.
 */
static void clear_snapshot_fields(ext2_filsys fs, uint32_t id)
{
	struct ext2_super_block *sb = fs->super;

	ext2fs_clear_feature_has_snapshot(sb);
	sb->s_snapshot_inum = 0;
	sb->s_snapshot_id = id;
	sb->s_snapshot_r_blocks_count = 0;
	sb->s_snapshot_list = 0;
	sb->s_flags &= ~EXT2_FLAGS_IS_SNAPSHOT;
	/* A consistent image of its own: clean, like after an unmount. */
	sb->s_state |= EXT2_VALID_FS;
	ext2fs_clear_feature_journal_needs_recovery(sb);
	ext2fs_mark_super_dirty(fs);
}

static errcode_t strip_snapshots(ext2_filsys fs, ext2fs_block_bitmap used,
				 uint32_t id)
{
	struct strip st = { fs, 0, NULL, 0, 0 };
	struct nx_owner_scan scan = { 0 };
	errcode_t err;
	size_t i;

	err = collect_snapshots(&st);
	if (!err)
		err = collect_orphans(&st);
	if (err)
		goto out;
	scan.skip = skip_snapshot;
	scan.priv = &st;
	scan.used = used;
	err = nx_scan_owners(fs, &scan);
	if (err)
		goto out;
	if (scan.nbadino)
		err = scan.bad_err;
	if (err)
		goto out;
	err = unlink_snapdir(&st);
	for (i = 0; i < st.ndrop && !err; i++)
		err = free_inode(fs, st.drop[i]);
	if (err)
		goto out;
	nx_apply_block_bitmap(fs, used);
	clear_snapshot_fields(fs, id);
out:
	free(st.drop);
	return err;
}

struct journal_walk {
	struct overlay *ov;
	ext2fs_block_bitmap data;
	errcode_t err;
};

static int journal_block(ext2_filsys fs, blk64_t *blocknr,
			 e2_blkcnt_t blockcnt, blk64_t ref_blk, int ref_offset,
			 void *priv)
{
	struct journal_walk *w = priv;
	char *jsb;

	if (blockcnt < 0 || *blocknr < fs->super->s_first_data_block ||
	    *blocknr >= ext2fs_blocks_count(fs->super))
		return 0;
	if (blockcnt > 0) {
		ext2fs_unmark_block_bitmap2(w->data, *blocknr);
		return 0;
	}
	w->err = overlay_hold(w->ov, *blocknr, &jsb);
	if (!w->err && nx_journal_sb_empty(jsb))
		w->err = EXT2_ET_CORRUPT_JOURNAL_SB;
	return w->err ? BLOCK_ABORT : 0;
}

/*
 * A standalone image has an empty journal: its superblock says so and
 * its log reads as zeros (holes, not data).  A snapshot's journal blocks
 * read through to the live log, which a mounted volume keeps writing:
 * left as they were, the export would change with every commit, and a
 * kernel or e2fsck could find a live transaction to replay into the
 * snapshot.  (Only the journal's own blocks: its extent or indirect
 * blocks are metadata like any other.)
 */
static errcode_t empty_journal(ext2_filsys fs, struct overlay *ov,
			       ext2fs_block_bitmap data)
{
	struct journal_walk w = { ov, data, 0 };
	ext2_ino_t ino = fs->super->s_journal_inum;
	errcode_t err;

	if (!ext2fs_has_feature_journal(fs->super) || !ino)
		return 0;	/* none, or on another device */
	err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY |
				    BLOCK_FLAG_DATA_ONLY, NULL, journal_block,
				    &w);
	return err ? err : w.err;
}

/* Count DATA's blocks below LIMIT from FIRST (run by run). */
static blk64_t count_set(ext2fs_block_bitmap map, blk64_t first,
			 blk64_t limit)
{
	blk64_t n = 0, pos = first, s, e;

	while (pos < limit &&
	       !ext2fs_find_first_set_block_bitmap2(map, pos, limit - 1, &s)) {
		if (ext2fs_find_first_zero_block_bitmap2(map, s, limit - 1,
							 &e))
			e = limit;
		n += e - s;
		pos = e;
	}
	return n;
}

/*
 * Build the export of the snapshot SRC->view shows (taken at TAKEN), on
 * the overlay.  Without the volume lock: lower_read() takes it per read.
 */
static errcode_t build_export(struct nx_imgsrc *src, time_t taken)
{
	ext2_filsys efs = NULL;
	errcode_t err;
	size_t i;

	src->ov = overlay_new(src->view, src->bs);
	if (!src->ov)
		return EXT2_ET_NO_MEMORY;
	err = nx_bytechan_open_fs(&overlay_ops, src->ov, EXT2_FLAG_RW |
				  EXT2_FLAG_64BITS | EXT2_FLAG_FORCE |
				  EXT2_FLAG_SKIP_MMP, &efs);
	if (err)
		return err;
	/* Same snapshot, same bytes: times come from the take. */
	efs->now = taken;
	efs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	err = ext2fs_read_bitmaps(efs);
	if (!err)
		err = ext2fs_allocate_block_bitmap(efs, "exported", &src->data);
	if (!err)
		err = strip_snapshots(efs, src->data, src->id);
	if (!err)
		err = empty_journal(efs, src->ov, src->data);
	if (err) {
		efs->flags &= ~EXT2_FLAG_DIRTY;
		ext2fs_close_free(&efs);
		return err;
	}
	err = ext2fs_close_free(&efs);
	if (err)
		return err;
	/* Whatever the overlay holds is data, whatever the bitmap says. */
	for (i = 0; i < src->ov->nbufs; i++)
		if (src->ov->blks[i] >= src->first_data_block &&
		    src->ov->blks[i] < src->nblocks)
			ext2fs_mark_block_bitmap2(src->data, src->ov->blks[i]);
	src->ndata = src->first_data_block +
		     count_set(src->data, src->first_data_block, src->nblocks);
	return 0;
}

errcode_t nx_imgsrc_open_export_id(struct nx_volume *vol, uint32_t id,
				   struct nx_imgsrc **ret, char *msg,
				   size_t msglen)
{
	struct nx_imgsrc *src;
	struct nx_snapinfo info;
	errcode_t err;

	src = calloc(1, sizeof(*src));
	if (!src)
		return EXT2_ET_NO_MEMORY;
	src->kind = SRC_EXPORT;
	src->fd = -1;
	src->vol = vol;
	src->id = id;
	nx_volume_lock(vol);
	err = nx_snap_find_id(vol, id, &info);
	if (err)
		nx_set_msg(msg, msglen, "no snapshot with id %u", id);
	else if ((err = nx_snap_view_open(vol, info.ino, &src->view)))
		nx_set_msg(msg, msglen, "cannot open snapshot '%s': %s",
			   info.name, error_message(err));
	else
		set_geometry(src, src->view->fs);
	nx_volume_unlock(vol);
	if (!err) {
		err = build_export(src, info.taken.tv_sec);
		if (err)
			nx_set_msg(msg, msglen, "cannot prepare snapshot '%s' "
				   "for export: %s", info.name,
				   nx_errno(err) == ESTALE ? "it was deleted" :
				   error_message(err));
	}
	if (err) {
		nx_imgsrc_close(src);
		return err;
	}
	*ret = src;
	return 0;
}

errcode_t nx_imgsrc_open_export(struct nx_volume *vol, const char *name,
				struct nx_imgsrc **ret, char *msg,
				size_t msglen)
{
	struct nx_snapinfo info;
	errcode_t err;

	nx_volume_lock(vol);
	err = nx_snap_find(vol, name, &info);
	nx_volume_unlock(vol);
	if (err) {
		nx_set_msg(msg, msglen, "no snapshot named '%s'", name);
		return ENOENT;
	}
	return nx_imgsrc_open_export_id(vol, info.id, ret, msg, msglen);
}

/* ------------------------------------------------------------------ */
/* Reading an export.                                                  */

enum blk_kind { BLK_ZERO, BLK_META, BLK_VIEW };

/* What block BLK of the export is (volume lock held: bitmaps). */
static enum blk_kind block_kind(const struct nx_imgsrc *src, blk64_t blk)
{
	if (blk >= src->nblocks)
		return BLK_ZERO;
	if (overlay_block(src->ov, blk))
		return BLK_META;
	if (blk < src->first_data_block ||
	    ext2fs_test_block_bitmap2(src->data, blk))
		return BLK_VIEW;
	return BLK_ZERO;
}

/* Is the snapshot still there?  Its image must not outlive it. */
static errcode_t export_alive(const struct nx_imgsrc *src)
{
	return nx_snap_find_id(src->vol, src->id, NULL) ?
	       EXT2_ET_BAD_INODE_NUM : 0;
}

#define PLAN_MAX_RUN	(1U << 22)	/* bytes of one kind at a time */

static errcode_t export_plan(struct nx_imgsrc *src, char *buf, uint64_t len,
			     uint64_t off, struct nx_file_rd *rd)
{
	uint64_t pos = off, end = off + len, bs = src->bs;
	errcode_t err = 0;

	while (pos < end && !err) {
		blk64_t blk = pos / bs;
		enum blk_kind kind = block_kind(src, blk);
		uint64_t stop = (blk + 1) * bs;
		char *dst = buf + (pos - off);

		if (kind != BLK_META)
			while (stop < end && stop - pos < PLAN_MAX_RUN &&
			       block_kind(src, stop / bs) == kind)
				stop += bs;
		if (stop > end)
			stop = end;
		if (kind == BLK_ZERO)
			memset(dst, 0, stop - pos);
		else if (kind == BLK_META)
			memcpy(dst, overlay_block(src->ov, blk) +
			       (pos - blk * bs), stop - pos);
		else if (rd)
			err = nx_snap_view_plan(src->view, dst, stop - pos,
						pos, rd);
		else
			err = nx_snap_view_pread(src->view, dst, stop - pos,
						 pos);
		pos = stop;
	}
	return err;
}

/*
 * Past the end the image reads as zeros: those bytes of BUF are zeroed
 * and *LEN cut to what is left to read (0: nothing, returns 0).
 */
static int within_image(const struct nx_imgsrc *src, void *buf,
			uint64_t *len, uint64_t off)
{
	if (off >= src->size) {
		memset(buf, 0, *len);
		return 0;
	}
	if (*len > src->size - off) {
		memset((char *)buf + (src->size - off), 0,
		       *len - (src->size - off));
		*len = src->size - off;
	}
	return *len != 0;
}

errcode_t nx_imgsrc_plan(struct nx_imgsrc *src, void *buf, uint64_t len,
			 uint64_t off, struct nx_file_rd *rd)
{
	errcode_t err;

	if (rd) {
		memset(rd, 0, sizeof(*rd));
		rd->io = src->vol ? src->vol->io : NULL;
	}
	if (src->kind != SRC_EXPORT)
		return EINVAL;
	err = export_alive(src);
	if (err)
		return err;
	if (!within_image(src, buf, &len, off))
		return 0;
	err = export_plan(src, buf, len, off, rd);
	if (err && rd) {
		free(rd->seg);
		rd->seg = NULL;
		rd->n = 0;
	}
	return err;
}

errcode_t nx_imgsrc_read(struct nx_imgsrc *src, void *buf, uint64_t len,
			 uint64_t off)
{
	errcode_t err;

	if (src->kind == SRC_EXPORT) {
		nx_volume_lock(src->vol);
		err = nx_imgsrc_plan(src, buf, len, off, NULL);
		nx_volume_unlock(src->vol);
		return err;
	}
	if (!within_image(src, buf, &len, off))
		return 0;
	if (src->kind == SRC_LIVE)
		return live_read(src, buf, len, off);
	return pread_full(src->fd, buf, len, off);
}

/* SEEK_DATA/SEEK_HOLE of an image in a file, in blocks. */
static errcode_t file_next_data(struct nx_imgsrc *src, blk64_t blk,
				blk64_t *start, blk64_t *end)
{
	off_t d = lseek(src->fd, (off_t)(blk * src->bs), SEEK_DATA), h;

	if (d < 0) {
		if (errno != ENXIO)
			return errno;
		*start = *end = src->nblocks;
		return 0;
	}
	h = lseek(src->fd, d, SEEK_HOLE);
	if (h < 0)
		return errno;
	*start = (blk64_t)d / src->bs;
	*end = ((blk64_t)h + src->bs - 1) / src->bs;
	/* A file system that answers nonsense still gets read through. */
	if (*start < blk)
		*start = blk;
	if (*end <= *start)
		*end = *start + 1;
	if (*end > src->nblocks)
		*end = src->nblocks;
	if (*start > *end)
		*start = *end;
	return 0;
}

static errcode_t next_data(struct nx_imgsrc *src, blk64_t blk,
			   blk64_t *start, blk64_t *end)
{
	blk64_t last = src->nblocks - 1, s, e;

	*start = *end = src->nblocks;
	if (blk >= src->nblocks)
		return 0;
	if (src->kind == SRC_LIVE) {
		*start = blk;
		return 0;
	}
	if (src->kind == SRC_FILE)
		return file_next_data(src, blk, start, end);
	if (blk < src->first_data_block) {
		/* The boot block of 1 KiB volumes, then the bitmap's range. */
		*start = blk;
		blk = src->first_data_block;
		if (blk > last ||
		    !ext2fs_test_block_bitmap2(src->data, blk)) {
			*end = blk;
			return 0;
		}
		s = blk;
	} else if (ext2fs_find_first_set_block_bitmap2(src->data, blk, last,
						       &s)) {
		return 0;
	} else {
		*start = s;
	}
	if (ext2fs_find_first_zero_block_bitmap2(src->data, s, last, &e))
		e = src->nblocks;
	*end = e;
	return 0;
}

errcode_t nx_imgsrc_next_data(struct nx_imgsrc *src, blk64_t blk,
			      blk64_t *start, blk64_t *end)
{
	errcode_t err;

	if (src->kind != SRC_EXPORT)
		return next_data(src, blk, start, end);
	nx_volume_lock(src->vol);
	err = next_data(src, blk, start, end);
	nx_volume_unlock(src->vol);
	return err;
}

errcode_t nx_imgsrc_seek(struct nx_imgsrc *src, uint64_t off, int whence,
			 uint64_t *result)
{
	blk64_t s, e;
	errcode_t err;

	if (off >= src->size)
		return ENXIO;
	if (src->kind == SRC_EXPORT && (err = export_alive(src)))
		return err;
	err = next_data(src, off / src->bs, &s, &e);
	if (err)
		return err;
	if (whence == SEEK_DATA) {
		if (s >= src->nblocks)
			return ENXIO;
		*result = s * (uint64_t)src->bs > off ? s * (uint64_t)src->bs :
			  off;
		return 0;
	}
	if (whence != SEEK_HOLE)
		return EINVAL;
	/* OFF in a hole is its own answer; in data, the run's end. */
	if (s > off / src->bs)
		*result = off;
	else
		*result = e * (uint64_t)src->bs < src->size ?
			  e * (uint64_t)src->bs : src->size;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Sizes without an export.                                            */

static blk64_t inode_blocks(ext2_filsys fs, ext2_ino_t ino)
{
	struct ext2_inode inode;

	if (!ino || ino > fs->super->s_inodes_count ||
	    ext2fs_read_inode(fs, ino, &inode))
		return 0;
	return ext2fs_get_stat_i_blocks(fs, &inode) / (fs->blocksize / 512);
}

errcode_t nx_imgsrc_estimate(struct nx_volume *vol, uint32_t id,
			     blk64_t *blocks)
{
	struct nx_volume *view;
	struct ext2_inode inode;
	ext2_filsys fs;
	ext2_ino_t ino;
	blk64_t used, less = 0;
	dgrp_t g;
	int hops = 0;
	errcode_t err = nx_snap_view_get(vol, id, &view);

	if (err)
		return err;
	fs = view->fs;
	/* The descriptors' counts: the superblock's total is only a hint. */
	used = ext2fs_blocks_count(fs->super) - fs->super->s_first_data_block;
	for (g = 0; g < fs->group_desc_count; g++)
		used -= ext2fs_bg_free_blocks_count(fs, g);
	/* What the export leaves out: the snapshot files as at the take, */
	for (ino = fs->super->s_snapshot_list;
	     ino >= EXT2_FIRST_INODE(fs->super) &&
	     ino <= fs->super->s_inodes_count && hops++ < 4096;
	     ino = snap_next(&inode)) {
		if (ext2fs_read_inode(fs, ino, &inode) ||
		    !(inode.i_flags & EXT4_SNAPFILE_FL))
			break;
		less += ext2fs_get_stat_i_blocks(fs, &inode) /
			(fs->blocksize / 512);
	}
	/* their directory, */
	less += inode_blocks(fs, nx_snap_dir_ino(vol));
	/* and the journal's log (its superblock stays). */
	if (ext2fs_has_feature_journal(fs->super) &&
	    fs->super->s_journal_inum &&
	    !ext2fs_read_inode(fs, fs->super->s_journal_inum, &inode) &&
	    EXT2_I_SIZE(&inode) >= fs->blocksize)
		less += EXT2_I_SIZE(&inode) / fs->blocksize - 1;
	*blocks = fs->super->s_first_data_block +
		  (used > less ? used - less : 0);
	return 0;
}

/* ------------------------------------------------------------------ */
/* What differs between two exports.                                   */

/* Mark into TO the blocks in [FIRST, LIMIT) set in FROM and clear in NOT
 * (NOT NULL: every block set in FROM), run by run. */
static errcode_t mark_runs(ext2fs_block_bitmap from, ext2fs_block_bitmap not,
			   blk64_t first, blk64_t limit,
			   ext2fs_block_bitmap to)
{
	blk64_t pos = first, s, e, z, q;

	while (pos < limit &&
	       !ext2fs_find_first_set_block_bitmap2(from, pos, limit - 1,
						    &s)) {
		if (ext2fs_find_first_zero_block_bitmap2(from, s, limit - 1,
							 &e))
			e = limit;
		for (z = s; not && z < e; z = q) {
			if (ext2fs_find_first_zero_block_bitmap2(not, z, e - 1,
								 &z))
				break;
			if (ext2fs_find_first_set_block_bitmap2(not, z, e - 1,
								&q))
				q = e;
			ext2fs_mark_block_bitmap_range2(to, z, q - z);
		}
		if (!not)
			ext2fs_mark_block_bitmap_range2(to, s, e - s);
		pos = e;
	}
	return 0;
}

/* The snapshots from the older of A and B up to (not with) the newer. */
static void chain_span(const struct nx_imgsrc *a, const struct nx_imgsrc *b,
		       int *from, int *to)
{
	struct nx_snapstore *store = a->vol->snap;
	uint32_t lo = a->id < b->id ? a->id : b->id;
	uint32_t hi = a->id < b->id ? b->id : a->id;

	*from = nx_snap_seek(store, lo);
	*to = nx_snap_seek(store, hi);
}

/*
 * Blocks where the exports of OLD and NEW may differ: those a snapshot of
 * the span maps (it preserved them: they changed between the takes),
 * those only one export uses, and the fixed-up metadata of either.
 * Everywhere else both views read the same device block.
 */
static errcode_t build_diff(struct nx_imgsrc *old, struct nx_imgsrc *new)
{
	struct nx_snapstore *store = new->vol->snap;
	blk64_t fdb = new->first_data_block, lim = new->nblocks;
	int i, from, to;
	size_t k;
	errcode_t err;

	if (new->diff)
		ext2fs_free_block_bitmap(new->diff);
	new->diff = NULL;
	new->view->fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	err = ext2fs_allocate_block_bitmap(new->view->fs, "may differ",
					   &new->diff);
	if (err)
		return err;
	chain_span(old, new, &from, &to);
	for (i = from; i < to; i++)
		mark_runs(store->snaps[i]->mapped, NULL, fdb, lim, new->diff);
	mark_runs(new->data, old->data, fdb, lim, new->diff);
	mark_runs(old->data, new->data, fdb, lim, new->diff);
	for (k = 0; k < new->ov->nbufs; k++)
		if (new->ov->blks[k] >= fdb && new->ov->blks[k] < lim)
			ext2fs_mark_block_bitmap2(new->diff, new->ov->blks[k]);
	for (k = 0; k < old->ov->nbufs; k++)
		if (old->ov->blks[k] >= fdb && old->ov->blks[k] < lim)
			ext2fs_mark_block_bitmap2(new->diff, old->ov->blks[k]);
	new->diff_id = old->id;
	return 0;
}

/* Does a snapshot of the span map BLK? */
static int span_maps(const struct nx_imgsrc *old, const struct nx_imgsrc *new,
		     blk64_t blk)
{
	struct nx_snapstore *store = new->vol->snap;
	int i, from, to;

	chain_span(old, new, &from, &to);
	for (i = from; i < to; i++)
		if (ext2fs_test_block_bitmap2(store->snaps[i]->mapped, blk))
			return 1;
	return 0;
}

/* 0 (the same), NX_IMG_WRITE or NX_IMG_ZERO for block BLK. */
static errcode_t classify(struct nx_imgsrc *old, struct nx_imgsrc *new,
			  blk64_t blk, char *a, char *b, int *kind)
{
	enum blk_kind kn = block_kind(new, blk), ko = block_kind(old, blk);
	errcode_t err;

	*kind = 0;
	if (kn == BLK_ZERO) {
		if (ko != BLK_ZERO)
			*kind = NX_IMG_ZERO;
		return 0;
	}
	if (ko == BLK_ZERO) {
		*kind = NX_IMG_WRITE;
		return 0;
	}
	if (kn == BLK_VIEW && ko == BLK_VIEW) {
		*kind = span_maps(old, new, blk) ? NX_IMG_WRITE : 0;
		return 0;
	}
	/* Fixed-up metadata on either side: compare the bytes. */
	err = export_plan(new, a, new->bs, blk * new->bs, NULL);
	if (!err)
		err = export_plan(old, b, old->bs, blk * old->bs, NULL);
	if (!err && memcmp(a, b, new->bs))
		*kind = NX_IMG_WRITE;
	return err;
}

errcode_t nx_imgsrc_changes(struct nx_imgsrc *old, struct nx_imgsrc *new,
			    blk64_t start, struct nx_img_run *runs,
			    size_t max, size_t *n, blk64_t *next)
{
	blk64_t pos, last = new->nblocks - 1, s, e, blk;
	char *a = NULL, *b = NULL;
	errcode_t err;
	int kind;

	*n = 0;
	*next = new->nblocks;
	if (old->kind != SRC_EXPORT || new->kind != SRC_EXPORT ||
	    old->vol != new->vol || old->bs != new->bs ||
	    old->nblocks != new->nblocks || !max)
		return EINVAL;
	err = export_alive(old);
	if (!err)
		err = export_alive(new);
	if (!err && (!new->diff || new->diff_id != old->id))
		err = build_diff(old, new);
	if (err)
		return err;
	a = malloc(new->bs);
	b = malloc(new->bs);
	if (!a || !b) {
		err = EXT2_ET_NO_MEMORY;
		goto out;
	}
	pos = start > new->first_data_block ? start : new->first_data_block;
	while (pos <= last &&
	       !ext2fs_find_first_set_block_bitmap2(new->diff, pos, last, &s)) {
		if (ext2fs_find_first_zero_block_bitmap2(new->diff, s, last,
							 &e))
			e = new->nblocks;
		for (blk = s; blk < e; blk++) {
			struct nx_img_run *r = *n ? &runs[*n - 1] : NULL;

			err = classify(old, new, blk, a, b, &kind);
			if (err)
				goto out;
			if (!kind)
				continue;
			if (r && r->kind == kind && r->blk + r->len == blk) {
				r->len++;
				continue;
			}
			if (*n == max) {
				*next = blk;
				goto out;
			}
			runs[*n].blk = blk;
			runs[*n].len = 1;
			runs[(*n)++].kind = kind;
		}
		pos = e;
	}
out:
	free(a);
	free(b);
	return err;
}
