/*
 * volume.c - open, check, lock, sync and close one ext2/3/4 volume.
 *
 * We serve a volume read-write only when every feature it uses is one we
 * keep consistent ourselves; otherwise the volume could end up with
 * metadata (quota files, verity trees, MMP blocks, ...) that no longer
 * matches the data we wrote.  Such volumes may still be opened read-only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <ext2fs/ext2fs.h>
#include <et/com_err.h>
#include "nextfs/volume.h"
#include "nextfs/bitmaps.h"
#include "nextfs/blkio.h"
#include "nextfs/devname.h"
#include "nextfs/holder.h"
#include "nextfs/sanity.h"
#include "nextfs/crc32c.h"
#include "nextfs/meta.h"
#include "nextfs/txn.h"
#include "nextfs/journal.h"

/* Features we can write without breaking anything. */
#define NX_RW_COMPAT	(EXT2_FEATURE_COMPAT_DIR_PREALLOC |		\
			 EXT3_FEATURE_COMPAT_HAS_JOURNAL |		\
			 EXT2_FEATURE_COMPAT_EXT_ATTR |			\
			 EXT2_FEATURE_COMPAT_RESIZE_INODE |		\
			 EXT2_FEATURE_COMPAT_DIR_INDEX |		\
			 EXT4_FEATURE_COMPAT_SPARSE_SUPER2 |		\
			 EXT4_FEATURE_COMPAT_FAST_COMMIT |		\
			 EXT4_FEATURE_COMPAT_STABLE_INODES |		\
			 EXT4_FEATURE_COMPAT_ORPHAN_FILE)
#define NX_RW_INCOMPAT	(EXT2_FEATURE_INCOMPAT_FILETYPE |		\
			 EXT2_FEATURE_INCOMPAT_META_BG |		\
			 EXT3_FEATURE_INCOMPAT_EXTENTS |		\
			 EXT4_FEATURE_INCOMPAT_64BIT |			\
			 EXT4_FEATURE_INCOMPAT_FLEX_BG |		\
			 EXT4_FEATURE_INCOMPAT_CSUM_SEED |		\
			 EXT4_FEATURE_INCOMPAT_LARGEDIR |		\
			 EXT4_FEATURE_INCOMPAT_INLINE_DATA |		\
			 EXT3_FEATURE_INCOMPAT_RECOVER)
#define NX_RW_RO_COMPAT	(EXT2_FEATURE_RO_COMPAT_SPARSE_SUPER |		\
			 EXT2_FEATURE_RO_COMPAT_LARGE_FILE |		\
			 EXT4_FEATURE_RO_COMPAT_HUGE_FILE |		\
			 EXT4_FEATURE_RO_COMPAT_GDT_CSUM |		\
			 EXT4_FEATURE_RO_COMPAT_DIR_NLINK |		\
			 EXT4_FEATURE_RO_COMPAT_EXTRA_ISIZE |		\
			 EXT4_FEATURE_RO_COMPAT_METADATA_CSUM |		\
			 EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT)
/* Features we can read (libext2fs understands them). */
#define NX_RO_INCOMPAT	(NX_RW_INCOMPAT | EXT4_FEATURE_INCOMPAT_EA_INODE | \
			 EXT4_FEATURE_INCOMPAT_MMP)

void nx_set_msg(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!msg || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
}

