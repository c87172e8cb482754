/*
 * snap_ops.c - the snapshot views in the mounted tree (see fuse_ops.h).
 *
 * The session runs nx_fuse_snap_ops: a copy of nx_fuse_ops in which every
 * operation first looks at the node id.  Live nodes (space 0) go straight
 * to nx_fuse_ops, except names that would touch "/.snapshots".  Nodes of a
 * snapshot (space = snapshot id) run the same nx_fuse_ops code with
 * nx_fuse_current pointing at that snapshot's view; operations that would
 * change it fail with EROFS here, before reaching it.  The virtual
 * directory .snapshots itself is served here: lookup and readdir list the
 * snapshots, mkdir takes one, rmdir deletes one.
 */
#include "nextfs/fuse_ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nextfs/dir.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/reserve.h"
#include "nextfs/snapshot.h"
#include "fuse_internal.h"

#define SNAPDIR_NAME	NX_SNAPDIR_NAME

__thread struct nx_fuse *nx_fuse_current;

static struct nx_fuse *live_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static uint64_t space_of(fuse_ino_t nodeid)
{
	return nodeid >> NX_NODE_SPACE_SHIFT;
}

static int is_snapdir_name(fuse_ino_t parent, const char *name)
{
	return parent == FUSE_ROOT_ID && !strcmp(name, SNAPDIR_NAME);
}

int nx_fuse_hidden(ext2_ino_t dir, const char *name, size_t namelen)
{
	if (dir != EXT2_ROOT_INO)
		return 0;
	/* The live root's image directory takes that name (image_ops.c). */
	if (!nx_fuse_current && namelen == strlen(NX_IMGDIR_NAME) &&
	    !memcmp(name, NX_IMGDIR_NAME, namelen))
		return 1;
	return namelen == strlen(SNAPDIR_NAME) &&
	       !memcmp(name, SNAPDIR_NAME, namelen);
}

void nx_fuse_fix_stat(const struct nx_fuse *fs, ext2_ino_t ino,
		      struct stat *st)
{
	int hidden;

	nx_idmap_stat(&fs->idmap, st);
	st->st_ino = nx_fuse_st_ino(fs, ino);
	if (ino != EXT2_ROOT_INO)
		return;
	hidden = fs->space ? fs->hides_snapdir :
			     nx_snap_dir_ino(fs->vol) != 0;
	/* The hidden directory is not a subdirectory anyone can see. */
	if (hidden && st->st_nlink > 2)
		st->st_nlink--;
	if (fs->space)
		st->st_mtim = fs->root_mtime;
}

/* ------------------------------------------------------------------ */
/* Views                                                               */

/* Where the inode numbers of snapshot ID start (fuse_ops.h). */
static uint64_t view_ino_base(const struct nx_fuse *live, uint32_t id)
{
	if (live->ino32)
		return (uint64_t)id * live->vol->fs->super->s_inodes_count;
	return (uint64_t)id << 32;
}

static uint32_t view_id(const struct nx_fuse *v)
{
	return (uint32_t)(v->space >> NX_NODE_SPACE_SHIFT);
}

/*
 * Index of the view of snapshot ID in live->views (kept sorted by id),
 * or where it would go.  Every request in a snapshot asks: a binary
 * search, so that 1024 browsed snapshots cost what a few do.
 */
