/*
 * fuzz_image.c - libFuzzer harness: mutated images opened the way a
 * mount opens them (nx_open_volume read-only) and browsed, live tree and
 * every snapshot; or, with the flags byte's FZ_FLAG_RW, opened read-write
 * (journal replay, orphans, copy-on-write), browsed, written to a little,
 * closed, and opened again (nxb_rw_session).  See README.md.
 *
 * Inputs are patch programs over base images (imgpatch.h).  The custom
 * mutator below mostly leaves the bytes to libFuzzer's own mutations
 * (which also learn constants from comparisons in our code), and for the
 * rest adds or rewrites whole records aimed at a chosen kind of metadata,
 * so that rare region kinds (a snapshot's extent block, an xattr block)
 * get as much attention as the many inode table blocks.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fzrun.h"

#ifndef NX_FUZZ_BASES
#define NX_FUZZ_BASES "fuzz/bases"
#endif

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static struct fz_state state;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if (fz_state_init(&state, NX_FUZZ_BASES))
		exit(1);
	if (!getenv("NEXTFS_FUZZ_QUIET"))
		fz_state_describe(&state, stderr);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nxb_stats st;

	if (fz_run(&state, data, size, &st) < 0) {
		fprintf(stderr, "nextfs-fuzz: contract violation: %s\n",
			st.violation);
		abort();
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* structure-aware mutations                                          */
/* ------------------------------------------------------------------ */

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Byte offsets of the records of DATA (at most FZ_MAX_RECORDS). */
static int find_records(const uint8_t *data, size_t size, size_t *at)
{
	size_t pos = FZ_HEADER;
	int n = 0;

	while (pos + FZ_RECORD_HDR <= size && n < FZ_MAX_RECORDS) {
		const uint8_t *r = data + pos;
		size_t dlen = (r[0] & 3) == 3 ? 1 : (r[5] % 32) + 1;

		at[n++] = pos;
		pos += FZ_RECORD_HDR + dlen;
	}
	return n;
}

/* A region index of a kind picked uniformly among the kinds B has. */
static unsigned pick_region(const struct fz_base *b, uint32_t *seed)
{
	int kinds[FZ_NTYPES], nk = 0, t, want;
	size_t i, k;

	for (t = 0; t < FZ_NTYPES; t++)
		if (b->count[t])
			kinds[nk++] = t;
	want = kinds[rnd(seed) % nk];
	k = rnd(seed) % b->count[want];
	for (i = 0; i < b->nreg; i++)
		if (b->reg[i].type == want && !k--)
			return i;
	return 0;
}

/* Offsets near the start of a block hold headers: favour them. */
static unsigned pick_offset(const struct fz_base *b, const struct fz_region *r,
			    uint32_t *seed)
{
	unsigned isz = EXT2_INODE_SIZE(b->vol->fs->super);

	switch (rnd(seed) % 4) {
	case 0:
		return rnd(seed) % 64;
	case 1:
		/* A field of one inode (inode tables) or one entry. */
		if (r->type == FZ_ITABLE || r->type == FZ_ORPHAN)
			return (rnd(seed) % (b->bs / isz)) * isz +
			       (rnd(seed) % 40) * 4;
		return (rnd(seed) % (b->bs / 4)) * 4;
	case 2:
		if (r->type == FZ_SB)
			return SUPERBLOCK_OFFSET % b->bs +
			       (rnd(seed) % 256) * 4;
		return rnd(seed) % 256;
	default:
		return rnd(seed) % b->bs;
	}
}

static size_t add_record(uint8_t *data, size_t size, size_t max,
			 uint32_t *seed)
{
	const struct fz_base *b = &state.bases[data[0] % state.nbases];
	unsigned reg = pick_region(b, seed);
	unsigned off = pick_offset(b, &b->reg[reg], seed);
	unsigned op = rnd(seed) % 3 == 0 ? 1 : (rnd(seed) % 2 ? 3 : 0);
	size_t dlen = op == 3 ? 1 : 1 + rnd(seed) % 4;
	uint8_t *r = data + size;
	size_t i;

	if (size + FZ_RECORD_HDR + dlen > max)
		return 0;
	r[0] = op | (rnd(seed) & 0xfc);
	r[1] = reg & 0xff;
	r[2] = reg >> 8;
	r[3] = off & 0xff;
	r[4] = off >> 8;
	r[5] = op == 3 ? rnd(seed) & 3 : (uint8_t)(dlen - 1);
	for (i = 0; i < dlen; i++)
		r[FZ_RECORD_HDR + i] = rnd(seed);
	return size + FZ_RECORD_HDR + dlen;
}

static size_t drop_record(uint8_t *data, size_t size, uint32_t *seed)
{
	size_t at[FZ_MAX_RECORDS], end;
	int n = find_records(data, size, at), k;

	if (!n)
		return size;
	k = rnd(seed) % n;
	end = k + 1 < n ? at[k + 1] : size;
	memmove(data + at[k], data + end, size - end);
	return size - (end - at[k]);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed)
{
	uint32_t s = seed | 1;
	size_t n;

	if (max_size < FZ_HEADER + FZ_RECORD_HDR + 8)
		return LLVMFuzzerMutate(data, size, max_size);
	if (size < FZ_HEADER) {
		data[0] = rnd(&s);
		data[1] = 0;
		size = FZ_HEADER;
	}
	switch (rnd(&s) % 17) {
	case 0: case 1: case 2: case 3: case 4:
		n = add_record(data, size, max_size, &s);
		return n ? n : LLVMFuzzerMutate(data, size, max_size);
	case 5:
		return drop_record(data, size, &s);
	case 6:
		data[0] = rnd(&s);		/* another base */
		return size;
	case 7:
		/* Stale checksums now and then: the rejection paths count. */
		data[1] = (data[1] & ~FZ_FLAG_STALE) |
			  (rnd(&s) % 8 == 0 ? FZ_FLAG_STALE : 0);
		return size;
	case 8:
		data[1] ^= FZ_FLAG_RW;		/* read-only <-> read-write */
		return size;
	default:
		n = LLVMFuzzerMutate(data, size, max_size);
		return n >= FZ_HEADER ? n : FZ_HEADER;
	}
}
