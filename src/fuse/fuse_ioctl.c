/*
 * fuse_ioctl.c - the ioctls of live files and directories: inode flags
 * (chattr/lsattr through FS_IOC_GETFLAGS/SETFLAGS and the fileattr pair
 * FS_IOC_FSGETXATTR/FSSETXATTR), the generation number, and nextfs's own
 * (nxioctl.h): the real mtime, the inode numbering of a tree, the
 * snapshot list and identities, the volume's superblock and the delta of
 * two trees (delta_ops.c; the receive ioctls are recv_ioctl.c's, defrag
 * is defrag_ioctl.c's).  Like
 * every operation, each runs under the volume lock and replies after it
 * is dropped (NX_IOC_GET_OPSTATS needs no lock: the counters are atomic).
 */
#include "fuse_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>
#include "nextfs/blkio.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"

#ifndef FS_IOC32_GETFLAGS
#define FS_IOC32_GETFLAGS	_IOR('f', 1, int)
#define FS_IOC32_SETFLAGS	_IOW('f', 2, int)
#endif
#ifndef FS_IOC32_GETVERSION
#define FS_IOC32_GETVERSION	_IOR('v', 1, int)
#endif

/* FS_*_FL <-> FS_XFLAG_* for the flags both interfaces share. */
static const struct { unsigned fl; uint32_t xflag; } xflag_map[] = {
	{ FS_SYNC_FL, FS_XFLAG_SYNC },
	{ FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE },
	{ FS_APPEND_FL, FS_XFLAG_APPEND },
	{ FS_NODUMP_FL, FS_XFLAG_NODUMP },
	{ FS_NOATIME_FL, FS_XFLAG_NOATIME },
	{ FS_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT },
};
#define NX_NXFLAGS (sizeof(xflag_map) / sizeof(xflag_map[0]))

static uint32_t flags_to_xflags(unsigned flags)
{
	uint32_t x = 0;
	size_t i;

	for (i = 0; i < NX_NXFLAGS; i++)
		if (flags & xflag_map[i].fl)
			x |= xflag_map[i].xflag;
	return x;
}

static unsigned xflags_to_flags(unsigned old, uint32_t x)
{
	size_t i;

	for (i = 0; i < NX_NXFLAGS; i++) {
		old &= ~xflag_map[i].fl;
		if (x & xflag_map[i].xflag)
			old |= xflag_map[i].fl;
	}
	return old;
}

/*
 * The kernel routes FS_IOC_GETFLAGS/SETFLAGS through its fileattr code,
 * which also asks for FS_IOC_FSGETXATTR before every change, so all
 * four must work for chattr to.  The flags argument is an int (not the
 * long the ioctl number suggests): reply exactly 4 bytes.
 */
static errcode_t ioctl_flags(struct nx_fuse *fs, const struct nx_cred *cred,
			     ext2_ino_t ino, unsigned int cmd,
			     const void *in, size_t in_size, void *out,
			     size_t *out_size)
{
	struct nx_volume *vol = fs->vol;
	struct fsxattr fsx;
	unsigned flags, newflags;
	int is_set = cmd == FS_IOC_SETFLAGS || cmd == FS_IOC32_SETFLAGS ||
		     cmd == FS_IOC_FSSETXATTR;
	size_t need = (cmd == FS_IOC_FSGETXATTR || cmd == FS_IOC_FSSETXATTR) ?
		      sizeof(fsx) : sizeof(int);
	errcode_t err;

	if ((is_set ? in_size : *out_size) < need)
		return EINVAL;
	if (is_set && nx_volume_rdonly(vol))
		return EROFS;
	err = nx_get_iflags(vol, ino, &flags);
	if (err)
		return err;
	if (!is_set) {
		if (cmd == FS_IOC_FSGETXATTR) {
			memset(&fsx, 0, sizeof(fsx));
			fsx.fsx_xflags = flags_to_xflags(flags);
			memcpy(out, &fsx, sizeof(fsx));
		} else {
			memcpy(out, &flags, sizeof(int));
		}
		*out_size = need;
		return 0;
	}
	*out_size = 0;
	if (cmd == FS_IOC_FSSETXATTR) {
		memcpy(&fsx, in, sizeof(fsx));
		if (fsx.fsx_projid)
			return EOPNOTSUPP;	/* no project quota */
		newflags = xflags_to_flags(flags, fsx.fsx_xflags);
	} else {
		memcpy(&newflags, in, sizeof(int));
	}
	return nx_set_iflags(vol, cred, ino, newflags);
}

