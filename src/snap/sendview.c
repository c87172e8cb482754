/*
 * sendview.c - sending a snapshot of a volume this process has open
 * (send.h): the view reader (file data, symlink targets and xattrs read
 * from the snapshots' views, the volume lock taken per call) and
 * nx_send_snapshot(), which "nextfs send" of an image and the daemon's
 * send (NX_IOC_SEND_START) both run.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <et/com_err.h>
#include "nextfs/blkio.h"
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/send.h"
#include "nextfs/snapshot.h"
#include "nextfs/snaptool.h"
#include "nextfs/volume.h"

/*
 * Reading ahead.  A read of file data waits for the device (a small file
 * is a round trip of its own), and the sender then spends about as long
 * on CRCs and copies: with the sender's plan (send.h) AHEAD_THREADS
 * threads read the next reads while it encodes, so that the device
 * always has reads queued (a virtual disk delivers small reads at a
 * fraction of its rate one at a time) and reading overlaps encoding.
 * Entry E of the plan is read into slot E % AHEAD_SLOTS once the sender
 * is done with entry E - AHEAD_SLOTS, and only while the entries read
 * and not yet taken hold less than AHEAD_BYTES.  Each read takes the
 * volume lock as any other.
 */
#define AHEAD_SLOTS	64
#define AHEAD_THREADS	8
#define AHEAD_BYTES	(16U << 20)

enum { SLOT_FREE, SLOT_READING, SLOT_READY };

struct ahead_slot {
	char *buf;			/* the data, malloced per read */
	size_t entry;			/* the plan's entry it holds */
	int state;			/* SLOT_* */
	size_t got;
	errcode_t err;
};

struct ahead {
	pthread_mutex_t mu;
	pthread_cond_t cv;		/* a slot changed, or stop */
	struct nx_send_read *v;		/* the plan */
	size_t n;
	size_t next;			/* the entry a thread reads next */
	size_t used;			/* entries before it are done with */
	size_t bytes;			/* held by entries [used, next) */
	int stop;
	struct ahead_slot slot[AHEAD_SLOTS];
	pthread_t thread[AHEAD_THREADS];
	int nthreads;
};

struct view_reader {
	struct nx_send_reader rd;	/* first: the reader is this */
	struct nx_volume *vol;		/* the live volume (or the image) */
	uint32_t id[2];			/* the snapshots; 0: none */
	atomic_int gone;		/* one was deleted while we read */
	struct ahead *ahead;		/* NULL: no plan */
};

/*
 * Locked.  The view of side S, looked up again at every call: the store
 * closes the view of a snapshot that is deleted.
 */
static errcode_t view_of(struct view_reader *vr, int s,
			 struct nx_volume **view)
{
	errcode_t err;

	if (!vr->id[s])
		return ENOENT;
	err = nx_snap_view_get(vr->vol, vr->id[s], view);
	if (err == ENOENT)
		atomic_store(&vr->gone, 1);
	return err;
}

/* The bytes are read after the lock is dropped (file.h). */
static errcode_t read_data(struct view_reader *vr, int s, ext2_ino_t ino,
			   void *buf, size_t len, uint64_t off, size_t *got)
{
	struct nx_volume *view;
	struct nx_file_rd plan;
	errcode_t err;

	*got = 0;
	nx_volume_lock(vr->vol);
	err = view_of(vr, s, &view);
	if (!err)
		err = nx_file_read_begin(view, ino, buf, len, off, &plan, got);
	if (err) {
		nx_volume_unlock(vr->vol);
		*got = 0;
		return err;
	}
	nx_volume_unlock_sharing(vr->vol);
	err = nx_file_read_end(&plan);
	if (err)
		*got = 0;
	return err;
}

/* Locked.  May entry NEXT be read now? */
static int ahead_may(const struct ahead *a)
{
	return a->next < a->n && a->next < a->used + AHEAD_SLOTS &&
	       a->slot[a->next % AHEAD_SLOTS].state != SLOT_READING &&
	       (a->bytes == 0 ||
		a->bytes + a->v[a->next].len <= AHEAD_BYTES);
}

