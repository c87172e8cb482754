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
#include "output.h"

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
	int n, destroy = 0, verbose = 0, rc;
	const struct nx_cli_opt opts[] = {
		{ "-r|--destroy-newer", &destroy, 1 },
		{ "-v", &verbose, 1 },
		{ NULL, NULL, 0 },
	};
	char msg[512] = "";
	errcode_t err;

	rc = nx_cli_parse(argc, argv, "restore", opts, args, 2, &n);
	if (rc == NX_CLI_HELP) {
		restore_usage(stdout);
		return NX_CLI_OK;
	}
	if (rc)
		return rc;
	if (n != 2) {
		restore_usage(stderr);
		return NX_CLI_USAGE;
	}
	if (nx_snap_name_check(args[1])) {
		nx_cli_error("invalid snapshot name '%s'", args[1]);
		return NX_CLI_USAGE;
	}
	if (nx_cli_pin_image(args[0]))
		return NX_CLI_FAIL;
	nx_cli_progress_begin(&prog);
	err = nx_snap_restore(args[0], args[1],
			      destroy ? NX_RESTORE_DESTROY_NEWER : 0, &prog,
			      &res, msg, sizeof(msg));
	nx_cli_progress_end(&prog);
	if (res.destroyed && (verbose || err))
		printf("deleted %d newer snapshot%s\n", res.destroyed,
		       res.destroyed == 1 ? "" : "s");
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	if (verbose) {
		fputs("restored ", stdout);
		nx_out_print_quoted(stdout, args[0]);
		fputs(" to ", stdout);
		nx_out_print_quoted(stdout, args[1]);
		printf(": %" PRIu64 " blocks written back, "
		       "%" PRIu64 " returned, %" PRIu64 " freed, %" PRIu64
		       " relocated\n",
		       (uint64_t)res.blocks_restored,
		       (uint64_t)res.blocks_returned,
		       (uint64_t)res.blocks_freed,
		       (uint64_t)res.blocks_relocated);
	}
	return 0;
}
