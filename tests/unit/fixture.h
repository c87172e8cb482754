/*
 * fixture.h - shared helpers for the libcheck unit tests: make a fresh
 * image with mke2fs, open it as a volume, and check it with e2fsck -fn.
 */
#ifndef NEXTFS_TEST_FIXTURE_H
#define NEXTFS_TEST_FIXTURE_H

#include <check.h>
#include "nextfs/open.h"
#include "nextfs/volume.h"
#include "nextfs/perm.h"

/* Feature sets the tests iterate over (index with _i in loop tests). */
#define NXT_NFLAVOURS 4
extern const char *const nxt_flavours[NXT_NFLAVOURS];

/*
 * Create an image of SIZE_MB MiB at a fresh temporary path (written to
 * PATH, at least 256 bytes) with "mke2fs -q -F -T default MKFS_ARGS".
 * Fails the test on error.
 */
void nxt_mkfs(char *path, const char *mkfs_args, unsigned size_mb);

/* Open PATH read-write (fails the test on error). */
struct nx_volume *nxt_open(const char *path);

/* Close VOL (asserting success) and return the e2fsck -fn exit status. */
int nxt_close_and_fsck(struct nx_volume *vol, const char *path);

/* e2fsck -fn PATH exit status (0 = clean); output goes to stderr. */
int nxt_fsck(const char *path);

/* Remove the image. */
void nxt_unlink(const char *path);

/*
 * main() of every unit test: run S (CK_NORMAL), exit status 0 or 1.  At
 * exit it removes every file under $TMPDIR (or /tmp) whose name starts
 * with one of nxt_mkfs()'s image names - what failed tests leave behind
 * - unless NEXTFS_KEEP_FAILED is set (and not "0").
 */
int nxt_run_suite(Suite *s);

/* Credentials of root and of an ordinary user (uid/gid 1000). */
void nxt_root_cred(struct nx_cred *c);
void nxt_user_cred(struct nx_cred *c, uid_t uid, gid_t gid);



/*
 * e2fsck -fn on a sparse copy of PATH whose superblock has
 * RO_COMPAT_HAS_SNAPSHOT masked (stock e2fsck refuses the feature).
 */
int nxt_fsck_masked(const char *path);

/*
 * Helpers that never fail the test themselves (usable in forked children
 * of a test, where a failing ck_assert would confuse libcheck): they
 * return 0 / an exit status and leave judging to the caller.
 */

/*
 * Run FN(ARG) in a child process, killed after SECS seconds; its wait
 * status.  (libcheck's SIGALRM handler is not inherited: a hung child
 * would otherwise pass for a timeout of the whole test.)
 */
int nxt_in_child(void (*fn)(void *), void *arg, unsigned secs);

/* Sparse copy of SRC to DST (created or truncated).  0 or an errno. */
int nxt_copy_image(const char *src, const char *dst);

/*
 * Make DST a sparse copy of SRC with RO_COMPAT_HAS_SNAPSHOT masked in the
 * primary superblock (checksum recomputed).  0 or an errno.
 */
int nxt_masked_copy(const char *src, const char *dst);

/*
 * Run "e2fsck OPTS PATH", capturing its output (the last OUTLEN-1 bytes,
 * NUL terminated) in OUT (may be NULL).  Returns the exit status, 128+ if
 * it could not run or died.
 */
int nxt_fsck_capture(const char *path, const char *opts, char *out,
		     size_t outlen);

/*
 * Test content: byte I of a "file" with SEED at offset OFF (never 0, so
 * holes and zeroed blocks never pass for it), and FNV-1a hashing.
 */
void nxt_pattern(char *buf, size_t len, unsigned seed, uint64_t off);
uint64_t nxt_fnv(uint64_t h, const void *p, size_t n);
#define NXT_FNV_INIT 1469598103934665603ULL

/* FNV-1a of the whole file at PATH: "nothing changed" checks. */
uint64_t nxt_file_hash(const char *path);
#endif
