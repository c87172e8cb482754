/*
 * ident.c - the identity of a snapshot beyond this volume: its UUID
 * (snapshot.h, nx_snap_uuid).  The one place that derives it: the sender
 * puts it into streams, the receiver compares it, "nextfs snapshot list"
 * may show it.
 *
 * Why name-based (RFC 4122 version 5: SHA-1 of a namespace UUID and a
 * name) rather than random and stored: ext4 reserves no field for a
 * snapshot UUID, and a derived one needs none - every reader of the
 * volume computes the same value from what the snapshot file already
 * holds (its id in i_generation, its take time in i_mtime), now and
 * after any remount, with no structure to keep crash-consistent.
 */
#include <stdio.h>
#include <string.h>
#include <uuid/uuid.h>
#include "nextfs/snapshot.h"

void nx_snap_uuid(const unsigned char vol_uuid[16], uint32_t id,
		  const struct timespec *taken, unsigned char out[16])
{
	char name[64];
	int len;

	len = snprintf(name, sizeof(name), "nextfs-snapshot:%u:%lld.%09ld",
		       id, (long long)taken->tv_sec, (long)taken->tv_nsec);
	uuid_generate_sha1(out, vol_uuid, name, (size_t)len);
}

void nx_snap_uuid_of(struct nx_volume *vol, const struct nx_snapinfo *info,
		     unsigned char out[16])
{
	nx_snap_uuid(vol->fs->super->s_uuid, info->id, &info->taken, out);
}
