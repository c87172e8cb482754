/*
 * rename.c - rename(2) and renameat2() with RENAME_NOREPLACE and
 * RENAME_EXCHANGE, following do_renameat2(), vfs_rename() and
 * ext4_rename()/ext4_cross_rename() for the order of checks and for
 * what happens to '..' entries and link counts.
 *
 * The directory entries change first (the new name is added or
 * repointed before the old one goes, so a failure in between never
 * loses the file), then '..' of moved directories, then the inodes:
 * link counts and timestamps are applied to freshly read copies because
 * adding a name may have rewritten a parent's inode (growth, inline
 * data, htree conversion).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/dir.h"
#include "nextfs/inode.h"

/* Deeper than this the '..' chain must be a loop. */
#define MAX_DEPTH 65536

/* One side of the rename: a name in a directory and what it names. */
struct side {
	ext2_ino_t dir;
	const char *name;
	struct ext2_inode_large dinode;
	ext2_ino_t ino;		/* 0 if the name does not exist */
	struct ext2_inode_large inode;
	int is_dir;
};

static int dot_name(const char *name)
{
	return name[0] == '.' &&
	       (name[1] == 0 || (name[1] == '.' && name[2] == 0));
}

static errcode_t check_flags(unsigned flags)
{
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return EINVAL;
	return 0;
}

/* Read S->dir (must be a searchable directory) and look S->name up. */
static errcode_t load_side(struct nx_volume *vol, const struct nx_cred *cred,
			   struct side *s)
{
	errcode_t err;

	s->ino = 0;
	err = nx_inode_read(vol, s->dir, &s->dinode);
	if (err)
		return err;
	if (!LINUX_S_ISDIR(s->dinode.i_mode))
		return s->dinode.i_mode ? ENOTDIR : ENOENT;
	err = nx_perm_access(cred, (struct ext2_inode *)&s->dinode, X_OK);
	if (err)
		return err;
	err = nx_lookup(vol, s->dir, s->name, &s->ino);
	if (err == ENOENT) {
		s->ino = 0;
		return 0;
	}
	if (err)
		return err;
	err = nx_inode_read(vol, s->ino, &s->inode);
	if (err)
		return err;
	s->is_dir = LINUX_S_ISDIR(s->inode.i_mode);
	return 0;
}

/* Is directory ANC equal to DIR or one of its ancestors? */
static errcode_t is_ancestor(struct nx_volume *vol, ext2_ino_t anc,
			     ext2_ino_t dir, int *result)
{
	ext2_ino_t cur = dir, parent;
	unsigned depth;
	errcode_t err;

	*result = 0;
	for (depth = 0; depth < MAX_DEPTH; depth++) {
		if (cur == anc) {
			*result = 1;
			return 0;
		}
		if (cur == EXT2_ROOT_INO)
			return 0;
		err = nx_dir_get_parent(vol, cur, &parent);
		if (err)
			return err;
		if (parent == cur)
			return EXT2_ET_DIR_CORRUPTED;
		cur = parent;
	}
	return EXT2_ET_DIR_CORRUPTED;
}

/*
 * lock_rename()'s trap: the source must not be an ancestor of the
 * target directory (EINVAL), the target must not be an ancestor of the
 * source directory (ENOTEMPTY, or EINVAL when exchanging).
 */
static errcode_t check_loops(struct nx_volume *vol, struct side *old,
			     struct side *new, unsigned flags)
{
	errcode_t err;
	int anc;

	if (old->dir == new->dir)
		return 0;
	if (old->is_dir) {
		err = is_ancestor(vol, old->ino, new->dir, &anc);
		if (err)
			return err;
		if (anc)
			return EINVAL;
	}
	if (new->ino && new->is_dir) {
		err = is_ancestor(vol, new->ino, old->dir, &anc);
		if (err)
			return err;
		if (anc)
			return (flags & RENAME_EXCHANGE) ? EINVAL : ENOTEMPTY;
	}
	return 0;
}

/* vfs_rename()'s permission and type checks. */
static errcode_t check_perms(const struct nx_cred *cred, struct side *old,
			     struct side *new, unsigned flags)
{
	int exchange = (flags & RENAME_EXCHANGE) != 0;
	errcode_t err;

