/*
 * test_sendstream.c - the btrfs send stream format (sendstream.h): every
 * command round-trips through encoder and decoder, a stream cut at any
 * byte or fed in pieces of any size decodes to exactly its complete
 * commands, any corruption is caught by the CRC or the strict checks,
 * hostile lengths and malformed attributes are refused with a message
 * naming the command, and a stream written by a real "btrfs send" (made
 * here when btrfs can be mounted) decodes whole: the format, CRC seed
 * included, is btrfs's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/crc32c.h"
#include "nextfs/sendstream.h"

static const unsigned char uuid_a[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
					  11, 12, 13, 14, 15, 16 };
static const unsigned char uuid_b[16] = { 0xf0, 0xe1, 0xd2, 0xc3, 0xb4,
					  0xa5, 0x96, 0x87, 0x78, 0x69,
					  0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f };

#define OK(x) ck_assert_int_eq((x), 0)

/* One command of every type a version-VERSION stream may hold, then END. */
static void encode_all(struct nx_ss_enc *e, uint32_t version)
{
	static char big[60000];
	size_t i;

	for (i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + (i >> 8));
	nx_ss_enc_init(e, version);
	OK(nx_ss_enc_header(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_SNAPSHOT));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "snap-2"));
	OK(nx_ss_enc_uuid(e, NX_SS_A_UUID, uuid_a));
	OK(nx_ss_enc_u64(e, NX_SS_A_CTRANSID, 12));
	OK(nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, uuid_b));
	OK(nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, 11));
	OK(nx_ss_enc_end(e));
	for (i = NX_SS_C_MKFILE; i <= NX_SS_C_MKSOCK; i++) {
		OK(nx_ss_enc_begin(e, (unsigned)i));
		OK(nx_ss_enc_str(e, NX_SS_A_PATH, "o257-12-0"));
		OK(nx_ss_enc_u64(e, NX_SS_A_INO, 257 + i));
		if (i == NX_SS_C_MKNOD) {
			OK(nx_ss_enc_u64(e, NX_SS_A_MODE, 020644));
			OK(nx_ss_enc_u64(e, NX_SS_A_RDEV, 0x0801));
		}
		OK(nx_ss_enc_end(e));
	}
	OK(nx_ss_enc_begin(e, NX_SS_C_SYMLINK));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "dir/link"));
	OK(nx_ss_enc_u64(e, NX_SS_A_INO, 300));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH_LINK, "../target with spaces"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_RENAME));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "o257-12-0"));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH_TO, "a/\x01\xff name"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_LINK));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "b"));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH_LINK, "a"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_UNLINK));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "b"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_RMDIR));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "d"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_SET_XATTR));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_str(e, NX_SS_A_XATTR_NAME, "user.x"));
	OK(nx_ss_enc_bytes(e, NX_SS_A_XATTR_DATA, "v\0v", 3));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_REMOVE_XATTR));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_str(e, NX_SS_A_XATTR_NAME, "user.x"));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_WRITE));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 1ULL << 40));
	OK(nx_ss_enc_bytes(e, NX_SS_A_DATA, big, sizeof(big)));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_CLONE));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 4096));
	OK(nx_ss_enc_u64(e, NX_SS_A_CLONE_LEN, 8192));
	OK(nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, uuid_b));
	OK(nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, 11));
	OK(nx_ss_enc_str(e, NX_SS_A_CLONE_PATH, "src"));
	OK(nx_ss_enc_u64(e, NX_SS_A_CLONE_OFFSET, 0));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_TRUNCATE));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_SIZE, 12345));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_CHMOD));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_MODE, 04755));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_CHOWN));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_UID, 1000));
	OK(nx_ss_enc_u64(e, NX_SS_A_GID, 4294967294ULL));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_UTIMES));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, ""));
	OK(nx_ss_enc_time(e, NX_SS_A_ATIME, -5, 999999999));
	OK(nx_ss_enc_time(e, NX_SS_A_MTIME, 1700000000, 1));
	OK(nx_ss_enc_time(e, NX_SS_A_CTIME, 1700000001, 2));
	OK(nx_ss_enc_end(e));
	OK(nx_ss_enc_begin(e, NX_SS_C_UPDATE_EXTENT));
	OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
	OK(nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 0));
	OK(nx_ss_enc_u64(e, NX_SS_A_SIZE, 4096));
	OK(nx_ss_enc_end(e));
	if (version >= 2) {
		OK(nx_ss_enc_begin(e, NX_SS_C_FALLOCATE));
		OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
		OK(nx_ss_enc_u32(e, NX_SS_A_FALLOCATE_MODE, 3));
		OK(nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 0));
		OK(nx_ss_enc_u64(e, NX_SS_A_SIZE, 8192));
		OK(nx_ss_enc_end(e));
		OK(nx_ss_enc_begin(e, NX_SS_C_FILEATTR));
		OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
		OK(nx_ss_enc_u64(e, NX_SS_A_FILEATTR, 0x10));
		OK(nx_ss_enc_end(e));
		OK(nx_ss_enc_begin(e, NX_SS_C_ENCODED_WRITE));
		OK(nx_ss_enc_str(e, NX_SS_A_PATH, "a"));
		OK(nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 0));
		OK(nx_ss_enc_u64(e, NX_SS_A_UNENCODED_FILE_LEN, 4096));
		OK(nx_ss_enc_u64(e, NX_SS_A_UNENCODED_LEN, 4096));
		OK(nx_ss_enc_u64(e, NX_SS_A_UNENCODED_OFFSET, 0));
		OK(nx_ss_enc_u32(e, NX_SS_A_COMPRESSION, 1));
		/* v2: DATA has no length field and may exceed 64 KiB */
		OK(nx_ss_enc_bytes(e, NX_SS_A_DATA, big, sizeof(big)));
		OK(nx_ss_enc_end(e));
	}
	OK(nx_ss_enc_begin(e, NX_SS_C_END));
	OK(nx_ss_enc_end(e));
}

