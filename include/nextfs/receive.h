/*
 * receive.h - applying a btrfs send stream (sendstream.h) to a volume and
 * taking the snapshot it describes: the receive side of replication
 * ("nextfs receive", docs/replication.md).
 *
 * Layer: repl/, above snap/ (it takes snapshots and reads the parent's
 * view) and below fuse/ and cli/, which both run it: the tool on an
 * image it opened, the daemon for a mount (its receive ioctls).  It
 * changes the live tree only through the fs layer (dir.h, file.h,
 * inode.h, xattr.h), the calls the FUSE operations make.
 *
 * What a receive guarantees (docs/design.md P17):
 *
 * - Nothing half-applied is ever visible as a snapshot.  The snapshot
 *   NAME of the stream is taken only after its END command, in the same
 *   commit that drops the receive's cursor; until then the changes are
 *   in the live tree only.
 *
 * - An interrupted receive leaves the target as before or resumable.  The
 *   commands of a btrfs stream are not idempotent (they name files by
 *   path: replaying "rename a o257" after "rename b a" moves the wrong
 *   file), so a resume must start exactly after the last command applied.
 *   The cursor - next command index, its stream offset, the prefix hash
 *   of the commands before it, the identities of snapshot and parent -
 *   is a private record on the root inode (xattr.h: system.nextfs.recv),
 *   rewritten before the volume lock is released after applying commands.
 *   Every commit (txn.h) happens with the lock held by whoever commits,
 *   so each commit holds exactly the commands the cursor in it names:
 *   a crash, a kill -9 of the tool or the daemon, or a cut stream
 *   replays to an exact prefix, and the resume starts where it ends.
 *   (On ext2, without a journal, only a crash in the middle of a commit
 *   breaks this, as it breaks the live tree: `nextfs check --repair`.)
 *   With the cursor gone (END, abort) nothing is pending.
 *
 * - A resume applies nothing twice: fed the same stream again, the
 *   receive checks every command up to the cursor's index by CRC and the
 *   prefix hash of them all against the cursor before applying the next;
 *   fed a resume stream ("nextfs send --resume TOKEN": sendstream.h
 *   NX_SS_C_RESUME), it checks that it continues at the cursor's index,
 *   offset and hash.  Any other stream is refused and the cursor stays.
 *
 * - Which errors are resumable: the stream ending early (cut, a read
 *   error, the sender or the connection dying), the receiver being
 *   stopped or killed, and the target running out of space (ENOSPC,
 *   EDQUOT: free space, then resume).  The cursor stays and the target
 *   keeps what was applied.  Everything else - a corrupt command, a
 *   hostile one (absolute paths, "..", names with '/', a rename into its
 *   own subtree, a write to a directory, a file size the target cannot
 *   have, a clone from outside the stream's snapshot and parent, paths
 *   that do not exist), an error of the volume - is not: the receive
 *   rolls the live tree back (an incremental one to the parent snapshot,
 *   a full one to the empty tree it started from), drops the cursor and
 *   fails with one line naming the command.  So does an abort of a
 *   pending receive (nextfs receive --abort).
 *
 * - Rolling back keeps identities: the applier never frees an inode the
 *   parent snapshot has.  When a command removes the last name of one
 *   (unlink, rmdir, a rename replacing it) it moves it into the hidden
 *   directory /.nextfs-receive (mode 0700) instead, and only the end of a
 *   complete receive frees what is there.  The rollback (revert.c) then
 *   puts every such inode back under its names and restores contents and
 *   attributes from the parent's view, so the live tree compares
 *   unchanged to the parent afterwards (the check the next incremental
 *   receive makes).  .nextfs-receive exists only while a receive is
 *   pending; a stream that names it (or .snapshots) at the top is hostile.
 *
 * - Preconditions, checked before anything is written: the snapshot name
 *   is free; a full stream needs an empty live tree (an empty lost+found
 *   aside, which it removes: the sender's tree has its own or none); an
 *   incremental one needs the newest snapshot to be the stream's parent
 *   (by identity: nx_snap_identity(), snapshot.h) and the live tree unchanged since
 *   it.  NX_RECV_FORCE (-F) empties the live tree, or rolls it back to
 *   the parent, first.  A pending receive of another stream makes a new
 *   one refuse (NX_RECV_FORCE aborts it first).
 *
 * - Received snapshots carry the sender's identity (snapshot.h,
 *   nx_snap_identity): the receive stores it on the root inode right
 *   before the take.
 *
 * The caller holds the volume lock for every call and may release it
 * between calls (the daemon does, between ioctls); nothing is held in
 * memory across calls that a commit needs.  Other writers of the live
 * tree during a receive are not prevented, and what they do ends up in
 * the snapshot: keep the target idle while it receives.
 */
#ifndef NEXTFS_RECEIVE_H
#define NEXTFS_RECEIVE_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/perm.h"
#include "nextfs/recvstatus.h"
#include "nextfs/sendstream.h"
#include "nextfs/snapshot.h"
#include "nextfs/volume.h"

