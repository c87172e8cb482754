/*
 * cmd_info.c - "nextfs info [--json] IMAGE_OR_MOUNTPOINT": the superblock
 * summary dumpe2fs -h prints (from libe2p, so the two agree), then the
 * snapshots and the space they hold.  A mounted volume is asked through
 * its mountpoint (the daemon's superblock as it holds it now, and its
 * snapshot list: nxioctl.h), with the same output.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <e2p/e2p.h>
#include <et/com_err.h>
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

/* What info shows, however it was read. */
struct volinfo {
	struct ext2_super_block sb;
	struct nx_cli_snaps snaps;
};

static void print_size_line(const char *label, uint64_t blocks, unsigned bs,
			    uint64_t total)
{
	char human[32];

	nx_cli_human_size(blocks * bs, human, sizeof(human));
	printf("%-26s%" PRIu64 " blocks (%s, %.1f%% of the volume)\n", label,
	       blocks, human, total ? 100.0 * (double)blocks / (double)total :
	       0.0);
}

static uint64_t held_blocks(const struct nx_cli_snaps *snaps)
{
	uint64_t held = 0;
	int i;

	for (i = 0; i < snaps->n; i++)
		held += snaps->s[i].blocks;
	return held;
}

/* The name of feature MASK of kind TYPE (E2P_FEATURE_*). */
static const char *feature_name(int type, uint32_t mask)
{
	/* libe2p 1.47 calls it FEATURE_R7. */
	if (type == E2P_FEATURE_RO_INCOMPAT &&
	    mask == EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT)
		return "has_snapshot";
	return e2p_feature2string(type, mask);
}

/* Call FN with the name of every feature set in SB. */
static void for_each_feature(const struct ext2_super_block *sb,
			     void (*fn)(const char *name, void *priv),
			     void *priv)
{
	const uint32_t words[3] = { sb->s_feature_compat,
				    sb->s_feature_incompat,
				    sb->s_feature_ro_compat };
	static const int types[3] = { E2P_FEATURE_COMPAT,
				      E2P_FEATURE_INCOMPAT,
				      E2P_FEATURE_RO_INCOMPAT };
	int w, bit;

	for (w = 0; w < 3; w++)
		for (bit = 0; bit < 32; bit++)
			if (words[w] & (1U << bit))
				fn(feature_name(types[w], 1U << bit), priv);
}

static void print_feature(const char *name, void *priv)
{
	printf(" %s", name);
}

/*
 * What the daemon shows a user who is not root (nxioctl.h), in
 * dumpe2fs's words.
 */
static void print_public_super(struct ext2_super_block *sb)
{
	int len = (int)strnlen((const char *)sb->s_volume_name,
			       sizeof(sb->s_volume_name));

	printf("%-26s%.*s\n", "Filesystem volume name:", len ? len : 6,
	       len ? (const char *)sb->s_volume_name : "<none>");
	printf("%-26s%s\n", "Filesystem UUID:", e2p_uuid2str(sb->s_uuid));
	printf("%-25s", "Filesystem features:");
	for_each_feature(sb, print_feature, NULL);
	printf("\n%-26s%u\n", "Inode count:", sb->s_inodes_count);
	printf("%-26s%llu\n", "Block count:",
	       (unsigned long long)ext2fs_blocks_count(sb));
	printf("%-26s%llu\n", "Reserved block count:",
	       (unsigned long long)ext2fs_r_blocks_count(sb));
	printf("%-26s%llu\n", "Free blocks:",
	       (unsigned long long)ext2fs_free_blocks_count(sb));
	printf("%-26s%u\n", "Free inodes:", sb->s_free_inodes_count);
	printf("%-26s%u\n", "Block size:", EXT2_BLOCK_SIZE(sb));
	printf("(the rest of the superblock is shown to root only)\n");
}

