/* fixture.c - see fixture.h */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stddef.h>
#include <ext2fs/ext2fs.h>
#include "fixture.h"

const char *const nxt_flavours[NXT_NFLAVOURS] = {
	"-t ext2 -b 1024",
	"-t ext3 -b 4096",
	"-t ext4",
	"-t ext4 -O 64bit,metadata_csum,inline_data -I 256",
};

static const char *tool(const char *env, const char *fallback)
{
	const char *p = getenv(env);
	return p && *p ? p : fallback;
}

/*
 * Every image is named after the test runner's pid (nxt_run_suite), so
 * that the runner can remove what a failed test left behind: libcheck
 * ends a failing test's process with _exit(), before the test's own
 * cleanup and without atexit handlers.  NEXTFS_KEEP_FAILED keeps them.
 */
static pid_t runner_pid;

static const char *tmp_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	return tmp && *tmp ? tmp : "/tmp";
}

static void remove_leftovers(void)
{
	const char *keep = getenv("NEXTFS_KEEP_FAILED");
	char pattern[320];
	glob_t g;
	size_t i;

	if (getpid() != runner_pid || (keep && *keep && strcmp(keep, "0")))
		return;
	snprintf(pattern, sizeof(pattern), "%s/nxtest-%ld-*", tmp_dir(),
		 (long)runner_pid);
	if (glob(pattern, 0, NULL, &g) != 0)
		return;
	for (i = 0; i < g.gl_pathc; i++)
		unlink(g.gl_pathv[i]);
	globfree(&g);
}

void nxt_mkfs(char *path, const char *mkfs_args, unsigned size_mb)
{
	char cmd[1024];
	int fd, rc;

	snprintf(path, 256, "%s/nxtest-%ld-XXXXXX", tmp_dir(),
		 (long)(runner_pid ? runner_pid : getpid()));
	fd = mkstemp(path);
	ck_assert_msg(fd >= 0, "mkstemp failed");
	ck_assert_int_eq(ftruncate(fd, (off_t)size_mb << 20), 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "%s -q -F -E root_owner=0:0 %s %s >&2",
		 tool("MKE2FS", "mke2fs"), mkfs_args, path);
	rc = system(cmd);
	ck_assert_msg(rc == 0, "mke2fs failed: %s", cmd);
}

struct nx_volume *nxt_open(const char *path)
{
	struct nx_volume *vol = NULL;
	char msg[256] = "";
	errcode_t err = nx_open_volume(path, 0, &vol, msg, sizeof(msg));

	ck_assert_msg(err == 0, "nx_open_volume(%s): %s", path, msg);
	return vol;
}

int nxt_fsck(const char *path)
{
	char cmd[1024];
	int rc;

	snprintf(cmd, sizeof(cmd), "%s -fn %s >&2", tool("E2FSCK", "e2fsck"),
		 path);
	rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

int nxt_close_and_fsck(struct nx_volume *vol, const char *path)
{
	ck_assert_int_eq(nx_volume_close(vol), 0);
	return nxt_fsck(path);
}

void nxt_unlink(const char *path)
{
	unlink(path);
}

void nxt_root_cred(struct nx_cred *c)
{
	memset(c, 0, sizeof(*c));
	c->umask = 022;
}

void nxt_user_cred(struct nx_cred *c, uid_t uid, gid_t gid)
{
	memset(c, 0, sizeof(*c));
	c->uid = uid;
	c->gid = gid;
	c->umask = 022;
}

int nxt_fsck_masked(const char *path)
{
	char copy[300], cmd[700];
	struct ext2_super_block sb;
	FILE *f;
	int rc;

	snprintf(copy, sizeof(copy), "%s.masked", path);
	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s %s", path, copy);
	ck_assert_int_eq(system(cmd), 0);
	f = fopen(copy, "r+b");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, SUPERBLOCK_OFFSET, SEEK_SET), 0);
	ck_assert_int_eq(fread(&sb, sizeof(sb), 1, f), 1);
	sb.s_feature_ro_compat &= ~EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT;
	if (sb.s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb.s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)&sb,
				offsetof(struct ext2_super_block, s_checksum));
	ck_assert_int_eq(fseek(f, SUPERBLOCK_OFFSET, SEEK_SET), 0);
	ck_assert_int_eq(fwrite(&sb, sizeof(sb), 1, f), 1);
	fclose(f);
	rc = nxt_fsck(copy);
	unlink(copy);
	return rc;
}

