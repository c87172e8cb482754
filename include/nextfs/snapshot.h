/*
 * snapshot.h - Next3-style snapshots on ext2/3/4 (see docs/design.md
 * and docs/snapshots.md).
 * Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - Opening a volume (nx_open_volume, open.h) loads its snapshot list
 *   (the chain s_snapshot_list -> i_next_snapshot ...), the blocks each
 *   snapshot maps, and the copy-on-write state of the active (newest)
 *   snapshot, and hooks the layers below so that from then on every
 *   change of a block the active snapshot still needs preserves the old
 *   content first: metadata is copied (blkio.h's write hook), freed
 *   blocks are moved into the snapshot (libext2fs's allocator
 *   callbacks), and overwritten file data is moved (the overwrite policy,
 *   overwrite.h).  Flushing, the order of a commit without a journal and
 *   reading views reach this layer through volume.h's hooks.
 * - nx_snap_take/delete/list are the user operations; take flushes all
 *   dirty state and is O(1) in the volume size beyond that flush.
 * - nx_snap_view_open() returns a read-only struct nx_volume that shows the
 *   volume exactly as it was when the snapshot was taken; all fs-layer
 *   read functions work on it.
 * The caller holds the live volume's lock for every call, also while
 * using a view.
 */
#ifndef NEXTFS_SNAPSHOT_H
#define NEXTFS_SNAPSHOT_H

#include <time.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"
#include "nextfs/dir.h"

#define NX_SNAPDIR_NAME ".snapshots"
/* Snapshot ids run from 1 to this; take refuses more (EOVERFLOW). */
#define NX_SNAP_ID_MAX	0xfffffffeU

struct nx_snapinfo {
	char name[NX_NAME_MAX + 1];
	ext2_ino_t ino;			/* the snapshot file's inode */
	uint32_t id;			/* monotonic, never reused */
	struct timespec taken;		/* take time */
	blk64_t blocks;			/* fs blocks the snapshot file holds */
	int active;			/* receives copy-on-write */
};

/* Validate a snapshot name: 0, EINVAL, ENAMETOOLONG. */
errcode_t nx_snap_name_check(const char *name);

errcode_t nx_snap_take(struct nx_volume *vol, const char *name,
		       struct nx_snapinfo *info);
/*
 * Delete snapshot NAME: bounded work whatever it holds.  When it returns
 * (committed) the snapshot is in no listing and its name is free; what
 * it holds is handed over to the next older snapshot, or freed, later,
 * in slices (handover.c, docs/snapshots.md "Delete"): nx_snap_reclaim()
 * does one slice of at most about BUDGET_MS milliseconds and says in
 * *MORE whether work is left; nx_snap_reclaim_all() does all of it.
 * Work left at close is taken up again by the next read-write open.
 * nx_snap_pending(): deleted snapshots not yet done, and the blocks they
 * still hold.
 */
errcode_t nx_snap_delete(struct nx_volume *vol, const char *name);
errcode_t nx_snap_reclaim(struct nx_volume *vol, unsigned budget_ms,
			  int *more);
errcode_t nx_snap_reclaim_all(struct nx_volume *vol);
void nx_snap_pending(struct nx_volume *vol, int *snaps, blk64_t *blocks);

/* Snapshots oldest first; free *LIST with free(). */
errcode_t nx_snap_list(struct nx_volume *vol, struct nx_snapinfo **list,
		       int *count);
errcode_t nx_snap_find(struct nx_volume *vol, const char *name,
		       struct nx_snapinfo *info);
int nx_snap_count(struct nx_volume *vol);

/*
 * A snapshot's UUID (ident.c; docs/replication.md): the version-5
 * (SHA-1, RFC 4122) UUID in the namespace of the volume's UUID of the
 * name "nextfs-snapshot:ID:SEC.NSEC" - the snapshot id and its take time
 * in decimal, nanoseconds as 9 digits.  Stable (the same on every open,
 * from any reader, mounted or not: nothing is stored), never reused (ids
 * are never reused on a volume, and two copies of one image that take a
 * snapshot under the same id at different times get different UUIDs),
 * and different on every volume.  Changing the volume's UUID (tune2fs
 * -U) changes those of its snapshots.  This is the only place that
 * derives it; streams name a snapshot by its identity (below), which is
 * this UUID unless the snapshot was received.
 */
void nx_snap_uuid(const unsigned char vol_uuid[16], uint32_t id,
		  const struct timespec *taken, unsigned char out[16]);
