/*
 * devname.c - volume names pinned to the files they meant when they were
 * resolved (devname.h has the contract).
 *
 * Why /proc/self/fd/N and not the descriptor itself: libext2fs opens its
 * device by name (through our io manager), and so do the lock, the claim
 * and the probe, each with the flags it needs.  Opening /proc/self/fd/N
 * opens the file N refers to anew, with those flags and the usual
 * permission checks, and resolves no path.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nextfs/devname.h"

struct pin {
	struct pin *next;
	char *name;
	int fd;
	char path[32];		/* "/proc/self/fd/N" */
};

static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pin *pins;
static nx_dev_resolve_fn resolver;

void nx_dev_set_resolver(nx_dev_resolve_fn fn)
{
	pthread_mutex_lock(&pins_lock);
	resolver = fn;
	pthread_mutex_unlock(&pins_lock);
}

static struct pin *find_pin(const char *name)
{
	struct pin *p;

	for (p = pins; p; p = p->next)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

/* With pins_lock held.  Takes FD. */
static struct pin *add_pin(const char *name, int fd)
{
	struct pin *p = find_pin(name);

	if (p) {			/* pinned again: the new file counts */
		close(p->fd);
	} else {
		p = calloc(1, sizeof(*p));
		if (p)
			p->name = strdup(name);
		if (!p || !p->name) {
			free(p);
			close(fd);
			errno = ENOMEM;
			return NULL;
		}
		p->next = pins;
		pins = p;
	}
	p->fd = fd;
	snprintf(p->path, sizeof(p->path), "/proc/self/fd/%d", fd);
	return p;
}

int nx_dev_pin(const char *name, int fd)
{
	struct pin *p;

	pthread_mutex_lock(&pins_lock);
	p = add_pin(name, fd);
	pthread_mutex_unlock(&pins_lock);
	return p ? 0 : -1;
}

void nx_dev_unpin_all(void)
{
	struct pin *p;

	pthread_mutex_lock(&pins_lock);
	while ((p = pins)) {
		pins = p->next;
		close(p->fd);
		free(p->name);
		free(p);
	}
	pthread_mutex_unlock(&pins_lock);
}

const char *nx_dev_path(const char *name)
{
	const char *path = name;
	struct pin *p;
	int fd;

	pthread_mutex_lock(&pins_lock);
	p = find_pin(name);
	if (!p && resolver) {
		fd = resolver(name);
		p = fd < 0 ? NULL : add_pin(name, fd);
		if (!p)
			path = NULL;	/* errno from the resolver */
	}
	if (p)
		path = p->path;
	pthread_mutex_unlock(&pins_lock);
	return path;
}

int nx_dev_open(const char *name, int flags)
{
	const char *path = nx_dev_path(name);

	return path ? open(path, flags | O_CLOEXEC) : -1;
}

int nx_dev_stat(const char *name, struct stat *st)
{
	const char *path = nx_dev_path(name);

	return path ? stat(path, st) : -1;
}
