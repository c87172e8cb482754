/*
 * mount.c - the nextfs tool talking to a running nextfs-fuse through its
 * mountpoint (the private ioctls of nxioctl.h), and finding the
 * mountpoint that serves an image that is in use.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <ext2fs/ext2fs.h>
#include <et/com_err.h>
#include "nextfs/nxioctl.h"
#include "nextfs/snapshot.h"
#include "cli.h"

int nx_cli_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The root of the mount at MNT, open for ioctls; -1 after a message. */
static int open_mount(const char *mnt)
{
	int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		nx_cli_error("%s: %s", mnt, strerror(errno));
	return fd;
}

static void not_nextfs(const char *mnt, int err)
{
	if (err == ENOTTY || err == EINVAL || err == ENOSYS)
		nx_cli_error("%s is not the mountpoint of a nextfs volume",
			     mnt);
	else
		nx_cli_error("%s: cannot ask the nextfs daemon: %s", mnt,
			     strerror(err));
}

int nx_cli_mount_snapshots(const char *mnt, struct nx_snapinfo **list,
			   int *count, unsigned *blocksize)
{
	struct nx_snapinfo *v = NULL;
	struct nx_ioc_snap q;
	size_t n = 0, cap = 0;
	uint32_t after = 0;
	int fd = open_mount(mnt), rc = NX_CLI_OK;

	if (fd < 0)
		return NX_CLI_FAIL;
	*blocksize = 0;
	for (;;) {
		memset(&q, 0, sizeof(q));
		q.after_id = after;
		if (ioctl(fd, NX_IOC_SNAP_NEXT, &q) < 0) {
			if (errno == ENOENT && (n || after == 0))
				break;	/* after the newest */
			not_nextfs(mnt, errno);
			rc = NX_CLI_FAIL;
			break;
		}
		if (n == cap) {
			struct nx_snapinfo *more;

			cap = cap ? 2 * cap : 64;
			more = realloc(v, cap * sizeof(*v));
			if (!more) {
				nx_cli_error("out of memory");
				rc = NX_CLI_FAIL;
				break;
			}
			v = more;
		}
		memset(&v[n], 0, sizeof(v[n]));
		v[n].id = q.id;
		v[n].taken.tv_sec = q.taken_sec;
		v[n].taken.tv_nsec = q.taken_nsec;
		v[n].blocks = q.blocks;
		v[n].active = (q.flags & NX_IOC_SNAP_ACTIVE) != 0;
		if (q.namelen >= sizeof(v[n].name))
			q.namelen = sizeof(v[n].name) - 1;
		memcpy(v[n].name, q.name, q.namelen);
		*blocksize = q.blocksize;
		after = q.id;
		n++;
	}
	close(fd);
	if (rc) {
		free(v);
		return rc;
	}
	/* No snapshot: the block size comes with the superblock. */
	if (!n) {
		struct nx_ioc_volinfo vi;

		rc = nx_cli_mount_volinfo(mnt, &vi);
		if (rc)
			return rc;
		*blocksize = EXT2_BLOCK_SIZE((struct ext2_super_block *)
					     vi.super);
	}
	*list = v;
	*count = (int)n;
	return NX_CLI_OK;
}

int nx_cli_mount_volinfo(const char *mnt, struct nx_ioc_volinfo *vi)
{
	int fd = open_mount(mnt), rc = NX_CLI_OK;

	if (fd < 0)
		return NX_CLI_FAIL;
	if (ioctl(fd, NX_IOC_GET_VOLINFO, vi) < 0) {
		not_nextfs(mnt, errno);
		rc = NX_CLI_FAIL;
	}
	close(fd);
	return rc;
}