static errcode_t ioctl_getversion(struct nx_fuse *fs, ext2_ino_t ino,
				  void *out, size_t *out_size)
{
	struct ext2_inode_large inode;
	errcode_t err;

	if (*out_size < sizeof(int))
		return EINVAL;
	err = nx_inode_read(fs->vol, ino, &inode);
	if (err)
		return err;
	memcpy(out, &inode.i_generation, sizeof(int));
	*out_size = sizeof(int);
	return 0;
}

/* NX_IOC_GET_MTIME: the inode's mtime, before nx_fuse_fix_stat(). */
static errcode_t ioctl_get_mtime(struct nx_fuse *fs, ext2_ino_t ino,
				 void *out, size_t *out_size)
{
	struct ext2_inode_large inode;
	struct nx_ioc_time t;
	struct stat st;
	errcode_t err;

	if (*out_size < sizeof(t))
		return EINVAL;
	err = nx_inode_read(fs->vol, ino, &inode);
	if (err)
		return err;
	nx_inode_to_stat(fs->vol, ino, &inode, &st);
	memset(&t, 0, sizeof(t));
	t.sec = st.st_mtim.tv_sec;
	t.nsec = (uint32_t)st.st_mtim.tv_nsec;
	memcpy(out, &t, sizeof(t));
	*out_size = sizeof(t);
	return 0;
}

/* The device counters after the request counters (fuse_ops.h). */
static void format_device_stats(struct nx_fuse *live, char *buf, size_t size)
{
	struct nx_blkio_stats io;
	size_t used = strlen(buf);

	nx_blkio_get_stats(live->vol->io, &io);
	snprintf(buf + used, size - used,
		 "device.read_bytes %llu\ndevice.read_calls %llu\n"
		 "device.cache_hits %llu\ndevice.written_bytes %llu\n",
		 (unsigned long long)io.bytes_read,
		 (unsigned long long)io.read_calls,
		 (unsigned long long)io.cache_hits,
		 (unsigned long long)io.bytes_written);
}

