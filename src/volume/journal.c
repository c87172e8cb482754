/*
 * journal.c - write and replay the volume's JBD2 journal (see journal.h).
 *
 * Layout facts (kernel Documentation/filesystems/ext4/journal.rst): every
 * journal structure is big-endian; block 0 of the journal holds its
 * superblock; a transaction is one or more descriptor blocks, each
 * followed by the blocks its tags describe, then a commit block, all
 * carrying the transaction's sequence number.  s_start != 0 in the
 * journal superblock means "replay from here".
 *
 * How we use the log.  Every transaction starts at the beginning of one
 * of the two halves of the log, alternating.  The order of one commit:
 *
 *   1. descriptor and data blocks into this half;
 *   2. sync: the log, every data write issued before (file data, snapshot
 *      copies) - ordered mode - and the previous transaction's in-place
 *      writes are durable;
 *   3. the journal superblock pointing at this transaction (s_start,
 *      s_sequence) and the commit block; sync: from here a crash replays
 *      this transaction;
 *   4. (caller) the blocks in place, not synced: step 2 of the next
 *      commit, or nx_journal_close(), makes them durable.  Until then the
 *      superblock keeps pointing at this transaction, whose half of the
 *      log the next transaction does not touch, so a crash replays it
 *      (writing the same bytes again).  By the time that half is reused,
 *      step 3 of the transaction in between has moved the superblock on.
 *
 * A crash inside step 3 leaves either superblock; with the old one the
 * previous transaction is replayed once more (its in-place writes were
 * made durable by step 2), the new one's blocks are not applied: it was
 * never acknowledged.  Two syncs per commit, as the kernel's journal.
 *
 * Blocks freed by a transaction are not reused before it is committed
 * (txn.c), so a replay never overwrites data that a committed
 * transaction placed in a block that this one still logged: the only
 * such blocks hold data nothing committed refers to.  That is why we
 * need no revoke records of our own; replay honours the kernel's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nextfs/journal.h"
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/volume.h"
#include <et/com_err.h>

#define JBD2_MAGIC		0xC03B3998U
#define JBD2_DESCRIPTOR		1
#define JBD2_COMMIT		2
#define JBD2_SB_V1		3
#define JBD2_SB_V2		4
#define JBD2_REVOKE		5

#define JBD2_COMPAT_CHECKSUM	0x1
#define JBD2_INCOMPAT_REVOKE	0x1
#define JBD2_INCOMPAT_64BIT	0x2
#define JBD2_INCOMPAT_ASYNC	0x4
#define JBD2_INCOMPAT_CSUM_V2	0x8
#define JBD2_INCOMPAT_CSUM_V3	0x10
#define JBD2_INCOMPAT_FC	0x20
#define JBD2_INCOMPAT_KNOWN	0x3f

#define TAG_ESCAPE		0x1
#define TAG_SAME_UUID		0x2
#define TAG_LAST		0x8

/* Byte offsets in the journal superblock. */
#define JSB_BLOCKSIZE		0x0C
#define JSB_MAXLEN		0x10
#define JSB_FIRST		0x14
#define JSB_SEQUENCE		0x18
#define JSB_START		0x1C
#define JSB_ERRNO		0x20
#define JSB_COMPAT		0x24
#define JSB_INCOMPAT		0x28
#define JSB_UUID		0x30
#define JSB_CSUM_TYPE		0x50
#define JSB_NUM_FC		0x54
#define JSB_CHECKSUM		0xFC
#define JSB_SIZE		1024

#define DEFAULT_FC_BLOCKS	256
#define JBD2_CRC32C_CHKSUM	4

