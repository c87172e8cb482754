/*
 * sendstream.c - the btrfs send stream format: encoder and strict
 * decoder (sendstream.h says what the format is and what "strict" means).
 *
 * Written from btrfs-progs' Documentation/dev/dev-send-stream.rst and
 * checked against streams of a real "btrfs send" (tests/unit
 * test_sendstream.c decodes one made at test time).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/crc32c.h"
#include "nextfs/fdio.h"
#include "nextfs/grow.h"
#include "nextfs/sendstream.h"

/* ------------------------------------------------------------------ */
/* Little-endian fields, at any alignment.                             */

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* ------------------------------------------------------------------ */
/* What the format knows.                                              */

enum attr_type { T_UNKNOWN, T_U32, T_U64, T_UUID, T_TIME, T_STR, T_DATA };

struct attr_desc {
	const char *name;
	enum attr_type type;
	uint32_t version;		/* first stream version that has it */
};

#define A(slot, n, t, v) [slot] = { n, t, v }
#define PRIV 0				/* nextfs's own: private streams only */

static const struct attr_desc attrs[NX_SS_A_COUNT] = {
	A(NX_SS_A_UUID, "uuid", T_UUID, 1),
	A(NX_SS_A_CTRANSID, "ctransid", T_U64, 1),
	A(NX_SS_A_INO, "ino", T_U64, 1),
	A(NX_SS_A_SIZE, "size", T_U64, 1),
	A(NX_SS_A_MODE, "mode", T_U64, 1),
	A(NX_SS_A_UID, "uid", T_U64, 1),
	A(NX_SS_A_GID, "gid", T_U64, 1),
	A(NX_SS_A_RDEV, "rdev", T_U64, 1),
	A(NX_SS_A_CTIME, "ctime", T_TIME, 1),
	A(NX_SS_A_MTIME, "mtime", T_TIME, 1),
	A(NX_SS_A_ATIME, "atime", T_TIME, 1),
	A(NX_SS_A_OTIME, "otime", T_TIME, 1),
	A(NX_SS_A_XATTR_NAME, "xattr_name", T_STR, 1),
	A(NX_SS_A_XATTR_DATA, "xattr_data", T_DATA, 1),
	A(NX_SS_A_PATH, "path", T_STR, 1),
	A(NX_SS_A_PATH_TO, "path_to", T_STR, 1),
	A(NX_SS_A_PATH_LINK, "path_link", T_STR, 1),
	A(NX_SS_A_FILE_OFFSET, "file_offset", T_U64, 1),
	A(NX_SS_A_DATA, "data", T_DATA, 1),
	A(NX_SS_A_CLONE_UUID, "clone_uuid", T_UUID, 1),
	A(NX_SS_A_CLONE_CTRANSID, "clone_ctransid", T_U64, 1),
	A(NX_SS_A_CLONE_PATH, "clone_path", T_STR, 1),
	A(NX_SS_A_CLONE_OFFSET, "clone_offset", T_U64, 1),
	A(NX_SS_A_CLONE_LEN, "clone_len", T_U64, 1),
	A(NX_SS_A_FALLOCATE_MODE, "fallocate_mode", T_U32, 2),
	A(NX_SS_A_FILEATTR, "fileattr", T_U64, 2),
	A(NX_SS_A_UNENCODED_FILE_LEN, "unencoded_file_len", T_U64, 2),
	A(NX_SS_A_UNENCODED_LEN, "unencoded_len", T_U64, 2),
	A(NX_SS_A_UNENCODED_OFFSET, "unencoded_offset", T_U64, 2),
	A(NX_SS_A_COMPRESSION, "compression", T_U32, 2),
	A(NX_SS_A_ENCRYPTION, "encryption", T_U32, 2),
	A(NX_SS_A_RESUME_INDEX, "resume_index", T_U64, PRIV),
	A(NX_SS_A_RESUME_OFFSET, "resume_offset", T_U64, PRIV),
	A(NX_SS_A_RESUME_HASH, "resume_hash", T_U64, PRIV),
};

