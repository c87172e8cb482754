/*
 * grow.h - arrays that grow by doubling.
 * Layer: volume/ (header only: every layer may use it).
 *
 * Contract: nx_grow() makes room for element N of the array *V, which has
 * room for *CAP elements of SIZE bytes: nothing happens while N < *CAP;
 * otherwise the array is reallocated to FIRST elements (the first time)
 * or twice *CAP.  nx_grow_by() makes room for MORE elements after the
 * first N at once (a buffer holding N bytes that takes MORE): *CAP, or
 * FIRST, doubled as often as it takes.  On EXT2_ET_NO_MEMORY (also when
 * the size would not fit in a size_t) *V and *CAP are unchanged.
 */
#ifndef NEXTFS_GROW_H
#define NEXTFS_GROW_H

#include <stdint.h>
#include <stdlib.h>
#include <ext2fs/ext2fs.h>

static inline errcode_t nx_grow_by(void **v, size_t *cap, size_t n,
				   size_t more, size_t size, size_t first)
{
	size_t c = *cap ? *cap : first ? first : 1;
	void *p;

	if (more > SIZE_MAX - n)
		return EXT2_ET_NO_MEMORY;
	if (n + more <= *cap)
		return 0;
	while (c < n + more) {
		if (c > SIZE_MAX / 2)
			return EXT2_ET_NO_MEMORY;
		c *= 2;
	}
	if (c > SIZE_MAX / size)
		return EXT2_ET_NO_MEMORY;
	p = realloc(*v, c * size);
	if (!p)
		return EXT2_ET_NO_MEMORY;
	*v = p;
	*cap = c;
	return 0;
}

static inline errcode_t nx_grow(void **v, size_t *cap, size_t n, size_t size,
				size_t first)
{
	return nx_grow_by(v, cap, n, 1, size, first);
}

#endif