struct nx_journal {
	struct nx_blkio *io;
	uint32_t bs;			/* journal block size = fs block size */
	blk64_t *phys;			/* journal block -> device block */
	uint32_t maxlen, first, last;	/* log is [first, last) */
	uint32_t incompat;
	uint32_t seq;			/* next transaction's sequence */
	uint32_t csum_seed;
	uint64_t blocks_count;		/* of the volume: replay bound */
	unsigned half;			/* half of the log the next txn uses */
	unsigned char *jsb;		/* JSB_SIZE bytes as on disk */
	unsigned char *buf;		/* one block of scratch */
};

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static void put_be16(unsigned char *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static int has_csum(const struct nx_journal *j)
{
	return (j->incompat & (JBD2_INCOMPAT_CSUM_V2 | JBD2_INCOMPAT_CSUM_V3)) != 0;
}

static int uuid_is_null(const unsigned char *u)
{
	int i;

	for (i = 0; i < 16; i++)
		if (u[i])
			return 0;
	return 1;
}

static uint32_t crc32c(uint32_t seed, const void *p, size_t len)
{
	return ext2fs_crc32c_le(seed, p, len);
}

/*
 * JBD2's block checksums: crc32c from SEED over LEN bytes at B with the
 * 32-bit checksum field at byte AT taken as zero.
 */
static uint32_t csum_without(uint32_t seed, unsigned char *b, size_t len,
			     size_t at)
{
	uint32_t saved = get_be32(b + at), c;

	put_be32(b + at, 0);
	c = crc32c(seed, b, len);
	put_be32(b + at, saved);
	return c;
}

static void csum_set(uint32_t seed, unsigned char *b, size_t len, size_t at)
{
	put_be32(b + at, csum_without(seed, b, len, at));
}

static int csum_ok(uint32_t seed, unsigned char *b, size_t len, size_t at)
{
	return get_be32(b + at) == csum_without(seed, b, len, at);
}

/* Bytes of one block tag (the kernel's journal_tag_bytes()). */
static size_t tag_bytes(const struct nx_journal *j)
{
	size_t sz;

	if (j->incompat & JBD2_INCOMPAT_CSUM_V3)
		return 16;
	sz = 12;
	if (j->incompat & JBD2_INCOMPAT_CSUM_V2)
		sz += 2;
	return (j->incompat & JBD2_INCOMPAT_64BIT) ? sz : sz - 4;
}

/* Tags that fit in one descriptor block (the first one carries a UUID). */
static size_t tags_per_desc(const struct nx_journal *j)
{
	size_t space = j->bs - 12 - (has_csum(j) ? 4 : 0);

	return 1 + (space - tag_bytes(j) - 16) / tag_bytes(j);
}

uint64_t nx_journal_cost(const struct nx_journal *j, size_t n)
{
	size_t per = tags_per_desc(j);

	return n + (n + per - 1) / per + 1;
}

uint64_t nx_journal_capacity(const struct nx_journal *j)
{
	return (j->last - j->first) / 2;
}

static errcode_t read_jblock(struct nx_journal *j, uint32_t jblk, void *buf)
{
	return nx_blkio_pread(j->io, buf, j->bs, j->phys[jblk] * j->bs);
}

static errcode_t write_jblock(struct nx_journal *j, uint32_t jblk,
			      const void *buf)
{
	return nx_blkio_pwrite_raw(j->io, buf, j->bs, j->phys[jblk] * j->bs);
}

static errcode_t write_jsb(struct nx_journal *j, uint32_t start)
{
	put_be32(j->jsb + JSB_START, start);
	put_be32(j->jsb + JSB_SEQUENCE, j->seq);
	if (has_csum(j)) {
		csum_set(~0U, j->jsb, JSB_SIZE, JSB_CHECKSUM);
	}
	memset(j->buf, 0, j->bs);
	memcpy(j->buf, j->jsb, JSB_SIZE);
	return write_jblock(j, 0, j->buf);
}

errcode_t nx_journal_sb_empty(void *buf)
{
	unsigned char *jsb = buf;
	uint32_t type = get_be32(jsb + 4);

	if (get_be32(jsb) != JBD2_MAGIC ||
	    (type != JBD2_SB_V1 && type != JBD2_SB_V2))
		return EXT2_ET_CORRUPT_JOURNAL_SB;
	put_be32(jsb + JSB_START, 0);
	put_be32(jsb + JSB_SEQUENCE, 1);
	put_be32(jsb + JSB_ERRNO, 0);
	if (type == JBD2_SB_V2 && (get_be32(jsb + JSB_INCOMPAT) &
				   (JBD2_INCOMPAT_CSUM_V2 |
				    JBD2_INCOMPAT_CSUM_V3)))
		csum_set(~0U, jsb, JSB_SIZE, JSB_CHECKSUM);
	return 0;
}

struct jmap_ctx {
	blk64_t *phys;
	uint32_t nblocks;
};

static int jmap_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		      blk64_t ref_blk, int ref_offset, void *priv)
{
	struct jmap_ctx *c = priv;

	if (blockcnt >= 0 && (uint64_t)blockcnt < c->nblocks)
		c->phys[blockcnt] = *blocknr;
	return 0;
}

