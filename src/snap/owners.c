/*
 * owners.c - block ownership as e2fsck sees it, for the offline tools
 * (snaptool.h: nx_scan_owners, nx_apply_block_bitmap,
 * nx_recount_inodes): which blocks the inodes in use claim, which twice,
 * and making the bitmaps and free counts say so.  The checker (check.c),
 * restore and export use it on a volume opened raw, without the snapshot
 * engine.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/snaptool.h"
#include "snap_internal.h"


struct owner_ctx {
	struct nx_owner_scan *scan;
	ext2fs_block_bitmap ea_seen;
	ext2_ino_t ino;
};

static void claim_block(struct owner_ctx *oc, blk64_t blk,
			e2_blkcnt_t blockcnt)
{
	struct nx_owner_scan *scan = oc->scan;

	if (scan->claim)
		scan->claim(scan->priv, oc->ino, blk, blockcnt);
	if (ext2fs_test_block_bitmap2(scan->used, blk)) {
		if (scan->dup && !ext2fs_test_block_bitmap2(scan->dup, blk)) {
			ext2fs_mark_block_bitmap2(scan->dup, blk);
			scan->ndup++;
		}
		return;
	}
	ext2fs_mark_block_bitmap2(scan->used, blk);
}

static int in_range(ext2_filsys fs, blk64_t blk)
{
	return blk >= fs->super->s_first_data_block &&
	       blk < ext2fs_blocks_count(fs->super);
}

static int owner_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		       blk64_t ref_blk, int ref_offset, void *priv)
{
	struct owner_ctx *oc = priv;

	if (!in_range(fs, *blocknr)) {
		oc->scan->nbad++;
		return 0;
	}
	claim_block(oc, *blocknr, blockcnt);
	return 0;
}

/* Superblocks, descriptors, bitmaps, inode tables, MMP. */
void nx_mark_fs_metadata(ext2_filsys fs, ext2fs_block_bitmap map)
{
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t it = ext2fs_inode_table_loc(fs, g);

		ext2fs_reserve_super_and_bgd(fs, g, map);
		if (in_range(fs, ext2fs_block_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(map,
					ext2fs_block_bitmap_loc(fs, g));
		if (in_range(fs, ext2fs_inode_bitmap_loc(fs, g)))
			ext2fs_mark_block_bitmap2(map,
					ext2fs_inode_bitmap_loc(fs, g));
		if (it && in_range(fs, it) &&
		    in_range(fs, it + fs->inode_blocks_per_group - 1))
			ext2fs_mark_block_bitmap_range2(map, it,
					fs->inode_blocks_per_group);
	}
	if (ext2fs_has_feature_mmp(fs->super) &&
	    in_range(fs, fs->super->s_mmp_block))
		ext2fs_mark_block_bitmap2(map, fs->super->s_mmp_block);
}

static int inode_in_use(ext2_filsys fs, ext2_ino_t ino,
			const struct ext2_inode_large *inode)
{
	if (ino < EXT2_FIRST_INODE(fs->super))
		return ino == EXT2_ROOT_INO ? inode->i_links_count > 0 :
		       inode->i_mode != 0 || inode->i_blocks != 0 ||
		       ino == EXT2_BAD_INO;
	return inode->i_links_count > 0;
}

static void scan_one_inode(ext2_filsys fs, struct owner_ctx *oc,
			   ext2_ino_t ino, struct ext2_inode_large *inode)
{
	struct nx_owner_scan *scan = oc->scan;
	blk64_t ea = ext2fs_file_acl_block(fs, (struct ext2_inode *)inode);
	errcode_t err;

	oc->ino = ino;
	if (ea) {
		if (!in_range(fs, ea))
			scan->nbad++;
		else if (!ext2fs_test_block_bitmap2(oc->ea_seen, ea)) {
			/* xattr blocks are shared by reference count */
			ext2fs_mark_block_bitmap2(oc->ea_seen, ea);
			claim_block(oc, ea, BLOCK_COUNT_TRANSLATOR);
		}
	}
	if (ino == EXT2_RESIZE_INO) {
		/* Its other blocks are the reserved descriptors, marked above. */
		blk64_t dind = inode->i_block[EXT2_DIND_BLOCK];

		if (dind && in_range(fs, dind))
			claim_block(oc, dind, BLOCK_COUNT_DIND);
		return;
	}
	if ((inode->i_flags & EXT4_INLINE_DATA_FL) ||
	    !ext2fs_inode_has_valid_blocks2(fs, (struct ext2_inode *)inode))
		return;
	err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY, NULL,
				    owner_block, oc);
	if (err) {
		if (!scan->nbadino++) {
			scan->bad_ino = ino;
			scan->bad_err = err;
		}
	}
}

