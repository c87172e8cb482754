/*
 * nxioctl.h - private ioctls of a nextfs-fuse mount, for the CLI.
 * Layer: fuse/ (the daemon answers them; cli/ asks).
 *
 * Other file systems answer them with ENOTTY.  All are "restricted" FUSE
 * ioctls (their size is in the number), so any user who can open a file
 * of the mount may ask.
 *
 * NX_IOC_GET_MTIME (any file or directory, snapshot views included): the
 * inode's own modification time.  stat() on the root of a snapshot view
 * shows the time the snapshot was taken instead, so "nextfs diff" on a
 * mountpoint asks for the real one to report a root that was modified
 * the way the diff of an unmounted image does.
 *
 * NX_IOC_GET_INOMAP (any file or directory): how the tree the file is in
 * numbers its inodes: ext inode = (st_ino - base) & mask.  The live tree
 * and every snapshot view number differently (fuse_ops.h), so "nextfs
 * diff" asks this to match a file in two trees.
 *
 * NX_IOC_SNAP_NEXT (any file or directory): the oldest snapshot whose id
 * is greater than after_id (0: the oldest of all); ENOENT after the
 * newest.  One call per snapshot, so that any number of snapshots with
 * any names (newlines included) comes through whole.
 *
 * NX_IOC_SNAP_IDENTITY (any file or directory): the identity snapshot
 * id has for replication (nx_snap_identity(), snapshot.h): the UUID and
 * ctransid "nextfs send" names it by - the sender's for a snapshot this
 * volume received, which only the daemon can read.  ENOENT if there is
 * no such snapshot.
 *
 * NX_IOC_GET_VOLINFO (any file or directory): the volume's superblock as
 * the daemon holds it now (free counts and all), for "nextfs info".  Only
 * root (after -o fakeroot's mapping) and the user who mounted the volume
 * get all of it; anyone else gets the public part with
 * NX_IOC_VOL_PARTIAL set and every other field zero: magic, revision,
 * features, block and cluster size, first data block, blocks, clusters
 * and inodes per group, block, inode, free and root-reserved counts, the
 * COW reserve (s_snapshot_r_blocks_count), UUID and label - what statfs
 * and the snapshot list need, and what udev shows every user anyway.
 * Never the directory hash seed (docs/security.md).
 *
 * NX_IOC_RECV_* (the root directory of the mount): "nextfs receive" on a
 * mountpoint, applied by the daemon (receive.h, docs/replication.md).
 * BEGIN starts a session (or, with NX_IOC_RECV_ABORT, gives up the
 * pending receive and ends), or says in error and msg why not; DATA
 * carries the stream, up to NX_IOC_RECV_CHUNK bytes a call, and answers
 * 1 once the snapshot is taken, ECANCELED when the receive failed;
 * STATUS says how it went (session 0: the target's pending receive and
 * its resume token); END stops a session (keeping the cursor when it
 * was interrupted) and frees it.  A session that is not (or no longer)
 * the daemon's is ESTALE.  One session per mount: a BEGIN
 * while another client's session is alive is EBUSY, and a session whose
 * client process is gone is stopped (resumable) by the next BEGIN.  Only
 * root (after -o fakeroot's mapping) and the user who mounted the volume
 * may receive: a receive rewrites any file of the tree, so taking
 * snapshots (docs/security.md) is not enough (EPERM).
 *
 * NX_IOC_DELTA_START (any file or directory): the daemon classifies what
 * changed from snapshot old_id to snapshot new_id (0: the live tree; with
 * NX_IOC_DELTA_FULL from an empty tree) with the snapshots' block maps
 * (delta.h), under the volume lock, and keeps the encoded delta
 * (nx_delta_encode) for NX_IOC_DELTA_READ, which hands it out in chunks
 * at the offsets asked (a restricted ioctl carries less than 16 KiB each
 * way).  The handle is random and only the user who started it may read
 * it; a delta is dropped once its last byte was read, and the oldest is
 * dropped when NX_DELTA_SESSIONS are kept.  Only root (after -o fakeroot)
 * and the user who mounted the volume may start one (EPERM for others,
 * who walk the trees instead: names in directories they cannot read are
 * never shown to them; docs/security.md).
 *
 * NX_IOC_SEND_START (any file or directory): "nextfs send" on a
 * mountpoint, made by the daemon (send.h, nx_send_snapshot) so that no
 * file data crosses FUSE: the stream of snapshot new_id (from old_id,
 * 0: a full stream; resumed from the token resume, if not empty) goes
 * into the FIFO at path, which a worker thread of the daemon writes
 * while the tool reads its other end.  The caller makes the FIFO in a
 * directory of its own and opens it for reading first; the daemon
 * opens it without following a symbolic link, only if it is a FIFO
 * owned by the caller (the uid of the request, as the host has it: the
 * FIFO is a file of the host, where -o fakeroot maps nothing) - so the
 * daemon writes nothing the caller could not have written - and writes
 * nothing but the stream.  error and msg say why a send could not start
 * (NX_IOC_SEND_PIPE: the FIFO, so the tool may read the snapshot
 * through the mount instead).  The stream ends with the FIFO closed;
 * then NX_IOC_SEND_STATUS with the handle says how it went and forgets
 * the send (it is forgotten anyway when NX_SEND_JOBS newer ones
 * finished).  A send whose reader goes away stops.  Who may: root
 * (after -o fakeroot) and the user who mounted the volume, as for the
 * delta (EPERM for others); the handle is random, and only its user
 * may ask for its status.
 *
 * NX_IOC_SAME_DATA (any file or directory): do two regular files of the
 * mount hold the same bytes?  Each is named by its tree (a snapshot id,
 * 0: the live tree) and the st_ino that tree shows for it; the daemon
 * answers from the block maps and reads bytes only where they map
 * differently (diff.c, nx_snap_same_data), for "nextfs versions".  Who
 * may: as for the delta (EPERM for others, who compare the files
 * through the mount); EINVAL when either is not a regular file there.
 *
 * MNT/.snapshot-images/NAME (NX_IMGDIR_NAME) is snapshot NAME as a
 * standalone image file (image.h; docs/snapshots.md).  NX_IOC_IMG_CHANGES
 * (on such a file, open; old_id's image open too, by the same or another
 * process): what turns the export of snapshot old_id into this file's
 * content, as nx_imgsrc_changes() gives it: up to max (at most
 * NX_IOC_IMG_RUNS) runs from block start on, and where to go on.  For
 * "nextfs export --since" on a mounted volume.
 *
 * NX_IOC_DEFRAG (a regular file of the live tree, open for reading or
 * writing): "nextfs defrag" (defrag.h, docs/defrag.md).  The daemon
 * rewrites the file's data into contiguous free space, holding the
 * volume lock for one bounded step at a time, and answers how many
 * extents it had before and has after.  Only a user who may write the
 * file (root, after -o fakeroot's mapping, too) may ask (EACCES); EROFS
 * in a snapshot view or on a read-only mount, EINVAL for anything but a
 * regular file, EPERM for immutable and append-only files, ENOSPC when a
 * copy of the file would not fit.  Free space too fragmented to improve
 * the file is status NX_IOC_DEFRAG_FRAGMENTED, with nothing written.
 *
 * NX_IOC_SNAP_PENDING (any file or directory, anyone): deleted
 * snapshots whose blocks the daemon is still handing over (snapshot.h,
 * nx_snap_reclaim), and the blocks they still hold: what "nextfs info"
 * shows and "nextfs snapshot delete --wait" waits for.
 *
 * Numbers: 0xE5-0xE8 for receive, 0xE9 the identity, 0xEA-0xEC for
 * send and the comparison of files, 0xED defrag, 0xEE pending deletes,
 * 0xF0-0xF2 for the delta and image ioctls; 0xEF is free.
 */
