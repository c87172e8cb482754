/*
 * revert.c - putting the live tree back where a receive started: the
 * rollback of a failed or aborted receive, and -F's roll back to the
 * parent (receive.h).
 *
 * An incremental receive started from the parent snapshot P, and the
 * applier never freed an inode P has (it parked them), so every file of
 * P is still there under its own inode number, maybe renamed, moved,
 * changed or parked.  The rollback walks P's directories top down, each
 * one already in its place, and in each:
 *  1. removes every live entry P does not have there: an inode of P is
 *     parked (renamed into /.nextfs-receive) when that was its last name,
 *     anything else is deleted with everything below it;
 *  2. adds every entry of P that is missing: a directory of P is moved
 *     back from wherever it is now (never from below the directory being
 *     fixed: that one's ancestors are all in their places already), a file
 *     is moved back from the parking directory or linked again;
 *  3. then walks on into P's subdirectories.
 * Afterwards each inode whose bytes differ from P's gets P's data (only
 * the blocks that map differently), size, mode, owner, times and xattrs
 * back.  What is left in the parking directory is nothing of P's, and
 * goes.  Only what someone else deleted behind the receive's back has no
 * inode to put back: it is copied from P as a new file.
 *
 * A full receive started from an empty tree: everything goes, and the
 * root gets the mode, owner and times it had (recorded in the cursor).
 *
 * Directories are walked with explicit stacks and queues (trees may be
 * deeper than the C stack allows).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/falloc.h>
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"
#include "repl_internal.h"

struct dent {
	ext2_ino_t ino;
	char name[NX_NAME_MAX + 1];
};

struct dlist {
	struct dent *v;
	size_t n, cap;
	int err;
};

static int collect(void *priv, const char *name, size_t namelen,
		   ext2_ino_t ino, unsigned char d_type, uint64_t next)
{
	struct dlist *l = priv;

	if ((namelen == 1 && name[0] == '.') ||
	    (namelen == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	if (nx_grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v), 32)) {
		l->err = ENOMEM;
		return 1;
	}
	l->v[l->n].ino = ino;
	memcpy(l->v[l->n].name, name, namelen);
	l->v[l->n].name[namelen] = 0;
	l->n++;
	return 0;
}

/* The entries of DIR in VOL but '.', '..' and nextfs's own at the top. */
static errcode_t list_dir(struct nx_volume *vol, ext2_ino_t dir,
			  struct dlist *l)
{
	size_t i, k = 0;
	errcode_t err;

	memset(l, 0, sizeof(*l));
	err = nx_readdir(vol, dir, 0, collect, l);
	if (!err)
		err = l->err;
	if (err) {
		free(l->v);
		l->v = NULL;
		return err;
	}
	for (i = 0; i < l->n; i++)
		if (dir != EXT2_ROOT_INO ||
		    (strcmp(l->v[i].name, NX_SNAPDIR_NAME) &&
		     strcmp(l->v[i].name, NX_RECV_PARK_NAME)))
			l->v[k++] = l->v[i];
	l->n = k;
	return 0;
}

static const struct dent *find_name(const struct dlist *l, const char *name)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->v[i].name, name))
			return &l->v[i];
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Removing trees.                                                     */

struct rframe {
	ext2_ino_t dir;
	struct dlist l;
	size_t next;
};

/*
 * Remove one entry NAME -> INO of DIR: park an inode of the parent that
 * loses its last name, unlink anything else; a directory to be deleted
 * is first pushed on the stack to be emptied (*PUSHED).
 */
static errcode_t remove_one(struct nx_recv *r, ext2_ino_t dir,
			    const struct dent *e, int *pushed)
{
	struct ext2_inode_large inode;
	int parked;
	errcode_t err;

	*pushed = 0;
	err = nx_inode_read(r->vol, e->ino, &inode);
	if (!err)
		err = nx_repl_maybe_park(r, dir, e->name, e->ino, &inode,
					 &parked);
	if (err || parked)
		return err;
	if (LINUX_S_ISDIR(inode.i_mode)) {
		int empty;

		err = nx_dir_is_empty(r->vol, e->ino, &empty);
		if (err || !empty) {
			*pushed = !err;
			return err;
		}
	}
	return nx_repl_unlink(r, dir, e->name, LINUX_S_ISDIR(inode.i_mode));
}

static errcode_t enter(struct rframe **st, size_t *n, size_t *cap,
		       struct nx_volume *vol, ext2_ino_t dir)
{
	errcode_t err;