#define BIT(a) (1ULL << (a))

struct cmd_desc {
	const char *name;
	uint32_t version;		/* 0: nextfs's own */
	uint64_t required;		/* BIT(attribute) of those it must have */
};

static const struct cmd_desc cmds[] = {
	[NX_SS_C_SUBVOL] = { "subvol", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_UUID) | BIT(NX_SS_A_CTRANSID) },
	[NX_SS_C_SNAPSHOT] = { "snapshot", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_UUID) | BIT(NX_SS_A_CTRANSID) |
		BIT(NX_SS_A_CLONE_UUID) | BIT(NX_SS_A_CLONE_CTRANSID) },
	[NX_SS_C_MKFILE] = { "mkfile", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_INO) },
	[NX_SS_C_MKDIR] = { "mkdir", 1, BIT(NX_SS_A_PATH) | BIT(NX_SS_A_INO) },
	[NX_SS_C_MKNOD] = { "mknod", 1, BIT(NX_SS_A_PATH) | BIT(NX_SS_A_INO) |
		BIT(NX_SS_A_MODE) | BIT(NX_SS_A_RDEV) },
	[NX_SS_C_MKFIFO] = { "mkfifo", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_INO) },
	[NX_SS_C_MKSOCK] = { "mksock", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_INO) },
	[NX_SS_C_SYMLINK] = { "symlink", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_INO) | BIT(NX_SS_A_PATH_LINK) },
	[NX_SS_C_RENAME] = { "rename", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_PATH_TO) },
	[NX_SS_C_LINK] = { "link", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_PATH_LINK) },
	[NX_SS_C_UNLINK] = { "unlink", 1, BIT(NX_SS_A_PATH) },
	[NX_SS_C_RMDIR] = { "rmdir", 1, BIT(NX_SS_A_PATH) },
	[NX_SS_C_SET_XATTR] = { "set_xattr", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_XATTR_NAME) | BIT(NX_SS_A_XATTR_DATA) },
	[NX_SS_C_REMOVE_XATTR] = { "remove_xattr", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_XATTR_NAME) },
	[NX_SS_C_WRITE] = { "write", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FILE_OFFSET) | BIT(NX_SS_A_DATA) },
	[NX_SS_C_CLONE] = { "clone", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FILE_OFFSET) | BIT(NX_SS_A_CLONE_LEN) |
		BIT(NX_SS_A_CLONE_UUID) | BIT(NX_SS_A_CLONE_CTRANSID) |
		BIT(NX_SS_A_CLONE_PATH) | BIT(NX_SS_A_CLONE_OFFSET) },
	[NX_SS_C_TRUNCATE] = { "truncate", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_SIZE) },
	[NX_SS_C_CHMOD] = { "chmod", 1, BIT(NX_SS_A_PATH) | BIT(NX_SS_A_MODE) },
	[NX_SS_C_CHOWN] = { "chown", 1, BIT(NX_SS_A_PATH) | BIT(NX_SS_A_UID) |
		BIT(NX_SS_A_GID) },
	[NX_SS_C_UTIMES] = { "utimes", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_ATIME) | BIT(NX_SS_A_MTIME) | BIT(NX_SS_A_CTIME) },
	[NX_SS_C_END] = { "end", 1, 0 },
	[NX_SS_C_UPDATE_EXTENT] = { "update_extent", 1, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FILE_OFFSET) | BIT(NX_SS_A_SIZE) },
	[NX_SS_C_FALLOCATE] = { "fallocate", 2, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FALLOCATE_MODE) | BIT(NX_SS_A_FILE_OFFSET) |
		BIT(NX_SS_A_SIZE) },
	[NX_SS_C_FILEATTR] = { "fileattr", 2, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FILEATTR) },
	[NX_SS_C_ENCODED_WRITE] = { "encoded_write", 2, BIT(NX_SS_A_PATH) |
		BIT(NX_SS_A_FILE_OFFSET) | BIT(NX_SS_A_UNENCODED_FILE_LEN) |
		BIT(NX_SS_A_UNENCODED_LEN) | BIT(NX_SS_A_UNENCODED_OFFSET) |
		BIT(NX_SS_A_DATA) },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct cmd_desc resume_desc = { "resume", 0,
	BIT(NX_SS_A_RESUME_INDEX) | BIT(NX_SS_A_RESUME_OFFSET) |
	BIT(NX_SS_A_RESUME_HASH) };

