/*
 * holder.c - the volume lock, the block device claim, and the status
 * channel of a nextfs-fuse daemon (see nextfs/holder.h).
 *
 * Why a channel: a plain FUSE mount is gone from the kernel the moment
 * umount returns, but the daemon only then learns of it and still has to
 * commit, empty the journal and mark the volume clean.  Whoever comes
 * next (fsck, cp, losetup -d, another mount) must wait for that, and
 * someone should hear how it ended.  The volume lock says *that* the
 * daemon still holds the volume; the channel says *why* (still serving,
 * or finishing) and how it ended.  Abstract Unix sockets vanish with the
 * process, so a dead daemon leaves no stale name behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include "nextfs/devname.h"
#include "nextfs/holder.h"
#include "nextfs/volume.h"

/* ------------------------------------------------------------------ */
/* Text fields: mountinfo's escaping (\ooo for space, tab, newline, \). */

static void escape_field(char *out, size_t len, const char *in)
{
	size_t o = 0;

	for (; *in && o + 5 < len; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\\')
			o += snprintf(out + o, len - o, "\\%03o", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = 0;
}

/* Unescape IN (up to END) into OUT; returns the end of the field. */
static const char *unescape_field(const char *in, char *out, size_t len)
{
	size_t o = 0;

	while (*in && *in != ' ' && *in != '\n') {
		char ch = *in++;

		if (ch == '\\' && in[0] >= '0' && in[0] <= '3' &&
		    in[1] >= '0' && in[1] <= '7' && in[2] >= '0' &&
		    in[2] <= '7') {
			ch = (char)((in[0] - '0') * 64 + (in[1] - '0') * 8 +
				    (in[2] - '0'));
			in += 3;
		}
		if (o + 1 < len)
			out[o++] = ch;
	}
	if (len)
		out[o] = 0;
	return *in == ' ' ? in + 1 : in;
}

/* ------------------------------------------------------------------ */
/* Mounts.                                                             */

int nx_mountinfo_find(const char *mountpoint, struct nx_mountinfo *mi)
{
	char *line = NULL, mnt[PATH_MAX], fstype[64];
	size_t cap = 0;
	int found = ENOENT;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return errno;
	while (getline(&line, &cap, f) > 0) {
		const char *p = line, *sep;
		unsigned maj, min;
		int i;

		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - */
		for (i = 0; i < 2 && p; i++) {
			p = strchr(p, ' ');
			p = p ? p + 1 : NULL;
		}
		if (!p || sscanf(p, "%u:%u", &maj, &min) != 2)
			continue;
		p = strchr(p, ' ');
		p = p ? strchr(p + 1, ' ') : NULL;	/* skip ROOT */
		if (!p)
			continue;
		p = unescape_field(p + 1, mnt, sizeof(mnt));
		if (strcmp(mnt, mountpoint))
			continue;
		sep = strstr(p, " - ");
		if (!sep)
			continue;
		p = unescape_field(sep + 3, fstype, sizeof(fstype));
		mi->major = maj;
		mi->minor = min;
		snprintf(mi->fstype, sizeof(mi->fstype), "%s", fstype);
		p = unescape_field(p, mi->source, sizeof(mi->source));
		/* SUPER-OPTIONS: a FUSE mount names its user. */
		sep = strstr(p, "user_id=");
		mi->owner = sep && (sep == p || sep[-1] == ',') ?
			    (uid_t)strtoul(sep + 8, NULL, 10) : (uid_t)-1;
		found = 0;	/* go on: the last one is the topmost */
	}
	free(line);
	fclose(f);
	return found;
}

/* ------------------------------------------------------------------ */
/* Channel names.                                                      */

int nx_holder_volume_key(const char *device, char *key, size_t len)
{
	struct stat st;

	if (nx_dev_stat(device, &st) != 0)
		return -1;
	if (S_ISBLK(st.st_mode))
		snprintf(key, len, "nextfs/vol/b%u:%u", major(st.st_rdev),
			 minor(st.st_rdev));
	else
		snprintf(key, len, "nextfs/vol/f%llx:%llx",
			 (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
	return 0;
}

void nx_holder_mount_key(unsigned maj, unsigned min, char *key, size_t len)
{
	snprintf(key, len, "nextfs/mnt/%u:%u", maj, min);
}

static socklen_t abstract_addr(const char *key, struct sockaddr_un *sa)
{
	size_t n = strlen(key);

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (n > sizeof(sa->sun_path) - 1)
		n = sizeof(sa->sun_path) - 1;
	memcpy(sa->sun_path + 1, key, n);	/* sun_path[0] = 0: abstract */
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Root and our own user may talk to us (and we to them), or ALSO. */
static int peer_trusted(int fd, uid_t also)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return 0;
	return cred.uid == 0 || cred.uid == geteuid() ||
	       (also != (uid_t)-1 && cred.uid == also);
}

/* ------------------------------------------------------------------ */
/* Daemon side.                                                        */

#define MAX_CLIENTS	32

/*
 * The two names, by slot.  A name someone else still has is tried again
 * while we serve (RETRY_MS apart, for NX_HOLDER_WAIT_SECONDS): the mount's
 * number is ours alone once the kernel has given it to us, so whoever
 * has its name is the daemon of an earlier mount that had it and is
 * still finishing (or has said "done" and not yet gone).  Without the
 * name, "nextfs umount" would reach that daemon, or none, and could not
 * wait for us.
 */
enum { SLOT_VOLUME, SLOT_MOUNT, MAX_LISTEN };
#define RETRY_MS	100

struct nx_holder {
	pthread_t thread;
	int listen[MAX_LISTEN];		/* -1: not bound */
	char key[MAX_LISTEN][NX_HOLDER_KEY_MAX];	/* "": not to bind */
	int wake[2];			/* pipe: the state changed */
	pthread_mutex_t mu;
	int mu_ready, running;
	char *device, *mountpoint;
	enum nx_holder_state state;	/* under mu */
	int status;			/* under mu */
	char msg[512];			/* under mu */
	char hello[8 * PATH_MAX + 64];	/* the "serving" line */
	/* the thread's own */
	int clients[MAX_CLIENTS];
	int nclients;
};

static void say_to(struct nx_holder *h, int i, const char *line)
{
	size_t n = strlen(line);

	/* Our lines fit any socket buffer; a client that lets them pile up
	 * is dropped rather than waited for. */
	if (send(h->clients[i], line, n, MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)n) {
		close(h->clients[i]);
		h->clients[i] = h->clients[--h->nclients];
	}
}

static void say_to_all(struct nx_holder *h, const char *line)
{
	int i;

	for (i = h->nclients; i-- > 0;)
		say_to(h, i, line);
}

static void format_state(struct nx_holder *h, enum nx_holder_state state,
			 char *line, size_t len)
{
	char msg[3 * sizeof(h->msg)];

	if (state == NX_HOLDER_FINISHING) {
		snprintf(line, len, "finishing\n");
	} else if (state == NX_HOLDER_DONE) {
		pthread_mutex_lock(&h->mu);
		escape_field(msg, sizeof(msg), h->msg);
		snprintf(line, len, "done %d %s\n", h->status, msg);
		pthread_mutex_unlock(&h->mu);
	} else {
		line[0] = 0;
	}
}

static void accept_client(struct nx_holder *h, int lfd,
			  enum nx_holder_state state)
{
	char line[3 * sizeof(h->msg) + 32];
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (h->nclients == MAX_CLIENTS || !peer_trusted(fd, (uid_t)-1)) {
		close(fd);
		return;
	}
	h->clients[h->nclients++] = fd;
	say_to(h, h->nclients - 1, h->hello);
	format_state(h, state, line, sizeof(line));
	if (line[0] && h->clients[h->nclients - 1] == fd)
		say_to(h, h->nclients - 1, line);
}

/* Take in whoever is in the queue of SLOT. */
static void accept_pending(struct nx_holder *h, int slot,
			   enum nx_holder_state state)
{
	int before;

	while (h->listen[slot] >= 0) {
		before = h->nclients;
		accept_client(h, h->listen[slot], state);
		if (h->nclients == before)
			break;
	}
}

/* Bind the name of SLOT; a name that is taken stays to be tried again. */
static void listen_on(struct nx_holder *h, int slot)
{
	struct sockaddr_un sa;
	socklen_t len;
	int fd;

	if (h->listen[slot] >= 0 || !h->key[slot][0])
		return;
	len = abstract_addr(h->key[slot], &sa);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	if (bind(fd, (struct sockaddr *)&sa, len) != 0 ||
	    listen(fd, 8) != 0) {
		if (errno != EADDRINUSE)
			h->key[slot][0] = 0;	/* no use trying again */
		close(fd);
		return;
	}
	h->listen[slot] = fd;
}

static void close_listener(struct nx_holder *h, int slot)
{
	if (h->listen[slot] >= 0)
		close(h->listen[slot]);
	h->listen[slot] = -1;
	h->key[slot][0] = 0;
}

/* A name still to bind (someone else had it)? */
static int names_pending(const struct nx_holder *h)
{
	int i;

	for (i = 0; i < MAX_LISTEN; i++)
		if (h->listen[i] < 0 && h->key[i][0])
			return 1;
	return 0;
}

/*
 * Once the session has ended the mount is gone, and its number may be
 * given to the next mount at once: let its name go, for that mount's
 * daemon, after taking in whoever is still in its queue.  (Whoever
 * unmounts us has connected before.)  The volume's name stays until
 * "done": openers wait on it.
 */
static void mount_gone(struct nx_holder *h, enum nx_holder_state state)
{
	accept_pending(h, SLOT_MOUNT, state);
	close_listener(h, SLOT_MOUNT);
	if (h->listen[SLOT_VOLUME] < 0)
		h->key[SLOT_VOLUME][0] = 0;	/* too late to be asked */
}

static void *holder_main(void *arg)
{
	struct nx_holder *h = arg;
	struct pollfd pfd[MAX_LISTEN + 1 + MAX_CLIENTS];
	enum nx_holder_state sent = NX_HOLDER_SERVING, state;
	long long give_up = now_ms() + NX_HOLDER_WAIT_SECONDS * 1000LL;
	char line[2048], buf[256];
	int i, n, at[MAX_LISTEN];

	for (;;) {
		if (names_pending(h) && now_ms() > give_up)
			for (i = 0; i < MAX_LISTEN; i++)
				if (h->listen[i] < 0)
					h->key[i][0] = 0;
		n = 0;
		for (i = 0; i < MAX_LISTEN; i++) {
			at[i] = h->listen[i] >= 0 ? n : -1;
			if (h->listen[i] >= 0)
				pfd[n++] = (struct pollfd){ h->listen[i],
							    POLLIN, 0 };
		}
		pfd[n++] = (struct pollfd){ h->wake[0], POLLIN, 0 };
		for (i = 0; i < h->nclients; i++)
			pfd[n++] = (struct pollfd){ h->clients[i], POLLIN, 0 };
		if (poll(pfd, n, names_pending(h) ? RETRY_MS : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		while (read(h->wake[0], buf, sizeof(buf)) > 0)
			;
		pthread_mutex_lock(&h->mu);
		state = h->state;
		pthread_mutex_unlock(&h->mu);
		if (state != sent) {
			format_state(h, state, line, sizeof(line));
			say_to_all(h, line);
			if (state >= NX_HOLDER_FINISHING)
				mount_gone(h, state);
			sent = state;
		}
		if (state == NX_HOLDER_DONE) {
			/* Whoever is still in the queue hears it too. */
			for (i = 0; i < MAX_LISTEN; i++)
				accept_pending(h, i, state);
			break;
		}
		/*
		 * Clients only ever hang up; anything they send is ignored.
		 * (Non-blocking: the list may have changed since the poll.)
		 */
		for (i = h->nclients; i-- > 0;) {
			ssize_t got = read(h->clients[i], buf, sizeof(buf));

			if (got == 0 || (got < 0 && errno != EAGAIN &&
					 errno != EINTR)) {
				close(h->clients[i]);
				h->clients[i] = h->clients[--h->nclients];
			}
		}
		for (i = 0; i < MAX_LISTEN; i++)
			if (at[i] >= 0 && h->listen[i] >= 0 &&
			    (pfd[at[i]].revents & POLLIN))
				accept_client(h, h->listen[i], state);
		if (state == NX_HOLDER_SERVING)
			for (i = 0; i < MAX_LISTEN; i++)
				listen_on(h, i);
	}
	for (i = 0; i < h->nclients; i++)
		close(h->clients[i]);
	h->nclients = 0;
	return NULL;
}

static void free_holder(struct nx_holder *h)
{
	int i;

	for (i = 0; i < MAX_LISTEN; i++)
		close_listener(h, i);
	if (h->wake[0] >= 0) {
		close(h->wake[0]);
		close(h->wake[1]);
	}
	if (h->mu_ready)
		pthread_mutex_destroy(&h->mu);
	free(h->device);
	free(h->mountpoint);
	free(h);
}

struct nx_holder *nx_holder_start(const char *device, const char *mountpoint)
{
	struct nx_mountinfo mi;
	struct nx_holder *h = calloc(1, sizeof(*h));
	int i;

	if (!h)
		return NULL;
	h->wake[0] = h->wake[1] = -1;
	for (i = 0; i < MAX_LISTEN; i++)
		h->listen[i] = -1;
	h->state = NX_HOLDER_SERVING;
	h->device = strdup(device);
	h->mountpoint = strdup(mountpoint);
	if (nx_holder_volume_key(device, h->key[SLOT_VOLUME],
				 sizeof(h->key[SLOT_VOLUME])) != 0)
		h->key[SLOT_VOLUME][0] = 0;
	if (nx_mountinfo_find(mountpoint, &mi) == 0)
		nx_holder_mount_key(mi.major, mi.minor, h->key[SLOT_MOUNT],
				    sizeof(h->key[SLOT_MOUNT]));
	for (i = 0; i < MAX_LISTEN; i++)
		listen_on(h, i);
	if (!h->key[SLOT_VOLUME][0] && !h->key[SLOT_MOUNT][0]) {
		free_holder(h);		/* neither name can be ours */
		return NULL;
	}
	if (!h->device || !h->mountpoint ||
	    pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		free_holder(h);
		return NULL;
	}
	return h;
}

/* The "serving" line: in the process that answers (after a fork). */
static int make_hello(struct nx_holder *h)
{
	char *dev = malloc(4 * PATH_MAX), *mnt = malloc(4 * PATH_MAX);

	if (dev && mnt) {
		escape_field(dev, 4 * PATH_MAX, h->device);
		escape_field(mnt, 4 * PATH_MAX, h->mountpoint);
		snprintf(h->hello, sizeof(h->hello), "serving %ld %s %s\n",
			 (long)getpid(), dev, mnt);
	}
	free(dev);
	free(mnt);
	return h->hello[0] ? 0 : -1;
}

int nx_holder_serve(struct nx_holder *h)
{
	if (!h)
		return -1;
	pthread_mutex_init(&h->mu, NULL);
	h->mu_ready = 1;
	if (make_hello(h) != 0 ||
	    pthread_create(&h->thread, NULL, holder_main, h) != 0)
		return -1;
	h->running = 1;
	return 0;
}

static void set_state(struct nx_holder *h, enum nx_holder_state state,
		      int status, const char *msg)
{
	ssize_t ignored;

	if (!h->running)
		return;
	pthread_mutex_lock(&h->mu);
	if (h->state < state) {
		h->state = state;
		h->status = status;
		snprintf(h->msg, sizeof(h->msg), "%s", msg ? msg : "");
	}
	pthread_mutex_unlock(&h->mu);
	ignored = write(h->wake[1], "", 1);
	(void)ignored;
}

void nx_holder_finishing(struct nx_holder *h)
{
	if (h)
		set_state(h, NX_HOLDER_FINISHING, 0, NULL);
}

void nx_holder_done(struct nx_holder *h, int status, const char *msg)
{
	if (!h)
		return;
	if (h->running) {
		set_state(h, NX_HOLDER_DONE, status, msg);
		pthread_join(h->thread, NULL);
	}
	free_holder(h);
}

/* ------------------------------------------------------------------ */
/* Client side.                                                        */

int nx_holder_connect(const char *key, uid_t also_uid,
		      struct nx_holder_conn *c)
{
	struct sockaddr_un sa;
	socklen_t len = abstract_addr(key, &sa);

	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	if (connect(c->fd, (struct sockaddr *)&sa, len) != 0 ||
	    !peer_trusted(c->fd, also_uid)) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	return 0;
}

static void parse_line(struct nx_holder_conn *c, const char *line)
{
	char word[16];
	const char *p = unescape_field(line, word, sizeof(word));

	if (!strcmp(word, "serving")) {
		c->pid = (pid_t)strtol(p, NULL, 10);
		p = strchr(p, ' ');
		if (p) {
			p = unescape_field(p + 1, c->device,
					   sizeof(c->device));
			unescape_field(p, c->mountpoint,
				       sizeof(c->mountpoint));
		}
		c->state = NX_HOLDER_SERVING;
	} else if (!strcmp(word, "finishing")) {
		c->state = NX_HOLDER_FINISHING;
	} else if (!strcmp(word, "done")) {
		c->status = (int)strtol(p, NULL, 10);
		p = strchr(p, ' ');
		c->msg[0] = 0;
		if (p)
			unescape_field(p + 1, c->msg, sizeof(c->msg));
		c->state = NX_HOLDER_DONE;
	}
}

/* Parse every complete line in the buffer; 1 if there was one. */
static int take_lines(struct nx_holder_conn *c)
{
	char *nl;
	int any = 0;

	while ((nl = memchr(c->buf, '\n', c->len))) {
		size_t n = (size_t)(nl - c->buf) + 1;

		*nl = 0;
		parse_line(c, c->buf);
		memmove(c->buf, c->buf + n, c->len - n);
		c->len -= n;
		any = 1;
	}
	return any;
}

int nx_holder_next(struct nx_holder_conn *c, int timeout_ms)
{
	long long deadline = now_ms() + timeout_ms;
	struct pollfd pfd;
	ssize_t n;

	if (take_lines(c))
		return 0;
	if (c->fd < 0)
		return 0;	/* hung up before: nothing more will come */
	for (;;) {
		int wait = timeout_ms < 0 ? -1 : (int)(deadline - now_ms());

		if (timeout_ms >= 0 && wait < 0)
			wait = 0;
		pfd = (struct pollfd){ c->fd, POLLIN, 0 };
		n = poll(&pfd, 1, wait);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return ETIMEDOUT;
		if (c->len == sizeof(c->buf))
			c->len = 0;	/* an overlong line: not ours */
		n = n < 0 ? -1 : read(c->fd, c->buf + c->len,
				       sizeof(c->buf) - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(c->fd);
			c->fd = -1;
			if (c->state != NX_HOLDER_DONE)
				c->state = NX_HOLDER_GONE;
			return 0;
		}
		c->len += (size_t)n;
		if (take_lines(c))
			return 0;
	}
}

void nx_holder_disconnect(struct nx_holder_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* ------------------------------------------------------------------ */
/* The lock, and waiting for a finishing daemon.                       */

static errcode_t busy(const char *device, char *msg, size_t msglen)
{
	nx_set_msg(msg, msglen, "%s is in use by nextfs (mounted with "
		   "nextfs-fuse or opened by another nextfs command); unmount "
		   "it first", device);
	return EBUSY;
}

/* Is a FUSE file system mounted at MOUNTPOINT (in this namespace)? */
static int fuse_mounted_at(const char *mountpoint)
{
	struct nx_mountinfo mi;

	return nx_mountinfo_find(mountpoint, &mi) == 0 &&
	       !strncmp(mi.fstype, "fuse", 4);
}

/*
 * A daemon that says "serving" although its mount is gone from here has
 * most likely not yet heard of the unmount that just returned (plain
 * FUSE mounts end the session after umount(2) returns, and the daemon
 * may not run at once on a busy machine).  Wait up to MS for it to say
 * "finishing"; one that serves a mount elsewhere (another mount
 * namespace) keeps saying "serving" and is named as serving after that.
 */
#define UNMOUNTED_GRACE_MS	5000

static void wait_while_serving(struct nx_holder_conn *c, int ms)
{
	long long deadline = now_ms() + ms;

	while (c->state == NX_HOLDER_SERVING) {
		long long left = deadline - now_ms();

		if (left <= 0 || nx_holder_next(c, (int)left) == ETIMEDOUT)
			break;
	}
}

/*
 * The lock is taken.  If a nextfs-fuse daemon holds it and is finishing
 * (its mount is already gone), wait for it to let go; one that still
 * serves is named.  0 when FD got the lock after all.
 */
static errcode_t wait_for_holder(const char *device, int fd, int how,
				 char *msg, size_t msglen)
{
	long long deadline = now_ms() + NX_HOLDER_WAIT_SECONDS * 1000LL;
	struct nx_holder_conn *c = malloc(sizeof(*c));
	char key[NX_HOLDER_KEY_MAX];
	int noted = 0;
	errcode_t err = 0;

	if (!c)
		return EXT2_ET_NO_MEMORY;
	if (nx_holder_volume_key(device, key, sizeof(key)) != 0 ||
	    nx_holder_connect(key, (uid_t)-1, c) != 0) {
		free(c);
		return busy(device, msg, msglen);
	}
	if (nx_holder_next(c, 2000) == 0 && c->state == NX_HOLDER_SERVING)
		nx_holder_next(c, 0);	/* "finishing" may follow at once */
	if (c->state == NX_HOLDER_SERVING && !fuse_mounted_at(c->mountpoint))
		wait_while_serving(c, UNMOUNTED_GRACE_MS);
	if (c->state == NX_HOLDER_SERVING) {
		nx_set_msg(msg, msglen, "%s is mounted at %s by nextfs-fuse "
			   "(pid %ld); unmount it first: nextfs umount %s",
			   device, c->mountpoint, (long)c->pid,
			   c->mountpoint);
		err = EBUSY;
		goto out;
	}
	while (c->state == NX_HOLDER_FINISHING) {
		long long left = deadline - now_ms();

		if (left <= 0) {
			nx_set_msg(msg, msglen, "%s: nextfs-fuse (pid %ld) is "
				   "still writing it back after %d s; try "
				   "again when it has finished", device,
				   (long)c->pid, NX_HOLDER_WAIT_SECONDS);
			err = EBUSY;
			goto out;
		}
		if (nx_holder_next(c, left > 1000 ? 1000 : (int)left) ==
		    ETIMEDOUT && !noted++)
			fprintf(stderr, "nextfs: %s: waiting for nextfs-fuse "
				"(pid %ld) to finish writing it back (at most "
				"%d s)\n", device, (long)c->pid,
				NX_HOLDER_WAIT_SECONDS);
	}
	/* Done, gone, or silent: the lock decides. */
	if (flock(fd, how | LOCK_NB) != 0)
		err = busy(device, msg, msglen);
out:
	nx_holder_disconnect(c);
	free(c);
	return err;
}

errcode_t nx_lock_device(const char *device, int exclusive, int *fdp,
			 char *msg, size_t msglen)
{
	int how = exclusive ? LOCK_EX : LOCK_SH;
	int fd = nx_dev_open(device, O_RDONLY), e;
	errcode_t err;

	if (fd < 0) {
		e = errno;
		nx_set_msg(msg, msglen, "%s: %s", device, strerror(e));
		return e;
	}
	if (flock(fd, how | LOCK_NB) == 0) {
		*fdp = fd;
		return 0;
	}
	e = errno;
	if (e != EWOULDBLOCK) {
		close(fd);
		nx_set_msg(msg, msglen, "%s: cannot lock: %s", device,
			   strerror(e));
		return e;
	}
	err = wait_for_holder(device, fd, how, msg, msglen);
	if (err) {
		close(fd);
		return err;
	}
	*fdp = fd;
	return 0;
}

errcode_t nx_claim_device(const char *device, int *fdp, char *msg,
			  size_t msglen)
{
	struct stat st;
	int fd, e;

	*fdp = -1;
	if (nx_dev_stat(device, &st) != 0 || !S_ISBLK(st.st_mode))
		return 0;
	/* O_EXCL on a block device: the claim a kernel mount also takes. */
	fd = nx_dev_open(device, O_RDONLY | O_EXCL);
	if (fd < 0) {
		e = errno;
		if (e == EBUSY)
			nx_set_msg(msg, msglen, "%s is busy (mounted?): the "
				   "kernel or another program has it open "
				   "exclusively; unmount it first", device);
		else
			nx_set_msg(msg, msglen, "%s: %s", device, strerror(e));
		return e;
	}
	*fdp = fd;
	return 0;
}
