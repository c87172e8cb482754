/*
 * cli.h - shared pieces of the "nextfs" command: exit codes, error
 * printing, and one function per subcommand (cmd_*.c).
 */
#ifndef NEXTFS_CLI_H
#define NEXTFS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <et/com_err.h>

/* Exit codes scripts can rely on. */
#define NX_CLI_OK	0
#define NX_CLI_FAIL	1	/* the operation failed; nothing changed */
#define NX_CLI_USAGE	2	/* bad command line */

/*
 * "nextfs: " + message + newline on stderr; always one line (control
 * characters in names it quotes come out escaped, output.h).
 */
void nx_cli_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
void nx_cli_human_size(uint64_t bytes, char *buf, size_t len);

/*
 * Command lines.  ARGV[1..] holds options (OPTS: NAMES is "-r|--repair";
 * each sets *FLAG = VALUE) and positional arguments (names, paths, also
 * "-" alone and everything after "--"), which go to ARGS[0..MAX).
 * Returns NX_CLI_OK with *NARGS positional arguments (more than MAX when
 * there were too many), NX_CLI_HELP for -h/--help, or NX_CLI_USAGE after
 * saying which option CMD does not know.
 */
#define NX_CLI_HELP	(-1)

struct nx_cli_opt {
	const char *names;
	int *flag;
	int value;
};

int nx_cli_parse(int argc, char **argv, const char *cmd,
		 const struct nx_cli_opt *opts, const char **args, int max,
		 int *nargs);

int nx_cmd_snapshot(int argc, char **argv);
/* "snapshot prune" (cmd_prune.c); ARGV[0] is "prune". */
int nx_cmd_snapshot_prune(int argc, char **argv);
int nx_cmd_snapshot_run(int argc, char **argv);	/* cmd_run.c */
int nx_cmd_versions(int argc, char **argv);	/* cmd_versions.c */
int nx_cmd_check(int argc, char **argv);
int nx_cmd_export(int argc, char **argv);
int nx_cmd_diff(int argc, char **argv);
int nx_cmd_restore(int argc, char **argv);
int nx_cmd_info(int argc, char **argv);
int nx_cmd_umount(int argc, char **argv);
/* mount(8)'s helper: nextfs called as mount.nextfs (mount_helper.c). */
int nx_mount_helper(int argc, char **argv);

/* progress.c: a progress bar on stderr when it is a terminal. */
struct nx_progress;
void nx_cli_progress_begin(struct nx_progress *prog);
void nx_cli_progress_end(struct nx_progress *prog);

/*
 * Open IMAGE for reading through the snapshot engine (nx_open_volume with
 * NX_VOL_RDONLY), printing the reason on failure.  Returns 0 or
 * NX_CLI_FAIL.  (cmd_diff.c)
 */
struct nx_volume;
int nx_cli_open_image(const char *image, struct nx_volume **vol);

/*
 * mount.c - a running nextfs-fuse, asked through its mountpoint MNT
 * (nxioctl.h).  Each returns NX_CLI_OK or prints why not and returns
 * NX_CLI_FAIL.
 */
struct nx_snapinfo;
struct nx_ioc_volinfo;
int nx_cli_is_dir(const char *path);
/* All snapshots, oldest first (ino is 0); free *LIST. */
int nx_cli_mount_snapshots(const char *mnt, struct nx_snapinfo **list,
			   int *count, unsigned *blocksize);
int nx_cli_mount_volinfo(const char *mnt, struct nx_ioc_volinfo *vi);
/*
 * The root of the nextfs mount at MNT (its mountpoint as mountinfo spells
 * it), opened and checked with nx_sp_mount_open() (safepath.h; FLAGS:
 * NX_SP_PATH_ONLY): a descriptor, or -1 after a message.
 */
int nx_cli_mount_root(const char *mnt, int flags);
/* Where IMAGE (a file or block device) is mounted by FUSE (malloced). */
char *nx_cli_find_mount(const char *image);
/*
 * The volume TARGET names: a nextfs-fuse mountpoint (*MNT, malloced), an
 * image or device (*VOL, opened with nx_open_volume FLAGS), or an image
 * a nextfs-fuse daemon serves (*MNT: its mountpoint).
 */
int nx_cli_open_target(const char *target, int flags, struct nx_volume **vol,
		       char **mnt);

/*
 * snapact.c - take and delete snapshot NAME on a target: a mountpoint
 * (MNT, through MNT/.snapshots) or an image opened read-write (VOL, under
 * its lock).  nx_cli_take fits nx_tl_take() (retention.h); both return
 * an errno or errcode_t.  nx_cli_flush_mount: syncfs(MNT) (dirty mmap'ed
 * pages reach the daemon); a failed flush is a warning (the take goes
 * on); NX_CLI_FAIL after a message only if MNT cannot be opened.
 */
struct nx_cli_target {
	const char *mnt;
	struct nx_volume *vol;
};
int nx_cli_flush_mount(const char *mnt);
errcode_t nx_cli_take(void *target, const char *name);
errcode_t nx_cli_delete(struct nx_cli_target *t, const char *name);

/*
 * compare.c - do the regular files (symbolic links) RA and RB, below the
 * directories DA and DB (nx_sp_open: nothing followed), hold the same
 * data (target)?  1 they differ, 0 the same, -1 with errno when one
 * cannot be read.
 */
int nx_cli_files_differ(int da, const char *ra, int db, const char *rb);
int nx_cli_links_differ(int da, const char *ra, int db, const char *rb);

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
