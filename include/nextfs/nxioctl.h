/*
 * nxioctl.h - private ioctls of a nextfs-fuse mount, for the CLI.
 *
 * NX_IOC_GET_MTIME (on any file or directory of the mount, snapshot views
 * included): the inode's own modification time.  stat() on the root of
 * a snapshot view shows the time the snapshot was taken instead, so
 * "nextfs diff" on a mountpoint asks for the real one to report a root
 * that was modified the way the diff of an unmounted image does.  Other
 * file systems answer ENOTTY.
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

#define NX_IOC_GET_MTIME	_IOR('N', 0xE0, struct nx_ioc_time)

#define NX_IOC_OPSTATS_SIZE	4096
struct nx_ioc_opstats {
	char text[NX_IOC_OPSTATS_SIZE];
};
#define NX_IOC_GET_OPSTATS	_IOR('N', 0xE1, struct nx_ioc_opstats)

#endif
