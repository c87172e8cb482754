/*
 * sanity.c - the kernel's mount-time checks, before nextfs writes (see
 * nextfs/sanity.h).
 *
 * libext2fs opens what it can and, asked to write, recomputes every
 * checksum it writes: a bit flipped in a group descriptor comes back out
 * with a fresh, valid checksum and the damage is hidden instead of
 * repaired.  The kernel refuses such a volume for writing
 * (ext4_check_descriptors: "Checksum for group %u failed"), and so do we,
 * with the same checks in the same order: superblock fields and checksum
 * and the geometry against the device first (ext4_fill_super,
 * ext4_check_geometry), group descriptors before any journal replay,
 * bitmaps, the root inode and the orphan list after it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <et/com_err.h>
#include "nextfs/sanity.h"
#include "nextfs/blkio.h"
#include "nextfs/volume.h"

static void note_fix(struct nx_damage *d, enum nx_damage_level level,
		     const char *fix, const char *fmt, va_list ap)
{
	if (level <= d->level)
		return;		/* the first finding of the worst kind stays */
	d->level = level;
	vsnprintf(d->problem, sizeof(d->problem), fmt, ap);
	d->own_fix = fix != NULL;
	snprintf(d->fix, sizeof(d->fix), "%s", fix ? fix : "");
}

void nx_damage_note(struct nx_damage *d, enum nx_damage_level level,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	note_fix(d, level, NULL, fmt, ap);
	va_end(ap);
}

void nx_damage_note_fix(struct nx_damage *d, enum nx_damage_level level,
			const char *fix, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	note_fix(d, level, fix, fmt, ap);
	va_end(ap);
}

static void human(uint64_t bytes, char *buf, size_t len)
{
	if (bytes < 10 * 1024)
		snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
	else if (bytes < 10ULL << 20)
		snprintf(buf, len, "%.1f KiB", bytes / 1024.0);
	else if (bytes < 10ULL << 30)
		snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
	else
		snprintf(buf, len, "%.1f GiB", bytes / 1073741824.0);
}

/* ------------------------------------------------------------------ */
/* Superblock (ext4_fill_super and ext4_check_geometry).               */

static int is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

#define FATAL(...) do {							\
		nx_damage_note(d, NX_DAMAGE_FATAL, "corrupt superblock: " \
			       __VA_ARGS__);				\
		return NX_DAMAGE_FATAL;					\
	} while (0)

