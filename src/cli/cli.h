/*
 * cli.h - shared pieces of the "nextfs" command: exit codes, error
 * printing, and one function per subcommand (cmd_*.c).
 */
#ifndef NEXTFS_CLI_H
#define NEXTFS_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes scripts can rely on. */
#define NX_CLI_OK	0
#define NX_CLI_FAIL	1	/* the operation failed; nothing changed */
#define NX_CLI_USAGE	2	/* bad command line */

/* "nextfs: " + message + newline on stderr. */
void nx_cli_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
void nx_cli_human_size(uint64_t bytes, char *buf, size_t len);

int nx_cmd_snapshot(int argc, char **argv);
int nx_cmd_check(int argc, char **argv);
int nx_cmd_export(int argc, char **argv);
int nx_cmd_diff(int argc, char **argv);
int nx_cmd_restore(int argc, char **argv);
int nx_cmd_info(int argc, char **argv);
int nx_cmd_umount(int argc, char **argv);

/* progress.c: a progress bar on stderr when it is a terminal. */
struct nx_progress;
void nx_cli_progress_begin(struct nx_progress *prog);
void nx_cli_progress_end(struct nx_progress *prog);

/*
 * Open IMAGE for reading through the snapshot engine (nx_volume_open with
 * NX_VOL_RDONLY), printing the reason on failure.  Returns 0 or
 * NX_CLI_FAIL.  (cmd_diff.c)
 */
struct nx_volume;
int nx_cli_open_image(const char *image, struct nx_volume **vol);

#endif
