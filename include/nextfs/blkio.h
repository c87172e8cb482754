/*
 * blkio.h - the nextfs block I/O layer under libext2fs.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: nx_blkio_manager is a libext2fs io_manager that reads and
 * writes the volume with pread/pwrite (no hidden write-back cache, so
 * every layer that reads the device sees the same bytes).  Every write,
 * whatever its block size or offset, first calls the write hook installed
 * with nx_blkio_set_hook() for the byte range it is about to overwrite;
 * if the hook fails, nothing is written and the error is returned.  This
 * is where the snapshot layer preserves old block contents (copy-on-write).
 *
 * Metadata-sized reads under the volume lock (nx_blkio_pread, every
 * io_channel read) are served from a bounded cache of device blocks
 * (bcache.h) once the block size is known (nx_blkio_set_unit): it holds
 * what the device holds, is updated by every write that reaches the
 * device and emptied of what a failed or dropped write may have changed,
 * and sits below held blocks and the write hook, so it never hides a
 * write, a held block or a copy-on-write.
 *
 * It also counts bytes read from the device and written (for
 * write-amplification tests and benchmarks; reads served by the cache
 * count only as cache_hits) and offers direct range I/O used by the
 * file data path to issue large contiguous requests.  Reads of 128 KiB or more whose
 * offset, length and buffer are 4 KiB aligned bypass the page cache
 * (O_DIRECT; coherent with the buffered writes) where the device allows
 * it: the kernel's FUSE page cache is the one that keeps file data.
 */
#ifndef NEXTFS_BLKIO_H
#define NEXTFS_BLKIO_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

extern io_manager nx_blkio_manager;

/*
 * Called before bytes [offset, offset+len) of the device are overwritten
 * with DATA.  Writes issued from inside the hook do not call it again.
 */
typedef errcode_t (*nx_blkio_write_hook)(void *priv, uint64_t offset,
					 uint64_t len, const void *data);

struct nx_blkio_stats {
	uint64_t bytes_read;
	uint64_t bytes_written;
	uint64_t read_calls;
	uint64_t write_calls;
	uint64_t cache_hits;		/* reads served by the block cache */
};

struct nx_blkio;

/* The nx_blkio behind a channel opened by nx_blkio_manager (else NULL). */
struct nx_blkio *nx_blkio_from_channel(io_channel channel);

void nx_blkio_set_hook(struct nx_blkio *io, nx_blkio_write_hook hook,
		       void *priv);

/*
 * A number that changes whenever anything is written or held, or held
 * blocks are dropped: what was read before is still what the device
 * (as reads see it) has, as long as it is unchanged.  For caches of
 * parsed metadata.
 */
uint64_t nx_blkio_write_gen(const struct nx_blkio *io);
void nx_blkio_get_stats(struct nx_blkio *io, struct nx_blkio_stats *st);

/*
 * Byte-addressed I/O on the device.  Writes go through the write hook like
 * every other write.  Short transfers are retried; EOF on read is EIO.
 */
errcode_t nx_blkio_pread(struct nx_blkio *io, void *buf, uint64_t len,
			 uint64_t offset);
errcode_t nx_blkio_pwrite(struct nx_blkio *io, const void *buf, uint64_t len,
			  uint64_t offset);

/*
 * Reads outside the volume lock (the live file data path).  With the
 * volume lock still held, the reader resolves its blocks, checks that no
 * held block overlaps them (nx_blkio_range_held, else it must read with
 * nx_blkio_pread under the lock), takes a share and unlocks; then reads
 * with nx_blkio_pread_shared and ends the share.  Every device write
 * waits until no share is held, so a shared read returns what the device
 * held when the share was taken, even if its blocks are freed and reused
 * meanwhile.  A thread holding a share must not write (it would wait for
 * itself).
 */
int nx_blkio_range_held(const struct nx_blkio *io, uint64_t offset,
			uint64_t len);
void nx_blkio_share_begin(struct nx_blkio *io);
void nx_blkio_share_end(struct nx_blkio *io);
errcode_t nx_blkio_pread_shared(struct nx_blkio *io, void *buf, uint64_t len,
				uint64_t offset);

/*
 * Zero-copy reads (a shared reader that hands file data on to another
 * descriptor with splice(2), e.g. a FUSE reply): the descriptor to
 * splice LEN bytes at OFF from (the O_DIRECT one where the range is
 * large and aligned, as for reads; else the buffered one), or -1 where
 * every read must go through nx_blkio_pread_shared (a fault plan fails
 * reads).  The share protects such a read until the data has left the
 * source: end it only after the splice into the destination has
 * completed.  Call nx_blkio_splice_note() just before splicing LEN
 * bytes: it counts them and applies the fault plan's slow_read.
 */
int nx_blkio_splice_fd(struct nx_blkio *io, uint64_t off, uint64_t len);
void nx_blkio_splice_note(struct nx_blkio *io, uint64_t len);

/*
 * Ask the kernel to start reading device bytes [off, off+len) into its
 * page cache (POSIX_FADV_WILLNEED) and return at once: for callers about
 * to read many scattered blocks one by one, so that the device sees them
 * as one batch instead of a queue of single waits.  A hint only: errors
 * are ignored, and nothing is counted as read.
 */
void nx_blkio_prefetch(struct nx_blkio *io, uint64_t off, uint64_t len);

/*
 * Reads of at least NX_BLKIO_DIRECT_MIN bytes whose offset, length and
 * buffer are multiples of NX_BLKIO_DIRECT_ALIGN bypass the page cache
 * (see the top of this file); callers that read file data in large
 * pieces allocate their buffers aligned.
 */
