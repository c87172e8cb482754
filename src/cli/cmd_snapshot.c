/*
 * cmd_snapshot.c - "nextfs snapshot take|delete|list".
 *
 * The target is either an unmounted image/device (opened directly, which
 * also takes the volume lock, so a mounted volume is refused with a clear
 * message) or the mountpoint of a running nextfs-fuse, driven through its
 * .snapshots directory: mkdir takes, rmdir deletes, and the directory's
 * "user.nextfs.snapshots" attribute lists (one snapshot per line:
 * id, name, take time in ns since the epoch, blocks held, block size).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/snapshot.h"
#include "cli.h"

#define LIST_XATTR "user.nextfs.snapshots"

static int is_mountpoint(const char *target)
{
	struct stat st;

	return stat(target, &st) == 0 && S_ISDIR(st.st_mode);
}

static int open_image(const char *image, int rdonly, struct nx_volume **vol)
{
	char msg[512] = "";
	errcode_t err = nx_volume_open(image, rdonly ? NX_VOL_RDONLY : 0, vol,
				       msg, sizeof(msg));

	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

static int close_image(struct nx_volume *vol)
{
	errcode_t err = nx_volume_close(vol);

	if (err) {
		nx_cli_error("closing the volume: %s", error_message(err));
		return NX_CLI_FAIL;
	}
	return 0;
}

static int snapdir_path(char *buf, size_t len, const char *mnt,
			const char *name)
{
	int n = snprintf(buf, len, "%s/%s%s%s", mnt, NX_SNAPDIR_NAME,
			 name ? "/" : "", name ? name : "");

	if (n < 0 || (size_t)n >= len) {
		nx_cli_error("path too long");
		return NX_CLI_USAGE;
	}
	return 0;
}

static int take_or_delete(const char *target, const char *name, int take)
{
	struct nx_volume *vol;
	char path[8192];
	errcode_t err;
	int rc;

	err = nx_snap_name_check(name);
	if (err) {
		nx_cli_error("invalid snapshot name '%s': %s", name,
			     err == ENAMETOOLONG ? "longer than 255 bytes" :
			     "must be non-empty, not '.' or '..', without '/'");
		return NX_CLI_USAGE;
	}
	if (is_mountpoint(target)) {
		rc = snapdir_path(path, sizeof(path), target, name);
		if (rc)
			return rc;
		if ((take ? mkdir(path, 0755) : rmdir(path)) < 0) {
			nx_cli_error("%s snapshot '%s' on %s: %s",
				     take ? "cannot take" : "cannot delete",
				     name, target, strerror(errno));
			return NX_CLI_FAIL;
		}
		return 0;
	}
	rc = open_image(target, 0, &vol);
	if (rc)
		return rc;
	nx_volume_lock(vol);
	err = take ? nx_snap_take(vol, name, NULL) : nx_snap_delete(vol, name);
	nx_volume_unlock(vol);
	if (err) {
		nx_cli_error("%s snapshot '%s': %s",
			     take ? "cannot take" : "cannot delete", name,
			     strerror(nx_errno(err)));
		close_image(vol);
		return NX_CLI_FAIL;
	}
	return close_image(vol);
}

/* Parse the mountpoint's list attribute into SNAPS. */
static int list_from_mount(const char *target, struct nx_snapinfo **snaps,
			   int *count, unsigned *blocksize)
{
	char path[8192], *buf, *line, *save = NULL;
	ssize_t len;
	int rc, n = 0, cap = 16;

	rc = snapdir_path(path, sizeof(path), target, NULL);
	if (rc)
		return rc;
	len = getxattr(path, LIST_XATTR, NULL, 0);
	if (len < 0) {
		nx_cli_error("%s is not a nextfs mount (%s)", target,
			     strerror(errno));
		return NX_CLI_FAIL;
	}
	buf = calloc(1, len + 1);
	*snaps = calloc(cap, sizeof(**snaps));
	if (!buf || !*snaps || getxattr(path, LIST_XATTR, buf, len) != len) {
		nx_cli_error("cannot read the snapshot list of %s", target);
		free(buf);
		return NX_CLI_FAIL;
	}
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		struct nx_snapinfo *s;
		uint64_t ns, blocks;
		int off = 0;

		if (n == cap) {
			struct nx_snapinfo *more = realloc(*snaps, 2 * cap *
							   sizeof(*more));
			if (!more)
				break;
			*snaps = more;
			cap *= 2;
		}
		s = &(*snaps)[n];
		memset(s, 0, sizeof(*s));
		if (sscanf(line, "%" SCNu32 " %" SCNu64 " %" SCNu64 " %u %n",
			   &s->id, &ns, &blocks, blocksize, &off) < 4 || !off)
			continue;
		snprintf(s->name, sizeof(s->name), "%s", line + off);
		s->taken.tv_sec = ns / 1000000000ULL;
		s->taken.tv_nsec = ns % 1000000000ULL;
		s->blocks = blocks;
		n++;
	}
	free(buf);
	*count = n;
	return 0;
}