	if (nx_grow((void **)st, cap, *n, sizeof(**st), 16))
		return ENOMEM;
	memset(&(*st)[*n], 0, sizeof(**st));
	(*st)[*n].dir = dir;
	err = list_dir(vol, dir, &(*st)[*n].l);
	if (!err)
		(*n)++;
	return err;
}

errcode_t nx_repl_empty_dir(struct nx_recv *r, ext2_ino_t top)
{
	struct rframe *st = NULL, *f;
	size_t n = 0, cap = 0;
	errcode_t err;
	int pushed;

	err = enter(&st, &n, &cap, r->vol, top);
	while (!err && n) {
		f = &st[n - 1];
		if (f->next < f->l.n) {
			const struct dent *e = &f->l.v[f->next++];

			err = remove_one(r, f->dir, e, &pushed);
			if (!err && pushed)	/* empty it first */
				err = enter(&st, &n, &cap, r->vol, e->ino);
			continue;
		}
		/* Empty now: remove it from its parent (unless the top). */
		free(f->l.v);
		if (--n) {
			f = &st[n - 1];
			err = nx_repl_unlink(r, f->dir,
					     f->l.v[f->next - 1].name, 1);
		}
	}
	while (n)
		free(st[--n].l.v);
	free(st);
	return err;
}

errcode_t nx_repl_drop_park(struct nx_recv *r)
{
	ext2_ino_t park;
	errcode_t err;

	err = nx_repl_park_dir(r, 0, &park);
	if (err || !park)
		return err;
	/* Nothing in it is the parent's any more: it all goes. */
	r->pview = NULL;
	err = nx_repl_empty_dir(r, park);
	if (!err)
		err = nx_repl_unlink(r, EXT2_ROOT_INO, NX_RECV_PARK_NAME, 1);
	if (!err)
		r->park = 0;
	return err;
}

/* ------------------------------------------------------------------ */
/* Contents and attributes.                                            */

/* INO's bytes in VOL, without the checksum (which the rest decides). */
static errcode_t read_raw(struct nx_volume *vol, ext2_ino_t ino,
			  struct ext2_inode_large *inode)
{
	errcode_t err;

	memset(inode, 0, sizeof(*inode));
	err = nx_inode_read(vol, ino, inode);
	inode->osd2.linux2.l_i_checksum_lo = 0;
	inode->i_checksum_hi = 0;
	return err;
}

static errcode_t copy_block(struct nx_recv *r, ext2_ino_t pino,
			    ext2_ino_t lino, uint64_t off, size_t len,
			    char *buf)
{
	size_t got = 0, put = 0;
	errcode_t err = nx_file_read(r->pview, pino, buf, len, off, &got);

	if (!err && got < len)
		memset(buf + got, 0, len - got);
	if (!err)
		err = nx_file_write(r->vol, lino, buf, len, off, &put);
	if (!err && put < len)
		err = ENOSPC;
	return err;
}

/* The physical block of LBLK of INO in VOL (0: a hole or unwritten). */
static blk64_t mapped(struct nx_volume *vol, ext2_ino_t ino,
		      struct ext2_inode_large *inode, blk64_t lblk)
{
	blk64_t pblk = 0;
	int flags = 0;

	if (ext2fs_bmap2(vol->fs, ino, (struct ext2_inode *)inode, NULL, 0,
			 lblk, &flags, &pblk))
		return ~(blk64_t)0;	/* unknown: copy it */
	return (flags & BMAP_RET_UNINIT) ? 0 : pblk;
}

/*
 * Give LINO the content of PINO: only the blocks whose mapping differs
 * (a block of P that the live file still maps at the same place holds
 * what it held, since data under a snapshot moves when overwritten -
 * except in chattr +C files, which are overwritten in place: those are
 * compared by content), then P's size.
 */
static errcode_t fix_content(struct nx_recv *r, ext2_ino_t pino,
			     struct ext2_inode_large *pi, ext2_ino_t lino,
			     struct ext2_inode_large *li, int fresh)
{
	unsigned bs = r->vol->fs->blocksize;
	uint64_t size = EXT2_I_SIZE(pi), off;
	int inl = ((pi->i_flags | li->i_flags) & EXT4_INLINE_DATA_FL) || fresh;
	int nocow = (pi->i_flags & FS_NOCOW_FL) != 0;
	char *buf = malloc(2 * (size_t)bs);
	errcode_t err = buf ? 0 : ENOMEM;
	blk64_t lblk;

