/*
 * export.c - byte images of a volume for tools that know nothing about
 * snapshots: the live volume with HAS_SNAPSHOT masked (what a stock
 * e2fsck must see), and a snapshot as a standalone ext image.
 *
 * Export without copying the source: the snapshot's view is opened a
 * second time as a read-write libext2fs file system on an "overlay"
 * device (bytechan.h) that reads through the view and keeps every write
 * in memory.
 * On that file system the snapshot files, /.snapshots and the inodes on
 * the orphan list (open but unlinked at the take) are removed, the
 * block bitmap is rebuilt from what the remaining inodes own (the snapshot
 * files' own block maps are not trusted: an older snapshot's extent tree
 * is not preserved in a newer snapshot's view), and the snapshot fields
 * are cleared.  The image is then: the overlay's blocks where it has
 * them, the view's blocks where they are in use, zeros elsewhere.
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
#include <et/com_err.h>
#include "nextfs/bytechan.h"
#include "nextfs/fdio.h"
#include "nextfs/grow.h"
#include "nextfs/snaptool.h"
#include "snap_internal.h"

/* ------------------------------------------------------------------ */
/* The overlay: writes kept in memory over the snapshot view.        */

struct overlay {
	io_channel lower;		/* the snapshot view (not owned) */
	unsigned unit;			/* = the file system block size */
	struct nx_blkmap slot;		/* block -> index into bufs */
	char **bufs;
	size_t nbufs, cap;
};

static char *overlay_block(struct overlay *ov, blk64_t blk)
{
	blk64_t i;

	return nx_blkmap_get(&ov->slot, blk, &i) ? ov->bufs[i] : NULL;
}

static errcode_t lower_read(struct overlay *ov, blk64_t blk, blk64_t n,
			    char *buf)
{
	return io_channel_read_blk64(ov->lower, blk, (int)n, buf);
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
	errcode_t err;

	if (b) {
		*ret = b;
		return 0;
	}
	if (nx_grow((void **)&ov->bufs, &ov->cap, ov->nbufs, sizeof(*ov->bufs),
		    64))
		return EXT2_ET_NO_MEMORY;
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
	ov->bufs[ov->nbufs++] = b;
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
	nx_blkmap_free(&ov->slot);
	free(ov);
}

static struct overlay *overlay_new(io_channel lower, unsigned unit)
{
	struct overlay *ov = calloc(1, sizeof(*ov));

	if (!ov)
		return NULL;
	ov->lower = lower;
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

enum src_kind { SRC_LIVE, SRC_EXPORT };

struct nx_imgsrc {
	enum src_kind kind;
	uint64_t size;
	unsigned bs;
	blk64_t first_data_block;
	/* SRC_LIVE */
	struct nx_rawvol *raw;		/* holds the lock */
	int fd;
	struct ext2_super_block sb;	/* masked primary superblock */
	/* SRC_EXPORT */
	struct nx_volume *view;		/* owned */
	struct overlay *ov;		/* owned */
	ext2fs_block_bitmap used;	/* blocks the exported image uses */
};

uint64_t nx_imgsrc_size(const struct nx_imgsrc *src)
{
	return src->size;
}

static void mask_superblock(struct ext2_super_block *sb)
{
	sb->s_feature_ro_compat &= ~EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT;
	sb->s_flags &= ~EXT2_FLAGS_IS_SNAPSHOT;
	if (sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb->s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)sb,
				offsetof(struct ext2_super_block, s_checksum));
}

