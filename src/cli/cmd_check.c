/*
 * cmd_check.c - "nextfs check [-r] [--no-fsck] [--views] [-v] IMAGE".
 *
 * First the library's snapshot-aware checks (nx_check), then stock
 * e2fsck -fn on the live volume with HAS_SNAPSHOT masked (and with
 * --views on every snapshot as exported), without copying the volume and
 * without changing it: a private FUSE mount serves one read-only file
 * whose bytes are the image as e2fsck must see it (nx_imgsrc), and e2fsck
 * reads that file.  Only the superblock differs from the volume, and only
 * in memory.  (A loop device cannot patch a superblock, device-mapper
 * needs a snapshot target and a COW device, and a sparse copy still
 * copies every used block: FUSE is the copy-free way that works on plain
 * files and needs nothing but /dev/fuse.)
 *
 * Exit status as e2fsck: 0 clean, 1 errors fixed and none left, 4 errors
 * left, 8 operational error, 16 usage.
 */
#define FUSE_USE_VERSION 35

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fuse_lowlevel.h>
#include <et/com_err.h>
#include "nextfs/devname.h"
#include "nextfs/grow.h"
#include "nextfs/image.h"
#include "nextfs/safepath.h"
#include "nextfs/snaptool.h"
#include "cli.h"
#include "output.h"

#define CHECK_CLEAN	0
#define CHECK_FIXED	1
#define CHECK_ERRORS	4
#define CHECK_OPERROR	8
#define CHECK_USAGE	16	/* the table in nextfs.c says so */

#define FV_FILE_INO	2
#define FV_FILE_NAME	"image"

extern char **environ;

struct report_ctx {
	int verbose;
};

static void print_finding(void *priv, enum nx_check_level level,
			  const char *msg)
{
	struct report_ctx *rc = priv;
	static const char *const tag[] = { "", "warning: ", "error: ",
					   "repaired: " };

	size_t n = strlen(msg);
	char *line;

	if (level == NX_CHECK_INFO && !rc->verbose)
		return;
	/* The library appends ": fixed"; say it up front instead. */
	if (level == NX_CHECK_FIXED && n > 7 && !strcmp(msg + n - 7, ": fixed"))
		n -= 7;
	line = strndup(msg, n);
	fputs(tag[level], stdout);
	/* One line per finding, whatever the names in it hold. */
	nx_out_line(stdout, line ? line : msg);
	putchar('\n');
	free(line);
}

/* ------------------------------------------------------------------ */
/* One read-only file over FUSE.                                       */

struct fileview {
	struct nx_imgsrc *src;
	struct fuse_session *se;
	pthread_t thread;
	char mnt[64];
	int dirfd;		/* MNT, held: the mount goes on it */
};

static void fv_attr(struct fileview *fv, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0500;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0400;
		st->st_nlink = 1;
		st->st_size = nx_imgsrc_size(fv->src);
		st->st_blksize = 4096;
		st->st_blocks = (st->st_size + 511) / 512;
	}
}

static void fv_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fileview *fv = fuse_req_userdata(req);
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID || strcmp(name, FV_FILE_NAME)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = FV_FILE_INO;
	e.attr_timeout = e.entry_timeout = 3600;
	fv_attr(fv, FV_FILE_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void fv_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fileview *fv = fuse_req_userdata(req);
	struct stat st;

	if (ino != FUSE_ROOT_ID && ino != FV_FILE_INO) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fv_attr(fv, ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void fv_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FV_FILE_INO)
		fuse_reply_err(req, EISDIR);
	else if ((fi->flags & O_ACCMODE) != O_RDONLY)
		fuse_reply_err(req, EROFS);
	else
		fuse_reply_open(req, fi);
}

static void fv_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fileview *fv = fuse_req_userdata(req);
	uint64_t total = nx_imgsrc_size(fv->src);
	char *buf;
	errcode_t err;

	if ((uint64_t)off >= total) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > total - off)
		size = total - off;
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	err = nx_imgsrc_read(fv->src, buf, size, off);
	if (err)
		fuse_reply_err(req, EIO);
	else
		fuse_reply_buf(req, buf, size);
	free(buf);
}

static const struct fuse_lowlevel_ops fv_ops = {
	.lookup = fv_lookup,
	.getattr = fv_getattr,
	.open = fv_open,
	.read = fv_read,
};

static void *fv_loop(void *arg)
{
	struct fileview *fv = arg;

	fuse_session_loop(fv->se);
	return NULL;
}

