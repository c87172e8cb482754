/*
 * imgout.c - writing images out (image.h): a whole image to a file, a
 * device or a stream, and "export --since", which turns an earlier
 * export into a later one in place.
 *
 * Both read the image run by run of data (nx_imgsrc_next_data): blocks
 * that hold none are never read, and in a file they stay holes, so a
 * fresh export, an updated one and a sparse copy of a mount's image file
 * are the same file, byte for byte.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/fdio.h"
#include "nextfs/image.h"

#define WRITE_CHUNK_BLOCKS 256

static int all_zero(const char *buf, size_t len)
{
	return !len || (!buf[0] && !memcmp(buf, buf + 1, len - 1));
}

/* Make [OFF, OFF + LEN) of the file FD read as zeros: a hole. */
static errcode_t punch(int fd, off_t off, off_t len, char *zeros, size_t zlen)
{
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
		      len) == 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return errno;
	/* No holes here: zeros it is. */
	memset(zeros, 0, zlen);
	while (len) {
		size_t n = (size_t)len < zlen ? (size_t)len : zlen;
		errcode_t err = nx_write_all(fd, zeros, n, off, NULL);

		if (err)
			return err;
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * BUF holds RUN blocks of the image from block BLK: write them to FD at
 * their place.  SPARSE: all-zero blocks are not written, and with PUNCH
 * made holes (where FD may hold old data: an update).  Block SKIP (if in
 * the range) is left alone.  Counts into *WRITTEN and *ZEROED.
 */
struct placed {
	int fd;
	unsigned bs;
	int sparse, punch;
	blk64_t skip;
	blk64_t written, zeroed;
};

static errcode_t place_blocks(struct placed *p, char *buf, blk64_t blk,
			      blk64_t run)
{
	blk64_t i = 0, j;
	errcode_t err = 0;

	while (i < run && !err) {
		int zero = p->sparse && all_zero(buf + i * p->bs, p->bs);

		if (blk + i == p->skip) {
			i++;
			continue;
		}
		for (j = i + 1; j < run && blk + j != p->skip &&
		     (p->sparse && all_zero(buf + j * p->bs, p->bs)) == zero;
		     j++)
			;
		if (!zero) {
			err = nx_write_all(p->fd, buf + i * p->bs,
					   (j - i) * p->bs,
					   (off_t)((blk + i) * p->bs), NULL);
			p->written += j - i;
		} else if (p->punch) {
			err = punch(p->fd, (off_t)((blk + i) * p->bs),
				    (off_t)((j - i) * p->bs), buf + i * p->bs,
				    (j - i) * p->bs);
			p->zeroed += j - i;
		}
		i = j;
	}
	return err;
}

/* Stream zeros for the blocks [FROM, TO) that hold no data. */
static errcode_t stream_zeros(int fd, char *buf, blk64_t from, blk64_t to,
			      unsigned bs)
{
	errcode_t err = 0;

	memset(buf, 0, (size_t)bs * WRITE_CHUNK_BLOCKS);
	while (from < to && !err) {
		blk64_t n = to - from < WRITE_CHUNK_BLOCKS ? to - from :
			    WRITE_CHUNK_BLOCKS;

		err = nx_write_all(fd, buf, n * bs, NX_FD_POS, NULL);
		from += n;
	}
	return err;
}

errcode_t nx_imgsrc_write(struct nx_imgsrc *src, int fd, int how,
			  const struct nx_progress *prog, blk64_t *written)
{
	unsigned bs = nx_imgsrc_block_size(src);
	blk64_t nblocks = nx_imgsrc_size(src) / bs, blk = 0, s, e;
	char *buf = malloc((size_t)bs * WRITE_CHUNK_BLOCKS);
	struct placed p = { fd, bs, how == NX_WRITE_FILE, 0, ~0ULL, 0, 0 };
	errcode_t err = 0;

	if (!buf)
		return ENOMEM;
	while (blk < nblocks && !err) {
		err = nx_imgsrc_next_data(src, blk, &s, &e);
		if (!err && how == NX_WRITE_STREAM)
			err = stream_zeros(fd, buf, blk, s, bs);
		for (blk = s; blk < e && !err; ) {
			blk64_t run = e - blk < WRITE_CHUNK_BLOCKS ? e - blk :
				      WRITE_CHUNK_BLOCKS;

			err = nx_imgsrc_read(src, buf, run * bs,
					     blk * (uint64_t)bs);
			if (err)
				break;
			if (how == NX_WRITE_STREAM) {
				err = nx_write_all(fd, buf, run * bs, NX_FD_POS,
						   NULL);
				p.written += run;
			} else {
				err = place_blocks(&p, buf, blk, run);
			}
			blk += run;
			if (prog && prog->fn)
				prog->fn(prog->priv, "writing", blk, nblocks);
		}
		blk = e > blk ? e : blk;
		if (s >= nblocks)
			break;
	}
	if (!err && how == NX_WRITE_STREAM && blk < nblocks)
		err = stream_zeros(fd, buf, blk, nblocks, bs);
	if (!err && how == NX_WRITE_FILE &&
	    ftruncate(fd, (off_t)nx_imgsrc_size(src)) < 0)
		err = errno;
	if (!err && how != NX_WRITE_STREAM && fsync(fd) < 0)
		err = errno;
	if (written)
		*written = p.written;
	free(buf);
	return err;
}

/* ------------------------------------------------------------------ */
/* export --since                                                      */

static errcode_t read_super(struct nx_imgsrc *src,
			    struct ext2_super_block *sb)
{
	return nx_imgsrc_read(src, sb, sizeof(*sb), SUPERBLOCK_OFFSET);
}

static void sb_csum_set(struct ext2_super_block *sb)
{
	if (sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb->s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)sb,
				offsetof(struct ext2_super_block, s_checksum));
}

