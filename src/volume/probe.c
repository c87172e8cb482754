/*
 * probe.c - what is on a device, before libext2fs is asked (sanity.h).
 *
 * libext2fs says "Bad magic number in super-block" for anything that is
 * not ext2/3/4, and "Attempt to read block from filesystem resulted in
 * short read" for an empty file.  A user who gave nextfs the wrong
 * partition, a swap area or an XFS image deserves to hear which it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include "nextfs/devname.h"
#include "nextfs/fdio.h"
#include "nextfs/sanity.h"
#include "nextfs/volume.h"

/* Enough for every signature below (btrfs: 64 KiB + 72). */
#define PROBE_BYTES	(68 * 1024)

struct signature {
	const char *name;
	size_t offset;
	const char *magic;
	size_t len;
	const char *hint;	/* what to do instead, or NULL */
};

#define SIG(name, off, magic, hint) { name, off, magic, sizeof(magic) - 1, hint }

/* As blkid finds them; the first match names the content. */
static const struct signature signatures[] = {
	SIG("XFS", 0, "XFSB", NULL),
	SIG("btrfs", 0x10040, "_BHRfS_M", NULL),
	SIG("swap", 4096 - 10, "SWAPSPACE2", NULL),
	SIG("swap", 4096 - 10, "SWAP-SPACE", NULL),
	SIG("swap", 8192 - 10, "SWAPSPACE2", NULL),
	SIG("swap", 16384 - 10, "SWAPSPACE2", NULL),
	SIG("swap", 65536 - 10, "SWAPSPACE2", NULL),
	SIG("LUKS (encrypted)", 0, "LUKS\xba\xbe",
	    "open it with cryptsetup and give nextfs the opened device"),
	SIG("LVM2 physical volume", 536, "LVM2 001",
	    "give nextfs one of its logical volumes"),
	SIG("F2FS", 1024, "\x10\x20\xf5\xf2", NULL),
	SIG("squashfs", 0, "hsqs", NULL),
	SIG("ISO 9660", 0x8001, "CD001", NULL),
	SIG("NTFS", 3, "NTFS    ", NULL),
	SIG("exFAT", 3, "EXFAT   ", NULL),
	SIG("FAT", 82, "FAT32   ", NULL),
	SIG("FAT", 54, "FAT16   ", NULL),
	SIG("FAT", 54, "FAT12   ", NULL),
	SIG("JFS", 32768, "JFS1", NULL),
	SIG("ReiserFS", 65536 + 52, "ReIsErFs", NULL),
	SIG("ReiserFS", 65536 + 52, "ReIsEr2Fs", NULL),
	SIG("ReiserFS", 65536 + 52, "ReIsEr3Fs", NULL),
	SIG("GPT partition table", 512, "EFI PART",
	    "give nextfs one of its partitions"),
};

