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

int nx_cmd_restore(struct nx_cli_args *a)
{
	const char *image = a->pos[0], *name = a->pos[1];
	struct nx_restore_result res;
	struct nx_progress prog;
	char msg[512] = "";
	errcode_t err;

	if (nx_snap_name_check(name)) {
		nx_cli_error("invalid snapshot name '%s'", name);
		return NX_CLI_USAGE;
	}
	if (nx_cli_pin_image(image))
		return NX_CLI_FAIL;
	nx_cli_progress_begin(&prog);
	err = nx_snap_restore(image, name, a->opt[NX_OPT_DESTROY] ?
			      NX_RESTORE_DESTROY_NEWER : 0, &prog, &res, msg,
			      sizeof(msg));
	nx_cli_progress_end(&prog);
	if (res.destroyed && (a->opt[NX_OPT_VERBOSE] || err))
		printf("deleted %d newer snapshot%s\n", res.destroyed,
		       res.destroyed == 1 ? "" : "s");
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	if (a->opt[NX_OPT_VERBOSE]) {
		fputs("restored ", stdout);
		nx_out_print_quoted(stdout, image);
		fputs(" to ", stdout);
		nx_out_print_quoted(stdout, name);
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
