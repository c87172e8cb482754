/*
 * safepath.c - resolving and acting on paths other users control
 * (safepath.h has the contract).
 *
 * Why a walk of our own instead of realpath() and a check: any check of a
 * path string is stale the moment it returns; only descriptors are not.
 * The walk below follows the kernel's own resolution step by step
 * (openat of one name, ".." through the kernel) and decides at each
 * symbolic link whether it may be followed, so what it ends on is what
 * the path named under those rules, held open.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <linux/openat2.h>
#include "nextfs/grow.h"
#include "nextfs/safepath.h"

#define MAX_LINKS	40	/* as the kernel: ELOOP after 40 links */

/* ------------------------------------------------------------------ */
/* /proc/self/mountinfo                                                */

/* Undo the octal escapes of mountinfo (\040 for a space) in place. */
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

/*
 * Fields of a mountinfo line: 1 the mount id, 2 its parent's, 3 MAJ:MIN,
 * 5 the mountpoint; after the " - " separator the type and the source.
 */
static int parse_mountinfo(char *line, struct nx_sp_mntent *e)
{
	char *save = NULL, *tok, *mnt = NULL, *type = NULL, *src = NULL;
	int field = 0, after_dash = 0, ok = 0;

	for (tok = strtok_r(line, " \n", &save); tok;
	     tok = strtok_r(NULL, " \n", &save)) {
		field++;
		if (after_dash) {
			if (field == after_dash + 1) {
				type = tok;
			} else {
				src = tok;
				break;
			}
		} else if (field == 1) {
			ok = sscanf(tok, "%" SCNu64, &e->id) == 1;
		} else if (field == 2) {
			ok &= sscanf(tok, "%" SCNu64, &e->parent) == 1;
		} else if (field == 3) {
			ok &= sscanf(tok, "%u:%u", &e->major, &e->minor) == 2;
		} else if (field == 5) {
			mnt = tok;
		} else if (field > 6 && !strcmp(tok, "-")) {
			after_dash = field;
		}
	}
	if (!ok || !mnt || !type || !src)
		return 0;
	unescape_mountinfo(mnt);
	unescape_mountinfo(src);
	e->mnt = mnt;
	e->type = type;
	e->source = src;
	return 1;
}

int nx_sp_mountinfo_each(int (*fn)(void *priv,
				   const struct nx_sp_mntent *e),
			 void *priv)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct nx_sp_mntent e;
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;

	if (!f)
		return -1;
	while (!rc && getline(&line, &cap, f) > 0)
		if (parse_mountinfo(line, &e))
			rc = fn(priv, &e);
	free(line);
	fclose(f);
	return rc;
}

struct by_id {
	uint64_t id;
	char *path, *type;
};

static int match_id(void *priv, const struct nx_sp_mntent *e)
{
	struct by_id *b = priv;

	if (e->id != b->id)
		return 0;
	b->path = strdup(e->mnt);
	b->type = strdup(e->type);
	return 1;
}

/* 1 if the mount ID is a FUSE mount, 0 if not, -1 with errno. */
static int on_fuse_mount(uint64_t id)
{
	struct by_id b = { .id = id };
	int fuse = -1, rc = nx_sp_mountinfo_each(match_id, &b);

	if (rc == 1 && b.type)
		fuse = !strncmp(b.type, "fuse", 4);
	else if (rc >= 0)	/* unmounted meanwhile, or out of memory */
		errno = rc == 1 ? ENOMEM : ESTALE;
	free(b.path);
	free(b.type);
	return fuse;
}

/* ------------------------------------------------------------------ */
/* Mounts of descriptors                                               */

static int fdinfo_mount_id(int fd, uint64_t *id)
{
	char path[64], line[256];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "mnt_id: %" SCNu64, id) == 1;
	fclose(f);
	if (!found) {
		errno = ENOSYS;
		return -1;
	}
	return 0;
}

/* AT_STATX_DONT_SYNC: a mount id needs no request to a FUSE daemon. */
static int statx_fd(int fd, unsigned mask, struct statx *sx)
{
	return statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW |
		     AT_STATX_DONT_SYNC, mask, sx);
}

