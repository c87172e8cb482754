/*
 * image_ops.c - every snapshot as a read-only image file (fuse_ops.h):
 * MNT/.snapshot-images/NAME is snapshot NAME as "nextfs export" writes
 * it (image.h), for loop mounts, e2fsck, cp --sparse, qemu-img and
 * changed-block backups while the volume is in use.  Where it lives and
 * why: docs/snapshots.md, "Snapshots as images".
 *
 * The session runs nx_fuse_image_ops: nx_fuse_snap_ops with the image
 * directory and its files in front of it.  Node ids: the directory is
 * NX_IMGDIR_NODEID, in the space of .snapshots; the image of snapshot ID
 * is ID << 32, in that snapshot's space under ext inode number 0, which
 * no view node has.  Nothing is counted for them in any node table: the
 * kernel's references need nothing kept but what an open keeps.
 *
 * An image's export (nx_imgsrc) is prepared at its first open - a scan
 * of the snapshot's inodes, which takes the volume lock only per block
 * read - and freed at its last release.  A read plans under the volume
 * lock, as a file read does, and splices the device ranges into the
 * reply after dropping it.  When the snapshot is deleted, the kernel is
 * told to drop the image's cached pages and name; later reads of a
 * descriptor still open fail with ESTALE.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/blkio.h"
#include "nextfs/file.h"
#include "nextfs/grow.h"
#include "nextfs/image.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/snapshot.h"
#include "fuse_internal.h"

/* One snapshot's image, once the kernel has heard of it. */
struct image {
	uint32_t id;
	char name[NX_NAME_MAX + 1];	/* to drop the kernel's entry */
	unsigned opens;
	int gone;			/* its snapshot was deleted */
	blk64_t blocks;			/* st_blocks, in fs blocks ... */
	int counted;			/* ... exact (an export was prepared) */
	int estimated;			/* ... or nx_imgsrc_estimate()'s */
	pthread_mutex_t build;		/* one preparation at a time */
	struct nx_imgsrc *src;		/* while open */
};

/* The images of a mount, sorted by id; under the volume lock. */
struct nx_fuse_images {
	struct image **v;
	size_t n, cap;
};

static struct nx_fuse *live_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The snapshot id of an image node, or 0. */
static uint32_t image_id(fuse_ino_t nodeid)
{
	uint64_t space = nodeid >> NX_NODE_SPACE_SHIFT;

	return (nodeid & NX_NODE_INO_MASK) == 0 && space &&
	       space != NX_SPACE_SNAPDIR ? (uint32_t)space : 0;
}

static fuse_ino_t image_node(uint32_t id)
{
	return (fuse_ino_t)id << NX_NODE_SPACE_SHIFT;
}

static int is_imgdir(fuse_ino_t nodeid)
{
	return nodeid == NX_IMGDIR_NODEID;
}

static int ours(fuse_ino_t nodeid)
{
	return is_imgdir(nodeid) || image_id(nodeid);
}

static int is_imgdir_name(fuse_ino_t parent, const char *name)
{
	return parent == FUSE_ROOT_ID && !strcmp(name, NX_IMGDIR_NAME);
}

/* ------------------------------------------------------------------ */
/* The registry (volume lock held)                                     */

