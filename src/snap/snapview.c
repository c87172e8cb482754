/*
 * snapview.c - read-only views of snapshots.
 *
 * A view is an ordinary libext2fs filesystem opened on an io_manager of
 * ours that resolves each block N the way Next3 defined it: the viewed
 * snapshot's own copy of N if it has one, else the next newer snapshot's,
 * ..., else the live device.  Everything above (inodes, directories, the
 * file data path) then works unchanged on the view.  The superblock read
 * through a view carries EXT2_FLAGS_IS_SNAPSHOT.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/blkio.h"
#include "nextfs/bytechan.h"
#include "nextfs/file.h"
#include "snap_internal.h"

struct view_ctx {
	struct nx_snapstore *store;
	uint32_t id;			/* which snapshot (index looked up per read) */
};

/* The viewed snapshot's index now, or -1 once it has been deleted. */
static int view_index(const struct view_ctx *v)
{
	int i = nx_snap_seek(v->store, v->id);

	return i < v->store->nsnaps && v->store->snaps[i]->id == v->id &&
	       !v->store->snaps[i]->deleted ? i : -1;
}

/* Mark a superblock read through a view as a snapshot image. */
static void patch_superblock(struct view_ctx *v, char *buf, uint64_t off,
			     uint64_t len)
{
	struct ext2_super_block sb;
	ext2_filsys fs = v->store->vol->fs;

	if (off > SUPERBLOCK_OFFSET || off + len < SUPERBLOCK_OFFSET +
	    SUPERBLOCK_SIZE)
		return;
	memcpy(&sb, buf + (SUPERBLOCK_OFFSET - off), sizeof(sb));
	if (sb.s_magic != EXT2_SUPER_MAGIC)
		return;
	sb.s_flags |= EXT2_FLAGS_IS_SNAPSHOT;
	/*
	 * Taken while mounted, the superblock says "replay the journal";
	 * a snapshot is a consistent image whose log is empty (its journal
	 * blocks read through to the live, checkpointed log).
	 */
	ext2fs_clear_feature_journal_needs_recovery(&sb);
	if (ext2fs_has_feature_metadata_csum(&sb))
		ext2fs_superblock_csum_set(fs, &sb);
	memcpy(buf + (SUPERBLOCK_OFFSET - off), &sb, sizeof(sb));
}

/* Cut *LEN so that no block of [N, N + *LEN) is set in MAP. */
static void cut_at_set(ext2fs_block_bitmap map, blk64_t n, blk64_t *len)
{
	blk64_t hit;
	errcode_t err;

	if (*len <= 1)
		return;
	err = ext2fs_find_first_set_block_bitmap2(map, n + 1, n + *len - 1,
						  &hit);
	if (!err)
		*len = hit - n;
	else if (err != ENOENT)
		*len = 1;	/* cannot tell: block by block */
}

/* Cut *LEN so that every block of [N, N + *LEN) is set in MAP. */
static void cut_at_zero(ext2fs_block_bitmap map, blk64_t n, blk64_t *len)
{
	blk64_t hit;
	errcode_t err;

	if (*len <= 1)
		return;
	err = ext2fs_find_first_zero_block_bitmap2(map, n + 1, n + *len - 1,
						   &hit);
	if (!err)
		*len = hit - n;
	else if (err != ENOENT)
		*len = 1;
}

/*
 * N is a block the active snapshot (index I) holds as moved, not yet in
 * its inode: *LEN becomes the run of such blocks from N (<= MAX), cut
 * where a snapshot between IDX and I maps a block of its own (it would
 * answer first).
 */
static void moved_run(struct nx_snapstore *store, int idx, int i, blk64_t n,
		      blk64_t *len, blk64_t max)
{
	int j;

	*len = max;
	cut_at_zero(store->moved, n, len);
	for (j = idx; j < i; j++)
		cut_at_set(store->snaps[j]->mapped, n, len);
}