	if (!err && inl)
		err = nx_file_truncate(r->vol, lino, 0);
	for (lblk = 0; !err && (off = lblk * bs) < size; lblk++) {
		size_t len = size - off < bs ? (size_t)(size - off) : bs, got;
		blk64_t pb = mapped(r->pview, pino, pi, lblk);
		blk64_t lb = inl ? 0 : mapped(r->vol, lino, li, lblk);

		if (!inl && pb == lb && pb != ~(blk64_t)0 && (!pb || !nocow))
			continue;
		if (!inl && nocow && pb && pb == lb && pb != ~(blk64_t)0) {
			err = nx_file_read(r->pview, pino, buf, len, off, &got);
			if (!err)
				err = nx_file_read(r->vol, lino, buf + bs, len,
						   off, &got);
			if (err || !memcmp(buf, buf + bs, len))
				continue;
		}
		if (pb == 0 && !inl)
			err = lb ? nx_file_fallocate(r->vol, lino,
						     FALLOC_FL_PUNCH_HOLE |
						     FALLOC_FL_KEEP_SIZE, off,
						     bs) : 0;
		else if (pb != 0)
			err = copy_block(r, pino, lino, off, len, buf);
	}
	if (!err)
		err = nx_file_truncate(r->vol, lino, size);
	free(buf);
	return err;
}

/* Make the xattrs of LINO those of PINO (ACLs included). */
static errcode_t fix_xattrs(struct nx_recv *r, ext2_ino_t pino,
			    ext2_ino_t lino)
{
	char *pl = NULL, *ll = NULL, *p;
	size_t plen = 0, llen = 0, vlen, olen;
	void *v = NULL, *o = NULL;
	errcode_t err;

	err = nx_listxattr(r->pview, &r->cred, pino, NULL, 0, &plen);
	if (!err)
		err = nx_listxattr(r->vol, &r->cred, lino, NULL, 0, &llen);
	if (err)
		return err;
	pl = malloc(plen + 1);
	ll = malloc(llen + 1);
	if (!pl || !ll)
		err = ENOMEM;
	if (!err)
		err = nx_listxattr(r->pview, &r->cred, pino, pl, plen, &plen);
	if (!err)
		err = nx_listxattr(r->vol, &r->cred, lino, ll, llen, &llen);
	/* Names the parent does not have go. */
	for (p = ll; !err && p < ll + llen; p += strlen(p) + 1) {
		const char *q;

		for (q = pl; q < pl + plen; q += strlen(q) + 1)
			if (!strcmp(p, q))
				break;
		if (q >= pl + plen)
			err = nx_removexattr(r->vol, &r->cred, lino, p);
	}
	/* The parent's get their values (unless they have them). */
	for (p = pl; !err && p < pl + plen; p += strlen(p) + 1) {
		err = nx_getxattr(r->pview, &r->cred, pino, p, NULL, 0, &vlen);
		if (!err)
			err = nx_getxattr(r->vol, &r->cred, lino, p, NULL, 0,
					  &olen);
		if (err == ENODATA) {
			olen = (size_t)-1;
			err = 0;
		}
		free(v);
		free(o);
		v = malloc(vlen + 1);
		o = malloc((olen == (size_t)-1 ? 0 : olen) + 1);
		if (!err && (!v || !o))
			err = ENOMEM;
		if (!err)
			err = nx_getxattr(r->pview, &r->cred, pino, p, v, vlen,
					  &vlen);
		if (!err && olen == vlen)
			err = nx_getxattr(r->vol, &r->cred, lino, p, o, olen,
					  &olen);
		if (!err && (olen != vlen || memcmp(v, o, vlen)))
			err = nx_setxattr(r->vol, &r->cred, lino, p, v, vlen, 0);
	}
	free(v);
	free(o);
	free(pl);
	free(ll);
	return err;
}

/*
 * LINO is to be what PINO is in the parent: its data, then its
 * attributes (the mode after the ACLs, which may change it; the times
 * last).  FRESH: LINO was just made to stand in for PINO.
 */
