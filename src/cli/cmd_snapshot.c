/*
 * cmd_snapshot.c - "nextfs snapshot take|delete|list|image".
 *
 * The target is either an unmounted image/device (opened directly, which
 * also takes the volume lock) or the mountpoint of a running nextfs-fuse,
 * driven through its .snapshots directory: mkdir takes, rmdir deletes,
 * and the list comes through the daemon's ioctls (mount.c).  An image
 * that a nextfs-fuse daemon serves is driven through its mountpoint the
 * same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/retention.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

/*
 * --wait: until the daemon of MNT has handed over what every deleted
 * snapshot held (reclaim.c), then flush, so that it is durable.  A
 * hand-over that makes no progress for a minute (a full volume, an
 * error the daemon logs) is reported instead of waited for forever.
 */
#define WAIT_STALL_S	60

static int wait_pending(const char *mnt)
{
	struct timespec tick = { 0, 50 * 1000 * 1000L };
	uint64_t blocks, last = UINT64_MAX;
	int snaps, rc, still = 0;

	for (;;) {
		rc = nx_cli_mount_pending(mnt, &snaps, &blocks);
		if (rc || !snaps)
			break;
		if (blocks != last) {
			last = blocks;
			still = 0;
		} else if (++still > WAIT_STALL_S * 20) {
			nx_cli_error("%s: the deleted snapshots' blocks are not "
				     "being handed over (see the daemon's "
				     "log)", mnt);
			return NX_CLI_FAIL;
		}
		nanosleep(&tick, NULL);
	}
	return rc ? rc : nx_cli_flush_mount(mnt);
}

/*
 * Take (NAME, or a timeline name of the current second when NAME is
 * NULL: printed on stdout) or delete on TARGET.
 */
static int take_or_delete(const char *target, const char *name, int take,
			  int wait)
{
	char q[NX_QUOTED_NAME_SIZE], tl[NX_TL_NAME_SIZE];
	struct nx_cli_target t;
	errcode_t err;
	int rc;

	if (name) {
		nx_out_quote(q, sizeof(q), name, strnlen(name, NX_NAME_MAX));
		err = nx_snap_name_check(name);
		if (err) {
			nx_cli_error("invalid snapshot name %s: %s", q,
				     err == ENAMETOOLONG ?
				     "longer than 255 bytes" :
				     "must be non-empty, not '.' or '..', "
				     "without '/'");
			return NX_CLI_USAGE;
		}
	}
	rc = nx_cli_target_open(target, 0, &t);
	if (rc)
		return rc;
	if (t.mnt && take)
		rc = nx_cli_flush_mount(t.mnt);
	if (!rc) {
		if (!take)
			err = nx_cli_delete(&t, name);
		else if (name)
			err = nx_cli_take(&t, name);
		else
			err = nx_tl_take(nx_cli_take, &t, tl);
		if (!name)
			nx_out_quote(q, sizeof(q), tl, strlen(tl));
		if (err) {
			nx_cli_error("cannot %s snapshot %s%s%s: %s",
				     take ? "take" : "delete", q,
				     t.mnt ? " on " : "", t.mnt ? t.mnt : "",
				     strerror(nx_errno(err)));
			rc = NX_CLI_FAIL;
		} else if (!name) {
			printf("%s\n", tl);
		} else if (wait && t.mnt) {
			rc = wait_pending(t.mnt);
		}
	}
	if (nx_cli_target_close(&t))
		rc = NX_CLI_FAIL;
	return rc;
}

int nx_cmd_snapshot_take(struct nx_cli_args *a)
{
	/* without NAME: a timeline name (retention.h) */
	return take_or_delete(a->pos[0], a->pos[1], 1, 0);
}

int nx_cmd_snapshot_delete(struct nx_cli_args *a)
{
	return take_or_delete(a->pos[0], a->pos[1], 0,
			      a->opt[NX_OPT_WAIT]);
}