errcode_t nx_scan_owners(ext2_filsys fs, struct nx_owner_scan *scan)
{
	struct owner_ctx oc = { scan, NULL, 0 };
	struct ext2_inode_large inode;
	ext2_inode_scan iscan = NULL;
	ext2_ino_t ino;
	errcode_t err;
	dgrp_t last_group = (dgrp_t)-1;

	scan->ndup = scan->nbad = 0;
	scan->nbadino = 0;
	scan->bad_ino = 0;
	scan->bad_err = 0;
	ext2fs_clear_block_bitmap(scan->used);
	if (scan->dup)
		ext2fs_clear_block_bitmap(scan->dup);
	err = ext2fs_allocate_block_bitmap(fs, "xattr blocks", &oc.ea_seen);
	if (err)
		return err;
	nx_mark_fs_metadata(fs, scan->used);
	err = ext2fs_open_inode_scan(fs, 0, &iscan);
	if (err)
		goto out;
	ext2fs_inode_scan_flags(iscan, EXT2_SF_SKIP_MISSING_ITABLE, 0);
	for (;;) {
		memset(&inode, 0, sizeof(inode));
		err = ext2fs_get_next_inode_full(iscan, &ino,
						 (struct ext2_inode *)&inode,
						 sizeof(inode));
		if (err == EXT2_ET_BAD_BLOCK_IN_INODE_TABLE ||
		    err == EXT2_ET_INODE_CSUM_INVALID ||
		    err == EXT2_ET_INODE_IS_GARBAGE)
			continue;
		if (err || !ino)
			break;
		if (scan->prog && scan->prog->fn &&
		    (ino - 1) / fs->super->s_inodes_per_group != last_group) {
			last_group = (ino - 1) / fs->super->s_inodes_per_group;
			scan->prog->fn(scan->prog->priv, "scanning inodes",
				       last_group, fs->group_desc_count);
		}
		if (!inode_in_use(fs, ino, &inode))
			continue;
		if (scan->skip && scan->skip(scan->priv, ino, &inode))
			continue;
		scan_one_inode(fs, &oc, ino, &inode);
	}
	if (scan->prog && scan->prog->fn)
		scan->prog->fn(scan->prog->priv, "scanning inodes",
			       fs->group_desc_count, fs->group_desc_count);
out:
	if (iscan)
		ext2fs_close_inode_scan(iscan);
	ext2fs_free_block_bitmap(oc.ea_seen);
	return err;
}

void nx_apply_block_bitmap(ext2_filsys fs, ext2fs_block_bitmap used)
{
	blk64_t total = 0;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t b, first = ext2fs_group_first_block2(fs, g);
		blk64_t last = ext2fs_group_last_block2(fs, g);
		blk64_t nfree = 0;
		int changed = 0;

		for (b = first; b <= last; b++) {
			int u = ext2fs_test_block_bitmap2(used, b) != 0;

			if (u != (ext2fs_test_block_bitmap2(fs->block_map,
							    b) != 0)) {
				changed = 1;
				if (u)
					ext2fs_mark_block_bitmap2(fs->block_map,
								  b);
				else
					ext2fs_unmark_block_bitmap2(
						fs->block_map, b);
			}
			if (!u)
				nfree++;
		}
		if (changed)
			ext2fs_bg_flags_clear(fs, g, EXT2_BG_BLOCK_UNINIT);
		ext2fs_bg_free_blocks_count_set(fs, g, nfree);
		ext2fs_group_desc_csum_set(fs, g);
		total += nfree;
	}
	ext2fs_free_blocks_count_set(fs->super, total);
	ext2fs_mark_bb_dirty(fs);
	ext2fs_mark_super_dirty(fs);
}

errcode_t nx_recount_inodes(ext2_filsys fs)
{
	ext2_ino_t ipg = fs->super->s_inodes_per_group, i;
	uint32_t total = 0;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		uint32_t nfree = 0;

		for (i = 1; i <= ipg; i++)
			if (!ext2fs_test_inode_bitmap2(fs->inode_map,
						       g * ipg + i))
				nfree++;
		ext2fs_bg_free_inodes_count_set(fs, g, nfree);
		ext2fs_group_desc_csum_set(fs, g);
		total += nfree;
	}
	fs->super->s_free_inodes_count = total;
	ext2fs_mark_ib_dirty(fs);
	ext2fs_mark_super_dirty(fs);
	return 0;
}