static size_t find_view(const struct nx_fuse *live, uint32_t id)
{
	size_t lo = 0, hi = live->nviews;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (view_id(live->views[mid]) < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The nx_fuse of snapshot ID, created on first use.  Live lock held. */
static errcode_t view_fs(struct nx_fuse *live, uint32_t id,
			 struct nx_fuse **ret)
{
	size_t pos = find_view(live, id);
	struct nx_snapinfo info;
	struct nx_fuse *v;
	struct nx_volume *view;
	errcode_t err;
	int idx;

	idx = nx_snap_seek_id(live->vol, id);
	/* Deleted since (or never there): ESTALE, its view is gone. */
	if (nx_snap_peek(live->vol, idx, &info) || info.id != id)
		return ESTALE;
	if (pos < live->nviews && view_id(live->views[pos]) == id) {
		*ret = live->views[pos];
		return 0;
	}
	err = nx_snap_view_get(live->vol, id, &view);
	if (err)
		return err;
	err = nx_grow((void **)&live->views, &live->capviews, live->nviews,
		      sizeof(*live->views), 8);
	v = calloc(1, sizeof(*v));
	if (err || !v) {
		free(v);
		return ENOMEM;
	}
	v->nodes = nx_nodes_new();
	if (!v->nodes) {
		free(v);
		return ENOMEM;
	}
	v->vol = view;
	v->se = live->se;
	v->dont_mask = live->dont_mask;
	v->timeout = live->timeout;
	v->idmap = live->idmap;
	v->gen_salt = live->gen_salt;
	v->space = (fuse_ino_t)id << NX_NODE_SPACE_SHIFT;
	v->ino_base = view_ino_base(live, id);
	v->ino32 = live->ino32;
	v->root_mtime = info.taken;
	/*
	 * Every snapshot nextfs takes holds /.snapshots (made before the
	 * first take, removed after the last delete): no need to read the
	 * view's root directory to find out, which a listing of 1024
	 * snapshots would do 1024 times.
	 */
	v->hides_snapdir = nx_snap_dir_ino(live->vol) != 0;
	memmove(&live->views[pos + 1], &live->views[pos],
		(live->nviews - pos) * sizeof(*live->views));
	live->views[pos] = v;
	live->nviews++;
	*ret = v;
	return 0;
}

static void free_views(struct nx_fuse *live)
{
	size_t i;

	for (i = 0; i < live->nviews; i++) {
		nx_nodes_free(live->views[i]->nodes);
		free(live->views[i]);
	}
	free(live->views);
	live->views = NULL;
	live->nviews = live->capviews = 0;
}

/*
 * Point nx_fuse_current at the view serving NODEID, or reply with an
 * error and return 0.
 */
static int enter_view(fuse_req_t req, fuse_ino_t nodeid)
{
	struct nx_fuse *live = live_fs(req), *v = NULL;
	errcode_t err;

	nx_volume_lock(live->vol);
	err = view_fs(live, (uint32_t)space_of(nodeid), &v);
	nx_volume_unlock(live->vol);
	if (err) {
		fuse_reply_err(req, nx_errno(err));
		return 0;
	}
	nx_fuse_current = v;
	return 1;
}

static void leave_view(void)
{
	nx_fuse_current = NULL;
}

/* ------------------------------------------------------------------ */
/* The virtual .snapshots directory                                    */

/*
 * .snapshots: owned like "/" (whoever owns the volume's root takes
 * snapshots), one link per snapshot, the newest take as mtime.  Asked
 * whenever the kernel's copy expires, on the way to any snapshot: no I/O
 * beyond the root inode.  With -o snapshot_group its group is that one,
 * with write permission: the kernel (default_permissions) then lets the
 * members mkdir and rmdir in it, as may_manage_snapshots() does.
 */
static void snapdir_stat(struct nx_fuse *live, struct stat *st)
{
	struct nx_snapinfo newest;
	int n;

	memset(st, 0, sizeof(*st));
	nx_volume_lock(live->vol);
	nx_getattr(live->vol, EXT2_ROOT_INO, st);
	n = nx_snap_count(live->vol);
	if (n && nx_snap_peek(live->vol, n - 1, &newest) == 0)
		st->st_mtim = newest.taken;
	nx_volume_unlock(live->vol);
	nx_idmap_stat(&live->idmap, st);
	/* Owned like "/": whoever owns the volume's root takes snapshots. */
	st->st_ino = NX_SNAPDIR_STINO;
	st->st_mode = S_IFDIR | 0755;
	if (live->snap_group_set) {
		st->st_gid = live->snap_group;
		st->st_mode = S_IFDIR | 0775;
	}
	st->st_nlink = 2 + n;
	st->st_size = 0;
	st->st_blocks = 0;
	st->st_ctim = st->st_mtim;
}

void nx_fuse_snapdir_stat(struct nx_fuse *live, struct stat *st)
{
	snapdir_stat(live, st);
}

static void reply_snapdir_entry(fuse_req_t req)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = NX_SNAPDIR_NODEID;
	e.generation = nx_fuse_generation(live_fs(req), 1);
	snapdir_stat(live_fs(req), &e.attr);
	/*
	 * Cached like any attributes: every path through .snapshots would
	 * ask for them again otherwise (ls -la of 1024 snapshots: 3000
	 * requests more).  What changes them - a take or delete, a change
	 * of "/" - invalidates them (snapdir_changed).
	 */
	e.attr_timeout = live_fs(req)->timeout;
	e.entry_timeout = live_fs(req)->timeout;
	fuse_reply_entry(req, &e);
}

/* Its link count, mtime or owner changed: the kernel must ask again. */
static void snapdir_changed(struct nx_fuse *live)
{
	invalidate_attrs(live, NX_SNAPDIR_NODEID);
	nx_fuse_images_changed(live);
}

/* Entry for the root of snapshot NAME, counted in its view's node table. */
static void reply_snapshot_root(fuse_req_t req, const char *name)
{
	struct nx_fuse *live = live_fs(req);
	struct nx_snapinfo info;
	errcode_t err;

	nx_volume_lock(live->vol);
	err = nx_snap_peek(live->vol, nx_snap_name_index(live->vol, name),
			   &info);
	nx_volume_unlock(live->vol);
	if (err) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!enter_view(req, ((fuse_ino_t)info.id << NX_NODE_SPACE_SHIFT) |
			     FUSE_ROOT_ID))
		return;
	/* "." of a node looks the node itself up (export support). */
	nx_fuse_ops.lookup(req, ((fuse_ino_t)info.id << NX_NODE_SPACE_SHIFT) |
			   FUSE_ROOT_ID, ".");
	leave_view();
}

