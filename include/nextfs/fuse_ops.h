/*
 * fuse_ops.h - the FUSE front end of nextfs (libfuse3 low-level API).
 * Layer: fuse/ (calls every layer below).
 *
 * Contract: FUSE node ids are inode numbers (FUSE_ROOT_ID <-> ext2 inode
 * 2, everything else identity), never paths; the generation is
 * i_generation mixed with the volume's UUID (nx_fuse_generation).  A
 * node id and its generation are all a file handle holds (the kernel's
 * export support: NFS servers, open_by_handle_at), so any node id ever
 * handed out is decoded from its bits alone - after the kernel forgot it
 * and after a restart - by LOOKUP(node id, "."), and its parent by
 * LOOKUP(node id, ".."); docs/nfs.md.
 * Every operation runs the fs layer under the volume's big lock; only a
 * file read does its device I/O after the lock is dropped (the block
 * map is resolved under it; blkio.h says why that is safe), splicing the
 * data from the device into the reply where it can (zero copy).  The
 * kernel does the permission checks (the daemon always mounts with
 * default_permissions, and negotiates POSIX ACLs: then the umask is
 * applied here, after default-ACL inheritance); this layer adds what the
 * VFS would check from inode flags the kernel cannot see (immutable,
 * append-only) and what a read-only volume forbids (EROFS).  Times are
 * clamped to ext4's range as the VFS does.  An inode that loses its last
 * name while the kernel still references it (looked up or open) is kept
 * in the node table and freed with nx_inode_release() on the last forget
 * or release, or at unmount.  At unmount (destroy) all pending inodes are
 * released and the volume is closed (marked clean).
 */
#ifndef NEXTFS_FUSE_OPS_H
#define NEXTFS_FUSE_OPS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif

#include <stdint.h>
#include <fuse_lowlevel.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/idmap.h"
#include "nextfs/volume.h"

/* Exit status of nextfs-fuse. */
#define NX_EXIT_OK		0	/* unmounted, volume closed clean */
#define NX_EXIT_USAGE		1	/* bad arguments, mount or close error */
#define NX_EXIT_REFUSED		2	/* nx_open_volume() refused the volume */

/*
 * The largest read the kernel sends.  Replies are spliced (zero copy)
 * through a pipe of at most 1 MiB (/proc/sys/fs/pipe-max-size; larger
 * pipes need CAP_SYS_RESOURCE), which must hold the reply header and
 * the data: libfuse falls back to copying otherwise.  So 1 MiB less a
 * margin for the header and a few pages of slack.
 */
#define NX_MAX_READ		983040	/* 1 MiB - 64 KiB */

/* Attribute, entry and negative-entry cache time handed to the kernel. */
#define NX_FUSE_TIMEOUT		1.0

/*
 * nodes.c - the kernel's references to inodes: lookup count (nlookup,
 * raised by every entry reply, lowered by forget) and open handles.
 * All functions are called with the volume lock held.  The root inode is
 * never tracked (the kernel never lets it go).
 */
struct nx_nodes;

struct nx_nodes *nx_nodes_new(void);
/* Free the table (does not release inodes: see nx_nodes_release_all). */
void nx_nodes_free(struct nx_nodes *nodes);

/* The kernel got an entry reply for INO: nlookup += 1.  ENOMEM possible. */
errcode_t nx_nodes_lookup(struct nx_nodes *nodes, ext2_ino_t ino);
/* FORGET: nlookup -= N; may release an unlinked inode. */
errcode_t nx_nodes_forget(struct nx_nodes *nodes, struct nx_volume *vol,
			  ext2_ino_t ino, uint64_t n);
/* open/opendir/create and release/releasedir of INO. */
errcode_t nx_nodes_open(struct nx_nodes *nodes, ext2_ino_t ino);
errcode_t nx_nodes_close(struct nx_nodes *nodes, struct nx_volume *vol,
			 ext2_ino_t ino);
/*
 * INO lost a name (unlink, rmdir, replaced by rename).  If the kernel
 * still references it, release is deferred to the last forget/close;
 * otherwise nx_inode_release() runs now.  (Release frees nothing while
 * the inode still has links, so calling this for every victim is safe.)
 */
errcode_t nx_nodes_unlinked(struct nx_nodes *nodes, struct nx_volume *vol,
			    ext2_ino_t ino);
