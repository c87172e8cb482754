/*
 * fdio.h - whole transfers on a file descriptor.
 * Layer: volume/ (the bottom: calls nothing above it; the CLI uses it
 * too).
 *
 * Contract: read(2) and write(2) may move fewer bytes than asked and may
 * fail with EINTR; these loop until all is moved.  OFF >= 0 is an offset
 * in the file (pread/pwrite: the file position stays); NX_FD_POS moves at
 * the file position (read/write: pipes, sockets, a stream).  Errors are
 * errno values; *DONE and *GOT (where not NULL) count the bytes moved,
 * also when an error ends the transfer.
 */
#ifndef NEXTFS_FDIO_H
#define NEXTFS_FDIO_H

#include <stddef.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>

#define NX_FD_POS	((off_t)-1)

/* Write all LEN bytes of BUF: 0, or ENOSPC when a write takes nothing. */
errcode_t nx_write_all(int fd, const void *buf, size_t len, off_t off,
		       size_t *done);

/* Read LEN bytes into BUF, fewer (*GOT) only at the end of the file. */
errcode_t nx_read_full(int fd, void *buf, size_t len, off_t off,
		       size_t *got);

#endif
