/*
 * cli.h - the pieces of the "nextfs" tool that its commands share.
 * Layer: cli/ (the top: it may call every layer below).
 *
 * nextfs.c holds main and the command table (struct nx_cli_cmd: a
 * command's name, arguments, usage, options, help and handler).  Each
 * handler is in a file of its own, cmd_NAME.c, which depends on the
 * shared modules declared here, never on another command.  The shared
 * modules:
 *   cli.c      messages, sizes, writing, and the volume an argument names
 *   cmdline.c  reading command lines by the table: parsing, help, usage
 *   mount.c    asking a running nextfs-fuse through its mountpoint
 *   snapact.c  taking and deleting snapshots on a target
 *   snaplist.c listing snapshots, as "snapshot list" and "info" show them
 *   compare.c  comparing two files of a mount
 *   mountdelta.c what changed between two trees of a mount
 *   progress.c a progress bar
 *   output.h   names, times and JSON as the tool prints them
 */
#ifndef NEXTFS_CLI_H
#define NEXTFS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <et/com_err.h>

/* Exit codes scripts can rely on. */
#define NX_CLI_OK	0
#define NX_CLI_FAIL	1	/* the operation failed; nothing changed */
#define NX_CLI_USAGE	2	/* bad command line */

/* ------------------------------------------------------------------ */
/* cli.c                                                               */

/*
 * "nextfs: " + message + newline on stderr; always one line (control
 * characters in names it quotes come out escaped, output.h).
 */
void nx_cli_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
void nx_cli_human_size(uint64_t bytes, char *buf, size_t len);
/* All LEN bytes of BUF to FD at OFF (nx_write_all, fdio.h): 0, or -1
 * with errno. */
int nx_cli_pwrite_all(int fd, const void *buf, size_t len, off_t off);

/*
 * Resolve the image or device IMAGE once, under the rules of safepath.h
 * (a symbolic link of another user's, or on a FUSE mount, is refused),
 * and pin the name to the file found (devname.h): every later open of
 * IMAGE in this process, by any layer, reaches that file.  NX_CLI_OK, or
 * NX_CLI_FAIL after a message.  (The tools set nx_sp_open_volume as the
 * resolver, so a name used without this is resolved the same way; this
 * is for the message.)
 */
int nx_cli_pin_image(const char *image);
/*
 * Open IMAGE for reading through the snapshot engine (nx_open_volume with
 * NX_VOL_RDONLY), printing the reason on failure.  Returns 0 or
 * NX_CLI_FAIL.
 */
struct nx_volume;
int nx_cli_open_image(const char *image, struct nx_volume **vol);
int nx_cli_is_dir(const char *path);
/* Where IMAGE (a file or block device) is mounted by FUSE (malloced);
 * *SOURCE (if not NULL): that mount's source, as mountinfo spells it. */
char *nx_cli_find_mount(const char *image, char **source);
/*
 * The volume TARGET names: a nextfs-fuse mountpoint (*MNT, malloced), an
 * image or device (*VOL, opened with nx_open_volume FLAGS), or an image
 * a nextfs-fuse daemon serves (*MNT: its mountpoint).  A command that
 * writes (not NX_VOL_RDONLY) must be given the root of a mount, where
 * .snapshots is.
 */
int nx_cli_open_target(const char *target, int flags, struct nx_volume **vol,
		       char **mnt);

/* ------------------------------------------------------------------ */
/* cmdline.c - the command table                                       */

/*
 * Every command line is read by one parser, from the command's entry in
 * the table, so that every command behaves the same: options anywhere
 * before "--" (a name that starts with '-' goes after it), "-h" and
 * "--help" print the command's help on stdout (exit 0), and a command
 * line that is wrong - an unknown option, an option without its value,
 * a required option missing, too few or too many arguments - gets one
 * line saying what, then the usage on stderr, and the command's usage
 * status (NX_CLI_USAGE unless it says otherwise).
 */
/*
 * What an option means to the handler: where the parser puts it
 * (opt[SLOT], val[SLOT] of struct nx_cli_args).  One list for every
 * command, so that the table in nextfs.c can spell each command's
 * options: a new meaning gets a new slot here.
 */
