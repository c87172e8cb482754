/*
 * bitmaps.c - load the allocation bitmaps at open, at the cost of the
 * groups in use (contract in include/nextfs/bitmaps.h).
 *
 * Why not ext2fs_read_bitmaps(): it hands every group's bitmap to the
 * in-memory bitmap, a zeroed buffer for each uninitialised group, and a
 * red-black tree bitmap walks every byte it is given; on a 4 TiB volume
 * (32768 groups, nearly all BLOCK_UNINIT and INODE_UNINIT) that walk was
 * most of the mount time, and the few thousand bitmaps that are real
 * were read one wait at a time.  Here an uninitialised group is simply
 * left clear (a new bitmap is all zeroes), and the blocks to read are
 * asked of the device in one batch first.
 */
#include <stdlib.h>
#include <string.h>
#include "nextfs/bitmaps.h"
#include "nextfs/blkio.h"

/*
 * The block holding group G's bitmap (INODE: its inode bitmap), or 0
 * where libext2fs would read none: uninitialised groups whose
 * descriptor checksum holds, and locations past the end of the volume.
 */
static blk64_t bitmap_to_read(ext2_filsys fs, dgrp_t g, int inode)
{
	blk64_t blk = inode ? ext2fs_inode_bitmap_loc(fs, g) :
			      ext2fs_block_bitmap_loc(fs, g);
	int flag = inode ? EXT2_BG_INODE_UNINIT : EXT2_BG_BLOCK_UNINIT;

	if (ext2fs_has_group_desc_csum(fs) && ext2fs_bg_flags_test(fs, g, flag) &&
	    ext2fs_group_desc_csum_verify(fs, g))
		return 0;
	if (blk >= ext2fs_blocks_count(fs->super))
		return 0;
	return blk;
}

