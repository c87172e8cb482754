/*
 * cmd_info.c - "nextfs info IMAGE": the superblock summary dumpe2fs -h
 * prints (from libe2p, so the two agree), then the snapshots and the
 * space they hold.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <e2p/e2p.h>
#include <et/com_err.h>
#include "nextfs/snapshot.h"
#include "cli.h"

static void info_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs info IMAGE\n"
		"\n"
		"Print the volume summary (as dumpe2fs -h) and the snapshots of\n"
		"an unmounted volume with the space each one holds.\n");
}

static void print_size_line(const char *label, uint64_t blocks, unsigned bs,
			    uint64_t total)
{
	char human[32];

	nx_cli_human_size(blocks * bs, human, sizeof(human));
	printf("%-26s%" PRIu64 " blocks (%s, %.1f%% of the volume)\n", label,
	       blocks, human, total ? 100.0 * (double)blocks / (double)total :
	       0.0);
}

static void print_snapshots(struct nx_volume *vol)
{
	struct ext2_super_block *sb = vol->fs->super;
	struct nx_snapinfo *s = NULL;
	uint64_t total = ext2fs_blocks_count(sb), held = 0;
	unsigned bs = vol->fs->blocksize;
	int i, n = 0;

	if (nx_snap_list(vol, &s, &n)) {
		printf("Snapshots:                cannot be listed\n");
		return;
	}
	printf("\nSnapshots:                %d\n", n);
	if (n) {
		printf("%-6s %-24s %-20s %12s %8s\n", "ID", "NAME", "TAKEN",
		       "HELD", "ACTIVE");
		for (i = 0; i < n; i++) {
			char when[64], used[32];
			time_t t = s[i].taken.tv_sec;
			struct tm tm;

			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S",
				 localtime_r(&t, &tm));
			nx_cli_human_size((uint64_t)s[i].blocks * bs, used,
					  sizeof(used));
			/* The engine is not attached read-write: ask disk. */
			printf("%-6u %-24s %-20s %12s %8s\n", s[i].id,
			       s[i].name, when, used,
			       s[i].ino == sb->s_snapshot_inum ? "yes" : "");
			held += s[i].blocks;
		}
	}
	print_size_line("Held by snapshots:", held, bs, total);
	print_size_line("COW reserve:", sb->s_snapshot_r_blocks_count, bs,
			total);
	print_size_line("Free:", ext2fs_free_blocks_count(sb), bs, total);
	free(s);
}

int nx_cmd_info(int argc, char **argv)
{
	struct nx_volume *vol;

	if (argc == 2 && (!strcmp(argv[1], "-h") ||
			  !strcmp(argv[1], "--help"))) {
		info_usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-') {
		info_usage(stderr);
		return NX_CLI_USAGE;
	}
	if (nx_cli_open_image(argv[1], &vol))
		return NX_CLI_FAIL;
	nx_volume_lock(vol);
	list_super2(vol->fs->super, stdout);
	print_snapshots(vol);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	return 0;
}
