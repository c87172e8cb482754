/*
 * snap_internal.h - state shared by the snapshot modules (not a public
 * contract: snapstore.c owns it, cow.c and snapview.c work on it).
 */
#ifndef NEXTFS_SNAP_INTERNAL_H
#define NEXTFS_SNAP_INTERNAL_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/overwrite.h"
#include "nextfs/snapshot.h"

/* ext4-snapshots' i_next_snapshot lives in the reserved l_i_version. */
#define snap_next(inode) ((inode)->osd1.linux1.l_i_version)

/* Open-addressing map N -> B for mappings not yet in the snapshot inode. */
struct nx_blkmap {
	blk64_t *keys;			/* stored as N + 1; 0 = empty slot */
	blk64_t *vals;
	size_t cap;			/* power of two */
	size_t count;
};

int nx_blkmap_get(const struct nx_blkmap *m, blk64_t key, blk64_t *val);
errcode_t nx_blkmap_put(struct nx_blkmap *m, blk64_t key, blk64_t val);
void nx_blkmap_clear(struct nx_blkmap *m);
void nx_blkmap_free(struct nx_blkmap *m);

/*
 * A snapshot file's block map in memory (mapcache.c): runs of logical
 * blocks -> physical blocks, sorted, valid while the device's write
 * generation is GEN.
 */
struct nx_mapext {
	blk64_t lblk;
	blk64_t pblk;
	blk64_t len;
};

struct nx_mapcache {
	struct nx_mapext *ext;
	size_t n, cap;
	uint64_t gen;			/* nx_blkio_write_gen() at load */
	int loaded;			/* and not seen stale since */
	size_t misses;			/* lookups left to the device */
};

struct nx_snap {
	ext2_ino_t ino;
	uint32_t id;
	ext2_ino_t next;		/* next older snapshot, 0 for the oldest */
	struct timespec taken;
	char name[NX_NAME_MAX + 1];
	ext2fs_block_bitmap mapped;	/* logical blocks this snapshot maps */
	struct nx_volume *view;		/* cached view (nx_snap_view_get), or NULL */
	int prefetched;			/* nx_snap_prefetch_views() hinted it */
	struct nx_mapcache map;		/* its file's map, cached (mapcache.c) */
	/*
	 * Deleted, its hand-over pending (EXT4_SNAPFILE_DELETED_FL on
	 * disk, handover.c): still on the list, so that the views of the
	 * older snapshots read what it holds for them, but named by no
	 * listing.  MAPPED is what it has not handed over yet.
	 */
	int deleted;
};

struct nx_handover;

struct nx_snapstore {
	struct nx_volume *vol;
	struct nx_snap **snaps;		/* oldest first, deleted ones too */
	int nsnaps;
	size_t capsnaps;
	struct nx_snap **live;		/* snaps[] but the deleted: listings */
	int nlive;
	size_t caplive;
	int ndeleted;			/* deleted, hand-over pending */
	struct nx_handover *ho;		/* the hand-over in progress, or NULL */
	int ids_sorted;			/* snaps[] ids increase (seek_id) */
	ext2_ino_t dir;			/* /.snapshots, 0 if absent */
	struct nx_snap *active;		/* newest; NULL when no snapshot */
	ext2fs_block_bitmap cow_map;	/* blocks in use at the active's take */
	ext2fs_block_bitmap exclude;	/* blocks owned by snapshot files */
	/*
	 * Blocks a deleted snapshot still maps that the snapshot it hands
	 * over to maps at the same place: a hand-over slice cut between
	 * its two commits (handover.c).  The next slice drops them from the
	 * deleted one without freeing them.  NULL when none.
	 */
	ext2fs_block_bitmap handed;
	struct nx_blkmap pending;	/* active's N -> B not yet in its inode */
	/*
	 * Blocks moved into the active snapshot as they are (N -> N: every
	 * data block an overwrite or a free hands over) and not yet in its
	 * inode.  A run-compressed bitmap: an overwrite moves whole runs,
	 * which a hash of single blocks would store, rehash and sort one by
	 * one.  Disjoint from pending (a block is preserved once).
	 */
	ext2fs_block_bitmap moved;
	blk64_t nmoved;
	int busy;			/* our own alloc-stats calls in flight */
	int for_snapshot;		/* libext2fs is mapping snapshot blocks */
	int applying;			/* apply_pending is running */
	ext2fs_block_bitmap keep;	/* blocks a delete hands to an older snapshot */
	struct nx_volume **dead_views;	/* views of deleted snapshots */
	size_t ndead, capdead;
	/*
	 * Superblocks, descriptors, bitmaps and inode tables: the metadata
	 * whose copies the COW reserve is sized for (cow.c).
	 */
	ext2fs_block_bitmap fixed;
	/* What the active snapshot has drawn from its reserve (cow.c). */
	blk64_t draws;
	int headroom;			/* nx_snap_keep_headroom() was called */
	unsigned long preserved;	/* count of preservations, ever */
	blk64_t copy_goal;		/* where the next copy is allocated */
	void (*old_stats)(ext2_filsys, blk64_t, int);
	void (*old_range_stats)(ext2_filsys, blk64_t, blk_t, int);
};

