/*
 * imgpatch.h - fuzz inputs as patch programs over known-good base images.
 *
 * A fuzz input does not carry an image: it selects one of the base images
 * and lists small patches, each aimed at one metadata block of that base
 * (superblock, group descriptors, bitmaps, inode table blocks, extent and
 * indirect blocks, directory blocks, xattr blocks, symlink blocks), as
 * seen by the live filesystem or through any snapshot (a snapshot's
 * preserved copy of a metadata block is its own region).  So every
 * mutation lands where a parser looks, and the input stays small.
 *
 * After patching, the checksums of every touched structure are recomputed
 * (metadata_csum and gdt_csum), unless the input asks to keep them stale:
 * otherwise nearly every mutation would only test checksum rejection.
 *
 * Input format (all integers little endian; anything is valid):
 *   u8  base      index into the sorted base list (modulo their count)
 *   u8  flags     bit 0: leave checksums stale; bit 1: read-write
 *                 session instead of the read-only open (fzrun.h); the
 *                 other bits mean nothing
 *   records, until the input ends (at most FZ_MAX_RECORDS):
 *     u8  op      bits 0-1: 0 overwrite, 1 xor, 2 raw overwrite at an
 *                 absolute image offset, 3 store an "interesting" value
 *     u16 region  region index (modulo the region count); for raw: the
 *                 high 16 bits of the offset
 *     u16 off     byte offset in the region's block (modulo block size);
 *                 for raw: the low 16 bits of the offset
 *     u8  len     ops 0-2: (len % 32) + 1 data bytes follow;
 *                 op 3: width 1 << (len & 3), one data byte follows that
 *                 picks the value from a table
 */
#ifndef NEXTFS_FUZZ_IMGPATCH_H
#define NEXTFS_FUZZ_IMGPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

#define FZ_FLAG_STALE	0x01	/* leave checksums stale */
#define FZ_FLAG_RW	0x02	/* read-write session */

#define FZ_MAX_VIEWS	8
#define FZ_MAX_RECORDS	64
#define FZ_HEADER	2
#define FZ_RECORD_HDR	6

/*
 * FZ_ORPHAN: an inode table block holding an inode of the superblock's
 * orphan chain (s_last_orphan, then i_dtime); FZ_JSB: the journal
 * superblock; FZ_JLOG: a block of a transaction the journal would replay
 * (descriptor, logged copy, revoke or commit block; fz_base.jlog).
 */
enum fz_rtype {
	FZ_SB, FZ_GDT, FZ_BBITMAP, FZ_IBITMAP, FZ_ITABLE, FZ_EXTENT, FZ_IND,
	FZ_DIR, FZ_XATTR, FZ_SYMLINK, FZ_ORPHAN, FZ_JSB, FZ_JLOG, FZ_NTYPES
};

/* A log block of a transaction to replay (region FZ_JLOG, owner = index). */
struct fz_jlog {
	blk64_t phys;
	int kind;			/* FZJ_K_* (fzjournal.h) */
	blk64_t desc_phys;		/* logged copy: its descriptor block */
	size_t tag_off;			/* ... and its tag there */
	blk64_t target;			/* ... and the block it replays to */
};

struct fz_region {
	blk64_t phys;			/* block of the image */
	blk64_t logical;		/* block number its filesystem uses */
	uint32_t owner;			/* inode, first inode, group or first group */
	uint8_t type;			/* enum fz_rtype */
	uint8_t view;			/* 0: live, i + 1: views[i] */
};

struct fz_base {
	char name[256];
	unsigned char *img;		/* pristine content */
	size_t size;
	unsigned bs;
	struct fz_region *reg;		/* sorted by phys, unique */
	size_t nreg;
	size_t count[FZ_NTYPES];
	/* Kept open for the checksum parameters of each view. */
	int fd;
	struct nx_volume *vol;
	struct nx_volume *views[FZ_MAX_VIEWS];
	int view_idx[FZ_MAX_VIEWS];	/* snapshot index of each view */
	int nviews;
	/* The journal: superblock block (0: none) and what it would replay. */
	blk64_t jsb;
	uint32_t jseq, jfirst, jmaxlen, jstart;
	struct fz_jlog *jlog;
	size_t njlog;
	int needs_recovery;		/* the base's journal holds transactions */
};

/*
 * Load image PATH as a base (opened read-only, regions enumerated).  A
 * base whose journal needs recovery is opened as it is on disk, before
 * replay (the flag is cleared in the private copy that is opened).
 */
errcode_t fz_base_load(const char *path, struct fz_base *b, char *msg,
		       size_t msglen);
void fz_base_free(struct fz_base *b);

/* Load every *.img of DIR, sorted by name.  Returns the count or -1. */
int fz_bases_load_dir(const char *dir, struct fz_base **bases);

/* The image being built from one input; IMG has room for the base. */
struct fz_work {
	const struct fz_base *base;
	unsigned char *img;
	size_t size;
	blk64_t *dirty;			/* blocks that differ from the base */
	size_t ndirty, capdirty;
	unsigned char *dirty_map;	/* one byte per block */
};

void fz_work_init(struct fz_work *w);
void fz_work_free(struct fz_work *w);

/*
 * Turn WORK into base number INPUT[0] (restoring blocks a previous input
 * changed), apply INPUT's patches and fix checksums.  Returns the base.
 */
const struct fz_base *fz_apply(struct fz_work *w, struct fz_base *bases,
			       int nbases, const uint8_t *input, size_t len);

/* Region of block PHYS, or NULL. */
const struct fz_region *fz_find_region(const struct fz_base *b,
				       blk64_t phys);

const char *fz_rtype_name(int type);

#endif