#define NX_BLKIO_DIRECT_MIN	(128U << 10)
#define NX_BLKIO_DIRECT_ALIGN	4096U

/*
 * File data: like nx_blkio_pwrite, but inside a transaction it goes to the
 * device at once instead of being held (see nx_blkio_txn_begin).
 */
errcode_t nx_blkio_pwrite_data(struct nx_blkio *io, const void *buf,
			       uint64_t len, uint64_t offset);

/*
 * Write-back and drop-behind of streamed file data.  nx_blkio_pwrite_data
 * remembers writes of at least NX_BLKIO_STREAM_MIN bytes.  Called outside
 * the volume lock (after replying to the writer), nx_blkio_stream_settle
 * starts write-back of what was remembered once NX_BLKIO_STREAM_CHUNK
 * bytes have gathered, and drops from the page cache of the image file
 * (or block device) the ranges started more than NX_BLKIO_STREAM_WINDOW
 * bytes ago.  Why: the kernel's FUSE page cache already keeps the file's
 * data for its users (keep_cache), so a second cached copy in the image's
 * page cache only costs memory, and writes that reuse recently freed
 * pages are much cheaper than writes into pages never touched, which is
 * what new blocks (allocation, and every overwrite under a snapshot)
 * would otherwise get.  Only hints: durability and ordering are still
 * decided by the commits' fdatasyncs; dirty pages are never dropped.
 */
#define NX_BLKIO_STREAM_MIN	(128U << 10)
#define NX_BLKIO_STREAM_CHUNK	(8U << 20)
#define NX_BLKIO_STREAM_WINDOW	(32U << 20)
void nx_blkio_stream_settle(struct nx_blkio *io);

/*
 * A sealed channel refuses every write (EXT2_ET_RO_FILSYS) while reads go
 * on: the opener seals it while it checks whether the volume may be
 * written at all (volume.h), so that nothing can reach the device before
 * every check has passed.
 */
void nx_blkio_seal(struct nx_blkio *io, int sealed);

/* Write bypassing the hook: only for the snapshot layer's own copies. */
errcode_t nx_blkio_pwrite_raw(struct nx_blkio *io, const void *buf,
			      uint64_t len, uint64_t offset);

/*
 * Batches (nestable): single-block writes of UNIT bytes between begin and
 * end are held in memory and written, through the hook, once at the end
 * (or at nx_blkio_flush).  Reads see them.  Use only where no snapshot
 * view is read meanwhile: views must see the device as the hook left it.
 */
void nx_blkio_set_unit(struct nx_blkio *io, uint32_t unit);

/*
 * The block cache: at most NX_BLKIO_CACHE_BYTES of blocks, filled by
 * reads of whole blocks up to NX_BLKIO_CACHE_MAX_READ bytes long (what
 * libext2fs reads: inode-table, directory, map and bitmap blocks; large
 * file data reads pass by).  nx_blkio_cache_stats() is for tests and
 * benchmarks (zeroes without a cache).
 */
#define NX_BLKIO_CACHE_BYTES	(32U << 20)
#define NX_BLKIO_CACHE_MAX_READ	(64U << 10)
struct nx_bcache_stats;
void nx_blkio_cache_stats(struct nx_blkio *io, struct nx_bcache_stats *st);
void nx_blkio_begin_batch(struct nx_blkio *io);
errcode_t nx_blkio_end_batch(struct nx_blkio *io);

/*
 * Fault injection for tests (faults.h): every device read, write and sync
 * is first put to the plan.  NULL removes it.  A plan given in the
 * NEXTFS_FAULTS environment variable is attached when the device opens.
 */
struct nx_faults;
void nx_blkio_set_faults(struct nx_blkio *io, struct nx_faults *faults);
struct nx_faults *nx_blkio_faults(struct nx_blkio *io);

/*
 * Write held blocks and fsync the device.  Inside a transaction held
 * blocks stay held: only the commit (txn.c) writes them.
 */
errcode_t nx_blkio_flush(struct nx_blkio *io);

/* fdatasync the device (through the fault plan). */
errcode_t nx_blkio_sync(struct nx_blkio *io);

/*
 * Transactions (txn.c).  Between nx_blkio_txn_begin and _end every
 * metadata write (nx_blkio_pwrite, all io_channel writes) is held in
 * memory after the write hook has run for it, whatever its size; reads
 * see held blocks.  Nothing held reaches the device until the owner
 * lists the blocks (sorted by offset; pointers valid until written or
 * dropped), logs them and writes them with nx_blkio_write_held (raw, no
 * hook; PICK selects a subset, NULL = all and forget the table).
 * Closing the channel drops what is still held, as a crash would.
 */
struct nx_jblock;
void nx_blkio_txn_begin(struct nx_blkio *io);
void nx_blkio_txn_end(struct nx_blkio *io);
size_t nx_blkio_held_count(const struct nx_blkio *io);
/* The first error that refused a held write (the transaction is unsafe). */
errcode_t nx_blkio_txn_failed(const struct nx_blkio *io);
errcode_t nx_blkio_held_list(struct nx_blkio *io, struct nx_jblock **v,
			     size_t *n);
errcode_t nx_blkio_write_held(struct nx_blkio *io,
			      int (*pick)(void *priv, uint64_t off),
			      void *priv);
void nx_blkio_drop_held(struct nx_blkio *io);

#endif
