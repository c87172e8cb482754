/*
 * orphan.c - the orphan list (see nextfs/orphan.h).
 *
 * On disk: s_last_orphan is the newest orphan; each orphan's i_dtime
 * holds the next older one, 0 ends the chain (ext3's layout, which e2fsck
 * and the kernel process at mount).  In memory: a hash of nodes with both
 * neighbours, so taking one off the middle rewrites only its newer
 * neighbour's i_dtime (or the superblock).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/orphan.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/volume.h"

struct onode {
	ext2_ino_t ino, newer, older;	/* chain neighbours, 0 = none */
	struct onode *hnext;
};

struct nx_orphans {
	struct onode **buckets;
	size_t nbuckets;		/* power of two */
	size_t count;
};

#define NBUCKETS_MIN 64

static size_t bucket(const struct nx_orphans *o, ext2_ino_t ino)
{
	return (size_t)(((uint64_t)ino * 0x9E3779B97F4A7C15ULL) >> 32) &
	       (o->nbuckets - 1);
}

static struct onode *find(const struct nx_orphans *o, ext2_ino_t ino)
{
	struct onode *n;

	if (!o)
		return NULL;
	for (n = o->buckets[bucket(o, ino)]; n && n->ino != ino; n = n->hnext)
		;
	return n;
}

static errcode_t index_get(struct nx_volume *vol, struct nx_orphans **ret)
{
	struct nx_orphans *o = vol->orphans;

	if (!o) {
		o = calloc(1, sizeof(*o));
		if (!o)
			return EXT2_ET_NO_MEMORY;
		o->nbuckets = NBUCKETS_MIN;
		o->buckets = calloc(o->nbuckets, sizeof(*o->buckets));
		if (!o->buckets) {
			free(o);
			return EXT2_ET_NO_MEMORY;
		}
		vol->orphans = o;
	}
	*ret = o;
	return 0;
}

/* Add node N (not yet hashed); grows the table when it gets crowded. */
static void index_insert(struct nx_orphans *o, struct onode *n)
{
	size_t b;

	if (o->count >= 2 * o->nbuckets) {
		struct onode **nb = calloc(2 * o->nbuckets, sizeof(*nb));
		size_t old = o->nbuckets, i;

		if (nb) {
			struct onode **ob = o->buckets;

			o->buckets = nb;
			o->nbuckets = 2 * old;
			for (i = 0; i < old; i++)
				while (ob[i]) {
					struct onode *m = ob[i];

					ob[i] = m->hnext;
					b = bucket(o, m->ino);
					m->hnext = nb[b];
					nb[b] = m;
				}
			free(ob);
		}
	}
	b = bucket(o, n->ino);
	n->hnext = o->buckets[b];
	o->buckets[b] = n;
	o->count++;
}

static void index_unlink(struct nx_orphans *o, struct onode *n)
{
	struct onode **p = &o->buckets[bucket(o, n->ino)];

	while (*p != n)
		p = &(*p)->hnext;
	*p = n->hnext;
	o->count--;
}

int nx_orphan_has(struct nx_volume *vol, ext2_ino_t ino)
{
	return find(vol->orphans, ino) != NULL;
}

errcode_t nx_orphan_add(struct nx_volume *vol, ext2_ino_t ino,
			struct ext2_inode_large *inode)
{
	struct ext2_super_block *sb = vol->fs->super;
	struct nx_orphans *o;
	struct onode *n, *head;
	errcode_t err;

	if (find(vol->orphans, ino))
		return 0;
	err = index_get(vol, &o);
	if (err)
		return err;
	n = calloc(1, sizeof(*n));
	if (!n)
		return EXT2_ET_NO_MEMORY;
	n->ino = ino;
	n->older = sb->s_last_orphan;
	head = find(o, n->older);
	if (head)
		head->newer = ino;
	index_insert(o, n);
	inode->i_dtime = sb->s_last_orphan;
	sb->s_last_orphan = ino;
	ext2fs_mark_super_dirty(vol->fs);
	return 0;
}

