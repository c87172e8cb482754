/*
 * test_repl.c - replication below the CLI: snapshot identity
 * (nx_snap_uuid, snapshot.h), nextfs's private records (xattr.h), and
 * the receive's promise under crashes (receive.h, docs/design.md P17):
 * cut the device after any of its writes during a receive - commits in
 * the middle included - and the next open finds the target either as
 * before, or done, or pending at a cursor from which a resume ends
 * exactly where an uninterrupted receive does, applying nothing twice.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/faults.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/open.h"
#include "nextfs/receive.h"
#include "nextfs/sendstream.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"

/*
 * The derivation is RFC 4122's version 5 (as Python's uuid.uuid5 computes
 * it, which gave the expected bytes), so any other implementation - a
 * receiver in another language - can reproduce it.
 */
static struct nx_cred root_cred;

START_TEST(test_snapshot_uuid_known_answer)
{
	static const unsigned char vol[16] = { 0x00, 0x11, 0x22, 0x33, 0x44,
		0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
		0xff };
	static const unsigned char want[16] = { 0xa4, 0x36, 0x14, 0xdc, 0x26,
		0xd6, 0x57, 0x8c, 0x86, 0x60, 0x98, 0xc3, 0x7b, 0x4d, 0x8a,
		0x4e };
	struct timespec t = { 1700000000, 500000000 };
	unsigned char u[16], v[16];

	nx_snap_uuid(vol, 1, &t, u);
	ck_assert_mem_eq(u, want, 16);
	nx_snap_uuid(vol, 2, &t, v);		/* another id */
	ck_assert(memcmp(u, v, 16) != 0);
	t.tv_nsec++;				/* another take time */
	nx_snap_uuid(vol, 1, &t, v);
	ck_assert(memcmp(u, v, 16) != 0);
}
END_TEST

/* Stable across reopening, the same from a view, unique per snapshot. */
START_TEST(test_snapshot_uuid_on_a_volume)
{
	struct nx_snapinfo a, b, a2;
	struct nx_volume *vol, *view;
	unsigned char ua[16], ub[16], again[16];
	char path[256];

	nxt_mkfs(path, "-t ext4", 16);
	vol = nxt_open(path);
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_snap_take(vol, "a", &a), 0);
	ck_assert_int_eq(nx_snap_take(vol, "b", &b), 0);
	nx_snap_uuid_of(vol, &a, ua);
	nx_snap_uuid_of(vol, &b, ub);
	ck_assert(memcmp(ua, ub, 16) != 0);
	ck_assert_int_eq(ua[6] >> 4, 5);	/* version 5 */
	ck_assert_int_eq(nx_snap_view_open(vol, b.ino, &view), 0);
	nx_snap_uuid_of(view, &a, again);
	nx_snap_view_close(view);
	ck_assert_mem_eq(again, ua, 16);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	vol = nxt_open(path);
	nx_volume_lock(vol);
	ck_assert_int_eq(nx_snap_find(vol, "a", &a2), 0);
	nx_snap_uuid_of(vol, &a2, again);
	ck_assert_mem_eq(again, ua, 16);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	nxt_unlink(path);
}
END_TEST

/*
 * Private records: stored and read back, not changing ctime, invisible
 * and untouchable through the user calls (so no stream can forge one),
 * their external block given back when the last goes; e2fsck clean.
 */
