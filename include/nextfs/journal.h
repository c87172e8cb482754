/*
 * journal.h - the volume's ext3/ext4 journal, in the kernel's JBD2 format.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: nx_journal_load() finds the internal journal (s_journal_inum)
 * of an open volume and maps its blocks.  nx_journal_log() writes one
 * transaction - the final content of a set of metadata blocks - as a
 * descriptor/data/commit sequence and makes it durable; only then does
 * the caller write those blocks in place.  A crash at any point leaves
 * either the old state or, after replay, the new one: never a mixture.
 *
 * nx_journal_recover() replays the complete transactions a crash left in
 * the log (ours or the kernel's: descriptor tags, escapes, revoke
 * records, v2/v3 checksums) and marks the log empty; e2fsck and the
 * kernel can replay the same log, because it is plain JBD2.
 *
 * Ordering (why each sync is there) is explained in journal.c.
 */
#ifndef NEXTFS_JOURNAL_H
#define NEXTFS_JOURNAL_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

struct nx_blkio;
struct nx_journal;

/* One metadata block of a transaction: device byte offset and content. */
struct nx_jblock {
	uint64_t off;
	const void *data;
};

/*
 * Load the journal of FS (read through IO).  *RET is NULL when the volume
 * has no journal.  Refuses (with MSG) journals we cannot write: external
 * devices, v1 superblocks, unknown incompatible features, aborted ones.
 */
errcode_t nx_journal_load(ext2_filsys fs, struct nx_blkio *io,
			  struct nx_journal **ret, char *msg, size_t msglen);
void nx_journal_free(struct nx_journal *j);

/* Enable the journal features the kernel would use on FS (empty log). */
errcode_t nx_journal_prepare(struct nx_journal *j, ext2_filsys fs);

/* Blocks a transaction of N metadata blocks occupies in the log. */
uint64_t nx_journal_cost(const struct nx_journal *j, size_t n);
/* Log blocks available to one transaction. */
uint64_t nx_journal_capacity(const struct nx_journal *j);

/*
 * Make V[0..N) (whole blocks) one durable transaction in the log: after
 * this returns 0 a crash replays it.  Data the caller wrote before is
 * durable before the commit record (ordered mode), and so is what the
 * previous transaction wrote in place.  The caller then writes the blocks
 * in place (no sync needed) and calls nx_journal_checkpointed().
 */
errcode_t nx_journal_log(struct nx_journal *j, const struct nx_jblock *v,
			 size_t n);

/* The last logged transaction was written in place (maybe not durable). */
errcode_t nx_journal_checkpointed(struct nx_journal *j);

/* Sync what is in place, then write the journal as empty and sync. */
errcode_t nx_journal_close(struct nx_journal *j);

/*
 * Does the log hold transactions to replay?  (s_start != 0.)
 */
int nx_journal_needs_recovery(const struct nx_journal *j);

/* Replay the log into place and mark it empty.  *REPLAYED: transactions. */
errcode_t nx_journal_recover(struct nx_journal *j, unsigned *replayed);

/*
 * Make JSB (the journal superblock's block, as read) that of an empty
 * log, the same whatever the log held: s_start 0, s_sequence 1, no error,
 * checksum updated.  For images of a snapshot (image.h), whose journal
 * blocks are the live volume's.  EXT2_ET_CORRUPT_JOURNAL_SB if JSB is
 * not a JBD2 superblock (then unchanged).
 */
errcode_t nx_journal_sb_empty(void *jsb);

#endif