/* Decode BUF whole; every command into OUT[..MAX); returns the count. */
static int decode_all(const unsigned char *buf, size_t len, int flags,
		      struct nx_ss_cmd *out, int max, int *err,
		      struct nx_ss_decoder *d)
{
	size_t pos = 0, used;
	struct nx_ss_cmd c;
	int n = 0, rc;

	nx_ss_dec_init(d, flags);
	*err = nx_ss_decode_header(d, buf, len, &used);
	if (*err)
		return 0;
	pos = used;
	while (pos < len) {
		rc = nx_ss_decode_cmd(d, buf + pos, len - pos, &c, &used);
		if (rc) {
			*err = rc;
			return n;
		}
		if (n < max)
			out[n] = c;
		n++;
		pos += used;
	}
	*err = 0;
	return n;
}

static int attr_eq(const struct nx_ss_cmd *c, int attr, const void *v,
		   size_t len)
{
	return nx_ss_has(c, attr) && c->attr[attr].len == len &&
	       (len == 0 || memcmp(c->attr[attr].data, v, len) == 0);
}

START_TEST(test_round_trip_every_command)
{
	struct nx_ss_cmd c[40];
	struct nx_ss_decoder d;
	struct nx_ss_enc e;
	char s[300];
	int64_t sec;
	uint32_t nsec;
	int n, err, v;

	for (v = 1; v <= 2; v++) {
		encode_all(&e, (uint32_t)v);
		n = decode_all(e.buf, e.len, 0, c, 40, &err, &d);
		ck_assert_msg(err == 0, "v%d: %s", v, d.msg);
		ck_assert_int_eq(n, v == 1 ? 21 : 24);
		ck_assert_uint_eq(d.version, (unsigned)v);
		ck_assert_uint_eq(d.ncmds, (unsigned)n);
		ck_assert_uint_eq(d.offset, e.offset);
		ck_assert_uint_eq(d.hash, e.hash);
		ck_assert(d.ended);
		ck_assert_int_eq(c[0].type, NX_SS_C_SNAPSHOT);
		ck_assert_uint_eq(c[0].offset, NX_SS_HEADER_LEN);
		OK(nx_ss_str(&c[0], NX_SS_A_PATH, s, sizeof(s)));
		ck_assert_str_eq(s, "snap-2");
		ck_assert_mem_eq(nx_ss_uuid(&c[0], NX_SS_A_UUID), uuid_a, 16);
		ck_assert_mem_eq(nx_ss_uuid(&c[0], NX_SS_A_CLONE_UUID), uuid_b,
				 16);
		ck_assert_uint_eq(nx_ss_u64(&c[0], NX_SS_A_CLONE_CTRANSID), 11);
		ck_assert_int_eq(c[3].type, NX_SS_C_MKNOD);
		ck_assert_uint_eq(nx_ss_u64(&c[3], NX_SS_A_MODE), 020644);
		ck_assert_uint_eq(nx_ss_u64(&c[3], NX_SS_A_RDEV), 0x0801);
		ck_assert_int_eq(c[6].type, NX_SS_C_SYMLINK);
		ck_assert(attr_eq(&c[6], NX_SS_A_PATH_LINK,
				  "../target with spaces", 21));
		ck_assert(attr_eq(&c[7], NX_SS_A_PATH_TO, "a/\x01\xff name",
				  9));
		ck_assert(attr_eq(&c[11], NX_SS_A_XATTR_DATA, "v\0v", 3));
		ck_assert_int_eq(c[13].type, NX_SS_C_WRITE);
		ck_assert_uint_eq(nx_ss_u64(&c[13], NX_SS_A_FILE_OFFSET),
				  1ULL << 40);
		ck_assert_uint_eq(c[13].attr[NX_SS_A_DATA].len, 60000);
		ck_assert_int_eq(c[13].attr[NX_SS_A_DATA].data[59999],
				 (unsigned char)(59999 * 7 + (59999 >> 8)));
		ck_assert_uint_eq(nx_ss_u64(&c[14], NX_SS_A_CLONE_LEN), 8192);
		ck_assert(attr_eq(&c[14], NX_SS_A_CLONE_PATH, "src", 3));
		ck_assert_uint_eq(nx_ss_u64(&c[17], NX_SS_A_GID), 4294967294ULL);
		ck_assert_int_eq(c[18].type, NX_SS_C_UTIMES);
		ck_assert(attr_eq(&c[18], NX_SS_A_PATH, "", 0));
		nx_ss_time(&c[18], NX_SS_A_ATIME, &sec, &nsec);
		ck_assert(sec == -5 && nsec == 999999999);
		nx_ss_time(&c[18], NX_SS_A_CTIME, &sec, &nsec);
		ck_assert(sec == 1700000001 && nsec == 2);
		if (v == 2) {
			ck_assert_uint_eq(nx_ss_u32(&c[20],
					  NX_SS_A_FALLOCATE_MODE), 3);
			ck_assert_uint_eq(nx_ss_u64(&c[21], NX_SS_A_FILEATTR),
					  0x10);
			ck_assert_uint_eq(c[22].attr[NX_SS_A_DATA].len, 60000);
		}
		ck_assert_int_eq(c[n - 1].type, NX_SS_C_END);
		ck_assert_str_eq(nx_ss_cmd_name(c[7].type), "rename");
		nx_ss_enc_free(&e);
	}
}
END_TEST

