/*
 * restore.c - "nextfs restore": roll the live tree back to a snapshot,
 * offline, keeping that snapshot (and every older one) valid.
 *
 * Only the newest snapshot S can be restored (newer ones are refused, or
 * deleted first on request, as zfs rollback -r does).  Every block S maps
 * is one whose content changed since the take; every block it does not
 * map still holds its take-time content.  So:
 *
 * 1a. Separate: a block S copy-preserved may since have been freed and
 *    reused for S's own block map or another copy; then S's map is first
 *    rebuilt elsewhere (see below), because step 1 overwrites it.
 * 1. Write back: for each N -> B that S maps with B != N (a copy), write
 *    B's content to N.  Only the snapshot machinery keeps its current
 *    state: the primary superblock, the inode-table slots of snapshot
 *    inodes (current ones, and ones that were snapshots at the take) and
 *    of /.snapshots, and the blocks of /.snapshots.  Data that was moved
 *    (N -> N) needs no write: block N still holds it.  S's own inode still
 *    maps everything, so an interrupted run is simply run again.
 * 2. Reopen: the descriptors and bitmaps read now are the take-time ones.
 * 3. Bookkeeping: snapshots deleted since the take are freed again; S
 *    gives up every mapping except those of the metadata blocks this step
 *    rewrites (superblock, descriptors, bitmaps, inode-table blocks holding
 *    snapshot inodes, /.snapshots): for those S keeps its take-time copy,
 *    so S's view (and older views that read through S) stay as they were.
 *    S's reduced map is built under a spare inode number and swapped in
 *    with one inode write.  The block bitmap is rebuilt from what is
 *    owned, the free counts from the bitmaps.
 * 4. While that is written, a write hook checks that no other block S's
 *    view still reads from the live volume changes; should one, its old
 *    content is copied into S first (as the engine would).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <et/com_err.h>
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/open.h"
#include "nextfs/snaptool.h"
#include "snap_internal.h"

struct pair {
	blk64_t n, b;
};

struct restorer {
	struct nx_rawvol *raw;
	ext2_filsys fs;
	struct nx_blkio *io;
	const struct nx_progress *prog;
	struct nx_restore_result *res;
	ext2_ino_t snap;		/* S */
	int nomem;			/* a block map walk ran out of memory */
	ext2_ino_t snapdir;
	ext2_ino_t *cur;		/* current snapshot inodes */
	int ncur;
	size_t capcur;
	struct pair *map;		/* S's data mappings */
	size_t nmap, capmap;
	ext2fs_block_bitmap sblocks;	/* every block S's file owns now */
	ext2fs_block_bitmap other;	/* blocks of the other snapshot files */
	ext2fs_block_bitmap dirblocks;	/* blocks of /.snapshots */
	ext2fs_block_bitmap keep;	/* N whose copy S keeps, if it has one */
	ext2fs_block_bitmap kept;	/* N that S still maps after the restore */
	ext2fs_block_bitmap cow;	/* what S's view still reads live */
	ext2_ino_t *freed;		/* snapshot inodes deleted since the take */
	size_t nfreed, capfreed;
	blk64_t *pool;			/* blocks S gives up (for guard copies) */
	size_t npool, cappool;
	struct pair *added;		/* guard copies to map into S */
	size_t nadded, capadded;
	ext2fs_block_bitmap w;		/* blocks step 1 overwrites */
	blk64_t cursor;			/* pick_free() resumes here */
};

static void progress(struct restorer *r, const char *what, uint64_t done,
		     uint64_t total)
{
	if (r->prog && r->prog->fn)
		r->prog->fn(r->prog->priv, what, done, total);
}

/* ------------------------------------------------------------------ */
/* Step 0: with the engine: the snapshot exists, newer ones go or stop us. */