/* Undo the octal escapes of /proc/self/mountinfo in place. */
static void unescape_mountinfo(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
					(s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = 0;
}

/* Is SOURCE (a mount's source) the file or device IMG (stat'ed)? */
static int same_volume(const char *source, const struct stat *img)
{
	struct stat st;

	if (stat(source, &st) != 0)
		return 0;
	if (S_ISBLK(img->st_mode))
		return S_ISBLK(st.st_mode) && st.st_rdev == img->st_rdev;
	return st.st_dev == img->st_dev && st.st_ino == img->st_ino;
}

/*
 * Fields of a mountinfo line: 5 is the mountpoint; after the " - "
 * separator come the type and the source.
 */
static int parse_mountinfo(char *line, char **mnt, char **type,
			   char **source)
{
	char *save = NULL, *tok;
	int field = 0, after_dash = 0;

	*mnt = *type = *source = NULL;
	for (tok = strtok_r(line, " \n", &save); tok;
	     tok = strtok_r(NULL, " \n", &save)) {
		field++;
		if (!after_dash) {
			if (field == 5)
				*mnt = tok;
			else if (field > 6 && !strcmp(tok, "-"))
				after_dash = field;
		} else if (field == after_dash + 1) {
			*type = tok;
		} else if (field == after_dash + 2) {
			*source = tok;
			break;
		}
	}
	return *mnt && *type && *source;
}

char *nx_cli_find_mount(const char *image)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *found = NULL, *mnt, *type, *source;
	size_t cap = 0;
	struct stat img;

	if (!f || stat(image, &img) != 0) {
		if (f)
			fclose(f);
		return NULL;
	}
	while (!found && getline(&line, &cap, f) > 0) {
		if (!parse_mountinfo(line, &mnt, &type, &source))
			continue;
		/* fuse.nextfs, or fuseblk with any subtype: asked below */
		if (strncmp(type, "fuse", 4))
			continue;
		unescape_mountinfo(source);
		unescape_mountinfo(mnt);
		if (same_volume(source, &img))
			found = strdup(mnt);
	}
	free(line);
	fclose(f);
	return found;
}

int nx_cli_open_target(const char *target, int flags, struct nx_volume **vol,
		       char **mnt)
{
	char msg[512] = "";
	errcode_t err;

	*vol = NULL;
	*mnt = NULL;
	if (nx_cli_is_dir(target)) {
		*mnt = strdup(target);
		if (*mnt)
			return NX_CLI_OK;
		nx_cli_error("out of memory");
		return NX_CLI_FAIL;
	}
	err = nx_volume_open(target, flags, vol, msg, sizeof(msg));
	/* Served by nextfs-fuse: ask the daemon, through its mountpoint. */
	if (err == EBUSY && (*mnt = nx_cli_find_mount(target)))
		return NX_CLI_OK;
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}

/*
 * Where PATH is: its directory resolved (the last component itself is
 * not followed, so a symlink's history is the symlink's), then the
 * FUSE mount whose mountpoint is the longest prefix of that.
 */
static char *resolve_keep_last(const char *path)
{
	char *copy = strdup(path), *slash, *dir, *out = NULL;
	const char *base;

	if (!copy)
		return NULL;
	while (strlen(copy) > 1 && copy[strlen(copy) - 1] == '/')
		copy[strlen(copy) - 1] = 0;
	slash = strrchr(copy, '/');
	base = slash ? slash + 1 : copy;
	if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
		out = realpath(copy, NULL);	/* a directory */
	} else {
		if (slash == copy)
			dir = realpath("/", NULL);
		else if (slash) {
			*slash = 0;
			dir = realpath(copy, NULL);
		} else {
			dir = realpath(".", NULL);
		}
		if (dir && asprintf(&out, "%s%s%s", dir,
				    strcmp(dir, "/") ? "/" : "", base) < 0)
			out = NULL;
		free(dir);
	}
	free(copy);
	return out;
}

/* Is MNT PATH itself or a directory above it? */
static int is_below(const char *path, const char *mnt)
{
	size_t n = strlen(mnt);

	if (!strcmp(mnt, "/"))
		return 1;
	return !strncmp(path, mnt, n) && (path[n] == '/' || !path[n]);
}

int nx_cli_mount_of_path(const char *path, char **mnt, char **rel)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *full = resolve_keep_last(path), *m, *type, *src;
	size_t cap = 0, best = 0;
	int fuse = 0;

	*mnt = *rel = NULL;
	if (!full || !f) {
		nx_cli_error("%s: %s", path, strerror(errno));
		goto out;
	}
	while (getline(&line, &cap, f) > 0) {
		if (!parse_mountinfo(line, &m, &type, &src))
			continue;
		unescape_mountinfo(m);
		if (!is_below(full, m) || strlen(m) < best)
			continue;
		/* the later of two mounts on one place is the visible one */
		best = strlen(m);
		free(*mnt);
		*mnt = strdup(m);
		fuse = !strncmp(type, "fuse", 4);
	}
	if (!*mnt || !fuse) {
		nx_cli_error("%s is not on a nextfs mount", path);
		goto out;
	}
	*rel = strdup(full + (strcmp(*mnt, "/") ? strlen(*mnt) : 0));
out:
	free(line);
	free(full);
	if (f)
		fclose(f);
	if (*mnt && !*rel) {
		free(*mnt);
		*mnt = NULL;
		return NX_CLI_FAIL;
	}
	return *mnt ? NX_CLI_OK : NX_CLI_FAIL;
}
