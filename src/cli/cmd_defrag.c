/*
 * cmd_defrag.c - "nextfs defrag [-r] [--json] PATH...": rewrite files of
 * a nextfs-fuse mount into contiguous free space (docs/defrag.md).
 *
 * The daemon does the work (NX_IOC_DEFRAG, nxioctl.h) on a descriptor of
 * the file: every PATH is resolved once under the rules of safepath.h,
 * nothing below the mountpoint is followed if it is a symbolic link, and
 * a tree (-r) is walked with descriptors (openat with O_NOFOLLOW) without
 * leaving its mount.  The daemon decides who may (write access); the
 * tool refuses up front what never makes sense: a symbolic link, a file
 * that is not regular, anything inside .snapshots or .snapshot-images.
 *
 * With --image IMAGE the PATHs name files inside the unmounted volume
 * IMAGE ("/db/table.dat"), which the tool opens itself and defragments
 * with the same engine (defrag.h); names are looked up one component at
 * a time and a symbolic link is never followed.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nextfs/defrag.h"
#include "nextfs/dir.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/open.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "output.h"

#define NOT_SNAPSHOTS \
	"inside .snapshots: snapshots are read-only and never defragmented"

struct defrag_run {
	int json;
	struct nx_json j;
	int failed;			/* a file was refused or failed */
	uint64_t files, before, after, moved, kept;
};

static const char *status_name(uint32_t status)
{
	switch (status) {
	case NX_IOC_DEFRAG_DONE:
		return "defragmented";
	case NX_IOC_DEFRAG_CONTIGUOUS:
		return "contiguous";
	default:
		return "fragmented-free-space";
	}
}

/* Why the daemon (or the tool) refused PATH, in a few words. */
static const char *defrag_why(int err)
{
	switch (err) {
	case EACCES:
		return "permission denied (only a file you may write can be "
		       "defragmented)";
	case EROFS:
		return "read-only (a snapshot, or a read-only mount)";
	case EPERM:
		return "immutable or append-only";
	case ENOSPC:
		return "not enough free space for a copy of it";
	case EINVAL:
	case EISDIR:
		return "not a regular file";
	case ENOTTY:
	case ENOSYS:
		return "not on a nextfs-fuse mount";
	case ELOOP:
		return "a symbolic link (not followed)";
	default:
		return nx_sp_why(err);
	}
}

static void report_error(struct defrag_run *r, const char *path, int err,
			 const char *why)
{
	r->failed = 1;
	nx_cli_error("%s: %s; nothing written", path,
		     why ? why : defrag_why(err));
	if (r->json) {
		nx_json_open(&r->j, NULL, '{');
		nx_json_str(&r->j, "path", path);
		nx_json_str(&r->j, "status", "refused");
		nx_json_str(&r->j, "error", why ? why : defrag_why(err));
		nx_json_close(&r->j, '}');
	}
}

static void report_file(struct defrag_run *r, const char *path,
			const struct nx_ioc_defrag *q)
{
	if (q->status == NX_IOC_DEFRAG_FRAGMENTED) {
		char why[128];

		snprintf(why, sizeof(why), "free space is too fragmented to "
			 "improve its %llu extents",
			 (unsigned long long)q->extents_before);
		r->failed = 1;
		nx_cli_error("%s: %s; nothing written", path, why);
	}
	r->files++;
	r->before += q->extents_before;
	r->after += q->extents_after;
	r->moved += q->moved;
	r->kept += q->kept;
	if (r->json) {
		nx_json_open(&r->j, NULL, '{');
		nx_json_str(&r->j, "path", path);
		nx_json_str(&r->j, "status", status_name(q->status));
		nx_json_u64(&r->j, "blocks", q->blocks);
		nx_json_u64(&r->j, "extents_before", q->extents_before);
		nx_json_u64(&r->j, "extents_after", q->extents_after);
		nx_json_u64(&r->j, "blocks_moved", q->moved);
		nx_json_u64(&r->j, "blocks_kept_by_snapshot", q->kept);
		nx_json_close(&r->j, '}');
		return;
	}
	if (q->status == NX_IOC_DEFRAG_FRAGMENTED)
		return;
	nx_out_print_quoted(stdout, path);
	printf(": %llu -> %llu extents%s\n",
	       (unsigned long long)q->extents_before,
	       (unsigned long long)q->extents_after,
	       q->status == NX_IOC_DEFRAG_CONTIGUOUS ?
	       " (nothing to gain)" : "");
}