int nxt_copy_image(const char *src, const char *dst)
{
	static char buf[1 << 16];
	int in, out, err = 0;
	off_t size, data, hole;
	struct stat st;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return errno;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		err = errno;
		close(in);
		return err;
	}
	if (fstat(in, &st) < 0 || ftruncate(out, st.st_size) < 0) {
		err = errno;
		goto done;
	}
	size = st.st_size;
	for (data = 0; data < size; data = hole) {
		data = lseek(in, data, SEEK_DATA);
		if (data < 0) {
			if (errno != ENXIO)
				err = errno;
			break;
		}
		hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0) {
			err = errno;
			break;
		}
		while (data < hole) {
			size_t want = hole - data < (off_t)sizeof(buf) ?
				      (size_t)(hole - data) : sizeof(buf);
			ssize_t n = pread(in, buf, want, data);

			if (n <= 0) {
				err = n < 0 ? errno : EIO;
				goto done;
			}
			if (pwrite(out, buf, (size_t)n, data) != n) {
				err = errno ? errno : EIO;
				goto done;
			}
			data += n;
		}
	}
done:
	close(in);
	if (close(out) < 0 && !err)
		err = errno;
	return err;
}

int nxt_masked_copy(const char *src, const char *dst)
{
	struct ext2_super_block sb;
	int fd, err = nxt_copy_image(src, dst);

	if (err)
		return err;
	fd = open(dst, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (pread(fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET) != sizeof(sb)) {
		close(fd);
		return EIO;
	}
	sb.s_feature_ro_compat &= ~EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT;
	if (sb.s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb.s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)&sb,
				offsetof(struct ext2_super_block, s_checksum));
	if (pwrite(fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET) != sizeof(sb)) {
		close(fd);
		return EIO;
	}
	return close(fd) < 0 ? errno : 0;
}

int nxt_fsck_capture(const char *path, const char *opts, char *out,
		     size_t outlen)
{
	char cmd[1024], chunk[4096];
	size_t used = 0, n;
	FILE *p;
	int rc;

	snprintf(cmd, sizeof(cmd), "%s %s '%s' 2>&1",
		 tool("E2FSCK", "e2fsck"), opts, path);
	if (out && outlen)
		out[0] = 0;
	fflush(NULL);
	p = popen(cmd, "r");
	if (!p)
		return 128;
	while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0) {
		if (!out || outlen < 2)
			continue;
		if (n >= outlen - 1) {	/* keep the tail of the output */
			memcpy(out, chunk + n - (outlen - 1), outlen - 1);
			used = outlen - 1;
		} else {
			if (used + n > outlen - 1) {
				size_t drop = used + n - (outlen - 1);

				memmove(out, out + drop, used - drop);
				used -= drop;
			}
			memcpy(out + used, chunk, n);
			used += n;
		}
		out[used] = 0;
	}
	rc = pclose(p);
	if (rc < 0)
		return 128;
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

void nxt_pattern(char *buf, size_t len, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)(((off + i) * 131 + seed * 17 +
				 ((off + i) >> 11)) | 1);
}

uint64_t nxt_fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	while (n--)
		h = (h ^ *c++) * 1099511628211ULL;
	return h;
}

uint64_t nxt_file_hash(const char *path)
{
	uint64_t h = NXT_FNV_INIT;
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = nxt_fnv(h, buf, (size_t)n);
	ck_assert_int_eq(n, 0);
	close(fd);
	return h;
}

int nxt_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	runner_pid = getpid();
	atexit(remove_leftovers);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

int nxt_in_child(void (*fn)(void *), void *arg, unsigned secs)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(secs);
		fn(arg);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}
