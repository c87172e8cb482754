/*
 * defrag_ioctl.c - NX_IOC_DEFRAG: "nextfs defrag" on a mounted volume
 * (nxioctl.h, defrag.h).  A file of any size is moved in steps of at
 * most NX_DEFRAG_STEP_BYTES, each under the volume lock, so that other
 * requests get the volume between them (the request itself waits until
 * the whole file is done).
 */
#include "fuse_internal.h"

#include <string.h>
#include <unistd.h>
#include "nextfs/defrag.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/reserve.h"

/*
 * May CRED defragment INO?  Only a user who could write it: defrag
 * rewrites the file's blocks and takes free space for them
 * (docs/security.md).
 */
static errcode_t may_defrag(struct nx_volume *vol, const struct nx_cred *cred,
			    ext2_ino_t ino)
{
	struct ext2_inode_large inode;
	errcode_t err = nx_volume_rdonly(vol) ? EROFS :
			nx_inode_read(vol, ino, &inode);

	if (err)
		return err;
	return nx_perm_access(cred, (struct ext2_inode *)&inode, W_OK);
}

/* Begin, step until done, finish: the lock is dropped between steps. */
static errcode_t defrag_file(struct nx_volume *vol, const struct nx_cred *cred,
			     ext2_ino_t ino, struct nx_defrag *d)
{
	blk64_t step = NX_DEFRAG_STEP_BYTES / vol->fs->blocksize;
	int done = 0;
	errcode_t err;

	memset(d, 0, sizeof(*d));	/* freed below whatever happens */
	nx_volume_lock(vol);
	err = may_defrag(vol, cred, ino);
	if (!err)
		err = nx_defrag_begin(vol, ino, d);
	nx_volume_unlock(vol);
	while (!err && !done) {
		nx_volume_lock(vol);
		/* Each step changes metadata the snapshot may copy, like a write. */
		err = nx_reserve_may_change(vol, NX_CHANGE_ANY);
		if (!err)
			err = nx_defrag_step(vol, d, step, &done);
		nx_volume_unlock(vol);
	}
	nx_volume_lock(vol);
	if (err)
		nx_defrag_free(d);
	else
		err = nx_defrag_finish(vol, d);
	nx_volume_unlock(vol);
	return err;
}

void nx_fuse_defrag(fuse_req_t req, fuse_ino_t nodeid, const void *in,
		    size_t in_size, size_t out_size)
{
	struct nx_fuse *fs = req_fs(req), *live = fuse_req_userdata(req);
	struct nx_ioc_defrag q;
	struct nx_defrag d;
	struct nx_cred cred;
	errcode_t err;

	if (in_size < sizeof(q) || out_size < sizeof(q)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (fs != live) {		/* a snapshot view never changes */
		fuse_reply_err(req, EROFS);
		return;
	}
	get_cred(req, &cred);
	nx_reserve_writer(nx_reserve_may_use(&cred, live->vol->fs->super) ?
			  NX_WRITER_ROOT : NX_WRITER_USER);
	err = defrag_file(live->vol, &cred, to_ext2(nodeid), &d);
	nx_reserve_writer(NX_WRITER_OWN);
	if (err) {
		reply_err(req, err);
		return;
	}
	memset(&q, 0, sizeof(q));
	q.status = (uint32_t)d.verdict;
	q.blocks = d.blocks;
	q.extents_before = d.extents_before;
	q.extents_after = d.extents_after;
	q.moved = d.moved;
	q.kept = d.kept;
	fuse_reply_ioctl(req, 0, &q, sizeof(q));
	if (d.moved)		/* st_blocks may have changed (tree blocks) */
		invalidate_attrs(live, nodeid);
}