errcode_t nx_fuse_snap_take(struct nx_fuse *live, const char *name)
{
	errcode_t err;

	nx_volume_lock(live->vol);
	err = nx_snap_take(live->vol, name, NULL);
	nx_volume_unlock(live->vol);
	return err;
}

errcode_t nx_fuse_snap_delete(struct nx_fuse *live, const char *name)
{
	errcode_t err;

	nx_volume_lock(live->vol);
	err = nx_snap_delete(live->vol, name);
	nx_volume_unlock(live->vol);
	if (!err)
		nx_fuse_reclaim_kick(live);	/* the hand-over, in slices */
	return err;
}

void nx_fuse_snapdir_changed(struct nx_fuse *live, const char *gone)
{
	snapdir_changed(live);
	/* Deleted behind the kernel's back: drop its cached entry. */
	if (gone && live->se)
		fuse_lowlevel_notify_inval_entry(live->se, NX_SNAPDIR_NODEID,
						 gone, strlen(gone));
}

/*
 * Who takes and deletes snapshots (docs/security.md): root (after
 * -o fakeroot's mapping), the owner of the volume's root directory, and
 * with -o snapshot_group the members of that group.  The kernel checks
 * the same through the mode .snapshots shows (snapdir_stat); the daemon
 * checks again, so that no other way in (another mount option, a kernel
 * without default_permissions) can skip it.
 */
static errcode_t may_manage_snapshots(fuse_req_t req)
{
	struct nx_fuse *live = live_fs(req);
	struct ext2_inode_large root;
	struct nx_cred cred;
	errcode_t err;

	get_cred(req, &cred);
	if (nx_cred_is_root(&cred))
		return 0;
	if (live->snap_group_set &&
	    nx_cred_in_group(&cred, nx_idmap_gid(&live->idmap,
						 live->snap_group)))
		return 0;
	nx_volume_lock(live->vol);
	err = nx_inode_read(live->vol, EXT2_ROOT_INO, &root);
	nx_volume_unlock(live->vol);
	if (err)
		return err;
	return nx_perm_is_owner(&cred, (const struct ext2_inode *)&root) ?
	       0 : EACCES;
}