/*
 * A stream cut after any number of bytes (each one around the small
 * commands, every 101st inside the 60000-byte write) decodes to exactly
 * the commands that are complete, and then wants more; fed in pieces of
 * any size it decodes to the same commands as in one piece.
 */
START_TEST(test_truncated_at_every_byte)
{
	struct nx_ss_cmd whole[40], c;
	struct nx_ss_decoder d;
	struct nx_ss_enc e;
	size_t cut, pos, used, bounds[40];
	int n, err, i, rc;

	encode_all(&e, 1);
	n = decode_all(e.buf, e.len, 0, whole, 40, &err, &d);
	ck_assert_int_eq(err, 0);
	for (i = 0; i < n; i++)
		bounds[i] = (size_t)(whole[i].offset + NX_SS_CMD_HEADER_LEN +
				     whole[i].len);
	for (cut = 0; cut < e.len;
	     cut += cut < 2000 || e.len - cut < 2000 ? 1 : 101) {
		int complete = 0;

		for (i = 0; i < n; i++)
			complete += bounds[i] <= cut;
		nx_ss_dec_init(&d, 0);
		rc = nx_ss_decode_header(&d, e.buf, cut, &used);
		if (cut < NX_SS_HEADER_LEN) {
			ck_assert_int_eq(rc, NX_SS_MORE);
			ck_assert_int_eq(nx_ss_dec_truncated(&d, cut),
					 EXT2_ET_SHORT_READ);
			continue;
		}
		ck_assert_int_eq(rc, 0);
		pos = used;
		for (i = 0;; i++) {
			rc = nx_ss_decode_cmd(&d, e.buf + pos, cut - pos, &c,
					      &used);
			if (rc)
				break;
			ck_assert_uint_eq(c.offset, whole[i].offset);
			ck_assert_uint_eq(c.crc, whole[i].crc);
			pos += used;
		}
		ck_assert_msg(rc == NX_SS_MORE, "cut %zu (pos %zu, i %d): %s",
			      cut, pos, i, d.msg);
		ck_assert_int_eq(i, complete);
		ck_assert(d.need > cut - pos);
		ck_assert_int_eq(nx_ss_dec_truncated(&d, cut - pos),
				 EXT2_ET_SHORT_READ);
		ck_assert(strstr(d.msg, "cut") != NULL);
	}
	/* Pieces of 1, 7, 4096 bytes: what a reader of a pipe does. */
	for (i = 0; i < 3; i++) {
		static const size_t piece[] = { 1, 7, 4096 };
		unsigned char *buf = malloc(e.len);
		size_t have = 0, fed = 0, start;
		int got = 0, header = 0;

		ck_assert_ptr_nonnull(buf);
		nx_ss_dec_init(&d, 0);
		while (fed < e.len) {
			size_t k = piece[i] < e.len - fed ? piece[i] :
				   e.len - fed;

			memcpy(buf + have, e.buf + fed, k);
			have += k;
			fed += k;
			start = 0;
			for (;;) {
				if (!header) {
					rc = nx_ss_decode_header(&d, buf, have,
								 &used);
					header = rc == 0;
				} else {
					rc = nx_ss_decode_cmd(&d, buf + start,
							      have - start, &c,
							      &used);
					if (rc == 0) {
						ck_assert_uint_eq(c.crc,
							whole[got].crc);
						got++;
					}
				}
				if (rc)
					break;
				start += used;
				if (d.ended)
					break;	/* END ends the stream */
			}
			ck_assert(rc == NX_SS_MORE || d.ended);
			memmove(buf, buf + start, have - start);
			have -= start;
		}
		ck_assert_int_eq(got, n);
		ck_assert_uint_eq(have, 0);
		free(buf);
	}
	nx_ss_enc_free(&e);
}
END_TEST

