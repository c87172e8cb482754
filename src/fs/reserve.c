/*
 * reserve.c - root-reserved blocks (see reserve.h).
 *
 * Why a thread-local flag: the FUSE layer knows who asks, the allocator
 * deep inside libext2fs does not, and every request runs start to end in
 * one thread under the volume lock.  A commit that an operation's unlock
 * runs is not the writer's allocation (it writes the snapshots' maps):
 * the hook lets it through (nx_txn_committing).
 */
#include "nextfs/reserve.h"

#include "nextfs/txn.h"

static __thread int restricted_writer;

int nx_reserve_may_use(const struct nx_cred *cred,
		       const struct ext2_super_block *sb)
{
	if (nx_cred_is_root(cred) || cred->uid == sb->s_def_resuid)
		return 1;
	return sb->s_def_resgid != 0 &&
	       nx_cred_in_group(cred, sb->s_def_resgid);
}

void nx_reserve_restrict(int restricted)
{
	restricted_writer = restricted;
}

blk64_t nx_reserve_floor(struct nx_volume *vol)
{
	if (!restricted_writer || nx_txn_committing(vol))
		return 0;
	return ext2fs_r_blocks_count(vol->fs->super);
}

/*
 * libext2fs's get_alloc_block hook: one block for a directory, extent,
 * indirect or xattr block (file data goes through nx_fmap_new_blocks).
 * It only chooses the block; the caller marks it in use.
 */
static errcode_t alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct nx_volume *vol = nx_volume_of(fs);
	blk64_t floor = nx_reserve_floor(vol);

	if (floor && ext2fs_free_blocks_count(fs->super) <= floor)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	/* An explicit map: libext2fs calls no hook for it. */
	return ext2fs_new_block2(fs, goal, fs->block_map, ret);
}

void nx_reserve_install(struct nx_volume *vol)
{
	errcode_t (*old)(ext2_filsys, blk64_t, blk64_t *);

	ext2fs_set_alloc_block_callback(vol->fs, alloc_block, &old);
}