static void snapdir_mkdir(fuse_req_t req, const char *name)
{
	struct nx_fuse *live = live_fs(req);
	errcode_t err = may_manage_snapshots(req);

	if (!err)
		err = nx_fuse_snap_take(live, name);

	if (err) {
		fuse_reply_err(req, nx_errno(err));
		return;
	}
	reply_snapshot_root(req, name);
	snapdir_changed(live);
}

static void snapdir_rmdir(fuse_req_t req, const char *name)
{
	struct nx_fuse *live = live_fs(req);
	errcode_t err = may_manage_snapshots(req);

	if (!err)
		err = nx_fuse_snap_delete(live, name);

	fuse_reply_err(req, nx_errno(err));
	if (!err)
		snapdir_changed(live);
}

/* .snapshots has no extended attributes (the CLI lists through ioctls). */
static void snapdir_getxattr(fuse_req_t req, const char *name, size_t size)
{
	fuse_reply_err(req, ENODATA);
}

static void snapdir_listxattr(fuse_req_t req, size_t size)
{
	if (!size)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

/*
 * Cookies: 1 and 2 after "." and "..", then 2 + id after the snapshot
 * with that id.  Ids grow from older to newer snapshots, so the listing
 * is oldest first and resumes after the last snapshot it returned even
 * when snapshots are taken or deleted between two calls (an index would
 * skip or repeat names then).  d_ino is what stat() of each entry says.
 * Entries carry no attributes in readdirplus (node id 0): the kernel
 * then just lists the name and looks it up on use.
 */
#define SNAPDIR_COOKIE(id)	((off_t)(id) + 2)

/* One entry into BUF; 0 when it does not fit. */
static size_t snapdir_entry(fuse_req_t req, int plus, char *buf, size_t room,
			    const char *name, mode_t mode, uint64_t ino,
			    off_t next)
{
	struct fuse_entry_param e;
	size_t len;

	memset(&e, 0, sizeof(e));
	e.attr.st_mode = mode;
	e.attr.st_ino = ino;
	len = plus ? fuse_add_direntry_plus(req, buf, room, name, &e, next) :
		     fuse_add_direntry(req, buf, room, name, &e.attr, next);
	return len > room ? 0 : len;
}

uint64_t nx_fuse_snap_st_ino(const struct nx_fuse *live, uint32_t id,
			     ext2_ino_t ino)
{
	struct nx_fuse view;

	/* As the view numbers it, without opening the view. */
	memset(&view, 0, sizeof(view));
	view.ino32 = live->ino32;
	view.ino_base = view_ino_base(live, id);
	return nx_fuse_st_ino(&view, ino);
}

ext2_ino_t nx_fuse_ext_ino(const struct nx_fuse *live, uint32_t id,
			   uint64_t st_ino)
{
	uint64_t ino = st_ino - (id ? view_ino_base(live, id) : live->ino_base);

	if (live->ino32)
		ino &= 0xffffffffULL;
	if (!ino || ino > live->vol->fs->super->s_inodes_count)
		return 0;
	return (ext2_ino_t)ino;
}

void nx_fuse_list_snapshots(fuse_req_t req, size_t size, off_t off, int plus,
			    const struct nx_snap_listing *how)
{
	struct nx_fuse *live = live_fs(req);
	char *buf = malloc(size ? size : 1);
	struct nx_snapinfo info;
	size_t used = 0, len = 1;
	int i;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	nx_volume_lock(live->vol);
	/* "ls -l" looks up every entry next: one batch of reads, not N. */
	if (off < 1 && how->prefetch)
		nx_snap_prefetch_views(live->vol);
	if (off < 1 && len)
		used += len = snapdir_entry(req, plus, buf + used, size - used,
					    ".", S_IFDIR, how->dot_ino, 1);
	if (off < 2 && len)
		used += len = snapdir_entry(req, plus, buf + used, size - used,
					    "..", S_IFDIR,
					    nx_fuse_st_ino(live,
							   EXT2_ROOT_INO), 2);
	i = off < 2 ? 0 : nx_snap_seek_id(live->vol, (uint32_t)(off - 1));
	for (; len && nx_snap_peek(live->vol, i, &info) == 0; i++)
		used += len = snapdir_entry(req, plus, buf + used, size - used,
					    info.name, how->mode,
					    nx_fuse_snap_st_ino(live, info.id,
								how->ino),
					    SNAPDIR_COOKIE(info.id));
	nx_volume_unlock(live->vol);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void snapdir_readdir(fuse_req_t req, size_t size, off_t off, int plus)
{
	static const struct nx_snap_listing roots = {
		NX_SNAPDIR_STINO, S_IFDIR, EXT2_ROOT_INO, 1
	};

	nx_fuse_list_snapshots(req, size, off, plus, &roots);
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */

/* Runs OP_CALL for NODEID in whatever space it belongs to. */
#define DISPATCH(req, nodeid, snapdir_code, op_call)			\
	do {								\
		uint64_t sp_ = space_of(nodeid);			\
		if (sp_ == 0) {						\
			op_call;					\
		} else if (sp_ == NX_SPACE_SNAPDIR) {			\
			snapdir_code;					\
		} else if (enter_view(req, nodeid)) {			\
			op_call;					\
			leave_view();					\
		}							\
	} while (0)

/*
 * The writer REQ comes from: may it use the root-reserved blocks?  Groups
 * are read (from /proc) only when a reserve group makes them matter.
 * Then, while a snapshot is active: may it start a change of kind CHANGE
 * at all (reserve.h)?
 */
static errcode_t writer_begin(fuse_req_t req, enum nx_change change)
{
	struct nx_volume *vol = live_fs(req)->vol;
	struct ext2_super_block *sb = vol->fs->super;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct nx_cred cred;
	errcode_t err;

	if (ctx->uid == 0 || ctx->uid == sb->s_def_resuid ||
	    !sb->s_def_resgid || !ext2fs_r_blocks_count(sb)) {
		memset(&cred, 0, sizeof(cred));
		cred.uid = ctx->uid;
		cred.gid = ctx->gid;
	} else {
		get_cred(req, &cred);
	}
	nx_reserve_writer(nx_reserve_may_use(&cred, sb) ? NX_WRITER_ROOT :
			  NX_WRITER_USER);
	nx_volume_lock(vol);
	err = nx_reserve_may_change(vol, change);
	nx_volume_unlock(vol);
	return err;
}

/*
 * Changing operations: EROFS in a view, EPERM in .snapshots; live ones
 * allocate as their writer may (reserve.h).
 */
#define DISPATCH_CHANGE_AS(req, nodeid, change, op_call)		\
	do {								\
		uint64_t sp_ = space_of(nodeid);			\
		if (sp_ == 0) {						\
			errcode_t e_ = writer_begin(req, change);	\
			if (e_)						\
				fuse_reply_err(req, nx_errno(e_));	\
			else						\
				op_call;				\
			nx_reserve_writer(NX_WRITER_OWN);		\
		} else {						\
			fuse_reply_err(req, sp_ == NX_SPACE_SNAPDIR ?	\
				       EPERM : EROFS);			\
		}							\
	} while (0)
#define DISPATCH_CHANGE(req, nodeid, op_call)				\
	DISPATCH_CHANGE_AS(req, nodeid, NX_CHANGE_ANY, op_call)

static void s_init(void *userdata, struct fuse_conn_info *conn)
{
	nx_fuse_ops.init(userdata, conn);
}

static void s_destroy(void *userdata)
{
	struct nx_fuse *live = userdata;

	if (live->vol) {
		nx_volume_lock(live->vol);
		free_views(live);
		nx_volume_unlock(live->vol);
	}
	nx_fuse_ops.destroy(userdata);
}

/*
 * "." and ".." where no ext directory answers them.  Only the kernel's
 * export code asks (decoding a file handle: fuse_get_dentry looks the
 * node up by "." when it no longer has it, fuse_get_parent asks ".."
 * to reconnect a directory up to "/").  .snapshots is itself (ESTALE for
 * any other node id of its space) and "/" is its parent; a snapshot's
 * root, whose ext ".." is itself, has .snapshots as parent.  Returns 0
 * if NAME in PARENT is not one of these.
 */
static int lookup_virtual_dots(fuse_req_t req, fuse_ino_t parent,
			       const char *name)
{
	int dot = !strcmp(name, "."), dotdot = !strcmp(name, "..");

	if (!dot && !dotdot)
		return 0;
	if (space_of(parent) == NX_SPACE_SNAPDIR) {
		if (dotdot)
			nx_fuse_ops.lookup(req, FUSE_ROOT_ID, ".");
		else if (parent == NX_SNAPDIR_NODEID)
			reply_snapdir_entry(req);
		else
			fuse_reply_err(req, ESTALE);
		return 1;
	}
	if (!space_of(parent) || !dotdot || to_ext2(parent) != EXT2_ROOT_INO)
		return 0;
	if (enter_view(req, parent)) {	/* ESTALE once deleted */
		leave_view();
		reply_snapdir_entry(req);
	}
	return 1;
}

static void s_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_snapdir_name(parent, name)) {
		reply_snapdir_entry(req);
		return;
	}
	if (lookup_virtual_dots(req, parent, name))
		return;
	DISPATCH(req, parent, reply_snapshot_root(req, name),
		 nx_fuse_ops.lookup(req, parent, name));
}

static void forget_one(fuse_req_t req, fuse_ino_t nodeid, uint64_t n)
{
	struct nx_fuse *live = live_fs(req), *v;

	if (space_of(nodeid) == NX_SPACE_SNAPDIR)
		return;
	nx_volume_lock(live->vol);
	if (view_fs(live, (uint32_t)space_of(nodeid), &v) == 0)
		nx_nodes_forget(v->nodes, v->vol,
				(ext2_ino_t)(nodeid & NX_NODE_INO_MASK), n);
	nx_volume_unlock(live->vol);
}

static void s_forget(fuse_req_t req, fuse_ino_t nodeid, uint64_t nlookup)
{
	if (!space_of(nodeid)) {
		nx_fuse_ops.forget(req, nodeid, nlookup);
		return;
	}
	forget_one(req, nodeid, nlookup);
	fuse_reply_none(req);
}

static void s_forget_multi(fuse_req_t req, size_t count,
			   struct fuse_forget_data *forgets)
{
	struct fuse_forget_data *live = malloc(count * sizeof(*live));
	size_t i, n = 0;

	for (i = 0; i < count; i++) {
		if (!space_of(forgets[i].ino) && live)
			live[n++] = forgets[i];
		else if (space_of(forgets[i].ino))
			forget_one(req, forgets[i].ino, forgets[i].nlookup);
	}
	if (live)
		nx_fuse_ops.forget_multi(req, n, live);
	else
		fuse_reply_none(req);
	free(live);
}

static void s_getattr(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	struct stat st;

	DISPATCH(req, nodeid,
		 (snapdir_stat(live_fs(req), &st),
		  fuse_reply_attr(req, &st, live_fs(req)->timeout)),
		 nx_fuse_ops.getattr(req, nodeid, fi));
}

static void s_setattr(fuse_req_t req, fuse_ino_t nodeid, struct stat *attr,
		      int to_set, struct fuse_file_info *fi)
{
	struct nx_fuse *live = live_fs(req);	/* REQ is gone after the reply */

	/*
	 * Owners and times live in the inode only; a size change rewrites
	 * the block map, a mode change a POSIX ACL (in an xattr block).
	 */
	DISPATCH_CHANGE_AS(req, nodeid,
			   (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE)) ?
			   NX_CHANGE_ANY : NX_CHANGE_INODES,
			   nx_fuse_ops.setattr(req, nodeid, attr, to_set,
					       fi));
	/* .snapshots shows the owner of "/". */
	if (nodeid == FUSE_ROOT_ID)
		snapdir_changed(live);
}

