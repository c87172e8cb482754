/*
 * nextfs.c - the "nextfs" tool: git-style subcommands around snapshots.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

void nx_cli_error(const char *fmt, ...)
{
	va_list ap;

	fputs("nextfs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
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
		"  snapshot take|delete|list   manage snapshots of an image or a\n"
		"                              nextfs-fuse mountpoint\n"
		"\n"
		"Run 'nextfs COMMAND --help' for a command's options.\n"
		"Exit status: 0 success, 1 failure (nothing changed), 2 usage.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return NX_CLI_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return NX_CLI_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("nextfs %s\n", NEXTFS_VERSION);
		return NX_CLI_OK;
	}
	if (!strcmp(argv[1], "snapshot"))
		return nx_cmd_snapshot(argc - 1, argv + 1);
	nx_cli_error("unknown command '%s'", argv[1]);
	usage(stderr);
	return NX_CLI_USAGE;
}
