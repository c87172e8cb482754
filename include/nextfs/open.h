/*
 * open.h - open a volume with everything the layers add to it.
 * Layer: snap/ (the top of the library: calls snap/, fs/ and volume/).
 *
 * Contract: nx_open_volume() is the open every program uses (the daemon,
 * the tools, the tests).  It takes volume.h's steps in their order and
 * adds, between them, what the layers above volume/ need:
 *  1. volume/'s checks, reading only, the device sealed against writes
 *     (nx_volume_open_sealed);
 *  2. the hooks volume/ calls up through (flush, the order of a commit
 *     without a journal, detach at close: volume.h), then the snapshots:
 *     their list, ids, maps and superblock fields are checked, still
 *     sealed, and the copy-on-write and overwrite policy (overwrite.h)
 *     installed (snapshot.h).  Every refusal comes before this point;
 *  3. for writers: the first write (nx_volume_start_writing), then the
 *     inodes a crash left on the orphan list are freed (orphan.h) and
 *     synced.
 * On failure returns non-zero, sets *RET to NULL and, if MSG is non-NULL,
 * puts a one-line human readable reason (without trailing newline) into
 * MSG; nothing is written after a refusal.  FLAGS are volume.h's
 * NX_VOL_*.  Close with nx_volume_close() (volume.h), which calls the
 * hooks registered here.
 */
#ifndef NEXTFS_OPEN_H
#define NEXTFS_OPEN_H

#include "nextfs/volume.h"

errcode_t nx_open_volume(const char *device, int flags,
			 struct nx_volume **ret, char *msg, size_t msglen);

#endif