static void s_readlink(fuse_req_t req, fuse_ino_t nodeid)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, EINVAL),
		 nx_fuse_ops.readlink(req, nodeid));
}

static void s_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, dev_t rdev)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EEXIST);
	else
		DISPATCH_CHANGE(req, parent,
				nx_fuse_ops.mknod(req, parent, name, mode, rdev));
}

static void s_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EEXIST);
	else if (space_of(parent) == NX_SPACE_SNAPDIR)
		snapdir_mkdir(req, name);
	else
		DISPATCH_CHANGE(req, parent,
				nx_fuse_ops.mkdir(req, parent, name, mode));
}

static void s_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EISDIR);
	else
		DISPATCH_CHANGE_AS(req, parent, NX_CHANGE_REMOVE,
				   nx_fuse_ops.unlink(req, parent, name));
}

static void s_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EBUSY);
	else if (space_of(parent) == NX_SPACE_SNAPDIR)
		snapdir_rmdir(req, name);
	else
		DISPATCH_CHANGE_AS(req, parent, NX_CHANGE_REMOVE,
				   nx_fuse_ops.rmdir(req, parent, name));
}

static void s_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		      const char *name)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EEXIST);
	else
		DISPATCH_CHANGE(req, parent,
				nx_fuse_ops.symlink(req, link, parent, name));
}