static const struct cmd_desc *cmd_desc(unsigned type)
{
	if (type == NX_SS_C_RESUME)
		return &resume_desc;
	if (type < NCMDS && cmds[type].name)
		return &cmds[type];
	return NULL;
}

const char *nx_ss_cmd_name(unsigned type)
{
	const struct cmd_desc *c = cmd_desc(type);

	return c ? c->name : "unknown";
}

const char *nx_ss_attr_name(int attr)
{
	if (attr > 0 && attr < NX_SS_A_COUNT && attrs[attr].name)
		return attrs[attr].name;
	return "unknown";
}

/* The slot of wire attribute number WIRE, or -1. */
static int attr_slot(unsigned wire)
{
	if (wire >= 1 && wire <= NX_SS_A_ENCRYPTION)
		return (int)wire;
	if (wire >= NX_SS_A_WIRE_PRIVATE &&
	    wire < NX_SS_A_WIRE_PRIVATE + (NX_SS_A_COUNT - NX_SS_A_RESUME_INDEX))
		return (int)(wire - NX_SS_A_WIRE_PRIVATE) + NX_SS_A_RESUME_INDEX;
	return -1;
}

static unsigned attr_wire(int slot)
{
	if (slot >= NX_SS_A_RESUME_INDEX)
		return NX_SS_A_WIRE_PRIVATE + (unsigned)(slot -
						NX_SS_A_RESUME_INDEX);
	return (unsigned)slot;
}

static size_t type_size(enum attr_type t)
{
	switch (t) {
	case T_U32:
		return 4;
	case T_U64:
		return 8;
	case T_UUID:
		return NX_SS_UUID_LEN;
	case T_TIME:
		return 12;
	default:
		return 0;	/* any length */
	}
}

