/*
 * repl_internal.h - state shared by the receive modules (not a public
 * contract: receive.h is).  receive.c owns the session and its cursor,
 * apply.c turns one decoded command into fs-layer calls, revert.c puts
 * the live tree back where a receive started.
 */
#ifndef NEXTFS_REPL_INTERNAL_H
#define NEXTFS_REPL_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/perm.h"
#include "nextfs/receive.h"
#include "nextfs/sendstream.h"

/* The cursor record (receive.h): system.nextfs.recv on the root inode. */
#define NX_RECV_CURSOR_XATTR	"system.nextfs.recv"

#define NX_CUR_INCREMENTAL	0x1	/* the stream has a parent */
#define NX_CUR_LOST_FOUND	0x2	/* an empty /lost+found was removed */

struct nx_cursor {
	uint32_t version;		/* the stream's */
	uint32_t flags;			/* NX_CUR_* */
	unsigned char uuid[NX_SS_UUID_LEN];
	uint64_t ctransid;
	unsigned char parent_uuid[NX_SS_UUID_LEN];
	uint64_t parent_ctransid;
	uint32_t parent_id;		/* the parent's snapshot id here */
	uint64_t index;			/* the first command not applied */
	uint64_t offset;		/* ... its offset in the stream */
	uint64_t hash;			/* prefix hash of those before it */
	/* a full stream's root as it was (rolled back to on failure) */
	uint32_t root_mode, root_uid, root_gid;
	int64_t root_atime, root_mtime;
	uint32_t root_atime_ns, root_mtime_ns;
	char name[NX_NAME_MAX + 1];	/* the snapshot */
};

/* Error classes of one command (apply.c -> receive.c). */
enum nx_fault {
	NX_FAULT_NONE,
	NX_FAULT_SPACE,			/* ENOSPC/EDQUOT: resumable */
	NX_FAULT_STREAM,		/* corrupt or hostile: roll back */
	NX_FAULT_VOLUME,		/* the volume failed: roll back */
};

struct nx_recv {
	struct nx_volume *vol;
	int flags;			/* NX_RECV_* */
	struct nx_recv_env env;
	struct nx_cred cred;		/* root, umask 0: the stream decides */
	struct nx_ss_decoder dec;
	unsigned char *buf;		/* bytes not decoded yet */
	size_t len, cap;
	int state;			/* RS_* (receive.c) */
	int pending;			/* a cursor was found at open */
	int positioned;			/* resume: at the cursor now */
	struct nx_cursor cur;		/* the cursor (pending or ours) */
	int cursor_dirty;		/* applied since it was written */
	uint64_t commit_bytes;		/* stream bytes since the last commit */
	struct nx_volume *pview;	/* the parent's view (store-owned) */
	ext2_ino_t park;		/* /.nextfs-receive, 0 until needed */
	enum nx_fault fault;		/* of the last failed command */
	struct nx_recv_stats st;
	char msg[768];
};

/* Set r->msg (printf) and return ERR. */
errcode_t nx_repl_fail(struct nx_recv *r, enum nx_fault fault, errcode_t err,
		       const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* apply.c */
/* Apply CMD (not SUBVOL/SNAPSHOT/END/RESUME) to the live tree. */
errcode_t nx_repl_apply(struct nx_recv *r, const struct nx_ss_cmd *cmd);
/* The directory /.nextfs-receive, created if CREATE (0 if absent). */
errcode_t nx_repl_park_dir(struct nx_recv *r, int create, ext2_ino_t *dir);
/* Remove NAME from DIR: its inode is released when this was its last name. */
errcode_t nx_repl_unlink(struct nx_recv *r, ext2_ino_t dir, const char *name,
			 int isdir);
/* Does the parent snapshot have INO, the same file as INODE? */
int nx_repl_parent_has(struct nx_recv *r, ext2_ino_t ino,
		       const struct ext2_inode_large *inode);
/*
 * NAME in DIR (INO, INODE) loses that name: if that would free an inode
 * the parent has, it moves into the parking directory instead (*PARKED).
 */
errcode_t nx_repl_maybe_park(struct nx_recv *r, ext2_ino_t dir,
			     const char *name, ext2_ino_t ino,
			     const struct ext2_inode_large *inode, int *parked);
/* "i<ino>": its name there. */
void nx_repl_park_name(ext2_ino_t ino, char name[32]);
/* Tell the environment (the kernel's caches) about a change. */
void nx_repl_changed(struct nx_recv *r, ext2_ino_t dir, const char *name);

/* revert.c */
/*
 * Remove everything below DIR (the root: but .snapshots and the parking
 * directory), depth first; inodes the parent has are parked, not freed.
 */
errcode_t nx_repl_empty_dir(struct nx_recv *r, ext2_ino_t dir);
/* Empty and remove /.nextfs-receive (the end of a complete receive). */
errcode_t nx_repl_drop_park(struct nx_recv *r);

/* Make the live tree equal to the parent's view again (receive.h). */
errcode_t nx_repl_revert(struct nx_recv *r);
/* A full stream's start: the live tree emptied, the root as recorded. */
errcode_t nx_repl_revert_full(struct nx_recv *r);

#endif