static void s_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		     fuse_ino_t newparent, const char *newname,
		     unsigned int flags)
{
	if (is_snapdir_name(parent, name) ||
	    is_snapdir_name(newparent, newname))
		fuse_reply_err(req, EBUSY);
	else if (space_of(parent) != space_of(newparent))
		fuse_reply_err(req, EXDEV);
	else
		DISPATCH_CHANGE(req, parent,
				nx_fuse_ops.rename(req, parent, name, newparent,
						   newname, flags));
}

static void s_link(fuse_req_t req, fuse_ino_t nodeid, fuse_ino_t newparent,
		   const char *newname)
{
	if (is_snapdir_name(newparent, newname))
		fuse_reply_err(req, EEXIST);
	else if (space_of(nodeid) != space_of(newparent))
		fuse_reply_err(req, EXDEV);
	else
		DISPATCH_CHANGE(req, newparent,
				nx_fuse_ops.link(req, nodeid, newparent,
						 newname));
}

static void s_open(fuse_req_t req, fuse_ino_t nodeid,
		   struct fuse_file_info *fi)
{
	if (space_of(nodeid) && (fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	DISPATCH(req, nodeid, fuse_reply_err(req, EISDIR),
		 nx_fuse_ops.open(req, nodeid, fi));
}

static void s_read(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, EISDIR),
		 nx_fuse_ops.read(req, nodeid, size, off, fi));
}