/*
 * Where snapshot S's file maps N: *PHYS onwards for *LEN blocks, or
 * *PHYS = 0 for a hole.  From the cached map (mapcache.c) when it can
 * answer, else one extent lookup on the device (block by block for a
 * block-mapped file).
 */
static errcode_t file_run(struct nx_snapstore *store, struct nx_snap *s,
			  blk64_t n, blk64_t *phys, blk64_t *len)
{
	ext2_filsys fs = store->vol->fs;
	struct ext2fs_extent ex;
	ext2_extent_handle_t h;
	errcode_t err;

	*phys = 0;
	*len = 1;
	if (nx_mapcache_lookup(store, s, n, phys, len))
		return 0;
	err = ext2fs_extent_open2(fs, s->ino, NULL, &h);
	if (err == EXT2_ET_INODE_NOT_EXTENT)
		return ext2fs_bmap2(fs, s->ino, NULL, NULL, 0, n, NULL, phys);
	if (err)
		return err;
	err = ext2fs_extent_goto(h, n);
	if (!err)
		err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &ex);
	ext2fs_extent_free(h);
	if (err == EXT2_ET_EXTENT_NOT_FOUND || err == EXT2_ET_EXTENT_NO_NEXT)
		return 0;	/* mapped bit, but a hole */
	if (err)
		return err;
	if (n < ex.e_lblk || n >= ex.e_lblk + ex.e_len)
		return 0;
	*phys = ex.e_pblk + (n - ex.e_lblk);
	*len = ex.e_lblk + ex.e_len - n;
	return 0;
}

/*
 * nx_snap_resolve() for a run: the first *LEN (<= MAX, >= 1) blocks from
 * N all come from the same place - the same snapshot file's extent, or
 * the live device - and so resolve to *PHYS onwards.  One extent lookup
 * per run instead of one ext2fs_bmap2() per block.  Blocks where another
 * snapshot might answer end the run; the next call resolves them anew.
 */
static errcode_t resolve_run(struct nx_snapstore *store, int idx, blk64_t n,
			     blk64_t max, blk64_t *phys, blk64_t *len)
{
	ext2_filsys fs = store->vol->fs;
	blk64_t count = ext2fs_blocks_count(fs->super), b, k, got;
	errcode_t err;
	int i, j;

	*phys = n;
	*len = 1;
	if (n < fs->super->s_first_data_block || n >= count)
		return 0;
	if (max > count - n)
		max = count - n;
	for (i = idx; i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];

		if (!ext2fs_test_block_bitmap2(s->mapped, n))
			continue;
		if (s == store->active && nx_pending_get(store, n, &b)) {
			*phys = b;
			if (b == n && store->nmoved)
				moved_run(store, idx, i, n, len, max);
			return 0;	/* other pending entries: one at a time */
		}
		err = file_run(store, s, n, &b, &got);
		if (err)
			return err;
		if (!b)
			continue;	/* mapped bit, but a hole: next one */
		*phys = b;
		*len = got < max ? got : max;
		/* Newer-first order: an older snapshot answering ends it. */
		for (j = idx; j < i; j++)
			cut_at_set(store->snaps[j]->mapped, n, len);
		cut_at_zero(s->mapped, n, len);
		if (s == store->active)
			for (k = 1; k < *len; k++)
				if (nx_pending_get(store, n + k, &b)) {
					*len = k;
					break;
				}
		return 0;
	}
	/* Nobody keeps N: the live block, as long as that holds. */
	*len = max;
	for (j = idx; j < store->nsnaps; j++)
		cut_at_set(store->snaps[j]->mapped, n, len);
	return 0;
}

/*
 * Physical block that holds N as snapshot IDX saw it.  Called with the
 * live volume locked.
 */
errcode_t nx_snap_resolve(struct nx_snapstore *store, int idx, blk64_t n,
			  blk64_t *phys)
{
	blk64_t len;

	return resolve_run(store, idx, n, 1, phys, &len);
}

