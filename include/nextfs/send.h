/*
 * send.h - "nextfs send": a btrfs send stream (version 1, sendstream.h)
 * made from a delta (delta.h) of two snapshots, or of an empty tree and
 * one snapshot (a full stream).  Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - nx_send_stream() writes the stream that turns a receiver's copy of
 *   the old tree into the new one: SUBVOL (full) or SNAPSHOT (with the
 *   parent's UUID and ctransid), every change the delta lists, END.  The
 *   caller names the snapshot and its parent by their identity for
 *   replication (nx_snap_identity(), snapshot.h): their own UUID and id,
 *   or for a snapshot this volume received, its first sender's - so a
 *   received snapshot sent on (A -> B -> C) is the same snapshot to C as
 *   A's, and C takes incremental streams of either.
 * - Names are changed in an order that never needs a name that is still
 *   taken or a directory that is not there yet: every name that goes
 *   away is removed deepest first (a directory, or the last name of a
 *   file that lives on elsewhere, is moved to the orphan name
 *   "o<ino>-<gen>-0" in the root, as btrfs send does), then every name
 *   that comes is made shallowest first (moved back from its orphan
 *   name, or created), then the added hard links; then data, xattrs,
 *   owners and modes; then the orphans of removed directories go; times
 *   are set last.  The root's times are always sent (orphans pass
 *   through it).
 * - File data is sent only for the blocks the delta lists (a new file's
 *   mapped blocks that are not all zeros: sparse stays sparse; a changed
 *   file's blocks whose mapping changed), each file truncated to its
 *   size first.
 * - The reader gives what the delta does not hold: file data, symlink
 *   targets and xattrs of either tree (the offline one reads the views;
 *   "nextfs send" on a mountpoint reads .snapshots/NAME through the
 *   mount).  nextfs's own records (NX_XATTR_PRIVATE, xattr.h) are never
 *   sent, whichever reader lists them.  Every error stops the stream
 *   (MSG says which file); what was written is an incomplete stream that
 *   a receiver refuses.
 */
#ifndef NEXTFS_SEND_H
#define NEXTFS_SEND_H

#include <stddef.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/delta.h"
#include "nextfs/sendstream.h"

struct nx_send_xattrs {
	size_t n, cap;
	char **names;
	void **values;
	size_t *lens;
};

void nx_send_xattrs_free(struct nx_send_xattrs *x);
/* Append NAME = VALUE (copied). */
errcode_t nx_send_xattrs_add(struct nx_send_xattrs *x, const char *name,
			     const void *value, size_t len);

struct nx_send_reader {
	/*
	 * Tree S (0 old, 1 new), inode INO, which that tree names PATH
	 * ("/a/b"): up to LEN bytes at OFF (*GOT, 0 at the end).
	 */
	errcode_t (*pread)(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			   const char *path, void *buf, size_t len,
			   uint64_t off, size_t *got);
	/* The symlink's target, malloced, NUL-terminated. */
	errcode_t (*readlink)(struct nx_send_reader *rd, int s,
			      ext2_ino_t ino, const char *path, char **target);
	/* Every xattr (POSIX ACLs as system.posix_acl_*). */
	errcode_t (*xattrs)(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			    const char *path, struct nx_send_xattrs *out);
};

struct nx_send_params {
	const char *name;		/* the snapshot's name: the subvolume */
	uint32_t id;			/* the snapshot here */
	uint32_t parent_id;		/* 0: a full stream */
	/* what the stream names them by (see above) */
	unsigned char uuid[16];
	uint64_t ctransid;
	unsigned char parent_uuid[16];
	uint64_t parent_ctransid;
	int fd;				/* where the stream goes */
	/*
	 * Resume where a receiver stopped (sendstream.h): the caller checked
	 * that the token names this pair; the commands before its index are
	 * not written, and the stream's offset and prefix hash there must be
	 * the token's (else EINVAL, nothing written).
	 */
	const struct nx_ss_token *resume;
};

struct nx_send_stats {
	uint64_t bytes;			/* of the stream */
	uint64_t data_bytes;		/* file data in it */
	uint64_t commands;
	uint64_t inodes;		/* changed inodes sent */
};

errcode_t nx_send_stream(const struct nx_delta *delta,
			 struct nx_send_reader *rd,
			 const struct nx_send_params *p,
			 struct nx_send_stats *stats, char *msg, size_t msglen);

/* The offline reader: the views of snapshots OLD_ID and NEW_ID of VOL. */
struct nx_volume;
errcode_t nx_send_view_reader(struct nx_volume *vol, uint32_t old_id,
			      uint32_t new_id, struct nx_send_reader **rd);
void nx_send_view_reader_free(struct nx_send_reader *rd);

#endif
