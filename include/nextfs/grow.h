/*
 * grow.h - arrays that grow by doubling.
 * Layer: volume/ (header only: every layer may use it).
 *
 * Contract: nx_grow() makes room for element N of the array *V, which has
 * room for *CAP elements of SIZE bytes: nothing happens while N < *CAP;
 * otherwise the array is reallocated to FIRST elements (the first time)
 * or twice *CAP.  On EXT2_ET_NO_MEMORY *V and *CAP are unchanged.
 */
#ifndef NEXTFS_GROW_H
#define NEXTFS_GROW_H

#include <stdlib.h>
#include <ext2fs/ext2fs.h>

static inline errcode_t nx_grow(void **v, size_t *cap, size_t n, size_t size,
				size_t first)
{
	size_t c;
	void *more;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : first;
	more = realloc(*v, c * size);
	if (!more)
		return EXT2_ET_NO_MEMORY;
	*v = more;
	*cap = c;
	return 0;
}

#endif