static inline struct nx_snapstore *fs_store(ext2_filsys fs)
{
	return nx_volume_of(fs)->snap;
}

/*
 * Blocks every live allocation leaves free on a volume served to
 * writers (nx_snap_keep_headroom), snapshot or not, so that a snapshot
 * can be taken and committed also when its writers filled it: the new
 * entry in /.snapshots and the first copies of the superblock,
 * descriptors and bitmaps it keeps (as ext4 holds reserved clusters back
 * even from root for what must not fail).
 */
static inline blk64_t nx_snap_headroom(ext2_filsys fs)
{
	return fs->desc_blocks + 16;
}

/* Preserved blocks of the active snapshot not yet in its inode. */
static inline blk64_t nx_pending_count(const struct nx_snapstore *store)
{
	return store->pending.count + store->nmoved;
}

/* The inode-table block that holds inode INO. */
static inline blk64_t nx_inode_table_block(ext2_filsys fs, ext2_ino_t ino)
{
	dgrp_t group = (ino - 1) / fs->super->s_inodes_per_group;
	uint64_t byte = (uint64_t)((ino - 1) % fs->super->s_inodes_per_group) *
			EXT2_INODE_SIZE(fs->super);

	return ext2fs_inode_table_loc(fs, group) + byte / fs->blocksize;
}

/* Where the active snapshot keeps N, if that is still pending. */
static inline int nx_pending_get(const struct nx_snapstore *store, blk64_t n,
				 blk64_t *b)
{
	if (ext2fs_test_block_bitmap2(store->moved, n)) {
		*b = n;
		return 1;
	}
	return nx_blkmap_get(&store->pending, n, b);
}

/*
 * snapstore.c: loading the store at open (open.c), and the volume hooks
 * (volume.h) open.c registers for it.
 *
 * Attaching reads only: the list, every snapshot file's inode and block
 * map (sanity.h's map walk), the names and the superblock's snapshot
 * fields are checked before anything can write.  Damage goes into DMG
 * (sanity.h, read-write level: the caller makes the refusal line), and
 * refuses (EXT2_ET_FILESYSTEM_CORRUPTED, nothing attached) - except for a
 * read-only open (volume.h), which goes on past damage only writing
 * would meet, and with NX_VOL_SALVAGE without any snapshot (*DROPPED set)
 * when what views read is damaged.  Other errors: MSG says why.  Once
 * attached, the store is vol->snap and the overwrite policy
 * (overwrite.h) is registered; detach undoes both.
 */
struct nx_damage;
errcode_t nx_snap_attach(struct nx_volume *vol, struct nx_damage *dmg,
			 int *dropped, char *msg, size_t msglen);
void nx_snap_detach(struct nx_volume *vol);
/*
 * The flush hook: complete pending snapshot bookkeeping and write all
 * dirty metadata.  Without a store this is nx_meta_write().
 */
errcode_t nx_snap_flush(struct nx_volume *vol);
/*
 * The block_rank hook, for committing without a journal (txn.c):
 * NX_VOL_RANK_MAP - owned by a snapshot file (a map block or a copy);
 * NX_VOL_RANK_ACTIVE - the inode-table block holding the active
 * snapshot's inode; NX_VOL_RANK_INODE - one holding another snapshot
 * inode; 0 - none of these.
 */
