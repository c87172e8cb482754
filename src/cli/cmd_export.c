/*
 * cmd_export.c - "nextfs export [-f] [--json] SOURCE NAME OUT.img|-" and
 * "nextfs export --since OLD [--json] SOURCE NEW OUT.img".
 *
 * Writes snapshot NAME as a standalone sparse ext image (image.h): stock
 * e2fsck -fn passes on it, the kernel or fuse2fs mount it.  "-" streams
 * the whole image to stdout instead.  SOURCE is an unmounted image or
 * device (read through the image engine here), or a nextfs mount, or an
 * image a nextfs-fuse daemon serves: then the image is read from the
 * mount's image file MNT/.snapshot-images/NAME, which the daemon serves
 * from the same engine, so the output is the same.  The source is only
 * read.  A failed write (full disk, closed pipe) removes the partial
 * output file.
 *
 * --since turns OUT.img, an export of OLD, into the export of NEW in
 * place, writing only what differs (nx_imgsrc_update); on a mount the
 * daemon says what differs (NX_IOC_IMG_CHANGES).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/devname.h"
#include "nextfs/image.h"
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/snapshot.h"
#include "cli.h"
#include "output.h"

static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return nx_dev_stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Where the image goes. */
struct output {
	int fd;			/* written to */
	int how;		/* NX_WRITE_* */
	int dir;		/* OUT's directory (a file: -1 otherwise) */
	char *name;		/* OUT's name in it */
	char tmp[NX_SP_TEMP_SIZE];	/* the new file, renamed to NAME */
	int force;
};

/* Close, and remove a temporary file that did not get its name. */
static void close_output(struct output *o)
{
	if (o->fd >= 0 && o->fd != STDOUT_FILENO)
		close(o->fd);
	if (o->dir >= 0 && o->tmp[0])
		unlinkat(o->dir, o->tmp, 0);
	if (o->dir >= 0)
		close(o->dir);
	free(o->name);
	o->fd = o->dir = -1;
	o->name = NULL;
}

/* The block device NAME in DIR, opened without following a link. */
static int open_device(struct output *o, int dir, const char *name,
		       const struct stat *st)
{
	struct stat now;

	o->fd = openat(dir, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (o->fd >= 0 && (fstat(o->fd, &now) < 0 || !S_ISBLK(now.st_mode) ||
			   now.st_rdev != st->st_rdev)) {
		close(o->fd);
		o->fd = -1;
		errno = ESTALE;
	}
	o->how = NX_WRITE_DEVICE;	/* free blocks need not be written */
	return o->fd < 0 ? -1 : 0;
}

/* OUT (resolved to P) for writing into *O: 0 or an exit code. */
static int place_output(const char *out, const struct nx_sp_place *p,
			int force, struct output *o)
{
	struct stat st;
	mode_t mask;

	if (!p->base[0]) {
		nx_cli_error("%s is a directory", out);
		return NX_CLI_FAIL;
	}
	if (fstatat(p->dirfd, p->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISBLK(st.st_mode)) {
			if (!open_device(o, p->dirfd, p->base, &st))
				return 0;
			nx_cli_error("cannot open %s: %s", out,
				     nx_sp_why(errno));
			return NX_CLI_FAIL;
		}
		if (S_ISDIR(st.st_mode)) {
			nx_cli_error("%s is a directory", out);
			return NX_CLI_FAIL;
		}
		if (!force) {
			nx_cli_error("%s exists (use --force to replace it)",
				     out);
			return NX_CLI_FAIL;
		}
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			nx_cli_error("%s is neither a file nor a block device; "
				     "not replaced", out);
			return NX_CLI_FAIL;
		}
	} else if (errno != ENOENT) {
		nx_cli_error("%s: %s", out, strerror(errno));
		return NX_CLI_FAIL;
	}
	/* A new file beside OUT, renamed over it once complete. */
	o->dir = fcntl(p->dirfd, F_DUPFD_CLOEXEC, 0);
	o->name = strdup(p->base);
	o->fd = o->dir < 0 || !o->name ? -1 :
		nx_sp_temp_file(o->dir, ".nextfs-export.", o->tmp);
	mask = umask(0);
	umask(mask);
	if (o->fd < 0 || fchmod(o->fd, 0644 & ~mask) < 0) {
		if (o->fd < 0)
			o->tmp[0] = 0;
		nx_cli_error("cannot create a file beside %s: %s", out,
			     strerror(errno));
		return NX_CLI_FAIL;
	}
	o->how = NX_WRITE_FILE;
	return 0;
}