/*
 * The directory mkdtemp made, held, and what libfuse is to mount on: that
 * directory, even if TMPDIR is a place where someone else can rename
 * (safepath.h).  -1 if it is not ours and empty any more.
 */
static int fv_hold_dir(struct fileview *fv, char **mount_name)
{
	struct stat st;

	fv->dirfd = nx_sp_open_path(fv->mnt, O_PATH | O_DIRECTORY);
	if (fv->dirfd < 0)
		return -1;
	if (fstat(fv->dirfd, &st) < 0 || st.st_uid != geteuid() ||
	    (st.st_mode & 07777) != 0700 || st.st_nlink != 2 ||
	    !(*mount_name = nx_sp_mount_name(fv->dirfd, fv->mnt))) {
		close(fv->dirfd);
		fv->dirfd = -1;
		return -1;
	}
	return 0;
}

static int fv_start(struct fileview *fv, struct nx_imgsrc *src)
{
	char *argv[] = { "nextfs-check", "-o",
			 "ro,fsname=nextfs-check,subtype=nextfs-check", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	const char *tmp = getenv("TMPDIR");
	char *mount_name = NULL;

	fv->src = src;
	fv->dirfd = -1;
	snprintf(fv->mnt, sizeof(fv->mnt), "%s/nextfs-check-XXXXXX",
		 tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(fv->mnt))
		return -1;
	if (fv_hold_dir(fv, &mount_name))
		goto fail;
	fv->se = fuse_session_new(&args, &fv_ops, sizeof(fv_ops), fv);
	fuse_opt_free_args(&args);
	if (!fv->se)
		goto fail;
	if (fuse_session_mount(fv->se, mount_name)) {
		fuse_session_destroy(fv->se);
		goto fail;
	}
	free(mount_name);
	if (pthread_create(&fv->thread, NULL, fv_loop, fv)) {
		fuse_session_unmount(fv->se);
		fuse_session_destroy(fv->se);
		goto fail;
	}
	return 0;
fail:
	free(mount_name);
	fv->se = NULL;
	if (fv->dirfd >= 0)
		close(fv->dirfd);
	rmdir(fv->mnt);
	return -1;
}

static void fv_stop(struct fileview *fv)
{
	fuse_session_exit(fv->se);
	fuse_session_unmount(fv->se);
	pthread_join(fv->thread, NULL);
	fuse_session_destroy(fv->se);
	close(fv->dirfd);	/* after the unmount through its name */
	rmdir(fv->mnt);
}

/* ------------------------------------------------------------------ */
/* Running e2fsck.                                                     */

static const char *e2fsck_path(void)
{
	static const char *const fallback[] = { "/sbin/e2fsck",
						"/usr/sbin/e2fsck" };
	const char *env = getenv("E2FSCK");
	size_t i;

	if (env && *env)
		return env;
	for (i = 0; i < sizeof(fallback) / sizeof(fallback[0]); i++)
		if (access(fallback[i], X_OK) == 0)
			return fallback[i];
	return "e2fsck";
}

/* e2fsck MODE PATH (-fn or -fy) with its output collected; status or -1. */
static int run_e2fsck_mode(const char *mode, const char *path, char **out)
{
	char *argv[] = { (char *)e2fsck_path(), (char *)mode, (char *)path,
			 NULL };
	posix_spawn_file_actions_t fa;
	size_t len = 0, cap = 0;
	int pfd[2], status, rc;
	pid_t pid;

	*out = NULL;
	if (pipe(pfd) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
	posix_spawn_file_actions_addclose(&fa, pfd[0]);
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		errno = rc;
		return -1;
	}
	for (;;) {
		ssize_t n;

		/* room for 4 KiB at least, and the NUL */
		if (nx_grow((void **)out, &cap, len + 4096, 1, 65536))
			break;
		n = read(pfd[0], *out + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += n;
	}
	if (*out)
		(*out)[len] = 0;
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_e2fsck(const char *path, char **out)
{
	return run_e2fsck_mode("-fn", path, out);
}

static void print_tail(const char *text, int lines)
{
	const char *p = text + strlen(text);
	int n = 0;

	while (p > text && n <= lines)
		if (*--p == '\n')
			n++;
	if (p > text)
		p++;
	fputs(p, stdout);
	if (*p && p[strlen(p) - 1] != '\n')
		putchar('\n');
}

/*
 * Serve SRC and run e2fsck -fn on it.  1 clean, 0 problems (printed),
 * -1 could not run.
 */
static int fsck_source(struct nx_imgsrc *src, const char *what, int verbose)
{
	struct fileview fv = { 0 };
	char path[128], *out = NULL;
	int rc;

	if (fv_start(&fv, src)) {
		printf("warning: cannot mount a private FUSE file system to run "
		       "e2fsck on %s (is /dev/fuse usable?); skipped\n", what);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", fv.mnt, FV_FILE_NAME);
	rc = run_e2fsck(path, &out);
	fv_stop(&fv);
	if (rc < 0) {
		printf("warning: cannot run %s: %s; skipped\n", e2fsck_path(),
		       strerror(errno));
		free(out);
		return -1;
	}
	if (rc == 0) {
		if (verbose)
			printf("e2fsck -fn on %s: clean\n", what);
		free(out);
		return 1;
	}
	printf("error: e2fsck -fn on %s exits with status %d:\n", what, rc);
	if (out)
		print_tail(out, verbose ? 1000 : 30);
	free(out);
	return 0;
}

static int fsck_live(const char *image, int verbose, unsigned *errors)
{
	struct nx_imgsrc *src;
	char msg[512] = "";
	errcode_t err;
	int rc;

	err = nx_imgsrc_open_live(image, &src, msg, sizeof(msg));
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return -1;
	}
	rc = fsck_source(src, "the live volume (has_snapshot masked)",
			 verbose);
	nx_imgsrc_close(src);
	if (rc == 0)
		(*errors)++;
	return 0;
}

/* IMAGE's primary superblock as it is on disk.  0 or -1 (errno). */
static int read_primary_sb(const char *image, struct ext2_super_block *sb)
{
	int fd = nx_dev_open(image, O_RDONLY), rc = -1;

	if (fd < 0)
		return -1;
	if (pread(fd, sb, sizeof(*sb), SUPERBLOCK_OFFSET) == sizeof(*sb) &&
	    sb->s_magic == EXT2_SUPER_MAGIC)
		rc = 0;
	else
		errno = EIO;
	close(fd);
	return rc;
}

/* Write SB as IMAGE's primary superblock, with its checksum made right. */
static int write_primary_sb(const char *image, struct ext2_super_block *sb)
{
	int fd = nx_dev_open(image, O_WRONLY), rc = -1;

	if (fd < 0)
		return -1;
	if (ext2fs_has_feature_metadata_csum(sb))
		sb->s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)sb,
				offsetof(struct ext2_super_block, s_checksum));
	if (nx_cli_pwrite_all(fd, sb, sizeof(*sb), SUPERBLOCK_OFFSET) == 0 &&
	    fsync(fd) == 0)
		rc = 0;
	close(fd);
	return rc;
}

/*
 * Set or clear HAS_SNAPSHOT in IMAGE's primary superblock (checksum
 * kept).  *WAS: whether it was set.  0 or -1 (errno).
 */
static int set_has_snapshot(const char *image, int on, int *was)
{
	struct ext2_super_block sb;

	if (read_primary_sb(image, &sb) < 0)
		return -1;
	if (was)
		*was = ext2fs_has_feature_has_snapshot(&sb);
	if (on)
		ext2fs_set_feature_has_snapshot(&sb);
	else
		ext2fs_clear_feature_has_snapshot(&sb);
	return write_primary_sb(image, &sb);
}

/*
 * --repair, when e2fsck found the live tree damaged (a crash on a volume
 * without a journal, or real corruption): run e2fsck -fy on the volume
 * itself with HAS_SNAPSHOT masked, then put the flag back.  Snapshot
 * files are ordinary files to e2fsck; where it must choose (a block
 * claimed twice) it clones, so snapshot contents survive.  Returns
 * e2fsck's status or -1.
 */
/*
 * e2fsck -fy on IMAGE: on the file IMAGE was pinned to (devname.h), which
 * e2fsck inherits and opens as /dev/fd/N, not on whatever the name leads
 * to by now.
 */
static int repair_pinned(const char *image, char **out)
{
	char name[32];
	int fd = nx_dev_open(image, O_PATH), rc;

	*out = NULL;
	if (fd < 0 || fcntl(fd, F_SETFD, 0) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(name, sizeof(name), "/dev/fd/%d", fd);
	rc = run_e2fsck_mode("-fy", name, out);
	close(fd);
	return rc;
}

static int repair_live(const char *image, int verbose)
{
	char *out = NULL;
	int was = 0, rc;

	if (set_has_snapshot(image, 0, &was) < 0) {
		nx_cli_error("%s: cannot mask has_snapshot: %s", image,
			     strerror(errno));
		return -1;
	}
	printf("running %s -fy on %s (has_snapshot masked)\n", e2fsck_path(),
	       image);
	rc = repair_pinned(image, &out);
	if (out && (verbose || rc < 0 || rc >= 4))
		print_tail(out, verbose ? 1000 : 20);
	free(out);
	if (was && set_has_snapshot(image, 1, NULL) < 0) {
		nx_cli_error("%s: cannot restore has_snapshot: %s; set it "
			     "with 'nextfs check --repair' again", image,
			     strerror(errno));
		return -1;
	}
	return rc;
}

/*
 * Damage that keeps nextfs from opening the volume at all, which e2fsck
 * repairs: a corrupt superblock, wrong checksums of bitmaps or inodes, a
 * corrupt journal superblock (sanity.h refuses those).
 */
static int e2fsck_must_go_first(errcode_t err)
{
	return err == EXT2_ET_FILESYSTEM_CORRUPTED ||
	       err == EXT2_ET_CORRUPT_SUPERBLOCK ||
	       err == EXT2_ET_INODE_CSUM_INVALID ||
	       err == EXT2_ET_INODE_BITMAP_CSUM_INVALID ||
	       err == EXT2_ET_EXTENT_CSUM_INVALID ||
	       err == EXT2_ET_DIR_CSUM_INVALID ||
	       err == EXT2_ET_BLOCK_BITMAP_CSUM_INVALID;
}

/*
 * --repair of a volume that nx_check() cannot open: e2fsck first (as
 * repair_live), then the caller checks the snapshots.  e2fsck rebuilds
 * a corrupt primary superblock from a backup, but the snapshot fields
 * live only in the primary (nextfs leaves the backups as they were,
 * like the kernel): they are saved before and put back if e2fsck
 * dropped them; nx_check() then judges them like any others.
 */
static int repair_unopenable(const char *image, int verbose)
{
	struct ext2_super_block before, after;
	int rc;

	if (read_primary_sb(image, &before) < 0) {
		nx_cli_error("%s: cannot read the superblock: %s", image,
			     strerror(errno));
		return -1;
	}
	rc = repair_live(image, verbose);
	if (rc < 0 || !ext2fs_has_feature_has_snapshot(&before))
		return rc;
	if (read_primary_sb(image, &after) < 0) {
		nx_cli_error("%s: cannot read the superblock e2fsck wrote: %s",
			     image, strerror(errno));
		return -1;
	}
	if (ext2fs_has_feature_has_snapshot(&after) &&
	    after.s_snapshot_inum == before.s_snapshot_inum &&
	    after.s_snapshot_id == before.s_snapshot_id &&
	    after.s_snapshot_list == before.s_snapshot_list &&
	    after.s_snapshot_r_blocks_count ==
	    before.s_snapshot_r_blocks_count)
		return rc;
	ext2fs_set_feature_has_snapshot(&after);
	after.s_snapshot_inum = before.s_snapshot_inum;
	after.s_snapshot_id = before.s_snapshot_id;
	after.s_snapshot_list = before.s_snapshot_list;
	after.s_snapshot_r_blocks_count = before.s_snapshot_r_blocks_count;
	if (write_primary_sb(image, &after) < 0) {
		nx_cli_error("%s: cannot put the snapshot fields back: %s",
			     image, strerror(errno));
		return -1;
	}
	printf("repaired: e2fsck rebuilt the superblock from a backup; the "
	       "snapshot fields are put back\n");
	return rc;
}

static int fsck_views(const char *image, int verbose, unsigned *errors)
{
	struct nx_snapinfo *snaps = NULL;
	struct nx_volume *vol;
	int i, n = 0;

	if (nx_cli_open_image(image, &vol))
		return -1;
	if (nx_snap_list(vol, &snaps, &n))
		n = 0;
	for (i = 0; i < n; i++) {
		struct nx_imgsrc *src;
		char msg[512] = "", what[NX_QUOTED_NAME_SIZE + 16];
		char q[NX_QUOTED_NAME_SIZE];
		errcode_t err;

		snprintf(what, sizeof(what), "snapshot %s",
			 nx_out_quote(q, sizeof(q), snaps[i].name,
				      strlen(snaps[i].name)));
		err = nx_imgsrc_open_export(vol, snaps[i].name, &src, msg,
					    sizeof(msg));
		if (err) {
			fputs("error: ", stdout);
			nx_out_line(stdout, msg[0] ? msg : error_message(err));
			putchar('\n');
			(*errors)++;
			continue;
		}
		if (fsck_source(src, what, verbose) == 0)
			(*errors)++;
		nx_imgsrc_close(src);
	}
	free(snaps);
	nx_volume_close(vol);
	return 0;
}

/*
 * The library's checks (and repairs) of IMAGE into *RES; a volume too
 * damaged to open is handed to e2fsck first when repairing.  0, or
 * CHECK_OPERROR after a message.
 */
static int check_snapshots(const char *image, int repair, int fsck,
			   struct report_ctx *rc, struct nx_check_result *res)
{
	struct nx_progress prog;
	char msg[512] = "";
	errcode_t err;

	nx_cli_progress_begin(&prog);
	err = nx_check(image, repair ? NX_CHECK_REPAIR : 0, print_finding, rc,
		       &prog, res, msg, sizeof(msg));
	nx_cli_progress_end(&prog);
	if (err && repair && fsck && e2fsck_must_go_first(err)) {
		int frc;

		printf("damaged: %s\n", msg[0] ? msg : error_message(err));
		frc = repair_unopenable(image, rc->verbose);
		if (frc < 0 || frc >= 4)
			return CHECK_OPERROR;
		nx_cli_progress_begin(&prog);
		err = nx_check(image, NX_CHECK_REPAIR, print_finding, rc,
			       &prog, res, msg, sizeof(msg));
		nx_cli_progress_end(&prog);
		res->fixed++;
	}
	if (!err && repair && res->fixed && res->errors) {
		/*
		 * What was found before a repair may be gone after it (new
		 * ids give a snapshot's extent blocks new checksums): count
		 * again what is left.
		 */
		unsigned fixed = res->fixed;

		nx_cli_progress_begin(&prog);
		err = nx_check(image, NX_CHECK_REPAIR, print_finding, rc,
			       &prog, res, msg, sizeof(msg));
		nx_cli_progress_end(&prog);
		res->fixed += fixed;
	}
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return CHECK_OPERROR;
	}
	return 0;
}

/*
 * e2fsck -fn on the live volume, and when repairing, e2fsck -fy where it
 * found damage; what is left counts in RES.  0, or CHECK_OPERROR.
 */
static int check_live(const char *image, int repair, struct report_ctx *rc,
		      struct nx_check_result *res)
{
	struct nx_progress none = { NULL, NULL };
	struct nx_check_result again;
	unsigned live_errors = 0;
	char msg[512] = "";
	errcode_t err;
	int frc;

	if (fsck_live(image, rc->verbose, &live_errors) < 0)
		return CHECK_OPERROR;
	if (live_errors && repair) {
		frc = repair_live(image, rc->verbose);
		if (frc < 0)
			return CHECK_OPERROR;
		if (frc == 1 || frc == 2)
			res->fixed++;
		/*
		 * Again after e2fsck's repairs, repairing: what it cleared (a
		 * snapshot file whose map was corrupt) leaves the list to
		 * relink, which a second run would otherwise have to do.
		 */
		res->errors = 0;
		err = nx_check(image, NX_CHECK_REPAIR, print_finding, rc,
			       &none, &again, msg, sizeof(msg));
		if (err) {
			nx_cli_error("%s", msg[0] ? msg : error_message(err));
			return CHECK_OPERROR;
		}
		res->errors = again.errors;
		res->fixed += again.fixed;
		res->nsnaps = again.nsnaps;
		live_errors = 0;
		if (fsck_live(image, rc->verbose, &live_errors) < 0)
			return CHECK_OPERROR;
	}
	res->errors += live_errors;
	return 0;
}

int nx_cmd_check(struct nx_cli_args *a)
{
	struct report_ctx rc = { .verbose = a->opt[NX_OPT_VERBOSE] };
	struct nx_check_result res;
	const char *image = a->pos[0];
	int repair = a->opt[NX_OPT_REPAIR], fsck = !a->opt[NX_OPT_NO_FSCK];

	if (nx_cli_pin_image(image))
		return CHECK_OPERROR;
	if (check_snapshots(image, repair, fsck, &rc, &res))
		return CHECK_OPERROR;
	fflush(stdout);
	if (fsck && check_live(image, repair, &rc, &res))
		return CHECK_OPERROR;
	if (fsck && a->opt[NX_OPT_VIEWS] && res.views_checked &&
	    fsck_views(image, rc.verbose, &res.errors) < 0)
		return CHECK_OPERROR;
	if (!res.errors && !res.fixed)
		printf("%s: clean, %d snapshot%s\n", image, res.nsnaps,
		       res.nsnaps == 1 ? "" : "s");
	else
		printf("%s: %u error%s fixed, %u left\n", image, res.fixed,
		       res.fixed == 1 ? "" : "s", res.errors);
	if (res.errors)
		return CHECK_ERRORS;
	return res.fixed ? CHECK_FIXED : CHECK_CLEAN;
}
