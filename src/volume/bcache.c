/*
 * bcache.c - a bounded cache of device blocks (see include/nextfs/bcache.h).
 *
 * Why: libext2fs reads metadata one block at a time and reads the same
 * blocks again and again - the inode-table block of each of its 16 (or
 * 32) inodes, a directory's index root and leaf at every lookup, the
 * same extent leaf for every request on a file.  Each of those was a
 * pread of a whole block from the page cache of the image (an 11 KB
 * read per entry listed by find), or from the disk after a cold start.
 *
 * Entries live in one array; a hash of chains (indices) finds them; a
 * clock hand passes over the array when it is full and evicts the first
 * block whose "used" bit it finds clear (and clears the bits it passes).
 * Block data is one allocation of MAX_BLOCKS * UNIT bytes, whose pages
 * the kernel provides only as blocks are first stored in them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/bcache.h"

#define NO_ENTRY (-1)

struct bc_entry {
	uint64_t off;
	int32_t next;			/* hash chain, or free list */
	uint8_t live;
	uint8_t used;			/* read since the hand last passed */
};

struct nx_bcache {
	pthread_mutex_t lock;
	uint32_t unit;
	size_t max;			/* entries allowed */
	size_t top;			/* entries ever handed out */
	size_t live;			/* entries holding a block */
	size_t hand;			/* clock hand */
	int32_t free_list;		/* forgotten entries, by next */
	struct bc_entry *e;
	int32_t *bucket;
	size_t nbuckets;		/* power of two */
	char *data;			/* entry i's block at i * unit */
	uint64_t epoch;			/* bumped by update, forget, clear */
	struct nx_bcache_stats st;
};

errcode_t nx_bcache_create(uint32_t unit, size_t max_blocks,
			   struct nx_bcache **ret)
{
	struct nx_bcache *c;
	size_t i;

	*ret = NULL;
	if (!unit || !max_blocks || max_blocks > INT32_MAX / 2 ||
	    max_blocks > SIZE_MAX / unit)
		return EXT2_ET_INVALID_ARGUMENT;
	c = calloc(1, sizeof(*c));
	if (!c)
		return EXT2_ET_NO_MEMORY;
	c->unit = unit;
	c->max = max_blocks;
	for (c->nbuckets = 16; c->nbuckets < max_blocks; c->nbuckets <<= 1)
		;
	c->e = calloc(max_blocks, sizeof(*c->e));
	c->bucket = malloc(c->nbuckets * sizeof(*c->bucket));
	c->data = malloc(max_blocks * (size_t)unit);
	if (!c->e || !c->bucket || !c->data) {
		nx_bcache_free(c);
		return EXT2_ET_NO_MEMORY;
	}
	for (i = 0; i < c->nbuckets; i++)
		c->bucket[i] = NO_ENTRY;
	c->free_list = NO_ENTRY;
	pthread_mutex_init(&c->lock, NULL);
	*ret = c;
	return 0;
}

void nx_bcache_free(struct nx_bcache *c)
{
	if (!c)
		return;
	if (c->e && c->bucket && c->data)
		pthread_mutex_destroy(&c->lock);
	free(c->e);
	free(c->bucket);
	free(c->data);
	free(c);
}

uint32_t nx_bcache_unit(const struct nx_bcache *c)
{
	return c->unit;
}

static size_t bucket_of(const struct nx_bcache *c, uint64_t off)
{
	return (size_t)(((off / c->unit) * 0x9E3779B97F4A7C15ULL) >> 24) &
	       (c->nbuckets - 1);
}

static char *block_data(const struct nx_bcache *c, int32_t i)
{
	return c->data + (size_t)i * c->unit;
}

static int32_t find(const struct nx_bcache *c, uint64_t off)
{
	int32_t i;

	for (i = c->bucket[bucket_of(c, off)]; i != NO_ENTRY; i = c->e[i].next)
		if (c->e[i].off == off)
			return i;
	return NO_ENTRY;
}

static void unlink_entry(struct nx_bcache *c, int32_t victim)
{
	int32_t *p = &c->bucket[bucket_of(c, c->e[victim].off)];

	while (*p != victim)
		p = &c->e[*p].next;
	*p = c->e[victim].next;
	c->e[victim].live = 0;
	c->live--;
}

static void drop_entry(struct nx_bcache *c, int32_t i)
{
	unlink_entry(c, i);
	c->e[i].next = c->free_list;
	c->free_list = i;
}

/* A free entry: a forgotten one, a new one, or the clock's victim. */
static int32_t take_entry(struct nx_bcache *c)
{
	int32_t i;

	if (c->free_list != NO_ENTRY) {
		i = c->free_list;
		c->free_list = c->e[i].next;
		return i;
	}
	if (c->top < c->max)
		return (int32_t)c->top++;
	/* Full and nothing free: every entry is live, the sweep ends. */
	for (;;) {
		struct bc_entry *e = &c->e[c->hand];

		i = (int32_t)c->hand;
		c->hand = (c->hand + 1) % c->max;
		if (!e->used)
			break;
		e->used = 0;
	}
	unlink_entry(c, i);
	c->st.evictions++;
	return i;
}

