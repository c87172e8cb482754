/*
 * falloc.c - block allocation for the data path, truncate and fallocate.
 *
 * Allocation takes a whole run of free blocks at once, right after the
 * file's block before the hole when possible (nx_fmap_new_blocks), and
 * maps it with one extent insert or one indirect-block update.  New extents are
 * merged with their neighbours, so that a file written in many pieces
 * still ends up with few extents.  Overwrites under a snapshot remap the
 * piece they replace (ext_replace) from where the last lookup left the
 * extent handle: every walk from the root re-reads each tree node and
 * re-verifies its checksum, which used to be most of the CPU time of a
 * small overwrite under a snapshot.
 *
 * Unwritten extents are converted in place: split at the edges of the
 * range, flag flipped, merged back with the neighbours.  A split may need
 * a new tree block; when there is none, the conversion falls back to
 * writing zeros instead (as ext4 does), so that it still completes.
 *
 * Truncate and hole punching free blocks with ext2fs_punch (which hands
 * them to the snapshot layer through the allocator callbacks) and zero
 * the partial edge blocks on disk through the write path's overwrite
 * logic, so that a later extension or read sees zeros there.
 */
#define NX_FILE_INTERNAL
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/meta.h"
#include "nextfs/reserve.h"

#define NX_LBLK_END	((blk64_t)1 << 32)
/* A free stretch shorter than this is not worth jumping to. */
#define NX_MIN_RUN	128
/* Free runs one search for a stretch worth it looks at, at most. */
#define NX_SCAN_RUNS	8192

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static int is_nospace(errcode_t err)
{
	return err == ENOSPC || err == EXT2_ET_BLOCK_ALLOC_FAIL;
}

/* goto's answers for "LBLK is in a hole" (an empty tree says NO_NEXT). */
static int is_hole_err(errcode_t err)
{
	return err == EXT2_ET_EXTENT_NOT_FOUND || err == EXT2_ET_EXTENT_NO_NEXT;
}

/* ---------------------------------------------------------------------
 * Free blocks
 */

/*
 * How many of WANT blocks live data may take, keeping SLACK free, and
 * the root-reserved blocks from writers who may not use them.
 */
static blk64_t alloc_budget(struct nx_volume *vol, blk64_t want,
			    blk64_t slack)
{
	ext2_filsys fs = vol->fs;
	blk64_t avail = ext2fs_free_blocks_count(fs->super);
	blk64_t keep = slack + nx_reserve_floor(vol);

	/* The snapshots hold blocks back from every writer (snapshot.h). */
	if (nx_reserve_check_cow(vol, want + keep))
		keep += vol->cow_reserve;
	return avail > keep ? min_u64(want, avail - keep) : 0;
}

/* A search for a free run (find_free_run). */
struct run_search {
	blk64_t minlen, cap;	/* at least MINLEN blocks, cut to CAP */
	blk64_t steps;		/* free runs it may still look at */
	blk64_t start, len;	/* the run found */
	blk64_t longest;	/* the longest shorter run passed over */
};

/*
 * The first free run that starts in [FROM, TO] and is at least
 * rs->minlen blocks long (<= rs->cap).  Every step moves past one free
 * run and the used block after it, so the search takes at most one step
 * per free run in the range, and no more than rs->steps: it ends,
 * however the free space is cut up, in a time that does not grow with
 * the volume.
 */
static int find_free_run(ext2_filsys fs, blk64_t from, blk64_t to,
			 struct run_search *rs)
{
	blk64_t last = ext2fs_blocks_count(fs->super) - 1, s, e, stop;

	while (from <= to && rs->steps) {
		rs->steps--;
		if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, from,
							 to, &s))
			return 0;
		stop = s + min_u64(rs->cap, last - s + 1) - 1;
		if (ext2fs_find_first_set_block_bitmap2(fs->block_map, s, stop,
							&e))
			e = stop + 1;
		if (e - s >= rs->minlen) {
			rs->start = s;
			rs->len = e - s;
			return 1;
		}
		if (e - s > rs->longest)
			rs->longest = e - s;
		from = e + 1;	/* e is in use (the run was cut short by it) */
	}
	return 0;
}

/* The same, searching [GOAL, end of volume], then [first block, GOAL). */
static int find_free_run_from(ext2_filsys fs, blk64_t goal,
			      struct run_search *rs)
{
	blk64_t first = fs->super->s_first_data_block;

	return find_free_run(fs, goal, ext2fs_blocks_count(fs->super) - 1,
			     rs) ||
	       (goal > first && find_free_run(fs, first, goal - 1, rs));
}

/*
 * Is there no free run of MINLEN blocks, as far as the last search that
 * found none knows (none of the runs it saw, all of them or
 * NX_SCAN_RUNS, was longer than vol->no_run_len - 1)?  That stays
 * believed while the volume only fills up (nothing freed can have made
 * a longer run) and less than an eighth of the free space it saw has
 * been used since: on an aged volume every allocation would otherwise
 * search again for nothing.  Wrong only ever costs layout (a long run
 * missed for a while), never an allocation.
 */
static int no_run_known(struct nx_volume *vol, blk64_t minlen)
{
	blk64_t free_now = ext2fs_free_blocks_count(vol->fs->super);

	return vol->no_run_len && minlen >= vol->no_run_len &&
	       free_now <= vol->no_run_free &&
	       vol->no_run_free - free_now <= vol->no_run_free / 8;
}

