/*
 * sendstream.h - the btrfs send stream format: an encoder that builds
 * streams command by command and a strict decoder that takes them apart.
 *
 * Layer: volume/ (the bottom: calls nothing above it).  Pure encoding:
 * no volume, nothing but bytes in memory (and nx_ss_enc_flush() writing
 * them to a descriptor); it sits with the volume/ utilities (next to
 * crc32c.h) so that every layer may use it (the sender, the receiver,
 * tests).
 *
 * The format is btrfs's (btrfs-progs Documentation/dev/dev-send-stream.rst),
 * so that a stock "btrfs receive" applies what nextfs sends, and nextfs
 * receives what "btrfs send" writes:
 *   - a stream header: the 13 bytes "btrfs-stream\0", then the version as
 *     a little-endian u32 (1; 2 on request);
 *   - commands, each a 10-byte header - payload length (u32), command
 *     type (u16), CRC32C (u32) - and that many bytes of payload;
 *   - the CRC32C covers the command header, with its CRC field zero, and
 *     the payload, seeded with 0 and not inverted at the end (btrfs's
 *     convention; the same function as ext2fs_crc32c_le(0, ...));
 *   - the payload is a sequence of attributes (TLVs): type (u16), length
 *     (u16), value.  In version 2 the DATA attribute has no length: it is
 *     the last one and runs to the end of the command.
 *   - integers are little endian; a timespec is u64 seconds and u32
 *     nanoseconds; a UUID 16 bytes; strings carry no NUL.
 *
 * The decoder is strict, because the receiver applies what it returns to
 * a volume: every length is checked against the command and the stream,
 * every CRC is verified, an unknown command or attribute, a duplicated
 * attribute, a typed attribute of the wrong size, a string holding a NUL,
 * a command missing a required attribute or not allowed in the stream's
 * version, and a command longer than NX_SS_MAX_PAYLOAD are errors.  Each
 * error comes with one line naming the command (index and name) and its
 * byte offset in the stream.  The decoder never reads past the buffer
 * it is given: when a command is not complete yet it says how many bytes
 * it needs (NX_SS_MORE), so a caller can feed a stream in pieces of any
 * size (a pipe, FUSE ioctls).
 *
 * Commands are numbered from 0 (the first after the header).  The prefix
 * hash identifies a stream's first N commands for resuming (receive.h):
 * FNV-1a 64 over the 17-byte stream header and then each command's
 * 10-byte header (with its CRC) in order.  The CRCs cover the payloads,
 * so two streams with the same prefix hash hold the same commands up to
 * that point (barring a 2^-64 accident); computing it costs 10 bytes per
 * command, and sender and receiver get it for free.
 *
 * nextfs adds one private command, NX_SS_C_RESUME, accepted only with
 * NX_SS_DEC_PRIVATE (by "nextfs receive"): "nextfs send --resume" starts
 * a stream with the header, the original first command (SUBVOL or
 * SNAPSHOT) and RESUME, which says at which command index, stream
 * offset and prefix hash the commands that follow continue the original
 * stream.  A stock btrfs receive rejects it (an unknown command), as it
 * must: such a stream is only meaningful to the receiver that stopped.
 */
#ifndef NEXTFS_SENDSTREAM_H
#define NEXTFS_SENDSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>

#define NX_SS_MAGIC		"btrfs-stream"	/* with its NUL: 13 bytes */
#define NX_SS_MAGIC_LEN		13
#define NX_SS_HEADER_LEN	17		/* magic + u32 version */
#define NX_SS_CMD_HEADER_LEN	10		/* u32 len, u16 cmd, u32 crc */
#define NX_SS_TLV_HEADER_LEN	4		/* u16 type, u16 len */
#define NX_SS_UUID_LEN		16

/*
 * The largest command payload either side handles.  btrfs's kernel sends
 * at most 64 KiB commands in version 1 (every attribute is < 64 KiB) and
 * 16 KiB + 128 KiB (an encoded extent) in version 2; a receiver buffers
 * a whole command before it checks the CRC, so a hostile length is
 * refused here rather than allocated.
 */
#define NX_SS_MAX_PAYLOAD	(1U << 20)

/* Versions this module reads and writes. */
#define NX_SS_VERSION_1		1
#define NX_SS_VERSION_2		2

