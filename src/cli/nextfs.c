/*
 * nextfs.c - the "nextfs" tool: git-style subcommands around snapshots.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/devname.h"
#include "cli.h"
#include "output.h"
#include "safepath.h"

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

/* Is ARG one of NAMES ("-r|--repair")? */
static int opt_named(const char *names, const char *arg)
{
	size_t len = strlen(arg);
	const char *p = names;

	for (;;) {
		if (!strncmp(p, arg, len) && (p[len] == '|' || !p[len]))
			return 1;
		p = strchr(p, '|');
		if (!p)
			return 0;
		p++;
	}
}

int nx_cli_parse(int argc, char **argv, const char *cmd,
		 const struct nx_cli_opt *opts, const char **args, int max,
		 int *nargs)
{
	const struct nx_cli_opt *o;
	int i, done = 0;

	*nargs = 0;
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (done || arg[0] != '-' || !arg[1]) {
			if (*nargs < max)
				args[*nargs] = arg;
			(*nargs)++;
			continue;
		}
		if (!strcmp(arg, "--")) {
			done = 1;	/* what follows are names */
			continue;
		}
		if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
			return NX_CLI_HELP;
		for (o = opts; o && o->names; o++)
			if (opt_named(o->names, arg))
				break;
		if (!o || !o->names) {
			nx_cli_error("%s: unknown option '%s' (a name that "
				     "starts with '-' goes after '--')", cmd,
				     arg);
			return NX_CLI_USAGE;
		}
		*o->flag = o->value;
	}
	return NX_CLI_OK;
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

static void usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs COMMAND [ARGS]\n"
		"\n"
		"Commands:\n"
		"  snapshot take|delete|list|prune  manage snapshots of an image\n"
		"                              or a nextfs-fuse mountpoint; 'snapshot\n"
		"                              run MNT -- CMD': before and after CMD\n"
		"  versions PATH               a file's versions in the snapshots;\n"
		"                              --restore NAME gets one back\n"
		"  check IMAGE                 snapshot-aware consistency check\n"
		"  export IMAGE NAME OUT       write a snapshot as a standalone image\n"
		"  diff IMAGE_OR_MNT OLD [NEW] list what changed between snapshots\n"
		"  send [-p PARENT] SOURCE NAME  a snapshot as a btrfs send stream\n"
		"  restore IMAGE NAME          roll the live tree back to a snapshot\n"
		"  info IMAGE_OR_MOUNTPOINT    volume and snapshot summary\n"
		"  umount MOUNTPOINT           unmount; return once the volume is\n"
		"                              written back and released\n"
		"  version                     print the version (also --version)\n"
		"\n"
		"Run 'nextfs COMMAND --help' for a command's options.\n"
		"Exit status: 0 success, 1 failure (nothing changed), 2 usage\n"
		"(check: as e2fsck; umount: 3 when the daemon ended badly; see\n"
		"'nextfs COMMAND --help').\n"
		"\n"
		"Unmount with 'nextfs umount MNT': unlike fusermount3 -u it returns\n"
		"only when the volume is written back, so 'nextfs umount MNT &&\n"
		"e2fsck -fn IMAGE' checks the final image.\n");
}

/*
 * Called through a link as mount(8)'s or umount(8)'s helper
 * (/sbin/mount.nextfs, /sbin/umount.fuse.nextfs, ...: meson.build)?
 */
static int run_as_helper(int argc, char **argv, int *status)
{
	const char *name = strrchr(argv[0], '/');

	name = name ? name + 1 : argv[0];
	if (!strncmp(name, "mount.", 6))
		*status = nx_mount_helper(argc, argv);
	else if (!strncmp(name, "umount.", 7))
		*status = nx_cmd_umount(argc, argv);
	else
		return 0;
	return 1;
}

int main(int argc, char **argv)
{
	int status;

	/* No image or device is opened but as safepath.h resolves it. */
	nx_dev_set_resolver(nx_sp_open_volume);
	if (argc > 0 && run_as_helper(argc, argv, &status))
		return status;
	if (argc < 2) {
		usage(stderr);
		return NX_CLI_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return NX_CLI_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") ||
	    !strcmp(argv[1], "version")) {
		/* meson's project version, as nextfs-fuse -V prints it */
		printf("nextfs %s\n", NEXTFS_VERSION);
		return NX_CLI_OK;
	}
	if (!strcmp(argv[1], "snapshot"))
		return nx_cmd_snapshot(argc - 1, argv + 1);
	if (!strcmp(argv[1], "versions"))
		return nx_cmd_versions(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return nx_cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "export"))
		return nx_cmd_export(argc - 1, argv + 1);
	if (!strcmp(argv[1], "diff"))
		return nx_cmd_diff(argc - 1, argv + 1);
	if (!strcmp(argv[1], "send"))
		return nx_cmd_send(argc - 1, argv + 1);
	if (!strcmp(argv[1], "restore"))
		return nx_cmd_restore(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return nx_cmd_info(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount") || !strcmp(argv[1], "unmount"))
		return nx_cmd_umount(argc - 1, argv + 1);
	nx_cli_error("unknown command '%s'", argv[1]);
	usage(stderr);
	return NX_CLI_USAGE;
}