/*
 * Map every journal block to its device block once, in one pass over the
 * inode's extents or indirect blocks (ext2fs_bmap2() per block would walk
 * the tree, and re-verify its leaf's checksum, for each of up to 2^18
 * blocks).  A hole would send log writes to block 0: refused.
 */
static errcode_t map_journal(ext2_filsys fs, ext2_ino_t ino,
			     struct nx_journal *j, uint32_t nblocks)
{
	struct jmap_ctx c;
	uint32_t i;
	errcode_t err;

	j->phys = calloc(nblocks, sizeof(*j->phys));
	if (!j->phys)
		return EXT2_ET_NO_MEMORY;
	c.phys = j->phys;
	c.nblocks = nblocks;
	err = ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY |
				    BLOCK_FLAG_DATA_ONLY, NULL, jmap_block,
				    &c);
	if (err)
		return err;
	for (i = 0; i < nblocks; i++)
		if (!j->phys[i] ||
		    j->phys[i] < fs->super->s_first_data_block ||
		    j->phys[i] >= ext2fs_blocks_count(fs->super))
			return EXT2_ET_BAD_BLOCK_NUM;
	return 0;
}

static errcode_t check_jsb(struct nx_journal *j, ext2_filsys fs,
			   uint32_t inode_blocks, char *msg, size_t msglen)
{
	const unsigned char *sb = j->jsb;
	uint32_t compat = get_be32(sb + JSB_COMPAT), fc, start;

	if (get_be32(sb) != JBD2_MAGIC ||
	    (get_be32(sb + 4) != JBD2_SB_V2 && get_be32(sb + 4) != JBD2_SB_V1)) {
		nx_set_msg(msg, msglen, "the journal superblock is corrupt "
			   "(no journal magic number or block type)");
		return EXT2_ET_CORRUPT_JOURNAL_SB;
	}
	j->incompat = get_be32(sb + JSB_INCOMPAT);
	j->maxlen = get_be32(sb + JSB_MAXLEN);
	j->first = get_be32(sb + JSB_FIRST);
	j->seq = get_be32(sb + JSB_SEQUENCE);
	if (get_be32(sb + 4) == JBD2_SB_V1 || (compat & JBD2_COMPAT_CHECKSUM) ||
	    (j->incompat & ~JBD2_INCOMPAT_KNOWN)) {
		nx_set_msg(msg, msglen, "the journal uses a format nextfs does "
			   "not write (v1 or unknown features); mount it "
			   "read-only or recreate it with tune2fs");
		return EXT2_ET_UNSUPP_FEATURE;
	}
	if (get_be32(sb + JSB_BLOCKSIZE) != fs->blocksize ||
	    j->maxlen > inode_blocks || j->first == 0 ||
	    j->first >= j->maxlen) {
		nx_set_msg(msg, msglen, "the journal superblock is corrupt "
			   "(block size %u, length %u, first block %u)",
			   get_be32(sb + JSB_BLOCKSIZE), j->maxlen, j->first);
		return EXT2_ET_CORRUPT_JOURNAL_SB;
	}
	if (get_be32(sb + JSB_ERRNO)) {
		nx_set_msg(msg, msglen, "the journal was aborted after an "
			   "error");
		return EXT2_ET_JOURNAL_FLAGS_WRONG;
	}
	j->last = j->maxlen;
	if (j->incompat & JBD2_INCOMPAT_FC) {
		fc = get_be32(sb + JSB_NUM_FC);
		fc = fc ? fc : DEFAULT_FC_BLOCKS;
		if (fc >= j->maxlen - j->first) {
			nx_set_msg(msg, msglen, "the journal superblock is "
				   "corrupt (%u fast-commit blocks)", fc);
			return EXT2_ET_CORRUPT_JOURNAL_SB;
		}
		j->last = j->maxlen - fc;
	}
	/* Replay starts reading the log there (read_jblock indexes phys). */
	start = get_be32(sb + JSB_START);
	if (start && (start < j->first || start >= j->last)) {
		nx_set_msg(msg, msglen, "the journal superblock is corrupt "
			   "(log start %u outside the log)", start);
		return EXT2_ET_CORRUPT_JOURNAL_SB;
	}
	/* Room for a useful transaction in each half of the log. */
	if ((j->last - j->first) / 2 < 8) {
		nx_set_msg(msg, msglen, "the journal is too small to use");
		return EXT2_ET_JOURNAL_TOO_SMALL;
	}
	if (has_csum(j)) {
		/* Like the kernel: a journal superblock must checksum. */
		if (!csum_ok(~0U, j->jsb, JSB_SIZE, JSB_CHECKSUM)) {
			nx_set_msg(msg, msglen, "the journal superblock's "
				   "checksum is wrong");
			return EXT2_ET_CORRUPT_JOURNAL_SB;
		}
		j->csum_seed = crc32c(~0U, sb + JSB_UUID, 16);
	}
	return 0;
}

