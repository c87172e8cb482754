/*
 * snaptool.h - offline tools around snapshots: check, export, diff,
 * restore (the library behind "nextfs check|export|diff|restore|info").
 * Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - Everything here works on an unmounted image.  Opening takes the same
 *   advisory lock as nx_open_volume() (shared for reading, exclusive for
 *   writing), so a volume served by nextfs-fuse is refused with a clear
 *   message (EBUSY); a volume mounted by the kernel is refused for writes.
 * - Bad input (not an ext2/3/4 image, unknown snapshot, corrupt snapshot
 *   list where a sound one is needed) fails with a one-line message and
 *   changes nothing.
 * - nx_check() verifies the snapshot list, every snapshot inode, block
 *   ownership (no block owned twice by snapshot files, live files and
 *   metadata), the allocation bitmap against what is owned, and that every
 *   snapshot preserves only blocks that were in use at its take.  With
 *   NX_CHECK_REPAIR it fixes what is safe (superblock snapshot fields,
 *   chain links, snapshot flags, sizes) and reports each fix.  It does not
 *   run e2fsck itself: nx_imgsrc_open_live() (image.h) gives the byte
 *   image that a stock e2fsck must see (the live volume with
 *   HAS_SNAPSHOT masked, nothing copied), and the caller serves it
 *   (nextfs check uses FUSE).  Snapshots as standalone images (export):
 *   image.h.
 * - nx_snap_diff() reports the changes between snapshot OLD and snapshot
 *   NEW (or the live tree) as created/deleted/modified/renamed paths;
 *   nx_snap_delta() gives the per-inode delta they are made from
 *   (delta.h), which "nextfs send" streams.
 *   Inodes whose inode-table block and block maps resolve to the same
 *   physical blocks in both trees are known unchanged without being read;
 *   only changed inodes are compared, and file content only for the
 *   blocks whose mapping differs.  (ext4 has no parent pointers, so the
 *   directories of both trees are still listed to name the changes.)
 * - nx_snap_restore() rolls the live tree back to snapshot NAME offline:
 *   afterwards the live tree is the snapshot's content, the snapshot still
 *   exists and still shows its take-time content, older snapshots stay
 *   valid.  Newer snapshots make it refuse (EEXIST with the reason) unless
 *   NX_RESTORE_DESTROY_NEWER deletes them first.  If interrupted, running
 *   it again completes it.
 * Functions taking a struct nx_volume (diff) expect it opened
 * with NX_VOL_RDONLY and its lock held by the caller, as snapshot.h does.
 * Nothing here is thread-safe; one caller at a time.
 */
#ifndef NEXTFS_SNAPTOOL_H
#define NEXTFS_SNAPTOOL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"
#include "nextfs/snapshot.h"
#include "nextfs/delta.h"

/* Progress of a long operation: DONE out of TOTAL units of WHAT. */
typedef void (*nx_progress_fn)(void *priv, const char *what, uint64_t done,
			       uint64_t total);

struct nx_progress {
	nx_progress_fn fn;		/* may be NULL */
	void *priv;
};

/* ------------------------------------------------------------------ */
/* Raw offline access (no snapshot engine attached, no copy-on-write). */

struct nx_rawvol {
	ext2_filsys fs;			/* owned */
	char *device;			/* owned */
	int lock_fd;			/* holds the volume lock */
	int claim_fd;			/* O_EXCL claim of a block device (rw) */
	int rw;
	int sb_csum_fixed;		/* NX_RAW_REPAIR: the primary superblock's
					   checksum was wrong, is rewritten */
};

/* nx_raw_open() modes (0: read-only). */
#define NX_RAW_WRITE	1	/* write; damaged volumes refused (sanity.h) */
#define NX_RAW_REPAIR	2	/* write, to repair: damage is expected */

/*
 * Open DEVICE for the offline tools: lock it (exclusive, and a block
 * device claimed, for writing), refuse a volume in use by nextfs or (for
 * writing) mounted by the kernel, refuse what libext2fs cannot read;
 * HAS_SNAPSHOT is accepted.  Bitmaps are loaded.  Writers replay a
 * crash's journal first and clear needs_recovery (written at close: the
 * tools write without the journal).  On failure *RET is NULL.
 */
errcode_t nx_raw_open(const char *device, int mode, struct nx_rawvol **ret,
		      char *msg, size_t msglen);
/* Write back (RW), unlock, free.  RAW may be NULL. */
errcode_t nx_raw_close(struct nx_rawvol *raw);
/* Close the libext2fs handle but keep holding the lock (shared from now). */
errcode_t nx_raw_release_fs(struct nx_rawvol *raw);

/* ------------------------------------------------------------------ */
/* Check. */

#define NX_CHECK_REPAIR		0x01	/* fix what is safe */

enum nx_check_level {
	NX_CHECK_INFO,			/* what was checked */
	NX_CHECK_WARNING,		/* odd, harmless */
	NX_CHECK_ERROR,			/* an inconsistency left in place */
	NX_CHECK_FIXED,			/* an inconsistency that was repaired */
};

typedef void (*nx_check_report_fn)(void *priv, enum nx_check_level level,
				   const char *msg);

struct nx_check_result {
	unsigned errors;		/* left in place */
	unsigned fixed;
	unsigned warnings;
	int views_checked;		/* the snapshot views could be opened */
	int nsnaps;			/* snapshots on the (repaired) list */
};

