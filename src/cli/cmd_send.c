/*
 * cmd_send.c - "nextfs send [-p PARENT] SOURCE NAME [-o FILE] [--json]":
 * snapshot NAME as a btrfs send stream (send.h), the whole of it or only
 * what changed since snapshot PARENT.
 *
 * SOURCE is an unmounted image (nx_send_snapshot, send.h, on the
 * snapshots' views) or the mountpoint of a nextfs-fuse volume, which
 * keeps serving: the daemon runs the same sender on its own views and
 * writes the stream into a FIFO this tool made and reads
 * (NX_IOC_SEND_START): no file data crosses FUSE.  A daemon that cannot
 * (an older one, or one that cannot reach the FIFO) hands over the
 * block-map delta it made (NX_IOC_DELTA_START with extents,
 * mountdelta.c), and the data, targets and xattrs are read through
 * MNT/.snapshots/NAME (and .../PARENT), which never change, so the live
 * tree may be written meanwhile.  Only root and the user who mounted
 * the volume may send from a mount (docs/security.md).
 *
 * The stream goes to FILE (made at its first byte; removed again if the
 * send fails, so a refusal writes nothing) or to stdout, never to a
 * terminal.  --json says on stderr what was
 * sent (bytes, file data, commands, files).  --resume TOKEN (written by
 * an interrupted "nextfs receive", sendstream.h) sends the rest of the
 * stream of the pair the token names, and nothing if the token names
 * another pair or does not fit the stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/fdio.h"
#include "nextfs/nxioctl.h"
#include "nextfs/safepath.h"
#include "nextfs/send.h"
#include "nextfs/snaptool.h"
#include "cli.h"
#include "output.h"

struct send_args {
	const char *source, *name, *parent, *out, *resume;
	int json;
};

/* ------------------------------------------------------------------ */
/* Reading the snapshots through the mount.                            */

struct mount_reader {
	struct nx_send_reader rd;	/* first: the reader is this */
	int root[2];			/* .snapshots/PARENT, .snapshots/NAME */
	int fd;				/* the file being read */
	int fd_side;
	ext2_ino_t fd_ino;
};

static errcode_t mr_pread(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			  const char *path, void *buf, size_t len,
			  uint64_t off, size_t *got)
{
	struct mount_reader *mr = (struct mount_reader *)rd;

	*got = 0;
	if (mr->fd < 0 || mr->fd_side != s || mr->fd_ino != ino) {
		if (mr->fd >= 0)
			close(mr->fd);
		mr->fd = nx_sp_open(mr->root[s], path + 1, O_RDONLY);
		if (mr->fd < 0)
			return errno;
		mr->fd_side = s;
		mr->fd_ino = ino;
	}
	return nx_read_full(mr->fd, buf, len, (off_t)off, got);
}

static errcode_t mr_readlink(struct nx_send_reader *rd, int s,
			     ext2_ino_t ino, const char *path, char **target)
{
	struct mount_reader *mr = (struct mount_reader *)rd;
	char *base = NULL;
	int dir = nx_sp_open_parent(mr->root[s], path + 1, &base);
	errcode_t err = 0;

	if (dir < 0)
		return errno;
	*target = nx_sp_readlink(dir, base, NULL);
	if (!*target)
		err = errno;
	free(base);
	close(dir);
	return err;
}

static errcode_t mr_xattrs(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			   const char *path, struct nx_send_xattrs *out)
{
	struct mount_reader *mr = (struct mount_reader *)rd;
	int fd = nx_sp_open(mr->root[s], path + 1, O_PATH);
	char *list = NULL, *v;
	size_t n = 0, i, len;
	errcode_t err = 0;

	if (fd < 0)
		return errno;
	list = nx_sp_listxattr(fd, &n);
	if (!list)
		err = errno == ENOTSUP ? 0 : errno;
	for (i = 0; list && i < n && !err; i += strlen(list + i) + 1) {
		v = nx_sp_getxattr(fd, list + i, &len);
		if (!v) {
			err = errno == ENODATA ? 0 : errno;
			continue;
		}
		err = nx_send_xattrs_add(out, list + i, v, len);
		free(v);
	}
	free(list);
	close(fd);
	return err;
}

