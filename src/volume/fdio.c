/*
 * fdio.c - whole transfers on a file descriptor (fdio.h).
 */
#include <errno.h>
#include <unistd.h>
#include "nextfs/fdio.h"

/* One call of the four that move bytes: OUT says which way. */
static ssize_t move_once(int fd, char *p, size_t len, off_t off, int out)
{
	if (out)
		return off == NX_FD_POS ? write(fd, p, len) :
					  pwrite(fd, p, len, off);
	return off == NX_FD_POS ? read(fd, p, len) : pread(fd, p, len, off);
}

/* The loop of both: a write that takes nothing is ENOSPC, a read EOF. */
static errcode_t move_all(int fd, char *p, size_t len, off_t off,
			  size_t *done, int out)
{
	size_t moved = 0;
	errcode_t err = 0;

	while (moved < len) {
		ssize_t n = move_once(fd, p + moved, len - moved,
				      off == NX_FD_POS ? off :
				      off + (off_t)moved, out);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			err = errno;
		else if (n == 0 && out)
			err = ENOSPC;
		if (n <= 0)
			break;
		moved += (size_t)n;
	}
	if (done)
		*done = moved;
	return err;
}

errcode_t nx_write_all(int fd, const void *buf, size_t len, off_t off,
		       size_t *done)
{
	/* Only read from: move_once writes it out. */
	return move_all(fd, (char *)buf, len, off, done, 1);
}

errcode_t nx_read_full(int fd, void *buf, size_t len, off_t off,
		       size_t *got)
{
	return move_all(fd, buf, len, off, got, 0);
}
