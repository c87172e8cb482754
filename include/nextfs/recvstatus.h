/*
 * recvstatus.h - where a receive stands, as one fixed-size record: what
 * nx_recv_status() fills (receive.h) and what a mount's
 * NX_IOC_RECV_STATUS ioctl carries (nxioctl.h), so that the tool reports
 * a receive into an image and one through a mount alike.
 * Layer: repl/ (a record only, no code; nxioctl.h in fuse/ includes it,
 * so the layer that fills it needs nothing from above).
 *
 * Contract: fixed sizes and no pointers (it crosses the FUSE ioctl as
 * it is; daemon and tool share a machine, so host byte order).  SESSION
 * is the only field read; every other one is written.
 */
#ifndef NEXTFS_RECVSTATUS_H
#define NEXTFS_RECVSTATUS_H

#include <stdint.h>

/* nx_ioc_recv_status.state */
#define NX_IOC_RECV_RUNNING	0
#define NX_IOC_RECV_DONE	1	/* the snapshot is taken */
#define NX_IOC_RECV_FAILED	2	/* see flags and msg */
#define NX_IOC_RECV_NONE	3	/* session 0: nothing pending */
#define NX_IOC_RECV_PENDING	4	/* session 0: a receive is pending */
/* nx_ioc_recv_status.flags */
#define NX_IOC_RECV_RESUMABLE	0x1	/* the cursor stays: resume it */
#define NX_IOC_RECV_ROLLED_BACK	0x2	/* the live tree went back */
#define NX_IOC_RECV_INCREMENTAL	0x4
#define NX_IOC_RECV_REFUSED	0x8	/* nothing of this run applied */

struct nx_ioc_recv_status {
	uint64_t session;		/* in: 0 = the target's pending one */
	uint32_t state;			/* out, and all below */
	uint32_t flags;
	uint64_t commands;		/* (receive.h, nx_recv_stats) */
	uint64_t bytes;
	uint64_t data_bytes;
	uint64_t skipped;
	uint64_t ignored_xattrs;
	uint64_t next_index;
	uint64_t next_offset;
	int64_t taken_sec;
	uint32_t taken_nsec;
	uint32_t snap_id;
	char name[256];			/* the snapshot */
	char parent[256];		/* its parent here */
	char token[128];		/* resume token, if resumable */
	char msg[768];			/* what went wrong */
};

#endif