/* ... of snapshot INFO of VOL (its live volume or any of its views). */
void nx_snap_uuid_of(struct nx_volume *vol, const struct nx_snapinfo *info,
		     unsigned char out[16]);

/*
 * The identity a snapshot has for replication: the sender's UUID and
 * ctransid if "nextfs receive" took it, else its own UUID (above) with
 * its id as ctransid - as btrfs sends and matches a received subvolume
 * by its received_uuid.  What the sender puts into a stream's SUBVOL or
 * SNAPSHOT command, and what the receiver matches a stream's parent by.
 *
 * The receiver's record (nx_snap_received_record) is a private xattr
 * (xattr.h) "system.nextfs.received" on the root inode, written just
 * before the take so that the snapshot's own root holds it: the id the
 * snapshot gets, the UUID and the ctransid.  It stays in the live tree,
 * which then compares unchanged to the snapshot; a later snapshot has
 * another id, so it does not inherit the identity.  VOL is the live
 * volume (the snapshot's root is read through its view).
 */
#define NX_SNAP_RECEIVED_XATTR	"system.nextfs.received"
#define NX_SNAP_RECEIVED_LEN	32
errcode_t nx_snap_identity(struct nx_volume *vol,
			   const struct nx_snapinfo *info,
			   unsigned char uuid[16], uint64_t *ctransid);
void nx_snap_received_record(uint32_t id, const unsigned char uuid[16],
			     uint64_t ctransid,
			     unsigned char rec[NX_SNAP_RECEIVED_LEN]);

/*
 * Browsing without I/O (a listing of .snapshots costs what a directory of
 * that size costs): the IDX-th snapshot, oldest first, with blocks = 0;
 * the index of snapshot NAME (-1 if none); the index of the first
 * snapshot whose id is >= ID (nx_snap_count() if none).  Ids grow from
 * older to newer snapshots, so an id is a stable position in the list.
 */
errcode_t nx_snap_peek(struct nx_volume *vol, int idx,
		       struct nx_snapinfo *info);
int nx_snap_name_index(struct nx_volume *vol, const char *name);
int nx_snap_seek_id(struct nx_volume *vol, uint32_t id);

/* Inode of the real /.snapshots directory (hidden from the live view), or 0. */
ext2_ino_t nx_snap_dir_ino(struct nx_volume *vol);

/*
 * The blocks live allocations of every writer (root too) leave free for
 * the snapshots: on a volume served to writers (nx_snap_keep_headroom,
 * called by the daemon) a small headroom at all times, so that a
 * snapshot can be taken and committed when its writers filled the
 * volume, plus, while a snapshot is active, its COW reserve
 * (s_snapshot_r_blocks_count) less what it has drawn from it - copies
 * of superblock, descriptors, bitmaps and inode tables, and its block
 * map (cow.c).  Copies of anything else are charged to the writer who
 * causes them (the overwrite policy's NX_PRESERVE_COPY, overwrite.h, and
 * reserve.h).  Published as vol->cow_reserve for the layers below
 * (volume.h; nx_reserve_check_cow in reserve.h).
 */
void nx_snap_keep_headroom(struct nx_volume *vol);

errcode_t nx_snap_view_open(struct nx_volume *vol, ext2_ino_t snap_ino,
			    struct nx_volume **view);
void nx_snap_view_close(struct nx_volume *view);
/* Device bytes as the view sees them (its pread hook: nx_volume_pread). */
errcode_t nx_snap_view_pread(struct nx_volume *view, void *buf, uint64_t len,
			     uint64_t offset);

/*
 * The snapshot with id ID: its info, and a view of it that the store
 * keeps open (owned by the store: closed when the snapshot is deleted or
 * the volume closed; do not close it yourself).
 */
errcode_t nx_snap_find_id(struct nx_volume *vol, uint32_t id,
			  struct nx_snapinfo *info);
errcode_t nx_snap_view_get(struct nx_volume *vol, uint32_t id,
			   struct nx_volume **view);
/*
 * About to open the views of many snapshots (a listing of /.snapshots
 * that stats each one): have the device read, as one batch, what opening
 * them and reading their root directories will read one by one.  A hint:
 * nothing changes, errors are ignored.  Each snapshot is hinted once.
 * Live volume locked.
 */
void nx_snap_prefetch_views(struct nx_volume *vol);

#endif