uint64_t nx_ss_hash(uint64_t h, const void *bytes, size_t len)
{
	const unsigned char *p = bytes;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* btrfs's command checksum: over the header with a zero CRC field. */
static uint32_t cmd_crc(const unsigned char *hdr, const unsigned char *payload,
			uint32_t len)
{
	unsigned char h[NX_SS_CMD_HEADER_LEN];
	uint32_t crc;

	memcpy(h, hdr, 6);
	memset(h + 6, 0, 4);
	crc = ext2fs_crc32c_le(0, h, sizeof(h));
	return ext2fs_crc32c_le(crc, payload, len);
}

/* ------------------------------------------------------------------ */
/* Decoder.                                                            */

void nx_ss_dec_init(struct nx_ss_decoder *d, int flags)
{
	memset(d, 0, sizeof(*d));
	d->flags = flags;
	d->hash = NX_SS_HASH_INIT;
	nx_crc32c_init();
}

static int fail(struct nx_ss_decoder *d, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct nx_ss_decoder *d, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	va_end(ap);
	return err;
}

int nx_ss_decode_header(struct nx_ss_decoder *d, const void *buf, size_t len,
			size_t *used)
{
	const unsigned char *p = buf;
	uint32_t version;

	*used = 0;
	if (d->version)
		return fail(d, EINVAL, "the stream header was read already");
	if (len < NX_SS_HEADER_LEN) {
		/* A stream that cannot be one says so as early as it can. */
		if (memcmp(p, NX_SS_MAGIC, len < NX_SS_MAGIC_LEN ? len :
			   NX_SS_MAGIC_LEN))
			goto not_a_stream;
		d->need = NX_SS_HEADER_LEN;
		return NX_SS_MORE;
	}
	if (memcmp(p, NX_SS_MAGIC, NX_SS_MAGIC_LEN))
		goto not_a_stream;
	version = get32(p + NX_SS_MAGIC_LEN);
	if (version != NX_SS_VERSION_1 && version != NX_SS_VERSION_2)
		return fail(d, EINVAL, "send stream version %" PRIu32 " is not "
			    "supported (only 1 and 2)", version);
	d->version = version;
	d->offset = NX_SS_HEADER_LEN;
	d->hash = nx_ss_hash(NX_SS_HASH_INIT, p, NX_SS_HEADER_LEN);
	*used = NX_SS_HEADER_LEN;
	return 0;
not_a_stream:
	return fail(d, EINVAL, "not a btrfs send stream (it does not start "
		    "with \"btrfs-stream\")");
}

#define AT "command %" PRIu64 " (%s) at offset %" PRIu64 ": "

/* Split the payload into attributes, checking each against the format. */
static int parse_attrs(struct nx_ss_decoder *d, struct nx_ss_cmd *cmd,
		       const unsigned char *payload, const char *name)
{
	uint32_t pos = 0, len = cmd->len;

	while (pos < len) {
		unsigned wire;
		uint32_t alen;
		int slot;
		const struct attr_desc *a;
		size_t want;

		if (len - pos < 2)
			return fail(d, EINVAL, AT "an attribute header runs "
				    "past the end of the command", cmd->index,
				    name, cmd->offset);
		wire = get16(payload + pos);
		slot = attr_slot(wire);
		a = slot > 0 ? &attrs[slot] : NULL;
		if (!a || (a->version == PRIV ?
			   cmd->type != NX_SS_C_RESUME :
			   a->version > d->version))
			return fail(d, EINVAL, AT "unknown attribute type %u",
				    cmd->index, name, cmd->offset, wire);
		pos += 2;
		if (d->version >= 2 && slot == NX_SS_A_DATA) {
			alen = len - pos;	/* v2: the rest, and last */
		} else {
			if (len - pos < 2)
				return fail(d, EINVAL, AT "an attribute header "
					    "runs past the end of the command",
					    cmd->index, name, cmd->offset);
			alen = get16(payload + pos);
			pos += 2;
		}
		if (alen > len - pos)
			return fail(d, EINVAL, AT "attribute %s (%" PRIu32
				    " bytes) runs past the end of the command",
				    cmd->index, name, cmd->offset, a->name,
				    alen);
		if (cmd->attr[slot].data)
			return fail(d, EINVAL, AT "attribute %s appears twice",
				    cmd->index, name, cmd->offset, a->name);
		want = type_size(a->type);
		if (want && alen != want)
			return fail(d, EINVAL, AT "attribute %s has %" PRIu32
				    " bytes instead of %zu", cmd->index, name,
				    cmd->offset, a->name, alen, want);
		if (a->type == T_STR && memchr(payload + pos, 0, alen))
			return fail(d, EINVAL, AT "attribute %s holds a NUL "
				    "byte", cmd->index, name, cmd->offset,
				    a->name);
		cmd->attr[slot].data = payload + pos;
		cmd->attr[slot].len = alen;
		pos += alen;
	}
	return 0;
}

/* Is the command known here, in this stream? */
static int check_type(struct nx_ss_decoder *d, const struct nx_ss_cmd *cmd,
		      const struct cmd_desc *c)
{
	if (!c)
		return fail(d, EINVAL, "command %" PRIu64 " at offset %" PRIu64
			    ": unknown command type %u", cmd->index,
			    cmd->offset, cmd->type);
	if (c->version == 0 && !(d->flags & NX_SS_DEC_PRIVATE))
		return fail(d, EINVAL, AT "a nextfs resume stream; only "
			    "\"nextfs receive\" applies it", cmd->index,
			    c->name, cmd->offset);
	if (c->version > d->version)
		return fail(d, EINVAL, AT "needs stream version %" PRIu32
			    ", the stream is version %" PRIu32, cmd->index,
			    c->name, cmd->offset, c->version, d->version);
	return 0;
}

/* Does it have every attribute it needs? */
static int check_required(struct nx_ss_decoder *d, const struct nx_ss_cmd *cmd,
			  const struct cmd_desc *c)
{
	int a;

	for (a = 1; a < NX_SS_A_COUNT; a++)
		if ((c->required & BIT(a)) && !cmd->attr[a].data)
			return fail(d, EINVAL, AT "attribute %s is missing",
				    cmd->index, c->name, cmd->offset,
				    attrs[a].name);
	return 0;
}

int nx_ss_decode_cmd(struct nx_ss_decoder *d, const void *buf, size_t len,
		     struct nx_ss_cmd *cmd, size_t *used)
{
	const unsigned char *p = buf;
	const struct cmd_desc *c;
	uint32_t plen, crc;
	int err;

	*used = 0;
	memset(cmd, 0, sizeof(*cmd));
	cmd->index = d->ncmds;
	cmd->offset = d->offset;
	if (!d->version)
		return fail(d, EINVAL, "no stream header was read");
	if (d->ended)
		return fail(d, EINVAL, "data after the end command, at offset "
			    "%" PRIu64, d->offset);
	if (len < NX_SS_CMD_HEADER_LEN) {
		d->need = NX_SS_CMD_HEADER_LEN;
		return NX_SS_MORE;
	}
	plen = get32(p);
	cmd->type = get16(p + 4);
	crc = get32(p + 6);
	c = cmd_desc(cmd->type);
	if (plen > NX_SS_MAX_PAYLOAD)
		return fail(d, EINVAL, AT "length %" PRIu32 " is more than a "
			    "command may have (%u)", cmd->index,
			    nx_ss_cmd_name(cmd->type), cmd->offset, plen,
			    NX_SS_MAX_PAYLOAD);
	if (len - NX_SS_CMD_HEADER_LEN < plen) {
		d->need = NX_SS_CMD_HEADER_LEN + (size_t)plen;
		return NX_SS_MORE;
	}
	cmd->len = plen;
	cmd->crc = cmd_crc(p, p + NX_SS_CMD_HEADER_LEN, plen);
	if (cmd->crc != crc)
		return fail(d, EXT2_ET_BAD_CRC, AT "checksum mismatch (the "
			    "stream says 0x%08" PRIx32 ", the command has "
			    "0x%08" PRIx32 ")", cmd->index,
			    nx_ss_cmd_name(cmd->type), cmd->offset, crc,
			    cmd->crc);
	err = check_type(d, cmd, c);
	if (!err)
		err = parse_attrs(d, cmd, p + NX_SS_CMD_HEADER_LEN, c->name);
	if (!err)
		err = check_required(d, cmd, c);
	if (err)
		return err;
	*used = NX_SS_CMD_HEADER_LEN + (size_t)plen;
	d->hash = nx_ss_hash(d->hash, p, NX_SS_CMD_HEADER_LEN);
	d->offset += *used;
	d->ncmds++;
	if (cmd->type == NX_SS_C_END)
		d->ended = 1;
	if (cmd->type == NX_SS_C_RESUME) {
		/* What follows continues the original stream there. */
		d->ncmds = nx_ss_u64(cmd, NX_SS_A_RESUME_INDEX);
		d->offset = nx_ss_u64(cmd, NX_SS_A_RESUME_OFFSET);
		d->hash = nx_ss_u64(cmd, NX_SS_A_RESUME_HASH);
	}
	return 0;
}

errcode_t nx_ss_dec_truncated(struct nx_ss_decoder *d, size_t avail)
{
	if (!d->version)
		fail(d, 0, "the stream is cut: %zu of the %u bytes of its "
		     "header", avail, NX_SS_HEADER_LEN);
	else if (avail == 0)
		fail(d, 0, "the stream is cut after command %" PRIu64 " at "
		     "offset %" PRIu64 ", without an end command",
		     d->ncmds ? d->ncmds - 1 : 0, d->offset);
	else
		fail(d, 0, "the stream is cut in command %" PRIu64 " at offset "
		     "%" PRIu64 ": %zu of its %zu bytes", d->ncmds, d->offset,
		     avail, d->need > avail ? d->need : avail + 1);
	return EXT2_ET_SHORT_READ;
}

int nx_ss_has(const struct nx_ss_cmd *cmd, int attr)
{
	return attr > 0 && attr < NX_SS_A_COUNT && cmd->attr[attr].data;
}

uint64_t nx_ss_u64(const struct nx_ss_cmd *cmd, int attr)
{
	return nx_ss_has(cmd, attr) && cmd->attr[attr].len == 8 ?
	       get64(cmd->attr[attr].data) : 0;
}

uint32_t nx_ss_u32(const struct nx_ss_cmd *cmd, int attr)
{
	return nx_ss_has(cmd, attr) && cmd->attr[attr].len == 4 ?
	       get32(cmd->attr[attr].data) : 0;
}

void nx_ss_time(const struct nx_ss_cmd *cmd, int attr, int64_t *sec,
		uint32_t *nsec)
{
	*sec = 0;
	*nsec = 0;
	if (nx_ss_has(cmd, attr) && cmd->attr[attr].len == 12) {
		*sec = (int64_t)get64(cmd->attr[attr].data);
		*nsec = get32(cmd->attr[attr].data + 8);
	}
}

const unsigned char *nx_ss_uuid(const struct nx_ss_cmd *cmd, int attr)
{
	static const unsigned char zero[NX_SS_UUID_LEN];

	return nx_ss_has(cmd, attr) && cmd->attr[attr].len == NX_SS_UUID_LEN ?
	       cmd->attr[attr].data : zero;
}

errcode_t nx_ss_str(const struct nx_ss_cmd *cmd, int attr, char *buf,
		    size_t size)
{
	uint32_t len = nx_ss_has(cmd, attr) ? cmd->attr[attr].len : 0;

	if (len >= size)
		return ENAMETOOLONG;
	if (len)
		memcpy(buf, cmd->attr[attr].data, len);
	buf[len] = 0;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Encoder.                                                            */

void nx_ss_enc_init(struct nx_ss_enc *e, uint32_t version)
{
	memset(e, 0, sizeof(*e));
	e->version = version;
	e->hash = NX_SS_HASH_INIT;
	if (version != NX_SS_VERSION_1 && version != NX_SS_VERSION_2)
		e->err = EINVAL;
	nx_crc32c_init();
}

void nx_ss_enc_free(struct nx_ss_enc *e)
{
	free(e->buf);
	e->buf = NULL;
	e->len = e->cap = 0;
}

static errcode_t room(struct nx_ss_enc *e, size_t n)
{
	if (e->err)
		return e->err;
	if (nx_grow_by((void **)&e->buf, &e->cap, e->len, n, 1, 4096))
		return e->err = ENOMEM;
	return 0;
}

errcode_t nx_ss_enc_header(struct nx_ss_enc *e)
{
	if (!room(e, NX_SS_HEADER_LEN)) {
		memcpy(e->buf + e->len, NX_SS_MAGIC, NX_SS_MAGIC_LEN);
		put32(e->buf + e->len + NX_SS_MAGIC_LEN, e->version);
		e->hash = nx_ss_hash(NX_SS_HASH_INIT, e->buf + e->len,
				     NX_SS_HEADER_LEN);
		e->len += NX_SS_HEADER_LEN;
		e->offset += NX_SS_HEADER_LEN;
	}
	return e->err;
}

errcode_t nx_ss_enc_begin(struct nx_ss_enc *e, unsigned type)
{
	if (!e->err && (e->in_cmd || type > 0xffff))
		e->err = EINVAL;
	if (!room(e, NX_SS_CMD_HEADER_LEN)) {
		e->cmd_start = e->len;
		memset(e->buf + e->len, 0, NX_SS_CMD_HEADER_LEN);
		put16(e->buf + e->len + 4, (uint16_t)type);
		e->len += NX_SS_CMD_HEADER_LEN;
		e->in_cmd = 1;
		e->data_last = 0;
	}
	return e->err;
}

errcode_t nx_ss_enc_bytes(struct nx_ss_enc *e, int attr, const void *p,
			  size_t len)
{
	int implicit = e->version >= 2 && attr == NX_SS_A_DATA;
	size_t hdr = implicit ? 2 : NX_SS_TLV_HEADER_LEN;

	if (!e->err && (!e->in_cmd || e->data_last || attr <= 0 ||
			attr >= NX_SS_A_COUNT || (!implicit && len > 0xffff)))
		e->err = EINVAL;
	if (!e->err && e->len - e->cmd_start - NX_SS_CMD_HEADER_LEN + hdr +
	    len > NX_SS_MAX_PAYLOAD)
		e->err = E2BIG;
	if (room(e, hdr + len))
		return e->err;
	put16(e->buf + e->len, (uint16_t)attr_wire(attr));
	if (!implicit)
		put16(e->buf + e->len + 2, (uint16_t)len);
	if (len)
		memcpy(e->buf + e->len + hdr, p, len);
	e->len += hdr + len;
	e->data_last = implicit;
	return 0;
}

errcode_t nx_ss_enc_u64(struct nx_ss_enc *e, int attr, uint64_t v)
{
	unsigned char b[8];

	put64(b, v);
	return nx_ss_enc_bytes(e, attr, b, sizeof(b));
}

errcode_t nx_ss_enc_u32(struct nx_ss_enc *e, int attr, uint32_t v)
{
	unsigned char b[4];

	put32(b, v);
	return nx_ss_enc_bytes(e, attr, b, sizeof(b));
}

errcode_t nx_ss_enc_str(struct nx_ss_enc *e, int attr, const char *s)
{
	return nx_ss_enc_bytes(e, attr, s, strlen(s));
}

errcode_t nx_ss_enc_uuid(struct nx_ss_enc *e, int attr,
			 const unsigned char uuid[NX_SS_UUID_LEN])
{
	return nx_ss_enc_bytes(e, attr, uuid, NX_SS_UUID_LEN);
}

errcode_t nx_ss_enc_time(struct nx_ss_enc *e, int attr, int64_t sec,
			 uint32_t nsec)
{
	unsigned char b[12];

	put64(b, (uint64_t)sec);
	put32(b + 8, nsec);
	return nx_ss_enc_bytes(e, attr, b, sizeof(b));
}

errcode_t nx_ss_enc_end(struct nx_ss_enc *e)
{
	unsigned char *h;
	uint32_t plen;

	if (!e->err && !e->in_cmd)
		e->err = EINVAL;
	if (e->err)
		return e->err;
	h = e->buf + e->cmd_start;
	plen = (uint32_t)(e->len - e->cmd_start - NX_SS_CMD_HEADER_LEN);
	put32(h, plen);
	put32(h + 6, cmd_crc(h, h + NX_SS_CMD_HEADER_LEN, plen));
	e->hash = nx_ss_hash(e->hash, h, NX_SS_CMD_HEADER_LEN);
	e->offset += NX_SS_CMD_HEADER_LEN + (uint64_t)plen;
	e->ncmds++;
	e->in_cmd = 0;
	e->data_last = 0;
	return 0;
}

/* Whole commands only: never into one still open. */
static size_t complete_bytes(const struct nx_ss_enc *e)
{
	return e->in_cmd ? e->cmd_start : e->len;
}

void nx_ss_enc_consume(struct nx_ss_enc *e, size_t n)
{
	if (n > complete_bytes(e))
		n = complete_bytes(e);
	memmove(e->buf, e->buf + n, e->len - n);
	e->len -= n;
	if (e->in_cmd)
		e->cmd_start -= n;
}

errcode_t nx_ss_enc_flush(struct nx_ss_enc *e, int fd)
{
	size_t done;
	errcode_t err = nx_write_all(fd, e->buf, complete_bytes(e), NX_FD_POS,
				     &done);

	/* What went out is gone, also when the write failed part way. */
	nx_ss_enc_consume(e, done);
	return err;
}

errcode_t nx_ss_enc_resume(struct nx_ss_enc *e, uint64_t index,
			   uint64_t offset, uint64_t hash)
{
	nx_ss_enc_begin(e, NX_SS_C_RESUME);
	nx_ss_enc_u64(e, NX_SS_A_RESUME_INDEX, index);
	nx_ss_enc_u64(e, NX_SS_A_RESUME_OFFSET, offset);
	nx_ss_enc_u64(e, NX_SS_A_RESUME_HASH, hash);
	return nx_ss_enc_end(e);
}

/* ------------------------------------------------------------------ */
/* Resume tokens.                                                      */

#define TOKEN_MAGIC	"nxr1"
#define TOKEN_BYTES	84

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void token_pack(const struct nx_ss_token *t,
		       unsigned char b[TOKEN_BYTES])
{
	memcpy(b, TOKEN_MAGIC, 4);
	put32(b + 4, t->version);
	memcpy(b + 8, t->uuid, NX_SS_UUID_LEN);
	put64(b + 24, t->ctransid);
	memcpy(b + 32, t->parent_uuid, NX_SS_UUID_LEN);
	put64(b + 48, t->parent_ctransid);
	put64(b + 56, t->index);
	put64(b + 64, t->offset);
	put64(b + 72, t->hash);
	put32(b + 80, ~ext2fs_crc32c_le(~0U, b, 80));
}

void nx_ss_token_encode(const struct nx_ss_token *t,
			char buf[NX_SS_TOKEN_LEN + 1])
{
	unsigned char b[TOKEN_BYTES];
	size_t i, o = 0;

	nx_crc32c_init();
	token_pack(t, b);
	for (i = 0; i < TOKEN_BYTES; i += 3) {	/* 84 = 28 * 3: no padding */
		uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 |
			     b[i + 2];

		buf[o++] = b64[v >> 18];
		buf[o++] = b64[(v >> 12) & 63];
		buf[o++] = b64[(v >> 6) & 63];
		buf[o++] = b64[v & 63];
	}
	buf[o] = 0;
}

errcode_t nx_ss_token_decode(const char *s, struct nx_ss_token *t)
{
	unsigned char b[TOKEN_BYTES];
	size_t i, o = 0;

	nx_crc32c_init();
	if (strlen(s) != NX_SS_TOKEN_LEN)
		return EINVAL;
	for (i = 0; i < NX_SS_TOKEN_LEN; i += 4) {
		uint32_t v = 0;
		int k;

		for (k = 0; k < 4; k++) {
			const char *p = memchr(b64, s[i + k], 64);

			if (!p || !s[i + k])
				return EINVAL;
			v = v << 6 | (uint32_t)(p - b64);
		}
		b[o++] = (unsigned char)(v >> 16);
		b[o++] = (unsigned char)(v >> 8);
		b[o++] = (unsigned char)v;
	}
	if (memcmp(b, TOKEN_MAGIC, 4) ||
	    get32(b + 80) != ~ext2fs_crc32c_le(~0U, b, 80))
		return EINVAL;
	memset(t, 0, sizeof(*t));
	t->version = get32(b + 4);
	memcpy(t->uuid, b + 8, NX_SS_UUID_LEN);
	t->ctransid = get64(b + 24);
	memcpy(t->parent_uuid, b + 32, NX_SS_UUID_LEN);
	t->parent_ctransid = get64(b + 48);
	t->index = get64(b + 56);
	t->offset = get64(b + 64);
	t->hash = get64(b + 72);
	return 0;
}
