/*
 * snapact.c - taking and deleting snapshots on a target, the same way
 * for every command: on a mount through its .snapshots directory (the
 * daemon takes under its lock and tells the kernel), on an image that
 * this process opened under the volume lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"

int nx_cli_target_open(const char *target, int flags,
		       struct nx_cli_target *t)
{
	return nx_cli_open_target(target, flags, &t->vol, &t->mnt);
}

int nx_cli_target_close(struct nx_cli_target *t)
{
	errcode_t err = t->vol ? nx_volume_close(t->vol) : 0;

	free(t->mnt);
	t->mnt = NULL;
	t->vol = NULL;
	if (err) {
		nx_cli_error("closing the volume: %s", error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

/*
 * Dirty pages of files mapped with mmap (written, not msync'ed) are still
 * the kernel's: syncfs makes them reach the daemon, so that the take
 * holds everything written before it.  mkdir .snapshots/NAME alone does
 * not do that (as with other file systems' snapshots).
 *
 * A flush that fails does not stop the take: syncfs reports errors of
 * earlier writes too (ENOSPC on a full volume, which is when people most
 * want a snapshot before cleaning up), and those bytes never reached the
 * volume whatever we do.  The snapshot holds what the volume holds; a
 * warning says what the flush reported.
 */
int nx_cli_flush_mount(const char *mnt)
{
	int fd = nx_cli_mount_root(mnt, 0);

	if (fd < 0)
		return NX_CLI_FAIL;
	if (syncfs(fd) < 0)
		nx_cli_error("warning: flushing %s before the take: %s; the "
			     "snapshot holds what reached the volume", mnt,
			     strerror(errno));
	close(fd);
	return 0;
}

/*
 * MNT/.snapshots, opened from the root of the mount MNT names, checked
 * as nx_sp_mount_open() does: a mount that changed since the command
 * found it fails instead of mkdir/rmdir acting somewhere else.  -1 with
 * errno.
 */
static int open_snapdir(const char *mnt)
{
	struct nx_sp_mount m;
	int fd, e;

	if (nx_sp_mount_open(mnt, NX_SP_FUSE | NX_SP_PATH_ONLY, &m))
		return -1;
	fd = openat(m.fd, NX_SNAPDIR_NAME, O_PATH | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
	e = errno;
	nx_sp_mount_close(&m);
	errno = e;
	return fd;
}

/* mkdir (TAKE) or rmdir .snapshots/NAME on the mount at MNT. */
static errcode_t snapdir_op(const char *mnt, const char *name, int take)
{
	errcode_t err = nx_snap_name_check(name);
	int fd;

	if (err)
		return err;
	fd = open_snapdir(mnt);
	if (fd < 0)
		return errno;
	if (take ? mkdirat(fd, name, 0755) : unlinkat(fd, name, AT_REMOVEDIR))
		err = errno;
	close(fd);
	return err;
}

errcode_t nx_cli_take(void *target, const char *name)
{
	struct nx_cli_target *t = target;
	errcode_t err;

	if (t->mnt)
		return snapdir_op(t->mnt, name, 1);
	nx_volume_lock(t->vol);
	err = nx_snap_take(t->vol, name, NULL);
	nx_volume_unlock(t->vol);
	return err;
}

errcode_t nx_cli_delete(struct nx_cli_target *t, const char *name)
{
	errcode_t err;

	if (t->mnt)
		return snapdir_op(t->mnt, name, 0);
	/* Offline, nobody waits behind the hand-over: finish it. */
	nx_volume_lock(t->vol);
	err = nx_snap_delete(t->vol, name);
	if (!err)
		err = nx_snap_reclaim_all(t->vol);
	nx_volume_unlock(t->vol);
	return err;
}