/*
 * Where the blocks of a new piece of file go, in order: right at GOAL
 * (the file continues without a seek); else the next free run from GOAL
 * on that is worth the jump (NX_MIN_RUN blocks, or the whole request if
 * smaller), wrapping at the end of the volume; else whatever free run
 * comes next.  Each search is bounded (find_free_run), and a request
 * that no run can hold whole is met by a shorter one: the callers loop
 * for the rest (docs/concurrency.md, "Allocation bounds").
 *
 * No ext2fs_new_range(EXT2_NEWRANGE_MIN_LENGTH) here: in libext2fs 1.47.0
 * (and e2fsprogs' development branch as of March 2026) it never returns
 * when no free run is long enough and the volume's last block is in use.
 * Reaching the end of the bitmap with nothing free after the last short
 * run (ENOENT from ext2fs_find_first_zero_block_bitmap2) restarts the
 * scan at s_first_data_block without setting its `looped' flag, which
 * only a run that reaches the end of the volume sets, so its loop
 * condition (!looped || start <= goal) stays true forever - a write into
 * fragmented free space spun under the volume lock and hung the mount.
 */
errcode_t nx_fmap_new_blocks(struct nx_volume *vol, blk64_t goal,
			     blk64_t want, blk64_t slack, blk64_t *pblk,
			     blk64_t *got)
{
	ext2_filsys fs = vol->fs;
	blk64_t n = alloc_budget(vol, min_u64(want, 1U << 30), slack);
	struct run_search rs = { 1, n, 1, 0, 0, 0 };

	if (!n)
		return ENOSPC;
	if (goal < fs->super->s_first_data_block ||
	    goal >= ext2fs_blocks_count(fs->super))
		goal = fs->super->s_first_data_block;
	if (find_free_run(fs, goal, goal, &rs))
		goto found;
	rs.minlen = min_u64(n, NX_MIN_RUN);
	rs.steps = NX_SCAN_RUNS;
	if (!no_run_known(vol, rs.minlen)) {
		if (find_free_run_from(fs, goal, &rs)) {
			vol->no_run_len = 0;
			goto found;
		}
		vol->no_run_len = rs.longest + 1;
		vol->no_run_free = ext2fs_free_blocks_count(fs->super);
	}
	rs.minlen = 1;
	rs.steps = 2;		/* the first free block it finds will do */
	if (!find_free_run_from(fs, goal, &rs))
		return ENOSPC;
found:
	nx_meta_alloc_stats_range(fs, rs.start, (blk_t)rs.len, +1);
	*pblk = rs.start;
	*got = rs.len;
	return 0;
}

/* ---------------------------------------------------------------------
 * Extent-mapped files
 */

static int ext_uninit(const struct ext2fs_extent *ex)
{
	return (ex->e_flags & EXT2_EXTENT_FLAGS_UNINIT) != 0;
}

static blk64_t ext_max_len(int uninit)
{
	return uninit ? EXT_UNINIT_MAX_LEN : EXT_INIT_MAX_LEN;
}

/* Can B be folded into A (A directly before B, on disk too)? */
static int ext_mergeable(const struct ext2fs_extent *a,
			 const struct ext2fs_extent *b)
{
	return a->e_lblk + a->e_len == b->e_lblk &&
	       a->e_pblk + a->e_len == b->e_pblk &&
	       ext_uninit(a) == ext_uninit(b) &&
	       (blk64_t)a->e_len + b->e_len <= ext_max_len(ext_uninit(a));
}

/* Point the handle at the extent holding LBLK. */
static errcode_t ext_get_at(ext2_extent_handle_t h, blk64_t lblk,
			    struct ext2fs_extent *ex)
{
	errcode_t err = ext2fs_extent_goto(h, lblk);

	if (err)
		return err;
	return ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, ex);
}

/*
 * Look at the sibling before (PREV_SIB) or after (NEXT_SIB) the current
 * extent in its tree node and come back: no I/O.  *FOUND is 0 at the
 * edge of the node.
 */
static errcode_t ext_peek_sib(ext2_extent_handle_t h, int op,
			      struct ext2fs_extent *nb, int *found)
{
	int back = op == EXT2_EXTENT_NEXT_SIB ? EXT2_EXTENT_PREV_SIB
					       : EXT2_EXTENT_NEXT_SIB;
	struct ext2fs_extent tmp;
	errcode_t err = ext2fs_extent_get(h, op, nb);

	*found = 0;
	if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_EXTENT_NO_PREV)
		return 0;
	if (err)
		return err;
	*found = 1;
	return ext2fs_extent_get(h, back, &tmp);
}

/*
 * After deleting an entry the handle points at the one that followed it,
 * or at the one before it if it was the last: make it point at the
 * extent starting at LBLK, which was right before the deleted one.
 */
static errcode_t ext_back_to(ext2_extent_handle_t h, blk64_t lblk)
{
	struct ext2fs_extent cur;
	errcode_t err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &cur);

	if (!err && cur.e_lblk != lblk)
		err = ext2fs_extent_get(h, EXT2_EXTENT_PREV_SIB, &cur);
	if (!err && cur.e_lblk != lblk)
		err = EXT2_ET_EXTENT_HEADER_BAD;	/* cannot happen */
	return err;
}

/*
 * The handle points at *CUR: merge it with its neighbours in the same
 * tree node where they continue it logically and physically.  (Merging
 * across nodes would mean fixing index keys; not worth it.)  Works from
 * where the handle is, without walking the tree again: every walk
 * re-reads and re-verifies the checksum of each node on the way.  The
 * handle ends at the merged extent, *CUR updated.
 */
static errcode_t ext_merge_here(ext2_extent_handle_t h,
				struct ext2fs_extent *cur)
{
	struct ext2fs_extent nb;
	int found;
	errcode_t err;

	err = ext_peek_sib(h, EXT2_EXTENT_NEXT_SIB, &nb, &found);
	if (err)
		return err;
	if (found && ext_mergeable(cur, &nb)) {
		/* Drop the next one first: a moment's hole, never overlap. */
		err = ext2fs_extent_get(h, EXT2_EXTENT_NEXT_SIB, &nb);
		if (!err)
			err = ext2fs_extent_delete(h, 0);
		if (!err)
			err = ext_back_to(h, cur->e_lblk);
		if (err)
			return err;
		cur->e_len += nb.e_len;
		err = ext2fs_extent_replace(h, 0, cur);
		if (err)
			return err;
	}
	err = ext_peek_sib(h, EXT2_EXTENT_PREV_SIB, &nb, &found);
	if (err || !found || !ext_mergeable(&nb, cur))
		return err;
	nb.e_len += cur->e_len;
	err = ext2fs_extent_delete(h, 0);
	if (!err)
		err = ext_back_to(h, nb.e_lblk);
	if (!err)
		err = ext2fs_extent_replace(h, 0, &nb);
	if (!err)
		*cur = nb;
	return err;
}