enum nx_cli_slot {
	NX_OPT_JSON,		/* --json */
	NX_OPT_FORMAT,		/* snapshot list: NX_LIST_* */
	NX_OPT_VERBOSE,		/* -v */
	NX_OPT_FORCE,		/* export -f: replace the output; receive
				   -F: empty or roll back the live tree */
	NX_OPT_REPAIR,		/* check -r */
	NX_OPT_NO_FSCK,		/* check --no-fsck */
	NX_OPT_VIEWS,		/* check --views */
	NX_OPT_DESTROY,		/* restore --destroy-newer */
	NX_OPT_TYPES,		/* diff -F: file types */
	NX_OPT_KEEP,		/* snapshot prune --keep SPEC */
	NX_OPT_DRY_RUN,		/* snapshot prune --dry-run */
	NX_OPT_RESTORE,		/* versions --restore NAME */
	NX_OPT_TO,		/* versions --to DEST */
	NX_OPT_MOUNT_OPTIONS,	/* mount helper -o OPTIONS */
	NX_OPT_FAKE,		/* mount helper -f */
	NX_OPT_NOMTAB,		/* mount and umount helpers -n */
	NX_OPT_SLOPPY,		/* mount helper -s */
	NX_OPT_FSTYPE,		/* mount and umount helpers -t TYPE */
	NX_OPT_NAMESPACE,	/* mount helper -N NAMESPACE */
	NX_OPT_PARENT,		/* send -p PARENT */
	NX_OPT_OUTPUT,		/* send -o FILE */
	NX_OPT_RESUME,		/* send --resume TOKEN; receive --resume */
	NX_OPT_SINCE,		/* export --since OLD */
	NX_OPT_INPUT,		/* receive -f FILE */
	NX_OPT_ABORT,		/* receive --abort */
	NX_OPT_TOKEN,		/* receive --token */
	NX_OPT_RECURSIVE,	/* defrag -r */
	NX_OPT_IMAGE,		/* defrag --image IMAGE */
	NX_OPT_WAIT,		/* snapshot delete --wait */
	NX_CLI_SLOTS
};

/* NX_OPT_FORMAT of "snapshot list". */
enum nx_list_format { NX_LIST_TABLE, NX_LIST_JSON, NX_LIST_NAMES0 };

/*
 * One option.  NAMES: its spellings, "-r|--repair".  VALUE: NULL for a
 * flag; for an option with a value, "KIND:NAME" - NAME as the usage
 * names it, KIND what bash completion offers for it ("keep" retention
 * rules, "snap" the snapshots of the first argument's volume, "file",
 * "" nothing).  "--opt VALUE" and "--opt=VALUE" both work.  Given, it
 * sets opt[SLOT] = SET (and val[SLOT] = its value); the last one given
 * wins.  HIDDEN: accepted but neither shown nor completed (aliases, the
 * arguments mount(8) and umount(8) pass their helpers).  REQUIRED: the
 * command line is wrong without it.
 */
struct nx_cli_opt {
	const char *names;
	const char *value;
	int slot, set;
	int hidden, required;
};

struct nx_cli_cmd;

/* A command line as the handler gets it. */
struct nx_cli_args {
	const struct nx_cli_cmd *cmd;
	const char *name;	/* for messages: "snapshot take" */
	const char *prog;	/* for the usage: "nextfs snapshot take" */
	char **pos;		/* the arguments, NULL-terminated */
	int npos;
	int opt[NX_CLI_SLOTS];	/* see struct nx_cli_opt; 0 if not given */
	const char *val[NX_CLI_SLOTS];
};

/* What runs a command: its exit status. */
typedef int nx_cli_handler(struct nx_cli_args *a);

