/*
 * safepath.h - acting on paths that other users control.  Layer: fuse/
 * (nextfs-fuse resolves its image and mountpoint here), used by cli/ too;
 * it calls nothing of nextfs but nx_grow() (devname.h calls it, as its
 * resolver).
 *
 * The nextfs tool is often run by root on paths below directories other
 * users own (a mount with allow_other that several users share).  Turning
 * such a path into a string (realpath) and later acting on the string
 * lets the owner of any directory on the way swap it for a symbolic link
 * in between, and root then reads or writes wherever the link points.
 * So every command that acts on a path it was given resolves it once,
 * here, into open directories or files, and acts relative to those.  The
 * same goes for the images, devices and mountpoints the tools and
 * nextfs-fuse are given (nx_sp_open_path).
 *
 * Contract:
 * - nx_sp_locate() walks a path from "/" (or the working directory) one
 *   component at a time with openat(O_PATH | O_NOFOLLOW).  A symbolic
 *   link is followed only when root or the caller owns it, and never on
 *   a FUSE mount, whose daemon says who owns its files (/var/run -> /run
 *   is followed; a link below a nextfs mountpoint never is, whoever it
 *   shows as its owner).  The result holds the mount's root and the
 *   directory that holds the last component open; the last component
 *   itself is not followed unless NX_SP_FOLLOW_LAST says so (then under
 *   the same rule).
 * - nx_sp_open_path() resolves a path the same way, following the last
 *   component, and opens the file or directory it ends on: what was
 *   resolved is what is held, and acted on through the descriptor (or
 *   /proc/self/fd/N, devname.h) from then on.
 * - Below an open directory (nx_sp_open*, nx_sp_lstat), nothing is
 *   followed and the mount is never left: openat2() with RESOLVE_BENEATH
 *   | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV (a path longer than PATH_MAX
 *   in pieces, each below the last), or where the kernel lacks it a walk
 *   with openat(O_PATH | O_DIRECTORY | O_NOFOLLOW) and a mount check per
 *   component.  ".." is refused.  Paths of any length.
 * - A mountpoint known only as a string (from /proc/self/mountinfo) is
 *   opened with nx_sp_mount_open(), which accepts the directory only if
 *   it is the root of the mount mountinfo lists at exactly that path: a
 *   redirected open fails instead of reaching another mount.
 * - Callers act on the last component with the *at() calls relative to
 *   its directory (AT_SYMLINK_NOFOLLOW, O_NOFOLLOW) and on files through
 *   descriptors: fchown, fchmod, futimens, fsetxattr; new files are made
 *   in that directory under a random name with O_CREAT | O_EXCL |
 *   O_NOFOLLOW (nx_sp_temp_file) and renamed with renameat() within it.
 * - Functions return a descriptor or 0, or -1 with errno set: ELOOP a
 *   symbolic link that is not followed, EXDEV the path leaves the mount
 *   (or contains ".."), ESTALE a mountpoint that changed while it was
 *   being opened, EMEDIUMTYPE not on a FUSE mount (NX_SP_FUSE).  They
 *   print nothing; nx_sp_why() words an errno for a message.
 */
#ifndef NEXTFS_SAFEPATH_H
#define NEXTFS_SAFEPATH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* nx_sp_locate() and nx_sp_mount_open() flags. */
#define NX_SP_FUSE		0x1	/* the mount must be a FUSE mount */
#define NX_SP_FOLLOW_LAST	0x2	/* follow a last component that is a
					   symbolic link (same rules) */
#define NX_SP_PATH_ONLY		0x4	/* open the mount's root O_PATH: no
					   request reaches its daemon */

/* A mount, held by its root directory. */
struct nx_sp_mount {
	int fd;			/* its root: O_RDONLY (O_PATH with
				   NX_SP_PATH_ONLY or from nx_sp_locate) */
	uint64_t id;		/* mountinfo's mount id */
	char *path;		/* its mountpoint, as mountinfo spells it */
	char *type;		/* its file system type ("fuse.nextfs") */
};

/* Where a path led: a mount and a place below its root. */
struct nx_sp_place {
	struct nx_sp_mount mnt;
	char *rel;		/* below the root: "" (the root) or "/a/b" */
	int dirfd;		/* O_PATH: the directory holding the last
				   component; -1 when REL is "" */
	const char *base;	/* the last component (in REL); "" for the
				   root */
};

/*
 * Resolve PATH (see the contract).  The last component need not exist
 * (its directory must).  Fills *P (free with nx_sp_place_free) and
 * returns 0, or -1 with errno.
 */
int nx_sp_locate(const char *path, int flags, struct nx_sp_place *p);
void nx_sp_place_free(struct nx_sp_place *p);

/*
 * Open the root of the mount at MOUNTPOINT (absolute, as mountinfo
 * spells it) and check it is that mount's root (see the contract).
 * nx_sp_mount_pin: the same check of FD, opened by the caller (taken,
 * closed on failure).
 */
int nx_sp_mount_open(const char *mountpoint, int flags,
		     struct nx_sp_mount *m);
int nx_sp_mount_pin(int fd, const char *mountpoint, int flags,
		    struct nx_sp_mount *m);
void nx_sp_mount_close(struct nx_sp_mount *m);