static errcode_t precheck(const char *device, const char *name, int flags,
			  struct nx_restore_result *res, char *msg,
			  size_t msglen)
{
	struct nx_snapinfo *list = NULL;
	struct nx_volume *vol = NULL;
	char names[512] = "";
	size_t used = 0;
	int n = 0, i, idx = -1, pending;
	blk64_t held;
	errcode_t err;

	/* Strict: what the engine would refuse to write, restore refuses. */
	err = nx_open_volume(device, NX_VOL_RDONLY | NX_VOL_STRICT, &vol, msg,
			     msglen);
	if (err)
		return err;
	err = nx_snap_list(vol, &list, &n);
	nx_snap_pending(vol, &pending, &held);
	nx_volume_close(vol);
	vol = NULL;		/* closed: the read-write open below is another */
	if (err)
		return err;
	for (i = 0; i < n; i++)
		if (!strcmp(list[i].name, name))
			idx = i;
	if (idx < 0) {
		nx_set_msg(msg, msglen, "no snapshot named '%s'", name);
		free(list);
		return ENOENT;
	}
	for (i = idx + 1; i < n && used < sizeof(names); i++)
		used += snprintf(names + used, sizeof(names) - used, "%s'%s'",
				 used ? ", " : "", list[i].name);
	if (idx + 1 < n && !(flags & NX_RESTORE_DESTROY_NEWER)) {
		nx_set_msg(msg, msglen, "snapshot%s %s %s newer than '%s': restoring "
			"would invalidate %s; delete %s first (or use "
			"--destroy-newer)", n - idx > 2 ? "s" : "", names,
			n - idx > 2 ? "are" : "is", name,
			n - idx > 2 ? "them" : "it", n - idx > 2 ? "them" : "it");
		free(list);
		return EEXIST;
	}
	/*
	 * Restore works on the list as it is on disk: deleted snapshots
	 * still on it hand over what they hold first.
	 */
	if (idx + 1 < n || pending) {
		err = nx_open_volume(device, 0, &vol, msg, msglen);
		for (i = n - 1; !err && i > idx; i--) {
			nx_volume_lock(vol);
			err = nx_snap_delete(vol, list[i].name);
			nx_volume_unlock(vol);
			if (err)
				nx_set_msg(msg, msglen, "deleting snapshot '%s': %s",
					list[i].name, error_message(err));
			else
				res->destroyed++;
		}
		if (!err) {
			nx_volume_lock(vol);
			err = nx_snap_reclaim_all(vol);
			nx_volume_unlock(vol);
			if (err)
				nx_set_msg(msg, msglen, "handing over the blocks "
					   "of deleted snapshots: %s",
					   error_message(err));
		}
		if (vol) {
			errcode_t e2 = nx_volume_close(vol);

			if (!err)
				err = e2;
		}
	}
	free(list);
	return err;
}

/* ------------------------------------------------------------------ */
/* Step 1: what S and the other snapshots own.                         */

static int collect_mapping(ext2_filsys fs, blk64_t *blocknr,
			   e2_blkcnt_t blockcnt, blk64_t ref_blk,
			   int ref_offset, void *priv)
{
	struct restorer *r = priv;

	ext2fs_mark_block_bitmap2(r->sblocks, *blocknr);
	if (blockcnt < 0)
		return 0;
	if (nx_grow((void **)&r->map, &r->capmap, r->nmap, sizeof(*r->map),
		    64)) {
		r->nomem = 1;	/* a partial map must not be restored */
		return BLOCK_ABORT;
	}
	r->map[r->nmap].n = blockcnt;
	r->map[r->nmap].b = *blocknr;
	r->nmap++;
	return 0;
}

static int mark_owned(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		      blk64_t ref_blk, int ref_offset, void *priv)
{
	ext2fs_mark_block_bitmap2(priv, *blocknr);
	return 0;
}

static errcode_t load_snapshots(struct restorer *r, const char *name,
				char *msg, size_t msglen)
{
	ext2_filsys fs = r->fs;
	ext2_ino_t ino = fs->super->s_snapshot_list;
	struct ext2_inode_large inode;
	errcode_t err;
	int i;

	err = ext2fs_lookup(fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME,
			    strlen(NX_SNAPDIR_NAME), NULL, &r->snapdir);
	if (!err)
		err = ext2fs_lookup(fs, r->snapdir, name, strlen(name), NULL,
				    &r->snap);
	if (err || r->snap != fs->super->s_snapshot_list) {
		nx_set_msg(msg, msglen, "snapshot '%s' is not the newest one on "
			"disk; run 'nextfs check'", name);
		return err ? err : EINVAL;
	}
	while (ino && r->ncur < 1024) {
		if (nx_grow((void **)&r->cur, &r->capcur, (size_t)r->ncur,
			    sizeof(*r->cur), 16))
			return EXT2_ET_NO_MEMORY;
		r->cur[r->ncur++] = ino;
		err = ext2fs_read_inode_full(fs, ino,
					     (struct ext2_inode *)&inode,
					     sizeof(inode));
		if (err)
			return err;
		ino = snap_next(&inode);
	}
	err = ext2fs_block_iterate3(fs, r->snap, BLOCK_FLAG_READ_ONLY, NULL,
				    collect_mapping, r);
	if (!err && r->nomem)
		err = EXT2_ET_NO_MEMORY;
	for (i = 1; !err && i < r->ncur; i++)
		err = ext2fs_block_iterate3(fs, r->cur[i],
					    BLOCK_FLAG_READ_ONLY, NULL,
					    mark_owned, r->other);
	if (!err)
		err = ext2fs_read_inode_full(fs, r->snapdir,
					     (struct ext2_inode *)&inode,
					     sizeof(inode));
	if (!err && !(inode.i_flags & EXT4_INLINE_DATA_FL) &&
	    ext2fs_inode_has_valid_blocks2(fs, (struct ext2_inode *)&inode))
		err = ext2fs_block_iterate3(fs, r->snapdir,
					    BLOCK_FLAG_READ_ONLY, NULL,
					    mark_owned, r->dirblocks);
	if (err)
		nx_set_msg(msg, msglen, "cannot read the snapshots' block maps: "
			"%s", error_message(err));
	return err;
}