/* Name the feature bits in MASK of kind COMPAT_TYPE (E2P-like, own table). */
static void describe_features(char *buf, size_t len, int type, uint32_t mask)
{
	static const struct { int type; uint32_t bit; const char *name; } names[] = {
		{ 0, EXT2_FEATURE_COMPAT_IMAGIC_INODES, "imagic_inodes" },
		{ 0, EXT2_FEATURE_COMPAT_LAZY_BG, "lazy_bg" },
		{ 0, EXT2_FEATURE_COMPAT_EXCLUDE_BITMAP, "exclude_bitmap" },
		{ 1, EXT2_FEATURE_INCOMPAT_COMPRESSION, "compression" },
		{ 1, EXT3_FEATURE_INCOMPAT_RECOVER, "needs_recovery" },
		{ 1, EXT3_FEATURE_INCOMPAT_JOURNAL_DEV, "journal_dev" },
		{ 1, EXT4_FEATURE_INCOMPAT_MMP, "mmp" },
		{ 1, EXT4_FEATURE_INCOMPAT_EA_INODE, "ea_inode" },
		{ 1, EXT4_FEATURE_INCOMPAT_DIRDATA, "dirdata" },
		{ 1, EXT4_FEATURE_INCOMPAT_ENCRYPT, "encrypt" },
		{ 1, EXT4_FEATURE_INCOMPAT_CASEFOLD, "casefold" },
		{ 2, EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT, "has_snapshot" },
		{ 2, EXT4_FEATURE_RO_COMPAT_QUOTA, "quota" },
		{ 2, EXT4_FEATURE_RO_COMPAT_BIGALLOC, "bigalloc" },
		{ 2, EXT4_FEATURE_RO_COMPAT_REPLICA, "replica" },
		{ 2, EXT4_FEATURE_RO_COMPAT_READONLY, "read-only" },
		{ 2, EXT4_FEATURE_RO_COMPAT_PROJECT, "project" },
		{ 2, EXT4_FEATURE_RO_COMPAT_SHARED_BLOCKS, "shared_blocks" },
		{ 2, EXT4_FEATURE_RO_COMPAT_VERITY, "verity" },
		{ 2, EXT4_FEATURE_RO_COMPAT_ORPHAN_PRESENT, "orphan_present" },
	};
	size_t used = 0, i;
	uint32_t left = mask;

	buf[0] = 0;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].type != type || !(mask & names[i].bit))
			continue;
		used += snprintf(buf + used, used < len ? len - used : 0,
				 "%s%s", used ? " " : "", names[i].name);
		left &= ~names[i].bit;
	}
	for (i = 0; i < 32; i++)
		if (left & (1U << i))
			used += snprintf(buf + used, used < len ? len - used : 0,
					 "%sFEATURE_%c%u", used ? " " : "",
					 "CIR"[type], (unsigned)i);
}

/*
 * Refuse what we cannot serve.  Checked on the raw superblock before
 * libext2fs gets to decide (and again after a journal replay), so that
 * the user gets the precise reason.  Features are no damage: there is
 * nothing to repair, only -o ro to offer.
 */
static void check_features(struct ext2_super_block *sb, int rdonly,
			   struct nx_damage *dmg)
{
	uint32_t incompat_ok = rdonly ? NX_RO_INCOMPAT : NX_RW_INCOMPAT;
	char names[256];
	uint32_t bad;

	/* needs_recovery: replay_journal() has dealt with it. */
	bad = sb->s_feature_incompat & ~incompat_ok;
	if (bad) {
		describe_features(names, sizeof(names), 1, bad);
		nx_damage_note_fix(dmg, NX_DAMAGE_FATAL, "", "unsupported "
				   "incompatible feature(s): %s", names);
		return;
	}
	if (rdonly)
		return;
	if (sb->s_feature_ro_compat & EXT4_FEATURE_RO_COMPAT_ORPHAN_PRESENT)
		nx_damage_note(dmg, NX_DAMAGE_RW, "the volume has orphan inodes "
			       "pending in its orphan file");
	bad = sb->s_feature_ro_compat & ~NX_RW_RO_COMPAT;
	if (bad) {
		describe_features(names, sizeof(names), 2, bad);
		nx_damage_note_fix(dmg, NX_DAMAGE_RW, "", "nextfs cannot write "
				   "a volume with feature(s): %s", names);
	}
	bad = sb->s_feature_compat & ~NX_RW_COMPAT;
	if (bad) {
		describe_features(names, sizeof(names), 0, bad);
		nx_damage_note_fix(dmg, NX_DAMAGE_RW, "", "nextfs cannot write "
				   "a volume with feature(s): %s", names);
	}
	if (sb->s_state & EXT2_ERROR_FS)
		nx_damage_note(dmg, NX_DAMAGE_RW, "the volume is marked as "
			       "having errors");
}

static errcode_t check_not_mounted(struct nx_volume *vol, char *msg,
				   size_t msglen)
{
	const char *path = nx_dev_path(vol->device);	/* the locked file */
	int mflags = 0;
	errcode_t err = path ? ext2fs_check_if_mounted(path, &mflags) : errno;

	if (err)
		return 0;	/* cannot tell (e.g. no /proc): the lock still guards us */
	if (mflags & EXT2_MF_MOUNTED) {
		nx_set_msg(msg, msglen, "%s is mounted by the kernel; unmount it "
			"first", vol->device);
		return EBUSY;
	}
	return 0;
}

