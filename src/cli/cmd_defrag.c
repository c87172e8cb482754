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
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "output.h"

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
		report_error(r, path, EROFS, "inside .snapshots: snapshots "
			     "are read-only and never defragmented");
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
	for (i = 0; i < a->npos; i++)
		defrag_path(&r, a->pos[i], recurse);
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
