/*
 * open.c - open a volume with its snapshots and orphans (open.h).
 *
 * The one place that knows the whole order of an open: volume/'s checks,
 * then the snapshots' (still sealed), then the first write, then the
 * orphans.  The hooks registered here are how volume/ reaches the
 * snapshots and orphans afterwards without calling up.
 */
#include <stdio.h>
#include <et/com_err.h>
#include "nextfs/open.h"
#include "nextfs/orphan.h"
#include "nextfs/sanity.h"
#include "snap_internal.h"

/* Close: what fs/ and snap/ keep in the volume. */
static void detach_layers(struct nx_volume *vol)
{
	nx_orphans_free(vol);
	nx_snap_detach(vol);
}

static const struct nx_volume_hooks live_hooks = {
	.flush = nx_snap_flush,
	.block_rank = nx_snap_block_rank,
	.detach = detach_layers,
};

/* A read-only open goes on past the snapshots' damage: say so. */
static void warn_snapshot_damage(struct nx_volume *vol,
				 const struct nx_damage *dmg, int dropped)
{
	fprintf(stderr, "nextfs: %s: warning: %s; reading it %s (repair it "
		"with 'nextfs check --repair %s')\n", vol->device,
		dmg->problem, dropped ? "without its snapshots" : "as it is",
		vol->device);
}

/* Inodes a crash left on the orphan list are freed, as the kernel does. */
static errcode_t free_orphans(struct nx_volume *vol, char *msg, size_t msglen)
{
	unsigned freed = 0;
	errcode_t err;

	if (!vol->fs->super->s_last_orphan)
		return 0;
	err = nx_orphans_recover(vol, &freed);
	if (!err)
		err = nx_volume_sync(vol);
	if (err)
		nx_set_msg(msg, msglen, "%s: cannot free orphan inodes: %s; "
			   "run 'nextfs check --repair'", vol->device,
			   error_message(err));
	else if (freed)
		fprintf(stderr, "nextfs: %s: freed %u orphan inode(s)\n",
			vol->device, freed);
	return err;
}

errcode_t nx_open_volume(const char *device, int flags,
			 struct nx_volume **ret, char *msg, size_t msglen)
{
	struct nx_damage dmg = { 0 };
	struct nx_volume *vol;
	int dropped = 0;
	errcode_t err;

	err = nx_volume_open_sealed(device, flags, &dmg, ret, msg, msglen);
	if (err)
		return err;
	vol = *ret;
	*ret = NULL;
	nx_volume_set_hooks(vol, &live_hooks);
	err = nx_snap_attach(vol, &dmg, &dropped, msg, msglen);
	if (!err && dmg.level)
		warn_snapshot_damage(vol, &dmg, dropped);	/* read-only */
	if (err && dmg.level)
		err = nx_volume_refuse(vol, &dmg, msg, msglen);
	if (!err && !nx_volume_rdonly(vol))
		err = nx_volume_start_writing(vol, msg, msglen);
	if (!err && !nx_volume_rdonly(vol))
		err = free_orphans(vol, msg, msglen);
	if (err) {
		nx_volume_discard(vol);
		return err;
	}
	*ret = vol;
	return 0;
}
