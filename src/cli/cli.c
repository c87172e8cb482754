/*
 * cli.c - what every command of the nextfs tool uses: its messages,
 * sizes, writing a buffer whole, and the volume an argument names (an
 * image, a device, or the mountpoint of a nextfs-fuse that serves one).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/devname.h"
#include "nextfs/fdio.h"
#include "nextfs/open.h"
#include "nextfs/safepath.h"
#include "nextfs/volume.h"
#include "cli.h"
#include "output.h"

void nx_cli_error(const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	fputs("nextfs: ", stderr);
	if (n < 0)
		fputs(fmt, stderr);	/* out of memory: the gist */
	else
		nx_out_line(stderr, msg);
	fputc('\n', stderr);
	free(msg);
}

void nx_cli_human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
}

int nx_cli_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	errcode_t err = nx_write_all(fd, buf, len, off, NULL);

	if (err)
		errno = (int)err;
	return err ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* The volume an argument names                                        */

int nx_cli_pin_image(const char *image)
{
	if (nx_dev_path(image))
		return NX_CLI_OK;
	nx_cli_error("%s: %s", image, nx_sp_why(errno));
	return NX_CLI_FAIL;
}

int nx_cli_open_image(const char *image, struct nx_volume **vol)
{
	char msg[512] = "";
	errcode_t err;

	if (nx_cli_pin_image(image))
		return NX_CLI_FAIL;
	err = nx_open_volume(image, NX_VOL_RDONLY, vol, msg, sizeof(msg));
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

int nx_cli_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
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
	char *found, *source;
};

static int serves_image(void *priv, const struct nx_sp_mntent *e)
{
	struct find_mount *f = priv;

	/* fuse.nextfs, or fuseblk with any subtype: asked later */
	if (strncmp(e->type, "fuse", 4) || !same_volume(e->source, &f->img))
		return 0;
	f->found = strdup(e->mnt);
	f->source = strdup(e->source);
	return 1;
}

char *nx_cli_find_mount(const char *image, char **source)
{
	struct find_mount f = { .found = NULL };

	if (source)
		*source = NULL;
	if (nx_dev_stat(image, &f.img) != 0)
		return NULL;
	nx_sp_mountinfo_each(serves_image, &f);
	if (f.found && f.source && source)
		*source = f.source;
	else
		free(f.source);
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
	if (nx_cli_pin_image(target))
		return NX_CLI_FAIL;
	err = nx_open_volume(target, flags, vol, msg, sizeof(msg));
	/* Served by nextfs-fuse: ask the daemon, through its mountpoint. */
	if (err == EBUSY && (*mnt = nx_cli_find_mount(target, NULL)))
		return NX_CLI_OK;
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}
