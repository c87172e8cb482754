/*
 * test_devname.c - the contract of devname.h: once a program has resolved
 * a volume's name, every open of that name reaches the file it found,
 * whatever the name leads to by then; a name the program's resolver
 * refuses opens nothing and writes nothing.  (The rules by which the
 * tools resolve names are tested through them: test_pathsafety.py.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "nextfs/devname.h"
#include "nextfs/holder.h"
#include "nextfs/open.h"
#include "fixture.h"

/* s_mnt_count of the primary superblock of the file FD holds. */
static unsigned mount_count(int fd)
{
	struct ext2_super_block sb;
	char proc[64];
	int rfd;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	rfd = open(proc, O_RDONLY);
	ck_assert_int_ge(rfd, 0);
	ck_assert_int_eq(pread(rfd, &sb, sizeof(sb), 1024), sizeof(sb));
	close(rfd);
	return sb.s_mnt_count;
}

/*
 * NAME pinned to image A; then image B is renamed to NAME.  A writer's
 * open of NAME writes A (the lock, the probe and libext2fs all reach it)
 * and leaves B byte-identical; the volume's key is A's.
 */
START_TEST(test_pinned_name_reaches_the_pinned_file)
{
	char a[256], b[256], msg[512], key[NX_HOLDER_KEY_MAX];
	char want[NX_HOLDER_KEY_MAX];
	struct nx_volume *vol = NULL;
	struct stat st;
	uint64_t b_hash;
	unsigned count;
	int fd;

	nxt_mkfs(a, "-t ext4", 16);
	nxt_mkfs(b, "-t ext4", 16);
	fd = open(a, O_PATH);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	count = mount_count(fd);
	ck_assert_int_eq(nx_dev_pin(a, fd), 0);
	ck_assert_int_eq(rename(b, a), 0);	/* the name is B's now */
	b_hash = nxt_file_hash(a);

	ck_assert_int_eq(nx_open_volume(a, 0, &vol, msg, sizeof(msg)), 0);
	ck_assert_int_eq(nx_holder_volume_key(a, key, sizeof(key)), 0);
	snprintf(want, sizeof(want), "nextfs/vol/f%llx:%llx",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	ck_assert_str_eq(key, want);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_uint_eq(mount_count(fd), count + 1);
	ck_assert_uint_eq(nxt_file_hash(a), b_hash);

	nx_dev_unpin_all();	/* closes FD: A is gone */
	nxt_unlink(a);
}
END_TEST

static int resolved;

static int refuse(const char *name)
{
	(void)name;
	resolved++;
	errno = ELOOP;
	return -1;
}

static int resolve(const char *name)
{
	resolved++;
	return open(name, O_PATH | O_CLOEXEC);
}

/*
 * With a resolver, a name is resolved once, on first use, and then
 * pinned; a refusal fails the open, which writes nothing.
 */
START_TEST(test_resolver_decides_once)
{
	struct nx_volume *vol = NULL;
	char path[256], msg[512];
	uint64_t before;

	nxt_mkfs(path, "-t ext4", 16);
	before = nxt_file_hash(path);
	nx_dev_set_resolver(refuse);
	ck_assert_int_eq(nx_open_volume(path, 0, &vol, msg, sizeof(msg)),
			 ELOOP);
	ck_assert_ptr_null(vol);
	ck_assert_ptr_nonnull(strstr(msg, path));
	ck_assert_uint_eq(nxt_file_hash(path), before);
	ck_assert_int_eq(resolved, 1);

	resolved = 0;
	nx_dev_set_resolver(resolve);
	ck_assert_int_eq(nx_open_volume(path, 0, &vol, msg, sizeof(msg)), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(nx_open_volume(path, NX_VOL_RDONLY, &vol, msg,
					sizeof(msg)), 0);
	ck_assert_int_eq(nx_volume_close(vol), 0);
	ck_assert_int_eq(resolved, 1);
	nx_dev_set_resolver(NULL);
	nx_dev_unpin_all();
	ck_assert_int_eq(nxt_fsck(path), 0);
	nxt_unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("devname");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_pinned_name_reaches_the_pinned_file);
	tcase_add_test(tc, test_resolver_decides_once);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