static errcode_t mark_in_use(struct nx_volume *vol)
{
	struct ext2_super_block *sb = vol->fs->super;
	errcode_t err;

	sb->s_state &= ~EXT2_VALID_FS;
	/* Like the kernel: while mounted, a crash means "replay the log". */
	if (ext2fs_has_feature_journal(sb))
		ext2fs_set_feature_journal_needs_recovery(sb);
	sb->s_mnt_count++;
	sb->s_mtime = (uint32_t)time(NULL);
	ext2fs_mark_super_dirty(vol->fs);
	/* Through the flush hook: the active snapshot keeps the old one. */
	err = nx_volume_sync(vol);
	return err;
}

/*
 * Read-only opens serve damaged volumes as far as libext2fs can read
 * them: checksums are not verified while the superblock, descriptors and
 * bitmaps are loaded (the checks of sanity.h name what is wrong), but
 * they are again afterwards, so a damaged inode still reads as EIO, as
 * the kernel does.
 */
static errcode_t read_bitmaps(struct nx_volume *vol, struct nx_damage *dmg)
{
	errcode_t err;

	/*
	 * libext2fs's default bitmaps are flat arrays: 32 MiB per bitmap on
	 * 1 TiB, and nextfs keeps several per snapshot.  Red-black trees of
	 * extents cost what the allocation pattern costs instead.
	 */
	vol->fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;
	err = nx_bitmaps_read(vol->fs);
	vol->fs->flags &= ~EXT2_FLAG_IGNORE_CSUM_ERRORS;
	if (err)
		nx_sanity_bitmap_problem(vol->fs, err, dmg);
	return err;
}

static errcode_t open_fs(struct nx_volume *vol, struct nx_damage *dmg,
			 char *msg, size_t msglen)
{
	int oflags = EXT2_FLAG_64BITS | EXT2_FLAG_FORCE | EXT2_FLAG_SKIP_MMP;
	struct ext2_super_block *sb;
	errcode_t err;

	if (!nx_volume_rdonly(vol))
		oflags |= EXT2_FLAG_RW;
	if (nx_volume_lenient(vol))
		oflags |= EXT2_FLAG_IGNORE_CSUM_ERRORS;	/* see read_bitmaps */
	err = nx_txn_replay_device(vol->device, !nx_volume_rdonly(vol), msg,
				   msglen);
	if (err)
		return nx_sanity_journal_refusal(vol->device, err,
						 nx_volume_rdonly(vol),
						 vol->probed_snapshot, msg,
						 msglen);
	err = ext2fs_open2(vol->device, NULL, oflags, 0, 0, nx_blkio_manager,
			   &vol->fs);
	if (err) {
		nx_set_msg(msg, msglen, "%s: cannot open volume: %s", vol->device,
			error_message(err));
		vol->fs = NULL;
		return err;
	}
	sb = vol->fs->super;
	vol->fs->priv_data = vol;	/* nx_volume_of() */
	vol->was_clean = (sb->s_state & EXT2_VALID_FS) != 0;
	/* Nothing is written until step three (see validate()). */
	nx_blkio_seal(nx_blkio_from_channel(vol->fs->io), 1);
	/*
	 * Like the kernel, keep backup superblocks and descriptors as they
	 * are while mounted; e2fsck and resize2fs refresh them.
	 */
	vol->fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	/* Again: the replay may have brought back another superblock. */
	check_features(sb, nx_volume_lenient(vol), dmg);
	if (dmg->level || nx_sanity_check_layout(vol->fs, dmg))
		return EXT2_ET_FILESYSTEM_CORRUPTED;
	vol->io = nx_blkio_from_channel(vol->fs->io);
	nx_blkio_set_unit(vol->io, vol->fs->blocksize);
	err = read_bitmaps(vol, dmg);
	if (err)
		return err;
	if (nx_volume_lenient(vol))
		return nx_sanity_check_root(vol->fs, dmg) ?
		       EXT2_ET_FILESYSTEM_CORRUPTED : 0;
	/* Bitmaps, root, the orphans (and their maps) that will be freed. */
	if (nx_sanity_check_loaded(vol->fs, dmg))
		return EXT2_ET_FILESYSTEM_CORRUPTED;
	/*
	 * Before the layers above attach (open.h): the snapshots' allocator
	 * callbacks (cow.c) chain to ours.
	 */
	err = nx_meta_attach(vol);	/* (writers only) */
	if (err)
		nx_set_msg(msg, msglen, "%s: %s", vol->device,
			   error_message(err));
	return err;
}