START_TEST(test_private_records)
{
	struct ext2_inode_large before, after;
	struct nx_volume *vol;
	struct nx_cred root;
	char path[256], list[256], big[700];
	void *v;
	size_t len;
	int f;

	nxt_root_cred(&root);
	memset(big, 'x', sizeof(big));
	for (f = 0; f < NXT_NFLAVOURS; f++) {
		nxt_mkfs(path, nxt_flavours[f], 16);
		vol = nxt_open(path);
		nx_volume_lock(vol);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &before), 0);
		ck_assert_int_eq(nx_xattr_private_set(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", big, sizeof(big)), 0);
		ck_assert_int_eq(nx_xattr_private_get(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", &v, &len), 0);
		ck_assert_uint_eq(len, sizeof(big));
		ck_assert_mem_eq(v, big, len);
		free(v);
		ck_assert_int_eq(nx_listxattr(vol, &root, EXT2_ROOT_INO, list,
					      sizeof(list), &len), 0);
		ck_assert_uint_eq(len, 0);
		ck_assert_int_eq(nx_getxattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", list, sizeof(list),
				 &len), EOPNOTSUPP);
		ck_assert_int_eq(nx_setxattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", "x", 1, 0),
				 EOPNOTSUPP);
		ck_assert_int_eq(nx_removexattr(vol, &root, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), EOPNOTSUPP);
		ck_assert_int_eq(nx_xattr_private_set(vol, EXT2_ROOT_INO,
				 "user.x", "x", 1), EINVAL);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &after), 0);
		ck_assert_uint_eq(after.i_ctime, before.i_ctime);
		ck_assert_int_eq(nx_xattr_private_remove(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), 0);
		ck_assert_int_eq(nx_xattr_private_remove(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor"), ENODATA);
		ck_assert_int_eq(nx_xattr_private_get(vol, EXT2_ROOT_INO,
				 NX_XATTR_PRIVATE "cursor", &v, &len), ENODATA);
		ck_assert_int_eq(nx_inode_read(vol, EXT2_ROOT_INO, &after), 0);
		ck_assert_uint_eq(after.i_file_acl, 0);
		nx_volume_unlock(vol);
		ck_assert_int_eq(nxt_close_and_fsck(vol, path), 0);
		nxt_unlink(path);
	}
}
END_TEST


/* ------------------------------------------------------------------ */
/* Receiving through crashes.                                          */

static const unsigned char UA[16] = { 0xa1, 0xa2, 0xa3 };
static const unsigned char UB[16] = { 0xb1, 0xb2, 0xb3 };

static void path_attr(struct nx_ss_enc *e, const char *path)
{
	ck_assert_int_eq(nx_ss_enc_str(e, NX_SS_A_PATH, path), 0);
}

static void cmd_path(struct nx_ss_enc *e, unsigned type, const char *path)
{
	nx_ss_enc_begin(e, type);
	path_attr(e, path);
	if (type == NX_SS_C_MKFILE || type == NX_SS_C_MKDIR ||
	    type == NX_SS_C_SYMLINK)
		nx_ss_enc_u64(e, NX_SS_A_INO, 300);
}

static void cmd_end(struct nx_ss_enc *e)
{
	ck_assert_int_eq(nx_ss_enc_end(e), 0);
}

static void s_create(struct nx_ss_enc *e, unsigned type, const char *path)
{
	cmd_path(e, type, path);
	cmd_end(e);
}

static void s_write(struct nx_ss_enc *e, const char *path, uint64_t off,
		    size_t len, unsigned seed)
{
	char *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	nxt_pattern(buf, len, seed, off);
	cmd_path(e, NX_SS_C_WRITE, path);
	nx_ss_enc_u64(e, NX_SS_A_FILE_OFFSET, off);
	nx_ss_enc_bytes(e, NX_SS_A_DATA, buf, len);
	cmd_end(e);
	free(buf);
}

static void s_two(struct nx_ss_enc *e, unsigned type, const char *a,
		  int attr, const char *b)
{
	cmd_path(e, type, a);
	nx_ss_enc_str(e, attr, b);
	cmd_end(e);
}

static void s_u64(struct nx_ss_enc *e, unsigned type, const char *path,
		  int attr, uint64_t v)
{
	cmd_path(e, type, path);
	nx_ss_enc_u64(e, attr, v);
	cmd_end(e);
}

static void s_times(struct nx_ss_enc *e, const char *path, int64_t sec)
{
	cmd_path(e, NX_SS_C_UTIMES, path);
	nx_ss_enc_time(e, NX_SS_A_ATIME, sec, 1);
	nx_ss_enc_time(e, NX_SS_A_MTIME, sec, 2);
	nx_ss_enc_time(e, NX_SS_A_CTIME, sec, 3);
	cmd_end(e);
}

/* The base: a full stream of a small tree. */
static void base_stream(struct nx_ss_enc *e)
{
	char p[64];
	int i;

	nx_ss_enc_init(e, 1);
	nx_ss_enc_header(e);
	nx_ss_enc_begin(e, NX_SS_C_SUBVOL);
	path_attr(e, "base");
	nx_ss_enc_uuid(e, NX_SS_A_UUID, UA);
	nx_ss_enc_u64(e, NX_SS_A_CTRANSID, 1);
	cmd_end(e);
	for (i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "d%d", i);
		s_create(e, NX_SS_C_MKDIR, p);
	}
	for (i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "d%d/f%d", i % 4, i);
		s_create(e, NX_SS_C_MKFILE, p);
		s_write(e, p, 0, (size_t)(i * 3001 % 40000) + 1, (unsigned)i);
		s_u64(e, NX_SS_C_CHMOD, p, NX_SS_A_MODE, 0600 + (i % 3) * 0100);
		s_times(e, p, 1000000 + i);
	}
	s_two(e, NX_SS_C_LINK, "d0/hard", NX_SS_A_PATH_LINK, "d1/f1");
	for (i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "d%d", i);
		s_times(e, p, 2000000 + i);
	}
	s_times(e, "", 3000000);
	s_create(e, NX_SS_C_END, "");
}