/*
 * Below DIRFD, never following a symbolic link nor leaving its mount;
 * REL is "a/b" or "/a/b" ("" or "/": DIRFD itself).
 *  nx_sp_open_dir:    the directory REL, O_PATH.
 *  nx_sp_open_parent: the directory holding REL's last component, O_PATH;
 *                     *BASE (malloced) that component ("." for DIRFD).
 *  nx_sp_open:        REL itself with open FLAGS (O_NOFOLLOW added: a
 *                     symbolic link opens only with O_PATH).
 *  nx_sp_lstat:       lstat of REL.
 */
int nx_sp_open_dir(int dirfd, const char *rel);
int nx_sp_open_parent(int dirfd, const char *rel, char **base);
int nx_sp_open(int dirfd, const char *rel, int flags);
int nx_sp_lstat(int dirfd, const char *rel, struct stat *st);

/*
 * PATH resolved (see the contract, NX_SP_FOLLOW_LAST) and what it ends on
 * opened with FLAGS (O_NOFOLLOW added; with O_PATH a symbolic link that
 * replaced it meanwhile is refused, ELOOP): a descriptor, or -1 with
 * errno.  nx_sp_fd_path: where FD is now, as the kernel spells it
 * (/proc/self/fd/N; for a mountpoint what mountinfo will say), malloced.
 */
int nx_sp_open_path(const char *path, int flags);
char *nx_sp_fd_path(int fd);

/*
 * The volume NAME (an image file or a block device) resolved and opened
 * O_PATH, for devname.h (nx_dev_set_resolver): a descriptor, or -1 with
 * errno (EISDIR, ENOTBLK: neither a file nor a block device).
 */
int nx_sp_open_volume(const char *name);

/*
 * What to give libfuse's fuse_session_mount() to mount on the directory
 * FD (named PATH), malloced.  For root "/proc/self/fd/FD": mount(2)
 * follows it to that very directory whatever PATH leads to by now,
 * mountinfo records where the directory is, and libfuse unmounts through
 * the same name (keep FD open until then).  For other users PATH: their
 * mount goes through fusermount3, which resolves it again under their
 * own permissions (and refuses a /proc name).
 */
char *nx_sp_mount_name(int fd, const char *path);

/*
 * 1 if no one but root can make the path of the directory FD lead
 * elsewhere: every directory above it is root's and writable by root
 * alone (or sticky, and the entry in it root's), and none is on a FUSE
 * mount.  For handing the path to a program that resolves it again
 * (fusermount3).  0 if someone else can, -1 with errno.
 */
int nx_sp_path_fixed(int fd);

/*
 * The mount made on the directory DIRFD after DIRFD was opened (DIRFD then
 * holds the directory underneath, on the mount below): the mount that
 * mountinfo lists on DIRFD's mount at the path where DIRFD is now (the
 * topmost, if several).  No name is looked up and nothing on that mount
 * is opened, so its daemon is asked nothing.  Its device numbers and its
 * type (TYPE: LEN bytes, "fuse.nextfs"); 0, or -1 with errno (ENOENT:
 * nothing is mounted there).
 */
int nx_sp_mount_over(int dirfd, unsigned *major, unsigned *minor,
		     char *type, size_t len);

/* 0 if FD is on the mount MNT_ID and not the root of another, else -1
 * with EXDEV.  nx_sp_mount_id: FD's mount id. */
int nx_sp_mount_id(int fd, uint64_t *mnt_id);
int nx_sp_on_mount(int fd, uint64_t mnt_id);

/* The target of the symbolic link NAME in DIRFD ("" : DIRFD is the
 * link, opened O_PATH), any length: malloced, NUL-terminated. */
char *nx_sp_readlink(int dirfd, const char *name, size_t *len);

/*
 * A new file (nx_sp_temp_file: opened O_RDWR, mode 0600) or symbolic
 * link to TARGET (nx_sp_temp_symlink: opened O_PATH) in DIRFD named
 * PREFIX and random characters; NAME (NX_SP_TEMP_SIZE bytes) gets its
 * name.  PREFIX is at most 32 bytes.
 */
#define NX_SP_TEMP_SIZE	64
int nx_sp_temp_file(int dirfd, const char *prefix, char *name);
int nx_sp_temp_symlink(int dirfd, const char *prefix, const char *target,
		       char *name);

/*
 * Extended attributes of the file FD holds, any type (a symbolic link
 * opened O_PATH too; through /proc/self/fd, the one way to reach a
 * link's attributes without its name).  nx_sp_listxattr: the names,
 * malloced, *LEN bytes; nx_sp_getxattr: the value, malloced, *LEN bytes;
 * NULL with errno on failure.
 */
char *nx_sp_listxattr(int fd, size_t *len);
char *nx_sp_getxattr(int fd, const char *name, size_t *len);
int nx_sp_setxattr(int fd, const char *name, const void *value, size_t len);

/* A few words on why ERR stopped a path (strerror for the rest). */
const char *nx_sp_why(int err);

/*
 * /proc/self/mountinfo, one mount at a time (fields unescaped): FN gets
 * each; a non-zero return stops and is returned.  -1 with errno if the
 * file cannot be read.
 */
struct nx_sp_mntent {
	uint64_t id, parent;		/* the mount's id, its parent's */
	unsigned major, minor;
	const char *mnt, *type, *source;
};
int nx_sp_mountinfo_each(int (*fn)(void *priv,
				   const struct nx_sp_mntent *e),
			 void *priv);

#endif