static enum nx_damage_level check_super_fields(
	const struct ext2_super_block *sb, struct nx_damage *d)
{
	unsigned log = sb->s_log_block_size;
	uint32_t bs, isize, bpg, ipg, dsize, dpb;
	uint64_t blocks, groups, dblocks;
	unsigned want_first;

	if (log > EXT2_MAX_BLOCK_LOG_SIZE - EXT2_MIN_BLOCK_LOG_SIZE)
		FATAL("block size 2^%u (log %u, at most %u)",
		      log + EXT2_MIN_BLOCK_LOG_SIZE, log,
		      EXT2_MAX_BLOCK_LOG_SIZE - EXT2_MIN_BLOCK_LOG_SIZE);
	bs = EXT2_MIN_BLOCK_SIZE << log;
	if (sb->s_rev_level > EXT2_DYNAMIC_REV)
		FATAL("revision level %u (at most %u)", sb->s_rev_level,
		      EXT2_DYNAMIC_REV);
	if (!(sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_BIGALLOC) &&
	    sb->s_log_cluster_size != log)
		FATAL("cluster size differs from the block size without "
		      "bigalloc");
	isize = sb->s_rev_level == EXT2_GOOD_OLD_REV ?
		EXT2_GOOD_OLD_INODE_SIZE : sb->s_inode_size;
	if (isize < EXT2_GOOD_OLD_INODE_SIZE || isize > bs || !is_pow2(isize))
		FATAL("inode size %u", isize);
	if (sb->s_rev_level != EXT2_GOOD_OLD_REV &&
	    sb->s_first_ino < EXT2_GOOD_OLD_FIRST_INO)
		FATAL("first inode %u (at least %u)", sb->s_first_ino,
		      EXT2_GOOD_OLD_FIRST_INO);
	bpg = sb->s_blocks_per_group;
	if (bpg < 8 || bpg > 8 * bs)
		FATAL("%u blocks per group (8 to %u)", bpg, 8 * bs);
	ipg = sb->s_inodes_per_group;
	if (ipg < bs / isize || ipg > 8 * bs)
		FATAL("%u inodes per group (%u to %u)", ipg, bs / isize,
		      8 * bs);
	/*
	 * ext4 only insists on 1 with 1 KiB blocks; libext2fs 1.47.0
	 * overruns a buffer reading bitmaps with any other value.
	 */
	want_first = bs == 1024 ? 1 : 0;
	if (sb->s_first_data_block != want_first)
		FATAL("first data block %u, expected %u",
		      sb->s_first_data_block, want_first);
	blocks = ext2fs_blocks_count((struct ext2_super_block *)sb);
	if (blocks <= sb->s_first_data_block)
		FATAL("block count %llu", (unsigned long long)blocks);
	dsize = EXT2_MIN_DESC_SIZE;
	if (sb->s_feature_incompat & EXT4_FEATURE_INCOMPAT_64BIT) {
		dsize = sb->s_desc_size;
		if (dsize < EXT2_MIN_DESC_SIZE_64BIT ||
		    dsize > EXT2_MAX_DESC_SIZE || !is_pow2(dsize))
			FATAL("group descriptor size %u", dsize);
	}
	dpb = bs / dsize;
	groups = (blocks - sb->s_first_data_block + bpg - 1) / bpg;
	if (groups > (1ULL << 32) - dpb)
		FATAL("%llu block groups", (unsigned long long)groups);
	if (groups * ipg != sb->s_inodes_count)
		FATAL("%u inodes, but %llu groups of %u inodes make %llu",
		      sb->s_inodes_count, (unsigned long long)groups, ipg,
		      (unsigned long long)(groups * ipg));
	dblocks = (groups + dpb - 1) / dpb;
	if ((sb->s_feature_compat & EXT2_FEATURE_COMPAT_RESIZE_INODE) &&
	    sb->s_reserved_gdt_blocks > bs / 4)
		FATAL("%u reserved descriptor blocks (at most %u)",
		      sb->s_reserved_gdt_blocks, bs / 4);
	if ((sb->s_feature_incompat & EXT2_FEATURE_INCOMPAT_META_BG) &&
	    sb->s_first_meta_bg > dblocks)
		FATAL("first meta block group %u, beyond the %llu descriptor "
		      "blocks", sb->s_first_meta_bg,
		      (unsigned long long)dblocks);
	if (sb->s_log_groups_per_flex > 31)
		FATAL("%u log groups per flex group (at most 31)",
		      sb->s_log_groups_per_flex);
	return NX_DAMAGE_NONE;
}

#undef FATAL

static void check_super_csum(const struct ext2_super_block *sb,
			     struct nx_damage *d)
{
	uint32_t crc;

	if (!(sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM))
		return;
	if (sb->s_checksum_type != EXT2_CRC32C_CHKSUM) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "corrupt superblock: "
			       "unknown metadata checksum type %u",
			       sb->s_checksum_type);
		return;
	}
	crc = ext2fs_crc32c_le(~0U, (const unsigned char *)sb,
			       offsetof(struct ext2_super_block, s_checksum));
	if (crc != sb->s_checksum)
		nx_damage_note(d, NX_DAMAGE_RW, "the superblock's checksum is "
			       "wrong (0x%08x, its content gives 0x%08x)",
			       sb->s_checksum, crc);
}

/* The kernel's "bad geometry: block count exceeds size of device". */
static void check_device_size(const char *device,
			      const struct ext2_super_block *sb,
			      const struct nx_probe *p, struct nx_damage *d)
{
	uint64_t need = ext2fs_blocks_count((struct ext2_super_block *)sb) <<
			(EXT2_MIN_BLOCK_LOG_SIZE + sb->s_log_block_size);
	char have_s[32], need_s[32], fix[256];

	if (p->size >= need)
		return;
	human(p->size, have_s, sizeof(have_s));
	human(need, need_s, sizeof(need_s));
	if (p->blockdev)
		snprintf(fix, sizeof(fix), "give nextfs the device that holds "
			 "all of it");
	else
		snprintf(fix, sizeof(fix), "if the rest is lost: 'truncate -s "
			 "%llu %s' restores its size (as zeros), then 'e2fsck "
			 "-f %s'", (unsigned long long)need, device, device);
	nx_damage_note_fix(d, NX_DAMAGE_RW, fix, "the device is %s (%llu bytes) "
		      "but the file system on it needs %s (%llu bytes): a "
		      "truncated image, or the wrong device", have_s,
		      (unsigned long long)p->size, need_s,
		      (unsigned long long)need);
}