/*
 * Open the regular file NAME in DIRFD for the ioctl without following it:
 * for reading, or for writing if the caller may write but not read it.
 */
static int open_file(int dirfd, const char *name)
{
	int fl = O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
	int fd = openat(dirfd, name, O_RDONLY | fl);

	if (fd < 0 && errno == EACCES)
		fd = openat(dirfd, name, O_WRONLY | fl);
	return fd;
}

static void defrag_one(struct defrag_run *r, int dirfd, const char *name,
		       const char *path)
{
	struct nx_ioc_defrag q;
	struct stat st;
	int fd = open_file(dirfd, name);

	if (fd < 0) {
		report_error(r, path, errno, NULL);
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		report_error(r, path, EINVAL, NULL);
		close(fd);
		return;
	}
	memset(&q, 0, sizeof(q));
	if (ioctl(fd, NX_IOC_DEFRAG, &q) < 0)
		report_error(r, path, errno, NULL);
	else
		report_file(r, path, &q);
	close(fd);
}

/* Is NAME, in the directory at REL below the mount's root, off limits? */
static int is_special(const char *rel, const char *name)
{
	return !rel[0] && (!strcmp(name, NX_SNAPDIR_NAME) ||
			   !strcmp(name, NX_IMGDIR_NAME));
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 2);

	if (s) {
		memcpy(s, a, la);
		s[la] = '/';
		memcpy(s + la + 1, b, lb + 1);
		if (la && a[la - 1] == '/')
			memmove(s + la, s + la + 1, lb + 1);
	}
	return s;
}

/* -r: every regular file below the open directory DFD (taken). */
static void defrag_tree(struct defrag_run *r, int dfd, const char *rel,
			const char *path, dev_t dev)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;

	if (!d) {
		report_error(r, path, errno, NULL);
		close(dfd);
		return;
	}
	while ((errno = 0, e = readdir(d))) {
		struct stat st;
		char *sub, *subrel;
		int fd;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    is_special(rel, e->d_name))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    st.st_dev != dev ||
		    !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
			continue;	/* gone, another mount, links, devices */
		sub = join(path, e->d_name);
		subrel = join(rel, e->d_name);
		if (!sub || !subrel) {
			nx_cli_error("out of memory");
			r->failed = 1;
		} else if (S_ISREG(st.st_mode)) {
			defrag_one(r, dirfd(d), e->d_name, sub);
		} else {
			fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY |
				    O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				report_error(r, sub, errno, NULL);
			else
				defrag_tree(r, fd, subrel, sub, dev);
		}
		free(sub);
		free(subrel);
	}
	if (errno)
		report_error(r, path, errno, NULL);
	closedir(d);
}

/* The first component of REL (below the mount's root) is off limits. */
static int in_special_dir(const char *rel)
{
	size_t n;

	rel += strspn(rel, "/");
	n = strcspn(rel, "/");
	return (n == strlen(NX_SNAPDIR_NAME) &&
		!strncmp(rel, NX_SNAPDIR_NAME, n)) ||
	       (n == strlen(NX_IMGDIR_NAME) &&
		!strncmp(rel, NX_IMGDIR_NAME, n));
}

