/*
 * cmd_export.c - "nextfs export [-f] IMAGE NAME OUT.img|-".
 *
 * Writes snapshot NAME as a standalone sparse ext image (see
 * nx_imgsrc_open_export): stock e2fsck -fn passes on it, the kernel or
 * fuse2fs mount it.  "-" streams the whole image to stdout instead.  The
 * source is only read.  A failed write (full disk, closed pipe) removes
 * the partial output file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/devname.h"
#include "nextfs/safepath.h"
#include "nextfs/snaptool.h"
#include "cli.h"

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

static int do_export(const char *image, const char *name, const char *out,
		     int force)
{
	struct nx_imgsrc *src = NULL;
	struct nx_volume *vol;
	struct nx_progress prog;
	struct output o = { .fd = -1, .dir = -1 };
	char msg[512] = "";
	errcode_t err;
	int rc;

	if (strcmp(out, "-") && same_file(image, out)) {
		nx_cli_error("the output is the image itself");
		return NX_CLI_USAGE;
	}
	if (nx_cli_open_image(image, &vol))
		return NX_CLI_FAIL;
	nx_volume_lock(vol);
	err = nx_imgsrc_open_export(vol, name, &src, msg, sizeof(msg));
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		rc = NX_CLI_FAIL;
		goto out;
	}
	rc = open_output(out, force, &o);
	if (rc)
		goto out;
	nx_cli_progress_begin(&prog);
	err = nx_imgsrc_write(src, o.fd, o.how, &prog);
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
	}
out:
	close_output(&o);
	nx_imgsrc_close(src);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	return rc;
}

int nx_cmd_export(struct nx_cli_args *a)
{
	return do_export(a->pos[0], a->pos[1], a->pos[2], a->opt[NX_OPT_FORCE]);
}
