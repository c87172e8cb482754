/*
 * reserve.h - the free blocks each writer must leave: ext4's
 * root-reserved blocks (s_r_blocks_count) and what the snapshots hold
 * back (snapshot.h: vol->cow_reserve).
 * Layer: fs/ (calls volume/).
 *
 * Contract: as in ext4, blocks below s_r_blocks_count free are for uid 0
 * (CAP_SYS_RESOURCE), the user s_def_resuid and, if s_def_resgid is not
 * 0, members of that group.  Below vol->cow_reserve nobody's live
 * allocations go, root's neither.  The FUSE layer says, per request, who
 * the thread serves (nx_reserve_writer); threads that say nothing (tools,
 * commits, snapshot take and delete, the daemon's own work) are
 * NX_WRITER_OWN and keep nothing back in libext2fs's allocator.  A
 * writer's allocations - file data (nx_fmap_new_blocks), and, once
 * nx_reserve_install() has hooked libext2fs's allocator, every directory,
 * extent, indirect and xattr block - fail with ENOSPC instead of leaving
 * fewer free blocks than its floor.  Copies into the active snapshot are
 * allocated outside the hook: those of fixed metadata are drawn from the
 * COW reserve; the others are the writer's, checked before the write
 * (+C data: nx_reserve_room) or before the request starts
 * (nx_reserve_may_change).  A commit run at the end of a request is not
 * the writer's (nx_txn_committing): it keeps nothing back.
 */
#ifndef NEXTFS_RESERVE_H
#define NEXTFS_RESERVE_H

#include <ext2fs/ext2fs.h>
#include "nextfs/perm.h"
#include "nextfs/volume.h"

enum nx_writer {
	NX_WRITER_OWN = 0,	/* the program's own work: no floor */
	NX_WRITER_ROOT,		/* may use the root-reserved blocks */
	NX_WRITER_USER,		/* may not */
};

/* May CRED use the root-reserved blocks of the volume with SB? */
int nx_reserve_may_use(const struct nx_cred *cred,
		       const struct ext2_super_block *sb);

/* This thread now serves WRITER (until told otherwise). */
void nx_reserve_writer(enum nx_writer writer);

/* The root-reserved blocks if the current writer may not use them, or 0. */
blk64_t nx_reserve_floor(struct nx_volume *vol);

/*
 * Free blocks the current writer's live allocations must leave: its
 * nx_reserve_floor() plus vol->cow_reserve; 0 for NX_WRITER_OWN and
 * inside a commit.
 */
blk64_t nx_reserve_live_floor(struct nx_volume *vol);

/* ENOSPC unless the current writer may take WANT more blocks. */
errcode_t nx_reserve_room(struct nx_volume *vol, blk64_t want);

/*
 * ENOSPC if WANT more blocks would eat into what the snapshots hold back
 * from every writer, whoever it is (vol->cow_reserve: snapshot.h).
 */
errcode_t nx_reserve_check_cow(struct nx_volume *vol, blk64_t want);

/* What a request that is about to change the volume does. */
enum nx_change {
	NX_CHANGE_ANY = 0,	/* may allocate and copy anything */
	NX_CHANGE_REMOVE,	/* unlink, rmdir: frees what it can */
	NX_CHANGE_INODES,	/* rewrites inodes only (chown, utimes) */
};

/*
 * Removals and inode-only changes may start this many blocks below the
 * floor (in all, not per request): a writer at its limit must still be
 * able to delete what it wrote since the take, which frees space, though
 * the directory block that names it is copied first.
 */
#define NX_RESERVE_GRACE	8

/*
 * May the current writer start a request of kind CHANGE?  While a
 * snapshot is active any change may copy blocks into it, which cannot
 * fail half way: a writer already at or below its floor gets ENOSPC
 * before anything changes, so that what one request copies beyond the
 * floor is all any writer can take from the reserves (the COW reserve
 * leaves room for that).  Removals get NX_RESERVE_GRACE more; inode-only
 * changes copy only what the COW reserve holds room for and are refused
 * only once that reserve itself is short (by more than the grace).
 * Without an active snapshot: always 0.
 */
errcode_t nx_reserve_may_change(struct nx_volume *vol, enum nx_change change);

/* Make libext2fs's own block allocations on VOL obey the floor. */
void nx_reserve_install(struct nx_volume *vol);

#endif