/* Commands (btrfs's numbers). */
enum {
	NX_SS_C_UNSPEC		= 0,
	NX_SS_C_SUBVOL		= 1,
	NX_SS_C_SNAPSHOT	= 2,
	NX_SS_C_MKFILE		= 3,
	NX_SS_C_MKDIR		= 4,
	NX_SS_C_MKNOD		= 5,
	NX_SS_C_MKFIFO		= 6,
	NX_SS_C_MKSOCK		= 7,
	NX_SS_C_SYMLINK		= 8,
	NX_SS_C_RENAME		= 9,
	NX_SS_C_LINK		= 10,
	NX_SS_C_UNLINK		= 11,
	NX_SS_C_RMDIR		= 12,
	NX_SS_C_SET_XATTR	= 13,
	NX_SS_C_REMOVE_XATTR	= 14,
	NX_SS_C_WRITE		= 15,
	NX_SS_C_CLONE		= 16,
	NX_SS_C_TRUNCATE	= 17,
	NX_SS_C_CHMOD		= 18,
	NX_SS_C_CHOWN		= 19,
	NX_SS_C_UTIMES		= 20,
	NX_SS_C_END		= 21,
	NX_SS_C_UPDATE_EXTENT	= 22,
	/* version 2 */
	NX_SS_C_FALLOCATE	= 23,
	NX_SS_C_FILEATTR	= 24,
	NX_SS_C_ENCODED_WRITE	= 25,
	/* nextfs's own (above): far from btrfs's numbers */
	NX_SS_C_RESUME		= 0x4e58,
};

/* Attributes (btrfs's numbers; nextfs's own are slots after them). */
enum {
	NX_SS_A_UNSPEC		= 0,
	NX_SS_A_UUID		= 1,	/* uuid */
	NX_SS_A_CTRANSID	= 2,	/* u64 */
	NX_SS_A_INO		= 3,	/* u64 */
	NX_SS_A_SIZE		= 4,	/* u64 */
	NX_SS_A_MODE		= 5,	/* u64 */
	NX_SS_A_UID		= 6,	/* u64 */
	NX_SS_A_GID		= 7,	/* u64 */
	NX_SS_A_RDEV		= 8,	/* u64 */
	NX_SS_A_CTIME		= 9,	/* timespec */
	NX_SS_A_MTIME		= 10,	/* timespec */
	NX_SS_A_ATIME		= 11,	/* timespec */
	NX_SS_A_OTIME		= 12,	/* timespec */
	NX_SS_A_XATTR_NAME	= 13,	/* string */
	NX_SS_A_XATTR_DATA	= 14,	/* data */
	NX_SS_A_PATH		= 15,	/* string */
	NX_SS_A_PATH_TO		= 16,	/* string */
	NX_SS_A_PATH_LINK	= 17,	/* string */
	NX_SS_A_FILE_OFFSET	= 18,	/* u64 */
	NX_SS_A_DATA		= 19,	/* data */
	NX_SS_A_CLONE_UUID	= 20,	/* uuid */
	NX_SS_A_CLONE_CTRANSID	= 21,	/* u64 */
	NX_SS_A_CLONE_PATH	= 22,	/* string */
	NX_SS_A_CLONE_OFFSET	= 23,	/* u64 */
	NX_SS_A_CLONE_LEN	= 24,	/* u64 */
	/* version 2 */
	NX_SS_A_FALLOCATE_MODE	= 25,	/* u32 */
	NX_SS_A_FILEATTR	= 26,	/* u64 */
	NX_SS_A_UNENCODED_FILE_LEN = 27, /* u64 */
	NX_SS_A_UNENCODED_LEN	= 28,	/* u64 */
	NX_SS_A_UNENCODED_OFFSET = 29,	/* u64 */
	NX_SS_A_COMPRESSION	= 30,	/* u32 */
	NX_SS_A_ENCRYPTION	= 31,	/* u32 */
	/* nextfs's own, in RESUME only; on the wire 0x4e01.. (below) */
	NX_SS_A_RESUME_INDEX	= 32,	/* u64: command index it continues at */
	NX_SS_A_RESUME_OFFSET	= 33,	/* u64: ... and that command's offset */
	NX_SS_A_RESUME_HASH	= 34,	/* u64: prefix hash of what it skips */
	NX_SS_A_COUNT		= 35,
};
/* On the wire nextfs's attributes are 0x4e01, 0x4e02, ... (slot 32, 33, ...). */
#define NX_SS_A_WIRE_PRIVATE	0x4e01

