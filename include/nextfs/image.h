/*
 * image.h - a snapshot as a standalone ext2/3/4 block image: the one
 * engine behind "nextfs export", the image files of a mount
 * (MNT/.snapshot-images/NAME) and "nextfs export --since"
 * (docs/design.md P2, P18; docs/snapshots.md, "Snapshots as images").
 * Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - An nx_imgsrc is a read-only byte image.  nx_imgsrc_open_export()
 *   presents a snapshot as a standalone image of the volume's size, with
 *   nothing copied: block b is the fixed-up metadata where the export
 *   differs from the snapshot (superblocks and descriptors without the
 *   snapshot fields and with recounted free counts, bitmaps rebuilt from
 *   what the remaining inodes own, the snapshot inodes, /.snapshots and
 *   the take's orphans freed, the journal superblock of an empty log),
 *   held in memory; else the snapshot's own block b, read through its
 *   view, where the export uses it; else zeros.  The journal's log reads
 *   as zeros (it is empty).  What it reads depends only on the snapshot,
 *   never on when it is read nor on what the live volume does meanwhile.
 * - The exported superblock is stamped: s_uuid is the volume's, and
 *   s_snapshot_id (a field stock e2fsck and the kernel ignore without
 *   RO_COMPAT_HAS_SNAPSHOT) is the snapshot's id, which a volume never
 *   reuses.  nx_imgsrc_out_state() recognises an export by it.
 * - Locking: opening an export takes the volume lock for each block it
 *   reads of the snapshot, so that a served volume keeps serving while
 *   the export is prepared (a scan of the snapshot's inodes); call it
 *   without the lock.  nx_imgsrc_read(), _next_data(), _write() and
 *   _update() take the lock themselves; nx_imgsrc_plan(), _seek(),
 *   _estimate() and _changes() expect the
 *   caller to hold it (the FUSE daemon plans a read under the lock and
 *   does the device I/O after dropping it, file.h).
 * - Once the snapshot is deleted, reads of its export fail with ESTALE
 *   (through nx_errno), never return other data.
 * - nx_imgsrc_open_live() is the live volume DEVICE with HAS_SNAPSHOT
 *   masked (what stock e2fsck must see, for nextfs check); it holds the
 *   volume's lock (shared) until closed.  nx_imgsrc_open_fd() is an image
 *   in a file, read with pread and SEEK_DATA/SEEK_HOLE (an image file of
 *   a mount, for "nextfs export" of a mounted volume).
 * Not thread-safe by itself: the caller serialises (the volume lock).
 */
#ifndef NEXTFS_IMAGE_H
#define NEXTFS_IMAGE_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/snaptool.h"
#include "nextfs/volume.h"

struct nx_imgsrc;
struct nx_file_rd;

errcode_t nx_imgsrc_open_live(const char *device, struct nx_imgsrc **ret,
			      char *msg, size_t msglen);
/*
 * Snapshot NAME (or with _id: ID) of VOL as a standalone image.  VOL is
 * the live volume (read-only or served); it must stay open while the
 * source is used.  ENOENT: no such snapshot (MSG says so).
 */
errcode_t nx_imgsrc_open_export(struct nx_volume *vol, const char *name,
				struct nx_imgsrc **ret, char *msg,
				size_t msglen);
errcode_t nx_imgsrc_open_export_id(struct nx_volume *vol, uint32_t id,
				   struct nx_imgsrc **ret, char *msg,
				   size_t msglen);
/*
 * FD (taken: closed with the source, also on failure) holds an image of
 * SIZE bytes; its superblock gives the block size and the stamp.  EINVAL
 * with errno 0 if it is no ext2/3/4 image.
 */
errcode_t nx_imgsrc_open_fd(int fd, uint64_t size, struct nx_imgsrc **ret);
/* ... and that descriptor, for the daemon's ioctls (-1: not a file). */
int nx_imgsrc_fd(const struct nx_imgsrc *src);
void nx_imgsrc_close(struct nx_imgsrc *src);

uint64_t nx_imgsrc_size(const struct nx_imgsrc *src);
unsigned nx_imgsrc_block_size(const struct nx_imgsrc *src);
/* The stamp: the id of the snapshot the image is the export of (0: none). */
uint32_t nx_imgsrc_snapshot_id(const struct nx_imgsrc *src);
/* Export: blocks that hold data (what SEEK_DATA reports; st_blocks). */
blk64_t nx_imgsrc_data_blocks(const struct nx_imgsrc *src);

/*
 * Bytes [OFF, OFF + LEN) of the image (past its end: zeros).  _plan is
 * the same under the caller's lock, with the reads of live device blocks
 * planned in RD (file.h: it initialises RD; the caller unlocks with
 * nx_volume_unlock_sharing() and ends with nx_file_read_end() or
 * _drop()); RD NULL reads them now.  Export sources only.
 */
errcode_t nx_imgsrc_read(struct nx_imgsrc *src, void *buf, uint64_t len,
			 uint64_t off);
errcode_t nx_imgsrc_plan(struct nx_imgsrc *src, void *buf, uint64_t len,
			 uint64_t off, struct nx_file_rd *rd);

/*
 * The first run of blocks holding data at or after BLK: [*START, *END)
 * (*START = *END = the block count when there is none).  Free blocks,
 * the journal's log and (for a file) holes hold none.
 */
