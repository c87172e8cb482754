/*
 * sendview.c - the offline reader of "nextfs send" (send.h): file data,
 * symlink targets and xattrs read from the snapshots' views.  The
 * caller holds the volume lock throughout.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/dir.h"
#include "nextfs/send.h"
#include "nextfs/snapshot.h"
#include "nextfs/volume.h"

struct view_reader {
	struct nx_send_reader rd;	/* first: the reader is this */
	struct nx_volume *view[2];	/* the store's: not closed here */
	ext2_file_t file;		/* the one being read, kept open */
	int file_side;
	ext2_ino_t file_ino;
};

static void close_file(struct view_reader *vr)
{
	if (vr->file)
		ext2fs_file_close(vr->file);
	vr->file = NULL;
}

static errcode_t view_pread(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			    const char *path, void *buf, size_t len,
			    uint64_t off, size_t *got)
{
	struct view_reader *vr = (struct view_reader *)rd;
	unsigned n = 0;
	errcode_t err;

	*got = 0;
	if (!vr->view[s])
		return ENOENT;
	if (!vr->file || vr->file_side != s || vr->file_ino != ino) {
		close_file(vr);
		err = ext2fs_file_open(vr->view[s]->fs, ino, 0, &vr->file);
		if (err)
			return err;
		vr->file_side = s;
		vr->file_ino = ino;
	}
	err = ext2fs_file_llseek(vr->file, off, EXT2_SEEK_SET, NULL);
	while (!err && *got < len) {
		err = ext2fs_file_read(vr->file, (char *)buf + *got,
				       (unsigned)(len - *got), &n);
		if (err || !n)
			break;
		*got += n;
	}
	return err;
}

static errcode_t view_readlink(struct nx_send_reader *rd, int s,
			       ext2_ino_t ino, const char *path,
			       char **target)
{
	struct view_reader *vr = (struct view_reader *)rd;
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
		err = nx_readlink(vr->view[s], ino, buf, size, &len);
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

static errcode_t view_xattrs(struct nx_send_reader *rd, int s, ext2_ino_t ino,
			     const char *path, struct nx_send_xattrs *out)
{
	struct view_reader *vr = (struct view_reader *)rd;
	struct ext2_xattr_handle *h;
	errcode_t err;
	size_t i;

	err = ext2fs_xattrs_open(vr->view[s]->fs, ino, &h);
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

errcode_t nx_send_view_reader(struct nx_volume *vol, uint32_t old_id,
			      uint32_t new_id, struct nx_send_reader **ret)
{
	struct view_reader *vr = calloc(1, sizeof(*vr));
	errcode_t err = 0;

	*ret = NULL;
	if (!vr)
		return EXT2_ET_NO_MEMORY;
	vr->rd.pread = view_pread;
	vr->rd.readlink = view_readlink;
	vr->rd.xattrs = view_xattrs;
	if (old_id)
		err = nx_snap_view_get(vol, old_id, &vr->view[0]);
	if (!err)
		err = nx_snap_view_get(vol, new_id, &vr->view[1]);
	if (err) {
		free(vr);
		return err;
	}
	*ret = &vr->rd;
	return 0;
}

void nx_send_view_reader_free(struct nx_send_reader *rd)
{
	struct view_reader *vr = (struct view_reader *)rd;

	if (!vr)
		return;
	close_file(vr);
	free(vr);
}