static void s_write(fuse_req_t req, fuse_ino_t nodeid, const char *buf,
		    size_t size, off_t off, struct fuse_file_info *fi)
{
	DISPATCH_CHANGE(req, nodeid,
			nx_fuse_ops.write(req, nodeid, buf, size, off, fi));
}

static void s_flush(fuse_req_t req, fuse_ino_t nodeid,
		    struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.flush(req, nodeid, fi));
}

static void s_release(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.release(req, nodeid, fi));
}

static void s_fsync(fuse_req_t req, fuse_ino_t nodeid, int datasync,
		    struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.fsync(req, nodeid, datasync, fi));
}

static void s_opendir(fuse_req_t req, fuse_ino_t nodeid,
		      struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, (fi->fh = 0, fuse_reply_open(req, fi)),
		 nx_fuse_ops.opendir(req, nodeid, fi));
}

static void s_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size,
		      off_t off, struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, snapdir_readdir(req, size, off, 0),
		 nx_fuse_ops.readdir(req, nodeid, size, off, fi));
}

static void s_readdirplus(fuse_req_t req, fuse_ino_t nodeid, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, snapdir_readdir(req, size, off, 1),
		 nx_fuse_ops.readdirplus(req, nodeid, size, off, fi));
}

static void s_releasedir(fuse_req_t req, fuse_ino_t nodeid,
			 struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.releasedir(req, nodeid, fi));
}

static void s_fsyncdir(fuse_req_t req, fuse_ino_t nodeid, int datasync,
		       struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.fsyncdir(req, nodeid, datasync, fi));
}

static void s_statfs(fuse_req_t req, fuse_ino_t nodeid)
{
	/* Every space lives on the same volume. */
	nx_fuse_ops.statfs(req, FUSE_ROOT_ID);
}