/*
 * The handle points at *EX and AT lies inside it: cut it in two, the
 * second half inserted right after it (the same blocks, so the file's
 * mapping does not change).  The handle ends at the second half.
 * Inserting after an entry never changes a node's first key, so the
 * index above needs no fixing.  If the insert finds no block for a new
 * tree node, *EX is put back whole.
 */
static errcode_t ext_split_here(ext2_extent_handle_t h,
				const struct ext2fs_extent *ex, blk64_t at)
{
	struct ext2fs_extent left = *ex, right = *ex, whole = *ex;
	errcode_t err;

	left.e_len = at - ex->e_lblk;
	right.e_lblk = at;
	right.e_pblk = ex->e_pblk + left.e_len;
	right.e_len = ex->e_len - left.e_len;
	err = ext2fs_extent_replace(h, 0, &left);
	if (err)
		return err;
	err = ext2fs_extent_insert(h, EXT2_EXTENT_INSERT_AFTER, &right);
	if (err) {
		/* No room for a tree block: give the blocks back. */
		if (!ext2fs_extent_goto(h, whole.e_lblk))
			(void)ext2fs_extent_replace(h, 0, &whole);
	}
	return err;
}

/* Split the extent holding AT so that an extent starts at AT. */
static errcode_t ext_split_at(ext2_extent_handle_t h, blk64_t at)
{
	struct ext2fs_extent ex;
	errcode_t err;

	err = ext_get_at(h, at, &ex);
	if (err || ex.e_lblk == at)
		return err;
	err = ext_split_here(h, &ex, at);
	return err ? err : ext2fs_extent_fix_parents(h);
}

/*
 * Where a new block for LBLK should go: continuing the nearest extent as
 * if the file's logical layout were laid out on disk as it is.  From EX
 * (NULL: none known), else where libext2fs would put the inode's blocks.
 */
static blk64_t ext_goal_from(struct nx_fmap *m,
			     const struct ext2fs_extent *ex, blk64_t lblk)
{
	ext2_filsys fs = m->vol->fs;
	blk64_t goal = 0;

	if (ex && ex->e_lblk <= lblk)
		goal = ex->e_pblk + (lblk - ex->e_lblk);
	else if (ex && ex->e_pblk > ex->e_lblk - lblk)
		goal = ex->e_pblk - (ex->e_lblk - lblk);
	if (!goal || goal >= ext2fs_blocks_count(fs->super))
		goal = ext2fs_find_inode_goal(fs, m->ino,
					      (struct ext2_inode *)m->inode,
					      lblk);
	return goal;
}

static blk64_t ext_goal(struct nx_fmap *m, blk64_t lblk)
{
	struct ext2fs_extent ex;
	errcode_t err;

	m->have_last = 0;
	err = ext2fs_extent_goto(m->handle, lblk ? lblk - 1 : 0);
	if ((!err || is_hole_err(err)) &&
	    !ext2fs_extent_get(m->handle, EXT2_EXTENT_CURRENT, &ex))
		return ext_goal_from(m, &ex, lblk);
	return ext_goal_from(m, NULL, lblk);
}

/*
 * Map the hole [LBLK, LBLK + LEN) to PBLK onwards, growing the extent
 * before it where possible.  *MAPPED counts the blocks that made it into
 * the tree, even when an error stops the rest.
 */
static errcode_t ext_map_new(ext2_extent_handle_t h, blk64_t lblk,
			     blk64_t pblk, blk64_t len, int uninit,
			     blk64_t *mapped)
{
	blk64_t max = ext_max_len(uninit), n;
	struct ext2fs_extent cur, ex;
	errcode_t err, cerr;

	*mapped = 0;
	while (len) {
		err = ext2fs_extent_goto(h, lblk);
		if (!err)
			return EEXIST;		/* not a hole after all */
		if (!is_hole_err(err))
			return err;
		cerr = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &cur);
		if (cerr && cerr != EXT2_ET_NO_CURRENT_NODE)
			return cerr;
		if (!cerr && cur.e_lblk < lblk &&
		    cur.e_lblk + cur.e_len == lblk &&
		    cur.e_pblk + cur.e_len == pblk &&
		    ext_uninit(&cur) == uninit && cur.e_len < max) {
			n = min_u64(len, max - cur.e_len);
			cur.e_len += n;
			err = ext2fs_extent_replace(h, 0, &cur);
			if (err)
				return err;
		} else {
			n = min_u64(len, max);
			ex.e_lblk = lblk;
			ex.e_pblk = pblk;
			ex.e_len = n;
			ex.e_flags = uninit ? EXT2_EXTENT_FLAGS_UNINIT : 0;
			err = ext2fs_extent_insert(h, (cerr || cur.e_lblk > lblk) ?
						   0 : EXT2_EXTENT_INSERT_AFTER,
						   &ex);
			if (err)
				return err;
			*mapped += n;
			lblk += n;
			pblk += n;
			len -= n;
			err = ext2fs_extent_fix_parents(h);
			if (err)
				return err;
			continue;
		}
		*mapped += n;
		lblk += n;
		pblk += n;
		len -= n;
	}
	if (!*mapped)
		return 0;
	/* Filling a hole up to the next extent may join the two. */
	err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &cur);
	return err ? err : ext_merge_here(h, &cur);
}