static int all_zero(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static errcode_t not_ext(const char *device, const unsigned char *buf,
			 size_t got, char *msg, size_t msglen)
{
	size_t i;

	for (i = 0; i < sizeof(signatures) / sizeof(signatures[0]); i++) {
		const struct signature *s = &signatures[i];

		if (s->offset + s->len > got ||
		    memcmp(buf + s->offset, s->magic, s->len))
			continue;
		nx_set_msg(msg, msglen, "%s: not an ext2/3/4 file system: %s "
			   "signature found%s%s", device, s->name,
			   s->hint ? "; " : "", s->hint ? s->hint : "");
		return EXT2_ET_BAD_MAGIC;
	}
	if (got >= 512 && buf[510] == 0x55 && buf[511] == 0xaa)
		nx_set_msg(msg, msglen, "%s: not an ext2/3/4 file system: DOS "
			   "partition table or boot sector found; give nextfs "
			   "one of its partitions", device);
	else if (all_zero(buf, got))
		nx_set_msg(msg, msglen, "%s: not an ext2/3/4 file system: its "
			   "first %zu KiB are zeros (no file system made on "
			   "it?)", device, got >> 10);
	else
		nx_set_msg(msg, msglen, "%s: not an ext2/3/4 file system (no "
			   "ext2/3/4 superblock at byte 1024, no other "
			   "signature known)", device);
	return EXT2_ET_BAD_MAGIC;
}

static errcode_t device_size(const char *device, int fd, struct nx_probe *p,
			     char *msg, size_t msglen)
{
	struct stat st;
	uint64_t bytes;

	if (fstat(fd, &st) != 0) {
		nx_set_msg(msg, msglen, "%s: %s", device, strerror(errno));
		return errno;
	}
	p->blockdev = S_ISBLK(st.st_mode);
	if (!p->blockdev) {
		p->size = (uint64_t)st.st_size;
		return 0;
	}
	if (ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
		nx_set_msg(msg, msglen, "%s: cannot get its size: %s", device,
			   strerror(errno));
		return errno;
	}
	p->size = bytes;
	return 0;
}

/*
 * A writer must be able to write: say so now, and that -o ro works.  A
 * read-only block device opens for writing and fails the writes (EPERM):
 * ask it.
 */
static errcode_t check_writable(const char *device, char *msg, size_t msglen)
{
	int fd = nx_dev_open(device, O_RDWR), e, ro = 0;
	struct stat st;

	if (fd >= 0) {
		if (fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) &&
		    ioctl(fd, BLKROGET, &ro) == 0 && ro) {
			close(fd);
			nx_set_msg(msg, msglen, "%s cannot be written (a "
				   "read-only device); mount it with -o ro to "
				   "serve it read-only", device);
			return EROFS;
		}
		close(fd);
		return 0;
	}
	e = errno;
	if (e == EACCES || e == EPERM || e == EROFS)
		nx_set_msg(msg, msglen, "%s cannot be written (%s); mount it "
			   "with -o ro to serve it read-only", device,
			   strerror(e));
	else
		nx_set_msg(msg, msglen, "%s: %s", device, strerror(e));
	return e;
}

errcode_t nx_probe_device(const char *device, int rdonly, struct nx_probe *p,
			  char *msg, size_t msglen)
{
	unsigned char *buf = NULL;
	size_t got = 0;
	errcode_t err;
	int fd;

	memset(p, 0, sizeof(*p));
	fd = nx_dev_open(device, O_RDONLY);
	if (fd < 0) {
		nx_set_msg(msg, msglen, "%s: %s", device, strerror(errno));
		return errno;
	}
	err = device_size(device, fd, p, msg, msglen);
	if (err)
		goto out;
	if (!p->size) {
		nx_set_msg(msg, msglen, "%s is empty (0 bytes): there is no "
			   "file system on it", device);
		err = EXT2_ET_BAD_MAGIC;
		goto out;
	}
	buf = calloc(1, PROBE_BYTES);
	if (!buf) {
		err = EXT2_ET_NO_MEMORY;
		goto out;
	}
	err = nx_read_full(fd, buf, PROBE_BYTES, 0, &got);
	if (err) {
		nx_set_msg(msg, msglen, "%s: cannot read it: %s", device,
			   strerror((int)err));
		goto out;
	}
	if (got < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE) {
		err = not_ext(device, buf, got, msg, msglen);
		if (msg && !strstr(msg, "signature"))
			nx_set_msg(msg, msglen, "%s is too small (%zu bytes) "
				   "to hold an ext2/3/4 file system", device,
				   got);
		goto out;
	}
	memcpy(&p->sb, buf + SUPERBLOCK_OFFSET, sizeof(p->sb));
	if (p->sb.s_magic != EXT2_SUPER_MAGIC) {
		err = not_ext(device, buf, got, msg, msglen);
		goto out;
	}
	if (p->sb.s_feature_incompat & EXT3_FEATURE_INCOMPAT_JOURNAL_DEV) {
		nx_set_msg(msg, msglen, "%s: not an ext2/3/4 file system: it "
			   "is an external ext3/ext4 journal", device);
		err = EXT2_ET_BAD_MAGIC;
		goto out;
	}
	if (!rdonly)
		err = check_writable(device, msg, msglen);
out:
	free(buf);
	close(fd);
	return err;
}
