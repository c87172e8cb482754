/*
 * cmd_diff.c - "nextfs diff [-F] IMAGE_OR_MOUNTPOINT OLD [NEW]".
 *
 * One line per change, zfs diff style, paths from the volume's root:
 *   - PATH            removed
 *   + PATH            created
 *   M PATH            content or attributes changed
 *   R OLD -> NEW      renamed (a renamed directory's contents are implied)
 * Bytes below '!', '\', DEL and bytes that are not printable UTF-8 are
 * written as \ooo (octal, output.h), so every line splits unambiguously
 * on spaces.  -F adds the file type
 * (F file, / directory, @ symlink, B/C device, | fifo, = socket).
 *
 * Both modes feed the one classifier (delta.h).  On an unmounted image
 * it compares block maps (cost grows with what changed).  On a
 * nextfs-fuse mountpoint the daemon runs the same classifier on the views
 * it has open and hands the delta over (mountdelta.c); for callers it
 * does not show it to, the trees MOUNTPOINT/.snapshots/OLD and .../NEW
 * (or the live tree) are walked through the kernel instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/delta.h"
#include "nextfs/safepath.h"
#include "nextfs/snaptool.h"
#include "cli.h"
#include "output.h"

static char type_char(mode_t type)
{
	switch (type & S_IFMT) {
	case S_IFDIR:
		return '/';
	case S_IFLNK:
		return '@';
	case S_IFBLK:
		return 'B';
	case S_IFCHR:
		return 'C';
	case S_IFIFO:
		return '|';
	case S_IFSOCK:
		return '=';
	default:
		return 'F';
	}
}

static int print_entry(void *priv, const struct nx_diff_entry *e)
{
	int *show_type = priv;

	putchar(e->kind);
	if (*show_type)
		printf(" %c", type_char(e->type));
	putchar(' ');
	nx_out_escape(stdout, e->path);
	if (e->kind == NX_DIFF_RENAMED) {
		printf(" -> ");
		nx_out_escape(stdout, e->newpath);
	}
	putchar('\n');
	return ferror(stdout) != 0;
}

/* The output is complete only if every line reached stdout. */
static int finish_output(void)
{
	int bad = ferror(stdout);

	if (fflush(stdout) || bad) {
		nx_cli_error("writing the list: %s", strerror(errno ? errno :
							      EIO));
		return NX_CLI_FAIL;
	}
	return 0;
}

static int diff_image(const char *image, const char *old, const char *new,
		      int show_type)
{
	struct nx_volume *vol;
	struct nx_progress prog;
	char msg[512] = "";
	errcode_t err;

	if (nx_cli_open_image(image, &vol))
		return NX_CLI_FAIL;
	nx_volume_lock(vol);
	nx_cli_progress_begin(&prog);
	err = nx_snap_diff(vol, old, new, print_entry, &show_type, &prog, msg,
			   sizeof(msg));
	nx_cli_progress_end(&prog);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return finish_output();
}

/* ------------------------------------------------------------------ */
/* Mountpoint mode.                                                    */

static int print_delta(const struct nx_delta *delta, int show_type)
{
	errcode_t err = nx_delta_diff(delta, print_entry, &show_type);

	if (err) {
		nx_cli_error("%s", error_message(err));
		return NX_CLI_FAIL;
	}
	return finish_output();
}

/* Open the tree NAME (NULL: the live tree) of the mount at ROOT. */
static int open_side(const char *mnt, int root, const char *name)
{
	char *rel = NULL;
	int fd;

	if (name && nx_snap_name_check(name)) {
		errno = ENOENT;
		fd = -1;
	} else if (name && asprintf(&rel, "%s/%s", NX_SNAPDIR_NAME,
				    name) < 0) {
		rel = NULL;
		errno = ENOMEM;
		fd = -1;
	} else {
		fd = nx_sp_open(root, name ? rel : "", O_RDONLY | O_DIRECTORY);
	}
	if (fd < 0)
		nx_cli_error("%s%s%s: %s", mnt, name ? "/" : "",
			     name ? rel : "", name && errno == ENOENT ?
			     "no such snapshot" : strerror(errno));
	free(rel);
	return fd;
}

/*
 * The daemon classifies with the block maps of the views it has open
 * (as the image's diff does); callers it does not show its delta to
 * (EPERM: not root nor the mounting user, docs/security.md) walk the
 * trees through the kernel instead, with their own permissions.
 */
static int diff_mount(const char *mnt, const char *old, const char *new,
		      int show_type)
{
	struct nx_delta delta = { 0 };
	struct nx_ioc_snap q;
	struct nx_sp_place p;
	uint32_t id[2] = { 0, 0 };
	int root[2] = { -1, -1 }, pos[2] = { 0, INT32_MAX };
	int s, rc = NX_CLI_FAIL, asked = 0;

	if (nx_sp_locate(mnt, NX_SP_FUSE | NX_SP_FOLLOW_LAST, &p)) {
		nx_cli_error("%s: %s", mnt, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	if (p.rel[0]) {
		nx_cli_error("%s is not the mountpoint of a nextfs volume "
			     "(it is below the one at %s)", mnt, p.mnt.path);
		goto out;
	}
	for (s = 0; s < 2; s++) {
		const char *name = s ? new : old;

		root[s] = open_side(p.mnt.path, p.mnt.fd, name);
		if (root[s] < 0)
			goto out;
		if (name && nx_cli_snap_at(root[s], name, &q, &pos[s]))
			asked = -1;	/* not a daemon that says */
		else if (name)
			id[s] = q.id;
	}
	if (!asked && pos[0] > pos[1]) {
		nx_cli_error("snapshot '%s' is newer than '%s'; name the "
			     "older one first", old, new);
		goto out;
	}
	if (!asked && !nx_cli_daemon_delta(root[0], id[0], id[1], 0,
					   &delta))
		asked = 1;
	else if (!asked && errno != EPERM && errno != ENOTTY) {
		nx_cli_error("%s: asking the daemon what changed: %s",
			     p.mnt.path, strerror(errno));
		goto out;
	}
	if (asked != 1 && nx_cli_walk_delta(root[0], root[1], p.mnt.id,
					    &delta))
		goto out;
	rc = print_delta(&delta, show_type);
out:
	nx_delta_free(&delta);
	for (s = 0; s < 2; s++)
		if (root[s] >= 0)
			close(root[s]);
	nx_sp_place_free(&p);
	return rc;
}

int nx_cmd_diff(struct nx_cli_args *a)
{
	struct stat st;

	if (stat(a->pos[0], &st) == 0 && S_ISDIR(st.st_mode))
		return diff_mount(a->pos[0], a->pos[1], a->pos[2],
				  a->opt[NX_OPT_TYPES]);
	return diff_image(a->pos[0], a->pos[1], a->pos[2],
			  a->opt[NX_OPT_TYPES]);
}