errcode_t nx_file_map_run(struct nx_volume *vol, ext2_ino_t ino,
			  struct ext2_inode_large *inode, blk64_t lblk,
			  blk64_t pblk, blk64_t len)
{
	ext2_extent_handle_t h;
	blk64_t mapped;
	errcode_t err;

	err = ext2fs_extent_open2(vol->fs, ino, (struct ext2_inode *)inode, &h);
	if (err)
		return err;
	err = ext_map_new(h, lblk, pblk, len, 0, &mapped);
	ext2fs_extent_free(h);
	return err;
}

errcode_t nx_file_map_blocks(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, blk64_t lblk,
			     blk64_t pblk, blk64_t len)
{
	errcode_t err = 0;
	blk64_t k;

	if (inode->i_flags & EXT4_EXTENTS_FL) {
		err = nx_file_map_run(vol, ino, inode, lblk, pblk, len);
	} else {
		/* Block-mapped: one slot at a time, indirect blocks as needed. */
		for (k = 0; k < len && !err; k++) {
			blk64_t b = pblk + k;

			err = ext2fs_bmap2(vol->fs, ino,
					   (struct ext2_inode *)inode, NULL,
					   BMAP_SET | BMAP_ALLOC, lblk + k,
					   NULL, &b);
		}
	}
	if (!err)
		ext2fs_iblk_add_blocks(vol->fs, (struct ext2_inode *)inode,
				       len);
	return err;
}

/*
 * Up to LEN new blocks from GOAL on, keeping a few free for the extent
 * tree to grow into.
 */
static errcode_t ext_new_blocks(struct nx_fmap *m, blk64_t goal, blk64_t len,
				blk64_t *pblk, blk64_t *got)
{
	struct ext3_extent_header *eh = (void *)m->inode->i_block;

	return nx_fmap_new_blocks(m->vol, goal, len,
				  ext2fs_le16_to_cpu(eh->eh_depth) + 2,
				  pblk, got);
}

static errcode_t ext_alloc(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			   int uninit, struct nx_fmap_run *run)
{
	ext2_filsys fs = m->vol->fs;
	blk64_t pblk = 0, got = 0, mapped = 0;
	errcode_t err;

	if (lblk >= NX_LBLK_END)
		return EFBIG;
	len = min_u64(len, NX_LBLK_END - lblk);
	err = ext_new_blocks(m, ext_goal(m, lblk), len, &pblk, &got);
	if (err)
		return err;
	err = ext_map_new(m->handle, lblk, pblk, got, uninit, &mapped);
	m->have_last = 0;
	if (mapped < got)
		nx_meta_alloc_stats_range(fs, pblk + mapped,
					  (blk_t)(got - mapped), -1);
	if (!mapped)
		return err ? err : ENOSPC;
	ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)m->inode, mapped);
	run->lblk = lblk;
	run->len = mapped;
	run->pblk = pblk;
	run->uninit = uninit;
	return 0;
}

static errcode_t zero_pblocks(ext2_filsys fs, blk64_t pblk, blk64_t count)
{
	if (!count)
		return 0;
	return ext2fs_zero_blocks2(fs, pblk, (int)count, NULL, NULL);
}

/*
 * Flip [*START, *STOP), which lies inside extent EX, to written or
 * unwritten.  If a split finds no block for the tree, convert more and
 * write zeros instead: the extra unwritten part becomes written zeros, or
 * (to unwritten) the blocks just get zeros and stay written.
 */
static errcode_t convert_piece(struct nx_fmap *m,
			       const struct ext2fs_extent *ex,
			       blk64_t *start, blk64_t *stop, int to_uninit)
{
	ext2_extent_handle_t h = m->handle;
	ext2_filsys fs = m->vol->fs;
	blk64_t ex_end = ex->e_lblk + ex->e_len;
	struct ext2fs_extent cur;
	errcode_t err;

	if (ex->e_lblk < *start) {
		err = ext_split_at(h, *start);
		if (is_nospace(err)) {
			if (to_uninit)
				return zero_pblocks(fs, ex->e_pblk + (*start -
						    ex->e_lblk), *stop - *start);
			err = zero_pblocks(fs, ex->e_pblk,
					   *start - ex->e_lblk);
			*start = ex->e_lblk;
		}
		if (err)
			return err;
	}
	if (*stop < ex_end) {
		err = ext_split_at(h, *stop);
		if (is_nospace(err)) {
			if (to_uninit)
				return zero_pblocks(fs, ex->e_pblk + (*start -
						    ex->e_lblk), *stop - *start);
			err = zero_pblocks(fs, ex->e_pblk + (*stop - ex->e_lblk),
					   ex_end - *stop);
			*stop = ex_end;
		}
		if (err)
			return err;
	}
	err = ext_get_at(h, *start, &cur);
	if (err)
		return err;
	if (to_uninit)
		cur.e_flags |= EXT2_EXTENT_FLAGS_UNINIT;
	else
		cur.e_flags &= ~EXT2_EXTENT_FLAGS_UNINIT;
	err = ext2fs_extent_replace(h, 0, &cur);
	if (err)
		return err;
	return ext_merge_here(h, &cur);
}

errcode_t nx_fmap_convert(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			  int to_uninit)
{
	ext2_extent_handle_t h = m->handle;
	blk64_t pos = lblk, end = lblk + len, start, stop, ex_end;
	struct ext2fs_extent ex;
	struct nx_fmap_run run;
	errcode_t err = 0;

	if (!h)
		return EXT2_ET_OP_NOT_SUPPORTED;
	while (pos < end) {
		m->have_last = 0;
		err = ext_get_at(h, pos, &ex);
		if (is_hole_err(err)) {
			err = nx_fmap_lookup(m, pos, &run);
			if (err)
				break;
			pos += min_u64(run.len, end - pos);
			continue;
		}
		if (err)
			break;
		ex_end = ex.e_lblk + ex.e_len;
		if (ext_uninit(&ex) == to_uninit) {
			pos = ex_end;
			continue;
		}
		start = pos;
		stop = min_u64(end, ex_end);
		if (to_uninit && stop - start > EXT_UNINIT_MAX_LEN)
			stop = start + EXT_UNINIT_MAX_LEN;
		err = convert_piece(m, &ex, &start, &stop, to_uninit);
		if (err)
			break;
		pos = stop;
	}
	m->have_last = 0;
	return err;
}

