/*
 * mount.c - the nextfs tool talking to a running nextfs-fuse through its
 * mountpoint (the private ioctls of nxioctl.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <ext2fs/ext2fs.h>
#include <et/com_err.h>
#include "nextfs/grow.h"
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"

int nx_cli_mount_root(const char *mnt, int flags)
{
	struct nx_sp_mount m;
	int fd;

	if (nx_sp_mount_open(mnt, flags | NX_SP_FUSE, &m)) {
		if (errno == EINVAL || errno == EMEDIUMTYPE)
			nx_cli_error("%s is not the mountpoint of a nextfs "
				     "volume", mnt);
		else
			nx_cli_error("%s: %s", mnt, nx_sp_why(errno));
		return -1;
	}
	fd = m.fd;
	m.fd = -1;
	nx_sp_mount_close(&m);
	return fd;
}

/* The root of the mount at MNT, open for ioctls; -1 after a message. */
static int open_mount(const char *mnt)
{
	return nx_cli_mount_root(mnt, 0);
}

static void not_nextfs(const char *mnt, int err)
{
	if (err == ENOTTY || err == EINVAL || err == ENOSYS)
		nx_cli_error("%s is not the mountpoint of a nextfs volume",
			     mnt);
	else
		nx_cli_error("%s: cannot ask the nextfs daemon: %s", mnt,
			     strerror(err));
}

int nx_cli_mount_snapshots(const char *mnt, struct nx_snapinfo **list,
			   int *count, unsigned *blocksize)
{
	struct nx_snapinfo *v = NULL;
	struct nx_ioc_snap q;
	size_t n = 0, cap = 0;
	uint32_t after = 0;
	int fd = open_mount(mnt), rc = NX_CLI_OK;

	if (fd < 0)
		return NX_CLI_FAIL;
	*blocksize = 0;
	for (;;) {
		memset(&q, 0, sizeof(q));
		q.after_id = after;
		if (ioctl(fd, NX_IOC_SNAP_NEXT, &q) < 0) {
			if (errno == ENOENT && (n || after == 0))
				break;	/* after the newest */
			not_nextfs(mnt, errno);
			rc = NX_CLI_FAIL;
			break;
		}
		if (nx_grow((void **)&v, &cap, n, sizeof(*v), 64)) {
			nx_cli_error("out of memory");
			rc = NX_CLI_FAIL;
			break;
		}
		memset(&v[n], 0, sizeof(v[n]));
		v[n].id = q.id;
		v[n].taken.tv_sec = q.taken_sec;
		v[n].taken.tv_nsec = q.taken_nsec;
		v[n].blocks = q.blocks;
		v[n].active = (q.flags & NX_IOC_SNAP_ACTIVE) != 0;
		if (q.namelen >= sizeof(v[n].name))
			q.namelen = sizeof(v[n].name) - 1;
		memcpy(v[n].name, q.name, q.namelen);
		*blocksize = q.blocksize;
		after = q.id;
		n++;
	}
	close(fd);
	if (rc) {
		free(v);
		return rc;
	}
	/* No snapshot: the block size comes with the superblock. */
	if (!n) {
		struct nx_ioc_volinfo vi;

		rc = nx_cli_mount_volinfo(mnt, &vi);
		if (rc)
			return rc;
		*blocksize = EXT2_BLOCK_SIZE((struct ext2_super_block *)
					     vi.super);
	}
	*list = v;
	*count = (int)n;
	return NX_CLI_OK;
}

int nx_cli_mount_pending(const char *mnt, int *snaps, uint64_t *blocks)
{
	struct nx_ioc_pending p;
	int fd = open_mount(mnt), rc = NX_CLI_OK;

	*snaps = 0;
	*blocks = 0;
	if (fd < 0)
		return NX_CLI_FAIL;
	if (ioctl(fd, NX_IOC_SNAP_PENDING, &p) == 0) {
		*snaps = (int)p.snapshots;
		*blocks = p.blocks;
	} else if (errno != ENOTTY) {
		not_nextfs(mnt, errno);
		rc = NX_CLI_FAIL;
	}
	close(fd);
	return rc;
}

int nx_cli_mount_volinfo(const char *mnt, struct nx_ioc_volinfo *vi)
{
	int fd = open_mount(mnt), rc = NX_CLI_OK;

	if (fd < 0)
		return NX_CLI_FAIL;
	if (ioctl(fd, NX_IOC_GET_VOLINFO, vi) < 0) {
		not_nextfs(mnt, errno);
		rc = NX_CLI_FAIL;
	}
	close(fd);
	return rc;
}