errcode_t nx_orphan_remove(struct nx_volume *vol, ext2_ino_t ino,
			   struct ext2_inode_large *inode)
{
	struct nx_orphans *o = vol->orphans;
	struct onode *n = find(o, ino), *older;
	struct ext2_inode_large newer;
	errcode_t err;

	if (!n)
		return 0;
	if (!n->newer) {
		vol->fs->super->s_last_orphan = n->older;
		ext2fs_mark_super_dirty(vol->fs);
	} else {
		err = nx_inode_read(vol, n->newer, &newer);
		if (err)
			return err;
		newer.i_dtime = n->older;
		err = nx_inode_write(vol, n->newer, &newer);
		if (err)
			return err;
		find(o, n->newer)->older = n->older;
	}
	older = find(o, n->older);
	if (older)
		older->newer = n->newer;
	index_unlink(o, n);
	free(n);
	inode->i_dtime = 0;
	return 0;
}

errcode_t nx_orphans_recover(struct nx_volume *vol, unsigned *freed)
{
	struct ext2_super_block *sb = vol->fs->super;
	struct ext2_inode_large inode;
	ext2_ino_t ino = sb->s_last_orphan, *list = NULL;
	size_t n = 0, cap = 0, i;
	errcode_t err = 0;

	*freed = 0;
	/* Collect the chain first (it may be corrupt: bounded, checked). */
	while (ino && n < sb->s_inodes_count) {
		/*
		 * An inode that is not allocated is no orphan: releasing it
		 * would free blocks that may be another file's now.  Like the
		 * kernel (ext4_orphan_cleanup), the list ends there and the
		 * mount goes on: after a crash on ext2, where the superblock
		 * and the inode bitmap may land in either order, that is just
		 * what e2fsck repairs.
		 */
		if (ino < EXT2_FIRST_INO(sb) || ino > sb->s_inodes_count ||
		    !ext2fs_test_inode_bitmap2(vol->fs->inode_map, ino)) {
			fprintf(stderr, "nextfs: %s: the orphan list names inode "
				"%u, which is not in use: ignoring the rest of "
				"the list ('nextfs check --repair' checks the "
				"volume)\n", vol->device, ino);
			break;
		}
		err = nx_grow((void **)&list, &cap, n, sizeof(*list), 16);
		if (err)
			break;
		list[n++] = ino;
		err = nx_inode_read(vol, ino, &inode);
		if (err)
			break;
		ino = inode.i_dtime;
	}
	/*
	 * Rebuild the chain in memory, oldest first, so that releasing
	 * (which takes each off the list) keeps it consistent throughout.
	 */
	sb->s_last_orphan = 0;
	ext2fs_mark_super_dirty(vol->fs);
	for (i = n; i-- > 0 && !err;) {
		err = nx_inode_read(vol, list[i], &inode);
		if (err)
			break;
		if (inode.i_links_count == 0 && inode.i_mode)
			err = nx_orphan_add(vol, list[i], &inode);
		else
			inode.i_dtime = 0;	/* a live inode: no chain */
		if (!err)
			err = nx_inode_write(vol, list[i], &inode);
	}
	for (i = 0; i < n && !err; i++) {
		if (!nx_orphan_has(vol, list[i]))
			continue;
		err = nx_inode_release(vol, list[i]);
		if (!err)
			(*freed)++;
	}
	free(list);
	return err;
}

void nx_orphans_free(struct nx_volume *vol)
{
	struct nx_orphans *o = vol->orphans;
	size_t i;

	if (!o)
		return;
	for (i = 0; i < o->nbuckets; i++)
		while (o->buckets[i]) {
			struct onode *n = o->buckets[i];

			o->buckets[i] = n->hnext;
			free(n);
		}
	free(o->buckets);
	free(o);
	vol->orphans = NULL;
}