/*
 * Flip any byte after the header: the decoder either refuses (CRC,
 * length, or - for a flipped length that grows past the end - wants
 * bytes that never come), and never returns a command that differs from
 * the original.
 */
START_TEST(test_corruption_never_passes)
{
	struct nx_ss_cmd whole[40], c[40];
	struct nx_ss_decoder d;
	struct nx_ss_enc e;
	unsigned char *copy;
	size_t i;
	int n, m, err, k, crc_errors = 0;

	encode_all(&e, 1);
	n = decode_all(e.buf, e.len, 0, whole, 40, &err, &d);
	ck_assert_int_eq(err, 0);
	copy = malloc(e.len);
	ck_assert_ptr_nonnull(copy);
	for (i = NX_SS_HEADER_LEN; i < e.len; i += (i < 1500 ? 1 : 499)) {
		memcpy(copy, e.buf, e.len);
		copy[i] ^= (unsigned char)(1 << (i % 8));
		m = decode_all(copy, e.len, 0, c, 40, &err, &d);
		ck_assert_msg(err != 0, "byte %zu flipped went unnoticed", i);
		ck_assert(m < n);
		for (k = 0; k < m; k++)
			ck_assert_uint_eq(c[k].crc, whole[k].crc);
		if (err == EXT2_ET_BAD_CRC) {
			crc_errors++;
			ck_assert(strstr(d.msg, "checksum mismatch") != NULL);
			ck_assert(strstr(d.msg, "at offset") != NULL);
		}
	}
	ck_assert(crc_errors > 1000);
	free(copy);
	nx_ss_enc_free(&e);
}
END_TEST

/* A command with payload P (LEN bytes) and a correct CRC, appended to S. */
static size_t raw_cmd(unsigned char *s, size_t at, unsigned type,
		      const void *p, uint32_t len)
{
	unsigned char *h = s + at;
	uint32_t crc;

	h[0] = (unsigned char)len;
	h[1] = (unsigned char)(len >> 8);
	h[2] = (unsigned char)(len >> 16);
	h[3] = (unsigned char)(len >> 24);
	h[4] = (unsigned char)type;
	h[5] = (unsigned char)(type >> 8);
	memset(h + 6, 0, 4);
	if (len)
		memcpy(h + 10, p, len);
	crc = ext2fs_crc32c_le(0, h, 10 + len);
	h[6] = (unsigned char)crc;
	h[7] = (unsigned char)(crc >> 8);
	h[8] = (unsigned char)(crc >> 16);
	h[9] = (unsigned char)(crc >> 24);
	return at + 10 + len;
}

static size_t header(unsigned char *s, uint32_t version)
{
	memcpy(s, "btrfs-stream", 13);
	s[13] = (unsigned char)version;
	s[14] = s[15] = s[16] = 0;
	return 17;
}

