/*
 * test_regress.c - images that once broke nextfs (found by the fuzzer,
 * fuzz/README.md) must now be refused cleanly or browsed cleanly.
 *
 * Each .img file in images/regress is opened read-only exactly as a mount opens
 * it and walked with the fuzzer's own browse code (live tree and every
 * snapshot view).  The file name says what is expected:
 *   open-*.img    must open; the walk must end without a contract breach
 *   refuse-*.img  nx_open_volume() must refuse it with a message
 *   rw-*.img      the fuzzer's read-write session (nxb_rw_session: open
 *                 read-write - journal replay, orphans -, browse, a small
 *                 write workload, close, open again, browse, close) on a
 *                 scratch copy must end without a contract breach; the
 *                 volume may be refused
 *   rw-refuse-*.img  the same, and the read-write open must refuse it
 *                 with a message
 * Crashes and memory errors show up as test errors, and as sanitizer
 * reports in a -Db_sanitize=address,undefined build (fuzz/README.md).
 * images/regress/README lists what each image once did.
 */
#include <dirent.h>
#include <libgen.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fixture.h"

/* The walk the fuzzer uses: one copy of it, shared. */
#include "../../fuzz/nxbrowse.c"

#define MAX_IMAGES 256

static char regress_dir[PATH_MAX];
static char *images[MAX_IMAGES];
static int nimages;

/*
 * images/regress of the source tree: $NEXTFS_REGRESS_DIR, else found from
 * this file's path, which meson gives relative to the build directory
 * (three levels above this test binary).
 */
static void find_regress_dir(void)
{
	const char *env = getenv("NEXTFS_REGRESS_DIR");
	char exe[PATH_MAX], src[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		snprintf(regress_dir, sizeof(regress_dir), "%s", env);
		return;
	}
	snprintf(src, sizeof(src), "%s", __FILE__);
	if (src[0] != '/') {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0)
			return;
		exe[n] = 0;
		/* BUILD/tests/unit/test_regress -> BUILD */
		snprintf(src, sizeof(src), "%s/%s",
			 dirname(dirname(dirname(exe))), __FILE__);
	}
	/* SRC/tests/unit/test_regress.c -> SRC/images/regress */
	snprintf(regress_dir, sizeof(regress_dir), "%s/../../images/regress",
		 dirname(src));
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_images(void)
{
	struct dirent *de;
	DIR *d;

	find_regress_dir();
	d = opendir(regress_dir);
	if (!d)
		return;
	while ((de = readdir(d)) && nimages < MAX_IMAGES) {
		size_t len = strlen(de->d_name);

		if (len > 4 && !strcmp(de->d_name + len - 4, ".img"))
			images[nimages++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(images, nimages, sizeof(*images), cmp_names);
}

START_TEST(test_images_present)
{
	/* Without this a missing directory would make the suite pass. */
	ck_assert_msg(nimages > 0, "no regression images in %s", regress_dir);
}
END_TEST

/* The read-write session on a scratch copy of PATH. */
static void rw_image(const char *name, const char *path)
{
	const char *tmp = getenv("TMPDIR");
	char work[PATH_MAX];
	struct nxb_stats st;
	int fd, ret;

	snprintf(work, sizeof(work), "%s/nxregress-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(work);
	ck_assert_msg(fd >= 0, "mkstemp %s", work);
	close(fd);
	ck_assert_int_eq(nxt_copy_image(path, work), 0);
	ret = nxb_rw_session(work, &st);
	unlink(work);
	ck_assert_msg(ret == 0, "%s: %s", name, st.violation);
	if (!strncmp(name, "rw-refuse-", 10)) {
		ck_assert_msg(st.open_err != 0, "%s opened read-write", name);
		ck_assert_msg(st.open_msg[0], "%s: refused without a message",
			      name);
	}
}

START_TEST(test_image)
{
	const char *name = images[_i];
	char path[PATH_MAX + 300];
	struct nxb_stats st;
	int ret;

	snprintf(path, sizeof(path), "%s/%s", regress_dir, name);
	if (!strncmp(name, "rw-", 3)) {
		rw_image(name, path);
		return;
	}
	ret = nxb_open_and_browse(path, &st);
	ck_assert_msg(ret == 0, "%s: %s", name, st.violation);
	if (!strncmp(name, "refuse-", 7)) {
		ck_assert_msg(st.open_err != 0, "%s opened", name);
		ck_assert_msg(st.open_msg[0], "%s: refused without a message",
			      name);
	} else {
		ck_assert_msg(!strncmp(name, "open-", 5),
			      "%s: name must start with open-, refuse- or rw-",
			      name);
		ck_assert_msg(st.open_err == 0, "%s: %s", name, st.open_msg);
		ck_assert_msg(st.dirs > 0, "%s: root not listed", name);
	}
}
END_TEST

static Suite *regress_suite(void)
{
	Suite *s = suite_create("regress");
	TCase *tc = tcase_create("images");

	list_images();
	/* A hang is a finding too: fail it quickly, not after minutes. */
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_images_present);
	if (nimages)
		tcase_add_loop_test(tc, test_image, 0, nimages);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return nxt_run_suite(regress_suite());
}