/*
 * Bytes [OFF, OFF + LEN) of the view: each run resolves to live device
 * blocks, which are read now, or, with RD, planned to be read later
 * outside the lock (file.h) unless the live transaction holds them.
 */
static errcode_t view_bytes(struct view_ctx *v, char *buf, uint64_t off,
			    uint64_t len, struct nx_file_rd *rd)
{
	struct nx_snapstore *store = v->store;
	struct nx_blkio *io = store->vol->io;
	uint64_t bs = store->vol->fs->blocksize, pos = off, end = off + len;
	int idx = view_index(v);
	errcode_t err;

	if (idx < 0)
		return EXT2_ET_BAD_INODE_NUM;	/* snapshot deleted meanwhile */
	while (pos < end) {
		blk64_t n = pos / bs, phys, run_phys, got, want;
		uint64_t in_blk = pos - n * bs;
		uint64_t chunk, dev;

		want = (end - n * bs + bs - 1) / bs;
		err = resolve_run(store, idx, n, want, &phys, &got);
		if (err)
			return err;
		/* Extend over following runs that continue on disk. */
		run_phys = phys + got;
		n += got;
		while (n * bs < end) {
			blk64_t next, more;

			err = resolve_run(store, idx, n, want - (n - pos / bs),
					  &next, &more);
			if (err)
				return err;
			if (next != run_phys)
				break;
			n += more;
			run_phys += more;
		}
		chunk = n * bs - pos;
		if (pos + chunk > end)
			chunk = end - pos;
		dev = phys * bs + in_blk;
		/* patch_superblock() rewrites its bytes: those read now. */
		if (rd && pos >= SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE &&
		    !nx_blkio_range_held(io, dev, chunk))
			err = nx_file_rd_add(rd, dev, buf + (pos - off), chunk);
		else
			err = nx_blkio_pread(io, buf + (pos - off), chunk, dev);
		if (err)
			return err;
		pos += chunk;
	}
	patch_superblock(v, buf, off, len);
	return 0;
}

/* The device under a view's libext2fs filesystem (bytechan.h). */
static errcode_t view_read_bytes(void *priv, void *buf, uint64_t off,
				 uint64_t len)
{
	return view_bytes(priv, buf, off, len, NULL);
}

static const struct nx_bytechan_ops view_ops = { .read = view_read_bytes };

/* Open snapshot ID as a read-only libext2fs filesystem. */
static errcode_t open_view_fs(struct nx_snapstore *store, uint32_t id,
			      ext2_filsys *ret, struct view_ctx **ctx)
{
	struct view_ctx *v;
	errcode_t err;

	v = calloc(1, sizeof(*v));
	if (!v)
		return EXT2_ET_NO_MEMORY;
	v->store = store;
	v->id = id;
	err = nx_bytechan_open_fs(&view_ops, v, EXT2_FLAG_64BITS |
				  EXT2_FLAG_SKIP_MMP, ret);
	if (err) {
		free(v);
		return err;
	}
	*ctx = v;
	return 0;
}

static void close_view_fs(ext2_filsys fs, struct view_ctx *v)
{
	ext2fs_close_free(&fs);
	free(v);
}

errcode_t nx_snap_read_take_bitmap(struct nx_snapstore *store, int idx,
				   ext2fs_block_bitmap *map)
{
	struct view_ctx *v;
	ext2_filsys vfs;
	errcode_t err;

	if (idx < 0)
		return EXT2_ET_BAD_INODE_NUM;
	err = open_view_fs(store, store->snaps[idx]->id, &vfs, &v);
	if (err)
		return err;
	vfs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* see volume.c */
	err = ext2fs_read_block_bitmap(vfs);
	if (!err)
		err = ext2fs_copy_bitmap(vfs->block_map, map);
	close_view_fs(vfs, v);
	return err;
}

