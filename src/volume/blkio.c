/*
 * blkio.c - the io_manager under libext2fs (see include/nextfs/blkio.h).
 *
 * Plain pread/pwrite on one file descriptor.  All writes funnel through
 * nx_blkio_pwrite(), which calls the write hook first.
 *
 * Batches: between nx_blkio_begin_batch() and nx_blkio_end_batch(),
 * single-block writes are held in memory and written (through the hook)
 * once at the end, so that an operation that rewrites the same extent
 * leaf, indirect block or inode table block for every block it touches
 * writes it once.  Reads see the held blocks; the hook, which needs the
 * old on-disk content, does not.
 *
 * Below both, metadata-sized reads go through a cache of device blocks
 * (bcache.h, read_through_cache()) that write_device() keeps equal to
 * the device: whatever reads the device through here - the hook
 * included - gets what the device holds, only without a pread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/bcache.h"
#include "nextfs/blkio.h"
#include "nextfs/devname.h"
#include "nextfs/faults.h"
#include "nextfs/fdio.h"
#include "nextfs/grow.h"
#include "nextfs/journal.h"

/*
 * Streamed file data written to the device, oldest first: a ring of
 * byte ranges (contiguous writes merged).  The first STARTED have had
 * their write-back started; see nx_blkio_stream_settle().
 */
#define STREAM_RANGES 64

struct byte_range {
	uint64_t off, len;
};

struct stream_ranges {
	pthread_mutex_t lock;
	struct byte_range r[STREAM_RANGES];
	unsigned head, count, started;
	uint64_t started_bytes, unstarted_bytes;
};

struct nx_blkio {
	int fd;
	int rdonly;
	int sealed;			/* nx_blkio_seal(): no write allowed yet */
	nx_blkio_write_hook hook;
	void *hook_priv;
	int in_hook;			/* hook is running: its writes are raw */
	uint64_t hook_copies;		/* raw writes the hook issued */
	int txn;			/* hold every metadata write (txn.c) */
	errcode_t txn_failed;		/* a held write was refused: see below */
	struct nx_blkio_stats stats;
	/* write batching (see top of file) */
	uint32_t unit;			/* block size batches hold; 0 = off */
	int batch_depth;
	struct held_block *held;	/* in write order */
	size_t nheld, cap;		/* slots used (some dropped), allocated */
	size_t nlive;			/* held blocks with data */
	size_t *slots;			/* hash: index + 1, 0 = empty */
	size_t nslots;			/* power of two, >= 2 * cap */
	struct nx_faults *faults;	/* fault plan (tests), or NULL */
	struct nx_faults env_faults;	/* the plan NEXTFS_FAULTS gave */
	/*
	 * Readers outside the volume lock hold this shared; every device
	 * write takes it exclusively (see nx_blkio_share_begin).
	 */
	pthread_rwlock_t share;
	struct stream_ranges stream;	/* streamed file data (see below) */
	int dfd;			/* O_DIRECT descriptor for reads, or -1 */
	int dfd_refused;		/* it refused a read: use fd only */
	uint64_t wgen;			/* bumped by every write (see blkio.h) */
	struct nx_bcache *cache;	/* device blocks (top of file), or NULL */
};

/* Refused writes: a read-only channel, or one still sealed. */
static errcode_t cannot_write(const struct nx_blkio *io)
{
	if (io->rdonly)
		return EROFS;
	return io->sealed ? EXT2_ET_RO_FILSYS : 0;
}

void nx_blkio_seal(struct nx_blkio *io, int sealed)
{
	io->sealed = sealed;
}

/* Statistics are also counted by shared readers, outside the lock. */
#define STAT_ADD(io, field, n) \
	__atomic_fetch_add(&(io)->stats.field, (n), __ATOMIC_RELAXED)

struct held_block {
	uint64_t off;
	char *data;			/* NULL: dropped (overwritten since) */
};

#define BATCH_MAX_BLOCKS 4096

static struct nx_blkio *chan_io(io_channel channel)
{
	return channel->private_data;
}

struct nx_blkio *nx_blkio_from_channel(io_channel channel)
{
	if (!channel || channel->manager != nx_blkio_manager)
		return NULL;
	return chan_io(channel);
}

void nx_blkio_set_hook(struct nx_blkio *io, nx_blkio_write_hook hook,
		       void *priv)
{
	io->hook = hook;
	io->hook_priv = priv;
}

void nx_blkio_get_stats(struct nx_blkio *io, struct nx_blkio_stats *st)
{
	st->bytes_read = __atomic_load_n(&io->stats.bytes_read,
					 __ATOMIC_RELAXED);
	st->bytes_written = __atomic_load_n(&io->stats.bytes_written,
					    __ATOMIC_RELAXED);
	st->read_calls = __atomic_load_n(&io->stats.read_calls,
					 __ATOMIC_RELAXED);
	st->write_calls = __atomic_load_n(&io->stats.write_calls,
					  __ATOMIC_RELAXED);
	st->cache_hits = __atomic_load_n(&io->stats.cache_hits,
					 __ATOMIC_RELAXED);
}