/* ---------------------------------------------------------------------
 * Block-mapped (indirect) files
 */

static errcode_t ind_write(struct nx_fmap *m, int level)
{
	return io_channel_write_blk64(m->vol->fs->io, m->ind_blk[level], 1,
				      m->ind_buf[level]);
}

/* A new, zeroed indirect block for tree level LEVEL, cached and on disk. */
static errcode_t ind_new_block(struct nx_fmap *m, int level, blk64_t goal,
			       blk64_t *blk)
{
	ext2_filsys fs = m->vol->fs;
	blk64_t got;
	errcode_t err;

	if (!m->ind_buf[level]) {
		m->ind_buf[level] = malloc(fs->blocksize);
		if (!m->ind_buf[level])
			return EXT2_ET_NO_MEMORY;
	}
	err = nx_fmap_new_blocks(m->vol, goal, 1, 0, blk, &got);
	if (err)
		return err;
	memset(m->ind_buf[level], 0, fs->blocksize);
	m->ind_blk[level] = *blk;
	err = ind_write(m, level);
	if (err) {
		m->ind_blk[level] = 0;
		ext2fs_block_alloc_stats2(fs, *blk, -1);
	}
	return err;
}

static blk64_t ind_goal(struct nx_fmap *m, blk64_t lblk)
{
	struct nx_fmap_run run;

	if (lblk && !nx_fmap_lookup(m, lblk - 1, &run) && run.pblk)
		return run.pblk + 1;
	return ext2fs_find_inode_goal(m->vol->fs, m->ino,
				      (struct ext2_inode *)m->inode, lblk);
}

/*
 * Allocate data blocks for the hole at LBLK, at most up to the end of the
 * indirect block (or the direct blocks) that maps it, creating missing
 * indirect blocks first so that they sit just before their data as on
 * ext2/3.  On failure nothing stays allocated.
 */
static errcode_t ind_alloc(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			   struct nx_fmap_run *run)
{
	ext2_filsys fs = m->vol->fs;
	blk64_t p = fs->blocksize / 4, off, span, goal, nb, pblk, got, i, n;
	blk64_t fresh[3];
	uint32_t *slotp, *tab = m->inode->i_block, *undo_ptr = NULL;
	int levels, slot, d, parent = -1, undo_level = -1, nfresh = 0;
	errcode_t err;

	levels = nx_fmap_ind_path(fs, lblk, &slot, &off, &span);
	if (levels < 0)
		return EFBIG;
	goal = ind_goal(m, lblk);
	slotp = &m->inode->i_block[slot];
	i = lblk;
	for (d = 0; d < levels; d++) {
		if (!*slotp) {
			err = ind_new_block(m, d, goal, &nb);
			if (err)
				goto undo;
			if (!nfresh) {
				undo_ptr = slotp;
				undo_level = parent;
			}
			fresh[nfresh++] = nb;
			*slotp = ext2fs_cpu_to_le32((uint32_t)nb);
			if (parent >= 0) {
				err = ind_write(m, parent);
				if (err)
					goto undo;
			}
			goal = nb + 1;
		}
		err = nx_fmap_ind_block(m, d, ext2fs_le32_to_cpu(*slotp), &tab);
		if (err)
			goto undo;
		span /= p;
		i = off / span;
		off %= span;
		slotp = &tab[i];
		parent = d;
	}
	n = min_u64(len, (levels ? p : EXT2_NDIR_BLOCKS) - i);
	err = nx_fmap_new_blocks(m->vol, goal, n, 0, &pblk, &got);
	if (!err && pblk + got > ((blk64_t)1 << 32)) {
		/* Block maps hold 32-bit block numbers. */
		nx_meta_alloc_stats_range(fs, pblk, (blk_t)got, -1);
		err = ENOSPC;
	}
	if (err)
		goto undo;
	for (n = 0; n < got; n++)
		tab[i + n] = ext2fs_cpu_to_le32((uint32_t)(pblk + n));
	if (levels) {
		err = ind_write(m, levels - 1);
		if (err) {
			for (n = 0; n < got; n++)
				tab[i + n] = 0;
			nx_meta_alloc_stats_range(fs, pblk, (blk_t)got, -1);
			goto undo;
		}
	}
	ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)m->inode,
			       got + nfresh);
	run->lblk = lblk;
	run->len = got;
	run->pblk = pblk;
	run->uninit = 0;
	return 0;
undo:
	if (nfresh) {
		*undo_ptr = 0;
		if (undo_level >= 0)
			(void)ind_write(m, undo_level);
		for (d = 0; d < nfresh; d++)
			ext2fs_block_alloc_stats2(fs, fresh[d], -1);
		for (d = 0; d < 3; d++)
			m->ind_blk[d] = 0;
	}
	return err;
}

errcode_t nx_fmap_alloc(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			int uninit, struct nx_fmap_run *run)
{
	if (!len)
		return EINVAL;
	if (m->handle)
		return ext_alloc(m, lblk, len, uninit, run);
	if (uninit)
		return EOPNOTSUPP;	/* block maps have no unwritten state */
	return ind_alloc(m, lblk, len, run);
}

/*
 * The extent holding LBLK, with the handle pointing at it.  The last
 * lookup usually left it there (the write path looks a run up, then
 * replaces it): then no walk from the root is needed.
 */
static errcode_t ext_find(struct nx_fmap *m, blk64_t lblk,
			  struct ext2fs_extent *ex)
{
	const struct ext2fs_extent *l = &m->last;