/*
 * The change: every kind of command, ~1 MiB of data, and what the base
 * has deleted, renamed over, moved and rewritten (parked, for a
 * rollback).
 */
static void change_stream(struct nx_ss_enc *e)
{
	char p[64], q[64];
	int i;

	nx_ss_enc_init(e, 1);
	nx_ss_enc_header(e);
	nx_ss_enc_begin(e, NX_SS_C_SNAPSHOT);
	path_attr(e, "next");
	nx_ss_enc_uuid(e, NX_SS_A_UUID, UB);
	nx_ss_enc_u64(e, NX_SS_A_CTRANSID, 2);
	nx_ss_enc_uuid(e, NX_SS_A_CLONE_UUID, UA);
	nx_ss_enc_u64(e, NX_SS_A_CLONE_CTRANSID, 1);
	cmd_end(e);
	s_create(e, NX_SS_C_MKDIR, "n");
	for (i = 0; i < 24; i++) {
		snprintf(p, sizeof(p), "d%d/f%d", i % 4, i);
		switch (i % 6) {
		case 0:
			s_create(e, NX_SS_C_UNLINK, p);
			break;
		case 1:
			snprintf(q, sizeof(q), "n/m%d", i);
			s_two(e, NX_SS_C_RENAME, p, NX_SS_A_PATH_TO, q);
			break;
		case 2:
			s_write(e, p, 4096, 60000, 100u + (unsigned)i);
			s_u64(e, NX_SS_C_TRUNCATE, p, NX_SS_A_SIZE, 30000);
			s_times(e, p, 7000000 + i);
			break;
		case 3:
			snprintf(q, sizeof(q), "d%d/f%d", (i + 1) % 4, i + 1);
			s_two(e, NX_SS_C_RENAME, p, NX_SS_A_PATH_TO, q);
			break;
		case 4:
			cmd_path(e, NX_SS_C_SET_XATTR, p);
			nx_ss_enc_str(e, NX_SS_A_XATTR_NAME, "user.x");
			nx_ss_enc_bytes(e, NX_SS_A_XATTR_DATA, p, strlen(p));
			cmd_end(e);
			s_u64(e, NX_SS_C_CHMOD, p, NX_SS_A_MODE, 0751);
			break;
		default:
			break;
		}
	}
	for (i = 0; i < 40; i++) {
		snprintf(p, sizeof(p), "n/new%d", i);
		s_create(e, NX_SS_C_MKFILE, p);
		s_write(e, p, 0, 20000, 500u + (unsigned)i);
		s_times(e, p, 4000000 + i);
	}
	s_two(e, NX_SS_C_SYMLINK, "n/sl", NX_SS_A_PATH_LINK, "../d0");
	s_times(e, "n/sl", 8000000);
	s_two(e, NX_SS_C_RENAME, "d3", NX_SS_A_PATH_TO, "n/d3");
	for (i = 2; i < 24; i += 4)	/* d2 emptied, then removed */
		if (i % 6 != 0) {
			snprintf(p, sizeof(p), "d2/f%d", i);
			s_create(e, NX_SS_C_UNLINK, p);
		}
	s_create(e, NX_SS_C_RMDIR, "d2");
	for (i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), i == 2 ? "n" : i == 3 ? "n/d3" : "d%d",
			 i);
		s_times(e, p, 5000000 + i);
	}
	s_times(e, "", 6000000);
	s_create(e, NX_SS_C_END, "");
}

static uint64_t hash_tree(struct nx_volume *vol, ext2_ino_t dir,
			  uint64_t h, int depth);

struct names {
	char (*v)[NX_NAME_MAX + 1];
	ext2_ino_t *ino;
	size_t n, cap;
};

