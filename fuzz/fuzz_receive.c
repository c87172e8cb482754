/*
 * fuzz_receive.c - libFuzzer harness: mutated send streams received
 * (receive.h) into a small ext4 image, the way "nextfs receive IMAGE"
 * does it, and the receive's contract checked afterwards.
 *
 * An input is a flags byte and a stream:
 *   bit 0  recompute every command's CRC32C before feeding (so that the
 *          mutations reach the checks behind the checksum);
 *   bit 1  the target holds a received snapshot "base" (identity UA
 *          below, a small tree): incremental streams have their parent;
 *   bit 2  feed the stream in 7-byte pieces (else in one);
 *   bit 3  -F.
 * The contract ("violations", which abort): the receive's result is
 * DONE and the stream's snapshot exists, or it failed with a message;
 * a failure that is not resumable leaves no cursor and no
 * /.nextfs-receive; a resumable one leaves a cursor that --abort then
 * gives up; the volume closes and opens again.  Crashes and sanitizer
 * reports are findings as always.
 *
 * On start it writes two seeds into NEXTFS_FUZZ_SEEDS (if set): a full
 * and an incremental stream of every kind of command.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nextfs/crc32c.h"
#include "nextfs/dir.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/receive.h"
#include "nextfs/sendstream.h"
#include "nextfs/snapshot.h"

#define IMAGE_BYTES	(2U << 20)

static const unsigned char UA[16] = { 0xa1, 0xa2, 0xa3 };
static const unsigned char UB[16] = { 0xb1, 0xb2, 0xb3 };

static char path[64];
static unsigned char *empty_img, *based_img;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_receive: %s\n", what);
	exit(1);
}

static void put_image(const unsigned char *img)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || write(fd, img, IMAGE_BYTES) != (ssize_t)IMAGE_BYTES ||
	    close(fd))
		die("writing the image");
}

static unsigned char *get_image(void)
{
	unsigned char *img = malloc(IMAGE_BYTES);
	int fd = open(path, O_RDONLY);

	if (!img || fd < 0 ||
	    read(fd, img, IMAGE_BYTES) != (ssize_t)IMAGE_BYTES)
		die("reading the image");
	close(fd);
	return img;
}

static errcode_t release(void *priv, ext2_ino_t ino)
{
	return nx_inode_release(priv, ino);
}

static errcode_t take(void *priv, const char *name, struct nx_snapinfo *info)
{
	return nx_snap_take(priv, name, info);
}

/* Receive LEN bytes of S into the image; the result. */
static int receive(const unsigned char *s, size_t len, int flags, int piece,
		   int *resumable)
{
	struct nx_volume *vol;
	struct nx_recv *r;
	struct nx_recv_env env;
	char msg[256];
	size_t off = 0;
	int rc;

	if (nx_open_volume(path, 0, &vol, msg, sizeof(msg)))
		die(msg);
	env = (struct nx_recv_env){ release, take, NULL, vol };
	nx_volume_lock(vol);
	rc = (int)nx_recv_open(vol, flags, &env, &r, msg, sizeof(msg));
	while (!rc && off < len) {
		size_t k = piece && len - off > 7 ? 7 : len - off;

		rc = nx_recv_feed(r, s + off, k);
		off += k;
	}
	if (!rc)
		rc = nx_recv_eof(r);
	if (rc != NX_RECV_DONE && rc != 0 && !nx_recv_msg(r)[0])
		die("a failure without a message");
	*resumable = nx_recv_stats(r)->resumable;
	nx_recv_close(r);
	nx_volume_unlock(vol);
	if (nx_volume_close(vol))
		die("closing after the receive");
	return rc;
}

