/*
 * compare.c - do two files of a mount hold the same thing?  Shared by
 * "nextfs diff" on a mountpoint and "nextfs versions", which compare a
 * file in two trees (snapshot views or the live tree) when its inode's
 * attributes alone cannot tell.  The files are opened below the trees'
 * directories with nx_sp_open() (safepath.h): a name on the way that a
 * user swapped for a symbolic link is not followed, and paths of any
 * length work.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nextfs/fdio.h"
#include "nextfs/safepath.h"
#include "cli.h"

#define CHUNK	65536

int nx_cli_files_differ(int da, const char *ra, int db, const char *rb)
{
	int fa = nx_sp_open(da, ra, O_RDONLY), fb = -1, rc = -1, e;
	char *ba = malloc(CHUNK), *bb = malloc(CHUNK);
	size_t na, nb;
	errcode_t err;

	if (fa >= 0)
		fb = nx_sp_open(db, rb, O_RDONLY);
	if (!ba || !bb)
		errno = ENOMEM;
	while (fb >= 0 && ba && bb && rc < 0) {
		err = nx_read_full(fa, ba, CHUNK, NX_FD_POS, &na);
		if (!err)
			err = nx_read_full(fb, bb, CHUNK, NX_FD_POS, &nb);
		if (err) {
			errno = (int)err;
			break;
		}
		if (na != nb || memcmp(ba, bb, na))
			rc = 1;
		else if (!na)
			rc = 0;
	}
	e = errno;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	free(ba);
	free(bb);
	errno = e;
	return rc;
}

int nx_cli_links_differ(int da, const char *ra, int db, const char *rb)
{
	int fa = nx_sp_open(da, ra, O_PATH), fb = -1, rc = -1, e;
	char *ta = NULL, *tb = NULL;
	size_t la, lb;

	if (fa >= 0)
		fb = nx_sp_open(db, rb, O_PATH);
	if (fb >= 0 && (ta = nx_sp_readlink(fa, "", &la)) &&
	    (tb = nx_sp_readlink(fb, "", &lb)))
		rc = la != lb || memcmp(ta, tb, la);
	e = errno;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	free(ta);
	free(tb);
	errno = e;
	return rc;
}