/* Refuse, before writing anything, what the engine would never produce. */
static errcode_t sanity(struct restorer *r, char *msg, size_t msglen)
{
	ext2_filsys fs = r->fs;
	size_t i;

	for (i = 0; i < r->nmap; i++) {
		blk64_t n = r->map[i].n;

		if (n < fs->super->s_first_data_block ||
		    n >= ext2fs_blocks_count(fs->super) ||
		    (r->map[i].b != n &&
		     ext2fs_test_block_bitmap2(r->other, n))) {
			nx_set_msg(msg, msglen, "snapshot maps block %llu in a "
				"way the engine never does; run 'nextfs "
				"check'", (unsigned long long)n);
			return EXT2_ET_FILESYSTEM_CORRUPTED;
		}
	}
	return 0;
}

/* The group whose inode table holds block N, or -1. */
static long itable_group(ext2_filsys fs, blk64_t n)
{
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t it = ext2fs_inode_table_loc(fs, g);

		if (n >= it && n < it + fs->inode_blocks_per_group)
			return g;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Step 1a: S must not use a block that step 1 overwrites.             */

/*
 * A block S copy-preserved can have been freed later and reused for S's
 * own extent/indirect blocks or for another copy: writing the take-time
 * content back there would destroy S.  Then S's block map is rebuilt
 * first, on blocks nobody uses, under a spare inode number; the new tree
 * is sealed for S (extent block checksums name the inode) and swapped in
 * with one inode write.  Until that write S is untouched; after it the
 * old tree is merely unowned (step 3 frees it).  The new blocks are
 * recorded in the bitmaps only in step 3: an interrupted restore must be
 * run again (as for step 1 anyway).
 */
static errcode_t pick_free(struct restorer *r, ext2fs_block_bitmap avoid,
			   blk64_t *ret)
{
	ext2_filsys fs = r->fs;
	blk64_t first = fs->super->s_first_data_block;
	blk64_t end = ext2fs_blocks_count(fs->super) - 1, b = r->cursor;
	int passes = 0;

	/*
	 * From the cursor to the end of the volume, then once from its
	 * start: each step skips a run of used blocks or of AVOID's, and
	 * stepping past the last block ends a pass just as finding nothing
	 * more does, so the search ends even when every free block is one
	 * to avoid.
	 */
	if (b < first || b > end)
		b = first;
	for (;;) {
		if (b > end ||
		    ext2fs_find_first_zero_block_bitmap2(fs->block_map, b, end,
							 &b)) {
			if (passes++)
				return EXT2_ET_BLOCK_ALLOC_FAIL;
			b = first;
			continue;
		}
		if (!ext2fs_test_block_bitmap2(avoid, b))
			break;
		if (ext2fs_find_first_zero_block_bitmap2(avoid, b, end, &b))
			b = end + 1;
	}
	r->cursor = b + 1;
	*ret = b;
	return 0;
}

static errcode_t alloc_outside_w(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct restorer *r = fs->priv_data;

	/* ext2fs_alloc_block3() does the accounting. */
	return pick_free(r, r->w, ret);
}

/* Is mapping I one S keeps after the restore? */
static int kept_after(struct restorer *r, size_t i)
{
	return r->map[i].b != r->map[i].n &&
	       ext2fs_test_block_bitmap2(r->keep, r->map[i].n);
}

/*
 * A free inode number for building a map, in an inode-table block S holds
 * a copy of (so S's view does not see the slot change): before step 1 any
 * such block (step 1 writes its take-time content back anyway), later one
 * that S keeps.
 */
static errcode_t spare_inode(struct restorer *r, int only_kept,
			     ext2_ino_t *ret)
{
	ext2_filsys fs = r->fs;
	ext2_ino_t ino;
	size_t i;

	for (i = 0; i < r->nmap; i++) {
		long g = r->map[i].b != r->map[i].n &&
			 (!only_kept || kept_after(r, i)) ?
			 itable_group(fs, r->map[i].n) : -1;
		unsigned per = fs->blocksize / EXT2_INODE_SIZE(fs->super), k;

		if (g < 0)
			continue;
		ino = g * fs->super->s_inodes_per_group + 1 +
		      (r->map[i].n - ext2fs_inode_table_loc(fs, g)) * per;
		for (k = 0; k < per; k++)
			if (ino + k >= EXT2_FIRST_INODE(fs->super) &&
			    !ext2fs_test_inode_bitmap2(fs->inode_map, ino + k)) {
				*ret = ino + k;
				return 0;
			}
	}
	return ext2fs_new_inode(fs, EXT2_ROOT_INO, LINUX_S_IFREG, NULL, ret);
}

static void empty_map(struct ext2_inode_large *inode)
{
	memset(inode->i_block, 0, sizeof(inode->i_block));
	if (inode->i_flags & EXT4_EXTENTS_FL) {
		struct ext3_extent_header *eh =
			(struct ext3_extent_header *)inode->i_block;

		eh->eh_magic = ext2fs_cpu_to_le16(EXT3_EXT_MAGIC);
		eh->eh_max = ext2fs_cpu_to_le16((sizeof(inode->i_block) -
						 sizeof(*eh)) /
						sizeof(struct ext3_extent));
	}
	inode->i_blocks = 0;
	inode->osd2.linux2.l_i_blocks_hi = 0;
}

struct tree_blocks {
	blk64_t *v;
	size_t n, cap;
	int nomem;
};

static int collect_tree_block(ext2_filsys fs, blk64_t *blocknr,
			      e2_blkcnt_t blockcnt, blk64_t ref_blk,
			      int ref_offset, void *priv)
{
	struct tree_blocks *tb = priv;

	if (blockcnt >= 0)
		return 0;
	if (nx_grow((void **)&tb->v, &tb->cap, tb->n, sizeof(*tb->v), 64)) {
		tb->nomem = 1;
		return BLOCK_ABORT;
	}
	tb->v[tb->n++] = *blocknr;
	return 0;
}

/* Extent block checksums name the inode: make TINO's tree S's. */
static errcode_t seal_tree(struct restorer *r, ext2_ino_t tino)
{
	ext2_filsys fs = r->fs;
	struct tree_blocks tb = { 0 };
	char *buf = malloc(fs->blocksize);
	errcode_t err;
	size_t i;

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_block_iterate3(fs, tino, BLOCK_FLAG_READ_ONLY, NULL,
				    collect_tree_block, &tb);
	if (!err && tb.nomem)
		err = EXT2_ET_NO_MEMORY;	/* unsealed blocks: fail */
	for (i = 0; i < tb.n && !err; i++) {
		err = io_channel_read_blk64(fs->io, tb.v[i], 1, buf);
		if (!err)
			err = ext2fs_extent_block_csum_set(fs, r->snap,
					(struct ext3_extent_header *)buf);
		if (!err)
			err = io_channel_write_blk64(fs->io, tb.v[i], 1, buf);
	}
	free(tb.v);
	free(buf);
	return err;
}

/* Copy data block B of S to a block outside W; returns the new block. */
static errcode_t move_copy(struct restorer *r, blk64_t b, blk64_t *nb,
			   char *buf)
{
	ext2_filsys fs = r->fs;
	errcode_t err;

	err = pick_free(r, r->w, nb);
	if (!err)
		r->res->blocks_relocated++;
	if (!err)
		err = nx_blkio_pread(r->io, buf, fs->blocksize,
				     b * fs->blocksize);
	if (!err)
		err = nx_blkio_pwrite(r->io, buf, fs->blocksize,
				      *nb * fs->blocksize);
	if (!err)
		ext2fs_block_alloc_stats2(fs, *nb, +1);
	return err;
}

/* Map into TINO every mapping of S (ONLY_KEPT: those it keeps). */
static errcode_t build_tree(struct restorer *r, ext2_ino_t tino,
			    struct ext2_inode_large *t, int only_kept)
{
	ext2_filsys fs = r->fs;
	char *buf = malloc(fs->blocksize);
	blk64_t mapped = 0;
	errcode_t err;
	size_t i;

	if (!buf)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_write_inode_full(fs, tino, (struct ext2_inode *)t,
				      sizeof(*t));
	for (i = 0; i < r->nmap && !err; i++) {
		blk64_t b = r->map[i].b;

		if (only_kept && !kept_after(r, i))
			continue;
		if (ext2fs_test_block_bitmap2(r->w, b))
			err = move_copy(r, b, &b, buf);
		if (!err)
			err = ext2fs_bmap2(fs, tino, (struct ext2_inode *)t,
					   NULL, BMAP_SET | BMAP_ALLOC,
					   r->map[i].n, NULL, &b);
		if (!err) {
			r->map[i].b = b;
			mapped++;
		}
		if (!(i & 1023))
			progress(r, "rebuilding", i, r->nmap);
	}
	if (!err)
		err = ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)t,
					     mapped);
	if (!err)
		err = ext2fs_write_inode_full(fs, tino, (struct ext2_inode *)t,
					      sizeof(*t));
	free(buf);
	return err;
}

