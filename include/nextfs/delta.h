/*
 * delta.h - what changed between two trees of a volume, per inode: the
 * one classifier behind "nextfs diff" and "nextfs send".
 * Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - A source lists the trees (0: old, 1: new) and says what each inode
 *   is on each side; the classifier (delta.c) matches inodes across the
 *   trees by inode number and decides, per inode, whether it is a
 *   different file on each side (NX_DELTA_NEW: created, deleted, or its
 *   number reused), which names it lost and gained (renames, hard links
 *   added and removed), and whether its attributes, data or xattrs
 *   changed.  Two sources exist: the block maps of snapshot views
 *   (diff.c, nx_snap_delta(): offline, and in the daemon, which has the
 *   views open) and a stat walk through a mount (the nextfs tool's,
 *   for callers the daemon does not show its delta to).
 * - A source must remember (nx_delta_remember) at least every entry of a
 *   directory whose entries may have changed and every entry that names
 *   an inode that may have changed; more is harmless.  The root is
 *   remembered by the classifier itself (path "/", parent 0), and is
 *   always in the delta (what 0 when unchanged).
 * - For regular files the block-map source also gives the logical block
 *   ranges whose mapping differs (NX_DELTA_WANT_EXTENTS): an inode whose
 *   inode-table block reads the same in both trees is unchanged, and
 *   file data differs at most where the mappings do.  For a file that is
 *   new (or a full delta) they are its mapped ranges: a hole is not
 *   listed.
 * - A delta is self-contained (names and paths are copied into it) and
 *   serialises to a byte string (nx_delta_encode/decode) the daemon hands
 *   out in chunks (nxioctl.h); decoding checks every length.
 * - nx_delta_diff() turns a delta into the lines of "nextfs diff",
 *   sorted by path ('-' before '+' before 'M' at the same path).
 * Paths have any length and depth (no PATH_MAX): they are built in
 * buffers that grow.  Nothing here is thread-safe.
 */
#ifndef NEXTFS_DELTA_H
#define NEXTFS_DELTA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>

/* An inode as the user sees it; mode 0: not on this side. */
struct nx_delta_attr {
	uint32_t mode;
	uint32_t uid, gid;
	uint32_t nlink;
	uint32_t gen;			/* tells a reused inode number */
	uint32_t gen_unknown;		/* the source could not read gen */
	uint32_t flags;			/* user-visible inode flags */
	uint64_t size;
	uint64_t rdev;			/* devices: makedev() form */
	struct timespec atime, mtime, ctime;
};

struct nx_delta_name {
	ext2_ino_t parent;		/* the directory's inode, 0 for the root */
	mode_t type;			/* S_IFREG, S_IFDIR, ... (the entry's) */
	char *name;			/* points into path */
	char *path;			/* "/a/b" from the tree's root, owned */
};

struct nx_delta_extent {
	uint64_t lblk, count;		/* logical blocks */
};

/* nx_delta_inode.what */
#define NX_DELTA_NEW	0x01	/* a different file on each side (or on one) */
#define NX_DELTA_NAMES	0x02	/* same file, names lost or gained */
#define NX_DELTA_ATTR	0x04	/* mode, owner, size, mtime, links, flags, rdev */
#define NX_DELTA_DATA	0x08	/* file content or symlink target */
#define NX_DELTA_XATTR	0x10	/* extended attributes (ACLs too) */
#define NX_DELTA_MODIFIED (NX_DELTA_ATTR | NX_DELTA_DATA | NX_DELTA_XATTR)

struct nx_delta_inode {
	ext2_ino_t ino;
	unsigned what;			/* NX_DELTA_* */
	struct nx_delta_attr attr[2];	/* [0] old, [1] new */
	struct nx_delta_name *names[2];	/* every name on each side */
	size_t nnames[2];
	/*
	 * Regular files, with NX_DELTA_WANT_EXTENTS from a block-map source
	 * (extents_known): the ranges of the new side to send; unknown
	 * otherwise (then all of it).
	 */
	struct nx_delta_extent *ext;
	size_t next;
	int extents_known;
};