	err = nx_dir_may_delete(cred, &old->dinode, &old->inode, old->is_dir);
	if (err)
		return err;
	if (new->ino)
		err = nx_dir_may_delete(cred, &new->dinode, &new->inode,
					exchange ? new->is_dir : old->is_dir);
	else
		err = nx_dir_may_create(cred, &new->dinode);
	if (err)
		return err;
	if (old->dir == new->dir)
		return 0;
	/* A directory changing parent gets its '..' rewritten. */
	if (old->is_dir) {
		err = nx_perm_access(cred, (struct ext2_inode *)&old->inode,
				     W_OK);
		if (err)
			return err;
	}
	if (exchange && new->is_dir)
		err = nx_perm_access(cred, (struct ext2_inode *)&new->inode,
				     W_OK);
	return err;
}

/* A parent about to gain a subdirectory must have room for the link. */
static errcode_t check_link_max(ext2_filsys fs, struct side *old,
				struct side *new, unsigned flags)
{
	if (old->dir == new->dir)
		return 0;
	if (flags & RENAME_EXCHANGE) {
		if (old->is_dir == new->is_dir)
			return 0;
		if (old->is_dir && nx_dir_link_max(fs, &new->dinode))
			return EMLINK;
		if (new->is_dir && nx_dir_link_max(fs, &old->dinode))
			return EMLINK;
		return 0;
	}
	if (old->is_dir && !(new->ino && new->is_dir) &&
	    nx_dir_link_max(fs, &new->dinode))
		return EMLINK;
	return 0;
}

/* Set ctime of INO to NOW, with '..' repointed to PARENT if non-zero. */
static errcode_t touch_moved(struct nx_volume *vol, ext2_ino_t ino,
			     ext2_ino_t parent, int nlink_drop,
			     const struct timespec *now)
{
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (parent) {
		err = nx_dir_set_parent(vol, ino, &inode, parent);
		if (err)
			return err;
	}
	if (nlink_drop < 0)
		inode.i_links_count = 0;
	else if (nlink_drop > 0 && inode.i_links_count)
		inode.i_links_count--;
	nx_inode_set_time(&inode, NX_CTIME, now);
	return nx_inode_write(vol, ino, &inode);
}

/* Parents: link counts moved by ODELTA/NDELTA, mtime and ctime to NOW. */
static errcode_t touch_parents(struct nx_volume *vol, struct side *old,
			       struct side *new, int odelta, int ndelta,
			       const struct timespec *now)
{
	struct ext2_inode_large odir, ndir, *np;
	errcode_t err;

	err = nx_inode_read(vol, old->dir, &odir);
	if (err)
		return err;
	np = &odir;
	if (new->dir != old->dir) {
		err = nx_inode_read(vol, new->dir, &ndir);
		if (err)
			return err;
		np = &ndir;
	}
	if (odelta < 0)
		nx_dir_nlink_dec(&odir);
	else if (odelta > 0)
		nx_dir_nlink_inc(vol->fs, &odir);
	if (ndelta < 0)
		nx_dir_nlink_dec(np);
	else if (ndelta > 0)
		nx_dir_nlink_inc(vol->fs, np);
	nx_inode_set_time(&odir, NX_MTIME, now);
	nx_inode_set_time(&odir, NX_CTIME, now);
	err = nx_inode_write(vol, old->dir, &odir);
	if (err || np == &odir)
		return err;
	nx_inode_set_time(np, NX_MTIME, now);
	nx_inode_set_time(np, NX_CTIME, now);
	return nx_inode_write(vol, new->dir, np);
}

/* Plain rename (and NOREPLACE): move old's name over new's. */
static errcode_t do_move(struct nx_volume *vol, struct side *old,
			 struct side *new, ext2_ino_t *replaced)
{
	int cross = old->dir != new->dir;
	int odelta = 0, ndelta = 0;
	struct timespec now;
	errcode_t err, err2;