	if (m->have_last && lblk >= l->e_lblk && lblk < l->e_lblk + l->e_len &&
	    !ext2fs_extent_get(m->handle, EXT2_EXTENT_CURRENT, ex) &&
	    ex->e_lblk == l->e_lblk && ex->e_len == l->e_len &&
	    ex->e_pblk == l->e_pblk && ex->e_flags == l->e_flags)
		return 0;
	m->have_last = 0;
	return ext_get_at(m->handle, lblk, ex);
}

/*
 * Where new blocks for LBLK go when the handle points at EX, the extent
 * holding it: where the file's blocks before LBLK lead (ext_goal), but
 * read from EX or its neighbour in the node instead of walking the tree.
 * At the first entry of a node, the old block itself: the allocator
 * takes the next free one.
 */
static errcode_t ext_replace_goal(struct nx_fmap *m,
				  const struct ext2fs_extent *ex, blk64_t lblk,
				  blk64_t *goal)
{
	struct ext2fs_extent prev;
	int found = 0;
	errcode_t err = 0;

	if (lblk == ex->e_lblk)
		err = ext_peek_sib(m->handle, EXT2_EXTENT_PREV_SIB, &prev,
				   &found);
	*goal = ext_goal_from(m, found ? &prev : ex, lblk);
	return err;
}

/*
 * The handle points at EX, a written extent holding [LBLK, LBLK + N):
 * map that piece to PBLK.., EX becoming up to three extents, without
 * walking the tree (ext_split_here).  The splits keep the old blocks, so
 * a split that fails (no block for a tree node) leaves the file mapped
 * as it was; only the last step, a replace that cannot fail, points the
 * piece at the new blocks.  The handle ends at the piece.
 */
static errcode_t ext_remap_piece(ext2_extent_handle_t h,
				 const struct ext2fs_extent *ex, blk64_t lblk,
				 blk64_t n, blk64_t pblk)
{
	struct ext2fs_extent cur = *ex;
	errcode_t err;

	if (lblk + n < ex->e_lblk + ex->e_len) {
		err = ext_split_here(h, &cur, lblk + n);
		if (!err)
			err = ext2fs_extent_get(h, EXT2_EXTENT_PREV_SIB, &cur);
		if (err)
			return err;
	}
	if (lblk > ex->e_lblk) {
		err = ext_split_here(h, &cur, lblk);
		if (!err)
			err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &cur);
		if (err)
			return err;
	}
	cur.e_pblk = pblk;
	return ext2fs_extent_replace(h, 0, &cur);
}

/*
 * Give the written blocks [LBLK, LBLK + LEN), which lie inside one extent,
 * new physical blocks: allocate near where the file continues, then cut
 * the piece out of its extent and point it at the new blocks (merging
 * with a neighbour that continues them).  The old blocks stay allocated
 * and belong to the caller.  *RUN gets the new mapping, possibly shorter
 * than LEN; run->len is 0 if the map is unchanged (nothing allocated,
 * e.g. no room for the tree to grow for the split).  The handle ends at
 * the extent now holding LBLK (m->last).
 */
static errcode_t ext_replace(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			     struct nx_fmap_run *run)
{
	struct ext2fs_extent ex, cur;
	blk64_t pblk = 0, got = 0, goal;
	errcode_t err;

	run->len = 0;
	err = ext_find(m, lblk, &ex);
	m->have_last = 0;
	if (err)
		return err;
	if (ext_uninit(&ex) || lblk + len > ex.e_lblk + ex.e_len)
		return EINVAL;
	err = ext_replace_goal(m, &ex, lblk, &goal);
	if (!err)
		err = ext_new_blocks(m, goal, len, &pblk, &got);
	if (err)
		return err;
	err = ext_remap_piece(m->handle, &ex, lblk, got, pblk);
	if (err) {
		nx_meta_alloc_stats_range(m->vol->fs, pblk, (blk_t)got, -1);
		return err;
	}
	/* Mapped now: the caller must fill or unmap it, even on an error. */
	run->lblk = lblk;
	run->len = got;
	run->pblk = pblk;
	run->uninit = 0;
	cur.e_lblk = lblk;
	cur.e_pblk = pblk;
	cur.e_len = (__u32)got;
	cur.e_flags = EXT2_EXTENT_FLAGS_LEAF;
	err = ext_merge_here(m->handle, &cur);
	if (!err) {
		m->last = cur;
		m->have_last = 1;
	}
	return err;
}

errcode_t nx_fmap_replace(struct nx_fmap *m, blk64_t lblk, blk64_t len,
			  struct nx_fmap_run *run)
{
	if (!len)
		return EINVAL;
	if (!m->handle)
		return EXT2_ET_OP_NOT_SUPPORTED;
	return ext_replace(m, lblk, len, run);
}

/* ---------------------------------------------------------------------
 * Freeing blocks
 */

/* (A block number outside the volume is dropped, not "freed".) */
static void free_data_block(ext2_filsys fs, blk64_t b)
{
	if (b >= fs->super->s_first_data_block &&
	    b < ext2fs_blocks_count(fs->super))
		ext2fs_block_alloc_stats2(fs, b, -1);
}

/*
 * Free the blocks of [START, END) (relative to the subtree) under the
 * indirect block *SLOTP, which has LEVELS levels of indirection below it
 * and spans SPAN blocks; an indirect block left empty is freed too and
 * *SLOTP cleared.  (libext2fs 1.47.0's ext2fs_punch gets ranges inside the
 * double- and triple-indirect trees wrong: it frees to the end of the
 * subtree.)
 */