static errcode_t rebuild_snapshot(struct restorer *r, int only_kept)
{
	ext2_filsys fs = r->fs;
	struct ext2_inode_large s, t;
	ext2_ino_t tino;
	errcode_t err;

	err = spare_inode(r, only_kept, &tino);
	if (!err)
		err = ext2fs_read_inode_full(fs, r->snap, (struct ext2_inode *)&s,
					     sizeof(s));
	if (err)
		return err;
	t = s;
	empty_map(&t);
	t.i_links_count = 0;
	t.i_dtime = fs->now ? fs->now : time(NULL);
	fs->priv_data = r;
	ext2fs_set_alloc_block_callback(fs, alloc_outside_w, NULL);
	err = build_tree(r, tino, &t, only_kept);
	ext2fs_set_alloc_block_callback(fs, NULL, NULL);
	if (!err && ext2fs_has_feature_metadata_csum(fs->super) &&
	    (t.i_flags & EXT4_EXTENTS_FL))
		err = seal_tree(r, tino);
	if (!err)
		err = nx_blkio_flush(r->io);
	if (err)
		return err;
	/* The swap: S's map is now the new tree. */
	memcpy(s.i_block, t.i_block, sizeof(s.i_block));
	s.i_blocks = t.i_blocks;
	s.osd2.linux2.l_i_blocks_hi = t.osd2.linux2.l_i_blocks_hi;
	err = ext2fs_write_inode_full(fs, r->snap, (struct ext2_inode *)&s,
				      sizeof(s));
	if (!err) {
		empty_map(&t);
		err = ext2fs_write_inode_full(fs, tino, (struct ext2_inode *)&t,
					      sizeof(t));
	}
	if (!err)
		err = nx_blkio_flush(r->io);
	return err;
}