static size_t find_slot(const struct nx_fuse_images *im, uint32_t id)
{
	size_t lo = 0, hi = im ? im->n : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (im->v[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct image *find_image(struct nx_fuse *live, uint32_t id)
{
	struct nx_fuse_images *im = live->images;
	size_t i = find_slot(im, id);

	return im && i < im->n && im->v[i]->id == id ? im->v[i] : NULL;
}

/* The image of snapshot INFO, made on first use. */
static struct image *get_image(struct nx_fuse *live,
			       const struct nx_snapinfo *info)
{
	struct nx_fuse_images *im = live->images;
	struct image *img = find_image(live, info->id);
	size_t pos;

	if (img)
		return img;
	if (!im && !(im = live->images = calloc(1, sizeof(*im))))
		return NULL;
	if (nx_grow((void **)&im->v, &im->cap, im->n, sizeof(*im->v), 8))
		return NULL;
	img = calloc(1, sizeof(*img));
	if (!img)
		return NULL;
	img->id = info->id;
	strcpy(img->name, info->name);
	pthread_mutex_init(&img->build, NULL);
	pos = find_slot(im, info->id);
	memmove(&im->v[pos + 1], &im->v[pos], (im->n - pos) * sizeof(*im->v));
	im->v[pos] = img;
	im->n++;
	return img;
}

static void free_image(struct image *img)
{
	nx_imgsrc_close(img->src);
	pthread_mutex_destroy(&img->build);
	free(img);
}

/* Snapshot ID as it is now: 0, or ENOENT once deleted (lock held). */
static errcode_t snapshot_of(struct nx_fuse *live, uint32_t id,
			     struct nx_snapinfo *info)
{
	if (nx_snap_peek(live->vol, nx_snap_seek_id(live->vol, id), info) ||
	    info->id != id)
		return ENOENT;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Attributes                                                          */

/* Owned like "/" and .snapshots; nobody creates anything in it. */
static void imgdir_stat(struct nx_fuse *live, struct stat *st)
{
	nx_fuse_snapdir_stat(live, st);
	st->st_ino = NX_IMGDIR_STINO;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
}

/*
 * An image: the whole volume as its size, the blocks that hold data as
 * st_blocks (exact once it was opened, estimated before), the take time
 * as its times.  Mode 0400, owned by whoever runs the daemon: it holds
 * every file of the snapshot whatever their permissions, as the device
 * does, so only root and the user who mounted the volume (who can read
 * the device) read it.  Volume lock held.
 */
static errcode_t image_stat(struct nx_fuse *live, uint32_t id,
			    struct stat *st)
{
	ext2_filsys fs = live->vol->fs;
	struct nx_snapinfo info;
	struct image *img;
	blk64_t blocks = 0;
	errcode_t err = snapshot_of(live, id, &info);

	if (err)
		return err;
	img = get_image(live, &info);
	if (img && (img->counted || img->estimated))
		blocks = img->blocks;
	else if (!nx_imgsrc_estimate(live->vol, id, &blocks) && img) {
		img->blocks = blocks;
		img->estimated = 1;
	}
	memset(st, 0, sizeof(*st));
	st->st_ino = nx_fuse_snap_st_ino(live, id, 0);
	st->st_mode = S_IFREG | 0400;
	st->st_nlink = 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_size = (off_t)(ext2fs_blocks_count(fs->super) * fs->blocksize);
	st->st_blocks = (blkcnt_t)(blocks * (fs->blocksize / 512));
	st->st_blksize = fs->blocksize;
	st->st_atim = st->st_mtim = st->st_ctim = info.taken;
	return 0;
}

static void reply_imgdir_entry(fuse_req_t req)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = NX_IMGDIR_NODEID;
	e.generation = nx_fuse_generation(live_of(req), 1);
	imgdir_stat(live_of(req), &e.attr);
	e.attr_timeout = live_of(req)->timeout;
	e.entry_timeout = live_of(req)->timeout;
	fuse_reply_entry(req, &e);
}

static void reply_image_entry(fuse_req_t req, uint32_t id)
{
	struct nx_fuse *live = live_of(req);
	struct fuse_entry_param e;
	errcode_t err;

	memset(&e, 0, sizeof(e));
	nx_volume_lock(live->vol);
	err = image_stat(live, id, &e.attr);
	nx_volume_unlock(live->vol);
	if (err) {
		fuse_reply_err(req, nx_errno(err));
		return;
	}
	e.ino = image_node(id);
	e.generation = nx_fuse_generation(live, 1);
	e.attr_timeout = live->timeout;
	e.entry_timeout = live->timeout;
	fuse_reply_entry(req, &e);
}

/* ------------------------------------------------------------------ */
/* Operations of the directory and the images                          */

static void img_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct nx_fuse *live = live_of(req);
	struct nx_snapinfo info;
	errcode_t err;

	if (image_id(parent)) {
		if (!strcmp(name, "."))	/* a file handle being decoded */
			reply_image_entry(req, image_id(parent));
		else
			fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (!strcmp(name, ".")) {
		reply_imgdir_entry(req);
		return;
	}
	if (!strcmp(name, "..")) {
		nx_fuse_snap_ops.lookup(req, FUSE_ROOT_ID, ".");
		return;
	}
	nx_volume_lock(live->vol);
	err = nx_snap_peek(live->vol, nx_snap_name_index(live->vol, name),
			   &info);
	nx_volume_unlock(live->vol);
	if (err)
		fuse_reply_err(req, ENOENT);
	else
		reply_image_entry(req, info.id);
}

static void img_getattr(fuse_req_t req, fuse_ino_t nodeid)
{
	struct nx_fuse *live = live_of(req);
	struct stat st;
	errcode_t err = 0;

	if (is_imgdir(nodeid)) {
		imgdir_stat(live, &st);
	} else {
		nx_volume_lock(live->vol);
		err = image_stat(live, image_id(nodeid), &st);
		nx_volume_unlock(live->vol);
	}
	if (err)
		fuse_reply_err(req, nx_errno(err) == ENOENT ? ESTALE :
			       nx_errno(err));
	else
		fuse_reply_attr(req, &st, live->timeout);
}

/* Root and the user who runs the daemon read images (image_stat). */
static int may_read_images(fuse_req_t req)
{
	uid_t uid = fuse_req_ctx(req)->uid;

	return uid == 0 || uid == getuid();
}

/* Prepare IMG's export if no open did yet (build lock, no volume lock). */
static errcode_t prepare(struct nx_fuse *live, struct image *img)
{
	struct nx_imgsrc *src = NULL;
	char msg[256] = "";
	errcode_t err = 0;
	int have;

	pthread_mutex_lock(&img->build);
	nx_volume_lock(live->vol);
	have = img->src != NULL;
	nx_volume_unlock(live->vol);
	if (!have) {
		err = nx_imgsrc_open_export_id(live->vol, img->id, &src, msg,
					       sizeof(msg));
		if (err && nx_errno(err) != ESTALE && err != ENOENT)
			fuse_log(FUSE_LOG_ERR, "image of snapshot %u: %s\n",
				 img->id, msg);
		if (!err) {
			nx_volume_lock(live->vol);
			img->src = src;
			img->blocks = nx_imgsrc_data_blocks(src);
			img->counted = 1;
			nx_volume_unlock(live->vol);
		}
	}
	pthread_mutex_unlock(&img->build);
	return err == ENOENT ? ESTALE : err;
}

/* One open less; the last one frees the export (the lock is not held). */
static void image_put(struct nx_fuse *live, struct image *img)
{
	struct nx_imgsrc *src = NULL;

	nx_volume_lock(live->vol);
	if (!--img->opens) {
		src = img->src;
		img->src = NULL;
	}
	nx_volume_unlock(live->vol);
	nx_imgsrc_close(src);
}

static void img_open(fuse_req_t req, fuse_ino_t nodeid,
		     struct fuse_file_info *fi)
{
	struct nx_fuse *live = live_of(req);
	struct nx_snapinfo info;
	struct image *img = NULL;
	blk64_t before = 0;
	errcode_t err = 0;

	if (is_imgdir(nodeid)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (!may_read_images(req)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	nx_volume_lock(live->vol);
	err = snapshot_of(live, image_id(nodeid), &info);
	if (!err && !(img = get_image(live, &info)))
		err = ENOMEM;
	if (!err) {
		img->opens++;
		before = img->blocks;
	}
	nx_volume_unlock(live->vol);
	if (!err) {
		err = prepare(live, img);
		if (err)
			image_put(live, img);
	}
	if (err) {
		fuse_reply_err(req, err == ENOENT ? ESTALE : nx_errno(err));
		return;
	}
	fi->fh = (uintptr_t)img;
	/* A snapshot never changes: its pages stay valid until deleted. */
	fi->keep_cache = 1;
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0) {
		image_put(live, img);
		return;
	}
	/* st_blocks was an estimate: du should see the count from now. */
	if (before != img->blocks)
		invalidate_attrs(live, nodeid);
}

static void img_release(fuse_req_t req, fuse_ino_t nodeid,
			struct fuse_file_info *fi)
{
	if (fi->fh)
		image_put(live_of(req), (struct image *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void img_read(fuse_req_t req, fuse_ino_t nodeid, size_t size,
		     off_t off, struct fuse_file_info *fi)
{
	struct nx_fuse *live = live_of(req);
	struct image *img = (struct image *)(uintptr_t)fi->fh;
	struct nx_file_rd rd;
	char *buf = NULL;
	uint64_t total;
	errcode_t err;

	if (!img) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (posix_memalign((void **)&buf, NX_BLKIO_DIRECT_ALIGN,
			   size ? size : 1)) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	nx_volume_lock(live->vol);
	total = nx_imgsrc_size(img->src);
	if ((uint64_t)off >= total)
		size = 0;
	else if (size > total - (uint64_t)off)
		size = total - (uint64_t)off;
	err = nx_imgsrc_plan(img->src, buf, size, (uint64_t)off, &rd);
	if (err) {
		nx_volume_unlock(live->vol);
		fuse_reply_err(req, nx_errno(err));
		goto out;
	}
	nx_volume_unlock_sharing(live->vol);
	nx_fuse_reply_planned(req, buf, size, &rd);
out:
	free(buf);
}

static void img_lseek(fuse_req_t req, fuse_ino_t nodeid, off_t off,
		      int whence, struct fuse_file_info *fi)
{
	struct nx_fuse *live = live_of(req);
	struct image *img = (struct image *)(uintptr_t)fi->fh;
	uint64_t result = 0;
	errcode_t err;

	if (!img || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	nx_volume_lock(live->vol);
	err = nx_imgsrc_seek(img->src, (uint64_t)off, whence, &result);
	nx_volume_unlock(live->vol);
	if (err)
		fuse_reply_err(req, nx_errno(err));
	else
		fuse_reply_lseek(req, (off_t)result);
}

/*
 * NX_IOC_IMG_CHANGES (nxioctl.h): what turns the export of old_id into
 * this image.  Both must be open (the tool holds them), so that their
 * exports are prepared.
 */
static void img_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		      void *arg, struct fuse_file_info *fi, unsigned flags,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct nx_fuse *live = live_of(req);
	struct image *img = fi ? (struct image *)(uintptr_t)fi->fh : NULL;
	struct nx_ioc_img_changes *q;
	struct nx_img_run *runs;
	struct image *old;
	size_t n = 0, i, max;
	blk64_t next = 0;
	errcode_t err;

	if (cmd != NX_IOC_IMG_CHANGES || !img ||
	    (flags & FUSE_IOCTL_UNRESTRICTED)) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (in_bufsz < sizeof(*q) || out_bufsz < sizeof(*q)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	q = malloc(sizeof(*q));
	max = ((const struct nx_ioc_img_changes *)in_buf)->max;
	if (!max || max > NX_IOC_IMG_RUNS)
		max = NX_IOC_IMG_RUNS;
	runs = calloc(max, sizeof(*runs));
	if (!q || !runs) {
		free(q);
		free(runs);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(q, in_buf, sizeof(*q));
	nx_volume_lock(live->vol);
	old = find_image(live, q->old_id);
	if (!old || !old->src)
		err = EBADF;	/* open it first */
	else
		err = nx_imgsrc_changes(old->src, img->src, q->start, runs,
					max, &n, &next);
	nx_volume_unlock(live->vol);
	if (err) {
		fuse_reply_err(req, nx_errno(err));
	} else {
		for (i = 0; i < n; i++) {
			q->run[i].blk = runs[i].blk;
			q->run[i].len = (uint32_t)runs[i].len;
			q->run[i].kind = (uint32_t)runs[i].kind;
		}
		q->count = (uint32_t)n;
		q->next = next;
		fuse_reply_ioctl(req, 0, q, sizeof(*q));
	}
	free(runs);
	free(q);
}

/* The directory's listing: one image per snapshot, under its name. */
static void imgdir_readdir(fuse_req_t req, size_t size, off_t off, int plus)
{
	static const struct nx_snap_listing images = {
		NX_IMGDIR_STINO, S_IFREG, 0, 0
	};

	nx_fuse_list_snapshots(req, size, off, plus, &images);
}

/* ------------------------------------------------------------------ */
/* Telling the kernel                                                  */

struct gone_image {
	uint32_t id;
	char name[NX_NAME_MAX + 1];
};

void nx_fuse_images_changed(struct nx_fuse *live)
{
	struct nx_fuse_images *im = live->images;
	struct gone_image *gone = NULL;
	size_t i, j, ngone = 0;

	if (live->se)
		fuse_lowlevel_notify_inval_inode(live->se, NX_IMGDIR_NODEID,
						 -1, 0);
	if (!im)
		return;
	nx_volume_lock(live->vol);
	gone = calloc(im->n ? im->n : 1, sizeof(*gone));
	for (i = j = 0; i < im->n; i++) {
		struct image *img = im->v[i];

		if (!img->gone &&
		    nx_snap_find_id(live->vol, img->id, NULL) != 0) {
			img->gone = 1;
			if (gone) {
				gone[ngone].id = img->id;
				strcpy(gone[ngone++].name, img->name);
			}
		}
		if (img->gone && !img->opens)
			free_image(img);
		else
			im->v[j++] = img;
	}
	im->n = j;
	nx_volume_unlock(live->vol);
	/* Its pages, attributes and name go; readers still holding it open
	 * get ESTALE from us (nx_imgsrc_plan). */
	for (i = 0; i < ngone && live->se; i++) {
		fuse_lowlevel_notify_inval_inode(live->se,
						 image_node(gone[i].id), 0, 0);
		fuse_lowlevel_notify_inval_entry(live->se, NX_IMGDIR_NODEID,
						 gone[i].name,
						 strlen(gone[i].name));
	}
	free(gone);
}

static void free_images(struct nx_fuse *live)
{
	struct nx_fuse_images *im = live->images;
	size_t i;

	if (!im)
		return;
	for (i = 0; i < im->n; i++)
		free_image(im->v[i]);
	free(im->v);
	free(im);
	live->images = NULL;
}

/* ------------------------------------------------------------------ */
/* The operations the session runs                                    */

static const struct fuse_lowlevel_ops *const inner = &nx_fuse_snap_ops;

/* OURS_CODE for the image directory and the images, else the inner op. */
#define IMAGES_OR(nodeid, ours_code, inner_call)			\
	do {								\
		if (ours(nodeid))					\
			ours_code;					\
		else							\
			inner_call;					\
	} while (0)

static void i_init(void *userdata, struct fuse_conn_info *conn)
{
	inner->init(userdata, conn);
}

static void i_destroy(void *userdata)
{
	struct nx_fuse *live = userdata;

	if (live->vol) {
		nx_volume_lock(live->vol);
		free_images(live);
		nx_volume_unlock(live->vol);
	}
	inner->destroy(userdata);
}

static void i_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_imgdir_name(parent, name))
		reply_imgdir_entry(req);
	else if (ours(parent))
		img_lookup(req, parent, name);
	else
		inner->lookup(req, parent, name);
}

static void i_forget(fuse_req_t req, fuse_ino_t nodeid, uint64_t nlookup)
{
	IMAGES_OR(nodeid, fuse_reply_none(req),
		  inner->forget(req, nodeid, nlookup));
}

static void i_forget_multi(fuse_req_t req, size_t count,
			   struct fuse_forget_data *forgets)
{
	struct fuse_forget_data *rest = malloc((count ? count : 1) *
					       sizeof(*rest));
	size_t i, n = 0;

	if (!rest) {		/* references kept until unmount: harmless */
		fuse_reply_none(req);
		return;
	}
	for (i = 0; i < count; i++)
		if (!ours(forgets[i].ino))
			rest[n++] = forgets[i];
	inner->forget_multi(req, n, rest);
	free(rest);
}

static void i_getattr(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, img_getattr(req, nodeid),
		  inner->getattr(req, nodeid, fi));
}

static void i_setattr(fuse_req_t req, fuse_ino_t nodeid, struct stat *attr,
		      int to_set, struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EROFS),
		  inner->setattr(req, nodeid, attr, to_set, fi));
}

static void i_readlink(fuse_req_t req, fuse_ino_t nodeid)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EINVAL),
		  inner->readlink(req, nodeid));
}

/*
 * A new name: ".snapshot-images" in "/" is taken (as .snapshots is),
 * and nothing is made in the image directory.
 */
static int refuse_new_name(fuse_req_t req, fuse_ino_t parent,
			   const char *name)
{
	if (is_imgdir_name(parent, name))
		fuse_reply_err(req, EEXIST);
	else if (ours(parent))
		fuse_reply_err(req, EROFS);
	else
		return 0;
	return 1;
}

static void i_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, dev_t rdev)
{
	if (!refuse_new_name(req, parent, name))
		inner->mknod(req, parent, name, mode, rdev);
}

