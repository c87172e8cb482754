/*
 * test_blkio.c - the block I/O layer: write hook, write batching, the
 * page cache hints, the block cache (bcache.h), and byte channels
 * (bytechan.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include "fixture.h"
#include "nextfs/bcache.h"
#include "nextfs/blkio.h"
#include "nextfs/bytechan.h"
#include "nextfs/faults.h"

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

/*
 * A file for page-cache tests: not on tmpfs, whose pages cannot be
 * dropped (/var/tmp, else the working directory: the build tree).
 */
static void disk_file(char *path, size_t size)
{
	const char *dirs[] = { "/var/tmp", "." };
	struct statfs sf;
	size_t i;
	int fd;

	for (i = 0; i < 2; i++)
		if (statfs(dirs[i], &sf) == 0 && sf.f_type != 0x01021994)
			break;
	ck_assert_msg(i < 2, "no disk-backed directory for the test file");
	snprintf(path, 64, "%s/nxstream-XXXXXX", dirs[i]);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* Bytes of [off, off+len) of PATH in the page cache. */
static size_t resident_bytes(const char *path, size_t off, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t n = len / (size_t)page, i, count = 0;
	unsigned char *vec = malloc(n);
	int fd = open(path, O_RDONLY);
	void *map;

	ck_assert_ptr_nonnull(vec);
	ck_assert_int_ge(fd, 0);
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	ck_assert_ptr_ne(map, MAP_FAILED);
	ck_assert_int_eq(mincore(map, len, vec), 0);
	for (i = 0; i < n; i++)
		count += vec[i] & 1;
	munmap(map, len);
	close(fd);
	free(vec);
	return count * (size_t)page;
}

/*
 * Streamed file data does not stay in the image's page cache beyond the
 * window (the FUSE page cache has it), small writes are left alone, and
 * what was dropped reads back intact from the device.
 */
START_TEST(test_streamed_data_dropped_behind_window)
{
	const size_t mib = 1U << 20, total = 64 * mib;
	char path[64], *buf = malloc(mib), *out = malloc(mib);
	struct nx_blkio *io;
	io_channel chan;
	size_t pos;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(out);
	disk_file(path, total + mib);
	ck_assert_int_eq(nx_blkio_manager->open(path, IO_FLAG_RW, &chan), 0);
	io = nx_blkio_from_channel(chan);
	/* small writes: not streamed data */
	memset(buf, 's', mib);
	for (pos = 0; pos < mib; pos += 4096)
		ck_assert_int_eq(nx_blkio_pwrite_data(io, buf, 4096,
						      total + pos), 0);
	for (pos = 0; pos < total; pos += mib) {
		memset(buf, (int)('A' + pos / mib % 26), mib);
		ck_assert_int_eq(nx_blkio_pwrite_data(io, buf, mib, pos), 0);
		nx_blkio_stream_settle(io);
		/*
		 * Write-back of what is dropped must be complete, or its
		 * dirty or in-flight pages are (rightly) kept.
		 */
		if (pos + mib == 16 * mib)
			ck_assert_int_eq(nx_blkio_sync(io), 0);
	}
	ck_assert_uint_eq(resident_bytes(path, 0, 16 * mib), 0);
	ck_assert_uint_eq(resident_bytes(path, total, mib), mib);
	for (pos = 0; pos < total; pos += mib) {
		ck_assert_int_eq(nx_blkio_pread(io, out, mib, pos), 0);
		memset(buf, (int)('A' + pos / mib % 26), mib);
		ck_assert_int_eq(memcmp(out, buf, mib), 0);
	}
	io_channel_close(chan);
	unlink(path);
	free(buf);
	free(out);
}
END_TEST

/* Does the file system under PATH take O_DIRECT reads? */
static int direct_reads_work(const char *path)
{
	void *buf = NULL;
	int fd = open(path, O_RDONLY | O_DIRECT), ok;

	if (fd < 0)
		return 0;
	ck_assert_int_eq(posix_memalign(&buf, 4096, 4096), 0);
	ok = pread(fd, buf, 4096, 0) == 4096;
	free(buf);
	close(fd);
	return ok;
}

/*
 * Large aligned reads bypass the image's page cache, and still see what
 * was just written through it (dirty, not yet written back); unaligned
 * or small reads keep working through the cache.
 */
START_TEST(test_large_reads_bypass_page_cache_and_see_writes)
{
	const size_t mib = 1U << 20;
	char path[64], *buf = malloc(mib), *out = NULL;
	struct nx_blkio *io;
	io_channel chan;
	int fd;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(posix_memalign((void **)&out, 4096, 2 * mib), 0);
	disk_file(path, 4 * mib);
	ck_assert_int_eq(nx_blkio_manager->open(path, IO_FLAG_RW, &chan), 0);
	io = nx_blkio_from_channel(chan);
	memset(buf, 'd', mib);
	ck_assert_int_eq(nx_blkio_pwrite_data(io, buf, mib, mib), 0);
	/* dirty in the page cache: a direct read must still return it */
	ck_assert_int_eq(nx_blkio_pread(io, out, mib, mib), 0);
	ck_assert_int_eq(memcmp(out, buf, mib), 0);
	/* the same range unaligned in memory: the buffered path */
	ck_assert_int_eq(nx_blkio_pread(io, out + 512, mib, mib), 0);
	ck_assert_int_eq(memcmp(out + 512, buf, mib), 0);
	/* clean and out of the cache: an aligned read leaves it out */
	ck_assert_int_eq(nx_blkio_sync(io), 0);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	ck_assert_int_eq(nx_blkio_pread(io, out, mib, mib), 0);
	ck_assert_int_eq(memcmp(out, buf, mib), 0);
	if (direct_reads_work(path))
		ck_assert_uint_eq(resident_bytes(path, mib, mib), 0);
	else
		fprintf(stderr, "%s: no O_DIRECT here, residency not checked\n",
			path);
	io_channel_close(chan);
	unlink(path);
	free(buf);
	free(out);
}
END_TEST

/* A device in memory for nx_bytechan_open_fs(). */
struct memdev {
	char *buf;
	uint64_t size;
	unsigned writes;
};

static errcode_t mem_read(void *priv, void *buf, uint64_t off, uint64_t len)
{
	struct memdev *d = priv;

	if (off > d->size || len > d->size - off)
		return EXT2_ET_SHORT_READ;
	memcpy(buf, d->buf + off, len);
	return 0;
}

static errcode_t mem_write(void *priv, const void *buf, uint64_t off,
			   uint64_t len)
{
	struct memdev *d = priv;

	if (off > d->size || len > d->size - off)
		return EXT2_ET_SHORT_WRITE;
	memcpy(d->buf + off, buf, len);
	d->writes++;
	return 0;
}

static void slurp(const char *path, struct memdev *d)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	d->size = (uint64_t)lseek(fd, 0, SEEK_END);
	d->buf = malloc(d->size);
	ck_assert_ptr_nonnull(d->buf);
	n = pread(fd, d->buf, d->size, 0);
	ck_assert_int_eq(n, (ssize_t)d->size);
	close(fd);
	d->writes = 0;
}