/*
 * Check (and with NX_CHECK_REPAIR repair) the snapshot structures of the
 * unmounted volume DEVICE.  Returns non-zero (with MSG) only when the
 * check itself could not run; findings go to REPORT and RES.
 */
errcode_t nx_check(const char *device, int flags, nx_check_report_fn report,
		   void *priv, const struct nx_progress *prog,
		   struct nx_check_result *res, char *msg, size_t msglen);

/* ------------------------------------------------------------------ */
/* Diff. */

/*
 * Changes from snapshot OLD to snapshot NEW (NULL: the live tree) of VOL
 * (opened read-only), sorted by path.  OLD must be older than NEW.  The
 * snapshot directory itself is left out.  Renames are reported for the
 * entry that moved (a renamed directory's children are not listed unless
 * they changed themselves); M is reported at the new path.  A path that
 * is replaced by a different file is reported as '-' and '+'.
 */
errcode_t nx_snap_diff(struct nx_volume *vol, const char *old_name,
		       const char *new_name, nx_diff_fn fn, void *priv,
		       const struct nx_progress *prog, char *msg,
		       size_t msglen);

/*
 * The delta (delta.h) from snapshot OLD_ID to snapshot NEW_ID (0: the
 * live tree) of VOL, from the block maps; NX_DELTA_FULL: from an empty
 * tree (OLD_ID unused).  VOL is an image opened read-only (its lock held
 * by the caller) or the daemon's live volume (its lock held throughout:
 * the views resolve blocks through the live snapshot store).  The views
 * used are the store's (nx_snap_view_get).  MSG says why on failure.
 */
errcode_t nx_snap_delta(struct nx_volume *vol, uint32_t old_id,
			uint32_t new_id, unsigned flags,
			const struct nx_progress *prog, struct nx_delta *delta,
			char *msg, size_t msglen);

/*
 * Do regular file INO[0] of tree ID[0] and regular file INO[1] of tree
 * ID[1] (snapshot ids, 0: the live tree) of VOL hold the same bytes
 * (*SAME)?  Decided from the block maps like the delta's content: blocks
 * that resolve to the same device block are equal without being read,
 * the others are compared byte for byte.  EINVAL if either is not a
 * regular file in use there; ENOENT: no such snapshot.  VOL locked.
 */
errcode_t nx_snap_same_data(struct nx_volume *vol, const uint32_t id[2],
			    const ext2_ino_t ino[2], int *same, char *msg,
			    size_t msglen);

/* ------------------------------------------------------------------ */
/* Restore. */

#define NX_RESTORE_DESTROY_NEWER	0x01	/* delete newer snapshots first */

struct nx_restore_result {
	uint64_t blocks_restored;	/* blocks written back from the snapshot */
	uint64_t blocks_returned;	/* moved blocks given back to the live tree */
	uint64_t blocks_freed;		/* blocks the snapshot no longer needs */
	uint64_t blocks_relocated;	/* snapshot blocks moved out of the way */
	uint64_t blocks_guarded;	/* unexpected changes preserved first */
	int destroyed;			/* newer snapshots deleted */
};

errcode_t nx_snap_restore(const char *device, const char *name, int flags,
			  const struct nx_progress *prog,
			  struct nx_restore_result *res, char *msg,
			  size_t msglen);

/* ------------------------------------------------------------------ */
/* Internal to the tool modules (src/snap/owners.c; used by check.c,
 * export.c, diff.c, restore.c): block ownership as e2fsck sees it. */

/*
 * Which blocks does the file system use?  Filesystem metadata (super
 * blocks, descriptors, bitmaps, inode tables, MMP) plus the blocks of every
 * in-use inode (data, extent tree / indirect blocks, xattr block) except
 * those for which SKIP returns non-zero.  DUP (optional) receives blocks
 * claimed more than once; *NDUP their number.  Marks into USED (allocated
 * by the caller, cleared here).
 */
typedef int (*nx_owner_skip_fn)(void *priv, ext2_ino_t ino,
				const struct ext2_inode_large *inode);
typedef void (*nx_owner_claim_fn)(void *priv, ext2_ino_t ino, blk64_t blk,
				  e2_blkcnt_t blockcnt);

struct nx_owner_scan {
	nx_owner_skip_fn skip;		/* may be NULL */
	nx_owner_claim_fn claim;	/* every block of every inode, may be NULL */
	void *priv;
	ext2fs_block_bitmap used;	/* out, required */
	ext2fs_block_bitmap dup;	/* out, optional */
	blk64_t ndup;
	blk64_t nbad;			/* block numbers out of range */
	unsigned nbadino;		/* inodes whose block map is unreadable */
	ext2_ino_t bad_ino;		/* ... the first of them */
	errcode_t bad_err;		/* ... and why */
	const struct nx_progress *prog;
};

errcode_t nx_scan_owners(ext2_filsys fs, struct nx_owner_scan *scan);

/*
 * Make FS's block bitmap equal to USED and recompute the free block
 * counts (per group and total); groups whose bitmap changed lose
 * BLOCK_UNINIT.  Descriptor checksums are updated.  Marks FS dirty.
 */
void nx_apply_block_bitmap(ext2_filsys fs, ext2fs_block_bitmap used);

/* Recompute the free inode and directory counts from the inode bitmap. */
errcode_t nx_recount_inodes(ext2_filsys fs);

#endif