/* NX_IOC_GET_OPSTATS: the request counters as text (nxioctl.h). */
static void reply_opstats(fuse_req_t req, size_t out_bufsz)
{
	struct nx_ioc_opstats *st;

	if (out_bufsz < sizeof(*st)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	nx_fuse_opstats_format(st->text, sizeof(st->text));
	format_device_stats(fuse_req_userdata(req), st->text,
			    sizeof(st->text));
	fuse_reply_ioctl(req, 0, st, sizeof(*st));
	free(st);
}

/* NX_IOC_GET_INOMAP: how this tree numbers its inodes (fuse_ops.h). */
static errcode_t ioctl_get_inomap(struct nx_fuse *fs, void *out,
				  size_t *out_size)
{
	struct nx_ioc_inomap map;

	if (*out_size < sizeof(map))
		return EINVAL;
	map.base = fs->ino_base;
	map.mask = fs->ino32 ? 0xffffffffULL : ~0ULL;
	memcpy(out, &map, sizeof(map));
	*out_size = sizeof(map);
	return 0;
}

/* NX_IOC_SNAP_NEXT: the oldest snapshot of the volume after AFTER_ID. */
static errcode_t ioctl_snap_next(struct nx_fuse *live, const void *in,
				 size_t in_size, void *out, size_t *out_size)
{
	struct nx_ioc_snap q;
	struct nx_snapinfo info;
	uint32_t after;
	errcode_t err;
	int idx;

	if (in_size < sizeof(q) || *out_size < sizeof(q))
		return EINVAL;
	memcpy(&after, in, sizeof(after));
	if (after == UINT32_MAX)
		return ENOENT;
	idx = nx_snap_seek_id(live->vol, after + 1);
	err = nx_snap_peek(live->vol, idx, &info);
	if (!err)	/* the list with what each holds: read the inode */
		err = nx_snap_find_id(live->vol, info.id, &info);
	if (err)
		return ENOENT;
	memset(&q, 0, sizeof(q));
	q.after_id = after;
	q.id = info.id;
	q.taken_sec = info.taken.tv_sec;
	q.taken_nsec = (uint32_t)info.taken.tv_nsec;
	q.flags = info.active ? NX_IOC_SNAP_ACTIVE : 0;
	q.blocks = info.blocks;
	q.blocksize = live->vol->fs->blocksize;
	q.namelen = (uint32_t)strlen(info.name);
	memcpy(q.name, info.name, q.namelen + 1);
	memcpy(out, &q, sizeof(q));
	*out_size = sizeof(q);
	return 0;
}

/* NX_IOC_SNAP_IDENTITY: what "nextfs send" names snapshot ID by. */
static errcode_t ioctl_snap_identity(struct nx_fuse *live, const void *in,
				     size_t in_size, void *out,
				     size_t *out_size)
{
	struct nx_ioc_snap_identity q;
	struct nx_snapinfo info;
	errcode_t err;

	if (in_size < sizeof(q) || *out_size < sizeof(q))
		return EINVAL;
	memcpy(&q, in, sizeof(q));
	if (nx_snap_find_id(live->vol, q.id, &info))
		return ENOENT;
	err = nx_snap_identity(live->vol, &info, q.uuid, &q.ctransid);
	if (err)
		return err;
	q.pad = 0;
	memcpy(out, &q, sizeof(q));
	*out_size = sizeof(q);
	return 0;
}

/*
 * What any user of the mount may know of the superblock: what statfs
 * gives (sizes, counts, the root reserve, and the COW reserve it takes
 * off), the geometry and features needed to read those counts, and what
 * udev shows every user anyway (UUID, label).  Not the directory hash
 * seed and algorithm (kernel ext4 never shows them: they make hash
 * collision attacks on htree directories easy), the journal, the
 * checksum seed, the error records, the times, the last mount point,
 * the snapshot inodes, the encryption salt or the checksum over it all.
 */
static void public_super(const struct ext2_super_block *sb,
			 struct ext2_super_block *out)
{
	memset(out, 0, sizeof(*out));
	out->s_magic = sb->s_magic;
	out->s_rev_level = sb->s_rev_level;
	out->s_feature_compat = sb->s_feature_compat;
	out->s_feature_incompat = sb->s_feature_incompat;
	out->s_feature_ro_compat = sb->s_feature_ro_compat;
	out->s_log_block_size = sb->s_log_block_size;
	out->s_log_cluster_size = sb->s_log_cluster_size;
	out->s_first_data_block = sb->s_first_data_block;
	out->s_blocks_per_group = sb->s_blocks_per_group;
	out->s_clusters_per_group = sb->s_clusters_per_group;
	out->s_inodes_per_group = sb->s_inodes_per_group;
	out->s_inodes_count = sb->s_inodes_count;
	out->s_free_inodes_count = sb->s_free_inodes_count;
	out->s_blocks_count = sb->s_blocks_count;
	out->s_blocks_count_hi = sb->s_blocks_count_hi;
	out->s_r_blocks_count = sb->s_r_blocks_count;
	out->s_r_blocks_count_hi = sb->s_r_blocks_count_hi;
	out->s_free_blocks_count = sb->s_free_blocks_count;
	out->s_free_blocks_hi = sb->s_free_blocks_hi;
	out->s_snapshot_r_blocks_count = sb->s_snapshot_r_blocks_count;
	memcpy(out->s_uuid, sb->s_uuid, sizeof(out->s_uuid));
	memcpy(out->s_volume_name, sb->s_volume_name,
	       sizeof(out->s_volume_name));
}

/* NX_IOC_GET_VOLINFO: the live superblock as it is in memory now. */
static errcode_t ioctl_get_volinfo(struct nx_fuse *live, int whole,
				   void *out, size_t *out_size)
{
	struct nx_ioc_volinfo vi;
	_Static_assert(sizeof(vi.super) == sizeof(struct ext2_super_block),
		       "superblock size");

	if (*out_size < sizeof(vi))
		return EINVAL;
	memset(&vi, 0, sizeof(vi));
	if (whole) {
		memcpy(vi.super, live->vol->fs->super, sizeof(vi.super));
	} else {
		public_super(live->vol->fs->super,
			     (struct ext2_super_block *)vi.super);
		vi.flags |= NX_IOC_VOL_PARTIAL;
	}
	if (nx_volume_rdonly(live->vol))
		vi.flags |= NX_IOC_VOL_RDONLY;
	memcpy(out, &vi, sizeof(vi));
	*out_size = sizeof(vi);
	return 0;
}

/* NX_IOC_SNAP_PENDING: deletes whose hand-over is not done yet. */
static errcode_t ioctl_snap_pending(struct nx_fuse *live, void *out,
				    size_t *out_size)
{
	struct nx_ioc_pending p;
	blk64_t blocks;
	int snaps;

	if (*out_size < sizeof(p))
		return EINVAL;
	memset(&p, 0, sizeof(p));
	nx_snap_pending(live->vol, &snaps, &blocks);
	p.snapshots = (uint32_t)snaps;
	p.blocks = blocks;
	p.blocksize = live->vol->fs->blocksize;
	memcpy(out, &p, sizeof(p));
	*out_size = sizeof(p);
	return 0;
}

void nx_fuse_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		   void *arg, struct fuse_file_info *fi, unsigned flags,
		   const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct nx_fuse *fs = req_fs(req), *live = fuse_req_userdata(req);
	ext2_ino_t ino = to_ext2(nodeid);
	union {				/* every reply */
		struct fsxattr fsx;
		struct nx_ioc_time time;
		struct nx_ioc_inomap map;
		struct nx_ioc_snap snap;
		struct nx_ioc_snap_identity ident;
		struct nx_ioc_volinfo vol;
		struct nx_ioc_pending pending;
		struct nx_ioc_delta_start delta;
		struct nx_ioc_same_data same;
	} out;
	size_t out_size = out_bufsz < sizeof(out) ? out_bufsz : sizeof(out);
	struct nx_cred cred;
	errcode_t err;

	if (flags & FUSE_IOCTL_UNRESTRICTED) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (cmd == NX_IOC_GET_OPSTATS) {
		reply_opstats(req, out_bufsz);
		return;
	}
	if (cmd == NX_IOC_DELTA_READ) {	/* the session has its own lock */
		nx_fuse_delta_read(req, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (cmd == NX_IOC_DEFRAG) {	/* locks in steps (defrag_ioctl.c) */
		nx_fuse_defrag(req, nodeid, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (cmd == NX_IOC_SEND_START) {	/* the worker locks per piece */
		nx_fuse_send_start(req, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (cmd == NX_IOC_SEND_STATUS) {
		nx_fuse_send_status(req, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (nx_fuse_recv_ioctl(req, nodeid, cmd, in_buf, in_bufsz, out_bufsz))
		return;			/* recv_ioctl.c: "nextfs receive" */
	get_cred(req, &cred);
	nx_volume_lock(fs->vol);
	switch (cmd) {
	case FS_IOC_GETFLAGS:
	case FS_IOC32_GETFLAGS:
	case FS_IOC_SETFLAGS:
	case FS_IOC32_SETFLAGS:
	case FS_IOC_FSGETXATTR:
	case FS_IOC_FSSETXATTR:
		err = ioctl_flags(fs, &cred, ino, cmd, in_buf, in_bufsz, &out,
				  &out_size);
		break;
	case FS_IOC_GETVERSION:
	case FS_IOC32_GETVERSION:
		err = ioctl_getversion(fs, ino, &out, &out_size);
		break;
	case NX_IOC_GET_MTIME:
		err = ioctl_get_mtime(fs, ino, &out, &out_size);
		break;
	case NX_IOC_GET_INOMAP:
		err = ioctl_get_inomap(fs, &out, &out_size);
		break;
	case NX_IOC_SNAP_NEXT:
		err = ioctl_snap_next(live, in_buf, in_bufsz, &out, &out_size);
		break;
	case NX_IOC_SNAP_IDENTITY:
		err = ioctl_snap_identity(live, in_buf, in_bufsz, &out,
					  &out_size);
		break;
	case NX_IOC_GET_VOLINFO:
		/* all of it: to those who may read the image anyway */
		err = ioctl_get_volinfo(live, nx_fuse_volume_owner_asks(req),
					&out, &out_size);
		break;
	case NX_IOC_SNAP_PENDING:
		err = ioctl_snap_pending(live, &out, &out_size);
		break;
	case NX_IOC_DELTA_START:
		err = nx_fuse_delta_start(req, live, in_buf, in_bufsz, &out,
					  &out_size);
		break;
	case NX_IOC_SAME_DATA:
		err = nx_fuse_same_data(req, live, in_buf, in_bufsz, &out,
					&out_size);
		break;
	default:
		err = ENOTTY;
		break;
	}
	nx_volume_unlock(fs->vol);
	if (err) {
		reply_err(req, err);
		return;
	}
	fuse_reply_ioctl(req, 0, out_size ? &out : NULL, out_size);
	if (cmd == FS_IOC_SETFLAGS || cmd == FS_IOC32_SETFLAGS ||
	    cmd == FS_IOC_FSSETXATTR)
		invalidate_attrs(fs, nodeid);	/* ctime changed */
}