static size_t slot_of(const struct nx_blkio *io, uint64_t off)
{
	return (size_t)(((off / io->unit) * 0x9E3779B97F4A7C15ULL) >> 20) &
	       (io->nslots - 1);
}

/* Index of the held block at OFF, or -1. */
static long find_held(const struct nx_blkio *io, uint64_t off)
{
	size_t i;

	if (!io->nheld)
		return -1;
	for (i = slot_of(io, off); io->slots[i]; i = (i + 1) & (io->nslots - 1))
		if (io->held[io->slots[i] - 1].off == off)
			return (long)io->slots[i] - 1;
	return -1;
}

static void insert_slot(struct nx_blkio *io, size_t idx)
{
	size_t i;

	for (i = slot_of(io, io->held[idx].off); io->slots[i];
	     i = (i + 1) & (io->nslots - 1))
		;
	io->slots[i] = idx + 1;
}

/* Make room for one more held block (transactions grow without bound). */
static errcode_t grow_held(struct nx_blkio *io)
{
	size_t cap = io->cap, i;
	size_t *ns;

	if (io->nheld < io->cap)
		return 0;
	if (nx_grow((void **)&io->held, &cap, io->nheld, sizeof(*io->held),
		    BATCH_MAX_BLOCKS))
		return EXT2_ET_NO_MEMORY;
	ns = calloc(4 * cap, sizeof(*ns));
	if (!ns)
		return EXT2_ET_NO_MEMORY;
	free(io->slots);
	io->slots = ns;
	io->nslots = 4 * cap;
	io->cap = cap;
	for (i = 0; i < io->nheld; i++)
		insert_slot(io, i);
	return 0;
}

static void bump_wgen(struct nx_blkio *io)
{
	__atomic_add_fetch(&io->wgen, 1, __ATOMIC_RELAXED);
}

uint64_t nx_blkio_write_gen(const struct nx_blkio *io)
{
	return __atomic_load_n(&io->wgen, __ATOMIC_RELAXED);
}

static errcode_t hold_block(struct nx_blkio *io, const void *buf, uint64_t off)
{
	long idx = find_held(io, off);
	struct held_block *h;
	errcode_t err;

	bump_wgen(io);
	if (idx >= 0 && io->held[idx].data) {
		memcpy(io->held[idx].data, buf, io->unit);
		return 0;
	}
	if (idx >= 0) {
		h = &io->held[idx];
	} else {
		err = grow_held(io);
		if (err)
			return err;
		h = &io->held[io->nheld++];
		h->off = off;
		h->data = NULL;
		insert_slot(io, io->nheld - 1);
	}
	h->data = malloc(io->unit);
	if (!h->data)
		return EXT2_ET_NO_MEMORY;
	io->nlive++;
	memcpy(h->data, buf, io->unit);
	return 0;
}

/* Overlay held blocks on a range just read from the device. */
static void overlay_held(const struct nx_blkio *io, char *buf, uint64_t len,
			 uint64_t offset)
{
	uint64_t end = offset + len, first, pos;
	size_t i;

	if (!io->nheld || io->in_hook)
		return;
	if (len / io->unit < io->nheld) {
		first = offset - offset % io->unit;
		for (pos = first; pos < end; pos += io->unit) {
			long idx = find_held(io, pos);
			uint64_t from, to;

			if (idx < 0 || !io->held[idx].data)
				continue;
			from = pos > offset ? pos : offset;
			to = pos + io->unit < end ? pos + io->unit : end;
			memcpy(buf + (from - offset),
			       io->held[idx].data + (from - pos), to - from);
		}
		return;
	}
	for (i = 0; i < io->nheld; i++) {
		const struct held_block *h = &io->held[i];
		uint64_t from, to;

		if (!h->data || h->off + io->unit <= offset || h->off >= end)
			continue;
		from = h->off > offset ? h->off : offset;
		to = h->off + io->unit < end ? h->off + io->unit : end;
		memcpy(buf + (from - offset), h->data + (from - h->off),
		       to - from);
	}
}

static errcode_t write_through(struct nx_blkio *io, const void *buf,
			       uint64_t len, uint64_t offset);

/*
 * A write of [offset, offset+len) that is not held: held blocks it fully
 * covers are dropped (their content is superseded).  Partly covered ones
 * are written first so that the order of writes is kept - or, inside a
 * transaction, where held blocks may not reach the device before the
 * commit, take the new bytes into the held copy.
 */
static errcode_t settle_one(struct nx_blkio *io, struct held_block *h,
			    const char *buf, uint64_t len, uint64_t offset)
{
	uint64_t end = offset + len;
	errcode_t err;

	if (!h->data || h->off + io->unit <= offset || h->off >= end)
		return 0;
	if (h->off < offset || h->off + io->unit > end) {
		uint64_t from = h->off > offset ? h->off : offset;
		uint64_t to = h->off + io->unit < end ? h->off + io->unit : end;

		if (io->txn) {
			memcpy(h->data + (from - h->off), buf + (from - offset),
			       to - from);
			return 0;
		}
		err = write_through(io, h->data, io->unit, h->off);
		if (err)
			return err;
	}
	free(h->data);
	h->data = NULL;
	io->nlive--;
	return 0;
}