#ifndef NEXTFS_NXIOCTL_H
#define NEXTFS_NXIOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>
#include "nextfs/recvstatus.h"

struct nx_ioc_time {
	int64_t sec;
	uint32_t nsec;
	uint32_t pad;
};

struct nx_ioc_inomap {
	uint64_t base;
	uint64_t mask;
};

#define NX_IOC_SNAP_ACTIVE	0x1	/* receives copy-on-write */

struct nx_ioc_snap {
	uint32_t after_id;		/* in */
	uint32_t id;			/* out, and everything below */
	int64_t taken_sec;
	uint32_t taken_nsec;
	uint32_t flags;			/* NX_IOC_SNAP_* */
	uint64_t blocks;		/* blocks the snapshot holds */
	uint32_t blocksize;
	uint32_t namelen;
	char name[256];			/* namelen bytes, then NUL */
};

struct nx_ioc_snap_identity {
	uint32_t id;			/* in: snapshot id */
	uint32_t pad;
	uint64_t ctransid;		/* out */
	uint8_t uuid[16];		/* out */
};

#define NX_IOC_VOL_RDONLY	0x1	/* mounted read-only */
#define NX_IOC_VOL_PARTIAL	0x2	/* only the public fields (above) */

struct nx_ioc_volinfo {
	uint8_t super[1024];		/* struct ext2_super_block, as held */
	uint32_t flags;			/* NX_IOC_VOL_* */
	uint32_t pad;
};

