/*
 * meta.c - write back only the allocation metadata that changed
 * (contract in include/nextfs/meta.h).
 *
 * What ext2fs_flush2() does for the primary copies, per changed group:
 * the bitmaps as ext2fs_write_bitmaps() lays them out (padding bits set,
 * checksums in the descriptor, none for BLOCK_UNINIT / INODE_UNINIT
 * groups), then the changed descriptor blocks, then the superblock
 * (s_wtime, s_block_group_nr = 0, checksum; fs->orig_super kept as what
 * is on disk).  Backups are never written (MASTER_SB_ONLY, as the kernel).
 *
 * Changed groups are known from three sources:
 *  - libext2fs's block allocation callbacks;
 *  - nx_meta_dirty_*() next to inode allocation and direct bitmap edits;
 *  - the safety net: a group whose in-memory descriptor differs from the
 *    one last written has the bitmaps the change concerns written (see
 *    classify()).  That catches what libext2fs changes silently:
 *    ext2fs_new_inode() and ext2fs_new_block*() clear UNINIT flags of
 *    groups they pass, and 1.47.0's ext2fs_block_alloc_stats_range()
 *    hands its callback the end of the range and a count of 0 (fixed
 *    upstream later), so the callback tells only the range's last group
 *    (nextfs's own ranges come through nx_meta_alloc_stats_range(),
 *    which tells the callbacks the whole range).
 *
 * The callbacks find their state through nx_volume_of(fs)->meta.
 * Everything runs under the volume's lock.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/meta.h"
#include "nextfs/volume.h"

typedef void (*stats_fn)(ext2_filsys, blk64_t, int);
typedef void (*range_stats_fn)(ext2_filsys, blk64_t, blk_t, int);

struct nx_meta {
	ext2_filsys fs;
	unsigned char *bdirty;		/* one bit per group: block bitmap */
	unsigned char *idirty;		/* one bit per group: inode bitmap */
	char *desc;			/* descriptor blocks as last written */
	char *buf;			/* one block: the bitmap being written */
	int all_desc;			/* write every descriptor block next */
	ext2fs_block_bitmap as_free;	/* written as free though marked */
	stats_fn old_stats;		/* the callbacks we chain to */
	range_stats_fn old_range_stats;
};

static struct nx_meta *meta_of(ext2_filsys fs)
{
	return nx_volume_of(fs)->meta;
}

/* The groups holding blocks [BLK, BLK + NUM) have changed block bitmaps. */
static void mark_blocks(struct nx_meta *m, blk64_t blk, blk64_t num)
{
	ext2_filsys fs = m->fs;
	blk64_t end = ext2fs_blocks_count(fs->super);
	dgrp_t g, last;

	if (!num || blk < fs->super->s_first_data_block || blk >= end)
		return;
	if (num > end - blk)
		num = end - blk;
	last = ext2fs_group_of_blk2(fs, blk + num - 1);
	for (g = ext2fs_group_of_blk2(fs, blk); g <= last; g++)
		ext2fs_set_bit(g, m->bdirty);
}

static void on_block_stats(ext2_filsys fs, blk64_t blk, int inuse)
{
	struct nx_meta *m = meta_of(fs);

	if (!m)
		return;
	if (m->old_stats)
		m->old_stats(fs, blk, inuse);
	mark_blocks(m, blk, 1);
}

static void on_block_range_stats(ext2_filsys fs, blk64_t blk, blk_t num,
				 int inuse)
{
	struct nx_meta *m = meta_of(fs);

	if (!m)
		return;
	if (m->old_range_stats)
		m->old_range_stats(fs, blk, num, inuse);
	if (num)
		mark_blocks(m, blk, num);
	else	/* 1.47.0: BLK is one past the range (see top of file) */
		mark_blocks(m, blk - 1, 1);
}

/*
 * The callbacks are taken off while libext2fs does the accounting (it
 * would call them with the wrong range) and called once with the right
 * one.  Where libext2fs calls no callback - nothing to do, or a range
 * beyond the volume, which it refuses with a message - neither do we.
 * txn.c needs this most: without a journal, a commit writes the blocks
 * allocated since the last commit before everything else, and a new
 * indirect block it never heard of went out after the inode pointing at
 * it, so a crash in between left the inode pointing at stale data.
 */