static void s_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		       const char *value, size_t size, int flags)
{
	DISPATCH_CHANGE(req, nodeid,
			nx_fuse_ops.setxattr(req, nodeid, name, value, size,
					     flags));
}

static void s_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name,
		       size_t size)
{
	DISPATCH(req, nodeid, snapdir_getxattr(req, name, size),
		 nx_fuse_ops.getxattr(req, nodeid, name, size));
}

static void s_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size)
{
	DISPATCH(req, nodeid, snapdir_listxattr(req, size),
		 nx_fuse_ops.listxattr(req, nodeid, size));
}

static void s_removexattr(fuse_req_t req, fuse_ino_t nodeid, const char *name)
{
	DISPATCH_CHANGE(req, nodeid,
			nx_fuse_ops.removexattr(req, nodeid, name));
}

static void s_access(fuse_req_t req, fuse_ino_t nodeid, int mask)
{
	if (space_of(nodeid) && (mask & W_OK)) {
		fuse_reply_err(req, space_of(nodeid) == NX_SPACE_SNAPDIR ?
			       0 : EROFS);
		return;
	}
	DISPATCH(req, nodeid, fuse_reply_err(req, 0),
		 nx_fuse_ops.access(req, nodeid, mask));
}

static void s_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, struct fuse_file_info *fi)
{
	if (is_snapdir_name(parent, name))
		fuse_reply_err(req, EEXIST);
	else
		DISPATCH_CHANGE(req, parent,
				nx_fuse_ops.create(req, parent, name, mode, fi));
}

static void s_fallocate(fuse_req_t req, fuse_ino_t nodeid, int mode,
			off_t offset, off_t length, struct fuse_file_info *fi)
{
	DISPATCH_CHANGE(req, nodeid,
			nx_fuse_ops.fallocate(req, nodeid, mode, offset,
					      length, fi));
}

static void s_lseek(fuse_req_t req, fuse_ino_t nodeid, off_t off, int whence,
		    struct fuse_file_info *fi)
{
	DISPATCH(req, nodeid, fuse_reply_err(req, EINVAL),
		 nx_fuse_ops.lseek(req, nodeid, off, whence, fi));
}

static void s_ioctl(fuse_req_t req, fuse_ino_t nodeid, unsigned int cmd,
		    void *arg, struct fuse_file_info *fi, unsigned flags,
		    const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	/* Views: flags may be read; setting them fails in the fs layer. */
	DISPATCH(req, nodeid, fuse_reply_err(req, ENOTTY),
		 nx_fuse_ops.ioctl(req, nodeid, cmd, arg, fi, flags, in_buf,
				   in_bufsz, out_bufsz));
}

const struct fuse_lowlevel_ops nx_fuse_snap_ops = {
	.init		= s_init,
	.destroy	= s_destroy,
	.lookup		= s_lookup,
	.forget		= s_forget,
	.forget_multi	= s_forget_multi,
	.getattr	= s_getattr,
	.setattr	= s_setattr,
	.readlink	= s_readlink,
	.mknod		= s_mknod,
	.mkdir		= s_mkdir,
	.unlink		= s_unlink,
	.rmdir		= s_rmdir,
	.symlink	= s_symlink,
	.rename		= s_rename,
	.link		= s_link,
	.open		= s_open,
	.read		= s_read,
	.write		= s_write,
	.flush		= s_flush,
	.release	= s_release,
	.fsync		= s_fsync,
	.opendir	= s_opendir,
	.readdir	= s_readdir,
	.readdirplus	= s_readdirplus,
	.releasedir	= s_releasedir,
	.fsyncdir	= s_fsyncdir,
	.statfs		= s_statfs,
	.setxattr	= s_setxattr,
	.getxattr	= s_getxattr,
	.listxattr	= s_listxattr,
	.removexattr	= s_removexattr,
	.access		= s_access,
	.create		= s_create,
	.fallocate	= s_fallocate,
	.lseek		= s_lseek,
	.ioctl		= s_ioctl,
};