/*
 * The superblock of an export of OLD while it is being turned into one
 * of NEW_ID: "not clean, with errors" (e2fsck checks it even without -f,
 * the kernel warns when mounting it), and the stamp already NEW's.
 */
#define HALF_STATE_BITS	(EXT2_VALID_FS | EXT2_ERROR_FS)

static void half_super(const struct ext2_super_block *old, uint32_t new_id,
		       struct ext2_super_block *out)
{
	*out = *old;
	out->s_state = (out->s_state & ~EXT2_VALID_FS) | EXT2_ERROR_FS;
	out->s_snapshot_id = new_id;
	sb_csum_set(out);
}

/* Equal but for the stamp and the state (and so the checksum)? */
static int same_but_stamp(const struct ext2_super_block *a,
			  const struct ext2_super_block *b)
{
	struct ext2_super_block x = *a, y = *b;

	x.s_snapshot_id = y.s_snapshot_id = 0;
	x.s_state &= ~HALF_STATE_BITS;
	y.s_state &= ~HALF_STATE_BITS;
	x.s_checksum = y.s_checksum = 0;
	return !memcmp(&x, &y, sizeof(x));
}

static errcode_t out_size(int fd, uint64_t *size, int *regular)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return errno;
	*regular = S_ISREG(st.st_mode);
	if (*regular) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	{
		off_t end = lseek(fd, 0, SEEK_END);

		if (end < 0)
			return errno;
		*size = (uint64_t)end;
	}
	return 0;
}

errcode_t nx_imgsrc_out_state(struct nx_imgsrc *old, struct nx_imgsrc *new,
			      int fd, enum nx_out_state *state,
			      uint32_t *other_id)
{
	struct ext2_super_block so, sn, out, half;
	uint64_t size = 0;
	int regular = 0;
	ssize_t got;
	errcode_t err;

	*other_id = 0;
	err = read_super(old, &so);
	if (!err)
		err = read_super(new, &sn);
	if (!err)
		err = out_size(fd, &size, &regular);
	if (err)
		return err;
	got = pread(fd, &out, sizeof(out), SUPERBLOCK_OFFSET);
	if (got < 0)
		return errno;
	if (got != (ssize_t)sizeof(out) || out.s_magic != EXT2_SUPER_MAGIC ||
	    memcmp(out.s_uuid, so.s_uuid, sizeof(out.s_uuid))) {
		*state = NX_OUT_FOREIGN;
		return 0;
	}
	*other_id = out.s_snapshot_id;
	half_super(&so, sn.s_snapshot_id, &half);
	if ((regular && size != nx_imgsrc_size(new)) ||
	    size < nx_imgsrc_size(new))
		*state = NX_OUT_SIZE;
	else if (!memcmp(&out, &sn, sizeof(out)))
		*state = NX_OUT_NEW;
	else if (!memcmp(&out, &so, sizeof(out)))
		*state = NX_OUT_OLD;
	else if (!memcmp(&out, &half, sizeof(out)))
		*state = NX_OUT_HALF;
	else if ((out.s_state & HALF_STATE_BITS) == EXT2_ERROR_FS &&
		 same_but_stamp(&out, &so))
		*state = NX_OUT_HALF_OTHER;
	else if (out.s_snapshot_id != so.s_snapshot_id)
		*state = NX_OUT_OTHER;
	else
		*state = NX_OUT_CHANGED;
	return 0;
}

