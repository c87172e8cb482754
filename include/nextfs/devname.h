/*
 * devname.h - which file a volume's name means.  Layer: volume/ (the
 * bottom); the programs on top pin names and set the resolver.
 *
 * A volume is named by a path (an image file, a block device), and the
 * volume layer opens that name several times: to lock it, to claim it,
 * to probe it, to replay its journal, through libext2fs.  Each open by
 * name resolves the path again, so whoever controls a directory on the
 * way could make the opens reach different files: the checks pass on one
 * and the writes go to another, or root writes a volume the user named
 * through a symbolic link to a file of root's.  So every open, stat or
 * lock of a volume by name goes through here, and a program resolves
 * each name once:
 *
 * Contract:
 * - nx_dev_pin(NAME, FD) takes FD, a descriptor of the file NAME is to
 *   mean (O_PATH will do).  From then on, in this process, every
 *   nx_dev_path/open/stat of NAME (the same string) reaches that file
 *   through /proc/self/fd, whatever NAME leads to by now.  Pins last
 *   until the process ends (nx_dev_unpin_all: for tests).  Pin before
 *   other threads open the name.
 * - nx_dev_set_resolver(FN): a name not yet pinned is resolved by FN on
 *   first use and pinned (the tools resolve paths under the rules of
 *   docs/paths.md); FN returns a descriptor or -1 with errno, and its
 *   refusal fails that use.  Without a resolver (libraries, unit tests)
 *   a name that is not pinned is used as it is.
 * - nx_dev_path() returns the path to use for NAME ("/proc/self/fd/N", or
 *   NAME), valid while the process runs, or NULL with errno.
 *   nx_dev_open() adds O_CLOEXEC; it returns a descriptor or -1 with
 *   errno, nx_dev_stat() 0 or -1 with errno.
 */
#ifndef NEXTFS_DEVNAME_H
#define NEXTFS_DEVNAME_H

#include <sys/stat.h>

typedef int (*nx_dev_resolve_fn)(const char *name);

void nx_dev_set_resolver(nx_dev_resolve_fn fn);
int nx_dev_pin(const char *name, int fd);
void nx_dev_unpin_all(void);

const char *nx_dev_path(const char *name);
int nx_dev_open(const char *name, int flags);
int nx_dev_stat(const char *name, struct stat *st);

#endif