int nx_sp_mount_id(int fd, uint64_t *mnt_id)
{
	struct statx sx;

	if (statx_fd(fd, STATX_MNT_ID, &sx) == 0 &&
	    (sx.stx_mask & STATX_MNT_ID)) {
		*mnt_id = sx.stx_mnt_id;
		return 0;
	}
	return fdinfo_mount_id(fd, mnt_id);	/* kernels before 5.8 */
}

struct over {
	uint64_t parent;		/* the mount below */
	const char *path;		/* where the directory is */
	unsigned major, minor;
	char *type;
	size_t len;
	int found;
};

static int match_over(void *priv, const struct nx_sp_mntent *e)
{
	struct over *o = priv;

	if (e->parent == o->parent && !strcmp(e->mnt, o->path)) {
		o->major = e->major;
		o->minor = e->minor;
		snprintf(o->type, o->len, "%s", e->type);
		o->found = 1;
	}
	return 0;		/* go on: the last one listed is the topmost */
}

int nx_sp_mount_over(int dirfd, unsigned *major, unsigned *minor,
		     char *type, size_t len)
{
	struct over o = { .type = type, .len = len };
	char *path;
	int rc = -1;

	if (nx_sp_mount_id(dirfd, &o.parent))
		return -1;
	path = nx_sp_fd_path(dirfd);
	if (!path)
		return -1;
	o.path = path;
	if (nx_sp_mountinfo_each(match_over, &o) == 0) {
		if (o.found)
			rc = 0;
		else
			errno = ENOENT;
	}
	*major = o.major;
	*minor = o.minor;
	free(path);
	return rc;
}

int nx_sp_on_mount(int fd, uint64_t mnt_id)
{
	uint64_t id;

	if (nx_sp_mount_id(fd, &id))
		return -1;
	if (id != mnt_id) {
		errno = EXDEV;
		return -1;
	}
	return 0;
}

