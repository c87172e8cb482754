/* test_blkio.c - the block I/O layer: write hook and write batching. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/blkio.h"

#define BS 1024

struct hook_log {
	int calls;
	uint64_t last_off, last_len;
	char old[BS];			/* device content seen by the hook */
	struct nx_blkio *io;
};

static errcode_t log_hook(void *priv, uint64_t off, uint64_t len,
			  const void *data)
{
	struct hook_log *log = priv;

	log->calls++;
	log->last_off = off;
	log->last_len = len;
	if (len == BS)
		ck_assert_int_eq(nx_blkio_pread(log->io, log->old, BS, off), 0);
	return 0;
}

static io_channel open_chan(char *path)
{
	io_channel chan;
	int fd;

	strcpy(path, "/tmp/nxblkio-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 64 * BS), 0);
	close(fd);
	ck_assert_int_eq(nx_blkio_manager->open(path, IO_FLAG_RW, &chan), 0);
	ck_assert_int_eq(io_channel_set_blksize(chan, BS), 0);
	return chan;
}

START_TEST(test_hook_sees_old_content_before_every_write)
{
	char path[64], buf[BS], out[BS];
	io_channel chan = open_chan(path);
	struct nx_blkio *io = nx_blkio_from_channel(chan);
	struct hook_log log = { .io = io };

	memset(buf, 'a', BS);
	ck_assert_int_eq(io_channel_write_blk64(chan, 3, 1, buf), 0);
	nx_blkio_set_hook(io, log_hook, &log);
	memset(buf, 'b', BS);
	ck_assert_int_eq(io_channel_write_blk64(chan, 3, 1, buf), 0);
	ck_assert_int_eq(log.calls, 1);
	ck_assert_uint_eq(log.last_off, 3 * BS);
	ck_assert_int_eq(log.old[0], 'a');
	ck_assert_int_eq(io_channel_read_blk64(chan, 3, 1, out), 0);
	ck_assert_int_eq(out[0], 'b');
	/* byte writes (the superblock path) are hooked too */
	ck_assert_int_eq(io_channel_write_byte(chan, 5 * BS + 10, 4, "xyzw"), 0);
	ck_assert_int_eq(log.calls, 2);
	ck_assert_uint_eq(log.last_len, 4);
	io_channel_close(chan);
	unlink(path);
}
END_TEST

START_TEST(test_batch_holds_repeated_writes_and_reads_see_them)
{
	char path[64], buf[BS], out[2 * BS];
	io_channel chan = open_chan(path);
	struct nx_blkio *io = nx_blkio_from_channel(chan);
	struct hook_log log = { .io = io };
	struct nx_blkio_stats st0, st1;
	int i;

	memset(buf, 'o', BS);
	ck_assert_int_eq(io_channel_write_blk64(chan, 7, 1, buf), 0);
	nx_blkio_set_hook(io, log_hook, &log);
	nx_blkio_set_unit(io, BS);
	nx_blkio_get_stats(io, &st0);
	nx_blkio_begin_batch(io);
	for (i = 0; i < 50; i++) {
		memset(buf, 'A' + (i % 26), BS);
		ck_assert_int_eq(io_channel_write_blk64(chan, 7, 1, buf), 0);
	}
	ck_assert_int_eq(log.calls, 0);		/* nothing written yet */
	ck_assert_int_eq(io_channel_read_blk64(chan, 6, 2, out), 0);
	ck_assert_int_eq(out[BS], 'A' + (49 % 26));	/* reads see it */
	ck_assert_int_eq(nx_blkio_end_batch(io), 0);
	nx_blkio_get_stats(io, &st1);
	/* one device write, one hook call that saw the pre-batch content */
	ck_assert_int_eq(log.calls, 1);
	ck_assert_int_eq(log.old[0], 'o');
	ck_assert_uint_eq(st1.bytes_written - st0.bytes_written, BS);
	ck_assert_int_eq(io_channel_read_blk64(chan, 7, 1, out), 0);
	ck_assert_int_eq(out[0], 'A' + (49 % 26));
	io_channel_close(chan);
	unlink(path);
}
END_TEST

START_TEST(test_batch_keeps_order_with_larger_writes)
{
	char path[64], buf[BS], big[4 * BS], out[BS];
	io_channel chan = open_chan(path);
	struct nx_blkio *io = nx_blkio_from_channel(chan);

	nx_blkio_set_unit(io, BS);
	nx_blkio_begin_batch(io);
	memset(buf, 'h', BS);
	ck_assert_int_eq(io_channel_write_blk64(chan, 10, 1, buf), 0);
	ck_assert_int_eq(io_channel_write_blk64(chan, 20, 1, buf), 0);
	/* a multi-block write over block 10 supersedes the held copy */
	memset(big, 'L', sizeof(big));
	ck_assert_int_eq(io_channel_write_blk64(chan, 9, 4, big), 0);
	ck_assert_int_eq(nx_blkio_end_batch(io), 0);
	ck_assert_int_eq(io_channel_read_blk64(chan, 10, 1, out), 0);
	ck_assert_int_eq(out[0], 'L');
	ck_assert_int_eq(io_channel_read_blk64(chan, 20, 1, out), 0);
	ck_assert_int_eq(out[0], 'h');
	io_channel_close(chan);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blkio");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_hook_sees_old_content_before_every_write);
	tcase_add_test(tc, test_batch_holds_repeated_writes_and_reads_see_them);
	tcase_add_test(tc, test_batch_keeps_order_with_larger_writes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