static int reclaim_tree_block(ext2_filsys fs, blk64_t *blocknr,
			      e2_blkcnt_t blockcnt, blk64_t ref_blk,
			      int ref_offset, void *priv)
{
	ext2fs_mark_block_bitmap2(priv, *blocknr);
	return 0;
}

/* Rebuild S's map if it uses a block step 1 writes. */
static errcode_t separate(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	int conflict = 0;
	errcode_t err;
	size_t i;

	err = ext2fs_allocate_block_bitmap(fs, "overwritten", &r->w);
	if (err)
		return err;
	for (i = 0; i < r->nmap; i++)
		if (r->map[i].b != r->map[i].n &&
		    !ext2fs_test_block_bitmap2(r->dirblocks, r->map[i].n))
			ext2fs_mark_block_bitmap2(r->w, r->map[i].n);
	for (i = 0; i < r->nmap && !conflict; i++)
		conflict = ext2fs_test_block_bitmap2(r->w, r->map[i].b);
	if (!conflict) {
		blk64_t b, end = ext2fs_blocks_count(fs->super);

		for (b = fs->super->s_first_data_block; b < end && !conflict;
		     b++)
			conflict = ext2fs_test_block_bitmap2(r->sblocks, b) &&
				   ext2fs_test_block_bitmap2(r->w, b);
	}
	if (!conflict)
		return 0;
	r->res->blocks_relocated++;	/* at least the map itself */
	err = rebuild_snapshot(r, 0);
	if (err)
		return err;
	/* S's blocks are now the new ones. */
	ext2fs_clear_block_bitmap(r->sblocks);
	return ext2fs_block_iterate3(fs, r->snap, BLOCK_FLAG_READ_ONLY, NULL,
				     reclaim_tree_block, r->sblocks);
}

/* ------------------------------------------------------------------ */
/* Step 1: writing the take-time content back.                         */

static int is_current_snapshot(struct restorer *r, ext2_ino_t ino)
{
	int i;

	for (i = 0; i < r->ncur; i++)
		if (r->cur[i] == ino)
			return 1;
	return 0;
}

static errcode_t note_freed(struct restorer *r, ext2_ino_t ino)
{
	size_t i;

	for (i = 0; i < r->nfreed; i++)
		if (r->freed[i] == ino)
			return 0;
	if (nx_grow((void **)&r->freed, &r->capfreed, r->nfreed,
		    sizeof(*r->freed), 64))
		return EXT2_ET_NO_MEMORY;
	r->freed[r->nfreed++] = ino;
	return 0;
}

/*
 * Inode table block N, take-time content in BUF: put back the current
 * bytes of every slot that belongs to the snapshot machinery.
 */
static errcode_t keep_snapshot_slots(struct restorer *r, blk64_t n, dgrp_t g,
				     char *buf, char *now)
{
	ext2_filsys fs = r->fs;
	unsigned isize = EXT2_INODE_SIZE(fs->super);
	unsigned per = fs->blocksize / isize, i;
	ext2_ino_t first = g * fs->super->s_inodes_per_group + 1 +
			   (n - ext2fs_inode_table_loc(fs, g)) * per;
	errcode_t err;
	int kept = 0;

	for (i = 0; i < per; i++) {
		struct ext2_inode_large *then =
			(struct ext2_inode_large *)(buf + i * isize);
		ext2_ino_t ino = first + i;
		int was_snap = (then->i_flags & EXT4_SNAPFILE_FL) &&
			       then->i_links_count;

		if (ino == r->snapdir || is_current_snapshot(r, ino)) {
			memcpy(buf + i * isize, now + i * isize, isize);
			kept = 1;
		} else if (was_snap) {
			/* deleted since the take: freed in step 3 */
			err = note_freed(r, ino);
			if (err)
				return err;
			kept = 1;
		}
	}
	if (kept)
		ext2fs_mark_block_bitmap2(r->keep, n);
	return 0;
}

static int holds_superblock(ext2_filsys fs, blk64_t n)
{
	return n * fs->blocksize <= SUPERBLOCK_OFFSET &&
	       (n + 1) * fs->blocksize > SUPERBLOCK_OFFSET;
}