#define NX_IOC_GET_MTIME	_IOR('N', 0xE0, struct nx_ioc_time)
#define NX_IOC_GET_INOMAP	_IOR('N', 0xE1, struct nx_ioc_inomap)
#define NX_IOC_SNAP_NEXT	_IOWR('N', 0xE2, struct nx_ioc_snap)
#define NX_IOC_GET_VOLINFO	_IOR('N', 0xE3, struct nx_ioc_volinfo)

struct nx_ioc_pending {
	uint32_t snapshots;		/* deleted, hand-over not done */
	uint32_t blocksize;
	uint64_t blocks;		/* what they still hold */
};

#define NX_IOC_SNAP_PENDING	_IOR('N', 0xEE, struct nx_ioc_pending)

/* The virtual directory of image files, at the root of the mount. */
#define NX_IMGDIR_NAME		".snapshot-images"

#define NX_IOC_IMG_RUNS		500
#define NX_IOC_IMG_WRITE	1	/* = NX_IMG_WRITE: NEW's content */
#define NX_IOC_IMG_ZERO		2	/* = NX_IMG_ZERO: free in NEW */

struct nx_ioc_img_run {
	uint64_t blk;
	uint32_t len;
	uint32_t kind;			/* NX_IOC_IMG_* */
};

struct nx_ioc_img_changes {
	uint32_t old_id;		/* in: the snapshot the target holds */
	uint32_t max;			/* in: runs wanted (<= NX_IOC_IMG_RUNS) */
	uint64_t start;			/* in: first block to look at */
	uint64_t next;			/* out: the next call's start; the
					   block count when done */
	uint32_t count;			/* out: runs filled */
	uint32_t pad;
	struct nx_ioc_img_run run[NX_IOC_IMG_RUNS];
};

#define NX_IOC_IMG_CHANGES	_IOWR('N', 0xF2, struct nx_ioc_img_changes)

#define NX_IOC_OPSTATS_SIZE	4096
struct nx_ioc_opstats {
	char text[NX_IOC_OPSTATS_SIZE];
};
#define NX_IOC_GET_OPSTATS	_IOR('N', 0xE4, struct nx_ioc_opstats)

#define NX_IOC_RECV_FORCE	0x1	/* -F */
#define NX_IOC_RECV_RESUME	0x2	/* --resume */
#define NX_IOC_RECV_ABORT	0x4	/* --abort: no session */

struct nx_ioc_recv_begin {
	uint32_t flags;			/* in: NX_IOC_RECV_* */
	uint32_t error;			/* out: 0, or an errno and msg */
	uint64_t session;		/* out */
	char msg[512];
};

/* A FUSE restricted ioctl carries less than 16 KiB (_IOC_SIZE: 14 bits). */
#define NX_IOC_RECV_CHUNK	16360
#define NX_IOC_RECV_EOF		0x1	/* the stream ends after this chunk */

struct nx_ioc_recv_data {
	uint64_t session;
	uint32_t len;			/* bytes of data used */
	uint32_t flags;			/* NX_IOC_RECV_EOF */
	uint8_t data[NX_IOC_RECV_CHUNK];
};

/* struct nx_ioc_recv_status and its NX_IOC_RECV_ states: recvstatus.h */

#define NX_IOC_RECV_STOP	0	/* nx_ioc_recv_end.how: keep the cursor */

struct nx_ioc_recv_end {
	uint64_t session;
	uint32_t how;
	uint32_t pad;
};

