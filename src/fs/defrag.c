/*
 * defrag.c - rewrite a live file's data into contiguous free space
 * (defrag.h).
 *
 * Like e4defrag, the file's data goes to space chosen before anything is
 * written, and the file is left alone when that space would not make it
 * less fragmented.  Unlike e4defrag (which swaps the blocks of a donor
 * file, and so cannot run where snapshots own blocks), the old blocks
 * are punched out of the file after the copy: the punch frees them
 * through libext2fs, where the snapshot layer's free hook keeps every
 * block the active snapshot still needs - as truncate does - so no block
 * a snapshot owns is ever written, moved or freed here.
 */
#define NX_FILE_INTERNAL
#include "nextfs/defrag.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/blkio.h"
#include "nextfs/overwrite.h"
#include "nextfs/reserve.h"

/* Logical blocks beyond this are never mapped (ext4's 32-bit lblk). */
#define DF_LBLK_END	((blk64_t)1 << 32)
/* Free blocks left for the trees to grow while remapping. */
#define DF_SLACK	16
/* Free runs remembered while looking for the fewest that hold a file. */
#define DF_MAX_RUNS	4096

static blk64_t min_blk(blk64_t a, blk64_t b)
{
	return a < b ? a : b;
}

/* ---------------------------------------------------------------------
 * Measuring
 */

struct df_shape {
	blk64_t extents;	/* runs contiguous in the file and on disk */
	blk64_t blocks;		/* mapped blocks */
	blk64_t written;	/* ... not unwritten (those stay put) */
	blk64_t pieces;		/* runs of mapped blocks between holes */
	blk64_t first_pblk;	/* where the file starts on disk */
};

static errcode_t measure(struct nx_volume *vol, ext2_ino_t ino,
			 struct ext2_inode_large *inode, struct df_shape *s)
{
	struct nx_fmap m;
	struct nx_fmap_run r;
	blk64_t lblk = 0, end_l = DF_LBLK_END, end_p = 0;
	int end_uninit = -1;
	errcode_t err;

	memset(s, 0, sizeof(*s));
	err = nx_fmap_open(&m, vol, ino, inode);
	if (err == EXT2_ET_INLINE_DATA_CANT_ITERATE)
		return 0;		/* no blocks of its own */
	while (!err && lblk < DF_LBLK_END) {
		err = nx_fmap_lookup(&m, lblk, &r);
		if (err)
			break;
		if (!r.pblk) {
			if (r.len >= DF_LBLK_END - lblk)
				break;	/* the hole to the end */
			lblk += r.len;
			continue;
		}
		if (lblk != end_l)
			s->pieces++;
		if (lblk != end_l || r.pblk != end_p || r.uninit != end_uninit)
			s->extents++;
		if (!s->first_pblk)
			s->first_pblk = r.pblk;
		s->blocks += r.len;
		if (!r.uninit)
			s->written += r.len;
		lblk += r.len;
		end_l = lblk;
		end_p = r.pblk + r.len;
		end_uninit = r.uninit;
	}
	nx_fmap_close(&m);
	return err;
}

errcode_t nx_defrag_count(struct nx_volume *vol, ext2_ino_t ino,
			  blk64_t *extents, blk64_t *blocks)
{
	struct ext2_inode_large inode;
	struct df_shape s;
	errcode_t err = nx_inode_read(vol, ino, &inode);

	if (!err && !LINUX_S_ISREG(inode.i_mode))
		err = EINVAL;
	if (!err)
		err = measure(vol, ino, &inode, &s);
	if (err)
		return err;
	*extents = s.extents;
	*blocks = s.blocks;
	return 0;
}

/* ---------------------------------------------------------------------
 * Planning: where the file goes
 */

/* The free run at or after FROM (up to END inclusive), if any. */
static int next_free_run(ext2_filsys fs, blk64_t from, blk64_t end,
			 struct nx_defrag_run *run)
{
	blk64_t s, e;