/* ------------------------------------------------------------------ */
/* Group descriptors (ext4_check_descriptors).                         */

/* One metadata run of group G: inside its range, not over another. */
static int check_run(ext2_filsys fs, ext2fs_block_bitmap used, dgrp_t g,
		     const char *what, blk64_t start, blk64_t count,
		     struct nx_damage *d)
{
	int flex = ext2fs_has_feature_flex_bg(fs->super);
	blk64_t first = flex ? fs->super->s_first_data_block :
			ext2fs_group_first_block2(fs, g);
	blk64_t last = flex ? ext2fs_blocks_count(fs->super) - 1 :
		       ext2fs_group_last_block2(fs, g);

	if (start < first || start > last || count - 1 > last - start) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "group %u's %s (block "
			       "%llu) lies outside %s (blocks %llu-%llu)", g,
			       what, (unsigned long long)start,
			       flex ? "the volume" : "its group",
			       (unsigned long long)first,
			       (unsigned long long)last);
		return -1;
	}
	if (!ext2fs_test_block_bitmap_range2(used, start, (unsigned)count)) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "group %u's %s (block "
			       "%llu) overlaps other metadata", g, what,
			       (unsigned long long)start);
		return -1;
	}
	ext2fs_mark_block_bitmap_range2(used, start, (unsigned)count);
	return 0;
}

enum nx_damage_level nx_sanity_check_layout(ext2_filsys fs,
					    struct nx_damage *d)
{
	ext2fs_block_bitmap used = NULL;
	int saved = fs->default_bitmap_type;
	dgrp_t g;
	errcode_t err;

	if (fs->super->s_first_data_block != (fs->blocksize == 1024 ? 1U : 0U)) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "corrupt superblock: first "
			       "data block %u", fs->super->s_first_data_block);
		return NX_DAMAGE_FATAL;
	}
	fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* see volume.c */
	err = ext2fs_allocate_subcluster_bitmap(fs, "layout", &used);
	fs->default_bitmap_type = saved;
	if (err) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "cannot check the group "
			       "descriptors: %s", error_message(err));
		return NX_DAMAGE_FATAL;
	}
	for (g = 0; g < fs->group_desc_count; g++)
		ext2fs_reserve_super_and_bgd(fs, g, used);
	for (g = 0; g < fs->group_desc_count; g++)
		if (check_run(fs, used, g, "block bitmap",
			      ext2fs_block_bitmap_loc(fs, g), 1, d) ||
		    check_run(fs, used, g, "inode bitmap",
			      ext2fs_inode_bitmap_loc(fs, g), 1, d) ||
		    check_run(fs, used, g, "inode table",
			      ext2fs_inode_table_loc(fs, g),
			      fs->inode_blocks_per_group, d))
			break;
	ext2fs_free_block_bitmap(used);
	return d->level;
}

static void check_desc_csums(ext2_filsys fs, struct nx_damage *d)
{
	dgrp_t g;

	if (!ext2fs_has_group_desc_csum(fs))
		return;
	for (g = 0; g < fs->group_desc_count; g++)
		if (!ext2fs_group_desc_csum_verify(fs, g)) {
			nx_damage_note(d, NX_DAMAGE_RW, "group descriptor %u's "
				       "checksum is wrong", g);
			return;
		}
}

enum nx_damage_level nx_sanity_precheck(const char *device,
					const struct nx_probe *p,
					struct nx_damage *d)
{
	const struct ext2_super_block *sb = &p->sb;
	ext2_filsys fs = NULL;
	errcode_t err;

	if (check_super_fields(sb, d) == NX_DAMAGE_FATAL)
		return d->level;
	check_super_csum(sb, d);
	if (d->level == NX_DAMAGE_FATAL)
		return d->level;
	check_device_size(device, sb, p, d);
	/* Lenient and read-only: we want to see, and name, what is wrong. */
	err = ext2fs_open2(device, NULL, EXT2_FLAG_64BITS | EXT2_FLAG_FORCE |
			   EXT2_FLAG_SKIP_MMP | EXT2_FLAG_IGNORE_CSUM_ERRORS,
			   0, 0, nx_blkio_manager, &fs);
	if (err) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "cannot read its group "
			       "descriptors: %s", error_message(err));
		return d->level;
	}
	if (nx_sanity_check_layout(fs, d) != NX_DAMAGE_FATAL)
		check_desc_csums(fs, d);
	ext2fs_close_free(&fs);		/* opened read-only: writes nothing */
	return d->level;
}

