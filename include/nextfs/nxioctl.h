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
 */
#ifndef NEXTFS_NXIOCTL_H
#define NEXTFS_NXIOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>

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

#define NX_IOC_OPSTATS_SIZE	4096
struct nx_ioc_opstats {
	char text[NX_IOC_OPSTATS_SIZE];
};
#define NX_IOC_GET_OPSTATS	_IOR('N', 0xE4, struct nx_ioc_opstats)

#endif
