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
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/snaptool.h"
#include "cli.h"

static void export_usage(FILE *out)
{
	fprintf(out,
		"usage: nextfs export [-f|--force] IMAGE NAME OUT.img\n"
		"       nextfs export IMAGE NAME - > stream.img\n"
		"\n"
		"Write snapshot NAME of the unmounted volume IMAGE as a standalone\n"
		"sparse ext2/3/4 image without snapshots, or to stdout ('-').\n"
		"An existing OUT.img is replaced only with --force.\n");
}

static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Open OUT: 0 or an exit code; *HOW: NX_WRITE_*. */
static int open_output(const char *out, int force, int *fd, int *how,
		       int *created)
{
	struct stat st;

	*created = 0;
	if (!strcmp(out, "-")) {
		*fd = STDOUT_FILENO;
		*how = NX_WRITE_STREAM;
		if (isatty(*fd)) {
			nx_cli_error("refusing to write an image to a terminal");
			return NX_CLI_USAGE;
		}
		return 0;
	}
	if (stat(out, &st) == 0 && S_ISBLK(st.st_mode)) {
		*fd = open(out, O_WRONLY | O_CLOEXEC);
		*how = NX_WRITE_DEVICE;	/* free blocks need not be written */
	} else {
		if (!force && access(out, F_OK) == 0) {
			nx_cli_error("%s exists (use --force to replace it)",
				     out);
			return NX_CLI_FAIL;
		}
		*fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			   0644);
		*how = NX_WRITE_FILE;
		*created = *fd >= 0;
	}
	if (*fd < 0) {
		nx_cli_error("cannot open %s: %s", out, strerror(errno));
		return NX_CLI_FAIL;
	}
	return 0;
}

static int do_export(const char *image, const char *name, const char *out,
		     int force)
{
	struct nx_imgsrc *src = NULL;
	struct nx_volume *vol;
	struct nx_progress prog;
	int fd = -1, how, created = 0, rc;
	char msg[512] = "";
	errcode_t err;

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
	rc = open_output(out, force, &fd, &how, &created);
	if (rc)
		goto out;
	nx_cli_progress_begin(&prog);
	err = nx_imgsrc_write(src, fd, how, &prog);
	nx_cli_progress_end(&prog);
	if (!err && fd != STDOUT_FILENO && close(fd) < 0)
		err = errno;
	else if (fd != STDOUT_FILENO)
		close(fd);
	fd = -1;
	if (err) {
		nx_cli_error("writing %s: %s", strcmp(out, "-") ? out :
			     "stdout", strerror(nx_errno(err)));
		if (created)
			unlink(out);
		rc = NX_CLI_FAIL;
	}
out:
	nx_imgsrc_close(src);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	return rc;
}

int nx_cmd_export(int argc, char **argv)
{
	const char *args[3];
	int n, force = 0, rc;
	const struct nx_cli_opt opts[] = {
		{ "-f|--force", &force, 1 },
		{ NULL, NULL, 0 },
	};

	rc = nx_cli_parse(argc, argv, "export", opts, args, 3, &n);
	if (rc == NX_CLI_HELP) {
		export_usage(stdout);
		return NX_CLI_OK;
	}
	if (rc)
		return rc;
	if (n != 3) {
		export_usage(stderr);
		return NX_CLI_USAGE;
	}
	return do_export(args[0], args[1], args[2], force);
}
