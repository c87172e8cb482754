/*
 * bcache.h - a bounded cache of device blocks, below the write hook.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: the cache keeps copies of whole blocks of UNIT bytes (keyed
 * by byte offset, a multiple of UNIT) exactly as the device has them.  It
 * is filled only by reads of the device and must hear of every write
 * that reaches the device (nx_bcache_update) or may have reached it
 * (nx_bcache_forget), so that a hit always returns what a read of the
 * device would return.  blkio.c is its only user: it consults the cache
 * below held blocks, batches and the write hook, so a cached block can
 * never hide a write, a copy-on-write or a held block.
 *
 * At most MAX_BLOCKS blocks are kept (memory is taken as blocks are
 * added); when full, a clock sweep evicts a block not used since the
 * sweep last passed it.  Safe to call from several threads (one mutex);
 * a fill races with a write correctly: nx_bcache_fill() drops what it
 * was given if any write or forget ran since its caller's
 * nx_bcache_epoch(), since the bytes read may predate that write.
 */
#ifndef NEXTFS_BCACHE_H
#define NEXTFS_BCACHE_H

#include <stdint.h>
#include <stddef.h>
#include <ext2fs/ext2fs.h>

struct nx_bcache;

struct nx_bcache_stats {
	uint64_t hits;			/* blocks served from the cache */
	uint64_t misses;		/* blocks asked for and not there */
	uint64_t fills;			/* blocks added */
	uint64_t evictions;		/* blocks dropped to make room */
	uint64_t blocks;		/* blocks held now */
};

errcode_t nx_bcache_create(uint32_t unit, size_t max_blocks,
			   struct nx_bcache **ret);
void nx_bcache_free(struct nx_bcache *c);
uint32_t nx_bcache_unit(const struct nx_bcache *c);

/*
 * Copy the LEN bytes at OFF (whole blocks: OFF and LEN multiples of the
 * unit) into BUF if every one of those blocks is cached: 1; else 0 and
 * BUF is undefined.
 */
int nx_bcache_get(struct nx_bcache *c, uint64_t off, uint64_t len, void *buf);

/* Taken before reading the device for nx_bcache_fill(). */
uint64_t nx_bcache_epoch(struct nx_bcache *c);

/*
 * Add the LEN bytes at OFF (whole blocks) just read from the device, if
 * no write or forget ran since EPOCH (then nothing is added).
 */
void nx_bcache_fill(struct nx_bcache *c, uint64_t off, uint64_t len,
		    const void *data, uint64_t epoch);

/*
 * The device now holds DATA at [OFF, OFF+LEN) (any offset and length):
 * cached blocks in the range take the new bytes.  Blocks not cached are
 * not added (a write is no sign the block will be read).
 */
void nx_bcache_update(struct nx_bcache *c, uint64_t off, uint64_t len,
		      const void *data);

/* The device may hold anything at [OFF, OFF+LEN): drop those blocks. */
void nx_bcache_forget(struct nx_bcache *c, uint64_t off, uint64_t len);

/* Drop everything. */
void nx_bcache_clear(struct nx_bcache *c);

void nx_bcache_get_stats(struct nx_bcache *c, struct nx_bcache_stats *st);

#endif