static errcode_t settle_overlaps(struct nx_blkio *io, const void *buf,
				 uint64_t len, uint64_t offset)
{
	errcode_t err;
	uint64_t pos;
	size_t i;

	if (!io->nheld)
		return 0;
	if (len / io->unit + 2 < io->nheld) {
		for (pos = offset - offset % io->unit; pos < offset + len;
		     pos += io->unit) {
			long idx = find_held(io, pos);

			if (idx < 0)
				continue;
			err = settle_one(io, &io->held[idx], buf, len, offset);
			if (err)
				return err;
		}
		return 0;
	}
	for (i = 0; i < io->nheld; i++) {
		err = settle_one(io, &io->held[i], buf, len, offset);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Does the device already hold DATA (one unit) at OFF?  Map code often
 * rewrites a parent block it did not change; skipping those saves the
 * write (and its snapshot bookkeeping, or journal space) for one read.
 */
static int device_has(struct nx_blkio *io, const void *data, uint64_t off)
{
	char *cur = malloc(io->unit);
	int same = 0;

	if (cur && pread(io->fd, cur, io->unit, (off_t)off) ==
	    (ssize_t)io->unit)
		same = !memcmp(cur, data, io->unit);
	free(cur);
	return same;
}

static errcode_t flush_held(struct nx_blkio *io)
{
	errcode_t err = 0, e;
	size_t i;

	for (i = 0; i < io->nheld; i++) {
		struct held_block *h = &io->held[i];

		if (!h->data)
			continue;
		e = device_has(io, h->data, h->off) ? 0 :
		    write_through(io, h->data, io->unit, h->off);
		if (e && !err)
			err = e;
	}
	nx_blkio_drop_held(io);
	return err;
}

void nx_blkio_set_unit(struct nx_blkio *io, uint32_t unit)
{
	io->unit = unit;
	nx_bcache_free(io->cache);
	io->cache = NULL;
	/* Without memory for a cache reads just go to the device. */
	if (unit && NX_BLKIO_CACHE_BYTES / unit)
		nx_bcache_create(unit, NX_BLKIO_CACHE_BYTES / unit, &io->cache);
}

void nx_blkio_cache_stats(struct nx_blkio *io, struct nx_bcache_stats *st)
{
	if (io->cache)
		nx_bcache_get_stats(io->cache, st);
	else
		memset(st, 0, sizeof(*st));
}

void nx_blkio_begin_batch(struct nx_blkio *io)
{
	io->batch_depth++;
}

errcode_t nx_blkio_end_batch(struct nx_blkio *io)
{
	if (io->batch_depth > 0 && --io->batch_depth > 0)
		return 0;
	/* Inside a transaction everything stays held until the commit. */
	return io->txn ? 0 : flush_held(io);
}

/*
 * Large reads of file data bypass the page cache of the image file: the
 * kernel's FUSE page cache keeps what users read, a second copy here
 * would only cost memory (and page allocations, the dearest part of a
 * cold read on some VMs).  O_DIRECT reads are coherent with our buffered
 * writes (the kernel writes dirty pages of the range back first).  Only
 * where the request is aligned; a device or file system that refuses
 * them (tmpfs, odd sector sizes) gets buffered reads from then on.
 */
static int read_direct(struct nx_blkio *io, char *p, uint64_t len,
		       uint64_t offset)
{
	ssize_t n;

	if (io->dfd < 0 ||
	    __atomic_load_n(&io->dfd_refused, __ATOMIC_RELAXED) ||
	    len < NX_BLKIO_DIRECT_MIN || len % NX_BLKIO_DIRECT_ALIGN ||
	    offset % NX_BLKIO_DIRECT_ALIGN ||
	    (uintptr_t)p % NX_BLKIO_DIRECT_ALIGN)
		return 0;
	do
		n = pread(io->dfd, p, len, (off_t)offset);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EINVAL)
		__atomic_store_n(&io->dfd_refused, 1, __ATOMIC_RELAXED);
	if (n != (ssize_t)len)
		return 0;	/* error or short: the buffered path decides */
	STAT_ADD(io, bytes_read, len);
	return 1;
}

/* Read the device itself (through the fault plan); no held blocks. */
static errcode_t read_device(struct nx_blkio *io, char *p, uint64_t len,
			     uint64_t offset)
{
	size_t got;
	errcode_t err;

	STAT_ADD(io, read_calls, 1);
	if (io->faults) {
		int fate = nx_faults_on_read(io->faults, offset, len);

		if (fate)
			return fate;
	}
	if (read_direct(io, p, len, offset))
		return 0;
	err = nx_read_full(io->fd, p, len, (off_t)offset, &got);
	STAT_ADD(io, bytes_read, (uint64_t)got);
	if (!err && got < len)
		err = EIO;	/* past the end of the device */
	return err;
}

/*
 * A read inside one block that is held whole: the held copy is the
 * block's latest content, no need to ask the device.  (libext2fs reads
 * the same extent leaf or inode table block again and again within an
 * operation, and inside a transaction such blocks stay held.)  Not for
 * the hook, which wants what the device has.
 */
static int read_held_block(struct nx_blkio *io, void *buf, uint64_t len,
			   uint64_t offset)
{
	uint64_t in = io->unit ? offset % io->unit : 0;
	long idx;

	if (!io->nlive || io->in_hook || !io->unit || in + len > io->unit)
		return 0;
	idx = find_held(io, offset - in);
	if (idx < 0 || !io->held[idx].data)
		return 0;
	memcpy(buf, io->held[idx].data + in, len);
	return 1;
}

static int cacheable(const struct nx_blkio *io, uint64_t len, uint64_t offset)
{
	return io->cache && len && len <= NX_BLKIO_CACHE_MAX_READ &&
	       offset % io->unit == 0 && len % io->unit == 0;
}

/*
 * What the device holds at [offset, offset+len): from the block cache
 * where it has every block, else from the device (then cached).  The
 * fault plan judges every read, served from the cache or not, so that
 * an injected read error is seen exactly as without the cache.
 */
static errcode_t read_through_cache(struct nx_blkio *io, char *p, uint64_t len,
				    uint64_t offset)
{
	uint64_t epoch;
	errcode_t err;

	if (!cacheable(io, len, offset))
		return read_device(io, p, len, offset);
	if (io->faults) {
		int fate = nx_faults_on_read(io->faults, offset, len);

		if (fate)
			return fate;
	}
	if (nx_bcache_get(io->cache, offset, len, p)) {
		STAT_ADD(io, cache_hits, 1);
		return 0;
	}
	epoch = nx_bcache_epoch(io->cache);
	err = read_device(io, p, len, offset);
	if (!err)
		nx_bcache_fill(io->cache, offset, len, p, epoch);
	return err;
}

errcode_t nx_blkio_pread(struct nx_blkio *io, void *buf, uint64_t len,
			 uint64_t offset)
{
	errcode_t err;

	if (read_held_block(io, buf, len, offset))
		return 0;
	err = read_through_cache(io, buf, len, offset);
	if (!err)
		overlay_held(io, buf, len, offset);
	return err;
}

void nx_blkio_share_begin(struct nx_blkio *io)
{
	pthread_rwlock_rdlock(&io->share);
}

void nx_blkio_share_end(struct nx_blkio *io)
{
	pthread_rwlock_unlock(&io->share);
}

int nx_blkio_range_held(const struct nx_blkio *io, uint64_t offset,
			uint64_t len)
{
	uint64_t pos;
	size_t i;

	if (!io->nlive || !len)
		return 0;
	if (!io->unit || len / io->unit + 2 >= io->nheld) {
		for (i = 0; i < io->nheld; i++) {
			const struct held_block *h = &io->held[i];

			if (h->data && h->off < offset + len &&
			    offset < h->off + io->unit)
				return 1;
		}
		return 0;
	}
	for (pos = offset - offset % io->unit; pos < offset + len;
	     pos += io->unit) {
		long idx = find_held(io, pos);

		if (idx >= 0 && io->held[idx].data)
			return 1;
	}
	return 0;
}

errcode_t nx_blkio_pread_shared(struct nx_blkio *io, void *buf, uint64_t len,
				uint64_t offset)
{
	if (io->faults)
		nx_faults_slow_shared_read(io->faults);
	return read_device(io, buf, len, offset);
}

/*
 * Large aligned ranges come from the O_DIRECT descriptor, as for
 * read_direct(): spliced from it, the data goes from the device into
 * pages of the pipe and on to the FUSE page cache without ever filling
 * the image's page cache.
 */
int nx_blkio_splice_fd(struct nx_blkio *io, uint64_t off, uint64_t len)
{
	/* Reads the fault plan fails must go through read_device(). */
	if (io->faults && io->faults->read_eio_count)
		return -1;
	if (io->dfd < 0 || len < NX_BLKIO_DIRECT_MIN ||
	    off % NX_BLKIO_DIRECT_ALIGN || len % NX_BLKIO_DIRECT_ALIGN ||
	    __atomic_load_n(&io->dfd_refused, __ATOMIC_RELAXED))
		return io->fd;
	return io->dfd;
}

void nx_blkio_splice_note(struct nx_blkio *io, uint64_t len)
{
	STAT_ADD(io, read_calls, 1);
	STAT_ADD(io, bytes_read, len);
	if (io->faults)
		nx_faults_slow_shared_read(io->faults);
}

void nx_blkio_prefetch(struct nx_blkio *io, uint64_t off, uint64_t len)
{
	if (io && len)
		posix_fadvise(io->fd, (off_t)off, (off_t)len,
			      POSIX_FADV_WILLNEED);
}

static errcode_t pwrite_all(struct nx_blkio *io, const char *p, uint64_t len,
			     uint64_t offset)
{
	size_t done;
	errcode_t err = nx_write_all(io->fd, p, len, (off_t)offset, &done);

	STAT_ADD(io, bytes_written, (uint64_t)done);
	return err;
}

static errcode_t write_device(struct nx_blkio *io, const void *buf,
			      uint64_t len, uint64_t offset)
{
	errcode_t err = cannot_write(io);

	if (err)
		return err;
	bump_wgen(io);
	STAT_ADD(io, write_calls, 1);
	if (io->faults) {
		int fate = nx_faults_on_write(io->faults, offset, len);

		if (fate == NX_FAULT_SKIP)
			return 0;
		if (fate)
			return fate;
	}
	/*
	 * Wait for reads in flight outside the volume lock: the blocks
	 * they resolved may be the ones being overwritten (freed and
	 * reused since), and they must get what was there.
	 */
	pthread_rwlock_wrlock(&io->share);
	err = pwrite_all(io, buf, len, offset);
	/* A failed write may have changed part of the range. */
	if (io->cache && !err)
		nx_bcache_update(io->cache, offset, len, buf);
	else if (io->cache)
		nx_bcache_forget(io->cache, offset, len);
	pthread_rwlock_unlock(&io->share);
	return err;
}

errcode_t nx_blkio_pwrite_raw(struct nx_blkio *io, const void *buf,
			      uint64_t len, uint64_t offset)
{
	errcode_t err = cannot_write(io);

	if (err)
		return err;
	if (io->in_hook)
		io->hook_copies++;
	err = settle_overlaps(io, buf, len, offset);
	return err ? err : write_device(io, buf, len, offset);
}

static errcode_t call_hook(struct nx_blkio *io, const void *buf, uint64_t len,
			   uint64_t offset);

static errcode_t write_through(struct nx_blkio *io, const void *buf,
			       uint64_t len, uint64_t offset)
{
	errcode_t err = call_hook(io, buf, len, offset);

	return err ? err : write_device(io, buf, len, offset);
}

/*
 * The hook may itself write (copies of old blocks); those writes target
 * blocks it has decided about and must not recurse into it.
 */
static errcode_t call_hook(struct nx_blkio *io, const void *buf, uint64_t len,
			   uint64_t offset)
{
	errcode_t err;

	if (!io->hook || io->in_hook)
		return 0;
	io->in_hook = 1;
	err = io->hook(io->hook_priv, offset, len, buf);
	io->in_hook = 0;
	return err;
}

/*
 * Hold one whole block of a transaction.  A block that is not held yet
 * and whose new content is what the device has needs no write at all:
 * libext2fs often rewrites blocks it did not change.
 */
static errcode_t hold_txn_block(struct nx_blkio *io, const void *buf,
				uint64_t off)
{
	long idx = find_held(io, off);

	if ((idx < 0 || !io->held[idx].data) && device_has(io, buf, off))
		return 0;
	return hold_block(io, buf, off);
}

/*
 * Transaction write: the hook runs now (unless HOOKED: the caller ran
 * it), while the device still has the committed content it must
 * preserve; the bytes are held, block by block (partial blocks merged
 * with what is held or on the device).
 */
static errcode_t hold_txn_range(struct nx_blkio *io, const void *buf,
				uint64_t len, uint64_t offset, int hooked)
{
	uint64_t pos = offset - offset % io->unit, end = offset + len;
	char *tmp = NULL;
	errcode_t err = hooked ? 0 : call_hook(io, buf, len, offset);

	/*
	 * The hook could not preserve what this write would change (a copy
	 * failed: I/O error, no space).  The write is refused, but libext2fs
	 * may already have changed other state for it (a block freed into
	 * the snapshot, a bitmap): from here the transaction cannot be
	 * trusted, and txn.c will not commit it.
	 */
	if (err && !io->txn_failed)
		io->txn_failed = err;
	for (; !err && pos < end; pos += io->unit) {
		uint64_t from = pos > offset ? pos : offset;
		uint64_t to = pos + io->unit < end ? pos + io->unit : end;

		if (from == pos && to == pos + io->unit) {
			err = hold_txn_block(io, (const char *)buf +
					     (pos - offset), pos);
			continue;
		}
		if (!tmp && !(tmp = malloc(io->unit)))
			return EXT2_ET_NO_MEMORY;
		err = nx_blkio_pread(io, tmp, io->unit, pos);
		if (err)
			break;
		memcpy(tmp + (from - pos), (const char *)buf + (from - offset),
		       to - from);
		err = hold_txn_block(io, tmp, pos);
	}
	free(tmp);
	return err;
}

/*
 * Remember a data write if it is streamed (NX_BLKIO_STREAM_MIN or more).
 * Writers hold the volume lock; the ring has its own because
 * nx_blkio_stream_settle() runs outside it.
 */
static void stream_note(struct stream_ranges *st, uint64_t off, uint64_t len)
{
	unsigned last;

	if (len < NX_BLKIO_STREAM_MIN)
		return;
	pthread_mutex_lock(&st->lock);
	last = (st->head + st->count - 1) % STREAM_RANGES;
	if (st->count > st->started && st->r[last].off + st->r[last].len == off) {
		st->r[last].len += len;
	} else {
		if (st->count == STREAM_RANGES) {
			/* Forget the oldest: its pages just stay cached. */
			if (st->started) {
				st->started--;
				st->started_bytes -= st->r[st->head].len;
			} else {
				st->unstarted_bytes -= st->r[st->head].len;
			}
			st->head = (st->head + 1) % STREAM_RANGES;
			st->count--;
		}
		last = (st->head + st->count++) % STREAM_RANGES;
		st->r[last].off = off;
		st->r[last].len = len;
	}
	st->unstarted_bytes += len;
	pthread_mutex_unlock(&st->lock);
}

void nx_blkio_stream_settle(struct nx_blkio *io)
{
	struct stream_ranges *st = &io->stream;
	struct byte_range start[STREAM_RANGES], drop[STREAM_RANGES];
	unsigned nstart = 0, ndrop = 0, i;

	pthread_mutex_lock(&st->lock);
	if (st->unstarted_bytes < NX_BLKIO_STREAM_CHUNK) {
		pthread_mutex_unlock(&st->lock);
		return;
	}
	for (i = st->started; i < st->count; i++)
		start[nstart++] = st->r[(st->head + i) % STREAM_RANGES];
	st->started = st->count;
	st->started_bytes += st->unstarted_bytes;
	st->unstarted_bytes = 0;
	while (st->count > 1 && st->started_bytes - st->r[st->head].len >=
	       NX_BLKIO_STREAM_WINDOW) {
		drop[ndrop++] = st->r[st->head];
		st->started_bytes -= st->r[st->head].len;
		st->head = (st->head + 1) % STREAM_RANGES;
		st->count--;
		st->started--;
	}
	pthread_mutex_unlock(&st->lock);
	for (i = 0; i < nstart; i++)
		sync_file_range(io->fd, (off_t)start[i].off,
				(off_t)start[i].len, SYNC_FILE_RANGE_WRITE);
	for (i = 0; i < ndrop; i++)
		posix_fadvise(io->fd, (off_t)drop[i].off, (off_t)drop[i].len,
			      POSIX_FADV_DONTNEED);
}

/*
 * File data goes straight to the device (ordered mode: it is durable
 * before the commit that makes it reachable) - unless the hook had to
 * copy the old content into a snapshot: then the snapshot's mapping is
 * not durable before the commit, so the new bytes wait in the
 * transaction like metadata.
 */
static errcode_t write_txn_data(struct nx_blkio *io, const void *buf,
				uint64_t len, uint64_t offset)
{
	uint64_t copies = io->hook_copies;
	errcode_t err = call_hook(io, buf, len, offset);

	if (err)
		return err;
	/*
	 * A block held by an earlier write of this transaction had its old
	 * content copied then (the hook copies once per block and take):
	 * the copy's mapping is no more durable now, so this write waits
	 * too, or a crash before the commit shows it to the snapshot.
	 */
	if (io->hook_copies != copies || nx_blkio_range_held(io, offset, len))
		return hold_txn_range(io, buf, len, offset, 1);
	err = settle_overlaps(io, buf, len, offset);
	if (!err)
		err = write_device(io, buf, len, offset);
	if (!err)
		stream_note(&io->stream, offset, len);
	return err;
}

errcode_t nx_blkio_pwrite_data(struct nx_blkio *io, const void *buf,
			       uint64_t len, uint64_t offset)
{
	errcode_t err = cannot_write(io);

	if (err)
		return err;
	if (io->txn && !io->in_hook)
		return write_txn_data(io, buf, len, offset);
	err = nx_blkio_pwrite(io, buf, len, offset);
	if (!err && !io->in_hook)
		stream_note(&io->stream, offset, len);
	return err;
}

errcode_t nx_blkio_pwrite(struct nx_blkio *io, const void *buf, uint64_t len,
			  uint64_t offset)
{
	errcode_t err = cannot_write(io);

	if (err)
		return err;
	if (io->txn && io->unit)
		return hold_txn_range(io, buf, len, offset, 0);
	if (io->batch_depth && !io->in_hook && io->unit && len == io->unit &&
	    offset % io->unit == 0) {
		if (io->nheld == BATCH_MAX_BLOCKS && find_held(io, offset) < 0) {
			err = flush_held(io);
			if (err)
				return err;
		}
		return hold_block(io, buf, offset);
	}
	err = settle_overlaps(io, buf, len, offset);
	return err ? err : write_through(io, buf, len, offset);
}

static errcode_t sync_device(struct nx_blkio *io)
{
	if (io->faults) {
		int fate = nx_faults_on_sync(io->faults);

		nx_faults_slow_sync(io->faults);
		if (fate == NX_FAULT_SKIP)
			return 0;
		if (fate)
			return fate;
	}
	if (fdatasync(io->fd) < 0)
		return errno;
	return 0;
}

void nx_blkio_set_faults(struct nx_blkio *io, struct nx_faults *faults)
{
	io->faults = faults;
}

struct nx_faults *nx_blkio_faults(struct nx_blkio *io)
{
	return io->faults;
}

errcode_t nx_blkio_sync(struct nx_blkio *io)
{
	return io->rdonly ? 0 : sync_device(io);
}

void nx_blkio_txn_begin(struct nx_blkio *io)
{
	io->txn = 1;
}

void nx_blkio_txn_end(struct nx_blkio *io)
{
	io->txn = 0;
}

errcode_t nx_blkio_txn_failed(const struct nx_blkio *io)
{
	return io->txn_failed;
}

size_t nx_blkio_held_count(const struct nx_blkio *io)
{
	return io->nlive;
}

static int by_offset(const void *a, const void *b)
{
	const struct nx_jblock *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

errcode_t nx_blkio_held_list(struct nx_blkio *io, struct nx_jblock **ret,
			     size_t *count)
{
	struct nx_jblock *v = malloc((io->nheld ? io->nheld : 1) * sizeof(*v));
	size_t i, n = 0;

	if (!v)
		return EXT2_ET_NO_MEMORY;
	for (i = 0; i < io->nheld; i++)
		if (io->held[i].data) {
			v[n].off = io->held[i].off;
			v[n].data = io->held[i].data;
			n++;
		}
	qsort(v, n, sizeof(*v), by_offset);
	*ret = v;
	*count = n;
	return 0;
}

errcode_t nx_blkio_write_held(struct nx_blkio *io,
			      int (*pick)(void *priv, uint64_t off),
			      void *priv)
{
	errcode_t err = 0;
	size_t i;

	for (i = 0; i < io->nheld && !err; i++) {
		struct held_block *h = &io->held[i];

		if (!h->data || (pick && !pick(priv, h->off)))
			continue;
		err = write_device(io, h->data, io->unit, h->off);
		if (!err) {
			free(h->data);
			h->data = NULL;
			io->nlive--;
		}
	}
	if (!err && !pick)
		nx_blkio_drop_held(io);
	return err;
}

void nx_blkio_drop_held(struct nx_blkio *io)
{
	size_t i;

	bump_wgen(io);
	for (i = 0; i < io->nheld; i++) {
		free(io->held[i].data);
		io->held[i].data = NULL;
	}
	io->nheld = 0;
	io->nlive = 0;
	if (io->slots)
		memset(io->slots, 0, io->nslots * sizeof(*io->slots));
}

errcode_t nx_blkio_flush(struct nx_blkio *io)
{
	errcode_t err;

	if (io->rdonly)
		return 0;
	/* A transaction's blocks reach the device only through its commit. */
	if (io->txn)
		return sync_device(io);
	err = flush_held(io);
	if (err)
		return err;
	return sync_device(io);
}

/* libext2fs passes a negative count to mean a byte count. */
static uint64_t chan_bytes(io_channel channel, int count)
{
	return count < 0 ? (uint64_t)-count
			 : (uint64_t)count * (uint64_t)channel->block_size;
}

/*
 * Does the O_DIRECT descriptor read?  (Some file systems refuse O_DIRECT
 * at the first read rather than at open.)  Asked once at open, because
 * reads spliced from it (nx_blkio_splice_dfd) are made by libfuse, where
 * a refusal could not fall back to the buffered descriptor any more.
 */
static int direct_reads_work(int dfd)
{
	void *p;
	int ok;

	if (posix_memalign(&p, NX_BLKIO_DIRECT_ALIGN, NX_BLKIO_DIRECT_ALIGN))
		return 0;
	ok = pread(dfd, p, NX_BLKIO_DIRECT_ALIGN, 0) ==
	     (ssize_t)NX_BLKIO_DIRECT_ALIGN;
	free(p);
	return ok;
}

static errcode_t blkio_open(const char *name, int flags, io_channel *ret)
{
	io_channel chan = NULL;
	struct nx_blkio *io = NULL;
	int oflags = (flags & IO_FLAG_RW) ? O_RDWR : O_RDONLY;
	struct stat st;
	errcode_t err;

	if (!name)
		return EXT2_ET_BAD_DEVICE_NAME;
	chan = calloc(1, sizeof(*chan));
	io = calloc(1, sizeof(*io));
	if (!chan || !io) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	io->dfd = -1;
	chan->name = strdup(name);
	if (!chan->name) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	if (flags & IO_FLAG_EXCLUSIVE)
		oflags |= O_EXCL;
	io->fd = nx_dev_open(name, oflags);
	if (io->fd < 0) {
		err = errno;
		goto fail;
	}
	io->rdonly = !(flags & IO_FLAG_RW);
	/* No O_EXCL: the first descriptor holds the claim on the device. */
	io->dfd = nx_dev_open(name, O_RDONLY | O_DIRECT);
	if (io->dfd >= 0 && !direct_reads_work(io->dfd)) {
		close(io->dfd);
		io->dfd = -1;
	}
	pthread_rwlock_init(&io->share, NULL);
	pthread_mutex_init(&io->stream.lock, NULL);
	if (getenv("NEXTFS_FAULTS")) {
		err = nx_faults_parse(getenv("NEXTFS_FAULTS"), &io->env_faults,
				      NULL, 0);
		if (err)
			goto fail;
		io->faults = &io->env_faults;
	}
	chan->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	chan->manager = nx_blkio_manager;
	chan->block_size = 1024;
	chan->refcount = 1;
	chan->private_data = io;
	if (fstat(io->fd, &st) == 0 && S_ISBLK(st.st_mode))
		chan->flags |= CHANNEL_FLAGS_BLOCK_DEVICE;
	*ret = chan;
	return 0;
fail:
	if (io && io->fd > 0) {
		close(io->fd);
		if (io->dfd >= 0)
			close(io->dfd);
		pthread_rwlock_destroy(&io->share);
		pthread_mutex_destroy(&io->stream.lock);
	}
	free(io);
	if (chan)
		free(chan->name);
	free(chan);
	return err;
}

static errcode_t blkio_close(io_channel channel)
{
	struct nx_blkio *io = chan_io(channel);

	if (--channel->refcount > 0)
		return 0;
	/* Uncommitted transaction blocks die with us, as in a crash. */
	if (io->txn)
		nx_blkio_drop_held(io);
	else
		flush_held(io);
	free(io->held);
	free(io->slots);
	nx_bcache_free(io->cache);
	close(io->fd);
	if (io->dfd >= 0)
		close(io->dfd);
	pthread_rwlock_destroy(&io->share);
	pthread_mutex_destroy(&io->stream.lock);
	free(io);
	free(channel->name);
	free(channel);
	return 0;
}

static errcode_t blkio_set_blksize(io_channel channel, int blksize)
{
	if (blksize <= 0)
		return EXT2_ET_INVALID_ARGUMENT;
	channel->block_size = blksize;
	return 0;
}

static errcode_t blkio_read_blk64(io_channel channel, unsigned long long block,
				  int count, void *data)
{
	uint64_t len = chan_bytes(channel, count);
	struct nx_blkio *io = chan_io(channel);
	errcode_t err;

	err = nx_blkio_pread(io, data, len,
			     block * (uint64_t)channel->block_size);
	if (err && channel->read_error)
		err = channel->read_error(channel, block, count, data, len, 0,
					  err);
	return err;
}

static errcode_t blkio_write_blk64(io_channel channel, unsigned long long block,
				   int count, const void *data)
{
	uint64_t len = chan_bytes(channel, count);
	struct nx_blkio *io = chan_io(channel);
	errcode_t err;

	err = nx_blkio_pwrite(io, data, len,
			      block * (uint64_t)channel->block_size);
	if (err && channel->write_error)
		err = channel->write_error(channel, block, count, data, len, 0,
					   err);
	return err;
}

static errcode_t blkio_read_blk(io_channel channel, unsigned long block,
				int count, void *data)
{
	return blkio_read_blk64(channel, block, count, data);
}

static errcode_t blkio_write_blk(io_channel channel, unsigned long block,
				 int count, const void *data)
{
	return blkio_write_blk64(channel, block, count, data);
}

static errcode_t blkio_write_byte(io_channel channel, unsigned long offset,
				  int size, const void *data)
{
	if (size < 0)
		return EXT2_ET_INVALID_ARGUMENT;
	return nx_blkio_pwrite(chan_io(channel), data, (uint64_t)size, offset);
}

static errcode_t blkio_flush(io_channel channel)
{
	return nx_blkio_flush(chan_io(channel));
}

static errcode_t blkio_set_option(io_channel channel, const char *option,
				  const char *arg)
{
	return EXT2_ET_INVALID_ARGUMENT;
}

/*
 * No stats for libext2fs: ext2fs_close() would otherwise bump
 * s_kbytes_written and flush once more after the snapshot layer has been
 * detached.  nx_volume_close() maintains s_kbytes_written itself.
 */
static errcode_t blkio_get_stats(io_channel channel, io_stats *stats)
{
	if (stats)
		*stats = NULL;
	return 0;
}

static errcode_t blkio_zeroout(io_channel channel, unsigned long long block,
			       unsigned long long count)
{
	uint64_t bs = (uint64_t)channel->block_size;
	uint64_t chunk = 256, done = 0;
	errcode_t err = 0;
	void *zero = calloc(chunk, bs);

	if (!zero)
		return EXT2_ET_NO_MEMORY;
	while (done < count && !err) {
		uint64_t n = count - done < chunk ? count - done : chunk;

		/* Zeroed blocks are fresh allocations: data, not logged. */
		err = nx_blkio_pwrite_data(chan_io(channel), zero, n * bs,
					   (block + done) * bs);
		done += n;
	}
	free(zero);
	return err;
}

static struct struct_io_manager blkio_manager_struct = {
	.magic = EXT2_ET_MAGIC_IO_MANAGER,
	.name = "nextfs block I/O",
	.open = blkio_open,
	.close = blkio_close,
	.set_blksize = blkio_set_blksize,
	.read_blk = blkio_read_blk,
	.write_blk = blkio_write_blk,
	.flush = blkio_flush,
	.write_byte = blkio_write_byte,
	.set_option = blkio_set_option,
	.get_stats = blkio_get_stats,
	.read_blk64 = blkio_read_blk64,
	.write_blk64 = blkio_write_blk64,
	.zeroout = blkio_zeroout,
};

io_manager nx_blkio_manager = &blkio_manager_struct;
