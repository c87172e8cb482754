/*
 * faults.h - fault injection under the block I/O layer (tests only).
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: a struct nx_faults plan, attached to a volume's nx_blkio with
 * nx_blkio_set_faults() or taken from the NEXTFS_FAULTS environment
 * variable when the device is opened, decides the fate of every device
 * read, write and sync:
 *   - "cut": after the first CUT_AFTER device writes have been done,
 *     every later write is dropped (reported done, nothing written: a
 *     crash, from the device's point of view), or fails with EIO or
 *     ENOSPC;
 *   - "read_eio": reads touching device blocks [first, first+count) (in
 *     units of UNIT bytes) fail with EIO;
 *   - "slow_read": reads done outside the volume lock (blkio.h), also
 *     those spliced (nx_blkio_splice_note), first sleep USEC
 *     microseconds, which widens the races they must survive;
 *   - "slow_sync": every device sync first sleeps USEC microseconds (a
 *     slow disk: unmount takes a while to write everything back);
 * Without a plan (the default) nothing is changed.  The decision
 * functions are called by blkio.c only; they count, they do no I/O.
 *
 * Spec syntax (NEXTFS_FAULTS and nx_faults_parse):
 *   cut=N[:drop|:eio|:enospc]   (default drop)
 *   read_eio=FIRST[+COUNT]      (COUNT default 1; block units of unit=)
 *   slow_read=USEC
 *   slow_sync=USEC
 *   unit=BYTES                  (default 4096)
 * joined with ',' e.g. "cut=120:drop" or "read_eio=300+4,unit=1024".
 */
#ifndef NEXTFS_FAULTS_H
#define NEXTFS_FAULTS_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

enum nx_fault_cut_mode {
	NX_FAULT_DROP = 0,	/* pretend success, write nothing */
	NX_FAULT_EIO,
	NX_FAULT_ENOSPC,
};

struct nx_faults {
	uint64_t cut_after;	/* 0 = never cut */
	int cut_mode;		/* enum nx_fault_cut_mode */
	uint64_t read_eio_first, read_eio_count;	/* in UNIT blocks */
	uint32_t unit;
	uint64_t slow_read_us;	/* sleep before each shared read */
	uint64_t slow_sync_us;	/* sleep before each device sync */
	/* state */
	uint64_t writes_done;	/* device writes let through so far */
	uint64_t writes_cut;	/* device writes dropped or failed */
};

/* Fate of an operation: 0 = do it, NX_FAULT_SKIP = report success only. */
#define NX_FAULT_SKIP (-1)

/* Parse SPEC into F (zeroed first).  EINVAL with MSG set on bad syntax. */
errcode_t nx_faults_parse(const char *spec, struct nx_faults *f,
			  char *msg, size_t msglen);

/* Decide a device write / read / fsync.  Return 0, NX_FAULT_SKIP or errno. */
int nx_faults_on_write(struct nx_faults *f, uint64_t off, uint64_t len);
int nx_faults_on_read(struct nx_faults *f, uint64_t off, uint64_t len);
int nx_faults_on_sync(struct nx_faults *f);
/* Sleep as "slow_read" says (called outside the volume lock). */
void nx_faults_slow_shared_read(const struct nx_faults *f);
/* Sleep as "slow_sync" says (before a device sync). */
void nx_faults_slow_sync(const struct nx_faults *f);

/* Has the cut happened (a write was dropped or failed)? */
static inline int nx_faults_cut(const struct nx_faults *f)
{
	return f && f->writes_cut > 0;
}

#endif