static void defrag_path(struct defrag_run *r, const char *path, int recurse)
{
	struct nx_sp_place p;
	struct stat st;
	int fd;

	if (nx_sp_locate(path, NX_SP_FUSE, &p)) {
		report_error(r, path, errno, errno == EMEDIUMTYPE ?
			     "not on a nextfs-fuse mount" : NULL);
		return;
	}
	if (in_special_dir(p.rel)) {
		report_error(r, path, EROFS, NOT_SNAPSHOTS);
		goto out;
	}
	if (nx_sp_lstat(p.mnt.fd, p.rel, &st) < 0) {
		report_error(r, path, errno, NULL);
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		report_error(r, path, ELOOP, NULL);
	} else if (S_ISREG(st.st_mode)) {
		defrag_one(r, p.dirfd, p.base, path);
	} else if (!S_ISDIR(st.st_mode)) {
		report_error(r, path, EINVAL, NULL);
	} else if (!recurse) {
		report_error(r, path, EISDIR, "a directory (-r defragments "
			     "the files below it)");
	} else {
		fd = nx_sp_open(p.mnt.fd, p.rel, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			report_error(r, path, errno, NULL);
		else
			defrag_tree(r, fd, p.rel, path, st.st_dev);
	}
out:
	nx_sp_place_free(&p);
}

/* ------------------------------------------------------------------ */
/* --image: an unmounted volume                                        */

/*
 * The engine on INO, as the daemon runs it, into Q; with PLAN_ONLY (a
 * volume opened read-only) only its verdict: status NX_IOC_DEFRAG_DONE
 * then means "would move".
 */
static errcode_t image_defrag_ino(struct nx_volume *vol, ext2_ino_t ino,
				  int plan_only, struct nx_ioc_defrag *q)
{
	blk64_t step = NX_DEFRAG_STEP_BYTES / vol->fs->blocksize;
	struct nx_defrag d;
	int done = plan_only;
	errcode_t err;

	nx_volume_lock(vol);
	err = nx_defrag_begin(vol, ino, &d);
	while (!err && !done)
		err = nx_defrag_step(vol, &d, step, &done);
	if (err || plan_only)
		nx_defrag_free(&d);
	else
		err = nx_defrag_finish(vol, &d);
	nx_volume_unlock(vol);
	if (err)
		return err;
	memset(q, 0, sizeof(*q));
	q->status = (uint32_t)d.verdict;
	q->blocks = d.blocks;
	q->extents_before = d.extents_before;
	q->extents_after = d.extents_after;
	q->moved = d.moved;
	q->kept = d.kept;
	return 0;
}

/* Names (or paths) with their inodes. */
struct image_entry {
	char *name;
	ext2_ino_t ino;
};

struct image_list {
	struct image_entry *v;
	size_t n, cap;
	int oom;
};

static int list_add(struct image_list *l, const char *name, size_t len,
		    ext2_ino_t ino)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct image_entry *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return l->oom = 1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].name = strndup(name, len);
	l->v[l->n].ino = ino;
	if (!l->v[l->n].name)
		return l->oom = 1;
	l->n++;
	return 0;
}