/*
 * --names0: the names alone, each followed by a NUL byte, exactly as
 * stored (a name may hold any byte but '/' and NUL).  For scripts and
 * the bash completion, which read them with "mapfile -d ''".
 */
static void print_names0(const struct nx_cli_snaps *snaps)
{
	int i;

	for (i = 0; i < snaps->n; i++)
		fwrite(snaps->s[i].name, 1, strlen(snaps->s[i].name) + 1,
		       stdout);
}

static int list_snapshots(const char *target, enum nx_list_format format)
{
	struct nx_cli_snaps snaps;
	struct nx_json j;
	int rc = nx_cli_snaps_get(target, &snaps, NULL);

	if (rc)
		return rc;
	if (format == NX_LIST_NAMES0) {
		print_names0(&snaps);
	} else if (format == NX_LIST_JSON) {
		nx_json_init(&j, stdout);
		nx_cli_snaps_json(&j, NULL, &snaps);
		nx_json_end(&j);
	} else {
		nx_cli_snaps_table(&snaps, 0);
	}
	nx_cli_snaps_free(&snaps);
	return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
}

int nx_cmd_snapshot_list(struct nx_cli_args *a)
{
	return list_snapshots(a->pos[0], a->opt[NX_OPT_FORMAT]);
}

/*
 * "snapshot image TARGET NAME": where the mount shows snapshot NAME as an
 * image file (MNT/.snapshot-images/NAME), once it is there.  A path is
 * output like a name (output.h): as it is when that is safe, else quoted
 * as ls does; --json gives the exact bytes.
 */
static int image_path(const char *target, const char *name, int json)
{
	char *mnt = NULL, *path = NULL, q[NX_QUOTED_NAME_SIZE];
	struct nx_volume *vol = NULL;
	struct nx_json j;
	struct stat st;
	int rc, root;

	nx_out_quote(q, sizeof(q), name, strnlen(name, NX_NAME_MAX));
	if (nx_snap_name_check(name)) {
		nx_cli_error("no snapshot named %s", q);
		return NX_CLI_FAIL;
	}
	rc = nx_cli_open_target(target, NX_VOL_RDONLY, &vol, &mnt);
	if (rc)
		return rc;
	if (vol) {
		nx_volume_close(vol);
		nx_cli_error("%s is not mounted: snapshot images exist in a "
			     "nextfs-fuse mount (offline: nextfs export)",
			     target);
		return NX_CLI_FAIL;
	}
	root = nx_cli_mount_root(mnt, NX_SP_PATH_ONLY);
	rc = NX_CLI_FAIL;
	if (root < 0)
		goto out;
	if (asprintf(&path, "%s/%s", NX_IMGDIR_NAME, name) < 0) {
		path = NULL;
		nx_cli_error("out of memory");
	} else if (fstatat(root, path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		nx_cli_error(errno == ENOENT ? "no snapshot named %s on %s" :
			     "the image of snapshot %s on %s: %s", q, mnt,
			     strerror(errno));
	} else {
		free(path);
		path = NULL;
		if (asprintf(&path, "%s%s%s/%s", mnt,
			     mnt[strlen(mnt) - 1] == '/' ? "" : "/",
			     NX_IMGDIR_NAME, name) < 0) {
			path = NULL;
			nx_cli_error("out of memory");
		} else if (json) {
			nx_json_init(&j, stdout);
			nx_json_open(&j, NULL, '{');
			nx_json_str(&j, "path", path);
			nx_json_u64(&j, "size", (uint64_t)st.st_size);
			nx_json_close(&j, '}');
			nx_json_end(&j);
			rc = NX_CLI_OK;
		} else {
			nx_out_print_quoted(stdout, path);
			putchar('\n');
			rc = NX_CLI_OK;
		}
	}
	close(root);
out:
	free(path);
	free(mnt);
	if (!rc && fflush(stdout))
		rc = NX_CLI_FAIL;
	return rc;
}

int nx_cmd_snapshot_image(struct nx_cli_args *a)
{
	return image_path(a->pos[0], a->pos[1], a->opt[NX_OPT_JSON]);
}