/* ------------------------------------------------------------------ */
/* After the replay: bitmaps, root inode, orphans.                     */

/*
 * The allocator trusts the block bitmap: one that shows a group's own
 * bitmaps or inode table as free would hand them out as file blocks
 * (the kernel's ext4_validate_block_bitmap).
 */
static void check_bitmap_marks_metadata(ext2_filsys fs, struct nx_damage *d)
{
	blk64_t itab, zero;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		itab = ext2fs_inode_table_loc(fs, g);
		if (ext2fs_test_block_bitmap2(fs->block_map,
					      ext2fs_block_bitmap_loc(fs, g)) &&
		    ext2fs_test_block_bitmap2(fs->block_map,
					      ext2fs_inode_bitmap_loc(fs, g)) &&
		    ext2fs_find_first_zero_block_bitmap2(fs->block_map, itab,
				itab + fs->inode_blocks_per_group - 1, &zero))
			continue;
		nx_damage_note(d, NX_DAMAGE_RW, "the block bitmap shows "
			       "metadata of group %u as free", g);
		return;
	}
}

/*
 * ext4_fill_super: "corrupt root inode, run e2fsck" (also for read-only
 * mounts: without its root a volume is no use).
 */
enum nx_damage_level nx_sanity_check_root(ext2_filsys fs, struct nx_damage *d)
{
	struct ext2_inode inode;
	errcode_t err = ext2fs_read_inode(fs, EXT2_ROOT_INO, &inode);

	if (err == EXT2_ET_INODE_CSUM_INVALID)
		nx_damage_note(d, NX_DAMAGE_FATAL, "the root directory's inode "
			       "has a wrong checksum");
	else if (err)
		nx_damage_note(d, NX_DAMAGE_FATAL, "cannot read the root "
			       "directory's inode: %s", error_message(err));
	else if (!LINUX_S_ISDIR(inode.i_mode) || !inode.i_links_count ||
		 !EXT2_I_SIZE(&inode))
		nx_damage_note(d, NX_DAMAGE_FATAL, "the root directory's inode "
			       "is corrupt (mode 0%o, %u links, %llu bytes)",
			       inode.i_mode, inode.i_links_count,
			       (unsigned long long)EXT2_I_SIZE(&inode));
	return d->level;
}

/*
 * Block maps (ext4_ext_check, ext4_valid_extent_entries; for indirect
 * maps the kernel's check that every pointer lies inside the volume).
 *
 * libext2fs's iterators trust what they read: a depth that does not
 * match the nodes below it turns a leaf's extents into "index entries"
 * pointing anywhere, and a callback that stops at a bad block ends the
 * walk without an error.  Whatever is about to be changed - a snapshot's
 * map, an orphan's blocks - is walked here first, and the walk says
 * exactly what is wrong.
 */

/* The kernel's limit (fs/ext4/ext4_extents.h); libext2fs has none. */
#define NX_MAX_EXTENT_DEPTH	5

struct map_walk {
	ext2_filsys fs;
	ext2_ino_t ino;
	nx_map_fn fn;
	void *priv;
	char *problem;
	size_t len;
	ext2fs_block_bitmap seen;	/* map blocks read: each only once */
	char *buf[NX_MAX_EXTENT_DEPTH + 1];	/* one per level below i_block */
	blk64_t run_pblk, run_lblk, run_count;	/* data not yet given to fn */
};

#define MAP_DAMAGE(w, ...) do {						\
		snprintf((w)->problem, (w)->len, __VA_ARGS__);		\
		return EXT2_ET_FILESYSTEM_CORRUPTED;			\
	} while (0)

static int outside(ext2_filsys fs, blk64_t blk, blk64_t count)
{
	blk64_t end = ext2fs_blocks_count(fs->super);

	return blk < fs->super->s_first_data_block || blk >= end ||
	       count > end - blk;
}

static errcode_t flush_run(struct map_walk *w)
{
	errcode_t err = 0;

	if (w->run_count && w->fn)
		err = w->fn(w->priv, w->run_pblk, w->run_count, w->run_lblk);
	w->run_count = 0;
	return err;
}