/* The contract after a receive (the top of this file). */
static void check(int rc, int resumable)
{
	struct nx_volume *vol;
	struct nx_ss_token tok;
	struct nx_recv_env env;
	char msg[256], name[NX_NAME_MAX + 1];
	ext2_ino_t park;
	int pending;

	if (nx_open_volume(path, 0, &vol, msg, sizeof(msg))) {
		fprintf(stderr, "violation: the volume does not open again: %s\n",
			msg);
		abort();
	}
	env = (struct nx_recv_env){ release, take, NULL, vol };
	nx_volume_lock(vol);
	pending = nx_recv_pending(vol, &tok, name);
	if (pending == 1 && !resumable && rc != NX_RECV_DONE) {
		fprintf(stderr, "violation: a cursor after a rollback\n");
		abort();
	}
	if (pending != 1 && !nx_lookup(vol, EXT2_ROOT_INO, NX_RECV_PARK_NAME,
				       &park)) {
		fprintf(stderr, "violation: %s without a pending receive\n",
			NX_RECV_PARK_NAME);
		abort();
	}
	if (pending == 1 && nx_recv_abort(vol, &env, msg, sizeof(msg))) {
		fprintf(stderr, "violation: --abort failed: %s\n", msg);
		abort();
	}
	nx_volume_unlock(vol);
	if (nx_volume_close(vol)) {
		fprintf(stderr, "violation: the close failed\n");
		abort();
	}
}

/* Recompute the CRC of every complete command of S (LEN bytes). */
static void fix_crcs(unsigned char *s, size_t len)
{
	size_t pos = NX_SS_HEADER_LEN;

	while (pos + NX_SS_CMD_HEADER_LEN <= len) {
		uint32_t plen = (uint32_t)s[pos] | (uint32_t)s[pos + 1] << 8 |
				(uint32_t)s[pos + 2] << 16 |
				(uint32_t)s[pos + 3] << 24, crc;

		if (plen > len - pos - NX_SS_CMD_HEADER_LEN)
			break;
		memset(s + pos + 6, 0, 4);
		crc = ext2fs_crc32c_le(0, s + pos,
				       NX_SS_CMD_HEADER_LEN + plen);
		s[pos + 6] = (unsigned char)crc;
		s[pos + 7] = (unsigned char)(crc >> 8);
		s[pos + 8] = (unsigned char)(crc >> 16);
		s[pos + 9] = (unsigned char)(crc >> 24);
		pos += NX_SS_CMD_HEADER_LEN + plen;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *s;
	int flags, rc, resumable;

	if (size < 1)
		return 0;
	flags = data[0];
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	if (flags & 1)
		fix_crcs(s, size - 1);
	put_image(flags & 2 ? based_img : empty_img);
	rc = receive(s, size - 1, flags & 8 ? NX_RECV_FORCE : 0, flags & 4,
		     &resumable);
	check(rc, resumable);
	free(s);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Seeds and the based image.                                          */

static void cmd_path(struct nx_ss_enc *e, unsigned type, const char *p)
{
	nx_ss_enc_begin(e, type);
	nx_ss_enc_str(e, NX_SS_A_PATH, p);
	if (type >= NX_SS_C_MKFILE && type <= NX_SS_C_SYMLINK)
		nx_ss_enc_u64(e, NX_SS_A_INO, 300);
}

static void simple(struct nx_ss_enc *e, unsigned type, const char *p)
{
	cmd_path(e, type, p);
	nx_ss_enc_end(e);
}

static void two(struct nx_ss_enc *e, unsigned type, const char *p, int attr,
		const char *q)
{
	cmd_path(e, type, p);
	nx_ss_enc_str(e, attr, q);
	nx_ss_enc_end(e);
}

static void num(struct nx_ss_enc *e, unsigned type, const char *p, int attr,
		uint64_t v)
{
	cmd_path(e, type, p);
	nx_ss_enc_u64(e, attr, v);
	nx_ss_enc_end(e);
}

static void first(struct nx_ss_enc *e, int incremental)
{
	nx_ss_enc_init(e, 1);
	nx_ss_enc_header(e);
	nx_ss_enc_begin(e, incremental ? NX_SS_C_SNAPSHOT : NX_SS_C_SUBVOL);
	nx_ss_enc_str(e, NX_SS_A_PATH, incremental ? "next" : "base");
	nx_ss_enc_uuid(e, NX_SS_A_UUID, incremental ? UB : UA);
	nx_ss_enc_u64(e, NX_SS_A_CTRANSID, incremental ? 2 : 1);
	if (incremental) {
		nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, UA);
		nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, 1);
	}
	nx_ss_enc_end(e);
}

