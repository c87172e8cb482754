/*
 * fzjournal.h - a small reader of the JBD2 log, for the fuzz harness:
 * which log blocks hold the transactions a replay would apply (to make
 * them metadata regions and to fix their checksums after patching), and
 * for nextfs-fuzz-workload, where the commit block of a transaction is.
 *
 * The same walk as src/volume/journal.c's scan_log(), written against
 * the on-disk format (kernel Documentation/filesystems/ext4/journal.rst),
 * not against that code: every field is big-endian; a descriptor block
 * (type 1) is followed by one log block per tag, a revoke block (type 5)
 * stands alone, and a commit block (type 2) ends the transaction.
 * Header-only (static functions): included by imgpatch.c and workload.c.
 */
#ifndef NEXTFS_FUZZ_FZJOURNAL_H
#define NEXTFS_FUZZ_FZJOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <ext2fs/ext2fs.h>

#define FZJ_MAGIC		0xC03B3998U
#define FZJ_DESCRIPTOR		1
#define FZJ_COMMIT		2
#define FZJ_SB_V2		4
#define FZJ_REVOKE		5

#define FZJ_INCOMPAT_64BIT	0x2
#define FZJ_INCOMPAT_CSUM_V2	0x8
#define FZJ_INCOMPAT_CSUM_V3	0x10
#define FZJ_INCOMPAT_FC		0x20

#define FZJ_TAG_ESCAPE		0x1
#define FZJ_TAG_SAME_UUID	0x2
#define FZJ_TAG_LAST		0x8

/* Journal superblock offsets (all big-endian). */
#define FZJ_SB_MAXLEN		0x10
#define FZJ_SB_FIRST		0x14
#define FZJ_SB_SEQUENCE		0x18
#define FZJ_SB_START		0x1C
#define FZJ_SB_INCOMPAT		0x28
#define FZJ_SB_UUID		0x30
#define FZJ_SB_NUM_FC		0x54
#define FZJ_SB_CHECKSUM		0xFC
#define FZJ_SB_SIZE		1024

/* Kinds of log blocks. */
enum { FZJ_K_DESC, FZJ_K_DATA, FZJ_K_REVOKE, FZJ_K_COMMIT };

struct fzj {
	unsigned bs;
	uint32_t incompat;
	uint32_t maxlen, first, last;	/* the log is [first, last) */
	uint32_t start, seq;		/* s_start, s_sequence */
	uint32_t seed;			/* checksum seed (crc32c of the UUID) */
};

static inline uint32_t fzj_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline void fzj_put_be32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static inline int fzj_has_csum(const struct fzj *j)
{
	return (j->incompat & (FZJ_INCOMPAT_CSUM_V2 |
			       FZJ_INCOMPAT_CSUM_V3)) != 0;
}

/* Read the journal superblock SB of a journal of BS-byte blocks. */
static inline int fzj_parse_sb(const unsigned char *sb, unsigned bs,
			       struct fzj *j)
{
	memset(j, 0, sizeof(*j));
	if (fzj_be32(sb) != FZJ_MAGIC || fzj_be32(sb + 4) != FZJ_SB_V2)
		return -1;
	j->bs = bs;
	j->incompat = fzj_be32(sb + FZJ_SB_INCOMPAT);
	j->maxlen = fzj_be32(sb + FZJ_SB_MAXLEN);
	j->first = fzj_be32(sb + FZJ_SB_FIRST);
	j->seq = fzj_be32(sb + FZJ_SB_SEQUENCE);
	j->start = fzj_be32(sb + FZJ_SB_START);
	j->last = j->maxlen;
	if (j->incompat & FZJ_INCOMPAT_FC) {
		uint32_t fc = fzj_be32(sb + FZJ_SB_NUM_FC);

		j->last -= fc ? fc : 256;
	}
	if (!j->first || j->first >= j->last || j->last > j->maxlen)
		return -1;
	j->seed = ext2fs_crc32c_le(~0U, sb + FZJ_SB_UUID, 16);
	return 0;
}