/* ------------------------------------------------------------------ */
/* Where the stream goes.                                              */

struct output {
	const char *path;		/* -o FILE; NULL: stdout */
	int fd;				/* -1 until the first byte */
	int no_splice;			/* splice(2) cannot write there */
};

/* Before any work: never a terminal. */
static int output_check(const struct output *o)
{
	if (!o->path && isatty(STDOUT_FILENO)) {
		nx_cli_error("will not write a send stream to a terminal: use "
			     "-o FILE or a pipe");
		return -1;
	}
	return 0;
}

/* At the first byte: FILE is made (or emptied) only now. */
static errcode_t output_open(struct output *o)
{
	if (o->fd >= 0)
		return 0;
	if (!o->path) {
		o->fd = STDOUT_FILENO;
		return 0;
	}
	o->fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	return o->fd < 0 ? errno : 0;
}

/* struct nx_send_out's write. */
static errcode_t output_write(void *priv, const void *buf, size_t len)
{
	struct output *o = priv;
	errcode_t err = output_open(o);

	return err ? err : nx_write_all(o->fd, buf, len, NX_FD_POS, NULL);
}

/*
 * The send ended (ERR, MSG): FILE made durable, or removed after a
 * failure; the error line.  0 or NX_CLI_FAIL.
 */
static int output_end(struct output *o, errcode_t err, const char *msg)
{
	if (o->path && o->fd >= 0) {
		if (!err && fsync(o->fd) < 0)
			err = errno;
		if (close(o->fd) < 0 && !err)
			err = errno;
	}
	if (!err)
		return 0;
	nx_cli_error("%s", msg && msg[0] ? msg : error_message(err));
	if (o->path && o->fd >= 0)
		unlink(o->path);
	return NX_CLI_FAIL;
}

static void report(const struct send_args *a, const struct nx_send_stats *st)
{
	struct nx_json j;

	if (!a->json)
		return;
	nx_json_init(&j, stderr);
	nx_json_open(&j, NULL, '{');
	nx_json_str(&j, "snapshot", a->name);
	if (a->parent)
		nx_json_str(&j, "parent", a->parent);
	nx_json_u64(&j, "bytes", st->bytes);
	nx_json_u64(&j, "data_bytes", st->data_bytes);
	nx_json_u64(&j, "commands", st->commands);
	nx_json_u64(&j, "files", st->inodes);
	nx_json_close(&j, '}');
	nx_json_end(&j);
}

/* Write the stream of DELTA read through RD; 0 or NX_CLI_FAIL. */
static int write_stream(const struct send_args *a, const struct nx_delta *d,
			struct nx_send_reader *rd, struct nx_send_params *p)
{
	struct output o = { .path = a->out, .fd = -1 };
	struct nx_ss_token tok;
	struct nx_send_stats st;
	char msg[512] = "";
	errcode_t err = 0;

	p->name = a->name;
	p->out.write = output_write;
	p->out.priv = &o;
	if (a->resume)
		err = nx_send_resume_from(p, a->resume, a->parent, &tok, msg,
					  sizeof(msg));
	if (!err)
		err = nx_send_stream(d, rd, p, &st, msg, sizeof(msg));
	if (output_end(&o, err, msg))
		return NX_CLI_FAIL;
	report(a, &st);
	return 0;
}