/* Decode S[0..LEN) and expect error ERR with WHAT in the message. */
static void expect_refusal(const unsigned char *s, size_t len, int flags,
			   int err, const char *what)
{
	struct nx_ss_cmd c[4];
	struct nx_ss_decoder d;
	int got;

	decode_all(s, len, flags, c, 4, &got, &d);
	ck_assert_msg(got == err, "want %d (%s), got %d: %s", err, what, got,
		      d.msg);
	ck_assert_msg(strstr(d.msg, what) != NULL, "'%s' not in '%s'", what,
		      d.msg);
}

START_TEST(test_hostile_streams_refused)
{
	unsigned char s[256], p[64];
	size_t n;

	/* Not a stream, a newer version. */
	memcpy(s, "tar-stream\0\0\1\0\0\0\0", 17);
	expect_refusal(s, 17, 0, EINVAL, "not a btrfs send stream");
	n = header(s, 3);
	expect_refusal(s, n, 0, EINVAL, "version 3 is not supported");
	/* A length past any sane command: refused before it is buffered. */
	n = header(s, 1);
	memcpy(s + n, "\xff\xff\xff\x7f\x0b\0\0\0\0\0", 10);
	expect_refusal(s, n + 10, 0, EINVAL, "is more than a command may have");
	/* Attribute length past the end of the command. */
	memcpy(p, "\x0f\0\x20\0abc", 7);	/* path, 32 bytes claimed */
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 7);
	expect_refusal(s, n, 0, EINVAL, "runs past the end of the command");
	/* Half an attribute header. */
	memcpy(p, "\x0f\0\x01\0a\x0f", 6);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 6);
	expect_refusal(s, n, 0, EINVAL, "attribute header runs past");
	/* Unknown attribute, attribute 0, a version-2 one in version 1. */
	memcpy(p, "\x0f\0\x01\0a\x63\0\0\0", 9);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 9);
	expect_refusal(s, n, 0, EINVAL, "unknown attribute type 99");
	memcpy(p, "\0\0\0\0", 4);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 4);
	expect_refusal(s, n, 0, EINVAL, "unknown attribute type 0");
	memcpy(p, "\x0f\0\x01\0a\x1a\0\x08\0\0\0\0\0\0\0\0\0", 17);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 17);
	expect_refusal(s, n, 0, EINVAL, "unknown attribute type 26");
	/* Twice the same attribute. */
	memcpy(p, "\x0f\0\x01\0a\x0f\0\x01\0b", 10);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 10);
	expect_refusal(s, n, 0, EINVAL, "path appears twice");
	/* A u64 of 7 bytes, a path with a NUL, a missing attribute. */
	memcpy(p, "\x0f\0\x01\0a\x04\0\x07\0\1\2\3\4\5\6\7", 16);
	n = raw_cmd(s, header(s, 1), NX_SS_C_TRUNCATE, p, 16);
	expect_refusal(s, n, 0, EINVAL, "size has 7 bytes instead of 8");
	memcpy(p, "\x0f\0\x03\0a\0b", 7);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 7);
	expect_refusal(s, n, 0, EINVAL, "holds a NUL byte");
	memcpy(p, "\x0f\0\x01\0a", 5);
	n = raw_cmd(s, header(s, 1), NX_SS_C_TRUNCATE, p, 5);
	expect_refusal(s, n, 0, EINVAL, "command 0 (truncate) at offset 17: "
		       "attribute size is missing");
	/* Unknown commands; version 2's in a version-1 stream. */
	n = raw_cmd(s, header(s, 1), 0, NULL, 0);
	expect_refusal(s, n, 0, EINVAL, "unknown command type 0");
	n = raw_cmd(s, header(s, 1), 200, NULL, 0);
	expect_refusal(s, n, 0, EINVAL, "unknown command type 200");
	memcpy(p, "\x0f\0\x01\0a\x1a\0\x08\0\0\0\0\0\0\0\0\0", 17);
	n = raw_cmd(s, header(s, 1), NX_SS_C_FILEATTR, p, 17);
	expect_refusal(s, n, 0, EINVAL, "needs stream version 2");
	/* nextfs's resume command: only for nextfs receive. */
	memcpy(p, "\x01\x4e\x08\0\1\0\0\0\0\0\0\0\x02\x4e\x08\0\x1b\0\0\0\0\0"
	       "\0\0\x03\x4e\x08\0\0\0\0\0\0\0\0\0", 36);
	n = raw_cmd(s, header(s, 1), NX_SS_C_RESUME, p, 36);
	expect_refusal(s, n, 0, EINVAL, "only \"nextfs receive\" applies it");
	/* ... and its attributes nowhere else. */
	memcpy(p, "\x0f\0\x01\0a\x01\x4e\x08\0\1\0\0\0\0\0\0\0", 17);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 17);
	expect_refusal(s, n, NX_SS_DEC_PRIVATE, EINVAL,
		       "unknown attribute type 19969");
	/* A wrong CRC names the command and where it is. */
	memcpy(p, "\x0f\0\x01\0a", 5);
	n = raw_cmd(s, header(s, 1), NX_SS_C_UNLINK, p, 5);
	n = raw_cmd(s, n, NX_SS_C_RMDIR, p, 5);
	s[n - 1] ^= 1;
	expect_refusal(s, n, 0, EXT2_ET_BAD_CRC,
		       "command 1 (rmdir) at offset 32: checksum mismatch");
	/* Anything after END. */
	n = raw_cmd(s, header(s, 1), NX_SS_C_END, NULL, 0);
	n = raw_cmd(s, n, NX_SS_C_END, NULL, 0);
	expect_refusal(s, n, 0, EINVAL, "data after the end command");
}
END_TEST