struct nx_delta {
	struct nx_delta_inode *v;	/* inodes that changed, and the root */
	size_t n, cap;
	unsigned blocksize;		/* of the extents */
};

/* nx_delta_compute() and nx_snap_delta() flags */
#define NX_DELTA_WANT_EXTENTS	0x01	/* fill ext for regular files */
#define NX_DELTA_FULL		0x02	/* old side is an empty tree */

struct nx_delta_work;			/* the classifier's state */

struct nx_delta_source {
	/* Remember the entries of tree S (see the contract). */
	errcode_t (*walk)(struct nx_delta_source *src,
			  struct nx_delta_work *w, int s);
	/* INO on side S; mode 0 if it is not there. */
	errcode_t (*attr)(struct nx_delta_source *src, int s, ext2_ino_t ino,
			  struct nx_delta_attr *a);
	/*
	 * Same file on both sides (attr[] filled): add to D->what what
	 * changed of it (NX_DELTA_ATTR, DATA, XATTR), and with
	 * NX_DELTA_WANT_EXTENTS its extents.
	 */
	errcode_t (*compare)(struct nx_delta_source *src,
			     struct nx_delta_inode *d, unsigned flags);
	/* A new file (NX_DELTA_NEW, regular, on side 1): its extents. */
	errcode_t (*extents)(struct nx_delta_source *src,
			     struct nx_delta_inode *d);
	unsigned blocksize;
};

/*
 * Remember that tree S names INO as NAME in PARENT (path PATH, type
 * TYPE).  A = what the source knows of INO on that side (NULL: ask
 * src->attr later).  Sources call it from their walk.
 */
errcode_t nx_delta_remember(struct nx_delta_work *w, int s, ext2_ino_t ino,
			    ext2_ino_t parent, const char *path, mode_t type,
			    const struct nx_delta_attr *a);

/* Classify what SRC shows; *DELTA receives only changed inodes. */
errcode_t nx_delta_compute(struct nx_delta_source *src, unsigned flags,
			   struct nx_delta *delta);
void nx_delta_free(struct nx_delta *delta);
/* The name in V[0..N) with L's parent and name, or NULL. */
const struct nx_delta_name *nx_delta_find_name(const struct nx_delta_name *v,
					       size_t n,
					       const struct nx_delta_name *l);

/*
 * Paths of any length, for the sources' walks: *PATH[0..LEN) "/" NAME in
 * the buffer *PATH of *CAP bytes (grown); its new length, 0 out of memory.
 */
size_t nx_delta_path_at(char **path, size_t *cap, size_t len,
			const char *name);

/* Add one extent to D (merging with the previous one when adjacent). */
errcode_t nx_delta_add_extent(struct nx_delta_inode *d, uint64_t lblk,
			      uint64_t count);

/* ------------------------------------------------------------------ */
/* The lines of "nextfs diff". */

#define NX_DIFF_ADDED		'+'
#define NX_DIFF_REMOVED		'-'
#define NX_DIFF_MODIFIED	'M'
#define NX_DIFF_RENAMED		'R'

struct nx_diff_entry {
	int kind;			/* NX_DIFF_* */
	mode_t type;			/* S_IFREG, S_IFDIR, ... */
	const char *path;		/* "/a/b"; for R the old path */
	const char *newpath;		/* R only */
};

/* Return non-zero to stop. */
typedef int (*nx_diff_fn)(void *priv, const struct nx_diff_entry *e);

/*
 * Every line of DELTA, sorted by path, to FN.  Renames are reported for
 * the entry that moved (a renamed directory's children are not listed
 * unless they changed themselves); M is reported at the new path; a path
 * replaced by a different file is '-' and '+'.
 */
errcode_t nx_delta_diff(const struct nx_delta *delta, nx_diff_fn fn,
			void *priv);

/* ------------------------------------------------------------------ */
/* The byte form (the daemon's NX_IOC_DELTA_READ stream). */

errcode_t nx_delta_encode(const struct nx_delta *delta, char **buf,
			  size_t *len);
/* EXT2_ET_BAD_MAGIC / EINVAL on anything malformed; *DELTA then empty. */
errcode_t nx_delta_decode(const char *buf, size_t len,
			  struct nx_delta *delta);

#endif