static int send_image(const struct send_args *a)
{
	struct output o = { .path = a->out, .fd = -1 };
	struct nx_send_out out = { .fd = -1, .write = output_write,
				   .priv = &o };
	struct nx_snapinfo info[2];
	struct nx_send_stats st;
	struct nx_volume *vol;
	char msg[512] = "";
	int rc = NX_CLI_FAIL;
	errcode_t err;

	if (nx_cli_open_image(a->source, &vol))
		return NX_CLI_FAIL;
	nx_volume_lock(vol);
	if (nx_snap_find(vol, a->name, &info[1])) {
		nx_cli_error("no snapshot named '%s'", a->name);
		goto unlock;
	}
	if (a->parent && nx_snap_find(vol, a->parent, &info[0])) {
		nx_cli_error("no snapshot named '%s'", a->parent);
		goto unlock;
	}
	if (a->parent && nx_snap_name_index(vol, a->parent) >=
			 nx_snap_name_index(vol, a->name)) {
		nx_cli_error("snapshot '%s' is not older than '%s'", a->parent,
			     a->name);
		goto unlock;
	}
	nx_volume_unlock(vol);		/* the send locks what it reads */
	err = nx_send_snapshot(vol, a->parent ? info[0].id : 0, info[1].id,
			       a->resume, &out, &st, msg, sizeof(msg));
	rc = output_end(&o, err, msg);
	if (!rc)
		report(a, &st);
	goto out;
unlock:
	nx_volume_unlock(vol);
out:
	nx_volume_close(vol);
	return rc;
}

/* .snapshots/NAME of the mount at ROOT, for reading. */
static int open_snapshot(const char *mnt, int root, const char *name)
{
	char *rel = NULL;
	int fd = -1;

	if (nx_snap_name_check(name) == 0 &&
	    asprintf(&rel, "%s/%s", NX_SNAPDIR_NAME, name) >= 0)
		fd = nx_sp_open(root, rel, O_RDONLY | O_DIRECTORY);
	else
		errno = ENOENT;
	if (fd < 0)
		nx_cli_error("%s/%s/%s: %s", mnt, NX_SNAPDIR_NAME, name,
			     errno == ENOENT ? "no such snapshot" :
			     strerror(errno));
	free(rel);
	return fd;
}

/*
 * The identity snapshot ID (NAME) of the mount at MNT has for replication
 * (nxioctl.h; a received snapshot's is its sender's, which only the
 * daemon can read), asked through FD: 0 or NX_CLI_FAIL after a message.
 */
