/*
 * snapstore.c - the snapshot list: load it at mount, take, delete, list.
 *
 * On disk (docs/design.md section 1): each snapshot is a regular file in
 * /.snapshots with EXT4_SNAPFILE_FL, i_generation = id, the next older
 * snapshot's inode in l_i_version, i_size = whole volume.  The superblock
 * points at the newest (s_snapshot_list) which is also the active one
 * (s_snapshot_inum/s_snapshot_id); RO_COMPAT_HAS_SNAPSHOT is set while any
 * exists.  s_snapshot_id is the last id ever issued, so ids are never
 * reused even when the newest snapshot is deleted (docs/snapshots.md).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include "nextfs/blkio.h"
#include "nextfs/grow.h"
#include "nextfs/inode.h"
#include "nextfs/meta.h"
#include "nextfs/reserve.h"
#include "nextfs/sanity.h"
#include "snap_internal.h"

#define MAX_SNAPSHOTS 1024

int nx_snap_index(struct nx_snapstore *store, ext2_ino_t ino)
{
	int i;

	for (i = 0; i < store->nsnaps; i++)
		if (store->snaps[i]->ino == ino)
			return i;
	return -1;
}

errcode_t nx_snap_name_check(const char *name)
{
	size_t len = strlen(name);

	if (!len || !strcmp(name, ".") || !strcmp(name, "..") ||
	    strchr(name, '/'))
		return EINVAL;
	if (len > NX_NAME_MAX)
		return ENAMETOOLONG;
	return 0;
}

void nx_snap_free(struct nx_snap *s)
{
	if (!s)
		return;
	nx_snap_view_close(s->view);	/* callers retire views first */
	if (s->mapped)
		ext2fs_free_block_bitmap(s->mapped);
	nx_mapcache_free(&s->map);
	free(s);
}