static int add_name(void *priv, const char *name, size_t len,
		    ext2_ino_t ino, unsigned char type, uint64_t next)
{
	struct names *l = priv;

	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		l->ino = realloc(l->ino, l->cap * sizeof(*l->ino));
		ck_assert(l->v && l->ino);
	}
	memcpy(l->v[l->n], name, len);
	l->v[l->n][len] = 0;
	l->ino[l->n++] = ino;
	return 0;
}

/* Everything a user sees of INO (content, attributes, xattrs) into H. */
static uint64_t hash_inode(struct nx_volume *vol, ext2_ino_t ino, uint64_t h)
{
	static char buf[65536];
	struct stat st;
	uint64_t off = 0;
	size_t got, len;
	char names[512];

	ck_assert_int_eq(nx_getattr(vol, ino, &st), 0);
	h = nxt_fnv(h, &st.st_mode, sizeof(st.st_mode));
	h = nxt_fnv(h, &st.st_uid, sizeof(st.st_uid));
	h = nxt_fnv(h, &st.st_size, sizeof(st.st_size));
	h = nxt_fnv(h, &st.st_mtim, sizeof(st.st_mtim));
	if (!S_ISDIR(st.st_mode))
		h = nxt_fnv(h, &st.st_nlink, sizeof(st.st_nlink));
	if (S_ISLNK(st.st_mode)) {
		ck_assert_int_eq(nx_readlink(vol, ino, buf, sizeof(buf), &len),
				 0);
		h = nxt_fnv(h, buf, len);
	}
	while (S_ISREG(st.st_mode) && off < (uint64_t)st.st_size) {
		ck_assert_int_eq(nx_file_read(vol, ino, buf, sizeof(buf), off,
					      &got), 0);
		ck_assert_uint_gt(got, 0);
		h = nxt_fnv(h, buf, got);
		off += got;
	}
	ck_assert_int_eq(nx_listxattr(vol, &root_cred, ino, names,
				      sizeof(names), &len), 0);
	h = nxt_fnv(h, names, len);
	if (len) {
		ck_assert_int_eq(nx_getxattr(vol, &root_cred, ino, "user.x",
					     buf, sizeof(buf), &got), 0);
		h = nxt_fnv(h, buf, got);
	}
	return h;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

static uint64_t hash_tree(struct nx_volume *vol, ext2_ino_t dir, uint64_t h,
			  int depth)
{
	struct names l = { 0 };
	size_t i;

	ck_assert_int_lt(depth, 16);
	ck_assert_int_eq(nx_readdir(vol, dir, 0, add_name, &l), 0);
	h = hash_inode(vol, dir, h);
	for (i = 0; i < l.n; i++) {	/* (sorted: layouts differ) */
		size_t k, best = i;

		for (k = i + 1; k < l.n; k++)
			if (cmp_name(l.v[k], l.v[best]) < 0)
				best = k;
		if (best != i) {
			char t[NX_NAME_MAX + 1];
			ext2_ino_t ti = l.ino[i];

			memcpy(t, l.v[i], sizeof(t));
			memcpy(l.v[i], l.v[best], sizeof(t));
			memcpy(l.v[best], t, sizeof(t));
			l.ino[i] = l.ino[best];
			l.ino[best] = ti;
		}
		if (dir == EXT2_ROOT_INO && (!strcmp(l.v[i], ".snapshots") ||
					     !strcmp(l.v[i], "lost+found")))
			continue;
		h = nxt_fnv(h, l.v[i], strlen(l.v[i]) + 1);
		h = hash_inode(vol, l.ino[i], h);
		{
			struct ext2_inode_large in;

			ck_assert_int_eq(nx_inode_read(vol, l.ino[i], &in), 0);
			if (LINUX_S_ISDIR(in.i_mode))
				h = hash_tree(vol, l.ino[i], h, depth + 1);
		}
	}
	free(l.v);
	free(l.ino);
	return h;
}

static uint64_t snap_hash(struct nx_volume *vol, const char *name)
{
	struct nx_snapinfo info;
	struct nx_volume *view;
	uint64_t h;

	if (nx_snap_find(vol, name, &info))
		return 0;
	ck_assert_int_eq(nx_snap_view_get(vol, info.id, &view), 0);
	h = hash_tree(view, EXT2_ROOT_INO, NXT_FNV_INIT, 0);
	return h ? h : 1;
}

static errcode_t rel_offline(void *priv, ext2_ino_t ino)
{
	return nx_inode_release(priv, ino);
}

static errcode_t take_offline(void *priv, const char *name,
			      struct nx_snapinfo *info)
{
	return nx_snap_take(priv, name, info);
}

/*
 * Receive E's bytes into VOL in 4 KiB pieces, committing every SYNC
 * pieces (as other requests of a daemon would, between two of its
 * ioctls), locking around each piece.  The result of the last call.
 */
static int receive_bytes(struct nx_volume *vol, const struct nx_ss_enc *e,
			 int flags, int sync)
{
	struct nx_recv_env env = { rel_offline, take_offline, NULL, vol };
	struct nx_recv *r;
	char msg[256];
	size_t off = 0;
	int rc = 0, n = 0;

	nx_volume_lock(vol);
	rc = (int)nx_recv_open(vol, flags, &env, &r, msg, sizeof(msg));
	nx_volume_unlock(vol);
	if (rc)
		return rc;
	while (rc == 0 && off < e->len) {
		size_t k = e->len - off < 4096 ? e->len - off : 4096;

		nx_volume_lock(vol);
		rc = nx_recv_feed(r, e->buf + off, k);
		if (rc == 0 && sync && ++n % sync == 0)
			rc = (int)nx_volume_sync(vol);
		nx_volume_unlock(vol);
		off += k;
	}
	nx_volume_lock(vol);
	if (rc == 0)
		rc = nx_recv_eof(r);
	if (rc != NX_RECV_DONE && !nx_faults_cut(nx_blkio_faults(vol->io)))
		fprintf(stderr, "receive: %s\n", nx_recv_msg(r));
	nx_recv_close(r);
	nx_volume_unlock(vol);
	return rc;
}

struct sweep {				/* shared with the children */
	struct nx_faults plan;		/* the counting run's */
	uint64_t base_hash, final_hash;
	int before, pending, done;	/* what the crashes left */
	char why[256];
};

static struct sweep *sw;
static struct nx_ss_enc sbase, schange;

static void sweep_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void sweep_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sw->why, sizeof(sw->why), fmt, ap);
	va_end(ap);
	_exit(1);
}

