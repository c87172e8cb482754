/*
 * cmd_receive.c - "nextfs receive [-F] [--resume] [-f FILE] TARGET":
 * apply a send stream (btrfs's format) to an image or a mounted volume
 * and take the snapshot it describes; "--abort" gives up a pending
 * receive, "--token" prints where it stopped (docs/replication.md).
 *
 * An image is opened here and the receive runs in this process
 * (receive.h); a mountpoint (or an image a daemon serves) gets the
 * stream through the mount's receive ioctls (nxioctl.h) and the daemon
 * applies it.  Either way the stream is read here, in large pieces.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/nxioctl.h"
#include "nextfs/open.h"
#include "nextfs/receive.h"
#include "cli.h"
#include "output.h"

#define READ_SIZE	(1U << 20)

/* Exit status of an interrupted receive that can be resumed. */
#define NX_CLI_RESUMABLE	3

/* ------------------------------------------------------------------ */
/* A receive, in this process or in the daemon.                        */

struct rcv {
	const char *target;
	/* offline */
	struct nx_volume *vol;
	struct nx_recv *r;
	/* through a mount */
	char *mnt;
	int fd;
	uint64_t session;
	struct nx_ioc_recv_data *chunk;
};

static errcode_t off_release(void *priv, ext2_ino_t ino)
{
	return nx_inode_release(priv, ino);
}

static errcode_t off_take(void *priv, const char *name,
			  struct nx_snapinfo *info)
{
	return nx_snap_take(priv, name, info);
}

static void env_of(struct rcv *c, struct nx_recv_env *env)
{
	memset(env, 0, sizeof(*env));
	env->release = off_release;
	env->take = off_take;
	env->priv = c->vol;
}

/* What the daemon refused: one line. */
static void daemon_error(const struct rcv *c, int err)
{
	errno = err;
	if (errno == ENOTTY)
		nx_cli_error("%s: the nextfs daemon serving it cannot receive "
			     "(an older version?)", c->mnt);
	else if (errno == EPERM)
		nx_cli_error("%s: only root and the user who mounted the volume "
			     "may receive into it", c->mnt);
	else if (errno == EBUSY)
		nx_cli_error("%s: another receive is running on it", c->mnt);
	else
		nx_cli_error("%s: %s", c->mnt, strerror(errno));
}

static int daemon_says(struct rcv *c, unsigned long cmd, void *arg)
{
	if (ioctl(c->fd, cmd, arg) >= 0)
		return NX_CLI_OK;
	daemon_error(c, errno);
	return NX_CLI_FAIL;
}