void nx_meta_alloc_stats_range(ext2_filsys fs, blk64_t blk, blk_t num,
			       int inuse)
{
	range_stats_fn chain = NULL, dummy;

	if (!inuse || !num || blk + num > ext2fs_blocks_count(fs->super)) {
		ext2fs_block_alloc_stats_range(fs, blk, num, inuse);
		return;
	}
	ext2fs_set_block_alloc_stats_range_callback(fs, NULL, &chain);
	ext2fs_block_alloc_stats_range(fs, blk, num, inuse);
	ext2fs_set_block_alloc_stats_range_callback(fs, chain, &dummy);
	if (chain)
		chain(fs, blk, num, inuse > 0 ? 1 : -1);
}

/* Volumes we can write group by group; others keep ext2fs_flush2(). */
static int supported(ext2_filsys fs)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	/* The in-memory descriptors and superblock would need swapping. */
	(void)fs;
	return 0;
#else
	return (fs->flags & EXT2_FLAG_RW) && fs->block_map && fs->inode_map &&
	       fs->group_desc && EXT2FS_CLUSTER_RATIO(fs) == 1;
#endif
}

static void free_meta(struct nx_meta *m)
{
	free(m->bdirty);
	free(m->idirty);
	free(m->desc);
	free(m->buf);
	free(m);
}

errcode_t nx_meta_attach(struct nx_volume *vol)
{
	ext2_filsys fs = vol->fs;
	size_t bits = (fs->group_desc_count + 7) / 8 + 1;
	size_t desc_bytes = (size_t)fs->desc_blocks * fs->blocksize;
	struct nx_meta *m;

	if (vol->meta || nx_volume_rdonly(vol) || !supported(fs))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return EXT2_ET_NO_MEMORY;
	m->fs = fs;
	m->bdirty = calloc(1, bits);
	m->idirty = calloc(1, bits);
	m->desc = malloc(desc_bytes);
	m->buf = malloc(fs->blocksize);
	if (!m->bdirty || !m->idirty || !m->desc || !m->buf) {
		free_meta(m);
		return EXT2_ET_NO_MEMORY;
	}
	/* Just read by ext2fs_open2(): this is what is on disk. */
	memcpy(m->desc, fs->group_desc, desc_bytes);
	/* Set first: the callbacks must find it once installed. */
	vol->meta = m;
	ext2fs_set_block_alloc_stats_callback(fs, on_block_stats,
					      &m->old_stats);
	ext2fs_set_block_alloc_stats_range_callback(fs, on_block_range_stats,
						    &m->old_range_stats);
	return 0;
}

/* Callers detach in the reverse order of attaching (cow.c before us). */
void nx_meta_detach(struct nx_volume *vol)
{
	struct nx_meta *m = vol->meta;
	stats_fn dummy;
	range_stats_fn dummy_range;

	if (!m)
		return;
	ext2fs_set_block_alloc_stats_callback(m->fs, m->old_stats, &dummy);
	ext2fs_set_block_alloc_stats_range_callback(m->fs, m->old_range_stats,
						    &dummy_range);
	vol->meta = NULL;
	free_meta(m);
}

void nx_meta_dirty_block(struct nx_volume *vol, blk64_t blk)
{
	if (vol->meta)
		mark_blocks(vol->meta, blk, 1);
}

void nx_meta_dirty_inode(struct nx_volume *vol, ext2_ino_t ino)
{
	struct nx_meta *m = vol->meta;

	if (!m || !ino || ino > m->fs->super->s_inodes_count)
		return;
	ext2fs_set_bit((ino - 1) / m->fs->super->s_inodes_per_group,
		       m->idirty);
}

void nx_meta_dirty_all(struct nx_volume *vol)
{
	struct nx_meta *m = vol->meta;
	size_t bits;

	if (!m)
		return;
	bits = (m->fs->group_desc_count + 7) / 8;
	memset(m->bdirty, 0xff, bits);
	memset(m->idirty, 0xff, bits);
	m->all_desc = 1;
}