static errcode_t write_back_one(struct restorer *r, const struct pair *p,
				char *buf, char *now)
{
	ext2_filsys fs = r->fs;
	uint64_t bs = fs->blocksize;
	long g;
	errcode_t err;

	err = nx_blkio_pread(r->io, buf, bs, p->b * bs);
	if (!err)
		err = nx_blkio_pread(r->io, now, bs, p->n * bs);
	if (err)
		return err;
	if (holds_superblock(fs, p->n)) {
		memcpy(buf + (SUPERBLOCK_OFFSET - p->n * bs),
		       now + (SUPERBLOCK_OFFSET - p->n * bs), SUPERBLOCK_SIZE);
		ext2fs_mark_block_bitmap2(r->keep, p->n);
	}
	g = itable_group(fs, p->n);
	if (g >= 0) {
		err = keep_snapshot_slots(r, p->n, g, buf, now);
		if (err)
			return err;
	}
	if (!memcmp(buf, now, bs))
		return 0;
	r->res->blocks_restored++;
	return nx_blkio_pwrite(r->io, buf, bs, p->n * bs);
}

static errcode_t write_back(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	char *buf = malloc(fs->blocksize), *now = malloc(fs->blocksize);
	errcode_t err = 0;
	size_t i;

	if (!buf || !now) {
		err = EXT2_ET_NO_MEMORY;
		goto out;
	}
	for (i = 0; i < r->nmap && !err; i++) {
		const struct pair *p = &r->map[i];

		if (p->b == p->n) {
			r->res->blocks_returned++;
			continue;
		}
		if (ext2fs_test_block_bitmap2(r->dirblocks, p->n)) {
			/* /.snapshots stays as it is now; S keeps the old. */
			ext2fs_mark_block_bitmap2(r->keep, p->n);
			continue;
		}
		err = write_back_one(r, p, buf, now);
		if (!(i & 255))
			progress(r, "restoring", i, r->nmap);
	}
	if (!err)
		err = nx_blkio_flush(r->io);
out:
	free(buf);
	free(now);
	return err;
}

/* ------------------------------------------------------------------ */
/* Step 2: reopen on the take-time metadata.                           */

static errcode_t reopen(struct restorer *r)
{
	errcode_t err;

	r->fs->flags &= ~EXT2_FLAG_DIRTY;
	ext2fs_free(r->fs);
	r->fs = r->raw->fs = NULL;
	err = ext2fs_open2(r->raw->device, NULL, EXT2_FLAG_RW |
			   EXT2_FLAG_64BITS | EXT2_FLAG_FORCE |
			   EXT2_FLAG_SKIP_MMP, 0, 0, nx_blkio_manager, &r->fs);
	if (err)
		return err;
	r->raw->fs = r->fs;
	r->fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	r->io = nx_blkio_from_channel(r->fs->io);
	r->fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* see volume.c */
	return ext2fs_read_bitmaps(r->fs);
}

/* ------------------------------------------------------------------ */
/* Step 3: bookkeeping.                                                */

/* Metadata blocks that step 3 rewrites: S keeps its copies of these. */
static void mark_rewritten_metadata(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	blk64_t super_blk, old_desc, new_desc, i;
	dgrp_t g;

	ext2fs_mark_block_bitmap2(r->keep, SUPERBLOCK_OFFSET / fs->blocksize);
	for (g = 0; g < fs->group_desc_count; g++) {
		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc,
					  &new_desc, NULL);
		if (!g && old_desc)
			for (i = 0; i < fs->desc_blocks &&
			     (!ext2fs_has_feature_meta_bg(fs->super) ||
			      i < fs->super->s_first_meta_bg); i++)
				ext2fs_mark_block_bitmap2(r->keep,
							  old_desc + i);
		if (new_desc)
			ext2fs_mark_block_bitmap2(r->keep, new_desc);
		ext2fs_mark_block_bitmap2(r->keep,
					  ext2fs_block_bitmap_loc(fs, g));
		ext2fs_mark_block_bitmap2(r->keep,
					  ext2fs_inode_bitmap_loc(fs, g));
	}
}

/*
 * What S's view still reads from the live volume: the take-time bitmap
 * (just read) minus what snapshot files own.  Then make the in-memory
 * bitmap safe to allocate from: blocks allocated after the take that are
 * still owned (by snapshot files, by /.snapshots) are marked in use.
 */
static errcode_t compute_cow(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	blk64_t b, end = ext2fs_blocks_count(fs->super);
	errcode_t err;

	err = ext2fs_copy_bitmap(fs->block_map, &r->cow);
	if (err)
		return err;
	for (b = fs->super->s_first_data_block; b < end; b++) {
		int snap = ext2fs_test_block_bitmap2(r->other, b) ||
			   ext2fs_test_block_bitmap2(r->sblocks, b);

		if (snap)
			ext2fs_unmark_block_bitmap2(r->cow, b);
		if (snap || ext2fs_test_block_bitmap2(r->dirblocks, b))
			ext2fs_mark_block_bitmap2(fs->block_map, b);
	}
	return 0;
}