static void *ahead_thread(void *arg)
{
	struct view_reader *vr = arg;
	struct ahead *a = vr->ahead;
	const struct nx_send_read *r;
	struct ahead_slot *sl;
	errcode_t err;
	size_t got;
	char *buf;

	pthread_mutex_lock(&a->mu);
	while (!a->stop) {
		if (!ahead_may(a)) {
			pthread_cond_wait(&a->cv, &a->mu);
			continue;
		}
		r = &a->v[a->next];
		sl = &a->slot[a->next % AHEAD_SLOTS];
		free(sl->buf);		/* of an entry the sender skipped */
		sl->buf = NULL;
		sl->entry = a->next++;
		sl->state = SLOT_READING;
		a->bytes += r->len;
		pthread_mutex_unlock(&a->mu);
		/* aligned: large reads may bypass the page cache */
		if (posix_memalign((void **)&buf, NX_BLKIO_DIRECT_ALIGN,
				   r->len ? r->len : 1)) {
			buf = NULL;
			err = EXT2_ET_NO_MEMORY;
			got = 0;
		} else {
			err = read_data(vr, 1, r->ino, buf, r->len, r->off,
					&got);
		}
		pthread_mutex_lock(&a->mu);
		sl->buf = buf;
		sl->err = err;
		sl->got = got;
		sl->state = SLOT_READY;
		pthread_cond_broadcast(&a->cv);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* Locked.  The entry of the plan that is this read, from USED on; N if none. */
static size_t ahead_find(const struct ahead *a, ext2_ino_t ino, size_t len,
			 uint64_t off)
{
	size_t e;

	for (e = a->used; e < a->n; e++)
		if (a->v[e].ino == ino && a->v[e].off == off &&
		    a->v[e].len == len)
			break;
	return e;
}

/* Locked.  The sender is done with the entries before E. */
static void ahead_done(struct ahead *a, size_t e)
{
	for (; a->used < e; a->used++)
		if (a->used < a->next)
			a->bytes -= a->v[a->used].len;
	if (a->next < e)
		a->next = e;
	pthread_cond_broadcast(&a->cv);
}

/* The read, if the plan has it: 1 (ERR, *GOT filled), else 0. */
static int ahead_take(struct ahead *a, ext2_ino_t ino, void *buf, size_t len,
		      uint64_t off, size_t *got, errcode_t *err)
{
	struct ahead_slot *sl;
	size_t e;

	pthread_mutex_lock(&a->mu);
	e = ahead_find(a, ino, len, off);
	if (e == a->n) {
		pthread_mutex_unlock(&a->mu);
		return 0;
	}
	/* a file that ended early: what was planned before goes unread */
	ahead_done(a, e);
	sl = &a->slot[e % AHEAD_SLOTS];
	while (!(sl->entry == e && sl->state == SLOT_READY))
		pthread_cond_wait(&a->cv, &a->mu);
	*err = sl->err;
	*got = sl->got;
	if (!*err)
		memcpy(buf, sl->buf, sl->got);
	free(sl->buf);
	sl->buf = NULL;
	sl->state = SLOT_FREE;
	ahead_done(a, e + 1);
	pthread_mutex_unlock(&a->mu);
	return 1;
}

static errcode_t view_pread(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			    const char *path, void *buf, size_t len,
			    uint64_t off, size_t *got)
{
	struct view_reader *vr = (struct view_reader *)rd;
	errcode_t err;

	if (s == 1 && vr->ahead &&
	    ahead_take(vr->ahead, ino, buf, len, off, got, &err))
		return err;
	return read_data(vr, s, ino, buf, len, off, got);
}

static void ahead_free(struct ahead *a)
{
	int i;

	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stop = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	for (i = 0; i < a->nthreads; i++)
		pthread_join(a->thread[i], NULL);
	for (i = 0; i < AHEAD_SLOTS; i++)
		free(a->slot[i].buf);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a->v);
	free(a);
}

/* The sender's plan: read it ahead (without memory or threads: as asked). */
static void view_plan(struct nx_send_reader *rd, const struct nx_send_read *v,
		      size_t n)
{
	struct view_reader *vr = (struct view_reader *)rd;
	struct ahead *a;

	if (vr->ahead || !n)
		return;
	a = calloc(1, sizeof(*a));
	if (!a)
		return;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->v = malloc(n * sizeof(*v));
	if (!a->v) {
		ahead_free(a);
		return;
	}
	memcpy(a->v, v, n * sizeof(*v));
	a->n = n;
	vr->ahead = a;
	while (a->nthreads < AHEAD_THREADS &&
	       !pthread_create(&a->thread[a->nthreads], NULL, ahead_thread,
			       vr))
		a->nthreads++;
	if (!a->nthreads) {
		vr->ahead = NULL;
		ahead_free(a);
	}
}

static errcode_t read_target(struct nx_volume *view, ext2_ino_t ino,
			     char **target)
{
	size_t size = 256, len = 0;
	char *buf = NULL, *more;
	errcode_t err;

	for (;;) {
		more = realloc(buf, size);
		if (!more) {
			free(buf);
			return EXT2_ET_NO_MEMORY;
		}
		buf = more;
		err = nx_readlink(view, ino, buf, size, &len);
		if (err) {
			free(buf);
			return err;
		}
		if (len < size)
			break;
		size = len + 1;		/* it said how long it is */
	}
	buf[len] = 0;
	*target = buf;
	return 0;
}

/* FN(view of side S, INO, ARG), under the volume lock. */
static errcode_t with_view(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			   errcode_t (*fn)(struct nx_volume *, ext2_ino_t,
					   void *), void *arg)
{
	struct view_reader *vr = (struct view_reader *)rd;
	struct nx_volume *view;
	errcode_t err;

	nx_volume_lock(vr->vol);
	err = view_of(vr, s, &view);
	if (!err)
		err = fn(view, ino, arg);
	nx_volume_unlock(vr->vol);
	return err;
}

static errcode_t target_of(struct nx_volume *view, ext2_ino_t ino, void *arg)
{
	return read_target(view, ino, arg);
}

static errcode_t view_readlink(struct nx_send_reader *rd, int s,
			       ext2_ino_t ino, const char *path,
			       char **target)
{
	return with_view(rd, s, ino, target_of, target);
}

static int add_xattr(char *name, char *value, size_t value_len, void *priv)
{
	if (!strcmp(name, "system.data"))
		return 0;	/* inline data: the file's content */
	return nx_send_xattrs_add(priv, name, value, value_len) ?
	       XATTR_ABORT : 0;
}

/*
 * The kernel shows the owner, owning group, mask and other entries of an
 * ACL with the id ACL_UNDEFINED_ID (libext2fs: 0): the same bytes as a
 * send through the mount.
 */
static void undefined_ids(unsigned char *acl, size_t len)
{
	size_t off;

	for (off = 4; off + 8 <= len; off += 8) {
		unsigned tag = acl[off] | (acl[off + 1] << 8);

		if (tag == 0x01 || tag == 0x04 || tag == 0x10 || tag == 0x20)
			memset(acl + off + 4, 0xff, 4);
	}
}

static errcode_t read_xattrs(struct nx_volume *view, ext2_ino_t ino,
			     struct nx_send_xattrs *out)
{
	struct ext2_xattr_handle *h;
	errcode_t err;
	size_t i;

	err = ext2fs_xattrs_open(view->fs, ino, &h);
	if (err)
		return err;
	err = ext2fs_xattrs_read(h);
	if (!err)
		err = ext2fs_xattrs_iterate(h, add_xattr, out);
	for (i = 0; i < out->n && !err; i++) {
		void *v;
		size_t len;

		/* iterate gives ACLs as ext4 stores them; get converts */
		if (strncmp(out->names[i], "system.posix_acl_", 17))
			continue;
		err = ext2fs_xattr_get(h, out->names[i], &v, &len);
		if (err)
			break;
		free(out->values[i]);
		out->values[i] = v;
		out->lens[i] = len;
		undefined_ids(v, len);
	}
	ext2fs_xattrs_close(&h);
	return err;
}

static errcode_t xattrs_of(struct nx_volume *view, ext2_ino_t ino, void *arg)
{
	return read_xattrs(view, ino, arg);
}

static errcode_t view_xattrs(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			     const char *path, struct nx_send_xattrs *out)
{
	return with_view(rd, s, ino, xattrs_of, out);
}

errcode_t nx_send_view_reader(struct nx_volume *vol, uint32_t old_id,
			      uint32_t new_id, struct nx_send_reader **ret)
{
	struct view_reader *vr = calloc(1, sizeof(*vr));

	*ret = NULL;
	if (!vr)
		return EXT2_ET_NO_MEMORY;
	vr->rd.pread = view_pread;
	vr->rd.readlink = view_readlink;
	vr->rd.xattrs = view_xattrs;
	vr->rd.plan = view_plan;
	vr->vol = vol;
	vr->id[0] = old_id;
	vr->id[1] = new_id;
	*ret = &vr->rd;
	return 0;
}

void nx_send_view_reader_free(struct nx_send_reader *rd)
{
	struct view_reader *vr = (struct view_reader *)rd;

	if (!vr)
		return;
	ahead_free(vr->ahead);
	free(vr);
}

/* ------------------------------------------------------------------ */
/* A send from the volume.                                             */

/* Locked.  INFO[1] = snapshot ID, INFO[0] = PARENT_ID (if any). */
static errcode_t find_pair(struct nx_volume *vol, uint32_t parent_id,
			   uint32_t id, struct nx_snapinfo info[2],
			   char *msg, size_t msglen)
{
	if (!vol->snap || nx_snap_find_id(vol, id, &info[1])) {
		snprintf(msg, msglen, "no snapshot with id %u", id);
		return ENOENT;
	}
	if (parent_id && nx_snap_find_id(vol, parent_id, &info[0])) {
		snprintf(msg, msglen, "no snapshot with id %u", parent_id);
		return ENOENT;
	}
	if (parent_id && parent_id >= id) {	/* ids grow with time */
		snprintf(msg, msglen, "snapshot '%s' is not older than '%s'",
			 info[0].name, info[1].name);
		return EINVAL;
	}
	return 0;
}

/* Locked.  What the stream names the snapshots by (send.h). */
static errcode_t identities(struct nx_volume *vol, struct nx_send_params *p,
			    const struct nx_snapinfo info[2], char *msg,
			    size_t msglen)
{
	errcode_t err = nx_snap_identity(vol, &info[1], p->uuid, &p->ctransid);

	if (!err && p->parent_id)
		err = nx_snap_identity(vol, &info[0], p->parent_uuid,
				       &p->parent_ctransid);
	if (err)
		snprintf(msg, msglen, "the identities of the snapshots: %s",
			 error_message(err));
	return err;
}

errcode_t nx_send_snapshot(struct nx_volume *vol, uint32_t parent_id,
			   uint32_t id, const char *resume,
			   const struct nx_send_out *out,
			   struct nx_send_stats *stats, char *msg,
			   size_t msglen)
{
	struct nx_snapinfo info[2];
	struct nx_send_params p;
	struct nx_send_reader *rd = NULL;
	struct nx_delta delta = { 0 };
	struct nx_ss_token tok;
	errcode_t err;

	memset(&p, 0, sizeof(p));
	memset(stats, 0, sizeof(*stats));
	snprintf(msg, msglen, "%s", "");
	p.id = id;
	p.parent_id = parent_id;
	p.out = *out;
	nx_volume_lock(vol);
	err = find_pair(vol, parent_id, id, info, msg, msglen);
	if (!err)
		err = identities(vol, &p, info, msg, msglen);
	p.name = info[1].name;
	if (!err && resume)
		err = nx_send_resume_from(&p, resume, info[0].name, &tok, msg,
					  msglen);
	if (!err)
		err = nx_snap_delta(vol, parent_id, id, NX_DELTA_WANT_EXTENTS |
				    (parent_id ? 0 : NX_DELTA_FULL), NULL,
				    &delta, msg, msglen);
	nx_volume_unlock(vol);
	if (!err)
		err = nx_send_view_reader(vol, parent_id, id, &rd);
	if (!err) {
		err = nx_send_stream(&delta, rd, &p, stats, msg, msglen);
		if (err && atomic_load(&((struct view_reader *)rd)->gone))
			snprintf(msg, msglen, "snapshot '%s'%s%s%s was deleted "
				 "while it was being sent", info[1].name,
				 parent_id ? " or '" : "",
				 parent_id ? info[0].name : "",
				 parent_id ? "'" : "");
	}
	if (err && !msg[0])
		snprintf(msg, msglen, "%s", error_message(err));
	nx_send_view_reader_free(rd);
	nx_delta_free(&delta);
	return err;
}
