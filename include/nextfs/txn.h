/*
 * txn.h - crash-consistent write-back of a live volume.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: between nx_txn_start() and nx_txn_stop() every metadata write
 * of the volume is held in memory (blkio transaction mode) and reaches the
 * device only through nx_txn_commit(), which makes everything done so far
 * durable as one unit:
 *   - with a journal (ext3/ext4): as one JBD2 transaction (journal.h), so
 *     that a crash leaves the state of the last commit - after replay by
 *     the next open, `nextfs check --repair`, e2fsck or the kernel;
 *   - without one (ext2), or when a transaction outgrows the journal: in
 *     an order that makes every snapshot's block map durable before any
 *     block it preserves is overwritten (P10); the live tree then needs
 *     e2fsck after a crash, as ext2 always has.
 * File data is written at once (ordered: durable before the commit that
 * makes it reachable).  Blocks freed since the last commit are not reused
 * before it, so a crash never leaves committed files pointing at blocks
 * that newer data overwrote.
 *
 * Commits happen at nx_volume_sync() (fsync, snapshot take and delete,
 * unmount), and when nx_txn_due() says so (age, size, freed space held
 * back) at the end of an operation (nx_volume_unlock) or from the daemon's
 * commit timer.  Callers hold the volume lock.
 */
#ifndef NEXTFS_TXN_H
#define NEXTFS_TXN_H

#include <ext2fs/ext2fs.h>

struct nx_volume;
struct nx_blkio;

/* Seconds between commits when nothing else forces one (like ext4). */
#define NX_TXN_COMMIT_INTERVAL 5

/*
 * If the volume's journal holds complete transactions (a crash), write
 * them in place.  FS is open read-write on IO; nothing else has been
 * read through it that replay could change.  *REPLAYED = transactions.
 */
errcode_t nx_txn_recover(ext2_filsys fs, struct nx_blkio *io,
			 unsigned *replayed, char *msg, size_t msglen);

/*
 * Before opening DEVICE (locked by the caller): replay its journal if a
 * crash left transactions in it (RW), or refuse with MSG if so (read-only
 * opens cannot replay).
 */
errcode_t nx_txn_replay_device(const char *device, int rw, char *msg,
			       size_t msglen);

/* Enter transaction mode on a freshly opened read-write volume. */
errcode_t nx_txn_start(struct nx_volume *vol, char *msg, size_t msglen);

/* Commit everything held: see above.  A no-op without nx_txn_start. */
errcode_t nx_txn_commit(struct nx_volume *vol);

/* Should the caller commit now? */
int nx_txn_due(struct nx_volume *vol);

/* Is a commit writing the snapshots' maps and metadata just now? */
int nx_txn_committing(struct nx_volume *vol);

/*
 * Blocks freed since the last commit: counted free, but not reused
 * before the commit (see above).
 */
blk64_t nx_txn_held_frees(struct nx_volume *vol);

/*
 * Let those blocks be reused now: for what must not fail for want of
 * space (the snapshots' copies and block maps), which then wins over the
 * old content of files deleted since the last commit, as when space runs
 * short anyway.
 */
void nx_txn_release_frees(struct nx_volume *vol);

/* Final commit, leave transaction mode, mark the journal empty. */
errcode_t nx_txn_stop(struct nx_volume *vol);

/* Leave transaction mode dropping what is held (error paths). */
void nx_txn_abort(struct nx_volume *vol);

#endif