static inline size_t fzj_tag_bytes(const struct fzj *j)
{
	size_t sz;

	if (j->incompat & FZJ_INCOMPAT_CSUM_V3)
		return 16;
	sz = 12;
	if (j->incompat & FZJ_INCOMPAT_CSUM_V2)
		sz += 2;
	return (j->incompat & FZJ_INCOMPAT_64BIT) ? sz : sz - 4;
}

static inline uint32_t fzj_next(const struct fzj *j, uint32_t pos)
{
	return pos + 1 >= j->last ? j->first : pos + 1;
}

/* Block number a tag at T describes. */
static inline uint64_t fzj_tag_block(const struct fzj *j,
				     const unsigned char *t, uint32_t *flags)
{
	uint64_t blk = fzj_be32(t);

	if (j->incompat & FZJ_INCOMPAT_CSUM_V3) {
		*flags = fzj_be32(t + 4);
		blk |= (uint64_t)fzj_be32(t + 8) << 32;
	} else {
		*flags = (uint32_t)t[6] << 8 | t[7];
		if (j->incompat & FZJ_INCOMPAT_64BIT)
			blk |= (uint64_t)fzj_be32(t + 8) << 32;
	}
	return blk;
}

/* Checksum of a logged block (tag field; v2 keeps the low 16 bits). */
static inline uint32_t fzj_data_csum(const struct fzj *j, uint32_t seq,
				     const unsigned char *data)
{
	unsigned char be[4];

	fzj_put_be32(be, seq);
	return ext2fs_crc32c_le(ext2fs_crc32c_le(j->seed, be, 4), data, j->bs);
}

/*
 * One log block: where it is, what it is, and for a logged data block the
 * descriptor and tag that describe it and the block it replays to.
 */
struct fzj_block {
	uint32_t jblk;
	int kind;			/* FZJ_K_* */
	uint32_t seq;
	uint32_t desc_jblk;		/* data: its descriptor */
	size_t tag_off;			/* data: its tag's offset there */
	uint64_t target;		/* data: device block */
};

/*
 * Walk the log from START expecting sequence SEQ, as a replay would, and
 * call EMIT for every block.  READ returns journal block JBLK (NULL to
 * stop).  Returns the number of complete transactions (commit seen):
 * blocks emitted with seq >= SEQ + that number belong to none.
 */
static inline uint32_t fzj_walk(const struct fzj *j, uint32_t start,
				uint32_t seq,
				const unsigned char *(*read)(void *, uint32_t),
				void (*emit)(void *, const struct fzj_block *),
				void *priv)
{
	uint64_t steps = 0, limit = 2ULL * (j->last - j->first);
	size_t tb = fzj_tag_bytes(j);
	size_t end = j->bs - (fzj_has_csum(j) ? 4 : 0);
	uint32_t pos = start, done = 0;
	struct fzj_block e;

	if (start < j->first || start >= j->last)
		return 0;
	while (steps++ < limit) {
		const unsigned char *b = read(priv, pos);
		uint32_t type;

		if (!b || fzj_be32(b) != FZJ_MAGIC || fzj_be32(b + 8) != seq)
			break;
		type = fzj_be32(b + 4);
		memset(&e, 0, sizeof(e));
		e.jblk = pos;
		e.seq = seq;
		if (type == FZJ_DESCRIPTOR) {
			uint32_t dpos = pos, flags;
			size_t at = 12;

			e.kind = FZJ_K_DESC;
			emit(priv, &e);
			while (at + tb <= end) {
				struct fzj_block d = { 0 };

				pos = fzj_next(j, pos);
				d.jblk = pos;
				d.kind = FZJ_K_DATA;
				d.seq = seq;
				d.desc_jblk = dpos;
				d.tag_off = at;
				d.target = fzj_tag_block(j, b + at, &flags);
				emit(priv, &d);
				at += tb + ((flags & FZJ_TAG_SAME_UUID) ? 0 : 16);
				if (flags & FZJ_TAG_LAST)
					break;
			}
		} else if (type == FZJ_REVOKE) {
			e.kind = FZJ_K_REVOKE;
			emit(priv, &e);
		} else if (type == FZJ_COMMIT) {
			e.kind = FZJ_K_COMMIT;
			emit(priv, &e);
			seq++;
			done++;
		} else {
			break;
		}
		pos = fzj_next(j, pos);
	}
	return done;
}

#endif
