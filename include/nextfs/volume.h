/*
 * volume.h - one open ext2/3/4 volume (image file or block device).
 *
 * Contract: nx_volume_open() opens the volume through libext2fs on top of
 * the nextfs block I/O layer (blkio.h), refuses volumes it cannot safely
 * serve (not ext2/3/4, unknown features, journal needing recovery, and
 * for writing any damage the kernel's mount-time checks find: sanity.h,
 * or damaged snapshot metadata: snapshot.h; already held by another
 * process: holder.h) with an errcode and a one-line message, before it
 * writes anything: every check comes first, with the device sealed
 * against writes (blkio.h), and only then what writes (only a crash's
 * journal is replayed before the checks that need its result).  It
 * locks the volume (exclusive for writers, who also claim a block device
 * with O_EXCL), and for read-write opens marks the filesystem not-clean
 * on disk and frees the orphans a crash left.  nx_volume_close() writes
 * back all dirty metadata, marks the volume clean again and releases it.
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

struct nx_volume {
	ext2_filsys fs;			/* libext2fs handle, owned */
	char *device;			/* path as given by the user, owned */
	int flags;			/* NX_VOL_* */
	int lock_fd;			/* fd holding the volume lock, or -1 */
	int claim_fd;			/* O_EXCL claim of a block device, or -1 */
	int was_clean;			/* EXT2_VALID_FS was set when we opened */
	pthread_mutex_t lock;		/* the big lock around all fs access */
	struct nx_blkio *io;		/* our block I/O layer state (not owned) */
	struct nx_snapstore *snap;	/* snapshot store, or NULL (snapshot.h) */
	struct nx_volume *parent;	/* a snapshot view's live volume, or NULL */
	struct nx_meta *meta;		/* changed-group tracking (meta.h), or NULL */
	struct nx_txn *txn;		/* transaction state (txn.h), or NULL */
	struct nx_orphans *orphans;	/* orphan list index (orphan.h) */
	struct nx_xcache *xcache;	/* extent lookups (file.c), or NULL */
	/*
	 * Set by the snapshot layer for the layers below it (snapshot.h,
	 * reserve.h): a snapshot receives copy-on-write, and the free
	 * blocks live allocations must leave it now (nx_snap_reserved()).
	 */
	int cow_active;
	blk64_t cow_reserve;
	blk64_t no_run_len;		/* falloc.c: no free run this long */
	blk64_t no_run_free;		/* ...seen with this many blocks free */
};

/*
 * Open DEVICE.  On failure returns non-zero, sets *RET to NULL and, if MSG
 * is non-NULL, puts a one-line human readable reason (without trailing
 * newline) into MSG.
 */
errcode_t nx_volume_open(const char *device, int flags,
			 struct nx_volume **ret, char *msg, size_t msglen);

/* Write all dirty metadata (superblock, descriptors, bitmaps) and fsync. */
errcode_t nx_volume_sync(struct nx_volume *vol);

/* Sync, mark clean (read-write opens), unlock and free.  VOL may be NULL. */
errcode_t nx_volume_close(struct nx_volume *vol);

/*
 * Read LEN bytes at byte OFFSET of the device as this volume sees it: the
 * live device, or for a snapshot view the blocks as they were at the take.
 * The file data path reads through this so that it serves views as well.
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