int nx_snap_block_rank(struct nx_volume *vol, blk64_t blk);

/* owners.c: superblocks, descriptors, bitmaps, inode tables, MMP. */
void nx_mark_fs_metadata(ext2_filsys fs, ext2fs_block_bitmap map);

/* cow.c */
/* The overwrite policy (overwrite.h) of every volume with a store. */
extern const struct nx_overwrite_ops nx_snap_overwrite_ops;
void nx_cow_install(struct nx_snapstore *store);
void nx_cow_uninstall(struct nx_snapstore *store);
int nx_cow_needs_preserve(struct nx_snapstore *store, blk64_t blk);
errcode_t nx_cow_apply_pending(struct nx_snapstore *store);
errcode_t nx_cow_map_run(struct nx_snapstore *store, ext2_ino_t ino,
			 struct ext2_inode_large *inode, blk64_t n, blk64_t b,
			 blk64_t len);
errcode_t nx_cow_set_active(struct nx_snapstore *store, struct nx_snap *snap,
			    ext2fs_block_bitmap take_map);
errcode_t nx_cow_init_fixed(struct nx_snapstore *store);
errcode_t nx_cow_count_draws(struct nx_snapstore *store);

/* mapcache.c */
/*
 * Where snapshot S's file maps logical block N: returns 1 with *PHYS and
 * *LEN (the blocks from N on that continue on disk), or *PHYS = 0 and
 * *LEN = 0 for a hole; returns 0 when the cache cannot answer (not worth
 * loading yet, or stale): ask the file's map on the device.  Exact as the
 * device is: any write since the load is a miss.  Live volume locked.
 */
int nx_mapcache_lookup(struct nx_snapstore *store, struct nx_snap *s,
		       blk64_t n, blk64_t *phys, blk64_t *len);
void nx_mapcache_free(struct nx_mapcache *c);

/* snapview.c */
/* The overwrite policy's view_plan (overwrite.h). */
errcode_t nx_snap_view_plan(struct nx_volume *view, void *buf, uint64_t len,
			    uint64_t offset, struct nx_file_rd *rd);
errcode_t nx_snap_resolve(struct nx_snapstore *store, int idx, blk64_t blk,
			  blk64_t *phys);
errcode_t nx_snap_read_take_bitmap(struct nx_snapstore *store, int idx,
				   ext2fs_block_bitmap *map);

/* snapstore.c */
int nx_snap_index(struct nx_snapstore *store, ext2_ino_t ino);
/* Rebuild store->live (and ndeleted) after snaps[] or a deleted flag changed. */
errcode_t nx_snap_relist(struct nx_snapstore *store);
/* The snapshot (not deleted) named NAME, or NULL. */
struct nx_snap *nx_snap_by_name(struct nx_snapstore *store, const char *name);
/* The newest snapshot below index IDX that is not deleted, or NULL. */
struct nx_snap *nx_snap_older_live(struct nx_snapstore *store, int idx);
/* Keep S's view for requests that still hold it (S is being deleted). */
void nx_snap_retire_view(struct nx_snapstore *store, struct nx_snap *s);
void nx_snap_free(struct nx_snap *s);
errcode_t nx_snap_link_name(ext2_filsys fs, ext2_ino_t dir, const char *name,
			    ext2_ino_t ino, int type);
errcode_t nx_snap_remove_dir(struct nx_snapstore *store);

/* handover.c */
/* Give a deleted snapshot that holds the entry NAME in /.snapshots another. */
errcode_t nx_handover_free_name(struct nx_snapstore *store, const char *name);
/* At attach: the deleted snapshots on the list (nothing written). */
void nx_handover_free(struct nx_snapstore *store);
/* The copy-on-write reserve a take sets: at most an eighth of the volume. */
blk64_t nx_snap_cow_reserve(ext2_filsys fs);
/* Index of the first snapshot with id >= ID, or nsnaps (binary search). */
int nx_snap_seek(struct nx_snapstore *store, uint32_t id);

#endif