static errcode_t fix_inode(struct nx_recv *r, ext2_ino_t pino,
			   ext2_ino_t lino, int fresh)
{
	struct ext2_inode_large pi, li;
	struct nx_attr a;
	errcode_t err;

	err = read_raw(r->pview, pino, &pi);
	if (!err)
		err = read_raw(r->vol, lino, &li);
	if (err)
		return err;
	if (!fresh && pino == lino && !memcmp(&pi, &li, sizeof(pi)))
		return 0;		/* untouched */
	if (LINUX_S_ISREG(pi.i_mode))
		err = fix_content(r, pino, &pi, lino, &li, fresh);
	if (!err)
		err = fix_xattrs(r, pino, lino);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.mode = pi.i_mode & 07777;
	a.uid = inode_uid(pi);
	a.gid = inode_gid(pi);
	nx_inode_get_time(&pi, NX_ATIME, &a.atime);
	nx_inode_get_time(&pi, NX_MTIME, &a.mtime);
	err = nx_setattr(r->vol, &r->cred, lino, &a,
			 (LINUX_S_ISLNK(pi.i_mode) ? 0 : NX_SET_MODE) |
			 NX_SET_UID | NX_SET_GID | NX_SET_ATIME | NX_SET_MTIME,
			 NULL);
	if (!err)
		nx_repl_changed(r, lino, NULL);
	return err;
}

/* ------------------------------------------------------------------ */
/* The structure.                                                      */

/* A directory of P and the live directory that stands for it. */
struct pair {
	ext2_ino_t p, l;
};

struct reverter {
	struct nx_recv *r;
	struct pair *q;			/* directories still to fix */
	size_t nq, capq, head;
	struct pair *fresh;		/* P's inodes copied as new ones */
	size_t nfresh, capfresh;
	ext2fs_inode_bitmap done;	/* P's inodes whose attributes are fixed */
};

static errcode_t push(struct pair **v, size_t *n, size_t *cap, ext2_ino_t p,
		      ext2_ino_t l)
{
	if (nx_grow((void **)v, cap, *n, sizeof(**v), 64))
		return ENOMEM;
	(*v)[*n].p = p;
	(*v)[(*n)++].l = l;
	return 0;
}

/* Is live INO the same file as P's INO? */
static int live_is(struct nx_recv *r, ext2_ino_t ino,
		   const struct ext2_inode_large *pi)
{
	struct ext2_inode_large li;

	return !nx_inode_read(r->vol, ino, &li) && li.i_links_count &&
	       !li.i_dtime && li.i_generation == pi->i_generation &&
	       (li.i_mode & LINUX_S_IFMT) == (pi->i_mode & LINUX_S_IFMT);
}

/* Where directory INO is linked now: *DIR and NAME. */
static errcode_t where_is(struct nx_recv *r, ext2_ino_t ino, ext2_ino_t *dir,
			  char name[NX_NAME_MAX + 1])
{
	struct dlist l;
	size_t i;
	errcode_t err = nx_dir_get_parent(r->vol, ino, dir);

	if (!err)
		err = nx_readdir(r->vol, *dir, 0, collect,
				 (memset(&l, 0, sizeof(l)), &l));
	if (!err)
		err = l.err;
	for (i = 0; !err && i < l.n; i++)
		if (l.v[i].ino == ino) {
			strcpy(name, l.v[i].name);
			break;
		}
	if (!err && i == l.n)
		err = ENOENT;
	free(l.v);
	return err;
}

/* A new inode in LDIR as NAME with P's inode PINO's type and content. */
static errcode_t copy_new(struct reverter *rv, ext2_ino_t ldir,
			  const char *name, ext2_ino_t pino,
			  const struct ext2_inode_large *pi, ext2_ino_t *lino)
{
	struct nx_recv *r = rv->r;
	char target[4096];
	size_t len;
	dev_t rdev = 0;
	errcode_t err;

	if (LINUX_S_ISDIR(pi->i_mode))
		return nx_mkdir(r->vol, &r->cred, ldir, name, 0700, lino);
	if (LINUX_S_ISLNK(pi->i_mode)) {
		err = nx_readlink(r->pview, pino, target, sizeof(target), &len);
		if (!err && len >= sizeof(target))
			err = ENAMETOOLONG;
		return err ? err : nx_symlink(r->vol, &r->cred, ldir, name,
					      target, lino);
	}
	if (LINUX_S_ISCHR(pi->i_mode) || LINUX_S_ISBLK(pi->i_mode)) {
		struct stat st;

		nx_inode_to_stat(r->pview, pino, pi, &st);
		rdev = st.st_rdev;
	}
	return nx_mknod(r->vol, &r->cred, ldir, name,
			(pi->i_mode & LINUX_S_IFMT) | 0600, rdev, lino);
}