static const struct nx_volume_hooks view_hooks = {
	.pread = nx_snap_view_pread,
};

errcode_t nx_snap_view_open(struct nx_volume *vol, ext2_ino_t snap_ino,
			    struct nx_volume **ret)
{
	int idx = vol->snap ? nx_snap_index(vol->snap, snap_ino) : -1;
	struct nx_volume *view;
	struct view_ctx *v;
	errcode_t err;

	if (idx < 0)
		return ENOENT;
	view = calloc(1, sizeof(*view));
	if (!view)
		return EXT2_ET_NO_MEMORY;
	err = open_view_fs(vol->snap, vol->snap->snaps[idx]->id, &view->fs,
			   &v);
	if (err) {
		free(view);
		return err;
	}
	view->fs->priv_data = v;
	view->device = NULL;
	view->flags = NX_VOL_RDONLY;
	view->lock_fd = -1;
	view->io = NULL;
	view->snap = NULL;
	view->parent = vol;
	/* Its blocks are where the snapshot keeps them: ask this layer. */
	nx_volume_set_hooks(view, &view_hooks);
	view->overwrite = &nx_snap_overwrite_ops;
	pthread_mutex_init(&view->lock, NULL);
	*ret = view;
	return 0;
}

errcode_t nx_snap_view_pread(struct nx_volume *view, void *buf, uint64_t len,
			     uint64_t offset)
{
	return view_read_bytes(view->fs->priv_data, buf, offset, len);
}

errcode_t nx_snap_view_plan(struct nx_volume *view, void *buf, uint64_t len,
			    uint64_t offset, struct nx_file_rd *rd)
{
	return view_bytes(view->fs->priv_data, buf, offset, len, rd);
}

void nx_snap_view_close(struct nx_volume *view)
{
	if (!view)
		return;
	close_view_fs(view->fs, view->fs->priv_data);
	pthread_mutex_destroy(&view->lock);
	free(view);
}

/* ------------------------------------------------------------------ */
/* Prefetching for many views at once                                  */

/*
 * The logical blocks that opening a view and stat'ing its root read:
 * the superblock, the group descriptors (the first few: a hint) and the
 * inode-table block that holds the root inode.
 */
#define PREFETCH_MAX_BLOCKS	8

static int view_open_blocks(ext2_filsys fs, blk64_t *out)
{
	blk64_t sb = fs->super->s_first_data_block;
	int n = 0;
	dgrp_t i;

	out[n++] = sb;
	for (i = 0; i < fs->desc_blocks && n < PREFETCH_MAX_BLOCKS - 1; i++)
		out[n++] = ext2fs_descriptor_block_loc2(fs, sb, i);
	out[n++] = nx_inode_table_block(fs, EXT2_ROOT_INO);
	return n;
}

static void prefetch_block(ext2_filsys fs, blk64_t b)
{
	if (b && b < ext2fs_blocks_count(fs->super))
		nx_blkio_prefetch(nx_blkio_from_channel(fs->io),
				  b * fs->blocksize, fs->blocksize);
}

/*
 * Where snapshot file INODE maps logical block N, if the inode alone
 * says (returns the block, or 0); else hint the map block that says, and
 * return 0 with *DEEPER set.
 */