/* Decoder results besides 0 and errcode_t errors. */
#define NX_SS_MORE		(-1)	/* need more bytes: see nx_ss_need() */

/* Decoder flags. */
#define NX_SS_DEC_PRIVATE	0x1	/* accept NX_SS_C_RESUME */

struct nx_ss_attr {
	const unsigned char *data;	/* NULL: absent */
	uint32_t len;
};

/* One decoded command; attribute data points into the caller's buffer. */
struct nx_ss_cmd {
	uint16_t type;
	uint32_t len;			/* payload bytes */
	uint32_t crc;
	uint64_t index;			/* 0 = the first command */
	uint64_t offset;		/* of its header in the stream */
	struct nx_ss_attr attr[NX_SS_A_COUNT];
};

struct nx_ss_decoder {
	int flags;			/* NX_SS_DEC_* */
	uint32_t version;		/* from the header; 0 before it */
	uint64_t offset;		/* stream bytes consumed */
	uint64_t ncmds;			/* commands decoded */
	uint64_t hash;			/* prefix hash of what was consumed */
	int ended;			/* END decoded */
	size_t need;			/* after NX_SS_MORE: bytes wanted */
	char msg[256];			/* the last error, one line */
};

void nx_ss_dec_init(struct nx_ss_decoder *d, int flags);

/*
 * Decode the stream header from BUF (LEN bytes available): 0 and *USED =
 * NX_SS_HEADER_LEN, NX_SS_MORE, or an error (d->msg): not a send stream,
 * or a version other than 1 and 2.
 */
int nx_ss_decode_header(struct nx_ss_decoder *d, const void *buf, size_t len,
			size_t *used);

/*
 * Decode the next command from BUF (LEN bytes available, starting at the
 * command's header): 0 with *CMD filled and *USED its total length;
 * NX_SS_MORE when BUF does not hold the whole command yet (d->need says
 * how many bytes it needs from BUF's start; the decoder is unchanged); or
 * an error (EXT2_ET_BAD_CRC for a CRC mismatch, EINVAL for everything
 * else; d->msg says which command, where and what).  Commands after END
 * are an error: END ends the stream.
 */
int nx_ss_decode_cmd(struct nx_ss_decoder *d, const void *buf, size_t len,
		     struct nx_ss_cmd *cmd, size_t *used);

/*
 * The stream ended after AVAIL bytes of an incomplete header or command
 * (0: at a command boundary without END): put the "stream cut" line into
 * d->msg and return EXT2_ET_SHORT_READ.
 */
errcode_t nx_ss_dec_truncated(struct nx_ss_decoder *d, size_t avail);

/*
 * Typed access to an attribute of a decoded command (the decoder checked
 * sizes and presence of required ones; absent optional ones are ENOENT).
 * A string is returned as pointer and length (no NUL inside, none after).
 */
int nx_ss_has(const struct nx_ss_cmd *cmd, int attr);
uint64_t nx_ss_u64(const struct nx_ss_cmd *cmd, int attr);
uint32_t nx_ss_u32(const struct nx_ss_cmd *cmd, int attr);
void nx_ss_time(const struct nx_ss_cmd *cmd, int attr, int64_t *sec,
		uint32_t *nsec);
const unsigned char *nx_ss_uuid(const struct nx_ss_cmd *cmd, int attr);
/* String ATTR as a NUL-terminated copy in BUF of SIZE bytes; ENAMETOOLONG. */
errcode_t nx_ss_str(const struct nx_ss_cmd *cmd, int attr, char *buf,
		    size_t size);

/* "rename", "write", ... ("command 77" style for unknown ones: BUF). */
const char *nx_ss_cmd_name(unsigned type);
const char *nx_ss_attr_name(int attr);

/* The prefix hash (above): start, and fold in BYTES of a header. */
#define NX_SS_HASH_INIT		1469598103934665603ULL
uint64_t nx_ss_hash(uint64_t h, const void *bytes, size_t len);

