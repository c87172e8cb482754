/*
 * compare.c - do two files of a mount hold the same thing?  Shared by
 * "nextfs diff" on a mountpoint and "nextfs versions", which compare a
 * file in two trees (snapshot views or the live tree) when its inode's
 * attributes alone cannot tell.
 */
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

int nx_cli_files_differ(const char *a, const char *b)
{
	char ba[65536], bb[65536];
	int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY |
							    O_CLOEXEC);
	int differs = 1;

	if (fa < 0 || fb < 0)
		goto out;
	for (;;) {
		ssize_t na = read(fa, ba, sizeof(ba)), nb = read(fb, bb,
							       sizeof(bb));

		if (na < 0 || nb < 0 || na != nb || memcmp(ba, bb, na))
			goto out;
		if (!na)
			break;
	}
	differs = 0;
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return differs;
}

int nx_cli_links_differ(const char *a, const char *b)
{
	char ta[PATH_MAX], tb[PATH_MAX];
	ssize_t na = readlink(a, ta, sizeof(ta)), nb = readlink(b, tb,
								sizeof(tb));

	return na != nb || (na > 0 && memcmp(ta, tb, na));
}
