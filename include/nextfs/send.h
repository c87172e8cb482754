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
 *   name, or created: a new file other than a symlink, whose directory
 *   is not the root, is made as "o<ino>-<gen>-1" in the root and moved
 *   into place, as btrfs send does, so that it never inherits its
 *   directory's default ACL at the receiver), then the added hard links;
 *   then data, xattrs, owners and modes; then the orphans of removed directories go; times
 *   are set last.  The root's times are always sent (orphans pass
 *   through it).
 * - File data is sent only for the blocks the delta lists (a new file's
 *   mapped blocks that are not all zeros: sparse stays sparse; a changed
 *   file's blocks whose mapping changed), each file truncated to its
 *   size first.
 * - The reader gives what the delta does not hold: file data, symlink
 *   targets and xattrs of either tree (the view reader reads the
 *   snapshots' views, offline and in the daemon; a "nextfs send" that
 *   the daemon does not serve reads .snapshots/NAME through the mount).
 *   nextfs's own records (NX_XATTR_PRIVATE, xattr.h) are never sent,
 *   whichever reader lists them.  Every error stops the stream (MSG says
 *   which file); what was written is an incomplete stream that a
 *   receiver refuses.
 * - nx_send_snapshot() is the whole of a send from a volume the process
 *   has open (an image, or the daemon's live volume): it finds the
 *   snapshots by id, checks a resume token against their identities,
 *   makes the delta and streams it through the view reader.  It takes
 *   the volume lock itself and never for the whole send: while it finds
 *   the snapshots and classifies (as long as "nextfs diff" takes), then
 *   once per piece read (file data is planned under the lock and read
 *   after it is dropped, nx_file_read_begin), so a daemon keeps serving
 *   and copying on write meanwhile.  The snapshots never change, their
 *   block maps do (copy on write): every read looks the view up again,
 *   under the lock, and a snapshot deleted meanwhile ends the stream.
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

/* A read of file data the sender is about to make (tree 1). */
struct nx_send_read {
	ext2_ino_t ino;
	uint32_t len;
	uint64_t off;
};

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
	/*
	 * Optional: the N reads of file data (pread of tree 1) the sender
	 * makes next, in their order (it stops one file's early only when
	 * that file ends early), so that the reader may read ahead.  V is
	 * the sender's: copy what is kept.
	 */
	void (*plan)(struct nx_send_reader *rd, const struct nx_send_read *v,
		     size_t n);
};

/*
 * Where the stream goes: WRITE(PRIV, BUF, LEN), which writes all of it
 * or returns an errno (the daemon's: it can be told to stop), or FD.
 */
struct nx_send_out {
	int fd;
	errcode_t (*write)(void *priv, const void *buf, size_t len);
	void *priv;
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
	struct nx_send_out out;		/* where the stream goes */
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

/*
 * Resume from the token TEXT (sendstream.h): P's snapshot (p->name) and
 * parent (PARENT, if p->parent_id) must be the pair it names - their
 * identities in P, as this volume has them - then p->resume = T.  Else
 * EINVAL, and MSG says why in one line.
 */
errcode_t nx_send_resume_from(struct nx_send_params *p, const char *text,
			      const char *parent, struct nx_ss_token *t,
			      char *msg, size_t msglen);

errcode_t nx_send_stream(const struct nx_delta *delta,
			 struct nx_send_reader *rd,
			 const struct nx_send_params *p,
			 struct nx_send_stats *stats, char *msg, size_t msglen);

/*
 * The view reader: snapshots OLD_ID (0: none) and NEW_ID of VOL, read
 * through their views.  Each call takes the volume lock (the caller
 * does not hold it) and looks the view up again (ENOENT once the
 * snapshot is gone).
 */
struct nx_volume;
errcode_t nx_send_view_reader(struct nx_volume *vol, uint32_t old_id,
			      uint32_t new_id, struct nx_send_reader **rd);
void nx_send_view_reader_free(struct nx_send_reader *rd);

/*
 * The stream of snapshot ID of VOL (PARENT_ID 0: a full stream; else an
 * older snapshot) to OUT, resumed from the token RESUME (text; NULL: from
 * the start).  VOL is not locked by the caller (see above).  ENOENT: no
 * such snapshot; EINVAL: the parent is not older, or the token names
 * another stream; MSG says which, in one line.
 */
errcode_t nx_send_snapshot(struct nx_volume *vol, uint32_t parent_id,
			   uint32_t id, const char *resume,
			   const struct nx_send_out *out,
			   struct nx_send_stats *stats, char *msg,
			   size_t msglen);

#endif
