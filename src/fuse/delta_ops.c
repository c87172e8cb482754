/*
 * delta_ops.c - the daemon's side of NX_IOC_DELTA_START/READ (nxioctl.h):
 * "nextfs diff" and "nextfs send" on a mountpoint get the block-map delta
 * (delta.h) of two trees the daemon has open, instead of walking both
 * through FUSE.  The classifier runs once, under the volume lock (as
 * long as the offline diff of the image takes); its encoded result is
 * kept in a session that the tool reads in chunks.
 *
 * NX_IOC_SAME_DATA answers "nextfs versions" the same way for one file
 * in two trees: from the block maps, bytes read only where they differ.
 *
 * Who may: root (after -o fakeroot) and the user who mounted the volume
 * (who opened its image and can read every byte of it anyway).  Anyone
 * else gets EPERM and walks the trees through the mount, where the
 * kernel checks every directory against their credentials
 * (docs/security.md).  A session is bound to the user who started it
 * and to a random handle.
 */
#include "fuse_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <et/com_err.h>
#include "nextfs/delta.h"
#include "nextfs/nxioctl.h"
#include "nextfs/snaptool.h"

struct delta_session {
	uint64_t handle;		/* 0: a free slot */
	uid_t uid;			/* who started it */
	unsigned long age;		/* for dropping the oldest */
	char *buf;
	size_t len;
};

static struct delta_session sessions[NX_DELTA_SESSIONS];
static unsigned long session_clock;
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;

static void session_drop(struct delta_session *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

uint64_t nx_fuse_new_handle(void)
{
	static atomic_ulong clock;
	uint64_t h = 0;

	while (!h)
		if (getrandom(&h, sizeof(h), 0) != sizeof(h))
			h = ((uint64_t)rand() << 32) ^ (uint64_t)rand() ^
			    atomic_fetch_add(&clock, 1);
	return h;
}

/* Keep BUF (taken) for UID; its handle. */
static uint64_t session_keep(uid_t uid, char *buf, size_t len)
{
	struct delta_session *s = &sessions[0];
	size_t i;

	pthread_mutex_lock(&session_lock);
	for (i = 0; i < NX_DELTA_SESSIONS; i++) {
		if (!sessions[i].handle) {
			s = &sessions[i];
			break;
		}
		if (sessions[i].age < s->age)
			s = &sessions[i];
	}
	session_drop(s);		/* the oldest, if none is free */
	s->handle = nx_fuse_new_handle();
	s->uid = uid;
	s->age = ++session_clock;
	s->buf = buf;
	s->len = len;
	pthread_mutex_unlock(&session_lock);
	return s->handle;
}

/*
 * The argument of an ioctl only the volume's owner may make (Who may,
 * above): IN (IN_SIZE bytes) into Q (SIZE bytes, the reply's size too).
 */
static errcode_t owner_ioctl_in(fuse_req_t req, void *q, size_t size,
				const void *in, size_t in_size,
				size_t out_size)
{
	if (in_size < size || out_size < size)
		return EINVAL;
	if (!nx_fuse_volume_owner_asks(req))
		return EPERM;
	memcpy(q, in, size);
	return 0;
}

errcode_t nx_fuse_delta_start(fuse_req_t req, struct nx_fuse *live,
			      const void *in, size_t in_size, void *out,
			      size_t *out_size)
{
	struct nx_ioc_delta_start q;
	struct nx_delta delta;
	unsigned flags = 0;
	char msg[256], *buf = NULL;
	size_t len = 0;
	errcode_t err;

	err = owner_ioctl_in(req, &q, sizeof(q), in, in_size, *out_size);
	if (err)
		return err;
	if (q.flags & ~(NX_IOC_DELTA_FULL | NX_IOC_DELTA_EXTENTS))
		return EINVAL;
	if (q.flags & NX_IOC_DELTA_FULL)
		flags |= NX_DELTA_FULL;
	if (q.flags & NX_IOC_DELTA_EXTENTS)
		flags |= NX_DELTA_WANT_EXTENTS;
	if (!live->vol->snap ||
	    (!(flags & NX_DELTA_FULL) &&
	     nx_snap_find_id(live->vol, q.old_id, NULL)) ||
	    (q.new_id && nx_snap_find_id(live->vol, q.new_id, NULL)))
		return ENOENT;
	err = nx_snap_delta(live->vol, q.old_id, q.new_id, flags, NULL,
			    &delta, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "nextfs-fuse: delta %u..%u: %s\n", q.old_id,
			q.new_id, msg);
		return err == EINVAL ? EINVAL : EIO;
	}
	err = nx_delta_encode(&delta, &buf, &len);
	nx_delta_free(&delta);
	if (err)
		return ENOMEM;
	q.handle = session_keep(fuse_req_ctx(req)->uid, buf, len);
	q.size = len;
	memcpy(out, &q, sizeof(q));
	*out_size = sizeof(q);
	return 0;
}

errcode_t nx_fuse_same_data(fuse_req_t req, struct nx_fuse *live,
			    const void *in, size_t in_size, void *out,
			    size_t *out_size)
{
	struct nx_ioc_same_data q;
	ext2_ino_t ino[2];
	char msg[256];
	int s, same = 0;
	errcode_t err;

	err = owner_ioctl_in(req, &q, sizeof(q), in, in_size, *out_size);
	if (err)
		return err;
	for (s = 0; s < 2; s++) {
		if (q.id[s] && (!live->vol->snap ||
				nx_snap_find_id(live->vol, q.id[s], NULL)))
			return ENOENT;
		ino[s] = nx_fuse_ext_ino(live, q.id[s], q.st_ino[s]);
		if (!ino[s])
			return EINVAL;
	}
	err = nx_snap_same_data(live->vol, q.id, ino, &same, msg, sizeof(msg));
	if (err)
		return err == EINVAL || err == ENOENT ? err : EIO;
	q.same = (uint32_t)same;
	q.pad = 0;
	memcpy(out, &q, sizeof(q));
	*out_size = sizeof(q);
	return 0;
}

void nx_fuse_delta_read(fuse_req_t req, const void *in, size_t in_size,
			size_t out_bufsz)
{
	struct nx_ioc_delta_read *r;
	uid_t uid = fuse_req_ctx(req)->uid;
	int err = ENOENT;
	size_t i;

	if (in_size < sizeof(*r) || out_bufsz < sizeof(*r)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	r = malloc(sizeof(*r));
	if (!r) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(r, in, sizeof(*r));
	pthread_mutex_lock(&session_lock);
	for (i = 0; i < NX_DELTA_SESSIONS; i++) {
		struct delta_session *s = &sessions[i];

		if (!r->handle || s->handle != r->handle || s->uid != uid)
			continue;
		err = EINVAL;
		if (r->offset > s->len)
			break;
		r->len = s->len - r->offset < NX_IOC_DELTA_CHUNK ?
			 (uint32_t)(s->len - r->offset) : NX_IOC_DELTA_CHUNK;
		memcpy(r->data, s->buf + r->offset, r->len);
		if (r->offset + r->len == s->len)
			session_drop(s);	/* read to the end */
		err = 0;
		break;
	}
	pthread_mutex_unlock(&session_lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_ioctl(req, 0, r, sizeof(*r));
	free(r);
}