static void i_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode)
{
	if (!refuse_new_name(req, parent, name))
		inner->mkdir(req, parent, name, mode);
}

static void i_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		      const char *name)
{
	if (!refuse_new_name(req, parent, name))
		inner->symlink(req, link, parent, name);
}

static void i_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, struct fuse_file_info *fi)
{
	if (!refuse_new_name(req, parent, name))
		inner->create(req, parent, name, mode, fi);
}

static void i_link(fuse_req_t req, fuse_ino_t nodeid, fuse_ino_t newparent,
		   const char *newname)
{
	if (ours(nodeid))
		fuse_reply_err(req, EXDEV);
	else if (!refuse_new_name(req, newparent, newname))
		inner->link(req, nodeid, newparent, newname);
}

static void i_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_imgdir_name(parent, name))
		fuse_reply_err(req, EISDIR);
	else if (ours(parent))
		fuse_reply_err(req, EROFS);
	else
		inner->unlink(req, parent, name);
}

static void i_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_imgdir_name(parent, name))
		fuse_reply_err(req, EBUSY);
	else if (ours(parent))
		fuse_reply_err(req, EROFS);
	else
		inner->rmdir(req, parent, name);
}

static void i_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		     fuse_ino_t newparent, const char *newname,
		     unsigned int flags)
{
	if (is_imgdir_name(parent, name) || is_imgdir_name(newparent, newname))
		fuse_reply_err(req, EBUSY);
	else if (ours(parent) || ours(newparent))
		fuse_reply_err(req, EROFS);
	else
		inner->rename(req, parent, name, newparent, newname, flags);
}