/* COUNT data blocks from PBLK at logical LBLK. */
static errcode_t map_data(struct map_walk *w, blk64_t pblk, blk64_t count,
			  blk64_t lblk)
{
	errcode_t err;

	if (outside(w->fs, pblk, count))
		MAP_DAMAGE(w, "it maps logical block %llu to block %llu, "
			   "outside the volume", (unsigned long long)lblk,
			   (unsigned long long)pblk);
	if (w->run_count && w->run_pblk + w->run_count == pblk &&
	    w->run_lblk + w->run_count == lblk) {
		w->run_count += count;
		return 0;
	}
	err = flush_run(w);
	w->run_pblk = pblk;
	w->run_lblk = lblk;
	w->run_count = count;
	return err;
}

/* Map block BLK, which WHAT points at: in the volume, new, read into BUF. */
static errcode_t map_block(struct map_walk *w, blk64_t blk, const char *what,
			   char *buf)
{
	errcode_t err;

	if (outside(w->fs, blk, 1))
		MAP_DAMAGE(w, "%s points at block %llu, outside the volume",
			   what, (unsigned long long)blk);
	if (ext2fs_test_block_bitmap2(w->seen, blk))
		MAP_DAMAGE(w, "map block %llu is used twice",
			   (unsigned long long)blk);
	ext2fs_mark_block_bitmap2(w->seen, blk);
	if (w->fn) {
		err = w->fn(w->priv, blk, 1, NX_MAP_META);
		if (err)
			return err;
	}
	err = io_channel_read_blk64(w->fs->io, blk, 1, buf);
	if (err)
		MAP_DAMAGE(w, "cannot read its map block %llu: %s",
			   (unsigned long long)blk, error_message(err));
	return 0;
}

/* The header of an extent node: the root (BLK 0) or block BLK. */
static errcode_t check_extent_header(struct map_walk *w,
				     const struct ext3_extent_header *eh,
				     unsigned size, int depth, blk64_t blk)
{
	unsigned room = (size - sizeof(*eh)) / sizeof(struct ext3_extent);
	unsigned magic = ext2fs_le16_to_cpu(eh->eh_magic);
	unsigned max = ext2fs_le16_to_cpu(eh->eh_max);
	unsigned entries = ext2fs_le16_to_cpu(eh->eh_entries);
	unsigned have = ext2fs_le16_to_cpu(eh->eh_depth);
	char where[64];

	if (blk)
		snprintf(where, sizeof(where), "extent block %llu",
			 (unsigned long long)blk);
	else
		snprintf(where, sizeof(where), "extent tree's root");
	if (magic != EXT3_EXT_MAGIC)
		MAP_DAMAGE(w, "its %s has a bad magic number (0x%04x)", where,
			   magic);
	if (blk && have != (unsigned)depth)
		MAP_DAMAGE(w, "its %s has depth %u where the tree above it "
			   "needs %d", where, have, depth);
	if (!blk && have > NX_MAX_EXTENT_DEPTH)
		MAP_DAMAGE(w, "its %s has depth %u (at most %d)", where, have,
			   NX_MAX_EXTENT_DEPTH);
	if (!max || max > room)
		MAP_DAMAGE(w, "its %s has room for %u entries (1 to %u)",
			   where, max, room);
	if (entries > max)
		MAP_DAMAGE(w, "its %s has %u entries but room for %u", where,
			   entries, max);
	if (blk && ext2fs_has_feature_metadata_csum(w->fs->super) &&
	    !ext2fs_extent_block_csum_verify(w->fs, w->ino,
				(struct ext3_extent_header *)eh))
		MAP_DAMAGE(w, "its %s has a wrong checksum", where);
	return 0;
}

/*
 * The node EH (BLK 0: the root in i_block, SIZE bytes) at DEPTH, which
 * maps logical blocks LO to HI - 1 of the file (as its parent says).
 */