errcode_t nx_imgsrc_open_live(const char *device, struct nx_imgsrc **ret,
			      char *msg, size_t msglen)
{
	struct nx_imgsrc *src = calloc(1, sizeof(*src));
	errcode_t err;
	ext2_filsys fs;

	if (!src)
		return EXT2_ET_NO_MEMORY;
	src->kind = SRC_LIVE;
	src->fd = -1;
	err = nx_raw_open(device, 0, &src->raw, msg, msglen);
	if (err) {
		free(src);
		return err;
	}
	fs = src->raw->fs;
	src->bs = fs->blocksize;
	src->size = ext2fs_blocks_count(fs->super) * (uint64_t)fs->blocksize;
	src->first_data_block = fs->super->s_first_data_block;
	src->fd = open(device, O_RDONLY | O_CLOEXEC);
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

static errcode_t live_read(struct nx_imgsrc *src, char *buf, uint64_t len,
			   uint64_t off)
{
	size_t done;
	errcode_t err = nx_read_full(src->fd, buf, len, (off_t)off, &done);

	if (err)
		return err;
	memset(buf + done, 0, len - done);	/* a short image */
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

/* Is block BLK part of the exported image (else it reads as zeros)? */
static int block_present(const struct nx_imgsrc *src, blk64_t blk)
{
	if (src->kind == SRC_LIVE || blk < src->first_data_block)
		return 1;
	if (overlay_block(src->ov, blk))
		return 1;
	return ext2fs_test_block_bitmap2(src->used, blk) != 0;
}

static errcode_t export_read(struct nx_imgsrc *src, char *buf, uint64_t len,
			     uint64_t off)
{
	uint64_t pos = off, end = off + len;

	while (pos < end) {
		blk64_t blk = pos / src->bs;
		int present = block_present(src, blk);
		uint64_t chunk = (blk + 1) * src->bs - pos;

		/* Extend over following blocks of the same kind. */
		while (pos + chunk < end && chunk < (1U << 22) &&
		       block_present(src, (pos + chunk) / src->bs) == present)
			chunk += src->bs;
		if (chunk > end - pos)
			chunk = end - pos;
		if (!present) {
			memset(buf + (pos - off), 0, chunk);
		} else {
			errcode_t err = overlay_read(src->ov,
						     buf + (pos - off), pos,
						     chunk);
			if (err)
				return err;
		}
		pos += chunk;
	}
	return 0;
}

errcode_t nx_imgsrc_read(struct nx_imgsrc *src, void *buf, uint64_t len,
			 uint64_t off)
{
	if (off >= src->size)
		return 0;
	if (len > src->size - off) {
		memset((char *)buf + (src->size - off), 0,
		       len - (src->size - off));
		len = src->size - off;
	}
	if (src->kind == SRC_LIVE)
		return live_read(src, buf, len, off);
	return export_read(src, buf, len, off);
}

void nx_imgsrc_close(struct nx_imgsrc *src)
{
	if (!src)
		return;
	if (src->fd >= 0)
		close(src->fd);
	nx_raw_close(src->raw);
	if (src->used)
		ext2fs_free_block_bitmap(src->used);
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

static void clear_snapshot_fields(ext2_filsys fs)
{
	struct ext2_super_block *sb = fs->super;

	ext2fs_clear_feature_has_snapshot(sb);
	sb->s_snapshot_inum = 0;
	sb->s_snapshot_id = 0;
	sb->s_snapshot_r_blocks_count = 0;
	sb->s_snapshot_list = 0;
	sb->s_flags &= ~EXT2_FLAGS_IS_SNAPSHOT;
	/* A consistent image of its own: clean, like after an unmount. */
	sb->s_state |= EXT2_VALID_FS;
	ext2fs_clear_feature_journal_needs_recovery(sb);
	ext2fs_mark_super_dirty(fs);
}

static errcode_t strip_snapshots(ext2_filsys fs, ext2fs_block_bitmap used)
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
	clear_snapshot_fields(fs);
out:
	free(st.drop);
	return err;
}

errcode_t nx_imgsrc_open_export(struct nx_volume *vol, const char *name,
				struct nx_imgsrc **ret, char *msg,
				size_t msglen)
{
	struct nx_imgsrc *src;
	struct nx_snapinfo info;
	ext2_filsys efs = NULL;
	errcode_t err;

	if (nx_snap_find(vol, name, &info)) {
		nx_set_msg(msg, msglen, "no snapshot named '%s'", name);
		return ENOENT;
	}
	src = calloc(1, sizeof(*src));
	if (!src)
		return EXT2_ET_NO_MEMORY;
	src->kind = SRC_EXPORT;
	src->fd = -1;
	err = nx_snap_view_open(vol, info.ino, &src->view);
	if (err) {
		nx_set_msg(msg, msglen, "cannot open snapshot '%s': %s", name,
			error_message(err));
		goto fail;
	}
	src->bs = src->view->fs->blocksize;
	src->size = ext2fs_blocks_count(src->view->fs->super) *
		    (uint64_t)src->bs;
	src->first_data_block = src->view->fs->super->s_first_data_block;
	src->ov = overlay_new(src->view->fs->io, src->bs);
	if (!src->ov) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	err = nx_bytechan_open_fs(&overlay_ops, src->ov, EXT2_FLAG_RW |
				  EXT2_FLAG_64BITS | EXT2_FLAG_FORCE |
				  EXT2_FLAG_SKIP_MMP, &efs);
	if (!err) {
		/* Same snapshot, same bytes: times come from the take. */
		efs->now = info.taken.tv_sec;
		efs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
		err = ext2fs_read_bitmaps(efs);
	}
	if (!err)
		err = ext2fs_allocate_block_bitmap(efs, "exported",
						   &src->used);
	if (!err)
		err = strip_snapshots(efs, src->used);
	if (err) {
		nx_set_msg(msg, msglen, "cannot prepare snapshot '%s' for export: "
			"%s", name, error_message(err));
		goto fail;
	}
	err = ext2fs_close_free(&efs);
	if (err) {
		nx_set_msg(msg, msglen, "cannot prepare snapshot '%s' for export: "
			"%s", name, error_message(err));
		goto fail;
	}
	*ret = src;
	return 0;
fail:
	if (efs) {
		efs->flags &= ~EXT2_FLAG_DIRTY;
		ext2fs_close_free(&efs);
	}
	nx_imgsrc_close(src);
	return err;
}

/* ------------------------------------------------------------------ */
/* Writing an image out.                                               */

#define WRITE_CHUNK_BLOCKS 256

static int all_zero(const char *buf, size_t len)
{
	return !len || (!buf[0] && !memcmp(buf, buf + 1, len - 1));
}

/* Write BUF (RUN blocks at block BLK), leaving all-zero blocks as holes. */
static errcode_t write_sparse(int fd, const char *buf, blk64_t blk,
			      blk64_t run, unsigned bs)
{
	blk64_t i = 0;
	errcode_t err = 0;

	while (i < run && !err) {
		blk64_t j = i;
		int zero = all_zero(buf + i * bs, bs);

		while (j < run && all_zero(buf + j * bs, bs) == zero)
			j++;
		if (!zero)
			err = nx_write_all(fd, buf + i * bs, (j - i) * bs,
					   (off_t)((blk + i) * bs), NULL);
		i = j;
	}
	return err;
}

errcode_t nx_imgsrc_write(struct nx_imgsrc *src, int fd, int how,
			  const struct nx_progress *prog)
{
	blk64_t nblocks = src->size / src->bs, blk = 0;
	char *buf = malloc((size_t)src->bs * WRITE_CHUNK_BLOCKS);
	errcode_t err = 0;

	if (!buf)
		return ENOMEM;
	while (blk < nblocks && !err) {
		int present = block_present(src, blk);
		blk64_t run = 1;
		size_t len;

		while (blk + run < nblocks && run < WRITE_CHUNK_BLOCKS &&
		       block_present(src, blk + run) == present)
			run++;
		len = run * src->bs;
		if (present)
			err = nx_imgsrc_read(src, buf, len, blk * src->bs);
		else if (how == NX_WRITE_STREAM)
			memset(buf, 0, len);
		if (err)
			break;
		if (how == NX_WRITE_STREAM)
			err = nx_write_all(fd, buf, len, NX_FD_POS, NULL);
		else if (present && how == NX_WRITE_FILE)
			err = write_sparse(fd, buf, blk, run, src->bs);
		else if (present)
			err = nx_write_all(fd, buf, len,
					   (off_t)(blk * src->bs), NULL);
		blk += run;
		if (prog && prog->fn)
			prog->fn(prog->priv, "writing", blk, nblocks);
	}
	if (!err && how == NX_WRITE_FILE &&
	    ftruncate(fd, (off_t)src->size) < 0)
		err = errno;
	if (!err && how != NX_WRITE_STREAM && fsync(fd) < 0)
		err = errno;
	free(buf);
	return err;
}