/* A descriptor field that differs in NOW: set it as in WAS, say so. */
#define MOVED(f) (now.f != was.f ? (now.f = was.f, 1) : 0)

/*
 * Which bitmaps a changed descriptor concerns (the fields each bitmap's
 * write-back must keep consistent); a change we cannot attribute, such
 * as a moved inode table, concerns both.
 */
static void classify(ext2_filsys fs, const void *cur, const void *old,
		     int *b, int *i)
{
	struct ext4_group_desc now, was;
	unsigned dsz = EXT2_DESC_SIZE(fs->super);

	*b = *i = 1;
	if (dsz > sizeof(now))
		return;
	memset(&now, 0, sizeof(now));
	memset(&was, 0, sizeof(was));
	memcpy(&now, cur, dsz);
	memcpy(&was, old, dsz);
	*b = MOVED(bg_block_bitmap) | MOVED(bg_block_bitmap_hi) |
	     MOVED(bg_free_blocks_count) | MOVED(bg_free_blocks_count_hi) |
	     MOVED(bg_block_bitmap_csum_lo) | MOVED(bg_block_bitmap_csum_hi) |
	     (((now.bg_flags ^ was.bg_flags) & EXT2_BG_BLOCK_UNINIT) != 0);
	*i = MOVED(bg_inode_bitmap) | MOVED(bg_inode_bitmap_hi) |
	     MOVED(bg_free_inodes_count) | MOVED(bg_free_inodes_count_hi) |
	     MOVED(bg_used_dirs_count) | MOVED(bg_used_dirs_count_hi) |
	     MOVED(bg_itable_unused) | MOVED(bg_itable_unused_hi) |
	     MOVED(bg_inode_bitmap_csum_lo) | MOVED(bg_inode_bitmap_csum_hi) |
	     (((now.bg_flags ^ was.bg_flags) & EXT2_BG_INODE_UNINIT) != 0);
	now.bg_flags = was.bg_flags;
	now.bg_checksum = was.bg_checksum;
	if (memcmp(&now, &was, sizeof(now)))
		*b = *i = 1;
}
#undef MOVED

/*
 * The safety net: a group whose descriptor differs from the one last
 * written has the bitmaps it concerns written.  One memcmp per descriptor
 * block, per group only inside blocks that differ.
 */
static void catch_unnoticed(struct nx_meta *m)
{
	ext2_filsys fs = m->fs;
	unsigned dsz = EXT2_DESC_SIZE(fs->super);
	unsigned per_block = EXT2_DESC_PER_BLOCK(fs->super);
	const char *cur = (const char *)fs->group_desc;
	dgrp_t g, end;
	blk64_t d;
	int b, i;

	for (d = 0; d < fs->desc_blocks; d++) {
		size_t off = (size_t)d * fs->blocksize;

		if (!memcmp(cur + off, m->desc + off, fs->blocksize))
			continue;
		end = (d + 1) * per_block;
		if (end > fs->group_desc_count)
			end = fs->group_desc_count;
		for (g = d * per_block; g < end; g++) {
			off = (size_t)g * dsz;
			if (!memcmp(cur + off, m->desc + off, dsz))
				continue;
			classify(fs, cur + off, m->desc + off, &b, &i);
			if (b)
				ext2fs_set_bit(g, m->bdirty);
			if (i)
				ext2fs_set_bit(g, m->idirty);
		}
	}
}

static errcode_t write_bitmap_block(ext2_filsys fs, blk64_t blk,
				    const void *buf, int *wrote)
{
	errcode_t err;

	/* A corrupt location is skipped, as ext2fs_write_bitmaps() does. */
	if (!blk || blk >= ext2fs_blocks_count(fs->super))
		return 0;
	err = io_channel_write_blk64(fs->io, blk, 1, buf);
	if (!err)
		(*wrote)++;
	return err;
}