/*
 * Everything that can be checked before the journal is replayed (the
 * replay writes): what is on the device, the feature policy, and the
 * kernel's checks of the superblock and descriptors.  Damage that
 * allows reading is only reported for read-only opens.
 */
static errcode_t precheck(struct nx_volume *vol, struct nx_probe *probe,
			  struct nx_damage *dmg, char *msg, size_t msglen)
{
	int lenient = nx_volume_lenient(vol);
	errcode_t err;

	err = nx_probe_device(vol->device, lenient, probe, msg, msglen);
	if (err)
		return err;
	vol->probed_snapshot = ext2fs_has_feature_has_snapshot(&probe->sb);
	check_features(&probe->sb, lenient, dmg);
	if (dmg->level != NX_DAMAGE_FATAL)
		nx_sanity_precheck(vol->device, probe, dmg);
	if (dmg->level == NX_DAMAGE_RW && lenient) {
		fprintf(stderr, "nextfs: %s: warning: %s; reading it as it "
			"is\n", vol->device, dmg->problem);
		memset(dmg, 0, sizeof(*dmg));
	}
	return dmg->level ? EXT2_ET_FILESYSTEM_CORRUPTED : 0;
}

errcode_t nx_volume_refuse(struct nx_volume *vol, const struct nx_damage *dmg,
			   char *msg, size_t msglen)
{
	return nx_sanity_refusal(vol->device, dmg, nx_volume_lenient(vol),
				 vol->probed_snapshot, msg, msglen);
}

/*
 * Step one of every open: decide, reading only, whether volume/ lets the
 * volume be served and written - what is on the device, the superblock
 * and descriptors (before the journal is replayed), the bitmaps, root
 * and orphans (after).  The layers above add their checks before step
 * two (open.h: the snapshots' list, ids, maps and superblock fields);
 * every refusal comes from these checks.  Until step three
 * (nx_volume_start_writing) the device channel is sealed
 * (nx_blkio_seal): a check that tried to write would fail, not change a
 * volume it is about to refuse.  The one write that comes first is the
 * replay of a crash's journal, on a handle of its own
 * (nx_txn_replay_device): what follows checks the volume as the replay
 * leaves it, as the kernel does; the replayed state is the last commit,
 * which any tool would replay first too.
 */
static errcode_t validate(struct nx_volume *vol, struct nx_damage *dmg,
			  char *msg, size_t msglen)
{
	struct nx_probe probe;
	errcode_t err;

	err = precheck(vol, &probe, dmg, msg, msglen);
	if (!err)
		err = open_fs(vol, dmg, msg, msglen);
	if (err && dmg->level)
		err = nx_volume_refuse(vol, dmg, msg, msglen);
	return err;
}

/*
 * Step three, for writers, once every check has passed: enter
 * transaction mode, mark the volume in use.  A failure here is one of
 * writing, not damage.  (The journal was loaded, and so checked, by the
 * replay in step one; nx_txn_start() loads it again, and would still
 * refuse before its first write.)
 */
errcode_t nx_volume_start_writing(struct nx_volume *vol, char *msg,
				  size_t msglen)
{
	errcode_t err;

	nx_blkio_seal(vol->io, 0);
	err = nx_txn_start(vol, msg, msglen);
	if (err)
		return nx_sanity_journal_refusal(vol->device, err, 0,
						 vol->probed_snapshot, msg,
						 msglen);
	err = mark_in_use(vol);
	if (err)
		nx_set_msg(msg, msglen, "%s: cannot write superblock: %s",
			vol->device, error_message(err));
	return err;
}

void nx_volume_set_hooks(struct nx_volume *vol,
			 const struct nx_volume_hooks *hooks)
{
	vol->hooks = hooks;
}