static void base_stream(struct nx_ss_enc *e)
{
	first(e, 0);
	simple(e, NX_SS_C_MKDIR, "d");
	simple(e, NX_SS_C_MKFILE, "d/f");
	cmd_path(e, NX_SS_C_WRITE, "d/f");
	nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 0);
	nx_ss_enc_bytes(e, NX_SS_A_DATA, "hello", 5);
	nx_ss_enc_end(e);
	two(e, NX_SS_C_LINK, "g", NX_SS_A_PATH_LINK, "d/f");
	two(e, NX_SS_C_SYMLINK, "s", NX_SS_A_PATH_LINK, "d");
	simple(e, NX_SS_C_MKFIFO, "p");
	simple(e, NX_SS_C_END, "");
}

static void change_stream(struct nx_ss_enc *e)
{
	first(e, 1);
	two(e, NX_SS_C_RENAME, "d/f", NX_SS_A_PATH_TO, "d/f2");
	simple(e, NX_SS_C_UNLINK, "g");
	simple(e, NX_SS_C_MKDIR, "n");
	two(e, NX_SS_C_RENAME, "d", NX_SS_A_PATH_TO, "n/d");
	num(e, NX_SS_C_TRUNCATE, "n/d/f2", NX_SS_A_SIZE, 70000);
	num(e, NX_SS_C_CHMOD, "n/d/f2", NX_SS_A_MODE, 04755);
	cmd_path(e, NX_SS_C_CHOWN, "n/d/f2");
	nx_ss_enc_u64(e, NX_SS_A_UID, 7);
	nx_ss_enc_u64(e, NX_SS_A_GID, 8);
	nx_ss_enc_end(e);
	cmd_path(e, NX_SS_C_SET_XATTR, "n");
	nx_ss_enc_str(e, NX_SS_A_XATTR_NAME, "user.x");
	nx_ss_enc_bytes(e, NX_SS_A_XATTR_DATA, "v", 1);
	nx_ss_enc_end(e);
	cmd_path(e, NX_SS_C_CLONE, "n/d/f2");
	nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, 65536);
	nx_ss_enc_u64(e, NX_SS_A_CLONE_LEN, 5);
	nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, UA);
	nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, 1);
	nx_ss_enc_str(e, NX_SS_A_CLONE_PATH, "d/f");
	nx_ss_enc_u64(e, NX_SS_A_CLONE_OFFSET, 0);
	nx_ss_enc_end(e);
	simple(e, NX_SS_C_UNLINK, "s");
	simple(e, NX_SS_C_UNLINK, "p");
	cmd_path(e, NX_SS_C_UTIMES, "n");
	nx_ss_enc_time(e, NX_SS_A_ATIME, 1, 2);
	nx_ss_enc_time(e, NX_SS_A_MTIME, 3, 4);
	nx_ss_enc_time(e, NX_SS_A_CTIME, 5, 6);
	nx_ss_enc_end(e);
	simple(e, NX_SS_C_END, "");
}

static void write_seed(const char *dir, const char *name, int flags,
		       const struct nx_ss_enc *e)
{
	char p[512];
	unsigned char f = (unsigned char)flags;
	FILE *out;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	out = fopen(p, "wb");
	if (!out || fwrite(&f, 1, 1, out) != 1 ||
	    fwrite(e->buf, 1, e->len, out) != e->len || fclose(out))
		die("writing a seed");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *mke2fs = getenv("MKE2FS") ? getenv("MKE2FS") : "mke2fs";
	const char *seeds = getenv("NEXTFS_FUZZ_SEEDS");
	struct nx_ss_enc b, c;
	char cmd[256];
	int fd, resumable;

	nx_crc32c_init();
	snprintf(path, sizeof(path), "/tmp/fuzz-receive-%ld.img",
		 (long)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, IMAGE_BYTES) || close(fd))
		die("making the image");
	snprintf(cmd, sizeof(cmd), "%s -q -F -t ext4 -b 1024 %s >/dev/null",
		 mke2fs, path);
	if (system(cmd))
		die("mke2fs failed");
	empty_img = get_image();
	base_stream(&b);
	change_stream(&c);
	if (receive(b.buf, b.len, 0, 0, &resumable) != NX_RECV_DONE)
		die("receiving the base");
	based_img = get_image();
	if (seeds) {
		write_seed(seeds, "full", 1, &b);
		write_seed(seeds, "incremental", 3, &c);
	}
	nx_ss_enc_free(&b);
	nx_ss_enc_free(&c);
	return 0;
}