static void spill(const char *path, const struct memdev *d)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, d->buf, d->size, 0), (ssize_t)d->size);
	close(fd);
}

/*
 * Snapshot views and export open libext2fs on byte callbacks: a device
 * without a write callback must refuse to be opened for writing (a view
 * must never change), reads must serve every block size, and with one
 * every write libext2fs makes must land in the callback and nowhere else.
 */
START_TEST(test_bytechan_serves_file_system_from_callbacks)
{
	const struct nx_bytechan_ops ro = { .read = mem_read };
	const struct nx_bytechan_ops rw = { .read = mem_read,
					    .write = mem_write };
	char path[256], copy[256];
	struct memdev dev;
	ext2_filsys fs;
	ext2_ino_t ino;
	blk64_t blocks;

	nxt_mkfs(path, nxt_flavours[_i], 16);
	slurp(path, &dev);

	ck_assert_int_eq(nx_bytechan_open_fs(&ro, &dev, EXT2_FLAG_64BITS,
					     &fs), 0);
	blocks = ext2fs_blocks_count(fs->super);
	ck_assert_uint_eq(blocks * fs->blocksize, dev.size);
	ck_assert_int_eq(ext2fs_lookup(fs, EXT2_ROOT_INO, "lost+found", 10,
				       NULL, &ino), 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	ck_assert_int_eq(nx_bytechan_open_fs(&ro, &dev, EXT2_FLAG_64BITS |
					     EXT2_FLAG_RW, &fs), EROFS);
	ck_assert_uint_eq(dev.writes, 0);

	ck_assert_int_eq(nx_bytechan_open_fs(&rw, &dev, EXT2_FLAG_64BITS |
					     EXT2_FLAG_RW, &fs), 0);
	ck_assert_int_eq(ext2fs_read_bitmaps(fs), 0);
	ck_assert_int_eq(ext2fs_mkdir(fs, EXT2_ROOT_INO, 0, "in-memory"), 0);
	ck_assert_int_eq(ext2fs_close_free(&fs), 0);
	ck_assert_uint_gt(dev.writes, 0);

	/* The file on disk never saw it; a copy of the memory has it. */
	ck_assert_int_eq(ext2fs_open(path, EXT2_FLAG_64BITS, 0, 0,
				     unix_io_manager, &fs), 0);
	ck_assert_int_ne(ext2fs_lookup(fs, EXT2_ROOT_INO, "in-memory", 9,
				       NULL, &ino), 0);
	ext2fs_close_free(&fs);
	strcpy(copy, path);
	strcat(copy, ".mem");
	ck_assert_int_eq(nxt_copy_image(path, copy), 0);
	spill(copy, &dev);
	ck_assert_int_eq(ext2fs_open(copy, EXT2_FLAG_64BITS, 0, 0,
				     unix_io_manager, &fs), 0);
	ck_assert_int_eq(ext2fs_lookup(fs, EXT2_ROOT_INO, "in-memory", 9,
				       NULL, &ino), 0);
	ext2fs_close_free(&fs);
	ck_assert_int_eq(nxt_fsck(copy), 0);
	nxt_unlink(copy);
	nxt_unlink(path);
	free(dev.buf);
}
END_TEST

/* The cache on its own: fills, hits, patches, forgets, stale fills, bound. */
START_TEST(test_bcache_bounded_patched_and_forgotten)
{
	struct nx_bcache *c;
	struct nx_bcache_stats st;
	char blk[16], out[32], big[64];
	uint64_t epoch;
	int i;

	ck_assert_int_eq(nx_bcache_create(16, 4, &c), 0);
	for (i = 0; i < 6; i++) {
		memset(blk, 'a' + i, sizeof(blk));
		nx_bcache_fill(c, (uint64_t)i * 16, 16, blk,
			       nx_bcache_epoch(c));
	}
	nx_bcache_get_stats(c, &st);
	ck_assert_uint_eq(st.blocks, 4);	/* never more than asked */
	ck_assert_uint_eq(st.evictions, 2);
	/* The newest is there, with its bytes; a two-block read too. */
	ck_assert(nx_bcache_get(c, 5 * 16, 16, out));
	ck_assert(out[0] == 'f' && out[15] == 'f');
	ck_assert(nx_bcache_get(c, 4 * 16, 32, out));
	ck_assert(out[0] == 'e' && out[31] == 'f');
	/* A write across blocks patches what is cached, byte exact. */
	memset(big, 'Z', sizeof(big));
	nx_bcache_update(c, 4 * 16 + 10, 12, big);
	ck_assert(nx_bcache_get(c, 4 * 16, 32, out));
	ck_assert(out[9] == 'e' && out[10] == 'Z' && out[15] == 'Z');
	ck_assert(out[16] == 'Z' && out[21] == 'Z' && out[22] == 'f');
	/* Forgotten: a miss, and a two-block read needs both. */
	nx_bcache_forget(c, 5 * 16 + 3, 1);
	ck_assert(!nx_bcache_get(c, 5 * 16, 16, out));
	ck_assert(!nx_bcache_get(c, 4 * 16, 32, out));
	ck_assert(nx_bcache_get(c, 4 * 16, 16, out));
	/* Bytes read before a write are not cached after it. */
	epoch = nx_bcache_epoch(c);
	nx_bcache_update(c, 0, 1, big);
	memset(blk, 'x', sizeof(blk));
	nx_bcache_fill(c, 9 * 16, 16, blk, epoch);
	ck_assert(!nx_bcache_get(c, 9 * 16, 16, out));
	nx_bcache_clear(c);
	ck_assert(!nx_bcache_get(c, 4 * 16, 16, out));
	nx_bcache_free(c);
}
END_TEST

/* The checks of test_cache_is_the_device, run inside the write hook. */
struct truth {
	struct nx_blkio *io;
	int fd;
	int hook_calls;
};

static void assert_block_is_device(struct truth *t, uint64_t blk)
{
	char got[BS], want[BS];

	ck_assert_int_eq(nx_blkio_pread(t->io, got, BS, blk * BS), 0);
	ck_assert_int_eq(pread(t->fd, want, BS, (off_t)(blk * BS)), BS);
	ck_assert_msg(!memcmp(got, want, BS), "block %llu: the cache hides "
		      "the device", (unsigned long long)blk);
}

/* Copy-on-write must see the old content: the device's, not a cached one. */
static errcode_t truth_hook(void *priv, uint64_t off, uint64_t len,
			    const void *data)
{
	struct truth *t = priv;
	uint64_t b;

	t->hook_calls++;
	for (b = off / BS; b * BS < off + len; b++)
		assert_block_is_device(t, b);
	return 0;
}

/*
 * Random reads and writes of every kind, with and without a fault plan
 * that drops writes: after each, every block read through the channel
 * is what the file holds (read with a descriptor of its own).
 */
START_TEST(test_cache_is_the_device)
{
	char path[64], buf[4 * BS + 512];
	io_channel chan = open_chan(path);
	struct nx_blkio *io = nx_blkio_from_channel(chan);
	struct truth t = { .io = io };
	struct nx_faults cut;
	struct nx_bcache_stats st;
	unsigned seed = 30, i, k, b;

	t.fd = open(path, O_RDONLY);
	ck_assert_int_ge(t.fd, 0);
	nx_blkio_set_unit(io, BS);
	nx_blkio_set_hook(io, truth_hook, &t);
	for (i = 0; i < 3000; i++) {
		unsigned op = (unsigned)rand_r(&seed) % 6;
		uint64_t blk = (unsigned)rand_r(&seed) % 60;
		uint64_t off = blk * BS + (op == 1 ? rand_r(&seed) % BS : 0);
		size_t len = op == 1 ? 1 + (size_t)rand_r(&seed) % (3 * BS) :
			     BS * (1 + (size_t)rand_r(&seed) % 4);

		if (i == 1000) {	/* a crash: writes dropped from here */
			memset(&cut, 0, sizeof(cut));
			cut.cut_after = 1;
			cut.unit = BS;
			nx_blkio_set_faults(io, &cut);
		} else if (i == 1500) {
			nx_blkio_set_faults(io, NULL);
		}
		for (k = 0; k < len; k++)
			buf[k] = (char)rand_r(&seed);
		switch (op) {
		case 0:
			ck_assert_int_eq(nx_blkio_pread(io, buf, len, off), 0);
			break;
		case 1:
			ck_assert_int_eq(nx_blkio_pwrite(io, buf, len, off), 0);
			break;
		case 2:
			ck_assert_int_eq(nx_blkio_pwrite_raw(io, buf, len, off),
					 0);
			break;
		case 3:
			ck_assert_int_eq(nx_blkio_pwrite_data(io, buf, len,
							      off), 0);
			break;
		case 4:		/* held, then written through the hook */
			nx_blkio_begin_batch(io);
			ck_assert_int_eq(nx_blkio_pwrite(io, buf, BS, off), 0);
			ck_assert_int_eq(io_channel_read_blk64(chan, blk, 1,
							buf + BS), 0);
			ck_assert(!memcmp(buf, buf + BS, BS));
			ck_assert_int_eq(nx_blkio_end_batch(io), 0);
			break;
		default:
			ck_assert_int_eq(io_channel_read_blk64(chan, blk,
						(int)(len / BS), buf), 0);
			break;
		}
		for (b = 0; b < 64; b++)
			assert_block_is_device(&t, b);
	}
	nx_blkio_cache_stats(io, &st);
	ck_assert_uint_gt(st.hits, 1000);	/* it did serve reads */
	ck_assert_uint_gt(t.hook_calls, 100);
	close(t.fd);
	ck_assert_int_eq(io_channel_close(chan), 0);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blkio");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_hook_sees_old_content_before_every_write);
	tcase_add_test(tc, test_batch_holds_repeated_writes_and_reads_see_them);
	tcase_add_test(tc, test_batch_keeps_order_with_larger_writes);
	tcase_add_test(tc, test_streamed_data_dropped_behind_window);
	tcase_add_test(tc, test_large_reads_bypass_page_cache_and_see_writes);
	tcase_add_test(tc, test_bcache_bounded_patched_and_forgotten);
	tcase_add_test(tc, test_cache_is_the_device);
	tcase_add_loop_test(tc, test_bytechan_serves_file_system_from_callbacks,
			    0, NXT_NFLAVOURS);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