/* struct nx_cli_cmd.flags */
#define NX_CMD_HIDDEN	0x1	/* not listed: mount helpers, internals */
#define NX_CMD_REST	0x2	/* after the first argument everything is
				   an argument as it is ("snapshot run TARGET
				   [--] COMMAND ARGS..."); a "--" right after
				   the first argument is dropped */
#define NX_CMD_CLUSTER	0x4	/* "-fv" is "-f -v" (one-letter flags) */

/*
 * A command, or a group of subcommands (SUBS set: "snapshot").
 * PARAMS names the arguments in order, each "KIND:NAME" ("target",
 * "image", "dir", "path", "snap", "new", "out", "cmd", "rest", "command":
 * what bash completion offers there); the first MIN are required, at most
 * MAX may be given (-1: any number).  USAGE: what follows "usage: nextfs
 * NAME " - one line per form, separated by '\n'.  SUMMARY: the line of
 * "nextfs --help".  HELP: what "--help" prints after the usage.
 */
struct nx_cli_cmd {
	const char *name;		/* "umount|unmount": first shown */
	const char *params;
	const char *usage;
	const char *summary;
	const char *help;
	const struct nx_cli_opt *opts;	/* ends with an entry without names */
	int min, max;
	unsigned flags;			/* NX_CMD_* */
	int usage_status;		/* 0: NX_CLI_USAGE */
	const char *unknown_hint;	/* said of an unknown option, instead
					   of where names with '-' go */
	nx_cli_handler *run;
	const struct nx_cli_cmd *const *subs;	/* NULL-terminated */
};

/*
 * Run CMD with ARGV (ARGV[0] is the command's own name): a group finds
 * its subcommand in ARGV[1].  NAME and PROG: how messages and the usage
 * name it ("" and "nextfs" for the whole tool).  The handler's status.
 */
int nx_cli_run(const struct nx_cli_cmd *cmd, const char *name,
	       const char *prog, int argc, char **argv);
/* A command line that is wrong in a way only the handler can tell: as
 * the parser's own (see above); returns the status to exit with. */
int nx_cli_usage_error(const struct nx_cli_args *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* "nextfs help WORDS...": the help of the command the arguments of A
 * name in TOP. */
int nx_cli_help(const struct nx_cli_cmd *top, struct nx_cli_args *a);
/*
 * For bash completion: one line per command, "PATH;OPTIONS;KINDS" -
 * "snapshot prune;--keep=keep --dry-run !-n --json;target": the options
 * as their NAMES, "=KIND" when they take a value, "!" before hidden ones;
 * the kinds of the arguments in order.
 */
void nx_cli_print_spec(const struct nx_cli_cmd *top);

/*
 * The handlers of the commands (cmd_*.c; mount_helper.c: mount(8)'s
 * helper, nextfs called as mount.nextfs); the table in nextfs.c names
 * them.
 */
nx_cli_handler nx_cmd_snapshot_take, nx_cmd_snapshot_delete,
	nx_cmd_snapshot_list, nx_cmd_snapshot_prune, nx_cmd_snapshot_run,
	nx_cmd_snapshot_image,
	nx_cmd_versions, nx_cmd_check, nx_cmd_export, nx_cmd_diff,
	nx_cmd_send, nx_cmd_receive, nx_cmd_restore, nx_cmd_info,
	nx_cmd_umount, nx_cmd_defrag, nx_cmd_mount_helper;

/* ------------------------------------------------------------------ */
/* progress.c - a progress bar on stderr when it is a terminal.        */

struct nx_progress;
void nx_cli_progress_begin(struct nx_progress *prog);
void nx_cli_progress_end(struct nx_progress *prog);

/* ------------------------------------------------------------------ */
/*
 * mount.c - a running nextfs-fuse, asked through its mountpoint MNT
 * (nxioctl.h).  Each returns NX_CLI_OK or prints why not and returns
 * NX_CLI_FAIL.
 */
struct nx_snapinfo;
struct nx_ioc_volinfo;
/* All snapshots, oldest first (ino is 0); free *LIST. */
int nx_cli_mount_snapshots(const char *mnt, struct nx_snapinfo **list,
			   int *count, unsigned *blocksize);
int nx_cli_mount_volinfo(const char *mnt, struct nx_ioc_volinfo *vi);
/* The mount's pending deletes (snapshot.h); 0 and 0 from an older daemon. */
int nx_cli_mount_pending(const char *mnt, int *snaps, uint64_t *blocks);
/*
 * The root of the nextfs mount at MNT (its mountpoint as mountinfo spells
 * it), opened and checked with nx_sp_mount_open() (safepath.h; FLAGS:
 * NX_SP_PATH_ONLY): a descriptor, or -1 after a message.
 */
int nx_cli_mount_root(const char *mnt, int flags);

/* ------------------------------------------------------------------ */
/*
 * snapact.c - take and delete snapshot NAME on a target: a mountpoint
 * (MNT, through MNT/.snapshots) or an image opened read-write (VOL, under
 * its lock).  nx_cli_target_open: nx_cli_open_target() into *T;
 * nx_cli_target_close: frees it, and closes the volume (NX_CLI_FAIL
 * after a message if that failed).  nx_cli_take fits nx_tl_take()
 * (retention.h); both return an errno or errcode_t.  nx_cli_flush_mount:
 * syncfs(MNT) (dirty mmap'ed pages reach the daemon); a failed flush is a
 * warning (the take goes on); NX_CLI_FAIL after a message only if MNT
 * cannot be opened.
 */
struct nx_cli_target {
	char *mnt;
	struct nx_volume *vol;
};
int nx_cli_target_open(const char *target, int flags,
		       struct nx_cli_target *t);
int nx_cli_target_close(struct nx_cli_target *t);
int nx_cli_flush_mount(const char *mnt);
errcode_t nx_cli_take(void *target, const char *name);
errcode_t nx_cli_delete(struct nx_cli_target *t, const char *name);

/* ------------------------------------------------------------------ */
/*
 * compare.c - do the regular files (symbolic links) RA and RB, below the
 * directories DA and DB (nx_sp_open: nothing followed), hold the same
 * data (target)?  1 they differ, 0 the same, -1 with errno when one
 * cannot be read.
 */
int nx_cli_files_differ(int da, const char *ra, int db, const char *rb);
int nx_cli_links_differ(int da, const char *ra, int db, const char *rb);

/* ------------------------------------------------------------------ */
/*
 * mountdelta.c - the delta (delta.h) between two trees of one nextfs-fuse
 * mount.  nx_cli_daemon_delta asks the daemon through the directory FD
 * (any of the mount) for the block-map delta from snapshot OLD_ID to
 * NEW_ID (0: the live tree), NX_IOC_DELTA_* FLAGS: 0, or -1 with errno
 * (EPERM: the daemon shows it only to root and the mounting user; ENOTTY:
 * not a daemon that has it).  nx_cli_walk_delta walks the trees at the
 * directories ROOT0 and ROOT1 (both on the mount MNT_ID) instead: 0, or
 * NX_CLI_FAIL with the error printed.
 */
struct nx_delta;
int nx_cli_daemon_delta(int fd, uint32_t old_id, uint32_t new_id,
			unsigned flags, struct nx_delta *delta);
int nx_cli_walk_delta(int root0, int root1, uint64_t mnt_id,
		      struct nx_delta *delta);
/*
 * Snapshot NAME of the mount of the open directory FD (NX_IOC_SNAP_NEXT:
 * id, take time, ...) and its list position (0: the oldest); -1 with
 * errno if the mount does not say (ENOENT: no such snapshot).
 */
struct nx_ioc_snap;
int nx_cli_snap_at(int fd, const char *name, struct nx_ioc_snap *q,
		   int *pos);

/*
 * snaplist.c - the snapshots of a target, as "snapshot list" and "info"
 * show them.  TARGET is a mountpoint, an image, or an image in use by a
 * mount (then asked through that mount).
 */
struct nx_cli_snaps {
	struct nx_snapinfo *s;		/* oldest first; free with free() */
	int n;
	unsigned blocksize;
	char *mnt;			/* the mount asked, or NULL (offline) */
	int partial;			/* the daemon gave only the public part
					   of the superblock (nxioctl.h) */
	int pending;			/* deleted, hand-over not done */
	uint64_t pending_blocks;	/* ... what those still hold */
};

/* ... and, if SB is not NULL, the volume's superblock as it is now. */
struct ext2_super_block;
int nx_cli_snaps_get(const char *target, struct nx_cli_snaps *out,
		     struct ext2_super_block *sb);
/* From an open volume (offline). */
int nx_cli_snaps_of_volume(struct nx_volume *vol, struct nx_cli_snaps *out);
void nx_cli_snaps_free(struct nx_cli_snaps *snaps);
/* The table: ID NAME TAKEN USED (HELD and ACTIVE with INFO_COLUMNS). */
void nx_cli_snaps_table(const struct nx_cli_snaps *snaps, int info_columns);
/* A JSON array of {"id", "name", "taken", "taken_epoch", "used_bytes",
 * "active"} as the value of KEY (NULL: at the top). */
struct nx_json;
void nx_cli_snaps_json(struct nx_json *j, const char *key,
		       const struct nx_cli_snaps *snaps);

#endif
