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
#include <sys/stat.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/retention.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"
#include "safepath.h"

static int close_image(struct nx_volume *vol)
{
	errcode_t err = nx_volume_close(vol);

	if (err) {
		nx_cli_error("closing the volume: %s", error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

/*
 * Take (NAME, or a timeline name of the current second when NAME is
 * NULL: printed on stdout) or delete on TARGET.
 */
static int take_or_delete(const char *target, const char *name, int take)
{
	char q[NX_QUOTED_NAME_SIZE], tl[NX_TL_NAME_SIZE], *mnt;
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
	rc = nx_cli_open_target(target, 0, &t.vol, &mnt);
	if (rc)
		return rc;
	t.mnt = mnt;
	if (mnt && take)
		rc = nx_cli_flush_mount(mnt);
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
				     mnt ? " on " : "", mnt ? mnt : "",
				     strerror(nx_errno(err)));
			rc = NX_CLI_FAIL;
		} else if (!name) {
			printf("%s\n", tl);
		}
	}
	free(mnt);
	if (t.vol && close_image(t.vol))
		rc = NX_CLI_FAIL;
	return rc;
}

/* Output formats of "snapshot list". */
enum list_format { LIST_TABLE, LIST_JSON, LIST_NAMES0 };

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

static int list_snapshots(const char *target, enum list_format format)
{
	struct nx_cli_snaps snaps;
	struct nx_json j;
	int rc = nx_cli_snaps_get(target, &snaps, NULL);

	if (rc)
		return rc;
	if (format == LIST_NAMES0) {
		print_names0(&snaps);
	} else if (format == LIST_JSON) {
		nx_json_init(&j, stdout);
		nx_cli_snaps_json(&j, NULL, &snaps);
		nx_json_end(&j);
	} else {
		nx_cli_snaps_table(&snaps, 0);
	}
	nx_cli_snaps_free(&snaps);
	return fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
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

static void snapshot_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs snapshot take IMAGE_OR_MOUNTPOINT [NAME]\n"
		"       nextfs snapshot delete IMAGE_OR_MOUNTPOINT NAME\n"
		"       nextfs snapshot list [--json|--names0] IMAGE_OR_MOUNTPOINT\n"
		"       nextfs snapshot prune IMAGE_OR_MOUNTPOINT --keep SPEC "
		"[--dry-run] [--json]\n"
		"       nextfs snapshot run IMAGE_OR_MOUNTPOINT [--] COMMAND [ARGS...]\n"
		"       nextfs snapshot image [--json] MOUNTPOINT NAME\n"
		"\n"
		"Take, delete or list snapshots of an unmounted ext2/3/4 image\n"
		"or device, or of a volume mounted with nextfs-fuse (through\n"
		"MOUNTPOINT/.snapshots; an image in use by nextfs-fuse goes\n"
		"through its mountpoint too).  Names print quoted where needed,\n"
		"as ls does; --json prints exact names (see nextfs(1)); --names0\n"
		"only the names, each followed by a NUL byte.  A NAME that\n"
		"starts with '-' goes after '--'.\n"
		"\n"
		"take without NAME names the snapshot after the time, UTC, as\n"
		"@GMT-YYYY.MM.DD-HH.MM.SS (Samba's format) and prints the name;\n"
		"if that name exists it waits for the next second.  take on a\n"
		"mount first flushes it (syncfs), so that data written through\n"
		"mmap and not yet msync'ed is in the snapshot.  prune deletes\n"
		"@GMT snapshots the SPEC does not keep (see 'nextfs snapshot\n"
		"prune --help').  run takes a snapshot before and after\n"
		"COMMAND ('nextfs snapshot run --help').  image prints the path of\n"
		"the file that is snapshot NAME as a standalone ext2/3/4 image\n"
		"(MOUNTPOINT/.snapshot-images/NAME: read-only, for root and the\n"
		"user who mounted the volume; loop-mount it, copy it with\n"
		"cp --sparse=always, check it with e2fsck).\n");
}

int nx_cmd_snapshot(int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : NULL;
	const char *args[2] = { NULL, NULL };
	int format = LIST_TABLE, n, rc;
	const struct nx_cli_opt opts[] = {
		{ "--json", &format, LIST_JSON },
		{ "--names0", &format, LIST_NAMES0 },
		{ NULL, NULL, 0 },
	};

	if (!sub || !strcmp(sub, "--help") || !strcmp(sub, "-h")) {
		snapshot_usage(sub ? stdout : stderr);
		return sub ? 0 : NX_CLI_USAGE;
	}
	if (!strcmp(sub, "prune"))	/* options with values: its own parser */
		return nx_cmd_snapshot_prune(argc - 1, argv + 1);
	if (!strcmp(sub, "run"))	/* its own command line: cmd_run.c */
		return nx_cmd_snapshot_run(argc - 1, argv + 1);
	rc = nx_cli_parse(argc - 1, argv + 1, "snapshot", opts, args, 2, &n);
	if (rc == NX_CLI_HELP) {
		snapshot_usage(stdout);
		return NX_CLI_OK;
	}
	if (rc)
		return rc;
	if (n > 2) {
		nx_cli_error("too many arguments");
		return NX_CLI_USAGE;
	}
	if (!strcmp(sub, "take") || !strcmp(sub, "delete")) {
		/* take without NAME: a timeline name (retention.h) */
		if (n < 2 - !strcmp(sub, "take") || format != LIST_TABLE) {
			snapshot_usage(stderr);
			return NX_CLI_USAGE;
		}
		return take_or_delete(args[0], n == 2 ? args[1] : NULL,
				      !strcmp(sub, "take"));
	}
	if (!strcmp(sub, "image")) {
		if (n != 2 || format == LIST_NAMES0) {
			snapshot_usage(stderr);
			return NX_CLI_USAGE;
		}
		return image_path(args[0], args[1], format == LIST_JSON);
	}
	if (!strcmp(sub, "list")) {
		if (n != 1) {
			snapshot_usage(stderr);
			return NX_CLI_USAGE;
		}
		return list_snapshots(args[0], format);
	}
	nx_cli_error("unknown snapshot command '%s'", sub);
	snapshot_usage(stderr);
	return NX_CLI_USAGE;
}
