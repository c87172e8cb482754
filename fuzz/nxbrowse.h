/*
 * nxbrowse.h - open an image the way a mount does and look at everything
 * in it, with hard bounds on work, for the fuzzer and the regression test.
 *
 * The walk uses only the read side of the fs layer (lookup, readdir with
 * cookie resume, getattr, readlink, file read, SEEK_DATA/SEEK_HOLE,
 * xattrs, inode flags) on the live tree and then on every snapshot view.
 * Errors from those calls are expected on corrupt images and are only
 * counted; what must never happen is a crash, a sanitizer report, a hang,
 * or a result that breaks the fs layer's contract (counted as violations).
 * nxb_rw_session() does the same through a read-write open, with a small
 * write workload, a close and a second open (see below).
 */
#ifndef NEXTFS_FUZZ_NXBROWSE_H
#define NEXTFS_FUZZ_NXBROWSE_H

#include <stddef.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

struct nxb_stats {
	unsigned long dirs;		/* directories listed */
	unsigned long entries;		/* directory entries seen */
	unsigned long files;		/* regular files read */
	unsigned long bytes;		/* file bytes read */
	unsigned long xattrs;		/* xattr values read */
	unsigned long errors;		/* fs-layer calls that failed cleanly */
	unsigned long views;		/* snapshot views opened */
	unsigned long odd_names;	/* entry names with NUL or '/' inside */
	unsigned long violations;	/* contract breaches (see nxbrowse.c) */
	char violation[160];		/* the first one, for the report */
	errcode_t open_err;		/* nx_open_volume() result */
	char open_msg[256];		/* its message */
	/* read-write sessions (nxb_rw_session) */
	int rw;				/* this was a read-write session */
	unsigned long writes_ok;	/* workload calls that succeeded */
	int left_open;			/* an unlinked file was left open */
	int snap_taken;			/* the workload took a snapshot */
	int consistent;			/* bitmaps agree with the inodes */
	errcode_t close_err;		/* first session's nx_volume_close() */
	errcode_t reopen_err;		/* second open, or -1 if not tried */
	char reopen_msg[256];
	errcode_t close2_err;		/* second session's close */
};

/*
 * Known-issue mask for fuzzing past a reported bug: directories larger
 * than this are not listed (0, the default: no limit).
 */
extern uint64_t nxb_max_dir_size;

/* Walk one volume or view from its root (caller holds the live lock). */
void nxb_walk(struct nx_volume *vol, struct nxb_stats *st);

/* Walk the live tree, then every snapshot through its view. */
void nxb_browse(struct nx_volume *vol, struct nxb_stats *st);

/*
 * nx_open_volume(PATH, NX_VOL_RDONLY), browse, close.  Returns 0 when the
 * image was refused cleanly or browsed to the end with only clean errors,
 * -1 when something the caller should treat as a bug was seen
 * (a contract violation: an error code that is neither errno nor
 * libext2fs, a readdir that does not progress, a read returning more
 * than asked or past EOF, a failing read-only close).
 */
int nxb_open_and_browse(const char *path, struct nxb_stats *st);

/*
 * What a mount does read-write, twice: nx_open_volume(PATH, 0) (which
 * replays the journal, frees orphans, attaches snapshots, starts
 * transactions), browse, a small bounded write workload (create + 8 KiB
 * write, mkdir, a file unlinked while still open so that it stays an
 * orphan, a snapshot if there is room, overwrite after it, sync), close;
 * then open read-write again (the orphan is freed), browse, close.
 * PATH is written to.  Contract violations on top of the browse's:
 * an error code that is neither errno nor libext2fs; a successful
 * read-write open that left s_last_orphan set; and if the opened volume's
 * bitmaps agree with its inodes (no block or inode in use is marked
 * free, no block is claimed twice: otherwise writing may overwrite what
 * is in use, as the kernel would, and what the next open sees is not
 * nextfs's doing): a second open refused although the first session
 * closed without error; a successful close that left the journal holding
 * transactions (jsb s_start != 0) or s_last_orphan set while nothing was
 * left open.  Returns as nxb_open_and_browse.
 */
int nxb_rw_session(const char *path, struct nxb_stats *st);

/*
 * The on-disk state of a closed volume, read with plain libext2fs: the
 * journal superblock's s_start (0 without a journal) and s_last_orphan.
 */
errcode_t nxb_disk_state(const char *path, uint32_t *jstart,
			 uint32_t *last_orphan);

#endif