static int mount_identity(int fd, const char *mnt, const char *name,
			  uint32_t id, unsigned char uuid[16],
			  uint64_t *ctransid)
{
	struct nx_ioc_snap_identity q;

	memset(&q, 0, sizeof(q));
	q.id = id;
	if (ioctl(fd, NX_IOC_SNAP_IDENTITY, &q) < 0) {
		nx_cli_error("%s: the identity of snapshot '%s': %s", mnt, name,
			     errno == ENOTTY ? "the daemon does not tell it "
			     "(an older version?)" : strerror(errno));
		return NX_CLI_FAIL;
	}
	memcpy(uuid, q.uuid, sizeof(q.uuid));
	*ctransid = q.ctransid;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The daemon's send (nxioctl.h, NX_IOC_SEND_START).                   */

/* The daemon cannot (an older one, or the FIFO): read through the mount. */
#define THROUGH_MOUNT	(-2)

/* A FIFO in a directory of our own, open for reading. */
struct fifo {
	char dir[256];
	char path[272];
	int dirfd, fd;
};

static void fifo_remove(struct fifo *f)
{
	if (f->dirfd < 0)
		return;
	unlinkat(f->dirfd, "stream", 0);
	close(f->dirfd);
	rmdir(f->dir);
	f->dirfd = -1;
}

/*
 * Made with mkdtemp (mode 0700) in TMPDIR or /tmp, the FIFO 0600 in it,
 * opened for reading before the daemon opens it for writing (else it
 * could not: ENXIO).  Never on the mount itself (device MNT_DEV): the
 * daemon would look the path up through itself, and with one thread
 * (-s) wait for itself forever.  -1 with errno.
 */
static int fifo_make(struct fifo *f, dev_t mnt_dev)
{
	const char *tmp = getenv("TMPDIR");
	struct stat st;
	int e;

	f->dirfd = f->fd = -1;
	snprintf(f->dir, sizeof(f->dir), "%s/nextfs-send-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 200 ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/stream", f->dir);
	f->dirfd = open(f->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (f->dirfd < 0) {
		e = errno;
		rmdir(f->dir);
		errno = e;
		return -1;
	}
	if (fstat(f->dirfd, &st) < 0 || st.st_uid != geteuid() ||
	    (st.st_mode & 077))
		errno = EPERM;		/* not the one mkdtemp made */
	else if (st.st_dev == mnt_dev)
		errno = EXDEV;
	else if (mkfifoat(f->dirfd, "stream", 0600) == 0)
		f->fd = openat(f->dirfd, "stream", O_RDONLY | O_NONBLOCK |
			       O_NOFOLLOW | O_CLOEXEC);
	if (f->fd < 0) {
		e = errno;
		fifo_remove(f);
		errno = e;
		return -1;
	}
	/* fewer, larger turns between the daemon and us (a hint) */
	fcntl(f->fd, F_SETPIPE_SZ, 1 << 20);
	return 0;
}

/* Everything from IN to O, until the end of the stream. */
static errcode_t pump(int in, struct output *o)
{
	static char buf[1 << 16];
	errcode_t err;
	ssize_t n;

	for (;;) {
		if (o->fd >= 0 && !o->no_splice) {
			/* the pages move from pipe to pipe (or file) */
			n = splice(in, NULL, o->fd, NULL, 1 << 20,
				   SPLICE_F_MOVE | SPLICE_F_MORE);
			if (n < 0 && errno == EINVAL) {
				o->no_splice = 1;
				continue;
			}
		} else {
			n = read(in, buf, sizeof(buf));
			if (n > 0) {
				err = output_write(o, buf, (size_t)n);
				if (err)
					return err;
			}
		}
		if (n == 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return errno;
	}
}

/* How the daemon's send H ended (it closes the FIFO just after). */
static int send_status(int fd, uint64_t h, struct nx_ioc_send_status *st)
{
	int tries;

	for (tries = 0; tries < 5000; tries++) {
		memset(st, 0, sizeof(*st));
		st->handle = h;
		if (ioctl(fd, NX_IOC_SEND_STATUS, st) < 0)
			return -1;
		if (st->state == NX_IOC_SEND_DONE)
			return 0;
		usleep(1000);
	}
	errno = ETIMEDOUT;
	return -1;
}

/*
 * Snapshot ID (from PARENT_ID) of the mount at MNT, asked through FD:
 * the daemon writes the stream into our FIFO.  0, NX_CLI_FAIL after a
 * message, or THROUGH_MOUNT.
 */
static int daemon_send(const struct send_args *a, int fd, const char *mnt,
		       uint32_t parent_id, uint32_t id)
{
	struct output o = { .path = a->out, .fd = -1 };
	struct nx_ioc_send_start *q = calloc(1, sizeof(*q));
	struct nx_ioc_send_status st;
	struct nx_send_stats stats;
	struct fifo f = { .dirfd = -1, .fd = -1 };
	struct stat mst;
	char msg[sizeof(st.msg) + 64] = "";
	int rc = THROUGH_MOUNT;
	errcode_t err;

	if (!q || (a->resume && strlen(a->resume) >= sizeof(q->resume)) ||
	    fstat(fd, &mst) || fifo_make(&f, mst.st_dev) ||
	    strlen(f.path) >= sizeof(q->path))
		goto out;
	q->old_id = parent_id;
	q->new_id = id;
	snprintf(q->resume, sizeof(q->resume), "%s", a->resume ? a->resume :
		 "");
	snprintf(q->path, sizeof(q->path), "%s", f.path);
	err = ioctl(fd, NX_IOC_SEND_START, q) < 0 ? errno : 0;
	fifo_remove(&f);		/* the daemon has it open, or not */
	if (err || (q->error && (q->flags & NX_IOC_SEND_PIPE)))
		goto out;		/* older daemon, EPERM, the FIFO */
	rc = NX_CLI_FAIL;
	if (q->error) {
		nx_cli_error("%s: %s", mnt, q->msg);
		goto out;
	}
	fcntl(f.fd, F_SETFL, fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
	err = pump(f.fd, &o);
	if (err) {
		snprintf(msg, sizeof(msg), "writing the stream: %s",
			 error_message(err));
	} else if (send_status(fd, q->handle, &st)) {
		err = errno;
		snprintf(msg, sizeof(msg), "%s: the send's outcome: %s", mnt,
			 strerror(err));
	} else {
		err = st.error;
		snprintf(msg, sizeof(msg), "%s", st.msg);
	}
	close(f.fd);
	f.fd = -1;
	rc = output_end(&o, err, msg);
	if (!rc) {
		stats.bytes = st.bytes;
		stats.data_bytes = st.data_bytes;
		stats.commands = st.commands;
		stats.inodes = st.inodes;
		report(a, &stats);
	}
out:
	if (f.fd >= 0)
		close(f.fd);
	fifo_remove(&f);
	free(q);
	return rc;
}

static int send_mount(const struct send_args *a)
{
	struct mount_reader mr = { .rd = { mr_pread, mr_readlink, mr_xattrs },
				   .root = { -1, -1 }, .fd = -1 };
	struct nx_delta delta = { 0 };
	struct nx_send_params p;
	struct nx_sp_place pl;
	struct nx_ioc_snap q[2];
	int pos[2] = { -1, 0 }, rc = NX_CLI_FAIL, s;

	memset(&p, 0, sizeof(p));
	if (nx_sp_locate(a->source, NX_SP_FUSE | NX_SP_FOLLOW_LAST, &pl)) {
		nx_cli_error("%s: %s", a->source, nx_sp_why(errno));
		return NX_CLI_FAIL;
	}
	if (pl.rel[0]) {
		nx_cli_error("%s is not the mountpoint of a nextfs volume "
			     "(it is below the one at %s)", a->source,
			     pl.mnt.path);
		goto out;
	}
	for (s = a->parent ? 0 : 1; s < 2; s++) {
		const char *name = s ? a->name : a->parent;

		mr.root[s] = open_snapshot(pl.mnt.path, pl.mnt.fd, name);
		if (mr.root[s] < 0)
			goto out;
		if (nx_cli_snap_at(mr.root[s], name, &q[s], &pos[s])) {
			nx_cli_error("%s: not a nextfs mount that can send",
				     pl.mnt.path);
			goto out;
		}
	}
	if (a->parent && pos[0] >= pos[1]) {
		nx_cli_error("snapshot '%s' is not older than '%s'", a->parent,
			     a->name);
		goto out;
	}
	p.id = q[1].id;
	p.parent_id = a->parent ? q[0].id : 0;
	rc = daemon_send(a, mr.root[1], pl.mnt.path, p.parent_id, p.id);
	if (rc != THROUGH_MOUNT)
		goto out;
	rc = NX_CLI_FAIL;
	if (mount_identity(mr.root[1], pl.mnt.path, a->name, p.id, p.uuid,
			   &p.ctransid) ||
	    (p.parent_id && mount_identity(mr.root[1], pl.mnt.path, a->parent,
					   p.parent_id, p.parent_uuid,
					   &p.parent_ctransid)))
		goto out;
	if (nx_cli_daemon_delta(mr.root[1], p.parent_id, p.id,
				NX_IOC_DELTA_EXTENTS |
				(p.parent_id ? 0 : NX_IOC_DELTA_FULL),
				&delta)) {
		nx_cli_error("%s: %s", pl.mnt.path, errno == EPERM ?
			     "only root and the user who mounted the volume "
			     "may send from it" : strerror(errno));
		goto out;
	}
	rc = write_stream(a, &delta, &mr.rd, &p);
out:
	nx_delta_free(&delta);
	if (mr.fd >= 0)
		close(mr.fd);
	for (s = 0; s < 2; s++)
		if (mr.root[s] >= 0)
			close(mr.root[s]);
	nx_sp_place_free(&pl);
	return rc;
}

int nx_cmd_send(struct nx_cli_args *a)
{
	struct send_args sa = {
		.source = a->pos[0], .name = a->pos[1],
		.parent = a->val[NX_OPT_PARENT], .out = a->val[NX_OPT_OUTPUT],
		.resume = a->val[NX_OPT_RESUME], .json = a->opt[NX_OPT_JSON],
	};
	struct output o = { .path = sa.out, .fd = -1 };
	struct stat st;

	if (output_check(&o))
		return NX_CLI_FAIL;
	if (stat(sa.source, &st) == 0 && S_ISDIR(st.st_mode))
		return send_mount(&sa);
	return send_image(&sa);
}
