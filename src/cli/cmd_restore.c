/*
 * cmd_restore.c - "nextfs restore [--destroy-newer] IMAGE NAME": roll the
 * live tree of an unmounted volume back to snapshot NAME (like zfs
 * rollback).  The snapshot stays; newer snapshots make it refuse unless
 * --destroy-newer deletes them first.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <et/com_err.h>
#include "nextfs/snaptool.h"
#include "cli.h"

static void restore_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs restore [-r|--destroy-newer] [-v] IMAGE NAME\n"
		"\n"
		"Roll the live tree of the unmounted volume IMAGE back to snapshot\n"
		"NAME.  The snapshot (and every older one) is kept.  Snapshots newer\n"
		"than NAME make it refuse, unless --destroy-newer deletes them first.\n"
		"If interrupted, run it again.\n");
}

int nx_cmd_restore(int argc, char **argv)
{
	struct nx_restore_result res;
	struct nx_progress prog;
	const char *args[2] = { NULL, NULL };
	int i, n = 0, flags = 0, verbose = 0;
	char msg[512] = "";
	errcode_t err;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			restore_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "-r") ||
			   !strcmp(argv[i], "--destroy-newer")) {
			flags |= NX_RESTORE_DESTROY_NEWER;
		} else if (!strcmp(argv[i], "-v")) {
			verbose = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			nx_cli_error("restore: unknown option '%s'", argv[i]);
			return NX_CLI_USAGE;
		} else if (n < 2) {
			args[n++] = argv[i];
		} else {
			n = 3;
		}
	}
	if (n != 2) {
		restore_usage(stderr);
		return NX_CLI_USAGE;
	}
	if (nx_snap_name_check(args[1])) {
		nx_cli_error("invalid snapshot name '%s'", args[1]);
		return NX_CLI_USAGE;
	}
	nx_cli_progress_begin(&prog);
	err = nx_snap_restore(args[0], args[1], flags, &prog, &res, msg,
			      sizeof(msg));
	nx_cli_progress_end(&prog);
	if (res.destroyed && (verbose || err))
		printf("deleted %d newer snapshot%s\n", res.destroyed,
		       res.destroyed == 1 ? "" : "s");
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	if (verbose)
		printf("restored %s to '%s': %" PRIu64 " blocks written back, "
		       "%" PRIu64 " returned, %" PRIu64 " freed, %" PRIu64
		       " relocated\n", args[0], args[1],
		       (uint64_t)res.blocks_restored,
		       (uint64_t)res.blocks_returned,
		       (uint64_t)res.blocks_freed,
		       (uint64_t)res.blocks_relocated);
	return 0;
}