/* The block of the image that holds the primary superblock. */
static blk64_t super_block_nr(unsigned bs)
{
	return SUPERBLOCK_OFFSET / bs;
}

/* Punch [BLK, END) out of the file, but block P->skip. */
static errcode_t punch_run(struct placed *p, blk64_t blk, blk64_t end,
			   char *buf)
{
	errcode_t err = 0;

	if (p->skip >= blk && p->skip < end) {
		err = punch_run(p, blk, p->skip, buf);
		blk = p->skip + 1;
	}
	if (err || blk >= end)
		return err;
	p->zeroed += end - blk;
	return punch(p->fd, (off_t)(blk * p->bs), (off_t)((end - blk) * p->bs),
		     buf, p->bs);
}

/* Write what CHANGES lists, but the superblock's block. */
static errcode_t apply_changes(struct nx_imgsrc *new,
			       nx_imgsrc_changes_fn changes, void *priv,
			       struct placed *p, char *buf,
			       const struct nx_progress *prog)
{
	blk64_t nblocks = nx_imgsrc_size(new) / p->bs, start = 0, next;
	struct nx_img_run runs[128];
	size_t n, i;
	errcode_t err;

	do {
		err = changes(priv, start, runs, 128, &n, &next);
		for (i = 0; i < n && !err; i++) {
			blk64_t blk = runs[i].blk, end = blk + runs[i].len;

			if (runs[i].kind == NX_IMG_ZERO) {
				/* Free in NEW: a hole, as in a fresh export. */
				if (p->punch)
					err = punch_run(p, blk, end, buf);
				continue;
			}
			while (blk < end && !err) {
				blk64_t run = end - blk < WRITE_CHUNK_BLOCKS ?
					      end - blk : WRITE_CHUNK_BLOCKS;

				err = nx_imgsrc_read(new, buf, run * p->bs,
						     blk * (uint64_t)p->bs);
				if (!err)
					err = place_blocks(p, buf, blk, run);
				blk += run;
			}
		}
		if (prog && prog->fn)
			prog->fn(prog->priv, "updating", next, nblocks);
		start = next;
	} while (!err && next < nblocks);
	return err;
}

errcode_t nx_imgsrc_update(struct nx_imgsrc *old, struct nx_imgsrc *new,
			   nx_imgsrc_changes_fn changes, void *priv, int fd,
			   int how, const struct nx_progress *prog,
			   struct nx_update_result *res)
{
	unsigned bs = nx_imgsrc_block_size(new);
	struct placed p = { fd, bs, how == NX_WRITE_FILE,
			    how == NX_WRITE_FILE, super_block_nr(bs), 0, 0 };
	struct ext2_super_block so, sn, half;
	char *buf = malloc((size_t)bs * WRITE_CHUNK_BLOCKS);
	blk64_t sbblk = super_block_nr(bs);
	errcode_t err;

	memset(res, 0, sizeof(*res));
	if (!buf)
		return ENOMEM;
	err = read_super(old, &so);
	if (!err)
		err = read_super(new, &sn);
	if (err)
		goto out;
	/* 1. Mark it half done, durably, before any block of NEW lands. */
	half_super(&so, sn.s_snapshot_id, &half);
	err = nx_write_all(fd, &half, sizeof(half), SUPERBLOCK_OFFSET, NULL);
	if (!err && fdatasync(fd) < 0)
		err = errno;
	/* 2. Every block that differs, but the superblock's. */
	if (!err)
		err = apply_changes(new, changes, priv, &p, buf, prog);
	if (!err && fdatasync(fd) < 0)
		err = errno;
	/* 3. NEW's superblock (its whole block), the end of the update. */
	if (!err)
		err = nx_imgsrc_read(new, buf, bs, sbblk * (uint64_t)bs);
	if (!err) {
		err = nx_write_all(fd, buf, bs, (off_t)(sbblk * bs), NULL);
		p.written++;
	}
	if (!err && fdatasync(fd) < 0)
		err = errno;
	res->written = p.written;
	res->zeroed = p.zeroed;
out:
	free(buf);
	return err;
}