/* The encoder refuses what the format cannot carry, and says so again. */
START_TEST(test_encoder_limits)
{
	static char big[NX_SS_MAX_PAYLOAD + 1];
	struct nx_ss_enc e;

	nx_ss_enc_init(&e, 1);
	OK(nx_ss_enc_header(&e));
	OK(nx_ss_enc_begin(&e, NX_SS_C_WRITE));
	ck_assert_int_eq(nx_ss_enc_bytes(&e, NX_SS_A_DATA, big, 65536),
			 EINVAL);
	ck_assert_int_eq(nx_ss_enc_end(&e), EINVAL);	/* sticky */
	nx_ss_enc_free(&e);
	nx_ss_enc_init(&e, 2);
	OK(nx_ss_enc_header(&e));
	OK(nx_ss_enc_begin(&e, NX_SS_C_WRITE));
	OK(nx_ss_enc_bytes(&e, NX_SS_A_DATA, big, 65536));
	ck_assert_int_eq(nx_ss_enc_str(&e, NX_SS_A_PATH, "a"), EINVAL);
	nx_ss_enc_free(&e);
	nx_ss_enc_init(&e, 2);
	OK(nx_ss_enc_begin(&e, NX_SS_C_WRITE));
	ck_assert_int_eq(nx_ss_enc_bytes(&e, NX_SS_A_DATA, big, sizeof(big)),
			 E2BIG);
	nx_ss_enc_free(&e);
	nx_ss_enc_init(&e, 3);
	ck_assert_int_eq(nx_ss_enc_header(&e), EINVAL);
	nx_ss_enc_free(&e);
}
END_TEST

/*
 * The prefix hash: the encoder's and the decoder's agree after every
 * command, and a resume stream (header, first command, RESUME) puts the
 * decoder where the original stream was at that command.
 */
START_TEST(test_prefix_hash_and_resume)
{
	struct nx_ss_cmd c[40], r[8];
	struct nx_ss_decoder d;
	struct nx_ss_enc e, res;
	unsigned char *all;
	size_t alen;
	int n, m, err, k = 9;

	encode_all(&e, 1);
	n = decode_all(e.buf, e.len, 0, c, 40, &err, &d);
	ck_assert_int_eq(err, 0);
	/* the stream from command K on, as "nextfs send --resume" makes it */
	{
		struct nx_ss_decoder p;
		size_t pos = NX_SS_HEADER_LEN, used;
		struct nx_ss_cmd t;
		int i;

		nx_ss_dec_init(&p, 0);
		OK(nx_ss_decode_header(&p, e.buf, e.len, &used));
		for (i = 0; i < k; i++) {
			OK(nx_ss_decode_cmd(&p, e.buf + pos, e.len - pos, &t,
					    &used));
			pos += used;
		}
		nx_ss_enc_init(&res, 1);
		OK(nx_ss_enc_header(&res));
		OK(nx_ss_enc_begin(&res, NX_SS_C_SNAPSHOT));
		OK(nx_ss_enc_str(&res, NX_SS_A_PATH, "snap-2"));
		OK(nx_ss_enc_uuid(&res, NX_SS_A_UUID, uuid_a));
		OK(nx_ss_enc_u64(&res, NX_SS_A_CTRANSID, 12));
		OK(nx_ss_enc_uuid(&res, NX_SS_A_CLONE_UUID, uuid_b));
		OK(nx_ss_enc_u64(&res, NX_SS_A_CLONE_CTRANSID, 11));
		OK(nx_ss_enc_end(&res));
		ck_assert_mem_eq(res.buf, e.buf, res.len);
		OK(nx_ss_enc_resume(&res, p.ncmds, p.offset, p.hash));
		all = malloc(res.len + e.len - pos);
		ck_assert_ptr_nonnull(all);
		memcpy(all, res.buf, res.len);
		memcpy(all + res.len, e.buf + pos, e.len - pos);
		alen = res.len + e.len - pos;
	}
	m = decode_all(all, alen, NX_SS_DEC_PRIVATE, r, 8, &err, &d);
	ck_assert_msg(err == 0, "%s", d.msg);
	ck_assert_int_eq(m, 2 + (n - k));
	ck_assert_int_eq(r[1].type, NX_SS_C_RESUME);
	ck_assert_uint_eq(r[2].index, (unsigned)k);
	ck_assert_uint_eq(r[2].offset, c[k].offset);
	ck_assert_uint_eq(d.hash, e.hash);
	ck_assert_uint_eq(d.offset, e.offset);
	ck_assert_uint_eq(d.ncmds, e.ncmds);
	/* without the flag, the receiver of a plain stream refuses it */
	decode_all(all, alen, 0, r, 8, &err, &d);
	ck_assert_int_eq(err, EINVAL);
	free(all);
	nx_ss_enc_free(&res);
	nx_ss_enc_free(&e);
}
END_TEST

