/*
 * reserve.h - ext4's root-reserved blocks (s_r_blocks_count) for the
 * writers who may have them.
 *
 * Contract: as in ext4, blocks below s_r_blocks_count free are for uid 0
 * (CAP_SYS_RESOURCE), the user s_def_resuid and, if s_def_resgid is not
 * 0, members of that group.  The FUSE layer says, per request, whether
 * the writer this thread serves is one of them (nx_reserve_restrict);
 * threads that say nothing (tools, commits, the daemon's own work) are.
 * A restricted writer's allocations - file data (nx_fmap_new_blocks),
 * and, once nx_reserve_install() has hooked libext2fs's allocator, every
 * directory, extent, indirect and xattr block - fail with ENOSPC instead
 * of leaving fewer free blocks than the reserve.  Allocations for the
 * snapshots (copy-on-write copies, their block maps at a commit) are
 * never restricted: they keep what is already written.
 */
#ifndef NEXTFS_RESERVE_H
#define NEXTFS_RESERVE_H

#include <ext2fs/ext2fs.h>
#include "nextfs/perm.h"
#include "nextfs/volume.h"

/* May CRED use the root-reserved blocks of the volume with SB? */
int nx_reserve_may_use(const struct nx_cred *cred,
		       const struct ext2_super_block *sb);

/* This thread now serves a writer who may not (1) or may (0) use them. */
void nx_reserve_restrict(int restricted);

/* Blocks the current writer must leave free: the reserve, or 0. */
blk64_t nx_reserve_floor(struct nx_volume *vol);

/* Make libext2fs's own block allocations on VOL obey the floor. */
void nx_reserve_install(struct nx_volume *vol);

#endif