static void print_text(struct volinfo *vi)
{
	struct ext2_super_block *sb = &vi->sb;
	uint64_t total = ext2fs_blocks_count(sb);
	unsigned bs = EXT2_BLOCK_SIZE(sb);

	if (vi->snaps.partial)
		print_public_super(sb);
	else
		list_super2(sb, stdout);
	printf("\nSnapshots:                %d\n", vi->snaps.n);
	if (vi->snaps.n)
		nx_cli_snaps_table(&vi->snaps, 1);
	print_size_line("Held by snapshots:", held_blocks(&vi->snaps), bs,
			total);
	print_size_line("COW reserve:", sb->s_snapshot_r_blocks_count, bs,
			total);
	print_size_line("Free:", ext2fs_free_blocks_count(sb), bs, total);
	/* Deleted snapshots whose blocks are still being handed over. */
	if (vi->snaps.pending) {
		printf("%-26s%d\n", "Deletes pending:", vi->snaps.pending);
		print_size_line("  still held:", vi->snaps.pending_blocks, bs,
				total);
	}
}

static void json_feature(const char *name, void *priv)
{
	nx_json_str(priv, NULL, name);
}

/* The names of the features set in the superblock. */
static void json_features(struct nx_json *j, const struct ext2_super_block *sb)
{
	nx_json_open(j, "features", '[');
	for_each_feature(sb, json_feature, j);
	nx_json_close(j, ']');
}

static void json_time(struct nx_json *j, const char *key, uint32_t lo,
		      uint8_t hi)
{
	struct timespec ts = { (time_t)lo | ((time_t)hi << 32), 0 };

	nx_json_time(j, key, &ts);
}

static void print_json(struct volinfo *vi)
{
	struct ext2_super_block *sb = &vi->sb;
	unsigned bs = EXT2_BLOCK_SIZE(sb);
	struct nx_json j;

	nx_json_init(&j, stdout);
	nx_json_open(&j, NULL, '{');
	nx_json_open(&j, "volume", '{');
	nx_json_str(&j, "uuid", e2p_uuid2str(sb->s_uuid));
	nx_json_strn(&j, "label", (const char *)sb->s_volume_name,
		     strnlen((const char *)sb->s_volume_name,
			     sizeof(sb->s_volume_name)));
	nx_json_u64(&j, "block_size", bs);
	nx_json_u64(&j, "blocks", ext2fs_blocks_count(sb));
	nx_json_u64(&j, "free_blocks", ext2fs_free_blocks_count(sb));
	nx_json_u64(&j, "reserved_blocks", ext2fs_r_blocks_count(sb));
	nx_json_u64(&j, "inodes", sb->s_inodes_count);
	nx_json_u64(&j, "free_inodes", sb->s_free_inodes_count);
	/* Not root: only the public part (nxioctl.h), nothing made up. */
	nx_json_bool(&j, "restricted", vi->snaps.partial);
	if (!vi->snaps.partial)
		nx_json_bool(&j, "clean", (sb->s_state & EXT2_VALID_FS) != 0);
	nx_json_bool(&j, "mounted", vi->snaps.mnt != NULL);
	json_features(&j, sb);
	if (!vi->snaps.partial) {
		json_time(&j, "created", sb->s_mkfs_time, sb->s_mkfs_time_hi);
		json_time(&j, "last_written", sb->s_wtime, sb->s_wtime_hi);
	}
	nx_json_close(&j, '}');
	nx_cli_snaps_json(&j, "snapshots", &vi->snaps);
	nx_json_u64(&j, "held_bytes", held_blocks(&vi->snaps) * bs);
	nx_json_u64(&j, "cow_reserve_bytes",
		    (uint64_t)sb->s_snapshot_r_blocks_count * bs);
	nx_json_u64(&j, "free_bytes", ext2fs_free_blocks_count(sb) * bs);
	nx_json_open(&j, "pending_deletes", '{');
	nx_json_u64(&j, "snapshots", (uint64_t)vi->snaps.pending);
	nx_json_u64(&j, "held_bytes", vi->snaps.pending_blocks * bs);
	nx_json_close(&j, '}');
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

int nx_cmd_info(struct nx_cli_args *a)
{
	struct volinfo vi;
	int rc;

	memset(&vi, 0, sizeof(vi));
	rc = nx_cli_snaps_get(a->pos[0], &vi.snaps, &vi.sb);
	if (!rc) {
		if (a->opt[NX_OPT_JSON])
			print_json(&vi);
		else
			print_text(&vi);
		rc = fflush(stdout) ? NX_CLI_FAIL : NX_CLI_OK;
	}
	nx_cli_snaps_free(&vi.snaps);
	return rc;
}
