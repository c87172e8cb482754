/*
 * volume.h - one open ext2/3/4 volume (image file or block device).
 * Layer: volume/ (the bottom: it calls nothing above it).
 *
 * Contract: a volume is opened in steps (below), through libext2fs on top
 * of the nextfs block I/O layer (blkio.h).  Volumes it cannot safely serve
 * are refused (not ext2/3/4, unknown features, journal needing recovery,
 * and for writing any damage the kernel's mount-time checks find:
 * sanity.h, or damage the layers above find, such as damaged snapshot
 * metadata: snapshot.h; already held by another process: holder.h) with
 * an errcode and a one-line message, before anything is written: every
 * check comes first, with the device sealed against writes (blkio.h),
 * and only then what writes (only a crash's journal is replayed before
 * the checks that need its result).  It locks the volume (exclusive for
 * writers, who also claim a block device with O_EXCL), and for
 * read-write opens marks the filesystem not-clean on disk.
 * nx_volume_close() writes back all dirty metadata, marks the volume
 * clean again and releases it.
 *
 * Opening a volume with what the layers above add - its snapshots and
 * their copy-on-write, the orphans a crash left - is one layer up:
 * nx_open_volume() (open.h) is the open every program uses.  volume/
 * calls those layers only through the hooks they register here (struct
 * nx_volume_hooks), as blkio.h's write hook does for every metadata write.
 *
 * libext2fs is not thread-safe: every caller that touches vol->fs holds
 * vol->lock (nx_volume_lock/unlock).  The fs-layer functions (inode.h,
 * dir.h, file.h, xattr.h) expect the lock to be held by their caller.
 */
#ifndef NEXTFS_VOLUME_H
#define NEXTFS_VOLUME_H

#include <pthread.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/holder.h"

#define NX_VOL_RDONLY	0x0001	/* open read-only; nothing is written */
#define NX_VOL_ABANDONED 0x0002	/* set by nx_volume_abandon() */
/*
 * With NX_VOL_RDONLY: refuse what a writer would refuse (a tool that
 * looks before it writes offline), instead of reading past damage.
 */
#define NX_VOL_STRICT	0x0004
/*
 * With NX_VOL_RDONLY: when the snapshots' metadata is damaged, go on with
 * the live volume alone (a read-only mount serving what it can), instead
 * of refusing (what tools that read snapshots want).
 */
#define NX_VOL_SALVAGE	0x0008

struct nx_blkio;
struct nx_xcache;
struct nx_damage;
struct nx_volume;
struct nx_overwrite_ops;

/*
 * What the layers above volume/ add to a volume, called by volume/ at
 * fixed points: the only way volume/ calls up.  The snapshot layer
 * registers them with nx_volume_set_hooks() (open.c for a live volume,
 * snapview.c for a view).  A hook left NULL does what its comment says.
 * All are called with the volume lock held.
 */
struct nx_volume_hooks {
	/*
	 * Write all dirty metadata (superblock, descriptors, bitmaps, and
	 * what the layers above keep pending, to a fixed point) through
	 * blkio: from nx_volume_sync() without a transaction, and from
	 * every commit (txn.h) before it writes what is held.  Work the
	 * layers above spread over several commits records its progress
	 * here, so that each commit is a consistent state.  NULL:
	 * nx_meta_write() (meta.h).
	 */
	errcode_t (*flush)(struct nx_volume *vol);
	/*
	 * When a commit without a journal writes block BLK (txn.h's ordered
	 * write): NX_VOL_RANK_MAP first (with the blocks allocated since the
	 * last commit), then NX_VOL_RANK_ACTIVE (alone, synced), then
	 * NX_VOL_RANK_INODE, then all the rest (0).
	 * NULL: 0 for every block.
	 */
	int (*block_rank)(struct nx_volume *vol, blk64_t blk);
	/*
	 * nx_volume_pread() of a volume without a device of its own
	 * (vol->io NULL: a snapshot view).  NULL: EIO.
	 */
	errcode_t (*pread)(struct nx_volume *vol, void *buf, uint64_t len,
			   uint64_t offset);
	/*
	 * At close, and when an open fails after the hooks were set: after
	 * the last sync, before the libext2fs handle is closed, let go of
	 * what the layers above keep in VOL.  NULL: nothing to let go of.
	 */
	void (*detach)(struct nx_volume *vol);
};
#define NX_VOL_RANK_MAP		1
#define NX_VOL_RANK_INODE	2
#define NX_VOL_RANK_ACTIVE	3

struct nx_volume {
	ext2_filsys fs;			/* libext2fs handle, owned */
	char *device;			/* path as given by the user, owned */
	int flags;			/* NX_VOL_* */
	int lock_fd;			/* fd holding the volume lock, or -1 */
	int claim_fd;			/* O_EXCL claim of a block device, or -1 */
	int was_clean;			/* EXT2_VALID_FS was set when we opened */
	pthread_mutex_t lock;		/* the big lock around all fs access */
	struct nx_blkio *io;		/* our block I/O layer state (not owned) */
	struct nx_volume *parent;	/* a snapshot view's live volume, or NULL */
	struct nx_meta *meta;		/* changed-group tracking (meta.h), or NULL */
	struct nx_txn *txn;		/* transaction state (txn.h), or NULL */
	int probed_snapshot;		/* HAS_SNAPSHOT before any replay: the advice */
	const struct nx_volume_hooks *hooks;	/* the layers above, or NULL */
	/*
	 * What the layers above keep per volume; volume/ never looks inside
	 * (close frees xcache, one flat allocation).  fs/: the orphan list
	 * index (orphan.h), extent lookups (file.c), the overwrite policy
	 * (overwrite.h, NULL: none).  snap/: the snapshot store (snapshot.h),
	 * or NULL.
	 */
	struct nx_orphans *orphans;
	struct nx_xcache *xcache;
	const struct nx_overwrite_ops *overwrite;
	struct nx_snapstore *snap;
	/*
	 * Set by the snapshot layer for the layers below it (snapshot.h,
	 * reserve.h): a snapshot receives copy-on-write, and the free
	 * blocks live allocations must leave it now.
	 */
	int cow_active;
	blk64_t cow_reserve;
	blk64_t no_run_len;		/* falloc.c: no free run this long */
	blk64_t no_run_free;		/* ...seen with this many blocks free */
};