static void i_open(fuse_req_t req, fuse_ino_t nodeid,
		   struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, img_open(req, nodeid, fi),
		  inner->open(req, nodeid, fi));
}

static void i_read(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, img_read(req, nodeid, size, off, fi),
		  inner->read(req, nodeid, size, off, fi));
}

static void i_write(fuse_req_t req, fuse_ino_t nodeid, const char *buf,
		    size_t size, off_t off, struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EROFS),
		  inner->write(req, nodeid, buf, size, off, fi));
}

static void i_flush(fuse_req_t req, fuse_ino_t nodeid,
		    struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, 0),
		  inner->flush(req, nodeid, fi));
}

static void i_release(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, img_release(req, nodeid, fi),
		  inner->release(req, nodeid, fi));
}

static void i_fsync(fuse_req_t req, fuse_ino_t nodeid, int datasync,
		    struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, 0),
		  inner->fsync(req, nodeid, datasync, fi));
}

static void i_opendir(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	if (image_id(nodeid)) {
		fuse_reply_err(req, ENOTDIR);
	} else if (is_imgdir(nodeid)) {
		fi->fh = 0;
		fuse_reply_open(req, fi);
	} else {
		inner->opendir(req, nodeid, fi);
	}
}

static void i_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size,
		      off_t off, struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, imgdir_readdir(req, size, off, 0),
		  inner->readdir(req, nodeid, size, off, fi));
}