static errcode_t walk_extent_node(struct map_walk *w,
				  const struct ext3_extent_header *eh,
				  unsigned size, int depth, blk64_t blk,
				  blk64_t lo, blk64_t hi)
{
	unsigned entries = ext2fs_le16_to_cpu(eh->eh_entries), i;
	blk64_t next = lo;
	errcode_t err;

	err = check_extent_header(w, eh, size, depth, blk);
	if (err)
		return err;
	for (i = 0; i < entries; i++) {
		if (depth) {
			const struct ext3_extent_idx *ix =
				EXT_FIRST_INDEX(eh) + i;
			blk64_t first = ext2fs_le32_to_cpu(ix->ei_block);
			blk64_t end = i + 1 < entries ?
				ext2fs_le32_to_cpu(ix[1].ei_block) : hi;
			blk64_t child = ext2fs_le32_to_cpu(ix->ei_leaf) |
				(blk64_t)ext2fs_le16_to_cpu(ix->ei_leaf_hi) << 32;
			char *buf = w->buf[depth - 1];

			if (first < next || first >= hi || end <= first)
				MAP_DAMAGE(w, "its index entries are out of order "
					   "(logical block %llu)",
					   (unsigned long long)first);
			next = end;
			err = map_block(w, child, "an index entry", buf);
			if (!err)
				err = walk_extent_node(w, (const void *)buf,
						       w->fs->blocksize,
						       depth - 1, child, first,
						       end);
		} else {
			const struct ext3_extent *ex = EXT_FIRST_EXTENT(eh) + i;
			blk64_t first = ext2fs_le32_to_cpu(ex->ee_block);
			blk64_t len = ext2fs_le16_to_cpu(ex->ee_len);
			blk64_t start = ext2fs_le32_to_cpu(ex->ee_start) |
				(blk64_t)ext2fs_le16_to_cpu(ex->ee_start_hi) << 32;

			if (len > EXT_INIT_MAX_LEN)
				len -= EXT_INIT_MAX_LEN;	/* unwritten */
			if (!len || first < next || first + len > hi)
				MAP_DAMAGE(w, "its extents are out of order or "
					   "empty (logical block %llu, %llu "
					   "blocks)", (unsigned long long)first,
					   (unsigned long long)len);
			next = first + len;
			err = map_data(w, start, len, first);
		}
		if (err)
			return err;
	}
	return 0;
}

/* The indirect block BLK of LEVEL (1: it holds data block numbers). */
static errcode_t walk_indirect(struct map_walk *w, blk64_t blk, int level,
			       blk64_t lblk)
{
	blk64_t per = w->fs->blocksize / 4, span = 1, i;
	const uint32_t *ptr = (const uint32_t *)w->buf[level - 1];
	errcode_t err;
	int l;

	err = map_block(w, blk, "an indirect block pointer",
			w->buf[level - 1]);
	for (l = 1; l < level; l++)
		span *= per;
	for (i = 0; !err && i < per; i++) {
		blk64_t p = ext2fs_le32_to_cpu(ptr[i]);

		if (!p)
			continue;
		if (level == 1)
			err = map_data(w, p, 1, lblk + i);
		else
			err = walk_indirect(w, p, level - 1, lblk + i * span);
	}
	return err;
}

static errcode_t walk_map(struct map_walk *w, struct ext2_inode *inode)
{
	blk64_t per = w->fs->blocksize / 4, lblk = EXT2_NDIR_BLOCKS;
	errcode_t err = 0;
	int i;

	if (inode->i_flags & EXT4_EXTENTS_FL) {
		const struct ext3_extent_header *eh = (const void *)inode->i_block;

		return walk_extent_node(w, eh, sizeof(inode->i_block),
					ext2fs_le16_to_cpu(eh->eh_depth), 0, 0,
					EXT_MAX_EXTENT_LBLK + 1);
	}
	for (i = 0; !err && i < EXT2_NDIR_BLOCKS; i++)
		if (inode->i_block[i])
			err = map_data(w, inode->i_block[i], 1, i);
	for (i = 1; !err && i <= 3; i++) {
		blk64_t p = inode->i_block[EXT2_NDIR_BLOCKS + i - 1];

		if (p)
			err = walk_indirect(w, p, i, lblk);
		lblk += i == 1 ? per : i == 2 ? per * per : 0;
	}
	return err;
}