	if (new->ino)
		err = nx_dir_set_entry(vol, new->dir, new->name, old->ino,
				       old->inode.i_mode);
	else
		err = nx_dir_add_entry(vol, new->dir, new->name, old->ino,
				       old->inode.i_mode);
	if (err)
		return err;
	err = nx_dir_remove_entry(vol, old->dir, old->name);
	if (err) {
		/* Put the target back as it was; the source is untouched. */
		if (new->ino)
			err2 = nx_dir_set_entry(vol, new->dir, new->name,
						new->ino, new->inode.i_mode);
		else
			err2 = nx_dir_remove_entry(vol, new->dir, new->name);
		(void)err2;
		return err;
	}
	nx_now(&now);
	err = touch_moved(vol, old->ino, cross && old->is_dir ? new->dir : 0,
			  0, &now);
	if (err)
		return err;
	if (new->ino) {
		/* A replaced directory had no other parent: its count is 0. */
		err = touch_moved(vol, new->ino, 0, new->is_dir ? -1 : 1, &now);
		if (err)
			return err;
		*replaced = new->ino;
	}
	if (old->is_dir) {
		odelta = -1;			/* old parent lost a '..' */
		if (!new->ino)
			ndelta = 1;		/* new parent gained one */
	}
	return touch_parents(vol, old, new, odelta, ndelta, &now);
}

/* RENAME_EXCHANGE: swap what the two names point at. */
static errcode_t do_exchange(struct nx_volume *vol, struct side *old,
			     struct side *new)
{
	int cross = old->dir != new->dir;
	int odelta = 0;
	struct timespec now;
	errcode_t err;

	err = nx_dir_set_entry(vol, new->dir, new->name, old->ino,
			       old->inode.i_mode);
	if (err)
		return err;
	err = nx_dir_set_entry(vol, old->dir, old->name, new->ino,
			       new->inode.i_mode);
	if (err) {
		nx_dir_set_entry(vol, new->dir, new->name, new->ino,
				 new->inode.i_mode);
		return err;
	}
	nx_now(&now);
	err = touch_moved(vol, old->ino, cross && old->is_dir ? new->dir : 0,
			  0, &now);
	if (!err)
		err = touch_moved(vol, new->ino,
				  cross && new->is_dir ? old->dir : 0, 0, &now);
	if (err)
		return err;
	/* Only a directory crossing parents moves a '..' link. */
	if (cross && old->is_dir != new->is_dir)
		odelta = old->is_dir ? -1 : 1;
	return touch_parents(vol, old, new, odelta, -odelta, &now);
}

errcode_t nx_rename(struct nx_volume *vol, const struct nx_cred *cred,
		    ext2_ino_t olddir, const char *oldname,
		    ext2_ino_t newdir, const char *newname, unsigned flags,
		    ext2_ino_t *replaced)
{
	struct side old = { .dir = olddir, .name = oldname };
	struct side new = { .dir = newdir, .name = newname };
	ext2_ino_t dummy;
	int empty;
	errcode_t err;

	if (!replaced)
		replaced = &dummy;
	*replaced = 0;
	err = check_flags(flags);
	if (err)
		return err;
	if (nx_volume_rdonly(vol))
		return EROFS;
	err = nx_name_check(oldname);
	if (!err)
		err = nx_name_check(newname);
	if (err)
		return err;
	if (dot_name(oldname))
		return EBUSY;
	if (dot_name(newname))
		return (flags & RENAME_NOREPLACE) ? EEXIST : EBUSY;
	err = load_side(vol, cred, &old);
	if (!err)
		err = load_side(vol, cred, &new);
	if (err)
		return err;
	if (!old.ino)
		return ENOENT;
	if ((flags & RENAME_EXCHANGE) && !new.ino)
		return ENOENT;
	if ((flags & RENAME_NOREPLACE) && new.ino)
		return EEXIST;
	err = check_loops(vol, &old, &new, flags);
	if (err)
		return err;
	/* Two names of one inode: nothing to do (POSIX). */
	if (old.ino == new.ino)
		return 0;
	err = check_perms(cred, &old, &new, flags);
	if (!err)
		err = check_link_max(vol->fs, &old, &new, flags);
	if (err)
		return err;
	if (flags & RENAME_EXCHANGE)
		return do_exchange(vol, &old, &new);
	if (new.ino && new.is_dir) {
		err = nx_dir_is_empty(vol, new.ino, &empty);
		if (err)
			return err;
		if (!empty)
			return ENOTEMPTY;
	}
	return do_move(vol, &old, &new, replaced);
}