/*
 * Before we first log into it: turn on what the kernel would for this
 * volume (64-bit tags on 64bit volumes, v3 checksums with metadata_csum)
 * so that replay by e2fsck or the kernel verifies what we wrote.
 */
errcode_t nx_journal_prepare(struct nx_journal *j, ext2_filsys fs)
{
	uint32_t want = j->incompat;

	if (nx_journal_needs_recovery(j))
		return EXT2_ET_JOURNAL_FLAGS_WRONG;
	if (ext2fs_has_feature_64bit(fs->super))
		want |= JBD2_INCOMPAT_64BIT;
	if (ext2fs_has_feature_metadata_csum(fs->super) &&
	    !(want & JBD2_INCOMPAT_CSUM_V2))
		want |= JBD2_INCOMPAT_CSUM_V3;
	if (want == j->incompat)
		return 0;
	j->incompat = want;
	put_be32(j->jsb + JSB_INCOMPAT, want);
	if (has_csum(j)) {
		j->jsb[JSB_CSUM_TYPE] = JBD2_CRC32C_CHKSUM;
		j->csum_seed = crc32c(~0U, j->jsb + JSB_UUID, 16);
	}
	return write_jsb(j, 0);
}

errcode_t nx_journal_load(ext2_filsys fs, struct nx_blkio *io,
			  struct nx_journal **ret, char *msg, size_t msglen)
{
	struct ext2_super_block *sb = fs->super;
	struct ext2_inode inode;
	struct nx_journal *j;
	uint64_t size;
	errcode_t err;