static errcode_t ind_punch_tree(ext2_filsys fs, uint32_t *slotp, int levels,
				blk64_t span, blk64_t start, blk64_t end,
				blk64_t *freed)
{
	blk64_t p = fs->blocksize / 4, sub = span / p, i, blk;
	uint32_t *tab;
	errcode_t err = 0;
	int empty = 1;

	blk = ext2fs_le32_to_cpu(*slotp);
	if (!blk)
		return 0;
	if (blk < fs->super->s_first_data_block ||
	    blk >= ext2fs_blocks_count(fs->super))
		return EXT2_ET_BAD_IND_BLOCK;
	tab = malloc(fs->blocksize);
	if (!tab)
		return EXT2_ET_NO_MEMORY;
	err = io_channel_read_blk64(fs->io, blk, 1, tab);
	for (i = start / sub; !err && i < p && i * sub < end; i++) {
		blk64_t b = ext2fs_le32_to_cpu(tab[i]);

		if (!b)
			continue;
		if (levels > 1) {
			err = ind_punch_tree(fs, &tab[i], levels - 1, sub,
					     i * sub > start ? 0 :
					     start - i * sub,
					     min_u64(end - i * sub, sub), freed);
		} else {
			free_data_block(fs, b);
			tab[i] = 0;
			(*freed)++;
		}
	}
	for (i = 0; !err && i < p && empty; i++)
		if (tab[i])
			empty = 0;
	if (!err && empty) {
		ext2fs_block_alloc_stats2(fs, blk, -1);
		*slotp = 0;
		(*freed)++;
	} else if (!err) {
		err = io_channel_write_blk64(fs->io, blk, 1, tab);
	}
	free(tab);
	return err;
}

/* Free logical blocks [START, END) of a block-mapped file. */
static errcode_t ind_punch(ext2_filsys fs, struct ext2_inode_large *inode,
			   blk64_t start, blk64_t end)
{
	blk64_t p = fs->blocksize / 4, first = EXT2_NDIR_BLOCKS, span = p;
	blk64_t freed = 0, i;
	errcode_t err = 0;
	int levels;

	for (i = start; i < min_u64(end, EXT2_NDIR_BLOCKS); i++) {
		blk64_t b = ext2fs_le32_to_cpu(inode->i_block[i]);

		if (b) {
			free_data_block(fs, b);
			inode->i_block[i] = 0;
			freed++;
		}
	}
	for (levels = 1; !err && levels <= 3; levels++) {
		if (start < first + span && end > first)
			err = ind_punch_tree(fs, &inode->i_block[EXT2_IND_BLOCK +
							       levels - 1],
					     levels, span,
					     start > first ? start - first : 0,
					     min_u64(end - first, span), &freed);
		first += span;
		span *= p;
	}
	ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)inode, freed);
	return err;
}

/* Free logical blocks [START, END] (END inclusive, clamped to the map). */
errcode_t nx_file_punch_blocks(struct nx_volume *vol, ext2_ino_t ino,
			       struct ext2_inode_large *inode, blk64_t start,
			       blk64_t end)
{
	blk64_t p = vol->fs->blocksize / 4;

	if (!(inode->i_flags & EXT4_EXTENTS_FL)) {
		end = min_u64(end, EXT2_NDIR_BLOCKS + p + p * p + p * p * p - 1);
		return start > end ? 0 : ind_punch(vol->fs, inode, start,
						   end + 1);
	}
	if (start >= NX_LBLK_END)
		return 0;
	return nx_punch(vol, ino, inode, start, min_u64(end, NX_LBLK_END - 1));
}

/* ---------------------------------------------------------------------
 * Truncate
 */

/* Zero bytes [FROM, TO) on disk where they hold written data. */
static errcode_t zero_bytes(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, uint64_t from,
			    uint64_t to)
{
	uint64_t bs = vol->fs->blocksize;
	struct nx_fmap map;
	errcode_t err;

	err = nx_fmap_open(&map, vol, ino, inode);
	while (!err && from < to) {
		uint64_t stop = min_u64(to, (from / bs + 1) * bs);

		err = nx_file_zero_in_block(&map, from, stop);
		from = stop;
	}
	nx_fmap_close(&map);
	return err;
}

/* Zero the partial blocks at the edges of [FROM, TO). */
static errcode_t zero_edges(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, uint64_t from,
			    uint64_t to)
{
	uint64_t bs = vol->fs->blocksize;
	blk64_t fb = from / bs, lb = (to - 1) / bs;
	errcode_t err = 0;

	if (fb == lb)
		return (from % bs || to % bs) ?
		       zero_bytes(vol, ino, inode, from, to) : 0;
	if (from % bs)
		err = zero_bytes(vol, ino, inode, from, (fb + 1) * bs);
	if (!err && to % bs)
		err = zero_bytes(vol, ino, inode, lb * bs, to);
	return err;
}

static int check_modifiable(const struct ext2_inode_large *inode)
{
	if (LINUX_S_ISDIR(inode->i_mode))
		return EISDIR;
	if (!LINUX_S_ISREG(inode->i_mode))
		return EINVAL;
	if (inode->i_flags & (EXT2_IMMUTABLE_FL | EXT4_SNAPFILE_FL))
		return EPERM;
	return 0;
}

errcode_t nx_file_truncate(struct nx_volume *vol, ext2_ino_t ino,
			   uint64_t size)
{
	ext2_filsys fs = vol->fs;
	uint64_t bs = fs->blocksize, isize;
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read_rw(vol, ino, &inode);
	if (err)
		return err;
	err = check_modifiable(&inode);
	if (err)
		return err;
	if (inode.i_flags & EXT2_APPEND_FL)
		return EPERM;
	if (size > nx_file_max_bytes(fs, &inode))
		return EFBIG;
	isize = EXT2_I_SIZE(&inode);
	if (size == isize)
		return 0;
	if (inode.i_flags & EXT4_INLINE_DATA_FL) {
		err = nx_file_inline_resize(vol, ino, &inode, size);
	} else if (size < isize) {
		/*
		 * Everything past the new end goes (unwritten blocks beyond
		 * EOF too, as in ext4); the kept tail of the last block is
		 * zeroed so that growing the file again shows zeros.
		 */
		err = nx_file_punch_blocks(vol, ino, &inode, (size + bs - 1) / bs,
				   ~0ULL);
		if (!err && size % bs)
			err = zero_bytes(vol, ino, &inode, size,
					 (size / bs + 1) * bs);
	}
	if (err) {
		(void)nx_inode_write(vol, ino, &inode);
		return err;
	}
	ext2fs_inode_size_set(fs, (struct ext2_inode *)&inode, size);
	nx_inode_touch(&inode, NX_TOUCH_MTIME | NX_TOUCH_CTIME);
	return nx_inode_write(vol, ino, &inode);
}