static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* Output formats of "snapshot list". */
enum list_format { LIST_TABLE, LIST_JSON, LIST_NAMES0 };

/*
 * --names0: the names alone, each followed by a NUL byte, exactly as
 * stored (a name may hold any byte but '/' and NUL).  For scripts and
 * the bash completion, which read them with "mapfile -d ''".
 */
static void print_names0(const struct nx_snapinfo *s, int n)
{
	int i;

	for (i = 0; i < n; i++)
		fwrite(s[i].name, 1, strlen(s[i].name) + 1, stdout);
}

static void print_list(const struct nx_snapinfo *s, int n, unsigned bs,
		       enum list_format format)
{
	char when[64];
	int i;

	if (format == LIST_NAMES0) {
		print_names0(s, n);
		return;
	}
	if (format == LIST_JSON) {
		printf("[");
		for (i = 0; i < n; i++) {
			printf("%s{\"id\": %u, \"name\": ", i ? ", " : "",
			       s[i].id);
			print_json_string(s[i].name);
			printf(", \"taken\": %lld.%09ld, \"used_bytes\": %" PRIu64
			       "}", (long long)s[i].taken.tv_sec,
			       s[i].taken.tv_nsec, (uint64_t)s[i].blocks * bs);
		}
		printf("]\n");
		return;
	}
	printf("%-6s %-24s %-20s %12s\n", "ID", "NAME", "TAKEN", "USED");
	for (i = 0; i < n; i++) {
		struct tm tm;
		time_t t = s[i].taken.tv_sec;
		char used[32];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S",
			 localtime_r(&t, &tm));
		nx_cli_human_size((uint64_t)s[i].blocks * bs, used,
				  sizeof(used));
		printf("%-6u %-24s %-20s %12s\n", s[i].id, s[i].name, when,
		       used);
	}
}

static int list_snapshots(const char *target, enum list_format format)
{
	struct nx_snapinfo *snaps = NULL;
	struct nx_volume *vol;
	unsigned bs = 0;
	int rc, n = 0;
	errcode_t err;

	if (is_mountpoint(target)) {
		rc = list_from_mount(target, &snaps, &n, &bs);
		if (rc)
			return rc;
	} else {
		rc = open_image(target, 1, &vol);
		if (rc)
			return rc;
		bs = vol->fs->blocksize;
		err = nx_snap_list(vol, &snaps, &n);
		close_image(vol);
		if (err) {
			nx_cli_error("cannot list snapshots: %s",
				     error_message(err));
			return NX_CLI_FAIL;
		}
	}
	print_list(snaps, n, bs, format);
	free(snaps);
	return 0;
}

static void snapshot_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs snapshot take IMAGE_OR_MOUNTPOINT NAME\n"
		"       nextfs snapshot delete IMAGE_OR_MOUNTPOINT NAME\n"
		"       nextfs snapshot list [--json|--names0] IMAGE_OR_MOUNTPOINT\n"
		"\n"
		"Take, delete or list snapshots of an unmounted ext2/3/4 image\n"
		"or device, or of a volume mounted with nextfs-fuse (through\n"
		"MOUNTPOINT/.snapshots).  --names0 prints only the names, each\n"
		"followed by a NUL byte.\n");
}

int nx_cmd_snapshot(int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : NULL;
	enum list_format format = LIST_TABLE;
	int i, nargs = 0;
	const char *args[2] = { NULL, NULL };

	if (!sub || !strcmp(sub, "--help") || !strcmp(sub, "-h")) {
		snapshot_usage(sub ? stdout : stderr);
		return sub ? 0 : NX_CLI_USAGE;
	}
	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			format = LIST_JSON;
		} else if (!strcmp(argv[i], "--names0")) {
			format = LIST_NAMES0;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			snapshot_usage(stdout);
			return 0;
		} else if (nargs < 2) {
			args[nargs++] = argv[i];
		} else {
			nx_cli_error("too many arguments");
			return NX_CLI_USAGE;
		}
	}
	if (!strcmp(sub, "take") || !strcmp(sub, "delete")) {
		if (nargs != 2 || format != LIST_TABLE) {
			snapshot_usage(stderr);
			return NX_CLI_USAGE;
		}
		return take_or_delete(args[0], args[1], !strcmp(sub, "take"));
	}
	if (!strcmp(sub, "list")) {
		if (nargs != 1) {
			snapshot_usage(stderr);
			return NX_CLI_USAGE;
		}
		return list_snapshots(args[0], format);
	}
	nx_cli_error("unknown snapshot command '%s'", sub);
	snapshot_usage(stderr);
	return NX_CLI_USAGE;
}
