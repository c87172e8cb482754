/*
 * overwrite.h - the overwrite policy: what the file data path does with
 * blocks that a layer above fs/ still needs.
 * Layer: fs/ defines it; snap/ registers it (cow.c, at nx_snap_attach).
 *
 * Contract: the data path (file.c, falloc.c) never overwrites a written
 * block on its own authority.  Where a volume has a policy (vol->overwrite,
 * set by the layer that keeps old blocks: the snapshots), every overwrite
 * of a mapped block asks it first, and the policy decides per block:
 *  - leave it (nothing needs it): the data goes in place;
 *  - move it (NX_PRESERVE_MOVE): the old block goes to whoever needs it
 *    as it is, and the file gets a new block for the new data - through
 *    prepare(), one block at a time, or, for a run the write replaces
 *    whole, by the data path remapping or punching the run and telling
 *    take_moved();
 *  - copy it (NX_PRESERVE_COPY, files with FS_NOCOW_FL): the data goes in
 *    place and the block I/O write hook (blkio.h) copies the old content
 *    first; the writer pays for the copies (reserve.h) before writing.
 * A volume without a policy (vol->overwrite NULL) overwrites in place.
 * Nothing here decides where new blocks go: the allocation goal is the
 * data path's (nx_fmap_new_blocks, file.h).
 *
 * Growing the policy (how a block is kept, where its replacement goes):
 * the kind preserve_span() returns is the one per-block decision the data
 * path follows, so a policy that chooses between copying in place and
 * moving decides it there; a new question the data path must ask gets a
 * hook of its own here, called where file.c asks the others, and the
 * policy in cow.c fills it.  fs/ never includes snapshot.h.
 *
 * A volume that has no device of its own (a snapshot view: vol->io NULL)
 * reads its blocks from wherever the policy put them: view_plan() is the
 * planned form of its pread hook (volume.h), for reads outside the lock.
 *
 * The space the policy's blocks need is held back from every writer as
 * vol->cow_reserve (volume.h), checked by nx_reserve_check_cow()
 * (reserve.h): a plain number, so no hook.
 *
 * Every hook is called with the volume lock held; none may be NULL in a
 * registered policy.
 */
#ifndef NEXTFS_OVERWRITE_H
#define NEXTFS_OVERWRITE_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct nx_volume;
struct nx_file_rd;

/* What preserve_span() says a block needs. */
#define NX_PRESERVE_MOVE	1	/* moved away as it is */
#define NX_PRESERVE_COPY	2	/* copied by the write hook, then overwritten */

struct nx_overwrite_ops {
	/*
	 * File INO is about to overwrite its block LBLK, mapped at PBLK.
	 * If the policy needs PBLK, the file gets a new block (returned in
	 * *NEWPBLK, already mapped in INODE and on disk) and PBLK goes to
	 * the policy untouched; otherwise *NEWPBLK = PBLK.  The caller must
	 * write the whole block at *NEWPBLK (merging the old content from
	 * PBLK for partial writes).  Files with FS_NOCOW_FL are left in
	 * place: the block I/O hook copies them instead.
	 */
	errcode_t (*prepare)(struct nx_volume *vol, ext2_ino_t ino,
			     struct ext2_inode_large *inode, blk64_t lblk,
			     blk64_t pblk, blk64_t *newpblk);
	/*
	 * How many of the COUNT blocks from PBLK of a file with INODE share
	 * the first one's answer to "must the policy keep it, and how?"
	 * (*NEEDS): 0 - no; NX_PRESERVE_MOVE - the data path moves it (a
	 * whole run with one punch or remap); NX_PRESERVE_COPY - overwritten
	 * in place after the write hook's copy, and the writer must have the
	 * space for that before writing (reserve.h).
	 */
	blk64_t (*preserve_span)(struct nx_volume *vol,
				 const struct ext2_inode_large *inode,
				 blk64_t pblk, blk64_t count, int *needs);
	/*
	 * The data path has unmapped the COUNT blocks from PBLK from a file
	 * (it remapped their logical blocks elsewhere) without freeing them,
	 * and preserve_span() said NX_PRESERVE_MOVE for them all: the policy
	 * takes them as they are, at their own block numbers.  The cheap form
	 * of what freeing them would do (no free and re-allocation).
	 */
	errcode_t (*take_moved)(struct nx_volume *vol, blk64_t pblk,
				blk64_t count);
	/*
	 * For a volume without a device of its own: read LEN bytes at byte
	 * OFFSET as the volume sees them into BUF, adding the reads of live
	 * device blocks to RD to be done outside the lock
	 * (nx_file_read_begin, file.h); what the live transaction holds, and
	 * the superblock, are read at once.
	 */
	errcode_t (*view_plan)(struct nx_volume *vol, void *buf, uint64_t len,
			       uint64_t offset, struct nx_file_rd *rd);
};

#endif