/* A token round-trips; a changed, cut or foreign one is refused. */
START_TEST(test_resume_token)
{
	struct nx_ss_token t, back;
	char tok[NX_SS_TOKEN_LEN + 1], bad[NX_SS_TOKEN_LEN + 2];
	size_t i;

	memset(&t, 0, sizeof(t));
	t.version = 1;
	memcpy(t.uuid, uuid_a, 16);
	t.ctransid = 12;
	memcpy(t.parent_uuid, uuid_b, 16);
	t.parent_ctransid = 11;
	t.index = 123456789;
	t.offset = 1ULL << 41;
	t.hash = 0xfedcba9876543210ULL;
	nx_ss_token_encode(&t, tok);
	ck_assert_uint_eq(strlen(tok), NX_SS_TOKEN_LEN);
	ck_assert(strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
			 "vwxyz0123456789-_") == NX_SS_TOKEN_LEN);
	OK(nx_ss_token_decode(tok, &back));
	ck_assert_mem_eq(&back, &t, sizeof(t));
	for (i = 0; i < NX_SS_TOKEN_LEN; i++) {
		strcpy(bad, tok);
		bad[i] = bad[i] == 'A' ? 'B' : 'A';
		ck_assert_int_eq(nx_ss_token_decode(bad, &back), EINVAL);
	}
	strcpy(bad, tok);
	bad[NX_SS_TOKEN_LEN - 1] = 0;
	ck_assert_int_eq(nx_ss_token_decode(bad, &back), EINVAL);
	strcpy(bad, tok);
	strcat(bad, "A");
	ck_assert_int_eq(nx_ss_token_decode(bad, &back), EINVAL);
	ck_assert_int_eq(nx_ss_token_decode("", &back), EINVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A stream of a real "btrfs send".                                    */

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return buf;
}

/*
 * Make a btrfs file system on a loop device, a tree with every kind of
 * file, a read-only snapshot, change it, a second one, and the full and
 * the incremental stream of them.  Root only; 0 if done.
 */
static int make_btrfs_streams(const char *dir)
{
	char cmd[4096];

	if (geteuid() != 0 || system("command -v mkfs.btrfs >/dev/null && "
				     "grep -qw btrfs /proc/filesystems"))
		return -1;
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd '%s'; truncate -s 128M b.img; "
		 "mkfs.btrfs -q -f b.img >/dev/null; mkdir m; "
		 "mount -o loop b.img m; trap 'umount m' EXIT; "
		 "btrfs -q subvolume create m/v; cd m/v; "
		 "printf 'hello\\n' > a; mkdir d; ln a d/hl; ln -s a sl; "
		 "mkfifo ff; mknod cdev c 1 3; setfattr -n user.x -v 1 a; "
		 "head -c 200000 /dev/zero | tr '\\0' 'z' > big; "
		 "truncate -s 1M sparse; chown 7:8 a; touch -d @1000000 a; "
		 "cd ../..; btrfs -q subvolume snapshot -r m/v m/s1; "
		 "printf more >> m/v/a; mv m/v/d m/v/e; rm m/v/sl; "
		 "btrfs -q subvolume snapshot -r m/v m/s2; "
		 "btrfs -q send -f full.stream m/s1; "
		 "btrfs -q send -f incr.stream -p m/s1 m/s2", dir);
	return system(cmd) == 0 ? 0 : -1;
}