/* How many unlinked inodes wait for their last reference to go? */
size_t nx_nodes_pending(const struct nx_nodes *nodes);
/* Does the kernel hold a reference (lookup or open) to INO? */
int nx_nodes_busy(const struct nx_nodes *nodes, ext2_ino_t ino);
/* Unmount: release every deferred inode and empty the table. */
errcode_t nx_nodes_release_all(struct nx_nodes *nodes, struct nx_volume *vol);

/* fuse_ops.c - the state behind the session (fuse_req_userdata). */
struct nx_fuse {
	struct nx_volume *vol;		/* owned until destroy closes it */
	struct nx_nodes *nodes;		/* owned */
	struct fuse_session *se;	/* for invalidation notices */
	int dont_mask;			/* POSIX ACLs: the umask is ours */
	double timeout;			/* NX_FUSE_TIMEOUT unless tuned */
	struct nx_idmap idmap;		/* -o fakeroot (idmap.h) */
	uint32_t gen_salt;		/* from the volume UUID: nx_fuse_generation */
	unsigned max_read;		/* -o max_read, <= NX_MAX_READ */
	unsigned read_ahead_kb;		/* the window fuse_main.c set, or 0 */
	errcode_t close_err;		/* result of closing the volume */
	/* snapshot views (snap_ops.c) */
	fuse_ino_t space;		/* snapshot id << 32; 0 for the live tree */
	uint64_t ino_base;		/* st_ino = ino_base + ino (0: live) */
	int ino32;			/* -o ino32: ... mod 2^32 (nx_fuse_st_ino) */
	struct timespec root_mtime;	/* views: the take time, shown on "/" */
	int hides_snapdir;		/* "/" holds a real /.snapshots */
	struct nx_fuse **views;		/* live: one per snapshot id browsed */
	size_t nviews, capviews;
	struct nx_periodic *committer;	/* live rw: the commit timer */
	struct nx_timer *timer;		/* live rw: timed snapshots */
	struct nx_reclaim *reclaim;	/* live rw: hand-over of deletes */
	/*
	 * -o snapshot_group: members of the group (kernel's ids) take and
	 * delete snapshots too (snap_ops.c, docs/security.md).
	 */
	int snap_group_set;
	gid_t snap_group;
	struct nx_fuse_images *images;	/* live: the image files (image_ops.c) */
};

/*
 * timer.c - timed snapshots (-o snapshot_every, snapshot_keep): a thread
 * that, whenever the UTC time is a multiple of EVERY seconds, takes a
 * snapshot with a timeline name (retention.h) the way mkdir in
 * .snapshots does, then deletes the timeline snapshots KEEP (if not
 * NULL; copied) does not keep, one at a time, each under the volume lock
 * for no longer than an rmdir would hold it.  A take or delete that
 * fails is logged; the next tick tries again.  fuse_main.c starts and
 * stops it (joined before the volume is closed, with the commit timer,
 * which lives there); stopping twice is harmless.
 */
struct nx_keep_spec;
int nx_fuse_timer_start(struct nx_fuse *fs, unsigned every,
			const struct nx_keep_spec *keep);
void nx_fuse_timer_stop(struct nx_fuse *fs);

/*
 * reclaim.c - the thread that hands over the blocks of deleted snapshots
 * (snapshot.h: nx_snap_reclaim), a bounded slice per hold of the volume
 * lock, from the start (work an earlier mount left) and after every
 * delete (nx_fuse_reclaim_kick).  fuse_main.c starts it on read-write
 * mounts and stops it before the volume closes: the slice in progress
 * ends, what is left stays on disk for the next mount.
 */
int nx_fuse_reclaim_start(struct nx_fuse *fs);
void nx_fuse_reclaim_kick(struct nx_fuse *fs);
void nx_fuse_reclaim_stop(struct nx_fuse *fs);

/* The operations proper (fuse_ops.c); they serve the live tree and views. */
extern const struct fuse_lowlevel_ops nx_fuse_ops;