/* 1 if the directory FD (on mount ID) is the root of its mount. */
static int is_mount_root(int fd, uint64_t id)
{
	struct statx sx;
	struct stat a, b;
	uint64_t up_id;
	int up, root;

	if (statx_fd(fd, 0, &sx) == 0 &&
	    (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
		return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
	/* Before 5.8: ".." of a mount's root is on another mount (or the
	 * same directory, at "/"). */
	up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (up < 0)
		return -1;
	root = nx_sp_mount_id(up, &up_id) == 0 &&
	       (up_id != id || (fstat(fd, &a) == 0 && fstat(up, &b) == 0 &&
				a.st_dev == b.st_dev && a.st_ino == b.st_ino));
	close(up);
	return root;
}

/* Take FD as the root of its mount into *M: 0, or -1 (FD closed). */
static int pin_mount(int fd, int flags, struct nx_sp_mount *m)
{
	struct by_id b = { 0 };
	int err = 0;

	if (nx_sp_mount_id(fd, &b.id)) {
		err = errno;
	} else if (is_mount_root(fd, b.id) != 1) {
		err = EINVAL;
	} else if (nx_sp_mountinfo_each(match_id, &b) != 1) {
		err = ESTALE;		/* unmounted meanwhile */
	} else if (!b.path || !b.type) {
		err = ENOMEM;
	} else if ((flags & NX_SP_FUSE) && strncmp(b.type, "fuse", 4)) {
		err = EMEDIUMTYPE;
	}
	if (err) {
		free(b.path);
		free(b.type);
		close(fd);
		errno = err;
		return -1;
	}
	m->fd = fd;
	m->id = b.id;
	m->path = b.path;
	m->type = b.type;
	return 0;
}

int nx_sp_mount_pin(int fd, const char *mountpoint, int flags,
		    struct nx_sp_mount *m)
{
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	if (pin_mount(fd, flags, m))
		return -1;
	/* Reached through a link somewhere on the way: another mount. */
	if (strcmp(m->path, mountpoint)) {
		nx_sp_mount_close(m);
		errno = ESTALE;
		return -1;
	}
	return 0;
}

int nx_sp_mount_open(const char *mountpoint, int flags,
		     struct nx_sp_mount *m)
{
	int fd = open(mountpoint, (flags & NX_SP_PATH_ONLY ? O_PATH :
				   O_RDONLY) | O_DIRECTORY | O_CLOEXEC);

	memset(m, 0, sizeof(*m));
	m->fd = -1;
	return fd < 0 ? -1 : nx_sp_mount_pin(fd, mountpoint, flags, m);
}

void nx_sp_mount_close(struct nx_sp_mount *m)
{
	if (m->fd >= 0)
		close(m->fd);
	free(m->path);
	free(m->type);
	memset(m, 0, sizeof(*m));
	m->fd = -1;
}

/* ------------------------------------------------------------------ */
/* Below a directory: nothing followed, the mount never left           */

static int has_dotdot(const char *rel)
{
	const char *p = rel;

	while ((p = strstr(p, ".."))) {
		if ((p == rel || p[-1] == '/') && (!p[2] || p[2] == '/'))
			return 1;
		p += 2;
	}
	return 0;
}

static const char *skip_slashes(const char *rel)
{
	while (*rel == '/')
		rel++;
	return rel;
}

static int openat2_beneath(int dirfd, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
			   RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS,
	};
	long fd;
	int tries;

	/* EAGAIN: a rename raced the walk; the kernel asks to retry. */
	for (tries = 0; tries < 8; tries++) {
		fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return (int)fd;
}

/*
 * openat2 takes at most PATH_MAX bytes: a longer REL goes in pieces cut
 * at a '/', each below the directory the one before reached (with the
 * same rules, so the whole walk stays below DIRFD).
 */
static int openat2_long(int dirfd, const char *rel, int flags)
{
	const char *cut;
	char *piece;
	int cur = dirfd, fd, e;

	while (strlen(rel) >= PATH_MAX) {
		for (cut = rel + PATH_MAX - 1; cut > rel && *cut != '/'; cut--)
			;
		piece = cut > rel ? strndup(rel, cut - rel) : NULL;
		fd = piece ? openat2_beneath(cur, piece, O_PATH | O_DIRECTORY)
			   : -1;
		e = piece ? errno : ENAMETOOLONG;
		free(piece);
		if (cur != dirfd)
			close(cur);
		if (fd < 0) {
			errno = e;
			return -1;
		}
		cur = fd;
		rel = skip_slashes(cut);
	}
	fd = openat2_beneath(cur, rel, flags);
	e = errno;
	if (cur != dirfd)
		close(cur);
	errno = e;
	return fd;
}

/* openat2 is missing (ENOSYS) or refused (EPERM: a seccomp filter). */
static int walk_instead(int err)
{
	return err == ENOSYS || err == ENAMETOOLONG || err == EPERM ||
	       err == EAGAIN;
}

/* The next component of *P into NAME (NAME_MAX + 1 bytes); 0 at the end. */
static int next_name(const char **p, char *name)
{
	const char *s = *p;
	size_t n;

	for (;;) {
		while (*s == '/')
			s++;
		if (!*s)
			return 0;
		n = strcspn(s, "/");
		if (n == 1 && s[0] == '.') {
			s++;
			continue;
		}
		if (n > NAME_MAX) {
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(name, s, n);
		name[n] = 0;
		*p = s + n;
		return 1;
	}
}

/* The walk without openat2: one directory at a time, each checked. */
static int walk_beneath(int dirfd, const char *rel)
{
	char name[NAME_MAX + 1];
	uint64_t id;
	struct stat st;
	int fd, nfd, more;

	if (nx_sp_mount_id(dirfd, &id))
		return -1;
	fd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	while (fd >= 0 && (more = next_name(&rel, name)) != 0) {
		nfd = more < 0 ? -1 :
		      openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
			     O_CLOEXEC);
		if (nfd < 0 && errno == ENOTDIR &&
		    fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode))
			errno = ELOOP;
		if (nfd >= 0 && nx_sp_on_mount(nfd, id)) {
			int e = errno;

			close(nfd);
			errno = e;
			nfd = -1;
		}
		close(fd);
		fd = nfd;
	}
	return fd;
}

int nx_sp_open_dir(int dirfd, const char *rel)
{
	int fd;

	rel = skip_slashes(rel);
	if (!*rel)
		return openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (has_dotdot(rel)) {
		errno = EXDEV;
		return -1;
	}
	fd = openat2_long(dirfd, rel, O_PATH | O_DIRECTORY);
	if (fd < 0 && walk_instead(errno))
		fd = walk_beneath(dirfd, rel);
	return fd;
}

int nx_sp_open_parent(int dirfd, const char *rel, char **base)
{
	const char *last;
	char *dir;
	size_t n;
	int fd;

	*base = NULL;
	rel = skip_slashes(rel);
	n = strlen(rel);
	while (n && rel[n - 1] == '/')
		n--;
	if (!n) {
		*base = strdup(".");
		return *base ? nx_sp_open_dir(dirfd, "") : -1;
	}
	for (last = rel + n; last > rel && last[-1] != '/'; last--)
		;
	if ((size_t)(rel + n - last) == 2 && !strncmp(last, "..", 2)) {
		errno = EXDEV;
		return -1;
	}
	dir = strndup(rel, last - rel);
	*base = strndup(last, rel + n - last);
	if (!dir || !*base) {
		free(dir);
		free(*base);
		*base = NULL;
		errno = ENOMEM;
		return -1;
	}
	fd = nx_sp_open_dir(dirfd, dir);
	free(dir);
	if (fd < 0) {
		free(*base);
		*base = NULL;
	}
	return fd;
}

int nx_sp_open(int dirfd, const char *rel, int flags)
{
	char *base;
	uint64_t id;
	int pfd, fd, e;

	flags |= O_NOFOLLOW | O_CLOEXEC;
	rel = skip_slashes(rel);
	if (!*rel)
		return openat(dirfd, ".", flags);
	if (has_dotdot(rel)) {
		errno = EXDEV;
		return -1;
	}
	fd = openat2_long(dirfd, rel, flags);
	if (fd >= 0 || !walk_instead(errno))
		return fd;
	pfd = nx_sp_open_parent(dirfd, rel, &base);
	if (pfd < 0)
		return -1;
	fd = openat(pfd, base, flags);
	/* The last name may be a mountpoint: crossing it leaves the mount. */
	if (fd >= 0 && !(flags & O_CREAT) &&
	    (nx_sp_mount_id(pfd, &id) || nx_sp_on_mount(fd, id))) {
		e = errno;
		close(fd);
		errno = e;
		fd = -1;
	}
	e = errno;
	close(pfd);
	free(base);
	errno = e;
	return fd;
}

int nx_sp_lstat(int dirfd, const char *rel, struct stat *st)
{
	int fd = nx_sp_open(dirfd, rel, O_PATH), rc, e;

	if (fd < 0)
		return -1;
	rc = fstat(fd, st);
	e = errno;
	close(fd);
	errno = e;
	return rc;
}

char *nx_sp_readlink(int dirfd, const char *name, size_t *len)
{
	size_t size = 0;
	char *buf = NULL;
	ssize_t n;

	for (;;) {
		/* the first time 256 bytes, then twice as many */
		if (nx_grow((void **)&buf, &size, size, 1, 256)) {
			free(buf);
			errno = ENOMEM;
			return NULL;
		}
		n = readlinkat(dirfd, name, buf, size);
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if ((size_t)n < size)
			break;
	}
	buf[n] = 0;
	if (len)
		*len = (size_t)n;
	return buf;
}

/* ------------------------------------------------------------------ */
/* Resolving a path given on the command line                          */

struct step {			/* a directory on the way from "/" */
	char *name;		/* its name in the one above ("" for "/") */
	dev_t dev;
	ino_t ino;
	uint64_t mnt;		/* the mount it is on */
	int root;		/* it is that mount's root: held open, else -1 */
};

struct walker {
	int cur;		/* O_PATH: the last step's directory */
	struct step *s;
	size_t n, cap;
	int nlinks;			/* links followed */
};

static void drop_step(struct walker *w)
{
	struct step *s = &w->s[--w->n];

	free(s->name);
	if (s->root >= 0)
		close(s->root);
}

static void walker_clear(struct walker *w)
{
	while (w->n)
		drop_step(w);
	if (w->cur >= 0)
		close(w->cur);
	w->cur = -1;
}

/* Enter the directory FD, reached by NAME from the last step; takes FD. */
static int push_step(struct walker *w, const char *name, int fd)
{
	struct step *s;
	struct stat st;
	uint64_t id;
	int e;

	if (nx_grow((void **)&w->s, &w->cap, w->n, sizeof(*w->s), 16)) {
		errno = ENOMEM;
		goto fail;
	}
	if (fstat(fd, &st) < 0 || nx_sp_mount_id(fd, &id))
		goto fail;
	s = &w->s[w->n];
	s->name = strdup(name);
	if (!s->name) {
		errno = ENOMEM;
		goto fail;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	s->mnt = id;
	s->root = -1;
	/* A step onto another mount lands on its root ("/" is one too,
	 * unless we are chrooted below a mount's root). */
	if ((w->n && w->s[w->n - 1].mnt != id) ||
	    (!w->n && is_mount_root(fd, id) == 1)) {
		s->root = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (s->root < 0) {
			free(s->name);
			goto fail;
		}
	}
	w->n++;
	if (w->cur >= 0)
		close(w->cur);
	w->cur = fd;
	return 0;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

static int walk_from_root(struct walker *w)
{
	int fd;

	walker_clear(w);
	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -1 : push_step(w, "", fd);
}

/* ".." through the kernel, which knows where a mount's root goes up to. */
static int walk_up(struct walker *w)
{
	const struct step *s;
	struct stat st;
	int fd;

	if (w->n <= 1)
		return 0;		/* ".." of "/" is "/" */
	fd = openat(w->cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	drop_step(w);
	s = &w->s[w->n - 1];
	/* Renamed meanwhile: we are not where the names say we are. */
	if (fstat(fd, &st) < 0 || st.st_dev != s->dev || st.st_ino != s->ino) {
		close(fd);
		errno = ESTALE;
		return -1;
	}
	close(w->cur);
	w->cur = fd;
	return 0;
}

/*
 * The rule for symbolic links: one that root or the caller owns, on a
 * mount whose owners are real.  On a FUSE mount a file's owner is what
 * its daemon reports: on a nextfs mount, whoever made the image, or the
 * caller with -o fakeroot; below any nextfs mountpoint, links are users'
 * no matter what they show.  1 it may be followed, 0 not, -1 with errno.
 */
static int link_trusted(const struct stat *st, uint64_t mnt_id)
{
	int fuse;

	if (st->st_uid != 0 && st->st_uid != geteuid())
		return 0;
	fuse = on_fuse_mount(mnt_id);
	return fuse < 0 ? -1 : !fuse;
}

/*
 * The link FD (O_PATH) in the last step's directory: may it be followed?
 * Then the rest of the walk is its target and REST.  NULL with errno.
 */
static char *follow_link(struct walker *w, int fd, const struct stat *st,
			 const char *rest)
{
	char *target, *todo = NULL;
	size_t len;
	int trusted = link_trusted(st, w->s[w->n - 1].mnt);

	if (trusted <= 0 || w->nlinks == MAX_LINKS) {
		if (!trusted || w->nlinks == MAX_LINKS)
			errno = ELOOP;
		return NULL;
	}
	w->nlinks++;
	target = nx_sp_readlink(fd, "", &len);
	if (!target)
		return NULL;
	if (!len) {
		free(target);
		errno = ENOENT;
		return NULL;
	}
	/* REST is "" or starts with "/": a "/" of its own would make a
	 * link to a file at the end of the path ask for a directory */
	if (asprintf(&todo, "%s%s", target, rest) < 0) {
		todo = NULL;
		errno = ENOMEM;
	} else if (target[0] == '/' && walk_from_root(w)) {
		free(todo);
		todo = NULL;
	}
	free(target);
	return todo;
}

/*
 * Walk *TODO from the last step (*TODO is replaced when a link is
 * followed).  The last component is left to the caller in *BASE
 * (malloced), or *BASE is NULL when the walk ends on a directory it
 * entered: the path ended in "/", "." or "..", or on a mount's root.
 */
static int walk_path(struct walker *w, char **todo, int flags, char **base)
{
	const char *pos = *todo, *after;
	char name[NAME_MAX + 1], *next;
	struct stat st;
	uint64_t id;
	int more, last, dir_only, fd;

	*base = NULL;
	while ((more = next_name(&pos, name)) > 0) {
		after = skip_slashes(pos);
		last = !*after;
		dir_only = pos != after;	/* "NAME/" */
		if (!strcmp(name, "..")) {
			if (walk_up(w))
				return -1;
			continue;
		}
		fd = openat(w->cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0) {
			if (fd >= 0)
				close(fd);
			else if (errno == ENOENT && last && !dir_only)
				break;		/* a name to create */
			return -1;
		}
		if (S_ISLNK(st.st_mode) &&
		    (!last || dir_only || (flags & NX_SP_FOLLOW_LAST))) {
			next = follow_link(w, fd, &st, pos);
			close(fd);
			if (!next)
				return -1;
			free(*todo);
			*todo = next;
			pos = next;
			continue;
		}
		if (S_ISDIR(st.st_mode) && (!last || dir_only ||
		    (nx_sp_mount_id(fd, &id) == 0 &&
		     id != w->s[w->n - 1].mnt))) {
			if (push_step(w, name, fd))
				return -1;
			if (last)
				return 0;	/* ends on a directory */
			continue;
		}
		close(fd);
		if (!last || dir_only) {
			errno = ENOTDIR;
			return -1;
		}
		break;
	}
	if (more < 0)
		return -1;
	if (more && !(*base = strdup(name))) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* A relative path starts where the working directory is. */
static int walk_to_cwd(struct walker *w)
{
	char *cwd = getcwd(NULL, 0), *todo = NULL, *base = NULL;
	struct stat a, b;
	int rc = -1;

	if (!cwd)
		return -1;
	if (asprintf(&todo, "%s/", cwd) < 0) {
		todo = NULL;
		errno = ENOMEM;
	} else if (!walk_path(w, &todo, 0, &base)) {
		/* The same directory, not one renamed into its place. */
		if (stat(".", &a) == 0 && fstat(w->cur, &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			rc = 0;
		else
			errno = ESTALE;
	}
	free(base);
	free(todo);
	free(cwd);
	return rc;
}

/* The place the walk ended on: the innermost mount and REL below it.
 * Takes BASE. */
static int walk_result(struct walker *w, char *base, int flags,
		       struct nx_sp_place *p)
{
	struct by_id b = { 0 };
	size_t k, i, len = 0;
	char *r;

	for (k = w->n; k-- > 0 && w->s[k].root < 0;)
		;
	if (k == (size_t)-1) {
		free(base);
		errno = EXDEV;		/* above our "/": not reachable */
		return -1;
	}
	/* A directory itself below the mount's root: name it from above. */
	if (!base && k != w->n - 1) {
		base = w->s[w->n - 1].name;
		w->s[w->n - 1].name = NULL;
		if (walk_up(w)) {
			free(base);
			return -1;
		}
	}
	for (i = k + 1; i < w->n; i++)
		len += 1 + strlen(w->s[i].name);
	len += base ? 1 + strlen(base) : 0;
	p->rel = r = malloc(len + 1);
	if (!r) {
		free(base);
		errno = ENOMEM;
		return -1;
	}
	for (i = k + 1; i < w->n; i++)
		r += sprintf(r, "/%s", w->s[i].name);
	if (base)
		sprintf(r, "/%s", base);
	else
		*r = 0;
	p->base = base ? p->rel + len - strlen(base) : p->rel + len;
	free(base);
	b.id = w->s[k].mnt;
	if (nx_sp_mountinfo_each(match_id, &b) != 1 || !b.path || !b.type) {
		free(b.path);
		free(b.type);
		errno = ESTALE;
		return -1;
	}
	p->mnt.path = b.path;
	p->mnt.type = b.type;
	p->mnt.id = b.id;
	if ((flags & NX_SP_FUSE) && strncmp(b.type, "fuse", 4)) {
		errno = EMEDIUMTYPE;
		return -1;
	}
	p->mnt.fd = w->s[k].root;
	w->s[k].root = -1;
	if (p->base[0]) {
		p->dirfd = w->cur;
		w->cur = -1;
	}
	return 0;
}

int nx_sp_locate(const char *path, int flags, struct nx_sp_place *p)
{
	struct walker w = { .cur = -1 };
	char *todo = NULL, *base = NULL;
	int rc = -1, e;

	memset(p, 0, sizeof(*p));
	p->mnt.fd = -1;
	p->dirfd = -1;
	if (!*path) {
		errno = ENOENT;
		return -1;
	}
	todo = strdup(path);
	if (!todo)
		errno = ENOMEM;
	else if (!walk_from_root(&w) &&
		 (path[0] == '/' || !walk_to_cwd(&w)) &&
		 !walk_path(&w, &todo, flags, &base))
		rc = walk_result(&w, base, flags, p);
	e = errno;
	free(todo);
	walker_clear(&w);
	free(w.s);
	if (rc)
		nx_sp_place_free(p);
	errno = e;
	return rc;
}

void nx_sp_place_free(struct nx_sp_place *p)
{
	nx_sp_mount_close(&p->mnt);
	if (p->dirfd >= 0)
		close(p->dirfd);
	free(p->rel);
	memset(p, 0, sizeof(*p));
	p->mnt.fd = -1;
	p->dirfd = -1;
}

int nx_sp_open_path(const char *path, int flags)
{
	struct nx_sp_place p;
	struct stat st;
	int fd, e;

	if (nx_sp_locate(path, NX_SP_FOLLOW_LAST, &p))
		return -1;
	/* What the walk left of the path: nothing followed any more. */
	if (p.base[0])
		fd = openat(p.dirfd, p.base, flags | O_NOFOLLOW | O_CLOEXEC);
	else
		fd = openat(p.mnt.fd, ".", flags | O_CLOEXEC);
	/* O_PATH | O_NOFOLLOW opens a link that appeared meanwhile. */
	if (fd >= 0 && (flags & O_PATH) && fstat(fd, &st) == 0 &&
	    S_ISLNK(st.st_mode)) {
		close(fd);
		fd = -1;
		errno = ELOOP;
	}
	e = errno;
	nx_sp_place_free(&p);
	errno = e;
	return fd;
}

int nx_sp_open_volume(const char *name)
{
	struct stat st;
	int fd = nx_sp_open_path(name, O_PATH), e;

	if (fd < 0 || fstat(fd, &st) < 0)
		goto fail;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		return fd;
	errno = S_ISDIR(st.st_mode) ? EISDIR : ENOTBLK;
fail:
	e = errno;
	if (fd >= 0)
		close(fd);
	errno = e;
	return -1;
}

char *nx_sp_fd_path(int fd)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return nx_sp_readlink(AT_FDCWD, proc, NULL);
}

char *nx_sp_mount_name(int fd, const char *path)
{
	char *name = NULL;

	if (geteuid() != 0)
		return strdup(path);
	if (asprintf(&name, "/proc/self/fd/%d", fd) < 0)
		return NULL;
	return name;
}

/*
 * May someone other than root make the name of the directory CHILD in
 * UP (both stat'ed) lead elsewhere?  Only who may rename in UP: its
 * owner and, unless UP is sticky, whoever may write it; in a sticky
 * directory also the entry's owner.
 */
static int others_may_rename(const struct stat *up, const struct stat *child)
{
	if (up->st_uid != 0)
		return 1;
	if (!(up->st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	return !(up->st_mode & S_ISVTX) || child->st_uid != 0;
}

int nx_sp_path_fixed(int fd)
{
	struct stat child, up;
	uint64_t id, last_id = 0;
	int cur, next, fixed = 1, fuse;

	cur = openat(fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0 || fstat(cur, &child) < 0)
		goto fail;
	for (;;) {
		if (nx_sp_mount_id(cur, &id))
			goto fail;
		if (id != last_id) {
			fuse = on_fuse_mount(id);
			if (fuse < 0)
				goto fail;
			if (fuse) {
				fixed = 0;	/* owners as a daemon says */
				break;
			}
			last_id = id;
		}
		next = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (next < 0 || fstat(next, &up) < 0) {
			if (next >= 0)
				close(next);
			goto fail;
		}
		close(cur);
		cur = next;
		if (up.st_dev == child.st_dev && up.st_ino == child.st_ino)
			break;			/* "/" */
		if (others_may_rename(&up, &child)) {
			fixed = 0;
			break;
		}
		child = up;
	}
	close(cur);
	return fixed;
fail:
	if (cur >= 0) {
		int e = errno;

		close(cur);
		errno = e;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* New files in a directory                                            */

static void temp_name(const char *prefix, char *name)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[6];
	size_t i, n;

	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet: O_EXCL keeps it safe, only guessable. */
		unsigned long x = (unsigned long)getpid() * 2654435761UL ^
				  (unsigned long)time(NULL) ^
				  (unsigned long)(uintptr_t)name;

		for (i = 0; i < sizeof(r); i++, x >>= 8)
			r[i] = (unsigned char)x;
	}
	n = (size_t)snprintf(name, NX_SP_TEMP_SIZE, "%.32s", prefix);
	for (i = 0; i < sizeof(r); i++) {
		name[n++] = hex[r[i] >> 4];
		name[n++] = hex[r[i] & 15];
	}
	name[n] = 0;
}

int nx_sp_temp_file(int dirfd, const char *prefix, char *name)
{
	int tries, fd = -1;

	for (tries = 0; tries < 100; tries++) {
		temp_name(prefix, name);
		fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL |
			    O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	return fd;
}

int nx_sp_temp_symlink(int dirfd, const char *prefix, const char *target,
		       char *name)
{
	struct stat st;
	char *now = NULL;
	int tries, fd;

	for (tries = 0; tries < 100; tries++) {
		temp_name(prefix, name);
		if (symlinkat(target, dirfd, name) == 0)
			break;
		if (errno != EEXIST)
			return -1;
	}
	fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	/* The directory's owner may have put something else there. */
	if (fstat(fd, &st) < 0 || !S_ISLNK(st.st_mode) ||
	    !(now = nx_sp_readlink(fd, "", NULL)) || strcmp(now, target)) {
		free(now);
		close(fd);
		errno = ESTALE;
		return -1;
	}
	free(now);
	return fd;
}

/* ------------------------------------------------------------------ */
/* Extended attributes through a descriptor                            */

static void proc_fd(char *buf, size_t size, int fd)
{
	snprintf(buf, size, "/proc/self/fd/%d", fd);
}

/* flistxattr, or for an O_PATH descriptor (EBADF) its /proc link. */
static ssize_t list_fd(int fd, char *buf, size_t size)
{
	char p[64];
	ssize_t n = flistxattr(fd, buf, size);

	if (n >= 0 || errno != EBADF)
		return n;
	proc_fd(p, sizeof(p), fd);
	return listxattr(p, buf, size);
}

static ssize_t get_fd(int fd, const char *name, char *buf, size_t size)
{
	char p[64];
	ssize_t n = fgetxattr(fd, name, buf, size);

	if (n >= 0 || errno != EBADF)
		return n;
	proc_fd(p, sizeof(p), fd);
	return getxattr(p, name, buf, size);
}

/* Ask for the size, then read; again if it grew in between. */
static char *read_sized(int fd, const char *name, size_t *len)
{
	char *buf = NULL;
	ssize_t n, got;

	for (;;) {
		n = name ? get_fd(fd, name, NULL, 0) : list_fd(fd, NULL, 0);
		if (n < 0)
			return NULL;
		free(buf);
		buf = malloc((size_t)n + 1);
		if (!buf) {
			errno = ENOMEM;
			return NULL;
		}
		got = name ? get_fd(fd, name, buf, (size_t)n) :
			     list_fd(fd, buf, (size_t)n);
		if (got >= 0)
			break;
		if (errno != ERANGE) {
			free(buf);
			return NULL;
		}
	}
	buf[got] = 0;
	*len = (size_t)got;
	return buf;
}

char *nx_sp_listxattr(int fd, size_t *len)
{
	return read_sized(fd, NULL, len);
}

char *nx_sp_getxattr(int fd, const char *name, size_t *len)
{
	return read_sized(fd, name, len);
}

int nx_sp_setxattr(int fd, const char *name, const void *value, size_t len)
{
	char p[64];

	if (fsetxattr(fd, name, value, len, 0) == 0)
		return 0;
	if (errno != EBADF)
		return -1;
	proc_fd(p, sizeof(p), fd);
	return setxattr(p, name, value, len, 0);
}

const char *nx_sp_why(int err)
{
	switch (err) {
	case ELOOP:
		return "a symbolic link on the way, which is not followed "
		       "(another user owns it, or it is on a FUSE mount such "
		       "as a nextfs mount)";
	case ENOTBLK:
	case EISDIR:
		return "not an image file or block device";
	case EXDEV:
		return "it leaves the mount (another mount or '..' on the "
		       "way)";
	case ESTALE:
		return "it changed while it was being resolved";
	case EMEDIUMTYPE:
		return "not on a nextfs mount";
	default:
		return strerror(err);
	}
}