	*ret = NULL;
	if (!ext2fs_has_feature_journal(sb))
		return 0;
	if (!sb->s_journal_inum || ext2fs_has_feature_journal_dev(sb) ||
	    !uuid_is_null(sb->s_journal_uuid)) {
		nx_set_msg(msg, msglen, "external journals are not supported "
			   "for writing; mount read-only");
		return EXT2_ET_UNSUPP_FEATURE;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return EXT2_ET_NO_MEMORY;
	j->io = io;
	j->bs = fs->blocksize;
	j->blocks_count = ext2fs_blocks_count(sb);
	j->jsb = calloc(1, JSB_SIZE);
	j->buf = malloc(j->bs);
	if (!j->jsb || !j->buf) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	err = ext2fs_read_inode(fs, sb->s_journal_inum, &inode);
	if (err)
		goto fail_msg;
	size = EXT2_I_SIZE(&inode) / fs->blocksize;
	if (size < 1024 || size > (1U << 30)) {
		err = EXT2_ET_JOURNAL_TOO_SMALL;
		goto fail_msg;
	}
	err = map_journal(fs, sb->s_journal_inum, j, (uint32_t)size);
	if (err)
		goto fail_msg;
	err = read_jblock(j, 0, j->buf);
	if (err)
		goto fail_msg;
	memcpy(j->jsb, j->buf, JSB_SIZE);
	err = check_jsb(j, fs, (uint32_t)size, msg, msglen);
	if (err)
		goto fail;
	*ret = j;
	return 0;
fail_msg:
	nx_set_msg(msg, msglen, "cannot load the journal: %s",
		   error_message(err));
fail:
	nx_journal_free(j);
	return err;
}

void nx_journal_free(struct nx_journal *j)
{
	if (!j)
		return;
	free(j->phys);
	free(j->jsb);
	free(j->buf);
	free(j);
}

int nx_journal_needs_recovery(const struct nx_journal *j)
{
	return j && get_be32(j->jsb + JSB_START) != 0;
}

static void put_header(unsigned char *p, uint32_t type, uint32_t seq)
{
	put_be32(p, JBD2_MAGIC);
	put_be32(p + 4, type);
	put_be32(p + 8, seq);
}

/* Seal a descriptor or revoke block with its tail checksum. */
static void set_tail_csum(struct nx_journal *j, unsigned char *blk)
{
	if (!has_csum(j))
		return;
	csum_set(j->csum_seed, blk, j->bs, j->bs - 4);
}

static uint32_t data_csum(struct nx_journal *j, uint32_t seq,
			  const void *data)
{
	unsigned char be[4];

	put_be32(be, seq);
	return crc32c(crc32c(j->csum_seed, be, 4), data, j->bs);
}

/* Fill tag T for device block BLK whose logged copy is DATA. */
static void put_tag(struct nx_journal *j, unsigned char *t, uint64_t blk,
		    uint32_t flags, const void *data)
{
	uint32_t csum = has_csum(j) ? data_csum(j, j->seq, data) : 0;

	put_be32(t, (uint32_t)blk);
	if (j->incompat & JBD2_INCOMPAT_CSUM_V3) {
		put_be32(t + 4, flags);
		put_be32(t + 8, (uint32_t)(blk >> 32));
		put_be32(t + 12, csum);
		return;
	}
	put_be16(t + 4, (uint16_t)csum);
	put_be16(t + 6, (uint16_t)flags);
	if (j->incompat & JBD2_INCOMPAT_64BIT)
		put_be32(t + 8, (uint32_t)(blk >> 32));
}

/*
 * Write descriptor K's worth of blocks V[0..cnt) at log block *POS on,
 * descriptor first.
 */
static errcode_t log_chunk(struct nx_journal *j, const struct nx_jblock *v,
			   size_t cnt, uint32_t *pos, unsigned char *desc,
			   unsigned char *copy)
{
	size_t tb = tag_bytes(j), i, at = 12;
	uint32_t dpos = (*pos)++;
	errcode_t err;

	memset(desc, 0, j->bs);
	put_header(desc, JBD2_DESCRIPTOR, j->seq);
	for (i = 0; i < cnt; i++) {
		const unsigned char *data = v[i].data;
		uint32_t flags = i ? TAG_SAME_UUID : 0;

		if (i == cnt - 1)
			flags |= TAG_LAST;
		/* A block starting with the magic would read as a header. */
		if (get_be32(data) == JBD2_MAGIC) {
			memcpy(copy, data, j->bs);
			put_be32(copy, 0);
			flags |= TAG_ESCAPE;
			data = copy;
		}
		/* Checksummed as logged (escaped), like the kernel. */
		put_tag(j, desc + at, v[i].off / j->bs, flags, data);
		at += tb;
		if (!i) {
			memcpy(desc + at, j->jsb + JSB_UUID, 16);
			at += 16;
		}
		err = write_jblock(j, (*pos)++, data);
		if (err)
			return err;
	}
	set_tail_csum(j, desc);
	return write_jblock(j, dpos, desc);
}

static errcode_t write_commit(struct nx_journal *j, uint32_t pos)
{
	unsigned char *c = j->buf;
	struct timespec now;

	memset(c, 0, j->bs);
	put_header(c, JBD2_COMMIT, j->seq);
	clock_gettime(CLOCK_REALTIME, &now);
	put_be32(c + 48, (uint32_t)((uint64_t)now.tv_sec >> 32));
	put_be32(c + 52, (uint32_t)now.tv_sec);
	put_be32(c + 56, (uint32_t)now.tv_nsec);
	if (has_csum(j))
		csum_set(j->csum_seed, c, j->bs, 16);
	return write_jblock(j, pos, c);
}

errcode_t nx_journal_log(struct nx_journal *j, const struct nx_jblock *v,
			 size_t n)
{
	size_t per = tags_per_desc(j), done = 0;
	uint32_t start = j->first + j->half * nx_journal_capacity(j);
	uint32_t pos = start;
	unsigned char *desc = malloc(j->bs), *copy = malloc(j->bs);
	errcode_t err = 0;

	if (!desc || !copy) {
		err = EXT2_ET_NO_MEMORY;
		goto out;
	}
	if (nx_journal_cost(j, n) > nx_journal_capacity(j)) {
		err = EXT2_ET_JOURNAL_TOO_SMALL;
		goto out;
	}
	while (done < n && !err) {
		size_t cnt = n - done < per ? n - done : per;

		err = log_chunk(j, v + done, cnt, &pos, desc, copy);
		done += cnt;
	}
	if (!err)
		err = nx_blkio_sync(j->io);
	if (!err)
		err = write_jsb(j, start);
	if (!err)
		err = write_commit(j, pos);
	if (!err)
		err = nx_blkio_sync(j->io);
out:
	free(desc);
	free(copy);
	return err;
}

errcode_t nx_journal_checkpointed(struct nx_journal *j)
{
	/* The superblock stays on this transaction: see the top comment. */
	j->seq++;
	j->half ^= 1;
	return 0;
}

errcode_t nx_journal_close(struct nx_journal *j)
{
	/* In-place writes durable first, then the log may read as empty. */
	errcode_t err = nx_blkio_sync(j->io);

	if (!err)
		err = write_jsb(j, 0);
	return err ? err : nx_blkio_sync(j->io);
}

/* --- replay ------------------------------------------------------------ */

struct revoke {
	uint64_t blk;
	uint32_t seq;
};

struct replay {
	struct nx_journal *j;
	uint32_t start_seq, end_seq;	/* complete: [start_seq, end_seq) */
	struct revoke *rv;
	size_t nrv, caprv;
	unsigned replayed, bad_csum;
};

static uint32_t log_next(const struct nx_journal *j, uint32_t pos)
{
	return pos + 1 >= j->last ? j->first : pos + 1;
}

static int header_ok(const unsigned char *b, uint32_t seq)
{
	return get_be32(b) == JBD2_MAGIC && get_be32(b + 8) == seq;
}

static int tail_csum_ok(struct nx_journal *j, unsigned char *b)
{
	return !has_csum(j) || csum_ok(j->csum_seed, b, j->bs, j->bs - 4);
}

static int commit_csum_ok(struct nx_journal *j, unsigned char *b)
{
	return !has_csum(j) || csum_ok(j->csum_seed, b, j->bs, 16);
}

struct tag {
	uint64_t blk;
	uint32_t flags, csum;
};

/* Walk the tags of descriptor D; call FN for each; return the count. */
static size_t for_each_tag(struct nx_journal *j, const unsigned char *d,
			   int (*fn)(void *, const struct tag *), void *priv)
{
	size_t tb = tag_bytes(j), at = 12, end = j->bs - (has_csum(j) ? 4 : 0);
	size_t n = 0;
	struct tag t;

	while (at + tb <= end) {
		const unsigned char *p = d + at;

		t.blk = get_be32(p);
		if (j->incompat & JBD2_INCOMPAT_CSUM_V3) {
			t.flags = get_be32(p + 4);
			t.csum = get_be32(p + 12);
			t.blk |= (uint64_t)get_be32(p + 8) << 32;
		} else {
			t.flags = (uint32_t)p[6] << 8 | p[7];
			t.csum = (uint32_t)p[4] << 8 | p[5];
			if (j->incompat & JBD2_INCOMPAT_64BIT)
				t.blk |= (uint64_t)get_be32(p + 8) << 32;
		}
		n++;
		if (fn && fn(priv, &t))
			break;
		at += tb + ((t.flags & TAG_SAME_UUID) ? 0 : 16);
		if (t.flags & TAG_LAST)
			break;
	}
	return n;
}

static errcode_t add_revokes(struct replay *r, const unsigned char *b,
			     uint32_t seq)
{
	size_t rec = (r->j->incompat & JBD2_INCOMPAT_64BIT) ? 8 : 4;
	size_t used = get_be32(b + 12), at;

	if (used > r->j->bs)
		used = r->j->bs;
	for (at = 16; at + rec <= used; at += rec) {
		uint64_t blk = get_be32(b + at);

		if (rec == 8)
			blk = blk << 32 | get_be32(b + at + 4);
		if (nx_grow((void **)&r->rv, &r->caprv, r->nrv,
			    sizeof(*r->rv), 64))
			return EXT2_ET_NO_MEMORY;
		r->rv[r->nrv].blk = blk;
		r->rv[r->nrv].seq = seq;
		r->nrv++;
	}
	return 0;
}

/* Pass 1: find the complete transactions and collect revoke records. */
static errcode_t scan_log(struct replay *r, unsigned char *b)
{
	struct nx_journal *j = r->j;
	uint32_t pos = get_be32(j->jsb + JSB_START), seq = r->start_seq;
	uint64_t steps = 0, limit = 2ULL * (j->last - j->first);
	errcode_t err;

	while (steps++ < limit) {
		err = read_jblock(j, pos, b);
		if (err)
			return err;
		if (!header_ok(b, seq))
			break;
		if (get_be32(b + 4) == JBD2_DESCRIPTOR) {
			size_t n, i;

			if (!tail_csum_ok(j, b))
				break;
			n = for_each_tag(j, b, NULL, NULL);
			for (i = 0; i <= n; i++)
				pos = log_next(j, pos);
			continue;
		}
		if (get_be32(b + 4) == JBD2_REVOKE) {
			if (!tail_csum_ok(j, b))
				break;
			err = add_revokes(r, b, seq);
			if (err)
				return err;
			pos = log_next(j, pos);
			continue;
		}
		if (get_be32(b + 4) != JBD2_COMMIT || !commit_csum_ok(j, b))
			break;
		seq++;
		pos = log_next(j, pos);
	}
	r->end_seq = seq;
	return 0;
}

static int revoked(const struct replay *r, uint64_t blk, uint32_t seq)
{
	size_t i;

	for (i = 0; i < r->nrv; i++)
		if (r->rv[i].blk == blk && r->rv[i].seq < r->end_seq &&
		    (int32_t)(r->rv[i].seq - seq) >= 0)
			return 1;
	return 0;
}

struct replay_desc {
	struct replay *r;
	uint32_t pos, seq;
	unsigned char *data;
	errcode_t err;
};

static int replay_tag(void *priv, const struct tag *t)
{
	struct replay_desc *d = priv;
	struct nx_journal *j = d->r->j;
	uint32_t want;

	d->pos = log_next(j, d->pos);
	d->err = read_jblock(j, d->pos, d->data);
	if (d->err)
		return 1;
	if (has_csum(j)) {
		want = data_csum(j, d->seq, d->data);
		if (!(j->incompat & JBD2_INCOMPAT_CSUM_V3))
			want &= 0xffff;
		if (want != t->csum) {
			/* Like the kernel: skip the block, report at the end. */
			d->r->bad_csum++;
			return 0;
		}
	}
	/* Block 0 is legitimate: it holds the superblock on 4 KiB volumes. */
	if (revoked(d->r, t->blk, d->seq) || t->blk >= j->blocks_count)
		return 0;
	if (t->flags & TAG_ESCAPE)
		put_be32(d->data, JBD2_MAGIC);
	d->err = nx_blkio_pwrite_raw(j->io, d->data, j->bs, t->blk * j->bs);
	if (!d->err)
		d->r->replayed++;
	return d->err != 0;
}

/* Pass 2: write every block of the complete transactions in place. */
static errcode_t replay_log(struct replay *r, unsigned char *b)
{
	struct nx_journal *j = r->j;
	struct replay_desc d = { r, get_be32(j->jsb + JSB_START),
				 r->start_seq, NULL, 0 };
	uint64_t steps = 0, limit = 2ULL * (j->last - j->first);
	errcode_t err = 0;

	d.data = malloc(j->bs);
	if (!d.data)
		return EXT2_ET_NO_MEMORY;
	while (d.seq != r->end_seq && !err) {
		if (steps++ >= limit) {
			err = EXT2_ET_CORRUPT_JOURNAL_SB;
			break;
		}
		err = read_jblock(j, d.pos, b);
		if (err)
			break;
		/*
		 * Pass 1 saw this block as part of transaction d.seq; if it
		 * is not one now, a tag of ours was replayed over the log
		 * (like the kernel's replay pass: check again, and stop
		 * rather than walk on into stale transactions or forever).
		 */
		if (!header_ok(b, d.seq)) {
			err = EXT2_ET_CORRUPT_JOURNAL_SB;
			break;
		}
		if (get_be32(b + 4) == JBD2_DESCRIPTOR) {
			for_each_tag(j, b, replay_tag, &d);
			err = d.err;
		} else if (get_be32(b + 4) == JBD2_COMMIT) {
			d.seq++;
		}
		d.pos = log_next(j, d.pos);
	}
	free(d.data);
	return err;
}

errcode_t nx_journal_recover(struct nx_journal *j, unsigned *replayed)
{
	struct replay r = { j, get_be32(j->jsb + JSB_SEQUENCE), 0, NULL, 0, 0,
			    0, 0 };
	unsigned char *b = malloc(j->bs);
	errcode_t err;

	*replayed = 0;
	if (!b)
		return EXT2_ET_NO_MEMORY;
	err = scan_log(&r, b);
	if (!err)
		err = replay_log(&r, b);
	if (!err)
		err = nx_blkio_sync(j->io);
	if (!err) {
		j->seq = r.end_seq;
		err = nx_journal_close(j);
	}
	*replayed = r.end_seq - r.start_seq;
	free(r.rv);
	free(b);
	if (!err && r.bad_csum)
		err = EXT2_ET_BAD_CRC;
	return err;
}