/*
 * The steps of an open, in this order (nx_open_volume() in open.h takes
 * them; nothing else should).  Each returns 0 or an errcode with, if MSG
 * is non-NULL, a one-line human readable reason (without trailing
 * newline) in MSG.
 *
 * 1. nx_volume_open_sealed(): lock (and for writers claim) DEVICE and
 *    make every check of volume/, reading only: what is on the device,
 *    the feature policy, superblock and descriptors, then (after a
 *    crash's journal is replayed) bitmaps, root and orphan list
 *    (sanity.h).  The device stays sealed against writes.  DMG (zeroed
 *    by the caller) collects the damage found; on a failure the volume
 *    is released and *RET is NULL.
 * 2. The layers above register their hooks (nx_volume_set_hooks) and
 *    make their own checks, still sealed, noting damage in DMG;
 *    nx_volume_refuse() turns what they found into the refusal.
 * 3. For writers, nx_volume_start_writing(): unseal, enter transaction
 *    mode (txn.h), mark the volume in use (the first write).
 * Once step 1 has returned a volume, an open that fails ends with
 * nx_volume_discard(), which writes nothing more and frees it.
 */
errcode_t nx_volume_open_sealed(const char *device, int flags,
				struct nx_damage *dmg, struct nx_volume **ret,
				char *msg, size_t msglen);
void nx_volume_set_hooks(struct nx_volume *vol,
			 const struct nx_volume_hooks *hooks);
errcode_t nx_volume_refuse(struct nx_volume *vol, const struct nx_damage *dmg,
			   char *msg, size_t msglen);
errcode_t nx_volume_start_writing(struct nx_volume *vol, char *msg,
				  size_t msglen);
void nx_volume_discard(struct nx_volume *vol);

/* Write all dirty metadata (superblock, descriptors, bitmaps) and fsync. */
errcode_t nx_volume_sync(struct nx_volume *vol);

/*
 * The flush hook (see struct nx_volume_hooks), or its default: what
 * nx_volume_sync() and every commit write before anything else.
 */
errcode_t nx_volume_flush(struct nx_volume *vol);

/* Sync, mark clean (read-write opens), unlock and free.  VOL may be NULL. */
errcode_t nx_volume_close(struct nx_volume *vol);

/*
 * Read LEN bytes at byte OFFSET of the device as this volume sees it: the
 * live device, or for a snapshot view the blocks as they were at the take
 * (the pread hook).  The file data path reads through this so that it
 * serves views as well.
 */
errcode_t nx_volume_pread(struct nx_volume *vol, void *buf, uint64_t len,
			  uint64_t offset);

/* statfs(2) for the volume. */
errcode_t nx_volume_statfs(struct nx_volume *vol, struct statvfs *st);

static inline int nx_volume_rdonly(const struct nx_volume *vol)
{
	return (vol->flags & NX_VOL_RDONLY) != 0;
}

/* Does this open read past damage that only writing must not meet? */
static inline int nx_volume_lenient(const struct nx_volume *vol)
{
	return nx_volume_rdonly(vol) && !(vol->flags & NX_VOL_STRICT);
}

/*
 * The live volume an ext2_filsys belongs to.  libext2fs's allocation
 * callbacks get only the fs; open sets fs->priv_data to the volume so
 * that the snapshot, meta and transaction layers find theirs (vol->snap,
 * vol->meta, vol->txn) without registries of their own.  (Snapshot views
 * and the offline tools' own handles use priv_data for themselves.)
 */
static inline struct nx_volume *nx_volume_of(ext2_filsys fs)
{
	return fs->priv_data;
}

/* A view reads through its live volume: both share the live lock. */
static inline void nx_volume_lock(struct nx_volume *vol)
{
	pthread_mutex_lock(&(vol->parent ? vol->parent : vol)->lock);
}

/* ... and the end of an operation commits when it is time (txn.h). */
void nx_volume_unlock(struct nx_volume *vol);

/*
 * The same for a reader that goes on reading file data outside the lock
 * (blkio.h): after any due commit, and before the lock is released, take
 * a share of the live device; end it with nx_blkio_share_end() on the
 * live volume's io (a snapshot view shares its live volume's).
 */
void nx_volume_unlock_sharing(struct nx_volume *vol);

/*
 * A writer holds a block device with O_EXCL (holder.h).  Before mounting
 * it as fuseblk, where the kernel takes that claim itself, release ours;
 * if the mount fails, take it back before anything more is written:
 * when that fails too, the volume is abandoned (below) and EBUSY returned.
 */
void nx_volume_release_claim(struct nx_volume *vol);
errcode_t nx_volume_reclaim(struct nx_volume *vol, char *msg, size_t msglen);

/*
 * Write nothing more: closing frees VOL and keeps what is on the device,
 * the last commit (with a journal, marked for recovery).
 */
void nx_volume_abandon(struct nx_volume *vol);

/* printf into MSG (if non-NULL): the one-line reasons the tools print. */
void nx_set_msg(char *msg, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Map a libext2fs/com_err error code or errno value to a positive errno
 * suitable for returning to the kernel.  0 maps to 0.
 */
int nx_errno(errcode_t err);

#endif