/*
 * snap_ops.c - nx_fuse_ops plus the snapshot views (what image_ops.c
 * puts the image files in front of).  Node ids carry a snapshot id in their high 32 bits (0 = live
 * tree; ids are never reused, so node ids never alias); the virtual
 * directory MNT/.snapshots has NX_SNAPDIR_NODEID.  A request for a view
 * runs nx_fuse_ops with nx_fuse_current pointing at the view's nx_fuse
 * (its vol is the read-only view, which shares the live lock); anything
 * that would change a view fails with EROFS.  "/.snapshots" is hidden
 * from every root directory listing: the live tree shows the virtual
 * directory on lookup only (like ZFS's hidden .zfs), so that find, du or
 * cp -a of the mount do not descend into every snapshot.  (One reader
 * sees it listed in "/": the kernel's own open of "/" - flags exactly
 * O_RDONLY - with which exportfs looks for the name of a directory it
 * reconnects to decode a file handle; without it no handle of .snapshots
 * or of a directory in a snapshot could be decoded: docs/nfs.md.)
 */
#define NX_NODE_INO_MASK	0xffffffffULL
#define NX_NODE_SPACE_SHIFT	32
#define NX_SPACE_SNAPDIR	0xffffffffULL
#define NX_SNAPDIR_NODEID	((NX_SPACE_SNAPDIR << NX_NODE_SPACE_SHIFT) | \
				 FUSE_ROOT_ID)
extern const struct fuse_lowlevel_ops nx_fuse_snap_ops;
extern __thread struct nx_fuse *nx_fuse_current;

/*
 * image_ops.c - what the session runs: nx_fuse_snap_ops plus the image
 * files.  MNT/.snapshot-images (NX_IMGDIR_NAME, nxioctl.h) lists every
 * snapshot NAME as a read-only regular file, the snapshot as a
 * standalone ext image (image.h), readable by root and the user who runs
 * the daemon; like .snapshots it is found by lookup only (no listing of
 * "/" shows it, but for the kernel's own, next to .snapshots: a handle
 * of the directory is reconnected like one of .snapshots) and only in
 * the live tree's root.  Its node id is
 * NX_IMGDIR_NODEID; the image of snapshot ID has node id ID << 32 (ext
 * inode 0 of that snapshot's space: no view node has it).
 * nx_fuse_images_changed() (called when .snapshots changed, without the
 * lock) tells the kernel that the images of deleted snapshots are gone.
 */
#define NX_IMGDIR_NODEID	((NX_SPACE_SNAPDIR << NX_NODE_SPACE_SHIFT) | 2)
extern const struct fuse_lowlevel_ops nx_fuse_image_ops;
struct nx_fuse_images;
void nx_fuse_images_changed(struct nx_fuse *live);

/*
 * Inode numbers (st_ino, d_ino): what tools see, unlike node ids, which
 * only the kernel sees.  Live files show their ext inode number.  A file
 * of snapshot ID shows (ID << 32) | its ext inode number - distinct from
 * every live file and every other snapshot's file, the same after a
 * remount and whatever other snapshots come and go (ids are never
 * reused), shared by hard links inside the snapshot.  With -o ino32
 * (for 32-bit programs, which get EOVERFLOW from numbers above 2^32) it
 * is (ID * s_inodes_count + ino) mod 2^32 instead: distinct only while
 * (ID + 1) * s_inodes_count <= 2^32 (docs/snapshots.md).  The virtual
 * .snapshots directory shows NX_SNAPDIR_STINO: inode 1, ext's bad-blocks
 * inode, is never a visible file.
 */
#define NX_SNAPDIR_STINO	1ULL
/* ... and MNT/.snapshot-images inode 6, ext's undelete directory. */
#define NX_IMGDIR_STINO		6ULL

static inline uint64_t nx_fuse_st_ino(const struct nx_fuse *fs,
				      ext2_ino_t ino)
{
	uint64_t st_ino = fs->ino_base + ino;

	return fs->ino32 ? (uint32_t)st_ino : st_ino;
}

/*
 * The generation the kernel keeps with a node id and puts in its file
 * handles.  i_generation tells a reused inode number from the file that
 * had it before (nx_inode_new() numbers new inodes consecutively from a
 * random start: a new file gets its number's old generation only by a 1
 * in 2^32 chance); the salt, taken from the volume's UUID at init,
 * makes a handle of another volume - a copy of this image given a new
 * UUID, say - stale here instead of opening the file that has the same
 * number.  The root always has 0: the kernel insists (and keeps 0 for
 * it whatever we say), so a handle of "/" fits every volume.
 */
static inline uint32_t nx_fuse_generation(const struct nx_fuse *fs,
					  uint32_t i_generation)
{
	return i_generation ^ fs->gen_salt;
}

