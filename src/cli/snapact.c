/*
 * snapact.c - taking and deleting snapshots on a target, the same way
 * for every command: on a mount through its .snapshots directory (the
 * daemon takes under its lock and tells the kernel), on an image that
 * this process opened under the volume lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nextfs/snapshot.h"
#include "cli.h"

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
	int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		nx_cli_error("cannot open %s: %s", mnt, strerror(errno));
		return NX_CLI_FAIL;
	}
	if (syncfs(fd) < 0)
		nx_cli_error("warning: flushing %s before the take: %s; the "
			     "snapshot holds what reached the volume", mnt,
			     strerror(errno));
	close(fd);
	return 0;
}

/* MNT/.snapshots/NAME into PATH (SIZE bytes); 0 or ENAMETOOLONG. */
static errcode_t snap_path(char *path, size_t size, const char *mnt,
			   const char *name)
{
	int n = snprintf(path, size, "%s/%s/%s", mnt, NX_SNAPDIR_NAME, name);

	return n < 0 || (size_t)n >= size ? ENAMETOOLONG : 0;
}

errcode_t nx_cli_take(void *target, const char *name)
{
	struct nx_cli_target *t = target;
	char path[8192];
	errcode_t err;

	if (t->mnt) {
		err = snap_path(path, sizeof(path), t->mnt, name);
		if (!err && mkdir(path, 0755) < 0)
			err = errno;
		return err;
	}
	nx_volume_lock(t->vol);
	err = nx_snap_take(t->vol, name, NULL);
	nx_volume_unlock(t->vol);
	return err;
}

errcode_t nx_cli_delete(struct nx_cli_target *t, const char *name)
{
	char path[8192];
	errcode_t err;

	if (t->mnt) {
		err = snap_path(path, sizeof(path), t->mnt, name);
		if (!err && rmdir(path) < 0)
			err = errno;
		return err;
	}
	nx_volume_lock(t->vol);
	err = nx_snap_delete(t->vol, name);
	nx_volume_unlock(t->vol);
	return err;
}
