/*
 * mount.c - the nextfs tool talking to a running nextfs-fuse through its
 * mountpoint (the private ioctls of nxioctl.h), and finding the
 * mountpoint that serves an image that is in use.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <ext2fs/ext2fs.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/open.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "safepath.h"

int nx_cli_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

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
		if (n == cap) {
			struct nx_snapinfo *more;

			cap = cap ? 2 * cap : 64;
			more = realloc(v, cap * sizeof(*v));
			if (!more) {
				nx_cli_error("out of memory");
				rc = NX_CLI_FAIL;
				break;
			}
			v = more;
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

/* Is SOURCE (a mount's source) the file or device IMG (stat'ed)? */
static int same_volume(const char *source, const struct stat *img)
{
	struct stat st;

	if (stat(source, &st) != 0)
		return 0;
	if (S_ISBLK(img->st_mode))
		return S_ISBLK(st.st_mode) && st.st_rdev == img->st_rdev;
	return st.st_dev == img->st_dev && st.st_ino == img->st_ino;
}

struct find_mount {
	struct stat img;
	char *found;
};

static int serves_image(void *priv, const struct nx_sp_mntent *e)
{
	struct find_mount *f = priv;

	/* fuse.nextfs, or fuseblk with any subtype: asked later */
	if (strncmp(e->type, "fuse", 4) || !same_volume(e->source, &f->img))
		return 0;
	f->found = strdup(e->mnt);
	return 1;
}

char *nx_cli_find_mount(const char *image)
{
	struct find_mount f = { .found = NULL };

	if (stat(image, &f.img) != 0)
		return NULL;
	nx_sp_mountinfo_each(serves_image, &f);
	return f.found;
}

/*
 * The nextfs mount of the directory TARGET (*MNT: its mountpoint as
 * mountinfo spells it, which nx_cli_mount_root() checks again at each
 * use).  A command that writes (not NX_VOL_RDONLY) acts on
 * MNT/.snapshots, which only the root has: TARGET must be that root.
 */
static int mountpoint_of(const char *target, int flags, char **mnt)
{
	struct nx_sp_place p;

	if (nx_sp_locate(target, NX_SP_FUSE | NX_SP_FOLLOW_LAST, &p)) {
		if (errno == EMEDIUMTYPE)
			nx_cli_error("%s is not the mountpoint of a nextfs "
				     "volume", target);
		else
			nx_cli_error("%s: %s", target, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	if (p.rel[0] && !(flags & NX_VOL_RDONLY))
		nx_cli_error("%s is not the mountpoint of a nextfs volume "
			     "(it is below the one at %s)", target,
			     p.mnt.path);
	else if (!(*mnt = strdup(p.mnt.path)))
		nx_cli_error("out of memory");
	nx_sp_place_free(&p);
	return *mnt ? NX_CLI_OK : NX_CLI_FAIL;
}

int nx_cli_open_target(const char *target, int flags, struct nx_volume **vol,
		       char **mnt)
{
	char msg[512] = "";
	errcode_t err;

	*vol = NULL;
	*mnt = NULL;
	if (nx_cli_is_dir(target))
		return mountpoint_of(target, flags, mnt);
	err = nx_open_volume(target, flags, vol, msg, sizeof(msg));
	/* Served by nextfs-fuse: ask the daemon, through its mountpoint. */
	if (err == EBUSY && (*mnt = nx_cli_find_mount(target)))
		return NX_CLI_OK;
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}