static void i_readdirplus(fuse_req_t req, fuse_ino_t nodeid, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, imgdir_readdir(req, size, off, 1),
		  inner->readdirplus(req, nodeid, size, off, fi));
}

static void i_releasedir(fuse_req_t req, fuse_ino_t nodeid,
			 struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, 0),
		  inner->releasedir(req, nodeid, fi));
}

static void i_fsyncdir(fuse_req_t req, fuse_ino_t nodeid, int datasync,
		       struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, 0),
		  inner->fsyncdir(req, nodeid, datasync, fi));
}

static void i_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		       const char *value, size_t size, int flags)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EROFS),
		  inner->setxattr(req, nodeid, name, value, size, flags));
}

static void i_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		       size_t size)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, ENODATA),
		  inner->getxattr(req, nodeid, name, size));
}

static void i_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size)
{
	if (!ours(nodeid))
		inner->listxattr(req, nodeid, size);
	else if (!size)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

static void i_removexattr(fuse_req_t req, fuse_ino_t nodeid,
			  const char *name)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EROFS),
		  inner->removexattr(req, nodeid, name));
}

static void i_access(fuse_req_t req, fuse_ino_t nodeid, int mask)
{
	if (!ours(nodeid))
		inner->access(req, nodeid, mask);
	else if (mask & W_OK)
		fuse_reply_err(req, EROFS);
	else if (image_id(nodeid) && (mask & R_OK) && !may_read_images(req))
		fuse_reply_err(req, EACCES);
	else
		fuse_reply_err(req, 0);
}