static void insert(struct nx_bcache *c, uint64_t off, const char *src)
{
	int32_t i = find(c, off);
	size_t b;

	if (i == NO_ENTRY) {
		i = take_entry(c);
		b = bucket_of(c, off);
		c->e[i].off = off;
		c->e[i].next = c->bucket[b];
		c->e[i].live = 1;
		c->bucket[b] = i;
		c->live++;
		c->st.fills++;
	}
	c->e[i].used = 1;
	memcpy(block_data(c, i), src, c->unit);
}

int nx_bcache_get(struct nx_bcache *c, uint64_t off, uint64_t len, void *buf)
{
	uint64_t pos;
	int hit = 1;

	pthread_mutex_lock(&c->lock);
	for (pos = 0; pos < len; pos += c->unit) {
		int32_t i = find(c, off + pos);

		if (i == NO_ENTRY) {
			hit = 0;
			break;
		}
		c->e[i].used = 1;
		memcpy((char *)buf + pos, block_data(c, i), c->unit);
	}
	if (hit)
		c->st.hits += len / c->unit;
	else
		c->st.misses += len / c->unit;
	pthread_mutex_unlock(&c->lock);
	return hit;
}

uint64_t nx_bcache_epoch(struct nx_bcache *c)
{
	uint64_t e;

	pthread_mutex_lock(&c->lock);
	e = c->epoch;
	pthread_mutex_unlock(&c->lock);
	return e;
}

void nx_bcache_fill(struct nx_bcache *c, uint64_t off, uint64_t len,
		    const void *data, uint64_t epoch)
{
	uint64_t pos;

	pthread_mutex_lock(&c->lock);
	if (c->epoch == epoch)
		for (pos = 0; pos < len; pos += c->unit)
			insert(c, off + pos, (const char *)data + pos);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Call FN for every cached block overlapping [OFF, OFF+LEN): by probing
 * each block of the range, or by walking the entries when there are
 * fewer of them than blocks in the range.
 */
static void for_each_in_range(struct nx_bcache *c, uint64_t off, uint64_t len,
			      void (*fn)(struct nx_bcache *c, int32_t i,
					 uint64_t off, uint64_t len,
					 const void *data),
			      const void *data)
{
	uint64_t first = off - off % c->unit, end = off + len, pos;
	size_t i;

	if (!len || !c->live)
		return;
	if ((end - first) / c->unit <= c->live) {
		for (pos = first; pos < end; pos += c->unit) {
			int32_t k = find(c, pos);

			if (k != NO_ENTRY)
				fn(c, k, off, len, data);
		}
		return;
	}
	for (i = 0; i < c->top; i++)
		if (c->e[i].live && c->e[i].off + c->unit > off &&
		    c->e[i].off < end)
			fn(c, (int32_t)i, off, len, data);
}

static void patch_block(struct nx_bcache *c, int32_t i, uint64_t off,
			uint64_t len, const void *data)
{
	uint64_t b = c->e[i].off, end = off + len;
	uint64_t from = b > off ? b : off;
	uint64_t to = b + c->unit < end ? b + c->unit : end;

	memcpy(block_data(c, i) + (from - b),
	       (const char *)data + (from - off), to - from);
}

static void forget_block(struct nx_bcache *c, int32_t i, uint64_t off,
			 uint64_t len, const void *data)
{
	(void)off;
	(void)len;
	(void)data;
	drop_entry(c, i);
}

void nx_bcache_update(struct nx_bcache *c, uint64_t off, uint64_t len,
		      const void *data)
{
	pthread_mutex_lock(&c->lock);
	c->epoch++;
	for_each_in_range(c, off, len, patch_block, data);
	pthread_mutex_unlock(&c->lock);
}

void nx_bcache_forget(struct nx_bcache *c, uint64_t off, uint64_t len)
{
	pthread_mutex_lock(&c->lock);
	c->epoch++;
	for_each_in_range(c, off, len, forget_block, NULL);
	pthread_mutex_unlock(&c->lock);
}

void nx_bcache_clear(struct nx_bcache *c)
{
	size_t i;

	pthread_mutex_lock(&c->lock);
	c->epoch++;
	for (i = 0; i < c->nbuckets; i++)
		c->bucket[i] = NO_ENTRY;
	for (i = 0; i < c->top; i++)
		c->e[i].live = 0;
	c->top = 0;
	c->live = 0;
	c->hand = 0;
	c->free_list = NO_ENTRY;
	pthread_mutex_unlock(&c->lock);
}

void nx_bcache_get_stats(struct nx_bcache *c, struct nx_bcache_stats *st)
{
	pthread_mutex_lock(&c->lock);
	*st = c->st;
	st->blocks = c->live;
	pthread_mutex_unlock(&c->lock);
}
