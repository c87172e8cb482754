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

#endif
