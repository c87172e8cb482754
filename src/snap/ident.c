/*
 * ident.c - the identity of a snapshot beyond this volume: its UUID
 * (snapshot.h, nx_snap_uuid), and the identity replication uses, which
 * for a received snapshot is the sender's (nx_snap_identity).  The one
 * place that derives them: the sender puts them into streams, the
 * receiver compares them.
 *
 * Why name-based (RFC 4122 version 5: SHA-1 of a namespace UUID and a
 * name) rather than random and stored: ext4 reserves no field for a
 * snapshot UUID, and a derived one needs none - every reader of the
 * volume computes the same value from what the snapshot file already
 * holds (its id in i_generation, its take time in i_mtime), now and
 * after any remount, with no structure to keep crash-consistent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"

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

/* "nxrv", the id, the UUID, the ctransid: little endian. */
void nx_snap_received_record(uint32_t id, const unsigned char uuid[16],
			     uint64_t ctransid,
			     unsigned char rec[NX_SNAP_RECEIVED_LEN])
{
	int i;

	memcpy(rec, "nxrv", 4);
	for (i = 0; i < 4; i++)
		rec[4 + i] = (unsigned char)(id >> (8 * i));
	memcpy(rec + 8, uuid, 16);
	for (i = 0; i < 8; i++)
		rec[24 + i] = (unsigned char)(ctransid >> (8 * i));
}

errcode_t nx_snap_identity(struct nx_volume *vol,
			   const struct nx_snapinfo *info,
			   unsigned char uuid[16], uint64_t *ctransid)
{
	struct nx_volume *view;
	unsigned char *rec = NULL;
	size_t len = 0;
	uint32_t id = 0;
	errcode_t err;
	int i;

	nx_snap_uuid_of(vol, info, uuid);
	*ctransid = info->id;
	err = nx_snap_view_get(vol, info->id, &view);
	if (err)
		return err;
	err = nx_xattr_private_get(view, EXT2_ROOT_INO, NX_SNAP_RECEIVED_XATTR,
				   (void **)&rec, &len);
	if (err == ENODATA || err == EOPNOTSUPP)
		return 0;		/* taken here, not received */
	if (err)
		return err;
	if (len == NX_SNAP_RECEIVED_LEN && !memcmp(rec, "nxrv", 4)) {
		for (i = 0; i < 4; i++)
			id |= (uint32_t)rec[4 + i] << (8 * i);
		if (id == info->id) {
			memcpy(uuid, rec + 8, 16);
			*ctransid = 0;
			for (i = 0; i < 8; i++)
				*ctransid |= (uint64_t)rec[24 + i] << (8 * i);
		}
	}
	free(rec);
	return 0;
}