static errcode_t free_deleted_snapshots(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	unsigned size = EXT2_INODE_SIZE(fs->super);
	struct ext2_inode_large *inode = calloc(1, size);
	errcode_t err = 0;
	size_t i;

	if (!inode)
		return EXT2_ET_NO_MEMORY;
	for (i = 0; i < r->nfreed && !err; i++) {
		memset(inode, 0, size);
		inode->i_dtime = fs->now ? fs->now : time(NULL);
		if (size > EXT2_GOOD_OLD_INODE_SIZE)
			inode->i_extra_isize = sizeof(struct ext2_inode_large) -
					       EXT2_GOOD_OLD_INODE_SIZE;
		err = ext2fs_write_inode_full(fs, r->freed[i],
					      (struct ext2_inode *)inode, size);
		if (!err && ext2fs_test_inode_bitmap2(fs->inode_map,
						      r->freed[i]))
			ext2fs_inode_alloc_stats2(fs, r->freed[i], -1, 0);
	}
	free(inode);
	return err;
}

/*
 * S keeps only the copies of the blocks step 3 rewrites: its map is
 * rebuilt with just those (and swapped in with one inode write, as in
 * step 1a; ext2fs_punch() of 1.47.0 leaves blocks mapped when a range
 * spans indirect blocks).  Its other blocks become unowned: moved data
 * belongs to the live tree again, dropped copies and old map blocks are
 * freed with the bitmap rebuild.
 */
static errcode_t shrink_snapshot(struct restorer *r)
{
	size_t i;

	for (i = 0; i < r->nmap; i++)
		if (kept_after(r, i))
			ext2fs_mark_block_bitmap2(r->kept, r->map[i].n);
	return rebuild_snapshot(r, 1);
}

/* Blocks S gave up, for copies the guard may have to make. */
static errcode_t fill_pool(struct restorer *r, ext2fs_block_bitmap used)
{
	ext2_filsys fs = r->fs;
	blk64_t b, end = ext2fs_blocks_count(fs->super);

	for (b = fs->super->s_first_data_block; b < end; b++) {
		if (!ext2fs_test_block_bitmap2(r->sblocks, b) ||
		    ext2fs_test_block_bitmap2(used, b))
			continue;
		if (nx_grow((void **)&r->pool, &r->cappool, r->npool,
			    sizeof(*r->pool), 64))
			return EXT2_ET_NO_MEMORY;
		r->pool[r->npool++] = b;
	}
	r->res->blocks_freed = r->npool;
	return 0;
}

/* ---- the guard (step 4) ---- */

static errcode_t guard_hook(void *priv, uint64_t off, uint64_t len,
			    const void *data)
{
	struct restorer *r = priv;
	ext2_filsys fs = r->fs;
	uint64_t bs = fs->blocksize, end = off + len;
	char *old = NULL;
	errcode_t err = 0;
	blk64_t n;

	for (n = off / bs; n * bs < end && !err; n++) {
		uint64_t from = n * bs > off ? n * bs : off;
		uint64_t to = (n + 1) * bs < end ? (n + 1) * bs : end;
		blk64_t p;

		if (n < fs->super->s_first_data_block ||
		    n >= ext2fs_blocks_count(fs->super) ||
		    !ext2fs_test_block_bitmap2(r->cow, n) ||
		    ext2fs_test_block_bitmap2(r->kept, n))
			continue;
		if (!old && !(old = malloc(bs)))
			return EXT2_ET_NO_MEMORY;
		err = nx_blkio_pread(r->io, old, bs, n * bs);
		if (err || !memcmp(old + (from - n * bs),
				   (const char *)data + (from - off),
				   to - from))
			continue;
		if (!r->npool) {
			err = ENOSPC;
			break;
		}
		p = r->pool[--r->npool];
		r->res->blocks_freed--;
		err = nx_blkio_pwrite_raw(r->io, old, bs, p * bs);
		if (!err)
			err = nx_grow((void **)&r->added, &r->capadded,
				      r->nadded, sizeof(*r->added), 64);
		if (err)
			break;
		r->res->blocks_guarded++;
		r->added[r->nadded].n = n;
		r->added[r->nadded].b = p;
		r->nadded++;
		ext2fs_mark_block_bitmap2(r->kept, n);
		ext2fs_block_alloc_stats2(fs, p, +1);
	}
	free(old);
	return err;
}

/* New tree blocks for S come from what it gave up. */
static errcode_t alloc_from_pool(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct restorer *r = fs->priv_data;

	if (!r->npool)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	/* ext2fs_alloc_block3() does the accounting. */
	*ret = r->pool[--r->npool];
	r->res->blocks_freed--;
	return 0;
}

static errcode_t map_added(struct restorer *r)
{
	struct ext2_inode_large inode;
	size_t i, n = r->nadded;
	errcode_t err = 0;

	if (!n)
		return 0;
	r->nadded = 0;
	for (i = 0; i < n && !err; i++) {
		blk64_t b = r->added[i].b;

		err = ext2fs_bmap2(r->fs, r->snap, NULL, NULL,
				   BMAP_SET | BMAP_ALLOC, r->added[i].n, NULL,
				   &b);
	}
	if (!err)
		err = ext2fs_read_inode_full(r->fs, r->snap,
					     (struct ext2_inode *)&inode,
					     sizeof(inode));
	if (!err) {
		ext2fs_iblk_add_blocks(r->fs, (struct ext2_inode *)&inode, n);
		err = ext2fs_write_inode_full(r->fs, r->snap,
					      (struct ext2_inode *)&inode,
					      sizeof(inode));
	}
	return err;
}