	if (from > end ||
	    ext2fs_find_first_zero_block_bitmap2(fs->block_map, from, end, &s))
		return 0;
	if (ext2fs_find_first_set_block_bitmap2(fs->block_map, s, end, &e))
		e = end + 1;
	run->start = s;
	run->len = e - s;
	return 1;
}

/* The K longest runs seen, as a min-heap on length. */
struct df_heap {
	struct nx_defrag_run *v;
	size_t n, cap;
};

static void heap_sift_down(struct df_heap *h, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct nx_defrag_run t;

		if (l < h->n && h->v[l].len < h->v[m].len)
			m = l;
		if (r < h->n && h->v[r].len < h->v[m].len)
			m = r;
		if (m == i)
			return;
		t = h->v[i];
		h->v[i] = h->v[m];
		h->v[m] = t;
		i = m;
	}
}

static void heap_offer(struct df_heap *h, const struct nx_defrag_run *run)
{
	size_t i;

	if (h->n == h->cap) {
		if (run->len <= h->v[0].len)
			return;
		h->v[0] = *run;
		heap_sift_down(h, 0);
		return;
	}
	i = h->n++;
	h->v[i] = *run;
	while (i && h->v[(i - 1) / 2].len > h->v[i].len) {
		struct nx_defrag_run t = h->v[i];

		h->v[i] = h->v[(i - 1) / 2];
		h->v[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

static int by_len_desc(const void *a, const void *b)
{
	const struct nx_defrag_run *x = a, *y = b;

	return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

static int by_start(const void *a, const void *b)
{
	const struct nx_defrag_run *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * Look at every free run from GOAL on (and then from the start of the
 * volume): the first that holds all WANT blocks wins, as mballoc's goal
 * search would; meanwhile remember the longest ones.  1 if one run will
 * do (*ONE), else 0 with the heap filled.
 */
static int scan_free(ext2_filsys fs, blk64_t goal, blk64_t want,
		     struct df_heap *h, struct nx_defrag_run *one)
{
	blk64_t first = fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;
	blk64_t from[2] = { goal, first }, to[2] = { last, goal - 1 };
	struct nx_defrag_run run;
	int pass;

	if (goal <= first || goal > last) {
		from[0] = first;
		to[1] = 0;		/* one pass does it all */
		from[1] = 1;
	}
	for (pass = 0; pass < 2; pass++) {
		blk64_t at = from[pass];

		while (next_free_run(fs, at, to[pass], &run)) {
			if (run.len >= want) {
				one->start = run.start;
				one->len = want;
				return 1;
			}
			heap_offer(h, &run);
			at = run.start + run.len + 1;
		}
	}
	return 0;
}

/*
 * The fewest free runs that hold WANT blocks, longest first (at most
 * MAXRUNS), in disk order in D->plan.  0 with D->nplan == 0 if no such
 * set exists.
 */
static errcode_t plan_space(struct nx_volume *vol, struct nx_defrag *d,
			    blk64_t goal, blk64_t want, blk64_t maxruns)
{
	struct df_heap h = { NULL, 0, 0 };
	struct nx_defrag_run one;
	blk64_t sum = 0;
	size_t k;

	h.cap = (size_t)min_blk(maxruns ? maxruns : 1, DF_MAX_RUNS);
	h.v = malloc(h.cap * sizeof(*h.v));
	if (!h.v)
		return ENOMEM;
	if (scan_free(vol->fs, goal, want, &h, &one)) {
		h.v[0] = one;
		d->nplan = 1;
		d->plan = h.v;
		return 0;
	}
	qsort(h.v, h.n, sizeof(*h.v), by_len_desc);
	for (k = 0; k < h.n && sum < want; k++) {
		if (h.v[k].len > want - sum)
			h.v[k].len = want - sum;
		sum += h.v[k].len;
	}
	if (sum < want || k > maxruns) {
		free(h.v);
		return 0;
	}
	qsort(h.v, k, sizeof(*h.v), by_start);
	d->plan = h.v;
	d->nplan = k;
	return 0;
}

/* Refuse what defrag must not touch (defrag.h). */
static errcode_t check_file(const struct ext2_inode_large *inode)
{
	if (!LINUX_S_ISREG(inode->i_mode))
		return EINVAL;
	if (inode->i_flags & (EXT2_IMMUTABLE_FL | EXT2_APPEND_FL |
			      EXT4_SNAPFILE_FL))
		return EPERM;
	return 0;
}

errcode_t nx_defrag_begin(struct nx_volume *vol, ext2_ino_t ino,
			  struct nx_defrag *d)
{
	struct ext2_inode_large inode;
	struct df_shape s;
	blk64_t gain;
	errcode_t err;

	memset(d, 0, sizeof(*d));
	d->ino = ino;
	err = nx_inode_read(vol, ino, &inode);
	if (!err)
		err = check_file(&inode);
	if (!err)
		err = measure(vol, ino, &inode, &s);
	if (err)
		return err;
	d->blocks = s.blocks;
	d->extents_before = d->extents_after = s.extents;
	d->verdict = NX_DEFRAG_CONTIGUOUS;
	/*
	 * Nothing to gain when every piece between holes is one extent per
	 * block group's worth of blocks, as e4defrag counts the best case:
	 * group metadata and backups cut longer free runs.
	 */
	if (!s.written || s.extents <= s.pieces + s.blocks /
			 EXT2_BLOCKS_PER_GROUP(vol->fs->super))
		return 0;
	/* A copy of the written data must fit, as the writer may allocate. */
	err = nx_reserve_room(vol, s.written + DF_SLACK);
	if (!err)
		err = nx_reserve_check_cow(vol, s.written + DF_SLACK);
	if (err)
		return err;
	/* Worth it only with fewer runs than the file's surplus extents. */
	gain = s.extents - s.pieces;
	err = plan_space(vol, d, s.first_pblk, s.written, gain);
	if (err)
		return err;
	if (!d->nplan) {
		d->verdict = NX_DEFRAG_FRAGMENTED;
		return 0;
	}
	d->verdict = NX_DEFRAG_MOVE;
	d->extents_after = s.pieces + d->nplan - 1;
	d->bufsize = NX_DEFRAG_STEP_BYTES;
	if (posix_memalign(&d->buf, 4096, d->bufsize)) {
		d->buf = NULL;
		nx_defrag_free(d);
		return ENOMEM;
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Moving
 */

/* How many of the N blocks from PBLK the volume's policy keeps. */
static blk64_t count_kept(struct nx_volume *vol,
			  const struct ext2_inode_large *inode, blk64_t pblk,
			  blk64_t n)
{
	const struct nx_overwrite_ops *ow = vol->overwrite;
	blk64_t kept = 0, k;
	int needs;

	while (ow && n) {
		k = ow->preserve_span(vol, inode, pblk, n, &needs);
		if (!k)
			break;
		if (needs)
			kept += k;
		pblk += k;
		n -= k;
	}
	return kept;
}

/*
 * Copy the N written blocks [LBLK, ..) at OLD to new blocks from GOAL on
 * (fewer if the run found there is shorter: *N) and remap the file there;
 * the old blocks are punched out (defrag.c's header).
 */
static errcode_t move_run(struct nx_volume *vol, struct nx_defrag *d,
			  struct ext2_inode_large *inode, blk64_t lblk,
			  blk64_t old, blk64_t goal, blk64_t *n)
{
	ext2_filsys fs = vol->fs;
	uint64_t bs = fs->blocksize;
	blk64_t nb, got, kept, slack = DF_SLACK;
	errcode_t err;

	/*
	 * Once the old blocks are punched out, mapping the new ones must not
	 * fail for want of space, or the file would keep a hole: leave free
	 * what the map may need (indirect blocks a snapshot keeps are not
	 * freed by the punch, so a block-mapped file may need new ones).
	 */
	if (!(inode->i_flags & EXT4_EXTENTS_FL))
		slack += *n / (bs / 4) + 3;
	err = nx_fmap_new_blocks(vol, goal, *n, slack, &nb, &got);
	if (err)
		return err;
	err = nx_blkio_pread(vol->io, d->buf, got * bs, old * bs);
	if (!err)
		err = nx_blkio_pwrite_data(vol->io, d->buf, got * bs, nb * bs);
	if (err) {
		ext2fs_block_alloc_stats_range(fs, nb, (blk_t)got, -1);
		return err;
	}
	kept = count_kept(vol, inode, old, got);
	/* From here on the old blocks are the snapshot's or free. */
	err = nx_file_punch_blocks(vol, d->ino, inode, lblk, lblk + got - 1);
	if (!err)
		err = nx_file_map_blocks(vol, d->ino, inode, lblk, nb, got);
	if (!err)
		err = nx_inode_write(vol, d->ino, inode);
	if (err)
		return err;
	d->moved += got;
	d->kept += kept;
	*n = got;
	return 0;
}

/* Where the next block goes, or 0 when the plan is used up. */
static blk64_t plan_goal(const struct nx_defrag *d, blk64_t *room)
{
	if (d->iplan >= d->nplan)
		return 0;
	*room = d->plan[d->iplan].len - d->used;
	return d->plan[d->iplan].start + d->used;
}

static void plan_advance(struct nx_defrag *d, blk64_t n)
{
	d->used += n;
	if (d->iplan < d->nplan && d->used >= d->plan[d->iplan].len) {
		d->iplan++;
		d->used = 0;
	}
}

errcode_t nx_defrag_step(struct nx_volume *vol, struct nx_defrag *d,
			 blk64_t max, int *done)
{
	struct ext2_inode_large inode;
	struct nx_fmap m;
	struct nx_fmap_run r;
	blk64_t room = 0, goal, n;
	blk64_t cap = d->bufsize / vol->fs->blocksize;
	errcode_t err;

	*done = 0;
	if (d->verdict != NX_DEFRAG_MOVE) {
		*done = 1;
		return 0;
	}
	err = nx_volume_rdonly(vol) ? EROFS :
	      nx_inode_read(vol, d->ino, &inode);
	if (!err)
		err = check_file(&inode);
	while (!err && max) {
		goal = plan_goal(d, &room);
		if (!goal || d->next_lblk >= DF_LBLK_END) {
			*done = 1;
			break;
		}
		err = nx_fmap_open(&m, vol, d->ino, &inode);
		if (err == EXT2_ET_INLINE_DATA_CANT_ITERATE) {
			err = 0;
			*done = 1;
			break;
		}
		if (!err)
			err = nx_fmap_lookup(&m, d->next_lblk, &r);
		nx_fmap_close(&m);
		if (err)
			break;
		if (!r.pblk || r.uninit) {
			/* Holes and preallocated ranges stay as they are. */
			if (!r.pblk && r.len >= DF_LBLK_END - d->next_lblk) {
				*done = 1;
				break;
			}
			d->next_lblk += r.len;
			continue;
		}
		n = min_blk(min_blk(r.len, room), min_blk(max, cap));
		if (r.pblk == goal) {
			/* Already where the plan puts it. */
			d->next_lblk += n;
			plan_advance(d, n);
			max -= n;
			continue;
		}
		err = move_run(vol, d, &inode, d->next_lblk, r.pblk, goal, &n);
		if (err)
			break;
		d->next_lblk += n;
		plan_advance(d, n);
		max -= n;
	}
	return err;
}

errcode_t nx_defrag_finish(struct nx_volume *vol, struct nx_defrag *d)
{
	blk64_t blocks;
	errcode_t err = 0;

	if (d->verdict == NX_DEFRAG_MOVE)
		err = nx_defrag_count(vol, d->ino, &d->extents_after, &blocks);
	nx_defrag_free(d);
	return err;
}

void nx_defrag_free(struct nx_defrag *d)
{
	free(d->plan);
	free(d->buf);
	d->plan = NULL;
	d->buf = NULL;
	d->nplan = d->iplan = 0;
}