/* A child: the change received with SPEC's faults, as far as it goes. */
static void crash_run(const char *image, const char *spec, int count)
{
	struct nx_volume *vol;
	char msg[256];

	setenv("NEXTFS_FAULTS", spec, 1);
	if (nx_open_volume(image, 0, &vol, msg, sizeof(msg)))
		_exit(count ? 1 : 0);	/* a cut inside the open */
	unsetenv("NEXTFS_FAULTS");
	if (count) {
		sw->plan = *nx_blkio_faults(vol->io);
		nx_blkio_set_faults(vol->io, &sw->plan);
	}
	receive_bytes(vol, &schange, 0, 8);
	nx_volume_close(vol);
	_exit(0);
}

/* A child: after the crash, the target is before, done, or resumable. */
static void crash_check(const char *image)
{
	struct nx_ss_token tok;
	char msg[256], name[NX_NAME_MAX + 1];
	struct nx_volume *vol;
	int pending, rc;

	if (nx_open_volume(image, 0, &vol, msg, sizeof(msg)))
		sweep_fail("open after the crash: %s", msg);
	nx_volume_lock(vol);
	pending = nx_recv_pending(vol, &tok, name);
	rc = nx_snap_find(vol, "next", &(struct nx_snapinfo){ 0 }) == 0;
	nx_volume_unlock(vol);
	if (pending == 1 && rc)
		sweep_fail("pending and done at once");
	if (pending == 1)
		sw->pending++;
	else if (rc)
		sw->done++;
	else
		sw->before++;
	if (pending == 1 || !rc) {
		rc = receive_bytes(vol, &schange,
				   pending == 1 ? NX_RECV_RESUME : 0, 0);
		if (rc != NX_RECV_DONE)
			sweep_fail("%s the receive failed (%d)",
				   pending == 1 ? "resuming" : "repeating", rc);
	}
	nx_volume_lock(vol);
	if (snap_hash(vol, "base") != sw->base_hash)
		sweep_fail("snapshot base differs");
	if (snap_hash(vol, "next") != sw->final_hash)
		sweep_fail("snapshot next differs from an uninterrupted one");
	if (hash_tree(vol, EXT2_ROOT_INO, NXT_FNV_INIT, 0) != sw->final_hash)
		sweep_fail("the live tree differs from an uninterrupted one");
	if (nx_recv_pending(vol, &tok, name) != 0)
		sweep_fail("still pending");
	nx_volume_unlock(vol);
	if (nx_volume_close(vol))
		sweep_fail("close");
	if (nxt_fsck_masked(image))
		sweep_fail("e2fsck -fn (masked) is not clean");
	_exit(0);
}