/* Open OUT into *O: 0 or an exit code (after a message). */
static int open_output(const char *out, int force, struct output *o)
{
	struct nx_sp_place p;
	int rc;

	memset(o, 0, sizeof(*o));
	o->fd = o->dir = -1;
	o->force = force;
	if (!strcmp(out, "-")) {
		o->fd = STDOUT_FILENO;
		o->how = NX_WRITE_STREAM;
		if (isatty(o->fd)) {
			nx_cli_error("refusing to write an image to a terminal");
			return NX_CLI_USAGE;
		}
		return 0;
	}
	if (nx_sp_locate(out, 0, &p)) {
		nx_cli_error("%s: %s", out, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	rc = place_output(out, &p, force, o);
	nx_sp_place_free(&p);
	if (rc)
		close_output(o);
	return rc;
}

/* The complete file to its name: 0 or an errno (EEXIST: not forced and
 * someone made OUT meanwhile). */
static int commit_output(struct output *o)
{
	int rc;

	if (o->dir < 0)
		return 0;
	if (o->force) {
		rc = renameat(o->dir, o->tmp, o->dir, o->name);
	} else {
		rc = renameat2(o->dir, o->tmp, o->dir, o->name,
			       RENAME_NOREPLACE);
		if (rc < 0 && errno == EINVAL) {
			/* no RENAME_NOREPLACE there: link, which never
			 * replaces, then drop the temporary name */
			rc = linkat(o->dir, o->tmp, o->dir, o->name, 0);
			if (rc == 0)
				unlinkat(o->dir, o->tmp, 0);
		}
	}
	if (rc < 0)
		return errno;
	o->tmp[0] = 0;
	return 0;
}


/* ------------------------------------------------------------------ */
/* Where the images come from.                                         */

struct source {
	struct nx_volume *vol;	/* an unmounted volume, or NULL */
	char *mnt;		/* else the mountpoint of its daemon */
};

static void close_source(struct source *s)
{
	if (s->vol)
		nx_volume_close(s->vol);
	free(s->mnt);
	s->vol = NULL;
	s->mnt = NULL;
}

/*
 * The image file of snapshot NAME in the mount MNT, opened below the
 * mount's root without following anything: a descriptor, or -1 with
 * errno.
 */
static int open_image_file(const char *mnt, const char *name)
{
	int root, dir, fd, e;

	if (nx_snap_name_check(name)) {
		errno = ENOENT;
		return -1;
	}
	root = nx_cli_mount_root(mnt, NX_SP_PATH_ONLY);
	if (root < 0) {
		errno = 0;	/* said */
		return -1;
	}
	dir = openat(root, NX_IMGDIR_NAME, O_PATH | O_DIRECTORY | O_NOFOLLOW |
		     O_CLOEXEC);
	e = errno;
	close(root);
	if (dir < 0) {
		errno = e == ENOENT ? ENOTSUP : e;
		return -1;
	}
	fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	e = errno;
	close(dir);
	errno = e;
	return fd;
}

/* Snapshot NAME of S as an image source: 0 or an exit code. */
static int open_image(struct source *s, const char *name,
		      struct nx_imgsrc **src)
{
	char q[NX_QUOTED_NAME_SIZE], msg[512] = "";
	struct stat st;
	errcode_t err;
	int fd;

	nx_out_quote(q, sizeof(q), name, strlen(name));
	if (s->vol) {
		err = nx_imgsrc_open_export(s->vol, name, src, msg,
					    sizeof(msg));
		if (err) {
			nx_cli_error("%s", msg[0] ? msg : error_message(err));
			return NX_CLI_FAIL;
		}
		return 0;
	}
	fd = open_image_file(s->mnt, name);
	if (fd >= 0)
		errno = 0;
	if (fd < 0) {
		if (errno == ENOENT)
			nx_cli_error("no snapshot named %s on %s", q, s->mnt);
		else if (errno == ENOTSUP)
			nx_cli_error("%s: this nextfs-fuse serves no snapshot "
				     "images (an older version?)", s->mnt);
		else if (errno)
			nx_cli_error("cannot open the image of snapshot %s on "
				     "%s: %s%s", q, s->mnt, strerror(errno),
				     errno == EACCES ? " (only root and the "
				     "user who mounted the volume read it)" :
				     "");
		return NX_CLI_FAIL;
	}
	if (fstat(fd, &st) < 0) {
		err = errno;
		close(fd);
		errno = (int)err;
	}
	if (errno || nx_imgsrc_open_fd(fd, (uint64_t)st.st_size, src)) {
		nx_cli_error("cannot read the image of snapshot %s on %s: %s",
			     q, s->mnt, errno ? strerror(errno) :
			     "not an ext2/3/4 image");
		return NX_CLI_FAIL;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* A whole export.                                                     */

static void print_json_written(const char *name, const char *since,
			       const char *state, unsigned bs,
			       blk64_t written, blk64_t zeroed)
{
	struct nx_json j;

	nx_json_init(&j, stdout);
	nx_json_open(&j, NULL, '{');
	nx_json_str(&j, "snapshot", name);
	if (since) {
		nx_json_str(&j, "since", since);
		nx_json_str(&j, "state", state);
	}
	nx_json_u64(&j, "block_size", bs);
	nx_json_u64(&j, "blocks_written", written);
	nx_json_u64(&j, "bytes_written", written * bs);
	if (since)
		nx_json_u64(&j, "blocks_zeroed", zeroed);
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

static int do_export(struct source *s, const char *name, const char *out,
		     int force, int json)
{
	struct nx_imgsrc *src = NULL;
	struct nx_progress prog;
	struct output o = { .fd = -1, .dir = -1 };
	blk64_t written = 0;
	errcode_t err;
	int rc;

	rc = open_image(s, name, &src);
	if (rc)
		return rc;
	rc = open_output(out, force, &o);
	if (rc)
		goto out;
	nx_cli_progress_begin(&prog);
	err = nx_imgsrc_write(src, o.fd, o.how, &prog, &written);
	nx_cli_progress_end(&prog);
	if (o.fd != STDOUT_FILENO && close(o.fd) < 0 && !err)
		err = errno;
	o.fd = -1;
	if (!err)
		err = commit_output(&o);
	if (err == EEXIST) {
		nx_cli_error("%s exists (use --force to replace it)", out);
		rc = NX_CLI_FAIL;
	} else if (err) {
		nx_cli_error("writing %s: %s", strcmp(out, "-") ? out :
			     "stdout", strerror(nx_errno(err)));
		rc = NX_CLI_FAIL;
	} else if (json) {
		print_json_written(name, NULL, NULL,
				   nx_imgsrc_block_size(src), written, 0);
	}
out:
	close_output(&o);
	nx_imgsrc_close(src);
	return rc;
}

/* ------------------------------------------------------------------ */
/* --since                                                             */

struct changes_ctx {
	struct nx_volume *vol;		/* offline: the engine here */
	struct nx_imgsrc *old, *new;
	int fd;				/* on a mount: NEW's image file */
	uint32_t old_id;
};

static errcode_t changes_here(void *priv, blk64_t start,
			      struct nx_img_run *runs, size_t max, size_t *n,
			      blk64_t *next)
{
	struct changes_ctx *c = priv;
	errcode_t err;

	nx_volume_lock(c->vol);
	err = nx_imgsrc_changes(c->old, c->new, start, runs, max, n, next);
	nx_volume_unlock(c->vol);
	return err;
}

static errcode_t changes_of_mount(void *priv, blk64_t start,
				  struct nx_img_run *runs, size_t max,
				  size_t *n, blk64_t *next)
{
	struct changes_ctx *c = priv;
	struct nx_ioc_img_changes *q = calloc(1, sizeof(*q));
	uint32_t i;

	if (!q)
		return ENOMEM;
	q->old_id = c->old_id;
	q->max = max < NX_IOC_IMG_RUNS ? (uint32_t)max : NX_IOC_IMG_RUNS;
	q->start = start;
	if (ioctl(c->fd, NX_IOC_IMG_CHANGES, q) < 0) {
		free(q);
		return errno;
	}
	*n = q->count < q->max ? q->count : q->max;
	for (i = 0; i < *n; i++) {
		runs[i].blk = q->run[i].blk;
		runs[i].len = q->run[i].len;
		runs[i].kind = (int)q->run[i].kind;
	}
	*next = q->next > start ? q->next : start + 1;
	free(q);
	return 0;
}

/* The existing OUT for an update in place: a file or block device. */
static int open_target(const char *out, int *fd, int *how)
{
	struct nx_sp_place p;
	struct stat st;

	*fd = -1;
	if (nx_sp_locate(out, 0, &p)) {
		nx_cli_error("%s: %s", out, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	if (p.base[0])
		*fd = openat(p.dirfd, p.base, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st) < 0 ||
	    (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))) {
		if (*fd < 0)
			nx_cli_error("cannot open %s: %s", out,
				     p.base[0] ? nx_sp_why(errno) :
				     "a directory");
		else
			nx_cli_error("%s is neither a file nor a block "
				     "device", out);
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		nx_sp_place_free(&p);
		return NX_CLI_FAIL;
	}
	nx_sp_place_free(&p);
	*how = S_ISREG(st.st_mode) ? NX_WRITE_FILE : NX_WRITE_DEVICE;
	return 0;
}

/* Why OUT cannot be updated: one line. */
static void refuse_state(const char *out, const char *old,
			 enum nx_out_state state, uint32_t other)
{
	char q[NX_QUOTED_NAME_SIZE];

	nx_out_quote(q, sizeof(q), old, strlen(old));
	switch (state) {
	case NX_OUT_SIZE:
		nx_cli_error("%s is not the size of this volume: not an "
			     "export of %s; nothing written", out, q);
		break;
	case NX_OUT_FOREIGN:
		nx_cli_error("%s is not an export of this volume; nothing "
			     "written", out);
		break;
	case NX_OUT_OTHER:
		nx_cli_error("%s is this volume's export of another snapshot "
			     "(id %u), not of %s; nothing written", out, other,
			     q);
		break;
	case NX_OUT_HALF_OTHER:
		nx_cli_error("%s is half way from %s to the snapshot with id "
			     "%u (an interrupted export --since): run that "
			     "again to finish it, or export afresh; nothing "
			     "written", out, q, other);
		break;
	default:
		nx_cli_error("%s was changed since it was exported from %s "
			     "(mounted read-write? repaired?): export afresh; "
			     "nothing written", out, q);
		break;
	}
}

static int do_since(struct source *s, const char *old, const char *name,
		    const char *out, int json)
{
	struct nx_imgsrc *so = NULL, *sn = NULL;
	struct changes_ctx c = { s->vol, NULL, NULL, -1, 0 };
	struct nx_update_result res = { 0, 0 };
	struct nx_progress prog;
	enum nx_out_state state;
	uint32_t other;
	errcode_t err;
	const char *what = "updated";
	int fd = -1, how, rc;

	rc = open_image(s, old, &so);
	if (!rc)
		rc = open_image(s, name, &sn);
	if (!rc)
		rc = open_target(out, &fd, &how);
	if (rc)
		goto out;
	err = nx_imgsrc_out_state(so, sn, fd, &state, &other);
	if (err) {
		nx_cli_error("reading %s: %s", out, strerror(nx_errno(err)));
		rc = NX_CLI_FAIL;
		goto out;
	}
	if (state == NX_OUT_NEW) {
		what = "up to date";
	} else if (state != NX_OUT_OLD && state != NX_OUT_HALF) {
		refuse_state(out, old, state, other);
		rc = NX_CLI_FAIL;
		goto out;
	} else {
		if (state == NX_OUT_HALF)
			what = "resumed";
		c.old = so;
		c.new = sn;
		c.fd = s->vol ? -1 : nx_imgsrc_fd(sn);
		c.old_id = nx_imgsrc_snapshot_id(so);
		nx_cli_progress_begin(&prog);
		err = nx_imgsrc_update(so, sn, s->vol ? changes_here :
				       changes_of_mount, &c, fd, how, &prog,
				       &res);
		nx_cli_progress_end(&prog);
		if (err) {
			nx_cli_error("updating %s: %s (it is marked as half "
				     "updated: run the same command again)",
				     out, strerror(nx_errno(err)));
			rc = NX_CLI_FAIL;
			goto out;
		}
	}
	if (json) {
		print_json_written(name, old, what, nx_imgsrc_block_size(sn),
				   res.written, res.zeroed);
	} else {
		char qo[NX_QUOTED_NAME_SIZE], qn[NX_QUOTED_NAME_SIZE];

		nx_out_quote(qo, sizeof(qo), old, strlen(old));
		nx_out_quote(qn, sizeof(qn), name, strlen(name));
		printf("%s: %s from %s to %s: %llu blocks written, %llu "
		       "zeroed\n", out, what, qo, qn,
		       (unsigned long long)res.written,
		       (unsigned long long)res.zeroed);
	}
out:
	if (fd >= 0 && close(fd) < 0 && !rc) {
		nx_cli_error("closing %s: %s", out, strerror(errno));
		rc = NX_CLI_FAIL;
	}
	nx_imgsrc_close(so);
	nx_imgsrc_close(sn);
	return rc;
}

/* ------------------------------------------------------------------ */

int nx_cmd_export(struct nx_cli_args *a)
{
	const char *since = a->val[NX_OPT_SINCE], *out = a->pos[2];
	struct source s = { NULL, NULL };
	int json = a->opt[NX_OPT_JSON], rc;

	if (since && a->opt[NX_OPT_FORCE])
		return nx_cli_usage_error(a, "--since updates OUT.img in "
					  "place: --force does not go with it");
	if (since && !strcmp(out, "-"))
		return nx_cli_usage_error(a, "--since updates OUT.img in "
					  "place: it cannot be '-'");
	if (json && !strcmp(out, "-"))
		return nx_cli_usage_error(a, "--json goes with an output file, "
					  "not '-'");
	if (strcmp(out, "-") && same_file(a->pos[0], out)) {
		nx_cli_error("the output is the image itself");
		return NX_CLI_USAGE;
	}
	rc = nx_cli_open_target(a->pos[0], NX_VOL_RDONLY, &s.vol, &s.mnt);
	if (rc)
		return rc;
	rc = since ? do_since(&s, since, a->pos[1], out, json) :
	     do_export(&s, a->pos[1], out, a->opt[NX_OPT_FORCE], json);
	close_source(&s);
	return rc;
}