/* What the layers above keep in VOL goes first, then meta's state. */
static void detach_all(struct nx_volume *vol)
{
	if (vol->hooks && vol->hooks->detach)
		vol->hooks->detach(vol);
	vol->hooks = NULL;
	nx_meta_detach(vol);
}

/* Let go of the device (the claim, then the lock) and free VOL. */
static void release(struct nx_volume *vol)
{
	if (vol->claim_fd >= 0)
		close(vol->claim_fd);
	if (vol->lock_fd >= 0)
		close(vol->lock_fd);
	pthread_mutex_destroy(&vol->lock);
	free(vol->device);
	free(vol->xcache);
	free(vol);
}

errcode_t nx_volume_open_sealed(const char *device, int flags,
				struct nx_damage *dmg, struct nx_volume **ret,
				char *msg, size_t msglen)
{
	struct nx_volume *vol;
	errcode_t err;

	*ret = NULL;		/* whatever happens: callers may close it */
	nx_set_msg(msg, msglen, "%s", "");
	initialize_ext2_error_table();
	nx_crc32c_init();	/* before libext2fs checksums anything */
	vol = calloc(1, sizeof(*vol));
	if (!vol)
		return EXT2_ET_NO_MEMORY;
	vol->lock_fd = -1;
	vol->claim_fd = -1;
	vol->flags = flags;
	pthread_mutex_init(&vol->lock, NULL);
	vol->device = strdup(device);
	if (!vol->device) {
		err = EXT2_ET_NO_MEMORY;
		goto fail;
	}
	err = nx_lock_device(vol->device, !nx_volume_rdonly(vol),
			     &vol->lock_fd, msg, msglen);
	if (err)
		goto fail;
	if (!nx_volume_rdonly(vol)) {
		err = nx_claim_device(vol->device, &vol->claim_fd, msg, msglen);
		if (!err)
			err = check_not_mounted(vol, msg, msglen);
		if (err)
			goto fail;
	}
	err = validate(vol, dmg, msg, msglen);
	if (err)
		goto fail;
	*ret = vol;
	return 0;
fail:
	nx_volume_discard(vol);
	return err;
}

void nx_volume_discard(struct nx_volume *vol)
{
	if (!vol)
		return;
	nx_txn_abort(vol);
	detach_all(vol);
	if (vol->fs) {
		vol->fs->flags &= ~EXT2_FLAG_DIRTY;
		ext2fs_close_free(&vol->fs);
	}
	release(vol);
}

errcode_t nx_volume_flush(struct nx_volume *vol)
{
	if (vol->hooks && vol->hooks->flush)
		return vol->hooks->flush(vol);
	return nx_meta_write(vol);
}

errcode_t nx_volume_sync(struct nx_volume *vol)
{
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return 0;
	if (vol->txn)
		return nx_txn_commit(vol);
	err = nx_volume_flush(vol);
	if (!err)
		err = nx_blkio_flush(vol->io);
	return err;
}

static void commit_if_due(struct nx_volume *live)
{
	/* Operations end here: the one place to commit when it is time. */
	if (live->txn && nx_txn_due(live)) {
		errcode_t err = nx_txn_commit(live);

		if (err)
			fprintf(stderr, "nextfs: %s: commit failed: %s\n",
				live->device, error_message(err));
	}
}

void nx_volume_unlock(struct nx_volume *vol)
{
	struct nx_volume *live = vol->parent ? vol->parent : vol;

	commit_if_due(live);
	pthread_mutex_unlock(&live->lock);
}

void nx_volume_unlock_sharing(struct nx_volume *vol)
{
	struct nx_volume *live = vol->parent ? vol->parent : vol;

	/* The commit writes: it must not wait for our own share. */
	commit_if_due(live);
	nx_blkio_share_begin(live->io);
	pthread_mutex_unlock(&live->lock);
}