/* Put P's entry NAME -> PINO into LDIR, where it is missing. */
static errcode_t attach(struct reverter *rv, ext2_ino_t ldir,
			const char *name, ext2_ino_t pino, ext2_ino_t *lino)
{
	struct nx_recv *r = rv->r;
	struct ext2_inode_large pi;
	char pname[32], oname[NX_NAME_MAX + 1];
	ext2_ino_t odir, park = r->park, found;
	size_t i;
	errcode_t err;

	*lino = pino;
	err = nx_inode_read(r->pview, pino, &pi);
	if (err)
		return err;
	if (live_is(r, pino, &pi)) {
		if (LINUX_S_ISDIR(pi.i_mode)) {
			err = where_is(r, pino, &odir, oname);
			if (!err)
				err = nx_rename(r->vol, &r->cred, odir, oname,
						ldir, name, RENAME_NOREPLACE,
						NULL);
			if (!err)
				nx_repl_changed(r, odir, oname);
			return err;
		}
		nx_repl_park_name(pino, pname);
		if (park && !nx_lookup(r->vol, park, pname, &found) &&
		    found == pino)
			return nx_rename(r->vol, &r->cred, park, pname, ldir,
					 name, RENAME_NOREPLACE, NULL);
		return nx_link(r->vol, &r->cred, pino, ldir, name);
	}
	/* Gone behind our back: a copy (once per hard-link group). */
	for (i = 0; i < rv->nfresh; i++)
		if (rv->fresh[i].p == pino && !LINUX_S_ISDIR(pi.i_mode)) {
			*lino = rv->fresh[i].l;
			return nx_link(r->vol, &r->cred, *lino, ldir, name);
		}
	err = copy_new(rv, ldir, name, pino, &pi, lino);
	if (!err)
		err = push(&rv->fresh, &rv->nfresh, &rv->capfresh, pino, *lino);
	return err;
}

/* The live inode standing for P's PINO (itself unless copied). */
static ext2_ino_t stand_in(struct reverter *rv, ext2_ino_t pino, int *fresh)
{
	size_t i;

	for (i = 0; i < rv->nfresh; i++)
		if (rv->fresh[i].p == pino) {
			*fresh = 1;
			return rv->fresh[i].l;
		}
	*fresh = 0;
	return pino;
}

/* Steps 1 and 2 (above) for one directory of P. */
static errcode_t fix_dir(struct reverter *rv, struct pair d)
{
	struct nx_recv *r = rv->r;
	struct dlist pl, ll;
	struct ext2_inode_large pi;
	const struct dent *pe;
	ext2_ino_t lino;
	size_t i;
	int pushed, fresh;
	errcode_t err;

	err = list_dir(r->pview, d.p, &pl);
	if (err)
		return err;
	err = list_dir(r->vol, d.l, &ll);
	for (i = 0; !err && i < ll.n; i++) {
		pe = find_name(&pl, ll.v[i].name);
		if (pe && stand_in(rv, pe->ino, &fresh) == ll.v[i].ino &&
		    (fresh || (!nx_inode_read(r->pview, pe->ino, &pi) &&
			       live_is(r, pe->ino, &pi))))
			continue;
		err = remove_one(r, d.l, &ll.v[i], &pushed);
		if (!err && pushed) {
			err = nx_repl_empty_dir(r, ll.v[i].ino);
			if (!err)
				err = nx_repl_unlink(r, d.l, ll.v[i].name, 1);
		}
	}
	free(ll.v);
	if (!err)
		err = list_dir(r->vol, d.l, &ll);
	for (i = 0; !err && i < pl.n; i++) {
		pe = find_name(&ll, pl.v[i].name);
		lino = pe ? pe->ino : 0;
		if (!pe) {
			err = attach(rv, d.l, pl.v[i].name, pl.v[i].ino, &lino);
			if (!err)
				nx_repl_changed(r, d.l, pl.v[i].name);
		}
		if (!err && !nx_inode_read(r->pview, pl.v[i].ino, &pi) &&
		    LINUX_S_ISDIR(pi.i_mode))
			err = push(&rv->q, &rv->nq, &rv->capq, pl.v[i].ino,
				   lino);
	}
	free(ll.v);
	free(pl.v);
	return err;
}

/* Every inode of P gets its data and attributes back, once. */
static errcode_t fix_all_inodes(struct reverter *rv)
{
	struct nx_recv *r = rv->r;
	size_t k;
	errcode_t err = 0;

	for (k = 0; !err && k < rv->nq; k++) {
		struct dlist pl;
		size_t i;
		int fresh;

		err = list_dir(r->pview, rv->q[k].p, &pl);
		for (i = 0; !err && i <= pl.n; i++) {
			ext2_ino_t p = i < pl.n ? pl.v[i].ino : rv->q[k].p, l;

			if (ext2fs_test_inode_bitmap2(rv->done, p))
				continue;
			ext2fs_mark_inode_bitmap2(rv->done, p);
			l = stand_in(rv, p, &fresh);
			err = fix_inode(r, p, l, fresh);
		}
		free(pl.v);
	}
	return err;
}