static void i_fallocate(fuse_req_t req, fuse_ino_t nodeid, int mode,
			off_t offset, off_t length, struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, fuse_reply_err(req, EROFS),
		  inner->fallocate(req, nodeid, mode, offset, length, fi));
}

static void i_lseek(fuse_req_t req, fuse_ino_t nodeid, off_t off, int whence,
		    struct fuse_file_info *fi)
{
	IMAGES_OR(nodeid, img_lseek(req, nodeid, off, whence, fi),
		  inner->lseek(req, nodeid, off, whence, fi));
}

static void i_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    void *arg, struct fuse_file_info *fi, unsigned flags,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	if (image_id(nodeid))
		img_ioctl(req, nodeid, cmd, arg, fi, flags, in_buf, in_bufsz,
			  out_bufsz);
	else if (is_imgdir(nodeid))
		fuse_reply_err(req, ENOTTY);
	else
		inner->ioctl(req, nodeid, cmd, arg, fi, flags, in_buf,
			     in_bufsz, out_bufsz);
}

static void i_statfs(fuse_req_t req, fuse_ino_t nodeid)
{
	inner->statfs(req, ours(nodeid) ? FUSE_ROOT_ID : nodeid);
}

const struct fuse_lowlevel_ops nx_fuse_image_ops = {
	.init		= i_init,
	.destroy	= i_destroy,
	.lookup		= i_lookup,
	.forget		= i_forget,
	.forget_multi	= i_forget_multi,
	.getattr	= i_getattr,
	.setattr	= i_setattr,
	.readlink	= i_readlink,
	.mknod		= i_mknod,
	.mkdir		= i_mkdir,
	.unlink		= i_unlink,
	.rmdir		= i_rmdir,
	.symlink	= i_symlink,
	.rename		= i_rename,
	.link		= i_link,
	.open		= i_open,
	.read		= i_read,
	.write		= i_write,
	.flush		= i_flush,
	.release	= i_release,
	.fsync		= i_fsync,
	.opendir	= i_opendir,
	.readdir	= i_readdir,
	.readdirplus	= i_readdirplus,
	.releasedir	= i_releasedir,
	.fsyncdir	= i_fsyncdir,
	.statfs		= i_statfs,
	.setxattr	= i_setxattr,
	.getxattr	= i_getxattr,
	.listxattr	= i_listxattr,
	.removexattr	= i_removexattr,
	.access		= i_access,
	.create		= i_create,
	.fallocate	= i_fallocate,
	.lseek		= i_lseek,
	.ioctl		= i_ioctl,
};