/* Where inodes wait during a receive (above). */
#define NX_RECV_PARK_NAME	".nextfs-receive"

/* nx_recv_open() flags. */
#define NX_RECV_FORCE		0x1	/* -F: roll back / empty first */
#define NX_RECV_RESUME		0x2	/* --resume: continue a pending one */
/*
 * Only check the stream's first command against the target (VOL may be
 * read-only): nx_recv_feed() answers NX_RECV_CHECKED once the receive
 * could start, having written nothing.  So the tool refuses without
 * opening an image for writing at all, which would write its superblock.
 */
#define NX_RECV_CHECK		0x4

/*
 * Results of nx_recv_feed()/nx_recv_eof() besides 0 and errors (which
 * are positive: errno values and libext2fs codes).
 */
#define NX_RECV_DONE		(-100)	/* applied, snapshot taken */
#define NX_RECV_CHECKED		(-101)	/* NX_RECV_CHECK: it may start */

/*
 * What the receive needs from whoever runs it.  RELEASE: INO lost its
 * last name; free it now (the tool: nx_inode_release) or once the kernel
 * lets go of it (the daemon).  TAKE: take snapshot NAME (the daemon then
 * tells the kernel).  CHANGED (may be NULL): entry NAME of DIR (NAME
 * NULL: the inode DIR itself) changed behind the kernel's back.
 */
struct nx_recv_env {
	errcode_t (*release)(void *priv, ext2_ino_t ino);
	errcode_t (*take)(void *priv, const char *name,
			  struct nx_snapinfo *info);
	void (*changed)(void *priv, ext2_ino_t dir, const char *name);
	void *priv;
};

/* What a receive did (nx_recv_stats), and where it is. */
struct nx_recv_stats {
	char name[NX_NAME_MAX + 1];	/* the snapshot, once known */
	int incremental;
	char parent[NX_NAME_MAX + 1];	/* its parent here, if incremental */
	uint64_t commands;		/* applied in this run */
	uint64_t bytes;			/* stream bytes read in this run */
	uint64_t data_bytes;		/* file data written */
	uint64_t skipped;		/* commands checked, not applied (resume) */
	uint64_t ignored_xattrs;	/* btrfs.* properties left out */
	uint64_t next_index;		/* the cursor: next command ... */
	uint64_t next_offset;		/* ... at this stream offset */
	int resumable;			/* after an error: the cursor stays */
	int refused;			/* ... and nothing of this run applied */
	int rolled_back;		/* after an error: the tree went back */
	struct nx_snapinfo taken;	/* after NX_RECV_DONE */
};

struct nx_recv;

/*
 * Start receiving into VOL (live, read-write, locked).  Nothing is
 * written until the stream's first command has been checked against
 * the target.  With NX_RECV_RESUME a pending receive must exist.
 */
errcode_t nx_recv_open(struct nx_volume *vol, int flags,
		       const struct nx_recv_env *env, struct nx_recv **ret,
		       char *msg, size_t msglen);

/*
 * The next LEN bytes of the stream (any split).  0: more wanted;
 * NX_RECV_DONE: END applied and the snapshot taken (further bytes are an
 * error); an error: nx_recv_msg() says what, nx_recv_stats() whether
 * the target kept the cursor (resumable) or was rolled back.  After an
 * error or DONE the receive is over: only close it.
 */
int nx_recv_feed(struct nx_recv *r, const void *buf, size_t len);

/* The stream ended: NX_RECV_DONE if it was complete, else the cut error. */
int nx_recv_eof(struct nx_recv *r);

/*
 * Stop where it is (the tool got a signal, the daemon lost its client):
 * the cursor stays, committed now, and the receive can be resumed.
 */
errcode_t nx_recv_stop(struct nx_recv *r);

const char *nx_recv_msg(const struct nx_recv *r);
const struct nx_recv_stats *nx_recv_stats(const struct nx_recv *r);
void nx_recv_close(struct nx_recv *r);

/*
 * A pending receive of VOL (locked), if any: 1 and its token (sendstream.h)
 * and snapshot name; 0 if none; or an error.
 */
int nx_recv_pending(struct nx_volume *vol, struct nx_ss_token *tok,
		    char name[NX_NAME_MAX + 1]);

/*
 * The record a mount's NX_IOC_RECV_STATUS answers (recvstatus.h), for
 * the daemon and the tool alike: of session R, or (R NULL) of the
 * pending receive of VOL (locked).
 */
void nx_recv_status(const struct nx_recv *r, struct nx_volume *vol,
		    struct nx_ioc_recv_status *st);

/*
 * Abort the pending receive of VOL (locked): roll the live tree back and
 * drop the cursor, as a non-resumable error would.  ENOENT if none.
 */
errcode_t nx_recv_abort(struct nx_volume *vol, const struct nx_recv_env *env,
			char *msg, size_t msglen);

#endif