static blk64_t map_from_inode(ext2_filsys fs, const struct ext2_inode *inode,
			      blk64_t n, int *deeper)
{
	const struct ext3_extent_header *eh = (const void *)inode->i_block;
	blk64_t per = fs->blocksize / 4, next = 0;
	int i, entries;

	*deeper = 0;
	if (!(inode->i_flags & EXT4_EXTENTS_FL)) {
		if (n < EXT2_NDIR_BLOCKS)
			return inode->i_block[n];
		n -= EXT2_NDIR_BLOCKS;
		next = inode->i_block[n < per ? EXT2_IND_BLOCK :
				      n < per * per ? EXT2_DIND_BLOCK :
				      EXT2_TIND_BLOCK];
		*deeper = 1;
		prefetch_block(fs, next);
		return 0;
	}
	if (ext2fs_le16_to_cpu(eh->eh_magic) != EXT3_EXT_MAGIC)
		return 0;
	entries = ext2fs_le16_to_cpu(eh->eh_entries);
	if (entries > 4)	/* what fits in i_block */
		entries = 4;
	for (i = 0; i < entries; i++) {
		if (eh->eh_depth) {
			const struct ext3_extent_idx *ix =
				(const void *)((const char *)(eh + 1) +
					       i * sizeof(*ix));

			if (ext2fs_le32_to_cpu(ix->ei_block) > n)
				break;
			next = ext2fs_le32_to_cpu(ix->ei_leaf) |
			       (blk64_t)ext2fs_le16_to_cpu(ix->ei_leaf_hi) << 32;
		} else {
			const struct ext3_extent *ex =
				(const void *)((const char *)(eh + 1) +
					       i * sizeof(*ex));
			blk64_t first = ext2fs_le32_to_cpu(ex->ee_block);
			unsigned len = ext2fs_le16_to_cpu(ex->ee_len);

			if (len > EXT_INIT_MAX_LEN)
				len -= EXT_INIT_MAX_LEN;
			if (n >= first && n < first + len)
				return (ext2fs_le32_to_cpu(ex->ee_start) |
					(blk64_t)ext2fs_le16_to_cpu(
						ex->ee_start_hi) << 32) +
				       (n - first);
		}
	}
	if (next) {
		*deeper = 1;
		prefetch_block(fs, next);
	}
	return 0;
}

struct deferred_map {
	ext2_ino_t ino;
	blk64_t n;
};

/*
 * Three passes, each issuing all of its reads before waiting for any:
 * the snapshot inodes; the blocks their inodes point at directly (the
 * copies themselves, or the map blocks that lead to them); then, once
 * those map blocks are in, the copies they point at.  Opening a view
 * then reads from the page cache: 1024 cold views went from several
 * single reads each, one after another, to three batches.
 */
void nx_snap_prefetch_views(struct nx_volume *vol)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	blk64_t want[PREFETCH_MAX_BLOCKS], b;
	struct deferred_map *later = NULL;
	size_t nlater = 0;
	int i, j, nwant, deeper, todo = 0;

	if (!store)
		return;
	for (i = 0; i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];

		if (!s->prefetched && !s->view) {
			prefetch_block(fs, nx_inode_table_block(fs, s->ino));
			todo++;
		}
	}
	if (!todo)	/* every later listing: nothing to hint */
		return;
	nwant = view_open_blocks(fs, want);
	for (j = 0; j < nwant; j++)
		prefetch_block(fs, want[j]);	/* the live fall-through */
	later = calloc((size_t)store->nsnaps * nwant, sizeof(*later));
	for (i = 0; i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];
		struct ext2_inode inode;

		if (s->prefetched || s->view)
			continue;
		s->prefetched = 1;
		if (ext2fs_read_inode(fs, s->ino, &inode))
			continue;
		for (j = 0; j < nwant; j++) {
			if (!ext2fs_test_block_bitmap2(s->mapped, want[j]))
				continue;
			if (s == store->active &&
			    nx_pending_get(store, want[j], &b)) {
				prefetch_block(fs, b);
				continue;
			}
			b = map_from_inode(fs, &inode, want[j], &deeper);
			prefetch_block(fs, b);
			if (deeper && later) {
				later[nlater].ino = s->ino;
				later[nlater++].n = want[j];
			}
		}
	}
	for (i = 0; i < (int)nlater; i++) {
		b = 0;
		if (!ext2fs_bmap2(fs, later[i].ino, NULL, NULL, 0, later[i].n,
				  NULL, &b))
			prefetch_block(fs, b);
	}
	free(later);
}