/*
 * The encoder.  Bytes accumulate in e->buf (e->len of them); take them
 * away with nx_ss_enc_consume() whenever convenient (they are whole
 * commands once nx_ss_enc_end() returned).  Errors are sticky: the first
 * one (an attribute too long for its length field, a command over
 * NX_SS_MAX_PAYLOAD, an attribute after version 2's DATA, out of memory)
 * is returned by every later call, and by nx_ss_enc_end().
 */
struct nx_ss_enc {
	unsigned char *buf;
	size_t len, cap;
	uint32_t version;
	size_t cmd_start;		/* where the open command's header is */
	int in_cmd;
	int data_last;			/* v2: DATA written, nothing may follow */
	uint64_t ncmds;			/* commands ended */
	uint64_t offset;		/* stream bytes produced (consumed too) */
	uint64_t hash;			/* prefix hash of the ended commands */
	errcode_t err;
};

void nx_ss_enc_init(struct nx_ss_enc *e, uint32_t version);
void nx_ss_enc_free(struct nx_ss_enc *e);
errcode_t nx_ss_enc_header(struct nx_ss_enc *e);
errcode_t nx_ss_enc_begin(struct nx_ss_enc *e, unsigned type);
errcode_t nx_ss_enc_u64(struct nx_ss_enc *e, int attr, uint64_t v);
errcode_t nx_ss_enc_u32(struct nx_ss_enc *e, int attr, uint32_t v);
errcode_t nx_ss_enc_bytes(struct nx_ss_enc *e, int attr, const void *p,
			  size_t len);
errcode_t nx_ss_enc_str(struct nx_ss_enc *e, int attr, const char *s);
errcode_t nx_ss_enc_uuid(struct nx_ss_enc *e, int attr,
			 const unsigned char uuid[NX_SS_UUID_LEN]);
errcode_t nx_ss_enc_time(struct nx_ss_enc *e, int attr, int64_t sec,
			 uint32_t nsec);
/* Close the open command: its length and CRC are filled in. */
errcode_t nx_ss_enc_end(struct nx_ss_enc *e);
/*
 * Drop the first N bytes of e->buf (written out by the caller); never
 * bytes of a command still open.
 */
void nx_ss_enc_consume(struct nx_ss_enc *e, size_t n);
/* Write the complete commands of e->buf to FD and consume them: 0 or an errno. */
errcode_t nx_ss_enc_flush(struct nx_ss_enc *e, int fd);
/* The RESUME command (above): continue at command INDEX, OFFSET, HASH. */
errcode_t nx_ss_enc_resume(struct nx_ss_enc *e, uint64_t index,
			   uint64_t offset, uint64_t hash);

/*
 * The resume token: where a receiver stopped, for "nextfs send --resume
 * TOKEN" (docs/replication.md).  On the wire (before base64): "nxr1",
 * then little-endian the stream version (u32), the snapshot's UUID and
 * ctransid, the parent's UUID and ctransid (zero for a full stream), the
 * index and offset of the first command not applied and the prefix hash
 * of the commands before it (u64 each), and the CRC32C (seed ~0,
 * inverted, as everywhere but in btrfs streams) of all that (u32): 84
 * bytes, written as 112 characters of base64url without padding.  The
 * sender checks it against its own snapshots and sends nothing but the
 * stream of that pair, from that command on.
 */
struct nx_ss_token {
	uint32_t version;
	unsigned char uuid[NX_SS_UUID_LEN];
	uint64_t ctransid;
	unsigned char parent_uuid[NX_SS_UUID_LEN];
	uint64_t parent_ctransid;
	uint64_t index;
	uint64_t offset;
	uint64_t hash;
};
#define NX_SS_TOKEN_LEN		112	/* characters, without the NUL */
/* Into BUF (at least NX_SS_TOKEN_LEN + 1 bytes). */
void nx_ss_token_encode(const struct nx_ss_token *t,
			char buf[NX_SS_TOKEN_LEN + 1]);
/* EINVAL for anything but a token written by nx_ss_token_encode(). */
errcode_t nx_ss_token_decode(const char *s, struct nx_ss_token *t);

#endif