START_TEST(test_real_btrfs_stream)
{
	char dir[] = "/tmp/nxtest-btrfs-XXXXXX", path[256], cmd[512];
	struct nx_ss_cmd c[64];
	struct nx_ss_decoder d;
	unsigned char *buf;
	size_t len;
	int n, err, i, seen[32] = { 0 };
	uint64_t written = 0;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	if (make_btrfs_streams(dir)) {
		fprintf(stderr, "test_real_btrfs_stream: skipped: needs root, "
			"mkfs.btrfs and btrfs in the kernel\n");
		goto out;
	}
	snprintf(path, sizeof(path), "%s/full.stream", dir);
	buf = slurp(path, &len);
	ck_assert_ptr_nonnull(buf);
	n = decode_all(buf, len, 0, c, 64, &err, &d);
	ck_assert_msg(err == 0, "%s", d.msg);
	ck_assert(n < 64);
	ck_assert_int_eq(c[0].type, NX_SS_C_SUBVOL);
	ck_assert(attr_eq(&c[0], NX_SS_A_PATH, "s1", 2));
	ck_assert_int_eq(c[n - 1].type, NX_SS_C_END);
	for (i = 0; i < n; i++) {
		if (c[i].type < 32)
			seen[c[i].type]++;
		if (c[i].type == NX_SS_C_WRITE &&
		    attr_eq(&c[i], NX_SS_A_PATH, "big", 3)) {
			ck_assert_uint_eq(nx_ss_u64(&c[i], NX_SS_A_FILE_OFFSET),
					  written);
			ck_assert_int_eq(c[i].attr[NX_SS_A_DATA].data[0], 'z');
			written += c[i].attr[NX_SS_A_DATA].len;
		}
		if (c[i].type == NX_SS_C_CHOWN &&
		    attr_eq(&c[i], NX_SS_A_PATH, "a", 1))
			ck_assert(nx_ss_u64(&c[i], NX_SS_A_UID) == 7 &&
				  nx_ss_u64(&c[i], NX_SS_A_GID) == 8);
		if (c[i].type == NX_SS_C_UTIMES &&
		    attr_eq(&c[i], NX_SS_A_PATH, "a", 1)) {
			int64_t sec;
			uint32_t nsec;

			nx_ss_time(&c[i], NX_SS_A_MTIME, &sec, &nsec);
			ck_assert(sec == 1000000 && nsec == 0);
		}
	}
	ck_assert_uint_eq(written, 200000);
	ck_assert(seen[NX_SS_C_MKFILE] >= 3 && seen[NX_SS_C_MKDIR] == 1 &&
		  seen[NX_SS_C_MKNOD] == 1 && seen[NX_SS_C_MKFIFO] == 1 &&
		  seen[NX_SS_C_SYMLINK] == 1 && seen[NX_SS_C_LINK] == 1 &&
		  seen[NX_SS_C_SET_XATTR] == 1 && seen[NX_SS_C_TRUNCATE] >= 1 &&
		  seen[NX_SS_C_RENAME] >= 5);
	free(buf);
	snprintf(path, sizeof(path), "%s/incr.stream", dir);
	buf = slurp(path, &len);
	ck_assert_ptr_nonnull(buf);
	n = decode_all(buf, len, 0, c, 64, &err, &d);
	ck_assert_msg(err == 0, "%s", d.msg);
	ck_assert_int_eq(c[0].type, NX_SS_C_SNAPSHOT);
	ck_assert(attr_eq(&c[0], NX_SS_A_PATH, "s2", 2));
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < n; i++)
		if (c[i].type < 32)
			seen[c[i].type]++;
	ck_assert(seen[NX_SS_C_RENAME] == 1 && seen[NX_SS_C_UNLINK] == 1 &&
		  seen[NX_SS_C_WRITE] == 1 && seen[NX_SS_C_END] == 1);
	free(buf);
out:
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sendstream");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_round_trip_every_command);
	tcase_add_test(tc, test_truncated_at_every_byte);
	tcase_add_test(tc, test_corruption_never_passes);
	tcase_add_test(tc, test_hostile_streams_refused);
	tcase_add_test(tc, test_encoder_limits);
	tcase_add_test(tc, test_prefix_hash_and_resume);
	tcase_add_test(tc, test_resume_token);
	tcase_add_test(tc, test_real_btrfs_stream);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(suite());
}
