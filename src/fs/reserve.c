/*
 * reserve.c - the free blocks each writer must leave (see reserve.h).
 *
 * Why a thread-local writer: the FUSE layer knows who asks, the allocator
 * deep inside libext2fs does not, and every request runs start to end in
 * one thread under the volume lock.  A commit that an operation's unlock
 * runs is not the writer's allocation (it writes the snapshots' maps and
 * copies): the hook lets it through (nx_txn_committing), and so does the
 * daemon's own work (snapshot take and delete), which is what the
 * reserves are held for.
 */
#include "nextfs/reserve.h"

#include <errno.h>
#include "nextfs/txn.h"

static __thread enum nx_writer writer;

int nx_reserve_may_use(const struct nx_cred *cred,
		       const struct ext2_super_block *sb)
{
	if (nx_cred_is_root(cred) || cred->uid == sb->s_def_resuid)
		return 1;
	return sb->s_def_resgid != 0 &&
	       nx_cred_in_group(cred, sb->s_def_resgid);
}

void nx_reserve_writer(enum nx_writer w)
{
	writer = w;
}

blk64_t nx_reserve_floor(struct nx_volume *vol)
{
	if (writer != NX_WRITER_USER || nx_txn_committing(vol))
		return 0;
	return ext2fs_r_blocks_count(vol->fs->super);
}

blk64_t nx_reserve_live_floor(struct nx_volume *vol)
{
	if (writer == NX_WRITER_OWN || nx_txn_committing(vol))
		return 0;
	return vol->cow_reserve + nx_reserve_floor(vol);
}

errcode_t nx_reserve_room(struct nx_volume *vol, blk64_t want)
{
	blk64_t free_blocks = ext2fs_free_blocks_count(vol->fs->super);

	return free_blocks >= nx_reserve_live_floor(vol) + want ? 0 : ENOSPC;
}

errcode_t nx_reserve_check_cow(struct nx_volume *vol, blk64_t want)
{
	blk64_t reserved = vol->cow_reserve;

	if (reserved &&
	    ext2fs_free_blocks_count(vol->fs->super) < want + reserved)
		return ENOSPC;
	return 0;
}

errcode_t nx_reserve_may_change(struct nx_volume *vol, enum nx_change change)
{
	blk64_t free_blocks = ext2fs_free_blocks_count(vol->fs->super);
	blk64_t floor = nx_reserve_live_floor(vol);

	if (!vol->cow_active || writer == NX_WRITER_OWN)
		return 0;
	if (change == NX_CHANGE_INODES)
		floor = vol->cow_reserve;
	if (change != NX_CHANGE_ANY)
		floor = floor > NX_RESERVE_GRACE ? floor - NX_RESERVE_GRACE : 0;
	return free_blocks >= floor ? 0 : ENOSPC;
}

/*
 * libext2fs's get_alloc_block hook: one block for a directory, extent,
 * indirect or xattr block (file data goes through nx_fmap_new_blocks).
 * It only chooses the block; the caller marks it in use.  What may use
 * everything (a commit writing the snapshots' maps, the daemon's own
 * work) also gets the blocks freed since the last commit when nothing
 * else is left (txn.h).
 */
static errcode_t alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct nx_volume *vol = nx_volume_of(fs);
	blk64_t floor = nx_reserve_live_floor(vol);
	errcode_t err;

	if (floor && ext2fs_free_blocks_count(fs->super) <= floor)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	/* An explicit map: libext2fs calls no hook for it. */
	err = ext2fs_new_block2(fs, goal, fs->block_map, ret);
	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && !floor &&
	    nx_txn_held_frees(vol)) {
		nx_txn_release_frees(vol);
		err = ext2fs_new_block2(fs, goal, fs->block_map, ret);
	}
	return err;
}

void nx_reserve_install(struct nx_volume *vol)
{
	errcode_t (*old)(ext2_filsys, blk64_t, blk64_t *);

	ext2fs_set_alloc_block_callback(vol->fs, alloc_block, &old);
}