/* Is NAME in directory DIR the hidden snapshot directory? */
int nx_fuse_hidden(ext2_ino_t dir, const char *name, size_t namelen);
/*
 * Attributes as the mount shows them: st_ino (above), owners through
 * -o fakeroot's map, and for "/" of the view FS is the link count
 * without the hidden /.snapshots and, in a snapshot, the take time as
 * mtime.
 */
void nx_fuse_fix_stat(const struct nx_fuse *fs, ext2_ino_t ino,
		      struct stat *st);

/*
 * opstats.c - per-operation request counters.  nx_fuse_opstats_wrap()
 * makes OUT a copy of OPS whose every request handler first counts one
 * request of its kind (the session runs that copy).  The counts are
 * per process (one mount) and never reset; nx_fuse_opstats_format()
 * writes the non-zero ones as "NAME COUNT\n" lines (whole lines only)
 * and returns the length.  Read through the NX_IOC_GET_OPSTATS ioctl,
 * which adds the device counters of the volume (blkio.h) as lines
 * "device.NAME COUNT" (read_bytes, read_calls, cache_hits, written_bytes:
 * what the daemon read from and wrote to the device, and the reads its
 * block cache served instead).
 */
void nx_fuse_opstats_wrap(const struct fuse_lowlevel_ops *ops,
			  struct fuse_lowlevel_ops *out);
size_t nx_fuse_opstats_format(char *buf, size_t size);

/*
 * loop.c - serve requests until the session ends (unmount, abort, or a
 * signal handler's fuse_session_exit), with up to NX_LOOP_MAX_THREADS
 * threads: the request the waiting thread receives is served by that
 * thread itself when it only runs under the volume lock, else after
 * another thread has taken over waiting (reads, large writes, anything
 * that may wait for the kernel or long).  0, or a negative errno
 * (-ECONNABORTED: the kernel aborted the connection).
 */
#define NX_LOOP_MAX_THREADS	10
int nx_fuse_loop(struct fuse_session *se);

/* fuse_main.c - run one mount. */
/*
 * The kernel's readahead for a FUSE mount is 128 KiB (the daemon can only
 * lower it at init); a stream then has one 128 KiB-1 MiB request in
 * flight at a time.  Reads run outside the volume lock, so a larger
 * window is served in parallel: measured on a cold 1 GiB file, 128 KiB:
 * 260-550 MB/s, 4096 KiB: 1.1-1.2 GB/s.  Set through sysfs after the
 * mount, which needs root, and kept by the INIT reply.
 */
#define NX_DEFAULT_READ_AHEAD_KB	4096U
#define NX_MAX_READ_AHEAD_KB		65536U

struct nx_fuse_config {
	const char *device;		/* absolute path of image or device */
	const char *mountpoint;		/* absolute path */
	const char *mount_name;		/* what libfuse mounts on (it may be
					   /proc/self/fd/N: the directory the
					   path led to when it was resolved),
					   or NULL: MOUNTPOINT */
	int mount_fd;			/* the directory mounted on, held open
					   from before the mount; or -1 */
	int rdonly;			/* -o ro */
	int foreground;			/* -f (or -d) */
	int singlethread;		/* -s */
	int blkdev;			/* mount as fuseblk: the kernel claims
					   the device, umount waits for us */
	unsigned read_ahead_kb;		/* -o read_ahead_kb=N; 0 = kernel's */
	int ino32;			/* -o ino32: 32-bit snapshot st_ino */
	int read_ahead_given;		/* ... named by the user: warn if unset */
	int fakeroot;			/* -o fakeroot: see idmap.h */
	unsigned snapshot_every;	/* -o snapshot_every, s; 0: none */
	const struct nx_keep_spec *snapshot_keep;	/* or NULL */
	int snapshot_group;		/* -o snapshot_group given: */
	gid_t snapshot_gid;		/* ... the group (kernel's ids) */
	struct fuse_args *args;		/* argv[0] + options for the session */
};

/*
 * Create the session (validates FUSE options), open the volume, mount,
 * daemonise unless foreground, keep the status channel (holder.h), serve
 * until unmount or signal, unmount, close the volume, tell the channel
 * how it ended.  Errors are printed as one "nextfs-fuse: ..." line.
 * Returns an NX_EXIT_* status.
 */
int nx_fuse_main(const struct nx_fuse_config *cfg);

#endif