static int by_block(const void *a, const void *b)
{
	blk64_t x = *(const blk64_t *)a, y = *(const blk64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Start reading every bitmap block the load will need (runs of
 * neighbours as one request: flex_bg packs them), so that the device
 * sees them as one batch rather than a queue of single waits.
 */
static void prefetch_bitmaps(ext2_filsys fs, int want_block, int want_inode)
{
	struct nx_blkio *io = nx_blkio_from_channel(fs->io);
	size_t n = 0, i, start;
	blk64_t *v, blk;
	dgrp_t g;

	if (!io)
		return;
	v = malloc(2 * (size_t)fs->group_desc_count * sizeof(*v));
	if (!v)
		return;		/* only a hint */
	for (g = 0; g < fs->group_desc_count; g++) {
		if (want_block && (blk = bitmap_to_read(fs, g, 0)))
			v[n++] = blk;
		if (want_inode && (blk = bitmap_to_read(fs, g, 1)))
			v[n++] = blk;
	}
	qsort(v, n, sizeof(*v), by_block);
	for (start = 0, i = 1; i <= n; i++) {
		if (i < n && v[i] <= v[i - 1] + 1)
			continue;
		nx_blkio_prefetch(io, v[start] * fs->blocksize,
				  (v[i - 1] - v[start] + 1) * fs->blocksize);
		start = i;
	}
	free(v);
}

/* Bytes [first, blocksize) of a bitmap block are padding: all ones. */
static int tail_is_padding(const unsigned char *buf, size_t first,
			   size_t blocksize)
{
	size_t i;

	for (i = first; i < blocksize; i++)
		if (buf[i] != 0xff)
			return 0;
	return 1;
}

/*
 * Read group G's bitmap (INODE: the inode bitmap) into the in-memory
 * one, if it has one to read; errors and tail flags as libext2fs's.
 */
static errcode_t load_group(ext2_filsys fs, dgrp_t g, int inode, char *buf,
			    int *tail_flags)
{
	size_t nbytes = inode ? EXT2_INODES_PER_GROUP(fs->super) / 8 :
			EXT2_CLUSTERS_PER_GROUP(fs->super) / 8;
	blk64_t blk = bitmap_to_read(fs, g, inode);
	int ok;

	if (!blk)
		return 0;	/* all clear: what a new bitmap holds */
	if (io_channel_read_blk64(fs->io, blk, 1, buf))
		return inode ? EXT2_ET_INODE_BITMAP_READ :
			       EXT2_ET_BLOCK_BITMAP_READ;
	if (!(fs->flags & EXT2_FLAG_IGNORE_CSUM_ERRORS)) {
		ok = inode ? ext2fs_inode_bitmap_csum_verify(fs, g, buf, nbytes)
			   : ext2fs_block_bitmap_csum_verify(fs, g, buf,
							     nbytes);
		if (!ok)
			return inode ? EXT2_ET_INODE_BITMAP_CSUM_INVALID :
				       EXT2_ET_BLOCK_BITMAP_CSUM_INVALID;
	}
	if (!tail_is_padding((unsigned char *)buf, nbytes, fs->blocksize))
		*tail_flags |= inode ? EXT2_FLAG_IBITMAP_TAIL_PROBLEM :
				       EXT2_FLAG_BBITMAP_TAIL_PROBLEM;
	if (inode)
		return ext2fs_set_inode_bitmap_range2(fs->inode_map,
				(ext2_ino_t)g * EXT2_INODES_PER_GROUP(fs->super)
				+ 1, nbytes * 8, buf);
	return ext2fs_set_block_bitmap_range2(fs->block_map,
			EXT2FS_B2C(fs, fs->super->s_first_data_block) +
			(blk64_t)g * EXT2_CLUSTERS_PER_GROUP(fs->super),
			nbytes * 8, buf);
}

/*
 * What libext2fs marks for groups whose block bitmap is uninitialised:
 * their superblock and descriptor copies, inode table and bitmaps.
 */
static void mark_uninit_metadata(ext2_filsys fs)
{
	ext2fs_block_bitmap map = fs->block_map;
	blk64_t blk;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		if (!ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
			continue;
		ext2fs_reserve_super_and_bgd(fs, g, map);
		if ((blk = ext2fs_inode_table_loc(fs, g)))
			ext2fs_mark_block_bitmap_range2(map, blk,
						fs->inode_blocks_per_group);
		if ((blk = ext2fs_block_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(map, blk);
		if ((blk = ext2fs_inode_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(map, blk);
	}
}

static errcode_t new_bitmaps(ext2_filsys fs, int want_block, int want_inode)
{
	errcode_t err = 0;

	if (want_block)
		err = ext2fs_allocate_block_bitmap(fs, "block bitmap",
						   &fs->block_map);
	if (!err && want_inode)
		err = ext2fs_allocate_inode_bitmap(fs, "inode bitmap",
						   &fs->inode_map);
	return err;
}

static void drop_new_bitmaps(ext2_filsys fs, int want_block, int want_inode)
{
	if (want_block && fs->block_map) {
		ext2fs_free_block_bitmap(fs->block_map);
		fs->block_map = NULL;
	}
	if (want_inode && fs->inode_map) {
		ext2fs_free_inode_bitmap(fs->inode_map);
		fs->inode_map = NULL;
	}
}

errcode_t nx_bitmaps_read(ext2_filsys fs)
{
	int want_block = !fs->block_map, want_inode = !fs->inode_map;
	int tail_flags = 0;
	char *buf = NULL;
	errcode_t err;
	dgrp_t g;

	if (!want_block && !want_inode)
		return 0;
	if (EXT2FS_CLUSTER_RATIO(fs) != 1 || (fs->flags & EXT2_FLAG_IMAGE_FILE) ||
	    !nx_blkio_from_channel(fs->io))
		return ext2fs_read_bitmaps(fs);
	if (EXT2_CLUSTERS_PER_GROUP(fs->super) / 8 > fs->blocksize ||
	    EXT2_INODES_PER_GROUP(fs->super) / 8 > fs->blocksize)
		return EXT2_ET_CORRUPT_SUPERBLOCK;
	fs->write_bitmaps = ext2fs_write_bitmaps;
	err = new_bitmaps(fs, want_block, want_inode);
	if (!err)
		err = ext2fs_get_mem(fs->blocksize, &buf);
	if (err)
		goto out;
	prefetch_bitmaps(fs, want_block, want_inode);
	for (g = 0; !err && g < fs->group_desc_count; g++) {
		if (want_block)
			err = load_group(fs, g, 0, buf, &tail_flags);
		if (!err && want_inode)
			err = load_group(fs, g, 1, buf, &tail_flags);
	}
	if (err)
		goto out;
	if (want_block) {
		mark_uninit_metadata(fs);
		fs->flags &= ~EXT2_FLAG_BBITMAP_TAIL_PROBLEM;
	}
	if (want_inode)
		fs->flags &= ~EXT2_FLAG_IBITMAP_TAIL_PROBLEM;
	fs->flags |= tail_flags;
out:
	ext2fs_free_mem(&buf);
	if (err)
		drop_new_bitmaps(fs, want_block, want_inode);
	return err;
}
