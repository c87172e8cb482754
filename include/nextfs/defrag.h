/*
 * defrag.h - rewriting a live file's data into contiguous free space
 * ("nextfs defrag", docs/defrag.md).
 * Layer: fs/ (calls volume/; what the snapshots need it leaves to the
 * volume's free hook and overwrite policy, overwrite.h).
 *
 * Contract: the data of a regular file (extent- or indirect-mapped) is
 * copied, in logical order, into free runs chosen up front (one run big
 * enough for the whole file if there is one, else the fewest largest
 * runs), and the file's logical blocks are remapped there.  Old blocks
 * are released the way truncate releases them: a block the active
 * snapshot still needs goes to it as it is, at its own block number
 * (never written, never copied), every other one becomes free - so every
 * snapshot view reads exactly what it read before.  The file's content,
 * size, times and flags do not change; unwritten (preallocated) ranges
 * and holes stay as they are.
 *
 * The work is split so that a caller can hold the volume lock in bounded
 * slices: nx_defrag_begin() measures and plans, nx_defrag_step() moves at
 * most a given number of blocks, nx_defrag_finish() measures again.  All
 * three are called with the volume lock held; between steps the file may
 * change (each step looks at the file's mapping as it is then, and a
 * block someone else took meanwhile only makes the result less
 * contiguous).  A crash between steps leaves each step either done or
 * not (txn.h: data reaches the new blocks before the commit that maps
 * them; freed blocks are not reused before it).
 *
 * "Extents" here are what filefrag counts: maximal runs of blocks that
 * follow each other both in the file and on disk, written or unwritten
 * alike.  A file with no more than one extent per piece between holes,
 * plus one per block group's worth of blocks (e4defrag's best case), is
 * left alone (NX_DEFRAG_CONTIGUOUS).  The caller checks who may defragment (write access); begin
 * refuses what cannot be: not a regular file (EINVAL), immutable or
 * append-only or a snapshot file (EPERM), too little free space for a
 * copy of the file (ENOSPC).  Free space too fragmented to do better than
 * the file's own layout is not an error: the verdict says so and nothing
 * was written.  Begin writes nothing, so a tool can ask for the verdict
 * on a volume opened read-only; a step there is EROFS.
 */
#ifndef NEXTFS_DEFRAG_H
#define NEXTFS_DEFRAG_H

#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

/* struct nx_defrag.verdict */
#define NX_DEFRAG_MOVE		0	/* planned: the steps move it */
#define NX_DEFRAG_CONTIGUOUS	1	/* nothing to gain: left alone */
#define NX_DEFRAG_FRAGMENTED	2	/* free space too fragmented */

/* One free run of the plan. */
struct nx_defrag_run {
	blk64_t start, len;
};

struct nx_defrag {
	ext2_ino_t ino;
	int verdict;			/* NX_DEFRAG_* */
	blk64_t blocks;			/* data blocks mapped (begin) */
	blk64_t extents_before;
	blk64_t extents_after;		/* finish; the plan's estimate before */
	blk64_t moved;			/* blocks rewritten so far */
	blk64_t kept;			/* ... whose old block a snapshot kept */
	/* The plan and where the steps are in it (private). */
	struct nx_defrag_run *plan;
	size_t nplan, iplan;
	blk64_t used;			/* of plan[iplan] */
	blk64_t next_lblk;
	void *buf;
	size_t bufsize;
};

/* Blocks a step moves at most (a bounded hold of the volume lock). */
#define NX_DEFRAG_STEP_BYTES	(8U << 20)

/* Count the extents (see above) and data blocks of regular file INO. */
errcode_t nx_defrag_count(struct nx_volume *vol, ext2_ino_t ino,
			  blk64_t *extents, blk64_t *blocks);

/* Measure INO and plan where it goes; D is the caller's (zeroed here). */
errcode_t nx_defrag_begin(struct nx_volume *vol, ext2_ino_t ino,
			  struct nx_defrag *d);

/* Move up to MAX blocks; *DONE once the whole file was handled. */
errcode_t nx_defrag_step(struct nx_volume *vol, struct nx_defrag *d,
			 blk64_t max, int *done);

/* Measure again (extents_after).  Frees the plan; D may be freed too. */
errcode_t nx_defrag_finish(struct nx_volume *vol, struct nx_defrag *d);

/* Free what D holds (after an error, or instead of finish). */
void nx_defrag_free(struct nx_defrag *d);

#endif