errcode_t nx_imgsrc_next_data(struct nx_imgsrc *src, blk64_t blk,
			      blk64_t *start, blk64_t *end);
/* lseek(2) SEEK_DATA / SEEK_HOLE on the image: ENXIO past the end. */
errcode_t nx_imgsrc_seek(struct nx_imgsrc *src, uint64_t off, int whence,
			 uint64_t *result);

/*
 * A cheap count of what nx_imgsrc_data_blocks() will say for snapshot
 * ID, without preparing the export (stat of an image file that was
 * never opened): the blocks in use at the take less those of the older
 * snapshot files, /.snapshots and the journal's log.  Files open but
 * unlinked at the take still count.  Volume lock held.
 */
errcode_t nx_imgsrc_estimate(struct nx_volume *vol, uint32_t id,
			     blk64_t *blocks);

/*
 * What turns the export of OLD into the export of NEW (two exports of the
 * same volume, either order), from block START on: up to MAX runs of
 * blocks to write with NEW's content (NX_IMG_WRITE) or to read as zeros
 * (NX_IMG_ZERO: data in OLD, free in NEW), ascending; *NEXT is where to
 * go on (the block count when done).  Where the snapshots' block maps
 * say a block is the same in both (no snapshot from the older to the
 * newer one maps it), it is not read; only the fixed-up metadata is
 * compared.  Volume lock held; ESTALE if either snapshot is gone.
 */
#define NX_IMG_WRITE	1
#define NX_IMG_ZERO	2

struct nx_img_run {
	blk64_t blk;
	blk64_t len;
	int kind;			/* NX_IMG_WRITE or NX_IMG_ZERO */
};

errcode_t nx_imgsrc_changes(struct nx_imgsrc *old, struct nx_imgsrc *new,
			    blk64_t start, struct nx_img_run *runs,
			    size_t max, size_t *n, blk64_t *next);

/* ------------------------------------------------------------------ */
/* Writing images out (imgout.c).                                      */

/*
 * Write the whole image to FD, in one of three ways:
 * NX_WRITE_STREAM: every byte, sequentially (a pipe, stdout);
 * NX_WRITE_FILE: FD is a new, empty regular file: blocks that are free in
 *   the image or all zeros are left as holes, the size is set at the end;
 * NX_WRITE_DEVICE: FD is seekable and its old content does not matter
 *   where the image has free blocks: those are skipped, all others written.
 * *WRITTEN (if not NULL): blocks written.  Errors (ENOSPC, EPIPE, ...)
 * are returned as errno values.
 */
#define NX_WRITE_STREAM	0
#define NX_WRITE_FILE	1
#define NX_WRITE_DEVICE	2
errcode_t nx_imgsrc_write(struct nx_imgsrc *src, int fd, int how,
			  const struct nx_progress *prog, blk64_t *written);

/*
 * export --since: what FD (an earlier export, a file or block device)
 * holds, judged from its primary superblock alone (1 KiB read):
 */
enum nx_out_state {
	NX_OUT_OLD,		/* the export of OLD: update it */
	NX_OUT_NEW,		/* already the export of NEW: nothing to do */
	NX_OUT_HALF,		/* an update from OLD to NEW was interrupted:
				   doing it again completes it */
	NX_OUT_HALF_OTHER,	/* ... from OLD to snapshot *OTHER_ID */
	NX_OUT_OTHER,		/* this volume's export of snapshot *OTHER_ID */
	NX_OUT_CHANGED,		/* OLD's export, changed since (mounted
				   read-write, repaired, ...) */
	NX_OUT_FOREIGN,		/* not an export of this volume */
	NX_OUT_SIZE,		/* a file of another size than the image */
};

errcode_t nx_imgsrc_out_state(struct nx_imgsrc *old, struct nx_imgsrc *new,
			      int fd, enum nx_out_state *state,
			      uint32_t *other_id);

/* Where the changes come from: nx_imgsrc_changes, or a mount's daemon. */
typedef errcode_t (*nx_imgsrc_changes_fn)(void *priv, blk64_t start,
					  struct nx_img_run *runs, size_t max,
					  size_t *n, blk64_t *next);

struct nx_update_result {
	blk64_t written;		/* blocks written */
	blk64_t zeroed;			/* blocks made holes (files) */
};

/*
 * Turn FD, in state NX_OUT_OLD or NX_OUT_HALF (nx_imgsrc_out_state),
 * into the export of NEW, in place, writing only what CHANGES lists.
 * HOW: NX_WRITE_FILE (blocks that become zeros or free are punched out:
 * the file ends byte for byte as a fresh export of NEW) or
 * NX_WRITE_DEVICE (free blocks are left as they are).  Crash safety: the
 * superblock is first marked "being updated from OLD to NEW" (state "not
 * clean, with errors", s_snapshot_id NEW's) and made durable; NEW's
 * superblock is written last, after everything else is durable.
 * Interrupted (a crash, a full disk), FD is in state NX_OUT_HALF, which
 * e2fsck checks and the kernel warns about, and running the same update
 * again completes it: it writes NEW's content only, so what an
 * interrupted run wrote is never wrong.
 */
errcode_t nx_imgsrc_update(struct nx_imgsrc *old, struct nx_imgsrc *new,
			   nx_imgsrc_changes_fn changes, void *priv, int fd,
			   int how, const struct nx_progress *prog,
			   struct nx_update_result *res);

#endif