static errcode_t new_snap(ext2_filsys fs, struct nx_snap **ret)
{
	struct nx_snap *s = calloc(1, sizeof(*s));
	errcode_t err;

	if (!s)
		return EXT2_ET_NO_MEMORY;
	err = ext2fs_allocate_block_bitmap(fs, "snapshot map", &s->mapped);
	if (err) {
		free(s);
		return err;
	}
	*ret = s;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Loading the list at attach, and checking what the engine relies on. */

/*
 * Everything the engine relies on is checked here, reading only, before
 * the volume is written (docs/lifecycle.md): a snapshot file's map that
 * stops half way would only show when the first copy-on-write (the
 * superblock, at mount) tries to extend it, after it has written.
 * Findings go to DMG as read-write damage, in two kinds:
 *  - what views read (the list, ids, maps, names): a read-only open goes
 *    on without the snapshots (VIEWS set);
 *  - what only writing uses (the superblock's active snapshot, last id
 *    and reserve): read-only opens serve them.
 */
struct loader {
	struct nx_snapstore *store;
	struct nx_damage *dmg;
	int views;			/* damage to what views read */
	struct nx_snap *snap;		/* whose map is being scanned */
	char problem[200];		/* what the map scan found */
};

static errcode_t views_damage(struct loader *ld, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static errcode_t views_damage(struct loader *ld, const char *fmt, ...)
{
	char buf[sizeof(ld->dmg->problem)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	nx_damage_note(ld->dmg, NX_DAMAGE_RW, "%s", buf);
	ld->views = 1;
	return EXT2_ET_FILESYSTEM_CORRUPTED;
}

/*
 * Does T map logical block N at physical block B?  (T was scanned
 * before: its MAPPED bitmap says whether it maps N at all.)
 */
static int maps_at(struct nx_snapstore *store, struct nx_snap *t, blk64_t n,
		   blk64_t b)
{
	blk64_t phys = 0;

	return ext2fs_test_block_bitmap2(t->mapped, n) &&
	       !ext2fs_bmap2(store->vol->fs, t->ino, NULL, NULL, 0, n, NULL,
			     &phys) &&
	       phys == b;
}

/*
 * Deleted snapshot S maps N at B, a block already owned by a snapshot
 * file scanned before: the resumable middle of a hand-over if the
 * snapshot S hands over to maps N at B too (its slice commits the new
 * mapping before S drops it, handover.c).  Noted in STORE->handed.
 */
static int handed_over(struct loader *ld, blk64_t b, blk64_t n)
{
	struct nx_snapstore *store = ld->store;
	struct nx_snap *s = ld->snap, *t;

	if (!s->deleted || n == NX_MAP_META)
		return 0;
	t = nx_snap_older_live(store, nx_snap_index(store, s->ino));
	if (!t || !maps_at(store, t, n, b))
		return 0;
	if (!store->handed &&
	    ext2fs_allocate_block_bitmap(store->vol->fs, "handed over",
					 &store->handed))
		return 0;
	ext2fs_mark_block_bitmap2(store->handed, b);
	return 1;
}

/*
 * The blocks of [PBLK, PBLK + COUNT) (mapped at LBLK..) that a snapshot
 * file scanned before owns too; 0 if those are all handed over.
 */
static blk64_t owned_twice(struct loader *ld, blk64_t pblk, blk64_t count,
			   blk64_t lblk)
{
	ext2fs_block_bitmap exclude = ld->store->exclude;
	blk64_t i;

	if (ext2fs_test_block_bitmap_range2(exclude, pblk, count))
		return 0;
	for (i = 0; i < count; i++)
		if (ext2fs_test_block_bitmap2(exclude, pblk + i) &&
		    !handed_over(ld, pblk + i, lblk == NX_MAP_META ?
				 NX_MAP_META : lblk + i))
			return pblk + i;
	return 0;
}

/*
 * One run of snapshot S's map (nx_sanity_walk_map): every block it owns
 * is excluded from the copy-on-write set, and owned by no other snapshot
 * file (but for a hand-over cut half way); data blocks are mapped at
 * logical N, inside the volume.
 */
static errcode_t scan_run(void *priv, blk64_t pblk, blk64_t count,
			  blk64_t lblk)
{
	struct loader *ld = priv;
	struct nx_snapstore *store = ld->store;
	ext2_filsys fs = store->vol->fs;
	blk64_t dup = owned_twice(ld, pblk, count, lblk);

	if (dup) {
		snprintf(ld->problem, sizeof(ld->problem), "its block %llu "
			 "belongs to another snapshot file too",
			 (unsigned long long)dup);
		return EXT2_ET_FILESYSTEM_CORRUPTED;
	}
	ext2fs_mark_block_bitmap_range2(store->exclude, pblk, count);
	if (lblk == NX_MAP_META)
		return 0;
	if (lblk < fs->super->s_first_data_block ||
	    lblk >= ext2fs_blocks_count(fs->super) ||
	    count > ext2fs_blocks_count(fs->super) - lblk) {
		snprintf(ld->problem, sizeof(ld->problem), "it maps logical "
			 "block %llu, outside the volume's %llu blocks",
			 (unsigned long long)lblk,
			 (unsigned long long)ext2fs_blocks_count(fs->super));
		return EXT2_ET_FILESYSTEM_CORRUPTED;
	}
	ext2fs_mark_block_bitmap_range2(ld->snap->mapped, lblk, count);
	return 0;
}

static errcode_t scan_snapshot_blocks(struct loader *ld, struct nx_snap *s)
{
	struct ext2_inode_large inode;
	errcode_t err;

	err = nx_inode_read(ld->store->vol, s->ino, &inode);
	if (err)
		return views_damage(ld, "cannot read snapshot inode %u: %s",
				    s->ino, error_message(err));
	ld->snap = s;
	ld->problem[0] = 0;
	err = nx_sanity_walk_map(ld->store->vol->fs, s->ino,
				 (struct ext2_inode *)&inode, scan_run, ld,
				 ld->problem, sizeof(ld->problem));
	if (err == EXT2_ET_FILESYSTEM_CORRUPTED)
		return views_damage(ld, "snapshot inode %u (id %u) has a "
				    "corrupt block map: %s", s->ino, s->id,
				    ld->problem);
	return err;
}

static int name_of_entry(struct ext2_dir_entry *dirent, int offset,
			 int blocksize, char *buf, void *priv)
{
	struct nx_snapstore *store = priv;
	int len = ext2fs_dirent_name_len(dirent);
	int i = nx_snap_index(store, dirent->inode);

	if (i >= 0 && !store->snaps[i]->name[0]) {
		memcpy(store->snaps[i]->name, dirent->name, len);
		store->snaps[i]->name[len] = 0;
	}
	return 0;
}

static errcode_t load_names(struct loader *ld)
{
	struct nx_snapstore *store = ld->store;
	int i;

	if (store->dir) {
		errcode_t err = ext2fs_dir_iterate(store->vol->fs, store->dir,
						   0, NULL, name_of_entry,
						   store);
		if (err)
			return views_damage(ld, "cannot read the /%s directory: "
					    "%s", NX_SNAPDIR_NAME,
					    error_message(err));
	}
	/* An unnamed snapshot still gets a usable name. */
	for (i = 0; i < store->nsnaps; i++)
		if (!store->snaps[i]->name[0])
			snprintf(store->snaps[i]->name, sizeof(store->snaps[i]->name),
				 "unnamed-%u", store->snaps[i]->id);
	return 0;
}

/*
 * The list entry INO, after the N entries in CHAIN (newest first): in
 * the inode table, not seen before, a linked regular file with the
 * snapshot flag and an id below the newer one's.  Views are found by id,
 * and listed in id order: a zero, repeated or out of order id is damage
 * to them (and the checker relinks a broken list by ids).
 */
static errcode_t check_list_entry(struct loader *ld, struct nx_snap **chain,
				  int n, ext2_ino_t ino,
				  struct ext2_inode_large *inode)
{
	ext2_filsys fs = ld->store->vol->fs;
	errcode_t err;
	int i;

	if (n == MAX_SNAPSHOTS)
		return views_damage(ld, "the snapshot list holds more than %d "
				    "snapshots", MAX_SNAPSHOTS);
	if (ino < EXT2_FIRST_INO(fs->super) || ino > fs->super->s_inodes_count)
		return views_damage(ld, "the snapshot list points at inode %u, "
				    "outside the inode table (%u-%u)", ino,
				    EXT2_FIRST_INO(fs->super),
				    fs->super->s_inodes_count);
	for (i = 0; i < n; i++)
		if (chain[i]->ino == ino)
			return views_damage(ld, "the snapshot list loops "
					    "(inode %u comes back)", ino);
	err = nx_inode_read(ld->store->vol, ino, inode);
	if (err)
		return views_damage(ld, "cannot read snapshot inode %u: %s",
				    ino, error_message(err));
	if (!(inode->i_flags & EXT4_SNAPFILE_FL) ||
	    !LINUX_S_ISREG(inode->i_mode) || !inode->i_links_count)
		return views_damage(ld, "the snapshot list points at inode %u, "
				    "which is not a snapshot file (mode %#o, "
				    "%u links, %s snapshot flag)", ino,
				    inode->i_mode, inode->i_links_count,
				    inode->i_flags & EXT4_SNAPFILE_FL ?
				    "with the" : "without the");
	if (!inode->i_generation)
		return views_damage(ld, "snapshot inode %u has id 0", ino);
	for (i = 0; i < n; i++)
		if (chain[i]->id == inode->i_generation)
			return views_damage(ld, "snapshot inodes %u and %u "
					    "share id %u", chain[i]->ino, ino,
					    chain[i]->id);
	if (n && inode->i_generation > chain[n - 1]->id)
		return views_damage(ld, "the snapshot list is out of id order: "
				    "inode %u (id %u) is listed as older than "
				    "inode %u (id %u)", ino, inode->i_generation,
				    chain[n - 1]->ino, chain[n - 1]->id);
	return 0;
}

/* Follow s_snapshot_list -> i_next_snapshot, checking each inode. */
static errcode_t load_list(struct loader *ld)
{
	struct nx_snapstore *store = ld->store;
	ext2_filsys fs = store->vol->fs;
	struct nx_snap *chain[MAX_SNAPSHOTS];
	ext2_ino_t ino = fs->super->s_snapshot_list;
	struct ext2_inode_large inode;
	int n = 0, i;
	errcode_t err = 0;

	while (ino) {
		struct nx_snap *s;

		err = check_list_entry(ld, chain, n, ino, &inode);
		if (!err)
			err = new_snap(fs, &s);
		if (err)
			goto fail;
		chain[n++] = s;
		s->ino = ino;
		s->id = inode.i_generation;
		s->next = snap_next(&inode);
		s->deleted = (inode.i_flags & EXT4_SNAPFILE_DELETED_FL) != 0;
		nx_inode_get_time(&inode, NX_MTIME, &s->taken);
		ino = s->next;
	}
	store->snaps = calloc(n ? n : 1, sizeof(*store->snaps));
	if (!store->snaps) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	store->capsnaps = n ? n : 1;
	for (i = 0; i < n; i++)
		store->snaps[i] = chain[n - 1 - i];	/* oldest first */
	store->nsnaps = n;
	for (i = 1; i < n; i++)
		if (store->snaps[i]->id <= store->snaps[i - 1]->id)
			store->ids_sorted = 0;
	for (i = 0; i < n; i++) {
		err = scan_snapshot_blocks(ld, store->snaps[i]);
		if (err)
			return err;
	}
	err = nx_snap_relist(store);
	return err ? err : load_names(ld);
fail:
	for (i = 0; i < n; i++)
		nx_snap_free(chain[i]);
	return err;
}

/*
 * The superblock's snapshot fields, which writing uses: set only with
 * HAS_SNAPSHOT (else nothing would copy-on-write for the snapshots they
 * name), the active snapshot the newest, the last id issued at least the
 * newest's (take issues the next), the copy-on-write reserve what take
 * sets (nx_snap_cow_reserve: at most an eighth of the volume).
 */
static void check_super_fields(struct loader *ld)
{
	struct nx_snapstore *store = ld->store;
	struct ext2_super_block *sb = store->vol->fs->super;
	struct nx_snap *newest = store->nlive ?
				 store->live[store->nlive - 1] : NULL;
	ext2_ino_t head = newest ? newest->ino : 0;

	if (!ext2fs_has_feature_has_snapshot(sb)) {
		char fix[256];

		/* (stock e2fsck sees nothing wrong: the advice is ours) */
		snprintf(fix, sizeof(fix), "repair it with 'nextfs check "
			 "--repair %s'", store->vol->device);
		if (sb->s_snapshot_list || sb->s_snapshot_inum)
			nx_damage_note_fix(ld->dmg, NX_DAMAGE_RW, fix, "the "
				"superblock names snapshot inode %u but "
				"has_snapshot is not set", sb->s_snapshot_list ?
				sb->s_snapshot_list : sb->s_snapshot_inum);
		return;
	}
	if (sb->s_snapshot_inum != head)
		nx_damage_note(ld->dmg, NX_DAMAGE_RW, "the superblock's active "
			       "snapshot is inode %u, not the newest snapshot "
			       "(inode %u)", sb->s_snapshot_inum, head);
	if (store->nsnaps &&
	    sb->s_snapshot_id < store->snaps[store->nsnaps - 1]->id)
		nx_damage_note(ld->dmg, NX_DAMAGE_RW, "the last snapshot id "
			       "issued (%u) is below the newest snapshot's "
			       "(%u)", sb->s_snapshot_id,
			       store->snaps[store->nsnaps - 1]->id);
	if (newest && sb->s_snapshot_r_blocks_count >
	    ext2fs_blocks_count(sb) / 8)
		nx_damage_note(ld->dmg, NX_DAMAGE_RW, "the copy-on-write "
			       "reserve (%llu blocks) is more than an eighth of "
			       "the volume's %llu blocks",
			       (unsigned long long)sb->s_snapshot_r_blocks_count,
			       (unsigned long long)ext2fs_blocks_count(sb));
}

/*
 * A deleted snapshot's view may still be in use by a request that looked
 * it up before the delete: keep it (reads now fail cleanly, the snapshot
 * being gone) until the volume is closed.
 */
void nx_snap_retire_view(struct nx_snapstore *store, struct nx_snap *s)
{
	if (!s->view)
		return;
	if (nx_grow((void **)&store->dead_views, &store->capdead, store->ndead,
		    sizeof(*store->dead_views), 4))
		return;		/* keep it attached: closed with the snap */
	store->dead_views[store->ndead++] = s->view;
	s->view = NULL;
}

static void free_store(struct nx_snapstore *store)
{
	size_t d;
	int i;

	for (d = 0; d < store->ndead; d++)
		nx_snap_view_close(store->dead_views[d]);
	free(store->dead_views);
	nx_handover_free(store);
	for (i = 0; i < store->nsnaps; i++)
		nx_snap_free(store->snaps[i]);
	free(store->snaps);
	free(store->live);
	if (store->cow_map)
		ext2fs_free_block_bitmap(store->cow_map);
	if (store->exclude)
		ext2fs_free_block_bitmap(store->exclude);
	if (store->handed)
		ext2fs_free_block_bitmap(store->handed);
	if (store->moved)
		ext2fs_free_block_bitmap(store->moved);
	if (store->fixed)
		ext2fs_free_block_bitmap(store->fixed);
	nx_blkmap_free(&store->pending);
	free(store);
}

static errcode_t find_snapdir(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;
	errcode_t err;

	err = ext2fs_lookup(fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME,
			    strlen(NX_SNAPDIR_NAME), NULL, &store->dir);
	if (err == EXT2_ET_FILE_NOT_FOUND) {
		store->dir = 0;
		return 0;
	}
	return err;
}

/* Forget the snapshots loaded so far (a read-only open goes on without). */
static void drop_snapshots(struct nx_snapstore *store)
{
	int i;

	for (i = 0; i < store->nsnaps; i++)
		nx_snap_free(store->snaps[i]);
	store->nsnaps = 0;
	nx_snap_relist(store);
	ext2fs_clear_block_bitmap(store->exclude);
	if (store->handed)
		ext2fs_clear_block_bitmap(store->handed);
}

/* The newest snapshot receives copy-on-write from now on. */
static errcode_t activate_newest(struct nx_snapstore *store,
				 struct nx_damage *dmg)
{
	struct nx_snap *newest = store->live[store->nlive - 1];
	errcode_t err = nx_cow_set_active(store, newest, NULL);

	if (err)
		nx_damage_note(dmg, NX_DAMAGE_RW, "cannot read the block bitmap "
			       "that the active snapshot (inode %u) preserves: "
			       "%s", newest->ino, error_message(err));
	return err;
}

/*
 * A volume closed uncleanly without a journal may come with snapshot
 * map blocks the crash kept out of the block bitmap: the ordered commit
 * writes the bitmaps last.  Such a block would be handed out again and
 * overwritten, changing the snapshot (docs/design.md P10): every block a
 * snapshot file owns is marked in use before anything is allocated.
 * (Blocks the crash left marked but owned by nothing only leak, until
 * e2fsck.)
 */
static void claim_snapshot_blocks(struct nx_snapstore *store)
{
	ext2_filsys fs = store->vol->fs;
	blk64_t b = fs->super->s_first_data_block;
	blk64_t end = ext2fs_blocks_count(fs->super) - 1;

	while (b <= end &&
	       !ext2fs_find_first_set_block_bitmap2(store->exclude, b, end,
						    &b)) {
		if (!ext2fs_test_block_bitmap2(fs->block_map, b))
			ext2fs_block_alloc_stats2(fs, b, +1);
		b++;
	}
}

errcode_t nx_snap_attach(struct nx_volume *vol, struct nx_damage *dmg,
			 int *dropped, char *msg, size_t msglen)
{
	ext2_filsys fs = vol->fs;
	struct nx_snapstore *store;
	struct loader ld = { NULL, dmg, 0, NULL, "" };
	errcode_t err;

	*dropped = 0;
	store = calloc(1, sizeof(*store));
	if (!store)
		return EXT2_ET_NO_MEMORY;
	store->vol = vol;
	store->ids_sorted = 1;
	ld.store = store;
	err = ext2fs_allocate_block_bitmap(fs, "snapshot exclude",
					   &store->exclude);
	if (!err)
		err = ext2fs_allocate_block_bitmap(fs, "moved, pending",
						   &store->moved);
	if (!err)
		err = nx_cow_init_fixed(store);
	if (err)
		goto fail;
	err = find_snapdir(store);
	if (err && err != EXT2_ET_NO_MEMORY)
		err = views_damage(&ld, "cannot look up /%s: %s",
				   NX_SNAPDIR_NAME, error_message(err));
	if (!err && ext2fs_has_feature_has_snapshot(fs->super))
		err = load_list(&ld);
	if (!err || ld.views)
		check_super_fields(&ld);
	if (err && !ld.views)
		goto fail;		/* not damage: out of memory, ... */
	if (nx_volume_lenient(vol)) {
		/* Reading needs sound views, nothing else. */
		if (ld.views && !(vol->flags & NX_VOL_SALVAGE)) {
			err = EXT2_ET_FILESYSTEM_CORRUPTED;	/* refused */
			goto fail;
		}
		if (ld.views) {
			drop_snapshots(store);
			*dropped = 1;
		}
	} else if (dmg->level) {
		err = EXT2_ET_FILESYSTEM_CORRUPTED;	/* refused */
		goto fail;
	}
	if (!vol->was_clean && !nx_volume_rdonly(vol) && !*dropped)
		claim_snapshot_blocks(store);
	vol->snap = store;
	vol->overwrite = &nx_snap_overwrite_ops;
	nx_cow_install(store);
	nx_cow_count_draws(store);	/* no active snapshot yet: headroom */
	if (!nx_volume_rdonly(vol) && store->nlive) {
		err = activate_newest(store, dmg);
		if (!err)
			err = nx_cow_count_draws(store);
		if (err) {
			nx_snap_detach(vol);
			return EXT2_ET_FILESYSTEM_CORRUPTED;
		}
	}
	return 0;
fail:
	if (err != EXT2_ET_FILESYSTEM_CORRUPTED)
		nx_set_msg(msg, msglen, "%s: cannot load the snapshots: %s",
			   vol->device, error_message(err));
	free_store(store);
	return err;
}

void nx_snap_detach(struct nx_volume *vol)
{
	struct nx_snapstore *store = vol->snap;

	if (!store)
		return;
	nx_cow_uninstall(store);
	free_store(store);
	vol->snap = NULL;
	vol->overwrite = NULL;
}

int nx_snap_count(struct nx_volume *vol)
{
	return vol->snap ? vol->snap->nlive : 0;
}

ext2_ino_t nx_snap_dir_ino(struct nx_volume *vol)
{
	return vol->snap ? vol->snap->dir : 0;
}

/* What memory knows about S: everything but the blocks it holds. */
static void fill_brief(struct nx_snapstore *store, struct nx_snap *s,
		       struct nx_snapinfo *info)
{
	size_t len = strlen(s->name);

	info->ino = s->ino;
	info->id = s->id;
	info->taken = s->taken;
	info->active = s == store->active;
	info->blocks = 0;
	/* memcpy, not snprintf: listing 1024 names is a hot path. */
	memcpy(info->name, s->name, len + 1);
}

static void fill_info(struct nx_snapstore *store, struct nx_snap *s,
		      struct nx_snapinfo *info)
{
	struct ext2_inode_large inode;

	fill_brief(store, s, info);
	if (!nx_inode_read(store->vol, s->ino, &inode))
		info->blocks = ext2fs_get_stat_i_blocks(store->vol->fs,
				(struct ext2_inode *)&inode) /
			       (store->vol->fs->blocksize / 512);
	/* Preserved but not yet written into the inode's map. */
	if (s == store->active)
		info->blocks += nx_pending_count(store);
}

struct nx_snap *nx_snap_by_name(struct nx_snapstore *store, const char *name)
{
	int i;

	for (i = 0; i < store->nlive; i++)
		if (!strcmp(store->live[i]->name, name))
			return store->live[i];
	return NULL;
}

struct nx_snap *nx_snap_older_live(struct nx_snapstore *store, int idx)
{
	while (--idx >= 0)
		if (!store->snaps[idx]->deleted)
			return store->snaps[idx];
	return NULL;
}

/*
 * What the listings see is snaps[] without the deleted snapshots, whose
 * hand-over is still running (handover.c): a name is gone, and free for
 * a new take, the moment its delete returns.
 */
errcode_t nx_snap_relist(struct nx_snapstore *store)
{
	int i;

	store->nlive = store->ndeleted = 0;
	if (nx_grow_by((void **)&store->live, &store->caplive, 0,
		       (size_t)store->nsnaps, sizeof(*store->live), 8))
		return EXT2_ET_NO_MEMORY;
	for (i = 0; i < store->nsnaps; i++) {
		if (store->snaps[i]->deleted)
			store->ndeleted++;
		else
			store->live[store->nlive++] = store->snaps[i];
	}
	return 0;
}

/*
 * Index in V[0..N) of the first snapshot (oldest first) whose id is >=
 * ID, or N.  Ids grow from older to newer on every volume nextfs wrote
 * (and check --repair relinks by id), so this is a binary search; a list
 * that is out of order anyway (load_list or take noticed) is searched
 * one by one.
 */
static int seek_in(struct nx_snap **v, int n, int sorted, uint32_t id)
{
	int lo = 0, hi = n, i;

	if (!sorted) {
		for (i = 0; i < n; i++)
			if (v[i]->id == id)
				return i;
		return n;
	}
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (v[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int nx_snap_seek(struct nx_snapstore *store, uint32_t id)
{
	return seek_in(store->snaps, store->nsnaps, store->ids_sorted, id);
}

/* A snapshot the listings show, by id. */
static struct nx_snap *find_by_id(struct nx_snapstore *store, uint32_t id)
{
	int i;

	if (!store)
		return NULL;
	i = seek_in(store->live, store->nlive, store->ids_sorted, id);
	return i < store->nlive && store->live[i]->id == id ?
	       store->live[i] : NULL;
}

int nx_snap_seek_id(struct nx_volume *vol, uint32_t id)
{
	struct nx_snapstore *store = vol->snap;

	return store ? seek_in(store->live, store->nlive, store->ids_sorted,
			       id) : 0;
}

errcode_t nx_snap_peek(struct nx_volume *vol, int idx,
		       struct nx_snapinfo *info)
{
	struct nx_snapstore *store = vol->snap;

	if (!store || idx < 0 || idx >= store->nlive)
		return ENOENT;
	fill_brief(store, store->live[idx], info);
	return 0;
}

int nx_snap_name_index(struct nx_volume *vol, const char *name)
{
	struct nx_snapstore *store = vol->snap;
	int i;

	for (i = 0; store && i < store->nlive; i++)
		if (!strcmp(store->live[i]->name, name))
			return i;
	return -1;
}

errcode_t nx_snap_find_id(struct nx_volume *vol, uint32_t id,
			  struct nx_snapinfo *info)
{
	struct nx_snap *s = find_by_id(vol->snap, id);

	if (!s)
		return ENOENT;
	if (info)
		fill_info(vol->snap, s, info);
	return 0;
}

errcode_t nx_snap_view_get(struct nx_volume *vol, uint32_t id,
			   struct nx_volume **view)
{
	struct nx_snap *s = find_by_id(vol->snap, id);
	errcode_t err;

	if (!s)
		return ENOENT;
	if (!s->view) {
		err = nx_snap_view_open(vol, s->ino, &s->view);
		if (err)
			return err;
	}
	*view = s->view;
	return 0;
}

errcode_t nx_snap_find(struct nx_volume *vol, const char *name,
		       struct nx_snapinfo *info)
{
	struct nx_snap *s;

	if (!vol->snap || !(s = nx_snap_by_name(vol->snap, name)))
		return ENOENT;
	if (info)
		fill_info(vol->snap, s, info);
	return 0;
}

errcode_t nx_snap_list(struct nx_volume *vol, struct nx_snapinfo **list,
		       int *count)
{
	struct nx_snapstore *store = vol->snap;
	int i, n = store ? store->nlive : 0;

	*list = calloc(n ? n : 1, sizeof(**list));
	if (!*list)
		return EXT2_ET_NO_MEMORY;
	for (i = 0; i < n; i++)
		fill_info(store, store->live[i], &(*list)[i]);
	*count = n;
	return 0;
}

/*
 * The COW reserve: what the active snapshot itself may need, held back
 * from every live allocation while it is active - one copy of every
 * inode table, bitmap and descriptor block, and its block map, which
 * grows with what it preserves (each block once: at most in proportion
 * to the blocks in use at the take), and the few blocks removals may
 * copy below a writer's floor (reserve.h).  Copies of other blocks are
 * charged to the writers who cause them (cow.c).  That part is capped at
 * 1/8 of the volume; the copies of fixed metadata are not: without room
 * for them a write could only fail half done (P9, docs/design.md P16).
 */
blk64_t nx_snap_cow_reserve(ext2_filsys fs)
{
	blk64_t total = ext2fs_blocks_count(fs->super);
	blk64_t used = total - ext2fs_free_blocks_count(fs->super);
	blk64_t fixed, maps;

	fixed = (blk64_t)fs->inode_blocks_per_group * fs->group_desc_count +
		2 * (blk64_t)fs->group_desc_count + fs->desc_blocks;
	maps = 16 + NX_RESERVE_GRACE + used / 64;
	if (maps > total / 8)
		maps = total / 8;
	return fixed + maps;
}

void nx_snap_keep_headroom(struct nx_volume *vol)
{
	if (!vol->snap)
		return;
	vol->snap->headroom = 1;
	nx_cow_count_draws(vol->snap);	/* publishes it */
}

errcode_t nx_snap_flush(struct nx_volume *vol)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	unsigned long before;
	errcode_t err;
	int round;

	/* Only the groups that changed (ext2fs_flush2() without meta). */
	if (!store)
		return nx_meta_write(vol);
	/*
	 * Writing bitmaps and descriptors may preserve blocks, which
	 * allocates, which dirties bitmaps and descriptors already written:
	 * repeat until a flush preserves nothing.  Each block is preserved
	 * once, so a few rounds suffice.
	 */
	for (round = 0; round < 16; round++) {
		err = nx_cow_apply_pending(store);
		if (err)
			return err;
		before = store->preserved;
		err = nx_meta_write(vol);
		if (err)
			return err;
		if (store->preserved == before && !nx_pending_count(store))
			return 0;
		/* For ext2fs_flush2(); nx_meta_write() tracks groups itself. */
		ext2fs_mark_bb_dirty(fs);
		ext2fs_mark_super_dirty(fs);
	}
	return EXT2_ET_FILESYSTEM_CORRUPTED;
}

/* Link NAME -> INO in DIR, growing the directory when it is full. */
errcode_t nx_snap_link_name(ext2_filsys fs, ext2_ino_t dir, const char *name,
			    ext2_ino_t ino, int type)
{
	errcode_t err = ext2fs_link(fs, dir, name, ino, type);

	if (err == EXT2_ET_DIR_NO_SPACE) {
		err = ext2fs_expand_dir(fs, dir);
		if (!err)
			err = ext2fs_link(fs, dir, name, ino, type);
	}
	return err;
}

/*
 * Creating or removing /.snapshots must not show in the user's tree: the
 * root directory keeps its timestamps (its link count is adjusted by the
 * FUSE layer, which always shows a .snapshots directory).
 */
static void copy_times(struct ext2_inode_large *to,
		       const struct ext2_inode_large *from)
{
	struct timespec ts;

	nx_inode_get_time(from, NX_MTIME, &ts);
	nx_inode_set_time(to, NX_MTIME, &ts);
	nx_inode_get_time(from, NX_CTIME, &ts);
	nx_inode_set_time(to, NX_CTIME, &ts);
}

static errcode_t restore_root_times(struct nx_volume *vol,
				    const struct ext2_inode_large *saved)
{
	struct ext2_inode_large root;
	errcode_t err = nx_inode_read(vol, EXT2_ROOT_INO, &root);

	if (err)
		return err;
	copy_times(&root, saved);
	return nx_inode_write(vol, EXT2_ROOT_INO, &root);
}

static errcode_t make_snapdir(struct nx_snapstore *store)
{
	struct nx_volume *vol = store->vol;
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode, root;
	errcode_t err;

	err = nx_inode_read(vol, EXT2_ROOT_INO, &root);
	if (err)
		return err;
	err = ext2fs_mkdir(fs, EXT2_ROOT_INO, 0, NX_SNAPDIR_NAME);
	if (err == EXT2_ET_DIR_NO_SPACE) {
		err = ext2fs_expand_dir(fs, EXT2_ROOT_INO);
		if (!err)
			err = ext2fs_mkdir(fs, EXT2_ROOT_INO, 0,
					   NX_SNAPDIR_NAME);
	}
	if (err)
		return err;
	err = find_snapdir(store);
	if (err)
		return err;
	/* ext2fs_mkdir() allocated the inode behind our back. */
	nx_meta_dirty_inode(vol, store->dir);
	err = nx_inode_read(vol, store->dir, &inode);
	if (err)
		return err;
	/* Only root may look at the raw snapshot files. */
	inode.i_mode = LINUX_S_IFDIR | 0700;
	inode.i_uid = inode.i_gid = 0;
	ext2fs_set_i_uid_high(inode, 0);
	ext2fs_set_i_gid_high(inode, 0);
	err = nx_inode_write(vol, store->dir, &inode);
	if (!err)
		err = restore_root_times(vol, &root);
	return err;
}

errcode_t nx_snap_remove_dir(struct nx_snapstore *store)
{
	struct nx_volume *vol = store->vol;
	struct ext2_inode_large inode;
	errcode_t err;

	err = ext2fs_unlink(vol->fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME,
			    store->dir, 0);
	if (err)
		return err;
	err = nx_inode_read(vol, store->dir, &inode);
	if (err)
		return err;
	inode.i_links_count = 0;
	err = nx_inode_write(vol, store->dir, &inode);
	if (!err)
		err = nx_inode_release(vol, store->dir);
	if (err)
		return err;
	err = nx_inode_read(vol, EXT2_ROOT_INO, &inode);
	if (err)
		return err;
	/* ext2fs_unlink does not touch the parent's times: nor do we. */
	if (inode.i_links_count > 1)
		inode.i_links_count--;
	err = nx_inode_write(vol, EXT2_ROOT_INO, &inode);
	store->dir = 0;
	return err;
}

/* The largest volume a snapshot file can cover (identity mapping). */
static errcode_t check_mappable(ext2_filsys fs)
{
	blk64_t total = ext2fs_blocks_count(fs->super);
	blk64_t per = fs->blocksize / 4, max;

	if (ext2fs_has_feature_extents(fs->super))
		max = (1ULL << 32) - 1;
	else
		max = EXT2_NDIR_BLOCKS + per + per * per + per * per * per;
	return total > max ? EFBIG : 0;
}

static errcode_t create_snapshot_inode(struct nx_snapstore *store,
				       const char *name, uint32_t id,
				       ext2_ino_t *ret)
{
	struct nx_volume *vol = store->vol;
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode;
	struct nx_cred root = { 0 };
	ext2_ino_t ino;
	errcode_t err;

	err = nx_inode_new(vol, &root, store->dir, LINUX_S_IFREG | 0400, &ino,
			   &inode);
	if (err)
		return err;
	inode.i_flags |= EXT4_SNAPFILE_FL;
	inode.i_generation = id;
	snap_next(&inode) = fs->super->s_snapshot_list;
	err = ext2fs_inode_size_set(fs, (struct ext2_inode *)&inode,
				    ext2fs_blocks_count(fs->super) *
				    (blk64_t)fs->blocksize);
	if (!err)
		err = nx_inode_write(vol, ino, &inode);
	if (!err)
		err = nx_snap_link_name(fs, store->dir, name, ino, EXT2_FT_REG_FILE);
	if (err) {
		inode.i_links_count = 0;
		nx_inode_write(vol, ino, &inode);
		nx_inode_release(vol, ino);
		return err;
	}
	*ret = ino;
	return 0;
}

errcode_t nx_snap_take(struct nx_volume *vol, const char *name,
		       struct nx_snapinfo *info)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	struct ext2_inode_large inode;
	struct nx_snap *s = NULL;
	ext2fs_block_bitmap map;
	uint32_t id;
	errcode_t err;

	if (!store)
		return EOPNOTSUPP;
	err = nx_snap_name_check(name);
	if (err)
		return err;
	if (nx_volume_rdonly(vol))
		return EROFS;
	if (nx_snap_by_name(store, name))
		return EEXIST;
	if (store->nsnaps >= MAX_SNAPSHOTS)
		return EMLINK;
	/* Ids are never reused; the FUSE layer keeps the top one for itself. */
	if (fs->super->s_snapshot_id >= NX_SNAP_ID_MAX)
		return EOVERFLOW;
	err = check_mappable(fs);
	if (err)
		return err;
	if (!store->dir) {
		err = make_snapdir(store);
		if (err)
			return err;
	}
	err = new_snap(fs, &s);
	if (err)
		return err;
	if (nx_grow((void **)&store->snaps, &store->capsnaps,
		    (size_t)store->nsnaps, sizeof(*store->snaps), 8) ||
	    nx_grow((void **)&store->live, &store->caplive,
		    (size_t)store->nsnaps, sizeof(*store->live), 8)) {
		nx_snap_free(s);
		return EXT2_ET_NO_MEMORY;
	}
	/* A deleted snapshot may still hold the entry of that name. */
	err = nx_handover_free_name(store, name);
	if (err) {
		nx_snap_free(s);
		return err;
	}
	id = fs->super->s_snapshot_id + 1;
	err = create_snapshot_inode(store, name, id, &s->ino);
	if (err) {
		nx_snap_free(s);
		return err;
	}
	s->id = id;
	s->next = fs->super->s_snapshot_list;
	snprintf(s->name, sizeof(s->name), "%s", name);
	err = nx_inode_read(vol, s->ino, &inode);
	if (err)
		goto fail;
	nx_inode_get_time(&inode, NX_MTIME, &s->taken);

	fs->super->s_snapshot_list = s->ino;
	fs->super->s_snapshot_inum = s->ino;
	fs->super->s_snapshot_id = id;
	ext2fs_set_feature_has_snapshot(fs->super);
	fs->super->s_snapshot_r_blocks_count = nx_snap_cow_reserve(fs);
	ext2fs_mark_super_dirty(fs);
	if (store->nsnaps && store->snaps[store->nsnaps - 1]->id >= id)
		store->ids_sorted = 0;
	store->snaps[store->nsnaps++] = s;
	nx_snap_relist(store);		/* room made above: cannot fail */

	/*
	 * Everything up to here is what the previous snapshot (if any) sees
	 * change.  Flush it all, then freeze: from now on the new snapshot
	 * preserves every block in use at this instant.
	 */
	err = nx_volume_sync(vol);	/* one commit: durable, device = memory */
	if (err)
		goto fail;
	/* The bitmap in memory, just flushed, is the take-time one. */
	err = ext2fs_copy_bitmap(fs->block_map, &map);
	if (!err)
		err = nx_cow_set_active(store, s, map);
	if (err)
		return err;
	if (info)
		fill_info(store, s, info);
	return 0;
fail:
	/* The inode stays linked; the next mount sees a consistent list. */
	return err;
}

int nx_snap_block_rank(struct nx_volume *vol, blk64_t blk)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	int i;

	if (!store || blk < fs->super->s_first_data_block ||
	    blk >= ext2fs_blocks_count(fs->super))
		return 0;
	if (ext2fs_test_block_bitmap2(store->exclude, blk))
		return NX_VOL_RANK_MAP;
	if (store->active &&
	    nx_inode_table_block(fs, store->active->ino) == blk)
		return NX_VOL_RANK_ACTIVE;
	for (i = 0; i < store->nsnaps; i++)
		if (nx_inode_table_block(fs, store->snaps[i]->ino) == blk)
			return NX_VOL_RANK_INODE;
	return 0;
}
