/*
 * snaplist.c - the snapshots of a target and how the tool shows them
 * ("snapshot list", "info"): the same list, the same columns, the same
 * JSON objects whether the volume is read offline or through the mount
 * of a running nextfs-fuse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

int nx_cli_snaps_of_volume(struct nx_volume *vol, struct nx_cli_snaps *out)
{
	struct ext2_super_block *sb = vol->fs->super;
	errcode_t err;
	int i;

	memset(out, 0, sizeof(*out));
	out->blocksize = vol->fs->blocksize;
	err = nx_snap_list(vol, &out->s, &out->n);
	if (err) {
		nx_cli_error("cannot list snapshots: %s", error_message(err));
		return NX_CLI_FAIL;
	}
	/* Opened read-only, the engine is idle: the superblock says. */
	for (i = 0; i < out->n; i++)
		out->s[i].active = out->s[i].ino == sb->s_snapshot_inum;
	{
		blk64_t held;

		nx_snap_pending(vol, &out->pending, &held);
		out->pending_blocks = held;
	}
	return NX_CLI_OK;
}

static int snaps_of_mount(const char *mnt, struct nx_cli_snaps *out,
			  struct ext2_super_block *sb)
{
	struct nx_ioc_volinfo vi;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (sb) {
		/* The daemon's superblock, as it holds it now. */
		rc = nx_cli_mount_volinfo(mnt, &vi);
		if (!rc)
			memcpy(sb, vi.super, sizeof(*sb));
		out->partial = !rc && (vi.flags & NX_IOC_VOL_PARTIAL);
	}
	if (!rc)
		rc = nx_cli_mount_snapshots(mnt, &out->s, &out->n,
					    &out->blocksize);
	if (!rc)
		rc = nx_cli_mount_pending(mnt, &out->pending,
					  &out->pending_blocks);
	if (!rc && !(out->mnt = strdup(mnt))) {
		nx_cli_error("out of memory");
		rc = NX_CLI_FAIL;
	}
	if (rc)
		nx_cli_snaps_free(out);
	return rc;
}

int nx_cli_snaps_get(const char *target, struct nx_cli_snaps *out,
		     struct ext2_super_block *sb)
{
	struct nx_volume *vol;
	char *mnt;
	int rc = nx_cli_open_target(target, NX_VOL_RDONLY, &vol, &mnt);

	if (rc)
		return rc;
	if (mnt) {
		rc = snaps_of_mount(mnt, out, sb);
		free(mnt);
		return rc;
	}
	nx_volume_lock(vol);
	if (sb)
		*sb = *vol->fs->super;
	rc = nx_cli_snaps_of_volume(vol, out);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	return rc;
}

void nx_cli_snaps_free(struct nx_cli_snaps *snaps)
{
	free(snaps->s);
	free(snaps->mnt);
	memset(snaps, 0, sizeof(*snaps));
}

/* Columns a terminal gives S: one per character (not per UTF-8 byte). */
static int text_width(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/* COL padded to WIDTH (names and sizes may be wider: then one space). */
static void cell(const char *col, int width, int left)
{
	int len = text_width(col);

	if (left)
		printf("%s%*s", col, len < width ? width - len : 0, "");
	else
		printf("%*s%s", len < width ? width - len : 0, "", col);
}

void nx_cli_snaps_table(const struct nx_cli_snaps *snaps, int info_columns)
{
	char name[NX_QUOTED_NAME_SIZE], when[NX_TIME_SIZE], used[32], id[16];
	int i;

	printf("%-6s %-24s %-20s %12s", "ID", "NAME", "TAKEN",
	       info_columns ? "HELD" : "USED");
	printf(info_columns ? " %8s\n" : "\n", "ACTIVE");
	for (i = 0; i < snaps->n; i++) {
		const struct nx_snapinfo *s = &snaps->s[i];

		snprintf(id, sizeof(id), "%u", s->id);
		nx_out_quote(name, sizeof(name), s->name, strlen(s->name));
		nx_out_local_time(when, sizeof(when), &s->taken);
		nx_cli_human_size((uint64_t)s->blocks * snaps->blocksize,
				  used, sizeof(used));
		cell(id, 6, 1);
		putchar(' ');
		cell(name, 24, 1);
		putchar(' ');
		cell(when, 20, 1);
		putchar(' ');
		cell(used, 12, 0);
		if (info_columns)
			printf(" %8s", s->active ? "yes" : "");
		putchar('\n');
	}
}

void nx_cli_snaps_json(struct nx_json *j, const char *key,
		       const struct nx_cli_snaps *snaps)
{
	int i;

	nx_json_open(j, key, '[');
	for (i = 0; i < snaps->n; i++) {
		const struct nx_snapinfo *s = &snaps->s[i];

		nx_json_open(j, NULL, '{');
		nx_json_u64(j, "id", s->id);
		nx_json_str(j, "name", s->name);
		nx_json_time(j, "taken", &s->taken);
		nx_json_epoch(j, "taken_epoch", &s->taken);
		nx_json_u64(j, "used_bytes",
			    (uint64_t)s->blocks * snaps->blocksize);
		nx_json_bool(j, "active", s->active);
		nx_json_close(j, '}');
	}
	nx_json_close(j, ']');
}