/* Clear in m->buf the bits of blocks [FIRST, FIRST+NBITS) in as_free. */
static void clear_as_free(struct nx_meta *m, blk64_t first, unsigned nbits)
{
	blk64_t end = first + nbits - 1, from = first, blk, last;

	if (!m->as_free)
		return;
	last = ext2fs_blocks_count(m->fs->super) - 1;
	if (end > last)
		end = last;
	while (from <= end &&
	       !ext2fs_find_first_set_block_bitmap2(m->as_free, from, end,
						    &blk)) {
		ext2fs_clear_bit((unsigned)(blk - first), m->buf);
		from = blk + 1;
	}
}

void nx_meta_write_as_free(struct nx_volume *vol, ext2fs_block_bitmap map)
{
	if (vol->meta)
		vol->meta->as_free = map;
}

static errcode_t write_block_bitmap(struct nx_meta *m, dgrp_t g, int *wrote)
{
	ext2_filsys fs = m->fs;
	unsigned nbytes = EXT2_CLUSTERS_PER_GROUP(fs->super) / 8;
	blk64_t start = fs->super->s_first_data_block +
			(blk64_t)g * EXT2_BLOCKS_PER_GROUP(fs->super);
	blk64_t tail;
	unsigned bit;
	errcode_t err;

	/* Never read from disk: libext2fs computes it (read_bitmaps). */
	if (ext2fs_has_group_desc_csum(fs) &&
	    ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
		return 0;
	/* Bits past the group (small groups) read as in use. */
	memset(m->buf, 0xff, fs->blocksize);
	err = ext2fs_get_block_bitmap_range2(fs->block_map, start, nbytes * 8,
					     m->buf);
	if (err)
		return err;
	clear_as_free(m, start, nbytes * 8);
	/*
	 * Blocks past the end of a short last group read as in use.  The
	 * in-memory bitmap has these bits from disk already; set them anyway,
	 * as ext2fs_write_bitmaps() does, so a bad copy is never written.
	 */
	tail = (ext2fs_blocks_count(fs->super) -
		fs->super->s_first_data_block) %
	       EXT2_BLOCKS_PER_GROUP(fs->super);
	if (g == fs->group_desc_count - 1 && tail)
		for (bit = (unsigned)tail; bit < fs->blocksize * 8; bit++)
			ext2fs_set_bit(bit, m->buf);
	err = ext2fs_block_bitmap_csum_set(fs, g, m->buf, nbytes);
	if (!err)
		err = write_bitmap_block(fs, ext2fs_block_bitmap_loc(fs, g),
					 m->buf, wrote);
	return err;
}

static errcode_t write_inode_bitmap(struct nx_meta *m, dgrp_t g, int *wrote)
{
	ext2_filsys fs = m->fs;
	ext2_ino_t ipg = fs->super->s_inodes_per_group;
	errcode_t err;

	if (ext2fs_has_group_desc_csum(fs) &&
	    ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT))
		return 0;
	/* Bits past s_inodes_per_group read as in use. */
	memset(m->buf, 0xff, fs->blocksize);
	err = ext2fs_get_inode_bitmap_range2(fs->inode_map,
					     (ext2_ino_t)g * ipg + 1, ipg,
					     m->buf);
	if (!err)
		err = ext2fs_inode_bitmap_csum_set(fs, g, m->buf,
						   (ipg + 7) / 8);
	if (!err)
		err = write_bitmap_block(fs, ext2fs_inode_bitmap_loc(fs, g),
					 m->buf, wrote);
	return err;
}

/*
 * Write the bitmaps of the dirty groups.  A group's bits are cleared
 * before its blocks are written: the copy-on-write hook may allocate
 * (and so dirty groups again) while we write, and those must stay dirty
 * for the next round (nx_snap_flush loops until nothing more changes).
 */