errcode_t nx_sanity_walk_map(ext2_filsys fs, ext2_ino_t ino,
			     struct ext2_inode *inode, nx_map_fn fn,
			     void *priv, char *problem, size_t len)
{
	struct map_walk w = { fs, ino, fn, priv, problem, len, NULL, { 0 },
			      0, 0, 0 };
	int saved = fs->default_bitmap_type;
	errcode_t err;
	int i;

	if (len)
		problem[0] = 0;
	/* What has no block map: inline data, fast symlinks, devices. */
	if ((inode->i_flags & EXT4_INLINE_DATA_FL) ||
	    !(LINUX_S_ISREG(inode->i_mode) || LINUX_S_ISDIR(inode->i_mode) ||
	      LINUX_S_ISLNK(inode->i_mode)) ||
	    (LINUX_S_ISLNK(inode->i_mode) && ext2fs_is_fast_symlink(inode)))
		return 0;
	fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* see volume.c */
	err = ext2fs_allocate_block_bitmap(fs, "map blocks", &w.seen);
	fs->default_bitmap_type = saved;
	for (i = 0; !err && i <= NX_MAX_EXTENT_DEPTH; i++)
		err = ext2fs_get_mem(fs->blocksize, &w.buf[i]);
	if (!err)
		err = walk_map(&w, inode);
	if (!err)
		err = flush_run(&w);
	for (i = 0; i <= NX_MAX_EXTENT_DEPTH; i++)
		ext2fs_free_mem(&w.buf[i]);
	if (w.seen)
		ext2fs_free_block_bitmap(w.seen);
	return err;
}

#undef MAP_DAMAGE

/*
 * An orphan without links is freed at mount (nx_orphans_recover): its
 * map and its extended attribute block must be sound before that starts
 * writing, or it would stop half way.
 */
static int check_orphan_blocks(ext2_filsys fs, ext2_ino_t ino,
			       struct ext2_inode *inode, struct nx_damage *d)
{
	blk64_t acl = ext2fs_file_acl_block(fs, inode);
	char problem[200];

	if (inode->i_links_count || !inode->i_mode)
		return 0;
	if (acl && outside(fs, acl, 1)) {
		nx_damage_note(d, NX_DAMAGE_RW, "orphan inode %u's extended "
			       "attribute block %llu lies outside the volume",
			       ino, (unsigned long long)acl);
		return -1;
	}
	if (!nx_sanity_walk_map(fs, ino, inode, NULL, NULL, problem,
				sizeof(problem)))
		return 0;
	nx_damage_note(d, NX_DAMAGE_RW, "orphan inode %u's block map is "
		       "corrupt: %s", ino, problem);
	return -1;
}

/*
 * The walk nx_orphans_recover() will make, made first without writing.
 * Like it (and the kernel), the list may end early at an inode that is
 * not in use - what a crash on ext2 can leave; but a list that starts
 * outside the inode table, or comes back to an inode, is damage.
 */
static void check_orphans(ext2_filsys fs, struct nx_damage *d)
{
	struct ext2_super_block *sb = fs->super;
	ext2_ino_t ino = sb->s_last_orphan;
	ext2fs_inode_bitmap seen = NULL;
	struct ext2_inode inode;
	errcode_t err;

	if (!ino)
		return;
	if (ino < EXT2_FIRST_INO(sb) || ino > sb->s_inodes_count) {
		nx_damage_note(d, NX_DAMAGE_RW, "the orphan list starts at "
			       "inode %u, outside the inode table (%u-%u)",
			       ino, EXT2_FIRST_INO(sb), sb->s_inodes_count);
		return;
	}
	if (ext2fs_allocate_inode_bitmap(fs, "orphans", &seen))
		return;		/* the recovery walk is bounded anyway */
	while (ino >= EXT2_FIRST_INO(sb) && ino <= sb->s_inodes_count &&
	       ext2fs_test_inode_bitmap2(fs->inode_map, ino)) {
		if (ext2fs_test_inode_bitmap2(seen, ino)) {
			nx_damage_note(d, NX_DAMAGE_RW, "the orphan list "
				       "loops (inode %u comes back)", ino);
			break;
		}
		ext2fs_mark_inode_bitmap2(seen, ino);
		err = ext2fs_read_inode(fs, ino, &inode);
		if (err) {
			nx_damage_note(d, NX_DAMAGE_RW, "cannot read orphan "
				       "inode %u: %s", ino, error_message(err));
			break;
		}
		if (check_orphan_blocks(fs, ino, &inode, d))
			break;
		ino = inode.i_dtime;
	}
	ext2fs_free_inode_bitmap(seen);
}

enum nx_damage_level nx_sanity_check_loaded(ext2_filsys fs,
					    struct nx_damage *d)
{
	check_bitmap_marks_metadata(fs, d);
	nx_sanity_check_root(fs, d);
	check_orphans(fs, d);
	return d->level;
}

