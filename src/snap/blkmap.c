/*
 * blkmap.c - a small open-addressing hash map from block numbers to block
 * numbers (the active snapshot's mappings that are decided but not yet
 * written into its inode).
 */
#include <stdlib.h>
#include <string.h>
#include "snap_internal.h"

static size_t slot_of(const struct nx_blkmap *m, blk64_t key)
{
	uint64_t h = (key + 1) * 0x9E3779B97F4A7C15ULL;

	return (size_t)(h >> 17) & (m->cap - 1);
}

int nx_blkmap_get(const struct nx_blkmap *m, blk64_t key, blk64_t *val)
{
	size_t i;

	if (!m->count)
		return 0;
	for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key + 1) {
			if (val)
				*val = m->vals[i];
			return 1;
		}
	}
	return 0;
}

static errcode_t grow(struct nx_blkmap *m)
{
	struct nx_blkmap bigger = { 0 };
	size_t i;

	bigger.cap = m->cap ? m->cap * 2 : 1024;
	bigger.keys = calloc(bigger.cap, sizeof(blk64_t));
	bigger.vals = calloc(bigger.cap, sizeof(blk64_t));
	if (!bigger.keys || !bigger.vals) {
		free(bigger.keys);
		free(bigger.vals);
		return EXT2_ET_NO_MEMORY;
	}
	for (i = 0; i < m->cap; i++)
		if (m->keys[i])
			nx_blkmap_put(&bigger, m->keys[i] - 1, m->vals[i]);
	free(m->keys);
	free(m->vals);
	*m = bigger;
	return 0;
}

errcode_t nx_blkmap_put(struct nx_blkmap *m, blk64_t key, blk64_t val)
{
	errcode_t err;
	size_t i;

	if ((m->count + 1) * 2 > m->cap) {
		err = grow(m);
		if (err)
			return err;
	}
	for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == key + 1)
			break;
	if (!m->keys[i])
		m->count++;
	m->keys[i] = key + 1;
	m->vals[i] = val;
	return 0;
}

void nx_blkmap_clear(struct nx_blkmap *m)
{
	if (m->cap) {
		memset(m->keys, 0, m->cap * sizeof(blk64_t));
		memset(m->vals, 0, m->cap * sizeof(blk64_t));
	}
	m->count = 0;
}

void nx_blkmap_free(struct nx_blkmap *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}