/* ---------------------------------------------------------------------
 * fallocate
 */

static errcode_t punch_hole(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, uint64_t off,
			    uint64_t end)
{
	uint64_t bs = vol->fs->blocksize, isize = EXT2_I_SIZE(inode);
	blk64_t first, stop;
	errcode_t err;

	/* Like ext4: nothing past the block holding EOF is punched. */
	end = min_u64(end, (isize + bs - 1) / bs * bs);
	if (off >= end)
		return 0;
	err = zero_edges(vol, ino, inode, off, end);
	if (err)
		return err;
	first = (off + bs - 1) / bs;
	stop = end / bs;
	if (first < stop)
		err = nx_file_punch_blocks(vol, ino, inode, first, stop - 1);
	return err;
}

/*
 * Give every hole in [OFF, END) unwritten blocks.  *COVERED: the end of
 * the stretch from OFF that is allocated now (short after ENOSPC).
 */
static errcode_t alloc_range(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, uint64_t off,
			     uint64_t end, uint64_t *covered)
{
	uint64_t bs = vol->fs->blocksize;
	blk64_t lblk = off / bs, last = (end - 1) / bs, n;
	struct nx_fmap map;
	struct nx_fmap_run run;
	errcode_t err;

	err = nx_fmap_open(&map, vol, ino, inode);
	while (!err && lblk <= last) {
		err = nx_fmap_lookup(&map, lblk, &run);
		if (err)
			break;
		n = min_u64(run.len, last - lblk + 1);
		if (!run.pblk) {
			err = nx_fmap_alloc(&map, lblk, n, 1, &run);
			if (err)
				break;
			n = run.len;
		}
		lblk += n;
	}
	nx_fmap_close(&map);
	*covered = min_u64(end, lblk * bs);
	return err;
}

/*
 * ext4's FALLOC_FL_ZERO_RANGE: the range stays (or becomes) allocated;
 * whole blocks turn into unwritten extents, partial edge blocks get zeros
 * written.
 */
static errcode_t zero_range(struct nx_volume *vol, ext2_ino_t ino,
			    struct ext2_inode_large *inode, uint64_t off,
			    uint64_t end, uint64_t *covered)
{
	uint64_t bs = vol->fs->blocksize;
	blk64_t first = (off + bs - 1) / bs, stop = end / bs;
	struct nx_fmap map;
	errcode_t err;

	err = alloc_range(vol, ino, inode, off, end, covered);
	if (err)
		return err;
	if (first < stop) {
		err = nx_fmap_open(&map, vol, ino, inode);
		if (!err)
			err = nx_fmap_convert(&map, first, stop - first, 1);
		nx_fmap_close(&map);
		if (err)
			return err;
	}
	return zero_edges(vol, ino, inode, off, end);
}

errcode_t nx_file_fallocate(struct nx_volume *vol, ext2_ino_t ino, int mode,
			    uint64_t offset, uint64_t len)
{
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode;
	uint64_t end = offset + len, covered = offset, isize;
	int keep = (mode & FALLOC_FL_KEEP_SIZE) != 0;
	errcode_t err, err2;

	if (nx_volume_rdonly(vol) || !vol->io)
		return EROFS;
	if (len == 0)
		return EINVAL;
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE |
		     FALLOC_FL_ZERO_RANGE))
		return EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) &&
	    ((mode & FALLOC_FL_ZERO_RANGE) || !keep))
		return EOPNOTSUPP;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (!LINUX_S_ISDIR(inode.i_mode) && !LINUX_S_ISREG(inode.i_mode))
		return ENODEV;
	err = check_modifiable(&inode);
	if (err)
		return err;
	if ((inode.i_flags & EXT2_APPEND_FL) && (mode & ~FALLOC_FL_KEEP_SIZE))
		return EPERM;
	if (end < offset || end > nx_file_max_bytes(fs, &inode))
		return EFBIG;
	isize = EXT2_I_SIZE(&inode);
	if ((mode & FALLOC_FL_PUNCH_HOLE) && offset >= isize)
		return 0;
	/* As ext4 does, inline data moves out to a block first. */
	err = nx_file_inline_expand(vol, ino, &inode);
	if (err)
		return err == EXT2_ET_BLOCK_ALLOC_FAIL ? ENOSPC : err;

	if (mode & FALLOC_FL_PUNCH_HOLE) {
		err = punch_hole(vol, ino, &inode, offset, end);
	} else if (!(inode.i_flags & EXT4_EXTENTS_FL)) {
		/* ext4 preallocates only for extent-mapped files. */
		err = EOPNOTSUPP;
	} else if (mode & FALLOC_FL_ZERO_RANGE) {
		err = zero_range(vol, ino, &inode, offset, end, &covered);
	} else {
		err = alloc_range(vol, ino, &inode, offset, end, &covered);
	}
	if (err == EOPNOTSUPP)
		return err;
	/* After ENOSPC the size still covers what was allocated (ext4). */
	if (!(mode & FALLOC_FL_PUNCH_HOLE) && !keep && covered > isize)
		ext2fs_inode_size_set(fs, (struct ext2_inode *)&inode, covered);
	if (!err)
		nx_inode_touch(&inode, NX_TOUCH_MTIME | NX_TOUCH_CTIME);
	err2 = nx_inode_write(vol, ino, &inode);
	if (err)
		return is_nospace(err) ? ENOSPC : err;
	return err2;
}