int nx_sanity_journal_damage(errcode_t err)
{
	return err == EXT2_ET_CORRUPT_JOURNAL_SB ||
	       err == EXT2_ET_JOURNAL_FLAGS_WRONG ||
	       err == EXT2_ET_BAD_BLOCK_NUM ||
	       err == EXT2_ET_INODE_CSUM_INVALID ||
	       err == EXT2_ET_BAD_INODE_NUM ||
	       err == EXT2_ET_SHORT_READ;
}

errcode_t nx_sanity_journal_refusal(const char *device, errcode_t err,
				    int rdonly, int has_snapshot, char *msg,
				    size_t msglen)
{
	struct nx_damage d = { 0 };
	char why[256];

	snprintf(why, sizeof(why), "%s", msg && msg[0] ? msg :
		 error_message(err));
	if (!nx_sanity_journal_damage(err)) {
		nx_set_msg(msg, msglen, "%s: %s", device, why);
		return err;
	}
	nx_damage_note(&d, NX_DAMAGE_RW, "%s", why);
	return nx_sanity_refusal(device, &d, rdonly, has_snapshot, msg,
				 msglen);
}

/* Which group's bitmap made ext2fs_read_bitmaps() fail with ERR? */
void nx_sanity_bitmap_problem(ext2_filsys fs, errcode_t err,
			      struct nx_damage *d)
{
	int inode = err == EXT2_ET_INODE_BITMAP_CSUM_INVALID;
	int csum = ext2fs_has_group_desc_csum(fs);
	const char *what = inode ? "inode" : "block";
	size_t nbytes = inode ? EXT2_INODES_PER_GROUP(fs->super) / 8 :
			EXT2_CLUSTERS_PER_GROUP(fs->super) / 8;
	char *buf;
	dgrp_t g;

	if (!inode && err != EXT2_ET_BLOCK_BITMAP_CSUM_INVALID) {
		nx_damage_note(d, NX_DAMAGE_FATAL, "cannot read the allocation "
			       "bitmaps: %s", error_message(err));
		return;
	}
	buf = malloc(fs->blocksize);
	for (g = 0; buf && g < fs->group_desc_count; g++) {
		blk64_t blk = inode ? ext2fs_inode_bitmap_loc(fs, g) :
			      ext2fs_block_bitmap_loc(fs, g);
		int uninit = ext2fs_bg_flags_test(fs, g, inode ?
				EXT2_BG_INODE_UNINIT : EXT2_BG_BLOCK_UNINIT);

		/* The groups libext2fs verifies (rw_bitmaps.c). */
		if ((csum && uninit && ext2fs_group_desc_csum_verify(fs, g)) ||
		    io_channel_read_blk64(fs->io, blk, 1, buf))
			continue;
		if (!(inode ? ext2fs_inode_bitmap_csum_verify(fs, g, buf, nbytes)
			    : ext2fs_block_bitmap_csum_verify(fs, g, buf,
							      nbytes))) {
			nx_damage_note(d, NX_DAMAGE_RW, "group %u's %s bitmap "
				       "has a wrong checksum", g, what);
			free(buf);
			return;
		}
	}
	free(buf);
	nx_damage_note(d, NX_DAMAGE_RW, "%s %s bitmap has a wrong checksum",
		       inode ? "an" : "a", what);
}

errcode_t nx_sanity_refusal(const char *device, const struct nx_damage *d,
			    int rdonly, int has_snapshot, char *msg,
			    size_t msglen)
{
	char fix[512];
	int reading = d->level == NX_DAMAGE_RW && !rdonly;

	if (d->own_fix)
		snprintf(fix, sizeof(fix), "%s", d->fix);
	else if (has_snapshot)
		snprintf(fix, sizeof(fix), "repair it with 'nextfs check "
			 "--repair %s'", device);
	else
		snprintf(fix, sizeof(fix), "repair it with 'e2fsck -f %s'",
			 device);
	if (!reading)
		nx_set_msg(msg, msglen, "%s: %s; cannot use it%s%s%s", device,
			   d->problem, fix[0] ? " (" : "", fix,
			   fix[0] ? ")" : "");
	else
		nx_set_msg(msg, msglen, "%s: %s; refusing to write to it "
			   "(mount it with -o ro to read it%s%s)", device,
			   d->problem, fix[0] ? "; " : "", fix);
	return EXT2_ET_FILESYSTEM_CORRUPTED;
}