static errcode_t write_bitmaps(struct nx_meta *m, int *wrote)
{
	ext2_filsys fs = m->fs;
	errcode_t err = 0;
	dgrp_t g;
	int b, i;

	for (g = 0; g < fs->group_desc_count; g++) {
		if (!(g & 7) && !m->bdirty[g / 8] && !m->idirty[g / 8]) {
			g += 7;
			continue;
		}
		b = ext2fs_test_bit(g, m->bdirty);
		i = ext2fs_test_bit(g, m->idirty);
		if (!b && !i)
			continue;
		ext2fs_clear_bit(g, m->bdirty);
		ext2fs_clear_bit(g, m->idirty);
		if (b)
			err = write_block_bitmap(m, g, wrote);
		if (!err && i)
			err = write_inode_bitmap(m, g, wrote);
		if (err) {
			if (b)
				ext2fs_set_bit(g, m->bdirty);
			if (i)
				ext2fs_set_bit(g, m->idirty);
			return err;
		}
		ext2fs_group_desc_csum_set(fs, g);
	}
	return 0;
}

/*
 * Write each descriptor block that differs from what was last written, to
 * its primary location (meta_bg puts it in its meta group).  It is written
 * from our copy, so that a change made meanwhile (by the hook) still
 * differs afterwards.
 */
static errcode_t write_descriptors(struct nx_meta *m, int *wrote)
{
	ext2_filsys fs = m->fs;
	const char *cur = (const char *)fs->group_desc;
	errcode_t err;
	blk64_t d, blk;

	for (d = 0; d < fs->desc_blocks; d++) {
		size_t off = (size_t)d * fs->blocksize;

		if (!m->all_desc &&
		    !memcmp(cur + off, m->desc + off, fs->blocksize))
			continue;
		memcpy(m->desc + off, cur + off, fs->blocksize);
		blk = ext2fs_descriptor_block_loc2(fs,
				fs->super->s_first_data_block, (dgrp_t)d);
		err = io_channel_write_blk64(fs->io, blk, 1, m->desc + off);
		if (err) {
			m->all_desc = 1;	/* our copy is not on disk */
			return err;
		}
		(*wrote)++;
	}
	m->all_desc = 0;
	return 0;
}

/* The primary superblock, as ext2fs_flush2() leaves it. */
static errcode_t write_super(ext2_filsys fs)
{
	struct ext2_super_block copy;
	errcode_t err;

	fs->super->s_wtime = fs->now ? fs->now : time(NULL);
	fs->super->s_block_group_nr = 0;
	err = ext2fs_superblock_csum_set(fs, fs->super);
	if (err)
		return err;
	/* A copy: the hook may change the in-memory one while we write. */
	memcpy(&copy, fs->super, SUPERBLOCK_SIZE);
	err = io_channel_write_byte(fs->io, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE,
				    &copy);
	/* What the primary holds now (ext2fs_flush2() diffs against it). */
	if (!err && fs->orig_super)
		memcpy(fs->orig_super, &copy, SUPERBLOCK_SIZE);
	return err;
}

static int super_changed(ext2_filsys fs)
{
	return !fs->orig_super ||
	       memcmp(fs->super, fs->orig_super, SUPERBLOCK_SIZE) != 0;
}

errcode_t nx_meta_write(struct nx_volume *vol)
{
	struct nx_meta *m = vol->meta;
	ext2_filsys fs = vol->fs;
	int was, wrote = 0;
	errcode_t err;

	if (!m)		/* not attached (unsupported layout): all of it */
		return ext2fs_flush2(fs, 0);
	/*
	 * libext2fs's dirty flags go first, for the reason given above
	 * write_bitmaps(); once they are clear ext2fs_close() writes nothing.
	 * (1.47.0 has no ext2fs_unmark_bb_dirty(): clear the bits directly.)
	 * EXT2_FLAG_CHANGED stays, as ext2fs_flush2() leaves it.
	 */
	was = fs->flags & (EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY |
			   EXT2_FLAG_IB_DIRTY);
	fs->flags &= ~was;
	catch_unnoticed(m);
	/* Bitmap checksums live in the descriptors: bitmaps first. */
	err = write_bitmaps(m, &wrote);
	if (!err)
		err = write_descriptors(m, &wrote);
	if (!err && (wrote || (was & EXT2_FLAG_DIRTY) || super_changed(fs)))
		err = write_super(fs);
	if (err)
		fs->flags |= was;
	return err;
}