static void list_free(struct image_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int collect_entry(void *priv, const char *name, size_t namelen,
			 ext2_ino_t ino, unsigned char d_type, uint64_t next)
{
	(void)d_type;
	(void)next;
	if ((namelen == 1 && name[0] == '.') ||
	    (namelen == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	return list_add(priv, name, namelen, ino);
}

/*
 * The read-only pass: a file the engine would move waits in TODO for the
 * read-write pass; every other verdict is reported now.
 */
static void image_plan_file(struct defrag_run *r, struct nx_volume *vol,
			    ext2_ino_t ino, const char *path,
			    struct image_list *todo)
{
	struct nx_ioc_defrag q;
	errcode_t err = image_defrag_ino(vol, ino, 1, &q);

	if (err)
		report_error(r, path, nx_errno(err), NULL);
	else if (q.status != NX_IOC_DEFRAG_DONE)
		report_file(r, path, &q);
	else if (list_add(todo, path, strlen(path), ino))
		report_error(r, path, ENOMEM, NULL);
}

static void image_plan_ino(struct defrag_run *r, struct nx_volume *vol,
			   ext2_ino_t ino, const char *path, int recurse,
			   int named, struct image_list *todo);

/* -r: every regular file below directory DINO. */
static void image_plan_tree(struct defrag_run *r, struct nx_volume *vol,
			    ext2_ino_t dino, const char *path,
			    struct image_list *todo)
{
	struct image_list dir = { NULL, 0, 0, 0 };
	errcode_t err;
	size_t i;

	nx_volume_lock(vol);
	err = nx_readdir(vol, dino, 0, collect_entry, &dir);
	nx_volume_unlock(vol);
	if (!err && dir.oom)
		err = ENOMEM;
	if (err)
		report_error(r, path, nx_errno(err), NULL);
	for (i = 0; i < dir.n && !err; i++) {
		char *sub;

		if (dino == EXT2_ROOT_INO && is_special("", dir.v[i].name))
			continue;
		sub = join(path, dir.v[i].name);
		if (sub)
			image_plan_ino(r, vol, dir.v[i].ino, sub, 1, 0, todo);
		free(sub);
	}
	list_free(&dir);
}

/*
 * INO at PATH: a regular file is planned, a directory walked with
 * RECURSE; anything else is refused if the user NAMED it, else skipped.
 */
static void image_plan_ino(struct defrag_run *r, struct nx_volume *vol,
			   ext2_ino_t ino, const char *path, int recurse,
			   int named, struct image_list *todo)
{
	struct ext2_inode_large inode;
	errcode_t err;

	nx_volume_lock(vol);
	err = nx_inode_read(vol, ino, &inode);
	nx_volume_unlock(vol);
	if (err)
		report_error(r, path, nx_errno(err), NULL);
	else if (LINUX_S_ISREG(inode.i_mode))
		image_plan_file(r, vol, ino, path, todo);
	else if (LINUX_S_ISDIR(inode.i_mode) && recurse)
		image_plan_tree(r, vol, ino, path, todo);
	else if (!named)
		return;
	else if (LINUX_S_ISLNK(inode.i_mode))
		report_error(r, path, ELOOP, NULL);
	else if (LINUX_S_ISDIR(inode.i_mode))
		report_error(r, path, EISDIR, "a directory (-r defragments "
			     "the files below it)");
	else
		report_error(r, path, EINVAL, NULL);
}

/*
 * PATH inside the volume, one component at a time from the root; a
 * symbolic link on the way is not followed (ELOOP), ".." is refused.
 */
static errcode_t image_lookup(struct nx_volume *vol, const char *path,
			      ext2_ino_t *ino)
{
	char *copy = strdup(path), *save = NULL, *name;
	ext2_ino_t cur = EXT2_ROOT_INO;
	struct ext2_inode_large inode;
	errcode_t err = copy ? 0 : ENOMEM;

	for (name = copy ? strtok_r(copy, "/", &save) : NULL; name && !err;
	     name = strtok_r(NULL, "/", &save)) {
		if (!strcmp(name, "."))
			continue;
		if (!strcmp(name, ".."))
			err = EXDEV;
		if (!err)
			err = nx_inode_read(vol, cur, &inode);
		if (!err && LINUX_S_ISLNK(inode.i_mode))
			err = ELOOP;
		else if (!err && !LINUX_S_ISDIR(inode.i_mode))
			err = ENOTDIR;
		if (!err)
			err = nx_lookup(vol, cur, name, &cur);
	}
	free(copy);
	*ino = cur;
	return err;
}

/* Open IMAGE (FLAGS: nx_open_volume's) unless a daemon serves it. */
static struct nx_volume *open_image(const char *image, int flags)
{
	struct nx_volume *vol;
	char *mnt;

	if (nx_cli_is_dir(image)) {
		nx_cli_error("%s: a directory, not an image (name the files "
			     "of a mount without --image)", image);
		return NULL;
	}
	if (nx_cli_open_target(image, flags, &vol, &mnt))
		return NULL;
	if (mnt) {
		nx_cli_error("%s is mounted at %s: name the files there, "
			     "without --image", image, mnt);
		free(mnt);
		return NULL;
	}
	return vol;
}

static int close_image(struct defrag_run *r, const char *image,
		       struct nx_volume *vol)
{
	errcode_t err = nx_volume_close(vol);

	if (err) {
		nx_cli_error("%s: %s", image, error_message(err));
		r->failed = 1;
	}
	return err ? NX_CLI_FAIL : NX_CLI_OK;
}

/* The read-only pass over the PATHs given. */
static void image_plan(struct defrag_run *r, struct nx_volume *vol,
		       char **paths, int n, int recurse,
		       struct image_list *todo)
{
	ext2_ino_t ino;
	errcode_t err;
	int i;

	for (i = 0; i < n; i++) {
		if (in_special_dir(paths[i])) {
			report_error(r, paths[i], EROFS, NOT_SNAPSHOTS);
			continue;
		}
		nx_volume_lock(vol);
		err = image_lookup(vol, paths[i], &ino);
		nx_volume_unlock(vol);
		if (err)
			report_error(r, paths[i], nx_errno(err), err == EXDEV ?
				     "'..' in a path inside an image (it is "
				     "looked up from the image's root)" : NULL);
		else
			image_plan_ino(r, vol, ino, paths[i], recurse, 1, todo);
	}
}

/*
 * Two passes, so that a refusal writes nothing: the volume opened
 * read-only resolves the paths and gets the engine's verdicts; only if a
 * file is to move is it opened read-write, for those files.
 */
static int defrag_image(struct defrag_run *r, const char *image,
			char **paths, int n, int recurse)
{
	struct image_list todo = { NULL, 0, 0, 0 };
	struct nx_volume *vol = open_image(image, NX_VOL_RDONLY);
	struct nx_ioc_defrag q;
	errcode_t err;
	size_t k;

	if (!vol)
		return NX_CLI_FAIL;
	image_plan(r, vol, paths, n, recurse, &todo);
	if (close_image(r, image, vol) || !todo.n) {
		list_free(&todo);
		return NX_CLI_OK;
	}
	vol = open_image(image, 0);
	for (k = 0; vol && k < todo.n; k++) {
		err = image_defrag_ino(vol, todo.v[k].ino, 0, &q);
		if (err)
			report_error(r, todo.v[k].name, nx_errno(err), NULL);
		else
			report_file(r, todo.v[k].name, &q);
	}
	list_free(&todo);
	if (!vol)
		return NX_CLI_FAIL;
	return close_image(r, image, vol);
}

int nx_cmd_defrag(struct nx_cli_args *a)
{
	struct defrag_run r;
	int i, recurse = a->opt[NX_OPT_RECURSIVE];

	memset(&r, 0, sizeof(r));
	r.json = a->opt[NX_OPT_JSON];
	if (r.json) {
		nx_json_init(&r.j, stdout);
		nx_json_open(&r.j, NULL, '{');
		nx_json_open(&r.j, "files", '[');
	}
	if (a->opt[NX_OPT_IMAGE]) {
		if (defrag_image(&r, a->val[NX_OPT_IMAGE], a->pos, a->npos,
				 recurse))
			return NX_CLI_FAIL;
	} else {
		for (i = 0; i < a->npos; i++)
			defrag_path(&r, a->pos[i], recurse);
	}
	if (r.json) {
		nx_json_close(&r.j, ']');
		nx_json_open(&r.j, "total", '{');
		nx_json_u64(&r.j, "files", r.files);
		nx_json_u64(&r.j, "extents_before", r.before);
		nx_json_u64(&r.j, "extents_after", r.after);
		nx_json_u64(&r.j, "blocks_moved", r.moved);
		nx_json_u64(&r.j, "blocks_kept_by_snapshot", r.kept);
		nx_json_close(&r.j, '}');
		nx_json_close(&r.j, '}');
		nx_json_end(&r.j);
	} else if (r.files > 1 || recurse) {
		printf("total: %llu files, %llu -> %llu extents\n",
		       (unsigned long long)r.files,
		       (unsigned long long)r.before,
		       (unsigned long long)r.after);
	}
	fflush(stdout);
	return r.failed ? NX_CLI_FAIL : NX_CLI_OK;
}