struct child_args {
	const char *image, *spec;
	int count;
};

static void run_crash(void *p)
{
	struct child_args *a = p;

	crash_run(a->image, a->spec, a->count);
}

static void run_check(void *p)
{
	struct child_args *a = p;

	crash_check(a->image);
}

static int child(void (*fn)(void *), const char *image, const char *spec,
		 int count)
{
	struct child_args a = { image, spec, count };
	int status = nxt_in_child(fn, &a, 60);

	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/*
 * The sweep, on ext4 (a journal: each commit whole): a base received,
 * then for cut points spread over all device writes of receiving the
 * change (commits every 32 KiB of stream), a crash there and the check.
 */
START_TEST(test_receive_crash_sweep)
{
	char base[256], work[300], spec[64];
	struct nx_volume *vol;
	uint64_t total, n, points = 30;
	int failed = 0;

	sw = mmap(NULL, sizeof(*sw), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(sw != MAP_FAILED);
	memset(sw, 0, sizeof(*sw));
	nxt_root_cred(&root_cred);
	base_stream(&sbase);
	change_stream(&schange);
	ck_assert_int_eq(sbase.err, 0);
	ck_assert_int_eq(schange.err, 0);
	nxt_mkfs(base, "-t ext4", 32);
	vol = nxt_open(base);
	ck_assert_int_eq(receive_bytes(vol, &sbase, 0, 0), NX_RECV_DONE);
	nx_volume_lock(vol);
	sw->base_hash = snap_hash(vol, "base");
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	/* the reference: uninterrupted, counting the device writes */
	snprintf(work, sizeof(work), "%s.w", base);
	ck_assert_int_eq(nxt_copy_image(base, work), 0);
	ck_assert_int_eq(child(run_crash, work,
			       "cut=18446744073709551615:drop", 1), 0);
	total = sw->plan.writes_done;
	ck_assert_uint_gt(total, 100);
	vol = nxt_open(work);
	nx_volume_lock(vol);
	sw->final_hash = snap_hash(vol, "next");
	ck_assert_uint_ne(sw->final_hash, 0);
	ck_assert_uint_eq(hash_tree(vol, EXT2_ROOT_INO, NXT_FNV_INIT, 0),
			  sw->final_hash);
	nx_volume_unlock(vol);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	if (getenv("NEXTFS_CRASH_POINTS"))
		points = strtoull(getenv("NEXTFS_CRASH_POINTS"), NULL, 10);
	for (n = 1; n <= points; n++) {
		uint64_t cut = n * (total - 1) / points;

		snprintf(spec, sizeof(spec), "cut=%llu:drop",
			 (unsigned long long)(cut ? cut : 1));
		ck_assert_int_eq(nxt_copy_image(base, work), 0);
		child(run_crash, work, spec, 0);
		sw->why[0] = 0;
		if (child(run_check, work, spec, 0)) {
			fprintf(stderr, "%s: %s\n", spec, sw->why);
			failed++;
		}
	}
	nxt_unlink(work);
	nxt_unlink(base);
	nx_ss_enc_free(&sbase);
	nx_ss_enc_free(&schange);
	ck_assert_msg(!failed, "%d of %llu cut points failed (of %llu device "
		      "writes); the first: see above", failed,
		      (unsigned long long)points, (unsigned long long)total);
	/* most crashes leave it pending: the resumes are what is tested */
	ck_assert_int_ge(sw->pending, (int)points / 2);
	ck_assert_int_ge(sw->before + sw->done, 1);
	munmap(sw, sizeof(*sw));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("repl");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_snapshot_uuid_known_answer);
	tcase_add_test(tc, test_snapshot_uuid_on_a_volume);
	tcase_add_test(tc, test_private_records);
	tcase_add_test(tc, test_receive_crash_sweep);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(suite());
}