static errcode_t flush_guarded(struct restorer *r)
{
	ext2_filsys fs = r->fs;
	errcode_t err;
	int round;

	fs->priv_data = r;
	ext2fs_set_alloc_block_callback(fs, alloc_from_pool, NULL);
	nx_blkio_set_hook(r->io, guard_hook, r);
	for (round = 0; round < 8; round++) {
		err = map_added(r);
		if (!err)
			err = ext2fs_flush2(fs, 0);
		if (err || !r->nadded)
			break;
		ext2fs_mark_bb_dirty(fs);
		ext2fs_mark_super_dirty(fs);
	}
	nx_blkio_set_hook(r->io, NULL, NULL);
	ext2fs_set_alloc_block_callback(fs, NULL, NULL);
	if (!err && r->nadded)
		err = EXT2_ET_FILESYSTEM_CORRUPTED;
	if (!err)
		err = nx_blkio_flush(r->io);
	return err;
}

static errcode_t bookkeeping(struct restorer *r)
{
	struct nx_owner_scan scan = { 0 };
	errcode_t err;

	mark_rewritten_metadata(r);
	err = compute_cow(r);
	if (!err)
		err = free_deleted_snapshots(r);
	if (!err)
		err = shrink_snapshot(r);
	if (!err)
		err = ext2fs_allocate_block_bitmap(r->fs, "owned", &scan.used);
	if (!err)
		err = nx_scan_owners(r->fs, &scan);
	if (!err && scan.nbadino)
		err = scan.bad_err;
	if (!err)
		err = fill_pool(r, scan.used);
	if (!err) {
		nx_apply_block_bitmap(r->fs, scan.used);
		/* The superblock's counts are today's; the tree is the take's. */
		err = nx_recount_inodes(r->fs);
	}
	if (!err)
		err = flush_guarded(r);
	if (scan.used)
		ext2fs_free_block_bitmap(scan.used);
	return err;
}

/* ------------------------------------------------------------------ */

static void free_restorer(struct restorer *r)
{
	ext2fs_block_bitmap *maps[] = { &r->sblocks, &r->other, &r->dirblocks,
					&r->keep, &r->kept, &r->cow, &r->w };
	size_t i;

	for (i = 0; i < sizeof(maps) / sizeof(maps[0]); i++)
		if (*maps[i])
			ext2fs_free_block_bitmap(*maps[i]);
	free(r->cur);
	free(r->map);
	free(r->freed);
	free(r->pool);
	free(r->added);
}

static errcode_t alloc_maps(struct restorer *r)
{
	errcode_t err;

	err = ext2fs_allocate_block_bitmap(r->fs, "snapshot", &r->sblocks);
	if (!err)
		err = ext2fs_allocate_block_bitmap(r->fs, "others", &r->other);
	if (!err)
		err = ext2fs_allocate_block_bitmap(r->fs, "snapdir",
						   &r->dirblocks);
	if (!err)
		err = ext2fs_allocate_block_bitmap(r->fs, "keep", &r->keep);
	if (!err)
		err = ext2fs_allocate_block_bitmap(r->fs, "kept", &r->kept);
	return err;
}

errcode_t nx_snap_restore(const char *device, const char *name, int flags,
			  const struct nx_progress *prog,
			  struct nx_restore_result *res, char *msg,
			  size_t msglen)
{
	struct restorer r = { 0 };
	errcode_t err;

	memset(res, 0, sizeof(*res));
	nx_set_msg(msg, msglen, "%s", "");
	err = precheck(device, name, flags, res, msg, msglen);
	if (err)
		return err;
	err = nx_raw_open(device, NX_RAW_WRITE, &r.raw, msg, msglen);
	if (err)
		return err;
	r.fs = r.raw->fs;
	r.io = nx_blkio_from_channel(r.fs->io);
	r.prog = prog;
	r.res = res;
	err = alloc_maps(&r);
	if (!err)
		err = load_snapshots(&r, name, msg, msglen);
	if (!err)
		err = sanity(&r, msg, msglen);
	if (err)
		goto out;
	/* Nothing has been written up to here. */
	err = separate(&r);
	if (!err)
		err = write_back(&r);
	if (!err)
		err = reopen(&r);
	if (!err)
		err = bookkeeping(&r);
	if (err && !msg[0])
		nx_set_msg(msg, msglen, "restore failed part way: %s (the snapshot "
			"is intact; run 'nextfs restore' again)",
			error_message(err));
out:
	if (err && r.raw->fs)
		r.raw->fs->flags &= ~EXT2_FLAG_DIRTY;
	free_restorer(&r);
	if (!err)
		err = nx_raw_close(r.raw);
	else
		nx_raw_close(r.raw);
	progress(&r, "restoring", 1, 1);
	return err;
}