#define NX_IOC_RECV_BEGIN	_IOWR('N', 0xE5, struct nx_ioc_recv_begin)
#define NX_IOC_RECV_DATA	_IOW('N', 0xE6, struct nx_ioc_recv_data)
#define NX_IOC_RECV_STATUS	_IOWR('N', 0xE7, struct nx_ioc_recv_status)
#define NX_IOC_RECV_END		_IOW('N', 0xE8, struct nx_ioc_recv_end)

#define NX_IOC_SNAP_IDENTITY	_IOWR('N', 0xE9, struct nx_ioc_snap_identity)

#define NX_IOC_DELTA_FULL	0x1	/* from an empty tree */
#define NX_IOC_DELTA_EXTENTS	0x2	/* changed extents of regular files */

struct nx_ioc_delta_start {
	uint32_t old_id;		/* in: snapshot id */
	uint32_t new_id;		/* in: snapshot id, 0 = the live tree */
	uint32_t flags;			/* in: NX_IOC_DELTA_* */
	uint32_t pad;
	uint64_t handle;		/* out */
	uint64_t size;			/* out: bytes of the encoded delta */
};

#define NX_DELTA_SESSIONS	4
#define NX_IOC_DELTA_CHUNK	(16384 - 64)

struct nx_ioc_delta_read {
	uint64_t handle;		/* in */
	uint64_t offset;		/* in */
	uint32_t len;			/* out: bytes in data */
	uint32_t pad;
	char data[NX_IOC_DELTA_CHUNK];
};

#define NX_SEND_JOBS		4
#define NX_IOC_SEND_PIPE	0x1	/* error: the FIFO could not be used */

struct nx_ioc_send_start {
	uint32_t old_id;		/* in: the parent, 0: a full stream */
	uint32_t new_id;		/* in: the snapshot */
	uint32_t flags;			/* out: NX_IOC_SEND_PIPE */
	uint32_t error;			/* out: 0, or an errno and msg */
	uint64_t handle;		/* out */
	char resume[128];		/* in: a resume token, or "" */
	char path[4096];		/* in: the FIFO, an absolute path */
	char msg[512];			/* out */
};

#define NX_IOC_SEND_RUNNING	0	/* nx_ioc_send_status.state */
#define NX_IOC_SEND_DONE	1

struct nx_ioc_send_status {
	uint64_t handle;		/* in */
	uint32_t state;			/* out: NX_IOC_SEND_*, and all below */
	uint32_t error;			/* 0, or an errno and msg */
	uint64_t bytes;			/* (send.h, nx_send_stats) */
	uint64_t data_bytes;
	uint64_t commands;
	uint64_t inodes;
	char msg[512];
};

struct nx_ioc_same_data {
	uint32_t id[2];			/* in: each file's tree (0: live) */
	uint64_t st_ino[2];		/* in: its st_ino there */
	uint32_t same;			/* out: 1 the same bytes, 0 not */
	uint32_t pad;
};

#define NX_IOC_SEND_START	_IOWR('N', 0xEA, struct nx_ioc_send_start)
#define NX_IOC_SEND_STATUS	_IOWR('N', 0xEB, struct nx_ioc_send_status)
#define NX_IOC_SAME_DATA	_IOWR('N', 0xEC, struct nx_ioc_same_data)

/* struct nx_ioc_defrag.status (= NX_DEFRAG_*, defrag.h) */
#define NX_IOC_DEFRAG_DONE		0	/* moved */
#define NX_IOC_DEFRAG_CONTIGUOUS	1	/* nothing to gain: untouched */
#define NX_IOC_DEFRAG_FRAGMENTED	2	/* free space too fragmented */

struct nx_ioc_defrag {
	uint32_t flags;			/* in: 0 */
	uint32_t status;		/* out: NX_IOC_DEFRAG_* */
	uint64_t blocks;		/* out: data blocks of the file */
	uint64_t extents_before;	/* out */
	uint64_t extents_after;		/* out */
	uint64_t moved;			/* out: blocks rewritten */
	uint64_t kept;			/* out: old blocks the snapshot kept */
};

#define NX_IOC_DEFRAG		_IOWR('N', 0xED, struct nx_ioc_defrag)

#define NX_IOC_DELTA_START	_IOWR('N', 0xF0, struct nx_ioc_delta_start)
#define NX_IOC_DELTA_READ	_IOWR('N', 0xF1, struct nx_ioc_delta_read)

#endif