/* Open TARGET (read-write) and, unless only asking, start the receive. */
static int rcv_open(struct rcv *c, const char *target)
{
	memset(c, 0, sizeof(*c));
	c->target = target;
	c->fd = -1;
	if (nx_cli_open_target(target, 0, &c->vol, &c->mnt))
		return NX_CLI_FAIL;
	if (c->mnt) {
		c->fd = nx_cli_mount_root(c->mnt, 0);
		if (c->fd < 0)
			return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}

static int rcv_begin(struct rcv *c, int flags)
{
	struct nx_ioc_recv_begin b;
	struct nx_recv_env env;
	char msg[512] = "";
	errcode_t err;

	if (!c->mnt) {
		env_of(c, &env);
		nx_volume_lock(c->vol);
		err = nx_recv_open(c->vol, flags, &env, &c->r, msg, sizeof(msg));
		nx_volume_unlock(c->vol);
		if (err) {
			nx_cli_error("%s", msg[0] ? msg : error_message(err));
			return NX_CLI_FAIL;
		}
		return NX_CLI_OK;
	}
	c->chunk = malloc(sizeof(*c->chunk));
	if (!c->chunk) {
		nx_cli_error("out of memory");
		return NX_CLI_FAIL;
	}
	memset(&b, 0, sizeof(b));
	b.flags = ((flags & NX_RECV_FORCE) ? NX_IOC_RECV_FORCE : 0) |
		  ((flags & NX_RECV_RESUME) ? NX_IOC_RECV_RESUME : 0);
	if (daemon_says(c, NX_IOC_RECV_BEGIN, &b))
		return NX_CLI_FAIL;
	if (b.error) {
		b.msg[sizeof(b.msg) - 1] = 0;
		nx_cli_error("%s", b.msg[0] ? b.msg : strerror((int)b.error));
		return NX_CLI_FAIL;
	}
	c->session = b.session;
	return NX_CLI_OK;
}

/* Status of the session (or, before one, of the target's pending one). */
static int rcv_status(struct rcv *c, struct nx_ioc_recv_status *st)
{
	memset(st, 0, sizeof(*st));
	if (!c->mnt) {
		nx_volume_lock(c->vol);
		nx_recv_status(c->r, c->vol, st);
		nx_volume_unlock(c->vol);
		return NX_CLI_OK;
	}
	st->session = c->session;
	return daemon_says(c, NX_IOC_RECV_STATUS, st);
}

/* LEN bytes (EOF: the last): 0 more, NX_RECV_DONE, or -1 failed. */
static int rcv_feed(struct rcv *c, const char *buf, size_t len, int eof)
{
	size_t done = 0;
	int rc = 0;

	if (!c->mnt) {
		nx_volume_lock(c->vol);
		rc = nx_recv_feed(c->r, buf, len);
		if (rc == 0 && eof)
			rc = nx_recv_eof(c->r);
		nx_volume_unlock(c->vol);
		return rc == 0 || rc == NX_RECV_DONE ? rc : -1;
	}
	do {
		size_t n = len - done < NX_IOC_RECV_CHUNK ? len - done :
			   NX_IOC_RECV_CHUNK;

		c->chunk->session = c->session;
		c->chunk->len = (uint32_t)n;
		c->chunk->flags = eof && done + n == len ? NX_IOC_RECV_EOF : 0;
		memcpy(c->chunk->data, buf + done, n);
		rc = ioctl(c->fd, NX_IOC_RECV_DATA, c->chunk);
		if (rc < 0) {
			/* The receive's own failures: STATUS says what. */
			if (errno != ECANCELED)
				daemon_error(c, errno);
			return -1;
		}
		done += n;
	} while (done < len && rc == 0);
	return rc == 1 ? NX_RECV_DONE : 0;
}

/* Stopped by a signal: keep the cursor, committed. */
static void rcv_stop(struct rcv *c)
{
	struct nx_ioc_recv_end e;

	if (!c->mnt) {
		nx_volume_lock(c->vol);
		nx_recv_stop(c->r);
		nx_volume_unlock(c->vol);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.session = c->session;
	e.how = NX_IOC_RECV_STOP;
	ioctl(c->fd, NX_IOC_RECV_END, &e);
}

static int rcv_close(struct rcv *c)
{
	struct nx_ioc_recv_end e;
	errcode_t err = 0;

	if (c->r) {
		nx_volume_lock(c->vol);
		nx_recv_close(c->r);
		nx_volume_unlock(c->vol);
	}
	if (c->vol)
		err = nx_volume_close(c->vol);
	if (c->fd >= 0) {
		if (c->session) {
			memset(&e, 0, sizeof(e));
			e.session = c->session;
			ioctl(c->fd, NX_IOC_RECV_END, &e);
		}
		close(c->fd);
	}
	free(c->chunk);
	free(c->mnt);
	if (err) {
		nx_cli_error("closing %s: %s", c->target, error_message(err));
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}

/* ------------------------------------------------------------------ */
/* Reporting.                                                          */

static void report_json(const struct nx_ioc_recv_status *st,
			const char *status)
{
	struct nx_json j;
	struct timespec ts;

	nx_json_init(&j, stdout);
	nx_json_open(&j, NULL, '{');
	nx_json_str(&j, "status", status);
	if (st->name[0])
		nx_json_str(&j, "snapshot", st->name);
	nx_json_bool(&j, "incremental",
		     (st->flags & NX_IOC_RECV_INCREMENTAL) != 0);
	if (st->parent[0])
		nx_json_str(&j, "parent", st->parent);
	if (st->state == NX_IOC_RECV_DONE) {
		ts.tv_sec = st->taken_sec;
		ts.tv_nsec = st->taken_nsec;
		nx_json_u64(&j, "id", st->snap_id);
		nx_json_time(&j, "taken", &ts);
	}
	if (st->state != NX_IOC_RECV_PENDING &&
	    st->state != NX_IOC_RECV_NONE) {
		nx_json_u64(&j, "commands", st->commands);
		nx_json_u64(&j, "stream_bytes", st->bytes);
		nx_json_u64(&j, "data_bytes", st->data_bytes);
		nx_json_u64(&j, "skipped_commands", st->skipped);
		nx_json_u64(&j, "ignored_btrfs_properties",
			     st->ignored_xattrs);
	}
	nx_json_bool(&j, "resumable", (st->flags & NX_IOC_RECV_RESUMABLE) != 0);
	if (st->flags & NX_IOC_RECV_RESUMABLE) {
		nx_json_u64(&j, "next_command", st->next_index);
		nx_json_u64(&j, "next_offset", st->next_offset);
		if (st->token[0])
			nx_json_str(&j, "token", st->token);
	}
	if (st->state == NX_IOC_RECV_FAILED) {
		nx_json_bool(&j, "rolled_back",
			     (st->flags & NX_IOC_RECV_ROLLED_BACK) != 0);
		nx_json_bool(&j, "refused",
			     (st->flags & NX_IOC_RECV_REFUSED) != 0);
	}
	if (st->msg[0])
		nx_json_str(&j, "message", st->msg);
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

/* How to go on from a pending receive. */
static void say_pending(const struct rcv *c,
			const struct nx_ioc_recv_status *st)
{
	nx_cli_error("the receive of '%s' stopped before command %" PRIu64
		     " (stream offset %" PRIu64 "): 'nextfs receive --resume %s'"
		     " with the same stream continues it, or 'nextfs send ... "
		     "--resume TOKEN' with the token '%s'; 'nextfs receive "
		     "--abort %s' gives it up", st->name, st->next_index,
		     st->next_offset, c->target, st->token, c->target);
}

static int report(const struct rcv *c, int rc, int json, int verbose,
		  const struct nx_ioc_recv_status *st)
{
	char size[32];

	if (rc == NX_RECV_DONE) {
		if (json) {
			report_json(st, "received");
		} else if (verbose) {
			nx_cli_human_size(st->data_bytes, size, sizeof(size));
			fputs("received snapshot ", stdout);
			nx_out_print_quoted(stdout, st->name);
			if (st->flags & NX_IOC_RECV_INCREMENTAL) {
				fputs(" (incremental from ", stdout);
				nx_out_print_quoted(stdout, st->parent);
				fputs(")", stdout);
			}
			printf(": %" PRIu64 " commands, %s of file data\n",
			       st->commands, size);
		}
		if (st->ignored_xattrs)
			nx_cli_error("warning: %" PRIu64 " btrfs properties "
				     "(btrfs.* attributes) have no place on ext4 "
				     "and were left out", st->ignored_xattrs);
		return NX_CLI_OK;
	}
	if (json)
		report_json(st, (st->flags & NX_IOC_RECV_RESUMABLE) &&
			    !(st->flags & NX_IOC_RECV_REFUSED) ? "interrupted" :
			    "failed");
	nx_cli_error("receive: %s", st->msg[0] ? st->msg : "failed");
	if ((st->flags & NX_IOC_RECV_RESUMABLE) && st->token[0]) {
		say_pending(c, st);
		/* refused: a receive pending before stays so, nothing more */
		return st->flags & NX_IOC_RECV_REFUSED ? NX_CLI_FAIL :
		       NX_CLI_RESUMABLE;
	}
	return NX_CLI_FAIL;
}

/* ------------------------------------------------------------------ */
/* The stream.                                                         */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* Stop between two reads on INT, TERM, HUP: resumable, not killed. */
static void catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;	/* no SA_RESTART: read() returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* Read FD to its end into the receive: NX_RECV_DONE, 0 (stopped), -1. */
static int pump(struct rcv *c, int fd, const char *what)
{
	char *buf = malloc(READ_SIZE);
	int rc = 0;

	if (!buf) {
		nx_cli_error("out of memory");
		return -1;
	}
	while (rc == 0 && !stop_signal) {
		ssize_t n = read(fd, buf, READ_SIZE);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			/* The stream is cut: what came is kept, resumable. */
			nx_cli_error("reading %s: %s", what, strerror(errno));
			rc = rcv_feed(c, buf, 0, 1);
			break;
		}
		rc = rcv_feed(c, buf, (size_t)n, n == 0);
		if (n == 0 && rc == 0)
			rc = -1;	/* (eof answers DONE or an error) */
	}
	free(buf);
	return rc;
}

/*
 * Read the stream up to the end of its first command (or its end, or a
 * broken one: the receive says what is wrong with it) into *BUF.
 */
static int read_first(int fd, const char *what, char **buf, size_t *len)
{
	struct nx_ss_decoder d;
	struct nx_ss_cmd cmd;
	size_t cap = 65536, used;
	int rc = NX_SS_MORE;

	*len = 0;
	*buf = malloc(cap);
	if (!*buf) {
		nx_cli_error("out of memory");
		return -1;
	}
	nx_ss_dec_init(&d, NX_SS_DEC_PRIVATE);
	while (rc == NX_SS_MORE && !stop_signal) {
		ssize_t n;

		/* 8 MiB without a whole first command (or no memory for
		 * more): the receive will say what is wrong. */
		if (*len == cap && (cap >= (8U << 20) ||
				    nx_grow((void **)buf, &cap, *len, 1, 65536)))
			break;
		n = read(fd, *buf + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			nx_cli_error("reading %s: %s", what, strerror(errno));
			return -1;
		}
		if (n == 0)
			break;
		*len += (size_t)n;
		if (!d.version)
			rc = nx_ss_decode_header(&d, *buf, *len, &used);
		if (d.version)
			rc = nx_ss_decode_cmd(&d, *buf + NX_SS_HEADER_LEN,
					      *len - NX_SS_HEADER_LEN, &cmd,
					      &used);
	}
	return 0;
}

/*
 * An image: check the stream's start against it opened read-only first,
 * so that a refusal leaves it byte for byte as it was (a read-write open
 * writes the superblock).  NX_CLI_OK when the receive may start.
 */
static int precheck(const char *image, int flags, const char *first,
		    size_t len)
{
	struct nx_volume *vol = NULL;
	struct nx_recv *r = NULL;
	struct nx_recv_env env;
	char msg[768] = "";
	errcode_t err;
	int rc;

	if (nx_cli_pin_image(image))
		return NX_CLI_FAIL;
	/*
	 * Served by a daemon (EBUSY: it checks), a journal to replay first,
	 * any other trouble: the read-write open says what it is.
	 */
	err = nx_open_volume(image, NX_VOL_RDONLY, &vol, msg, sizeof(msg));
	if (err)
		return NX_CLI_OK;
	memset(&env, 0, sizeof(env));
	nx_volume_lock(vol);
	err = nx_recv_open(vol, flags | NX_RECV_CHECK, &env, &r, msg,
			   sizeof(msg));
	rc = err ? (int)err : nx_recv_feed(r, first, len);
	if (rc == 0)
		rc = nx_recv_eof(r);
	if (rc != NX_RECV_CHECKED)
		nx_cli_error("%s", err ? (msg[0] ? msg : error_message(err)) :
			     nx_recv_msg(r));
	nx_recv_close(r);
	nx_volume_unlock(vol);
	nx_volume_close(vol);
	return rc == NX_RECV_CHECKED ? NX_CLI_OK : NX_CLI_FAIL;
}

static int do_receive(struct rcv *c, int fd, const char *what, int json,
		      int verbose, const char *first, size_t flen)
{
	struct nx_ioc_recv_status st;
	int rc;

	rc = rcv_feed(c, first, flen, 0);
	if (rc == 0)
		rc = pump(c, fd, what);
	if (rc == 0 && stop_signal) {
		rcv_stop(c);
		if (rcv_status(c, &st))
			return NX_CLI_FAIL;
		snprintf(st.msg, sizeof(st.msg), "stopped by signal %d",
			 (int)stop_signal);
		if (!(st.flags & NX_IOC_RECV_RESUMABLE)) {
			/* nothing was applied yet: nothing changed */
			st.state = NX_IOC_RECV_FAILED;
		}
		return report(c, -1, json, verbose, &st);
	}
	if (rcv_status(c, &st))
		return NX_CLI_FAIL;
	return report(c, rc, json, verbose, &st);
}

/* --token and --abort: about the pending receive, no stream. */
static int pending_op(struct rcv *c, int abort, int json)
{
	struct nx_ioc_recv_status st;
	struct nx_ioc_recv_begin b;
	struct nx_recv_env env;
	char msg[768] = "";
	errcode_t err;

	if (!abort) {
		if (rcv_status(c, &st))
			return NX_CLI_FAIL;
		if (json) {
			report_json(&st, st.state == NX_IOC_RECV_PENDING ?
				    "pending" : "none");
		} else if (st.state == NX_IOC_RECV_PENDING) {
			printf("%s\n", st.token);
		} else {
			nx_cli_error("%s", st.msg[0] ? st.msg :
				     "no receive is pending on the target");
		}
		return st.state == NX_IOC_RECV_PENDING ? NX_CLI_OK :
		       NX_CLI_FAIL;
	}
	if (c->mnt) {
		memset(&b, 0, sizeof(b));
		b.flags = NX_IOC_RECV_ABORT;
		if (daemon_says(c, NX_IOC_RECV_BEGIN, &b))
			return NX_CLI_FAIL;
		if (!b.error)
			return NX_CLI_OK;
		b.msg[sizeof(b.msg) - 1] = 0;
		nx_cli_error("%s", b.msg[0] ? b.msg : strerror((int)b.error));
		return NX_CLI_FAIL;
	}
	env_of(c, &env);
	nx_volume_lock(c->vol);
	err = nx_recv_abort(c->vol, &env, msg, sizeof(msg));
	nx_volume_unlock(c->vol);
	if (err) {
		nx_cli_error("%s", msg[0] ? msg : error_message(err));
		return NX_CLI_FAIL;
	}
	return NX_CLI_OK;
}

/*
 * The option rules the table cannot state: one of --resume, --abort and
 * --token at most, and the last two take no stream.
 */
static int check_options(const struct nx_cli_args *a)
{
	int resume = a->opt[NX_OPT_RESUME], abort = a->opt[NX_OPT_ABORT];
	int token = a->opt[NX_OPT_TOKEN];

	if (resume + abort + token > 1)
		return nx_cli_usage_error(a, "--resume, --abort and --token: "
					  "one at a time");
	if ((abort || token) && a->opt[NX_OPT_FORCE])
		return nx_cli_usage_error(a, "%s takes no stream: -F does not "
					  "go with it",
					  abort ? "--abort" : "--token");
	if ((abort || token) && a->val[NX_OPT_INPUT])
		return nx_cli_usage_error(a, "%s takes no stream: -f does not "
					  "go with it",
					  abort ? "--abort" : "--token");
	if (!abort && !token && !a->val[NX_OPT_INPUT] && isatty(0))
		return nx_cli_usage_error(a, "the stream comes on standard "
					  "input (or -f FILE), not from a "
					  "terminal");
	return NX_CLI_OK;
}

int nx_cmd_receive(struct nx_cli_args *a)
{
	const char *target = a->pos[0], *file = a->val[NX_OPT_INPUT];
	const char *what = file ? file : "standard input";
	int abort = a->opt[NX_OPT_ABORT], token = a->opt[NX_OPT_TOKEN];
	int json = a->opt[NX_OPT_JSON], rc, fd = 0, flags;
	char *first = NULL;
	size_t flen = 0;
	struct rcv c;

	rc = check_options(a);
	if (rc)
		return rc;
	if (file) {
		fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			nx_cli_error("%s: %s", file, strerror(errno));
			return NX_CLI_FAIL;
		}
	}
	flags = (a->opt[NX_OPT_FORCE] ? NX_RECV_FORCE : 0) |
		(a->opt[NX_OPT_RESUME] ? NX_RECV_RESUME : 0);
	catch_signals();
	if (!abort && !token && read_first(fd, what, &first, &flen)) {
		rc = NX_CLI_FAIL;
		goto out;
	}
	if (!abort && !token && !nx_cli_is_dir(target) &&
	    precheck(target, flags, first, flen)) {
		rc = NX_CLI_FAIL;
		goto out;
	}
	if (rcv_open(&c, target)) {
		rcv_close(&c);
		rc = NX_CLI_FAIL;
		goto out;
	}
	if (abort || token)
		rc = pending_op(&c, abort, json);
	else if (rcv_begin(&c, flags))
		rc = NX_CLI_FAIL;
	else
		rc = do_receive(&c, fd, what, json, a->opt[NX_OPT_VERBOSE],
				first, flen);
	if (rcv_close(&c) && rc == NX_CLI_OK)
		rc = NX_CLI_FAIL;
out:
	free(first);
	if (fd > 0)
		close(fd);
	return rc;
}