errcode_t nx_volume_close(struct nx_volume *vol)
{
	errcode_t err = 0;

	if (!vol)
		return 0;
	if (vol->fs) {
		/* A volume that failed (txn.c) keeps its last commit. */
		if (nx_volume_rdonly(vol) &&
		    (vol->txn || (vol->flags & NX_VOL_ABANDONED))) {
			err = EIO;
			nx_txn_abort(vol);
		}
		if (!nx_volume_rdonly(vol)) {
			struct nx_blkio_stats st;

			/* Commit, empty the journal; the rest goes in place. */
			err = nx_txn_stop(vol);
			if (vol->was_clean && !err)
				vol->fs->super->s_state |= EXT2_VALID_FS;
			if (!err)
				ext2fs_clear_feature_journal_needs_recovery(
					vol->fs->super);
			nx_blkio_get_stats(vol->io, &st);
			vol->fs->super->s_kbytes_written += st.bytes_written >> 10;
			ext2fs_mark_super_dirty(vol->fs);
			if (!err)
				err = nx_volume_sync(vol);
		}
		/* Nothing is dirty now: closing writes nothing behind COW's back. */
		detach_all(vol);
		if (!err)
			err = ext2fs_close_free(&vol->fs);
		else
			ext2fs_free(vol->fs);
		vol->fs = NULL;
	}
	release(vol);
	return err;
}

void nx_volume_release_claim(struct nx_volume *vol)
{
	if (vol->claim_fd >= 0)
		close(vol->claim_fd);
	vol->claim_fd = -1;
}

errcode_t nx_volume_reclaim(struct nx_volume *vol, char *msg, size_t msglen)
{
	errcode_t err;

	if (nx_volume_rdonly(vol) || vol->claim_fd >= 0)
		return 0;
	err = nx_claim_device(vol->device, &vol->claim_fd, msg, msglen);
	if (err) {
		/*
		 * Someone else has the device now: writing our last state
		 * would write under them.  What is on it is our last commit
		 * (with a journal, marked for recovery), which is safe.
		 */
		nx_volume_abandon(vol);
	}
	return err;
}

void nx_volume_abandon(struct nx_volume *vol)
{
	vol->flags |= NX_VOL_RDONLY | NX_VOL_ABANDONED;
}

errcode_t nx_volume_pread(struct nx_volume *vol, void *buf, uint64_t len,
			  uint64_t offset)
{
	if (vol->io)
		return nx_blkio_pread(vol->io, buf, len, offset);
	if (vol->hooks && vol->hooks->pread)
		return vol->hooks->pread(vol, buf, len, offset);
	return EIO;
}

/*
 * Free space that a write can really get: for root (f_bfree) the free
 * blocks minus what the snapshots hold back (vol->cow_reserve), which
 * live writes never take (snapshot.h); for everyone else (f_bavail) the
 * root-reserved blocks less again (reserve.h).  Blocks freed since the
 * last commit are counted free but cannot be reused before it (txn.h):
 * commit first, so that what df promises is there (ext4 shows them free
 * and commits when an allocation needs them).
 */
errcode_t nx_volume_statfs(struct nx_volume *vol, struct statvfs *st)
{
	struct ext2_super_block *sb = vol->fs->super;
	blk64_t overhead = sb->s_first_data_block;
	blk64_t total = ext2fs_blocks_count(sb);
	blk64_t free_blocks, held, reserved = ext2fs_r_blocks_count(sb);

	held = nx_txn_held_frees(vol);
	if (held && !nx_volume_rdonly(vol) && nx_txn_commit(vol) == 0)
		held = 0;
	free_blocks = ext2fs_free_blocks_count(sb);
	held += vol->cow_reserve;
	free_blocks = free_blocks > held ? free_blocks - held : 0;

	memset(st, 0, sizeof(*st));
	st->f_bsize = vol->fs->blocksize;
	st->f_frsize = vol->fs->blocksize;
	/* Like ext4's default minixdf=off: report metadata as used. */
	st->f_blocks = total - overhead;
	st->f_bfree = free_blocks;
	st->f_bavail = free_blocks > reserved ? free_blocks - reserved : 0;
	st->f_files = sb->s_inodes_count;
	st->f_ffree = sb->s_free_inodes_count;
	st->f_favail = sb->s_free_inodes_count;
	st->f_fsid = (unsigned long)(*(uint64_t *)sb->s_uuid ^
				     *(uint64_t *)(sb->s_uuid + 8));
	st->f_namemax = EXT2_NAME_LEN;
	if (nx_volume_rdonly(vol))
		st->f_flag |= ST_RDONLY;
	return 0;
}