/* The private record of the root (the received identity): as P has it. */
static errcode_t fix_root_record(struct nx_recv *r)
{
	void *v = NULL;
	size_t len = 0;
	errcode_t err;

	err = nx_xattr_private_get(r->pview, EXT2_ROOT_INO,
				   NX_SNAP_RECEIVED_XATTR, &v, &len);
	if (!err)
		err = nx_xattr_private_set(r->vol, EXT2_ROOT_INO,
					   NX_SNAP_RECEIVED_XATTR, v, len);
	else if (err == ENODATA || err == EOPNOTSUPP)
		err = nx_xattr_private_remove(r->vol, EXT2_ROOT_INO,
					      NX_SNAP_RECEIVED_XATTR);
	free(v);
	return err == ENODATA ? 0 : err;
}

errcode_t nx_repl_revert(struct nx_recv *r)
{
	struct reverter rv;
	struct nx_volume *pview = r->pview;
	errcode_t err;

	memset(&rv, 0, sizeof(rv));
	rv.r = r;
	err = nx_repl_park_dir(r, 0, &r->park);
	if (!err)
		err = ext2fs_allocate_inode_bitmap(r->vol->fs, "reverted",
						   &rv.done);
	if (!err)
		err = push(&rv.q, &rv.nq, &rv.capq, EXT2_ROOT_INO,
			   EXT2_ROOT_INO);
	for (rv.head = 0; !err && rv.head < rv.nq; rv.head++)
		err = fix_dir(&rv, rv.q[rv.head]);
	if (!err)
		err = fix_all_inodes(&rv);
	if (!err)
		err = fix_root_record(r);
	if (!err)
		err = nx_repl_drop_park(r);
	r->pview = pview;		/* (drop_park forgot it) */
	if (!err) {			/* the root's times, last */
		rv.nq = 0;
		ext2fs_unmark_inode_bitmap2(rv.done, EXT2_ROOT_INO);
		err = fix_inode(r, EXT2_ROOT_INO, EXT2_ROOT_INO, 1);
	}
	if (rv.done)
		ext2fs_free_inode_bitmap(rv.done);
	free(rv.q);
	free(rv.fresh);
	return err;
}

errcode_t nx_repl_revert_full(struct nx_recv *r)
{
	struct nx_attr a;
	char *names = NULL, *p;
	size_t len = 0;
	ext2_ino_t ino;
	errcode_t err;

	r->pview = NULL;
	err = nx_repl_drop_park(r);
	if (!err)
		err = nx_repl_empty_dir(r, EXT2_ROOT_INO);
	if (!err && (r->cur.flags & NX_CUR_LOST_FOUND))
		err = nx_mkdir(r->vol, &r->cred, EXT2_ROOT_INO, "lost+found",
			       0700, &ino);
	/* the root had no xattrs (a full receive needs an empty tree) */
	if (!err)
		err = nx_listxattr(r->vol, &r->cred, EXT2_ROOT_INO, NULL, 0,
				   &len);
	if (!err && len) {
		names = malloc(len);
		err = names ? nx_listxattr(r->vol, &r->cred, EXT2_ROOT_INO,
					   names, len, &len) : ENOMEM;
		for (p = names; !err && p < names + len; p += strlen(p) + 1)
			err = nx_removexattr(r->vol, &r->cred, EXT2_ROOT_INO,
					     p);
		free(names);
	}
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.mode = r->cur.root_mode & 07777;
	a.uid = r->cur.root_uid;
	a.gid = r->cur.root_gid;
	a.atime.tv_sec = r->cur.root_atime;
	a.atime.tv_nsec = r->cur.root_atime_ns;
	a.mtime.tv_sec = r->cur.root_mtime;
	a.mtime.tv_nsec = r->cur.root_mtime_ns;
	err = nx_setattr(r->vol, &r->cred, EXT2_ROOT_INO, &a, NX_SET_MODE |
			 NX_SET_UID | NX_SET_GID | NX_SET_ATIME | NX_SET_MTIME,
			 NULL);
	if (!err)
		nx_repl_changed(r, EXT2_ROOT_INO, NULL);
	return err;
}
