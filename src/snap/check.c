/*
 * check.c - "nextfs check": the snapshot-aware consistency checker, plus
 * the raw open under the volume lock the other offline tools share
 * (block ownership as e2fsck sees it is owners.c).
 *
 * The checker works on the raw volume, without the snapshot engine:
 * the engine refuses a volume whose snapshot list is broken, which is
 * exactly what the checker must be able to look at (and repair).  Only
 * once the list is sound does it open the volume through the engine to
 * verify what needs snapshot views (each snapshot preserves only blocks
 * that were in use when it was taken).
 *
 * What counts as a snapshot: an inode that is on the on-disk list
 * (s_snapshot_list -> i_next_snapshot ...) or carries EXT4_SNAPFILE_FL,
 * is a linked regular file, and is either on the list or named in
 * /.snapshots.  The list must hold exactly those, newest (highest id)
 * first.  Because ids are unique and monotonic, a broken link can be
 * rebuilt from the ids alone: that is the main repair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <et/com_err.h>
#include "nextfs/blkio.h"
#include "nextfs/devname.h"
#include "nextfs/grow.h"
#include "nextfs/open.h"
#include "nextfs/sanity.h"
#include "nextfs/txn.h"
#include "nextfs/snaptool.h"
#include "snap_internal.h"

#define MAX_REPORTED	20	/* per kind of finding, then a summary */

/* ------------------------------------------------------------------ */
/* Raw open.                                                           */

static errcode_t refuse_unreadable(struct nx_rawvol *raw, char *msg,
				   size_t msglen)
{
	struct ext2_super_block *sb = raw->fs->super;
	const char *path = nx_dev_path(raw->device);	/* the locked file */
	int mflags = 0;

	if (sb->s_feature_incompat & ~EXT2_LIB_FEATURE_INCOMPAT_SUPP) {
		nx_set_msg(msg, msglen, "%s: unsupported incompatible features "
			"(0x%x)", raw->device, sb->s_feature_incompat &
			~EXT2_LIB_FEATURE_INCOMPAT_SUPP);
		return EXT2_ET_UNSUPP_FEATURE;
	}
	if (ext2fs_has_feature_bigalloc(sb)) {
		nx_set_msg(msg, msglen, "%s: bigalloc volumes are not supported",
			raw->device);
		return EXT2_ET_UNSUPP_FEATURE;
	}
	if (!raw->rw)
		return 0;
	if (path && !ext2fs_check_if_mounted(path, &mflags) &&
	    (mflags & EXT2_MF_MOUNTED)) {
		nx_set_msg(msg, msglen, "%s is mounted by the kernel; unmount it "
			"first", raw->device);
		return EBUSY;
	}
	return 0;
}

/* NX_RAW_WRITE: what the engine refuses to write, restore refuses too. */
static errcode_t refuse_damaged(struct nx_rawvol *raw,
				const struct nx_probe *probe, int loaded,
				char *msg, size_t msglen)
{
	struct nx_damage dmg = { 0 };

	if (!loaded)
		nx_sanity_precheck(raw->device, probe, &dmg);
	else if (!nx_sanity_check_layout(raw->fs, &dmg))
		nx_sanity_check_loaded(raw->fs, &dmg);
	if (!dmg.level)
		return 0;
	return nx_sanity_refusal(raw->device, &dmg, 0,
				 (probe->sb.s_feature_ro_compat &
				  EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT) != 0,
				 msg, msglen);
}

/*
 * A repair of a volume whose primary superblock has a wrong checksum
 * (and nothing else libext2fs objects to): e2fsck would start from a
 * backup, but nextfs keeps the backups as they were (EXT2_FLAG_MASTER_SB_
 * ONLY), so only the primary holds the snapshot fields.  Open it with the
 * checksum unchecked, and write it back with a fresh checksum; the rest
 * of the check (and e2fsck after it) then judges its content.  Checksums
 * are checked again from here on.
 */
static errcode_t open_fixing_sb_csum(struct nx_rawvol *raw, int oflags)
{
	errcode_t err;

	err = ext2fs_open2(raw->device, NULL,
			   oflags | EXT2_FLAG_IGNORE_CSUM_ERRORS, 0, 0,
			   nx_blkio_manager, &raw->fs);
	if (err)
		return err;
	raw->fs->flags &= ~EXT2_FLAG_IGNORE_CSUM_ERRORS;
	ext2fs_mark_super_dirty(raw->fs);
	raw->sb_csum_fixed = 1;
	return 0;
}

errcode_t nx_raw_open(const char *device, int mode, struct nx_rawvol **ret,
		      char *msg, size_t msglen)
{
	int oflags = EXT2_FLAG_64BITS | EXT2_FLAG_SKIP_MMP | EXT2_FLAG_FORCE;
	int rw = mode != 0;
	struct nx_rawvol *raw;
	struct nx_probe probe;
	errcode_t err;

	*ret = NULL;		/* whatever happens: callers may close it */
	nx_set_msg(msg, msglen, "%s", "");
	initialize_ext2_error_table();
	raw = calloc(1, sizeof(*raw));
	if (!raw)
		return EXT2_ET_NO_MEMORY;
	raw->lock_fd = -1;
	raw->claim_fd = -1;
	raw->rw = rw;
	raw->device = strdup(device);
	if (!raw->device) {
		free(raw);
		return EXT2_ET_NO_MEMORY;
	}
	err = nx_lock_device(raw->device, raw->rw, &raw->lock_fd, msg, msglen);
	if (!err && rw)
		err = nx_claim_device(raw->device, &raw->claim_fd, msg, msglen);
	if (!err)
		err = nx_probe_device(raw->device, !rw, &probe, msg, msglen);
	if (!err && mode == NX_RAW_WRITE)
		err = refuse_damaged(raw, &probe, 0, msg, msglen);
	if (err)
		goto fail;
	if (rw)
		oflags |= EXT2_FLAG_RW;
	/* A crash's journal first: the tools must see the committed state. */
	err = nx_txn_replay_device(device, rw, msg, msglen);
	if (err) {
		err = nx_sanity_journal_refusal(device, err, mode != NX_RAW_WRITE,
				(probe.sb.s_feature_ro_compat &
				 EXT4_FEATURE_RO_COMPAT_HAS_SNAPSHOT) != 0,
				msg, msglen);
		goto fail;
	}
	err = ext2fs_open2(device, NULL, oflags, 0, 0, nx_blkio_manager,
			   &raw->fs);
	if (err == EXT2_ET_SB_CSUM_INVALID && mode == NX_RAW_REPAIR)
		err = open_fixing_sb_csum(raw, oflags);
	if (err) {
		raw->fs = NULL;
		nx_set_msg(msg, msglen, "%s: %s", device,
			err == EXT2_ET_BAD_MAGIC || err == EXT2_ET_SHORT_READ ?
			"not an ext2/ext3/ext4 file system" :
			error_message(err));
		goto fail;
	}
	/* Like the engine: backups stay as they are (e2fsck refreshes them). */
	raw->fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	err = refuse_unreadable(raw, msg, msglen);
	if (err)
		goto fail;
	/*
	 * A writer has just replayed the log (nx_txn_replay_device): it is
	 * empty, whatever the flag still says (a crash leaves it set, and
	 * the replay writes the logged superblock, which has it set too).
	 * We write without the journal, so the volume is clean as far as
	 * the journal goes once we are done, as after e2fsck's replay.
	 * Written at close, and only then: a refusal below writes nothing.
	 */
	if (rw && ext2fs_has_feature_journal_needs_recovery(raw->fs->super)) {
		ext2fs_clear_feature_journal_needs_recovery(raw->fs->super);
		ext2fs_mark_super_dirty(raw->fs);
	}
	raw->fs->default_bitmap_type = EXT2FS_BMAP64_RBTREE;	/* see volume.c */
	err = ext2fs_read_bitmaps(raw->fs);
	if (err) {
		nx_set_msg(msg, msglen, "%s: cannot read the allocation bitmaps: "
			"%s", device, error_message(err));
		goto fail;
	}
	if (mode == NX_RAW_WRITE) {
		err = refuse_damaged(raw, &probe, 1, msg, msglen);
		if (err)
			goto fail;
	}
	*ret = raw;
	return 0;
fail:
	if (raw->fs) {
		raw->fs->flags &= ~EXT2_FLAG_DIRTY;
		ext2fs_close_free(&raw->fs);
	}
	if (raw->claim_fd >= 0)
		close(raw->claim_fd);
	if (raw->lock_fd >= 0)
		close(raw->lock_fd);
	free(raw->device);
	free(raw);
	return err;
}

errcode_t nx_raw_release_fs(struct nx_rawvol *raw)
{
	errcode_t err = 0;

	if (raw->fs) {
		if (!raw->rw)
			raw->fs->flags &= ~EXT2_FLAG_DIRTY;
		err = ext2fs_close_free(&raw->fs);
		raw->fs = NULL;
	}
	if (raw->rw && raw->lock_fd >= 0 && !err) {
		fsync(raw->lock_fd);
		/* Converting keeps the volume ours: no window for a daemon. */
		flock(raw->lock_fd, LOCK_SH);
	}
	if (raw->claim_fd >= 0)
		close(raw->claim_fd);	/* no longer writing */
	raw->claim_fd = -1;
	raw->rw = 0;
	return err;
}

errcode_t nx_raw_close(struct nx_rawvol *raw)
{
	errcode_t err;

	if (!raw)
		return 0;
	err = nx_raw_release_fs(raw);
	if (raw->lock_fd >= 0)
		close(raw->lock_fd);
	free(raw->device);
	free(raw);
	return err;
}

/* ------------------------------------------------------------------ */
/* The checker.                                                        */

struct cand {
	ext2_ino_t ino;
	struct ext2_inode_large inode;
	int list_pos;			/* position on the on-disk list, or -1 */
	int names;			/* entries in /.snapshots */
	char name[NX_NAME_MAX + 1];
	int real;			/* counts as a snapshot */
	int dirty;			/* inode changed by a repair */
	blk64_t bad_lblk;		/* logical blocks outside the volume */
};

struct checker {
	ext2_filsys fs;
	int repair;
	nx_check_report_fn report;
	void *priv;
	struct nx_check_result *res;
	const struct nx_progress *prog;
	ext2_ino_t snapdir;
	struct cand *cands;
	int ncands;
	size_t capcands;
	struct cand **real;		/* newest first */
	int nreal;
	int list_broken;		/* the on-disk list could not be followed */
	char list_problem[160];		/* ... because of this */
	int ids_ambiguous;		/* duplicate ids: order unknown */
	ext2fs_block_bitmap meta;	/* fs metadata blocks (for messages) */
	struct nx_owner_scan scan;	/* ownership, reported after the list */
};

static void say(struct checker *ck, enum nx_check_level level,
		const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(struct checker *ck, enum nx_check_level level,
		const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	switch (level) {
	case NX_CHECK_ERROR:
		ck->res->errors++;
		break;
	case NX_CHECK_FIXED:
		ck->res->fixed++;
		break;
	case NX_CHECK_WARNING:
		ck->res->warnings++;
		break;
	default:
		break;
	}
	if (ck->report)
		ck->report(ck->priv, level, buf);
}

typedef int (*fix_fn)(struct checker *ck, void *arg);

/* An inconsistency: repaired by FIX (if repairing and FIX succeeds). */
static void finding(struct checker *ck, int fixable, fix_fn fix, void *arg,
		    const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void finding(struct checker *ck, int fixable, fix_fn fix, void *arg,
		    const char *fmt, ...)
{
	char buf[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (ck->repair && fixable && fix && fix(ck, arg) == 0)
		say(ck, NX_CHECK_FIXED, "%s: fixed", buf);
	else
		say(ck, NX_CHECK_ERROR, "%s", buf);
}

static struct cand *find_cand(struct checker *ck, ext2_ino_t ino)
{
	int i;

	for (i = 0; i < ck->ncands; i++)
		if (ck->cands[i].ino == ino)
			return &ck->cands[i];
	return NULL;
}

static struct cand *get_cand(struct checker *ck, ext2_ino_t ino)
{
	struct cand *c = find_cand(ck, ino);

	if (c)
		return c;
	if (nx_grow((void **)&ck->cands, &ck->capcands, (size_t)ck->ncands,
		    sizeof(*ck->cands), 16))
		return NULL;
	c = &ck->cands[ck->ncands++];
	memset(c, 0, sizeof(*c));
	c->ino = ino;
	c->list_pos = -1;
	if (ext2fs_read_inode_full(ck->fs, ino, (struct ext2_inode *)&c->inode,
				   sizeof(c->inode)))
		memset(&c->inode, 0, sizeof(c->inode));
	return c;
}

static const char *cand_label(struct cand *c, char *buf, size_t len)
{
	if (c->name[0])
		snprintf(buf, len, "snapshot '%s' (inode %u)", c->name, c->ino);
	else
		snprintf(buf, len, "snapshot inode %u", c->ino);
	return buf;
}

static int is_linked_file(const struct ext2_inode_large *inode)
{
	return LINUX_S_ISREG(inode->i_mode) && inode->i_links_count > 0;
}

/* Inode scan callback: remember every inode with the snapshot flag. */
static int note_flagged(void *priv, ext2_ino_t ino,
			const struct ext2_inode_large *inode)
{
	struct checker *ck = priv;

	if ((inode->i_flags & EXT4_SNAPFILE_FL) &&
	    ino >= EXT2_FIRST_INODE(ck->fs->super))
		get_cand(ck, ino);
	return 0;
}

/* Claim callback: logical blocks of snapshot files must index the volume. */
static void note_claim(void *priv, ext2_ino_t ino, blk64_t blk,
		       e2_blkcnt_t blockcnt)
{
	struct checker *ck = priv;
	struct cand *c;

	if (blockcnt < 0)
		return;
	if ((blk64_t)blockcnt < ext2fs_blocks_count(ck->fs->super) &&
	    (blk64_t)blockcnt >= ck->fs->super->s_first_data_block)
		return;
	c = find_cand(ck, ino);
	if (c)
		c->bad_lblk++;
}

static int note_name(struct ext2_dir_entry *dirent, int offset, int blocksize,
		     char *buf, void *priv)
{
	struct checker *ck = priv;
	int len = ext2fs_dirent_name_len(dirent);
	struct ext2_inode_large inode;
	struct cand *c;

	if (!dirent->inode || (len == 1 && dirent->name[0] == '.') ||
	    (len == 2 && dirent->name[0] == '.' && dirent->name[1] == '.'))
		return 0;
	c = find_cand(ck, dirent->inode);
	if (!c) {
		if (ext2fs_read_inode_full(ck->fs, dirent->inode,
					   (struct ext2_inode *)&inode,
					   sizeof(inode)) ||
		    !LINUX_S_ISREG(inode.i_mode)) {
			say(ck, NX_CHECK_WARNING, "/%s/%.*s is not a snapshot "
			    "file", NX_SNAPDIR_NAME, len, dirent->name);
			return 0;
		}
		c = get_cand(ck, dirent->inode);
		if (!c)
			return DIRENT_ABORT;
	}
	if (!c->names++) {
		memcpy(c->name, dirent->name, len);
		c->name[len] = 0;
	}
	return 0;
}

static errcode_t load_names(struct checker *ck)
{
	ext2_filsys fs = ck->fs;
	struct ext2_inode_large inode;
	errcode_t err;

	err = ext2fs_lookup(fs, EXT2_ROOT_INO, NX_SNAPDIR_NAME,
			    strlen(NX_SNAPDIR_NAME), NULL, &ck->snapdir);
	if (err == EXT2_ET_FILE_NOT_FOUND) {
		ck->snapdir = 0;
		return 0;
	}
	if (err)
		return err;
	err = ext2fs_read_inode_full(fs, ck->snapdir,
				     (struct ext2_inode *)&inode,
				     sizeof(inode));
	if (err)
		return err;
	if (!LINUX_S_ISDIR(inode.i_mode)) {
		say(ck, NX_CHECK_ERROR, "/%s is not a directory",
		    NX_SNAPDIR_NAME);
		ck->snapdir = 0;
		return 0;
	}
	return ext2fs_dir_iterate(fs, ck->snapdir, 0, NULL, note_name, ck);
}

/* Follow the on-disk list, adding every inode on it to the candidates. */
static void follow_list(struct checker *ck)
{
	ext2_filsys fs = ck->fs;
	ext2_ino_t ino = fs->super->s_snapshot_list, prev = 0;
	int pos = 0;

	while (ino) {
		struct cand *c;

		if (ino < EXT2_FIRST_INODE(fs->super) ||
		    ino > fs->super->s_inodes_count) {
			snprintf(ck->list_problem, sizeof(ck->list_problem),
				 "%s points at invalid inode number %u",
				 prev ? "a snapshot" : "the superblock", ino);
			ck->list_broken = 1;
			return;
		}
		c = get_cand(ck, ino);
		if (!c)
			return;
		if (c->list_pos >= 0) {
			snprintf(ck->list_problem, sizeof(ck->list_problem),
				 "loops back to inode %u", ino);
			ck->list_broken = 1;
			return;
		}
		c->list_pos = pos++;
		if (!is_linked_file(&c->inode)) {
			snprintf(ck->list_problem, sizeof(ck->list_problem),
				 "inode %u on it is not a snapshot file (mode "
				 "0%o, %u links)", ino, c->inode.i_mode,
				 c->inode.i_links_count);
			ck->list_broken = 1;
			return;
		}
		prev = ino;
		ino = snap_next(&c->inode);
	}
}

static int by_id_desc(const void *a, const void *b)
{
	const struct cand *x = *(struct cand *const *)a;
	const struct cand *y = *(struct cand *const *)b;

	if (x->inode.i_generation != y->inode.i_generation)
		return x->inode.i_generation > y->inode.i_generation ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int write_cand(struct checker *ck, struct cand *c)
{
	return ext2fs_write_inode_full(ck->fs, c->ino,
				       (struct ext2_inode *)&c->inode,
				       sizeof(c->inode)) ? -1 : 0;
}

static int fix_clear_flag(struct checker *ck, void *arg)
{
	struct cand *c = arg;

	c->inode.i_flags &= ~EXT4_SNAPFILE_FL;
	return write_cand(ck, c);
}

static int fix_set_flag(struct checker *ck, void *arg)
{
	struct cand *c = arg;

	c->inode.i_flags |= EXT4_SNAPFILE_FL;
	return write_cand(ck, c);
}

static int fix_size(struct checker *ck, void *arg)
{
	struct cand *c = arg;
	ext2_filsys fs = ck->fs;

	if (ext2fs_inode_size_set(fs, (struct ext2_inode *)&c->inode,
				  ext2fs_blocks_count(fs->super) *
				  (blk64_t)fs->blocksize))
		return -1;
	return write_cand(ck, c);
}

static int fix_relink(struct checker *ck, void *arg)
{
	struct cand *c = arg;
	char name[64];
	errcode_t err;

	if (!ck->snapdir)
		return -1;
	snprintf(name, sizeof(name), "recovered-%u", c->inode.i_generation);
	err = ext2fs_link(ck->fs, ck->snapdir, name, c->ino, EXT2_FT_REG_FILE);
	if (err == EXT2_ET_DIR_NO_SPACE &&
	    !ext2fs_expand_dir(ck->fs, ck->snapdir))
		err = ext2fs_link(ck->fs, ck->snapdir, name, c->ino,
				  EXT2_FT_REG_FILE);
	if (err)
		return -1;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->names = 1;
	return 0;
}

/*
 * A snapshot's map as the engine checks it before it writes (sanity.h):
 * e2fsck -fy (run by --repair when it finds the same) clears what it
 * cannot use, and the list is relinked without it.
 */
static void check_map(struct checker *ck, struct cand *c, const char *label)
{
	char problem[200];
	errcode_t err;

	err = nx_sanity_walk_map(ck->fs, c->ino, (struct ext2_inode *)&c->inode,
				 NULL, NULL, problem, sizeof(problem));
	if (err)
		say(ck, NX_CHECK_ERROR, "%s has a corrupt block map: %s", label,
		    err == EXT2_ET_FILESYSTEM_CORRUPTED ? problem :
		    error_message(err));
}

/* Decide which candidates are snapshots and check each one's inode. */
static void classify(struct checker *ck)
{
	ext2_filsys fs = ck->fs;
	blk64_t full = ext2fs_blocks_count(fs->super) * (blk64_t)fs->blocksize;
	char label[NX_NAME_MAX + 64];
	int i;

	for (i = 0; i < ck->ncands; i++) {
		struct cand *c = &ck->cands[i];
		int flagged = (c->inode.i_flags & EXT4_SNAPFILE_FL) != 0;

		c->real = is_linked_file(&c->inode) &&
			  ((c->list_pos >= 0 && (flagged || c->names)) ||
			   (flagged && c->names));
		if (c->real || !flagged)
			continue;
		if (!is_linked_file(&c->inode))
			continue;	/* an unused inode: e2fsck's business */
		if (EXT2_I_SIZE(&c->inode) == full && c->inode.i_generation &&
		    c->inode.i_generation <= fs->super->s_snapshot_id)
			say(ck, NX_CHECK_ERROR, "inode %u looks like a lost "
			    "snapshot (id %u) but has no name in /%s and is "
			    "not on the list", c->ino, c->inode.i_generation,
			    NX_SNAPDIR_NAME);
		else
			finding(ck, 1, fix_clear_flag, c, "inode %u has the "
				"snapshot flag but is not a snapshot", c->ino);
	}
	for (i = 0; i < ck->ncands; i++) {
		struct cand *c = &ck->cands[i];

		if (!c->real)
			continue;
		cand_label(c, label, sizeof(label));
		if (!(c->inode.i_flags & EXT4_SNAPFILE_FL))
			finding(ck, 1, fix_set_flag, c, "%s lacks the "
				"snapshot flag", label);
		/* Deleted, its hand-over pending (docs/snapshots.md). */
		if (c->inode.i_flags & EXT4_SNAPFILE_DELETED_FL)
			say(ck, NX_CHECK_INFO, "%s is deleted; the hand-over "
			    "of its blocks is pending", label);
		if (c->inode.i_links_count != 1)
			say(ck, NX_CHECK_ERROR, "%s has %u links (expected 1)",
			    label, c->inode.i_links_count);
		check_map(ck, c, label);
		if (EXT2_I_SIZE(&c->inode) != full)
			finding(ck, 1, fix_size, c, "%s has size %llu "
				"(expected %llu)", label,
				(unsigned long long)EXT2_I_SIZE(&c->inode),
				(unsigned long long)full);
		if (c->bad_lblk)
			say(ck, NX_CHECK_ERROR, "%s maps %llu logical blocks "
			    "outside the volume", label,
			    (unsigned long long)c->bad_lblk);
		if (!c->names)
			finding(ck, ck->snapdir != 0, fix_relink, c, "%s has no "
				"name in /%s", label, NX_SNAPDIR_NAME);
		else if (c->names > 1)
			say(ck, NX_CHECK_ERROR, "%s has %d names in /%s",
			    label, c->names, NX_SNAPDIR_NAME);
		if (c->list_pos < 0)
			say(ck, NX_CHECK_INFO, "%s is not on the snapshot "
			    "list", label);
	}
}

static errcode_t sort_real(struct checker *ck)
{
	int i, n = 0;

	ck->real = calloc(ck->ncands ? ck->ncands : 1, sizeof(*ck->real));
	if (!ck->real)
		return EXT2_ET_NO_MEMORY;
	for (i = 0; i < ck->ncands; i++)
		if (ck->cands[i].real)
			ck->real[n++] = &ck->cands[i];
	qsort(ck->real, n, sizeof(*ck->real), by_id_desc);
	ck->nreal = n;
	for (i = 1; i < n; i++)
		if (ck->real[i]->inode.i_generation ==
		    ck->real[i - 1]->inode.i_generation)
			ck->ids_ambiguous = 1;
	return 0;
}

static int by_list_pos(const void *a, const void *b)
{
	const struct cand *x = *(struct cand *const *)a;
	const struct cand *y = *(struct cand *const *)b;

	return x->list_pos < y->list_pos ? -1 : x->list_pos > y->list_pos;
}

/* Does the list hold exactly the snapshots, followed to its end? */
static int list_holds_all(struct checker *ck)
{
	int i, on_list = 0;

	if (ck->list_broken)
		return 0;
	for (i = 0; i < ck->ncands; i++)
		if (ck->cands[i].list_pos >= 0) {
			if (!ck->cands[i].real)
				return 0;
			on_list++;
		}
	return on_list == ck->nreal;
}

struct recsum {
	struct checker *ck;
	ext2_ino_t ino;
	char *buf;
};

/* A map block of R->ino: an extent block gets the checksum of its id. */
static errcode_t recsum_block(void *priv, blk64_t pblk, blk64_t count,
			      blk64_t lblk)
{
	struct recsum *r = priv;
	ext2_filsys fs = r->ck->fs;
	struct ext3_extent_header *eh = (void *)r->buf;
	errcode_t err;

	if (lblk != NX_MAP_META)
		return 0;
	err = io_channel_read_blk64(fs->io, pblk, 1, r->buf);
	if (!err)
		err = ext2fs_extent_block_csum_set(fs, r->ino, eh);
	if (!err)
		err = io_channel_write_blk64(fs->io, pblk, 1, r->buf);
	return err;
}

/*
 * C's id is new: with metadata_csum its extent blocks' checksums, which
 * cover the inode's generation (the id), are made again - after the
 * inode, which the walk reads them with, and before it checks them.
 */
static int recsum_map(struct checker *ck, struct cand *c)
{
	struct recsum r = { ck, c->ino, NULL };
	char problem[200];
	errcode_t err;

	if (!ext2fs_has_feature_metadata_csum(ck->fs->super) ||
	    !(c->inode.i_flags & EXT4_EXTENTS_FL))
		return 0;
	if (ext2fs_get_mem(ck->fs->blocksize, &r.buf))
		return -1;
	err = nx_sanity_walk_map(ck->fs, c->ino, (struct ext2_inode *)&c->inode,
				 recsum_block, &r, problem, sizeof(problem));
	ext2fs_free_mem(&r.buf);
	return err ? -1 : 0;
}

/* New ids in list order, oldest first; fresh ones: ids are never reused. */
static int fix_renumber(struct checker *ck, void *arg)
{
	struct ext2_super_block *sb = ck->fs->super;
	uint32_t next = sb->s_snapshot_id;
	int i;

	for (i = 0; i < ck->nreal; i++)
		if (ck->real[i]->inode.i_generation > next)
			next = ck->real[i]->inode.i_generation;
	if (next > NX_SNAP_ID_MAX - (uint32_t)ck->nreal)
		return -1;
	qsort(ck->real, ck->nreal, sizeof(*ck->real), by_list_pos);
	for (i = ck->nreal - 1; i >= 0; i--) {
		ck->real[i]->inode.i_generation = ++next;
		if (write_cand(ck, ck->real[i]) || recsum_map(ck, ck->real[i]))
			return -1;
	}
	sb->s_snapshot_id = next;
	ext2fs_mark_super_dirty(ck->fs);
	ck->ids_ambiguous = 0;
	return 0;
}

/*
 * Views find snapshots by id, and a broken list is relinked by ids: a
 * zero or shared id leaves the order to the list.  Where the list can
 * tell it (it holds exactly the snapshots and can be followed), they get
 * new ids in that order.
 */
static void check_ids(struct checker *ck)
{
	struct cand *a = NULL, *b = NULL;
	char what[160];
	int i, fixable;

	for (i = 0; i < ck->nreal && !a; i++)
		if (!ck->real[i]->inode.i_generation)
			a = ck->real[i];
	for (i = 1; i < ck->nreal && !a; i++)
		if (ck->real[i]->inode.i_generation ==
		    ck->real[i - 1]->inode.i_generation) {
			a = ck->real[i - 1];
			b = ck->real[i];
		}
	if (!a)
		return;
	if (b)
		snprintf(what, sizeof(what), "snapshot inodes %u and %u share "
			 "id %u", a->ino, b->ino, a->inode.i_generation);
	else
		snprintf(what, sizeof(what), "snapshot inode %u has id 0",
			 a->ino);
	fixable = list_holds_all(ck);
	finding(ck, fixable, fix_renumber, NULL, "%s; %s", what, fixable ?
		"the list gives their order: new ids in that order" :
		"their order is unknown");
}

/* Does the on-disk list equal the snapshots ordered by id? */
static int list_is_right(struct checker *ck)
{
	struct ext2_super_block *sb = ck->fs->super;
	int i;

	if (ck->list_broken)
		return 0;
	if (sb->s_snapshot_list != (ck->nreal ? ck->real[0]->ino : 0))
		return 0;
	for (i = 0; i < ck->nreal; i++) {
		ext2_ino_t want = i + 1 < ck->nreal ? ck->real[i + 1]->ino : 0;

		if (ck->real[i]->list_pos != i ||
		    snap_next(&ck->real[i]->inode) != want)
			return 0;
	}
	return 1;
}

static int fix_list(struct checker *ck, void *arg)
{
	int i;

	for (i = 0; i < ck->nreal; i++) {
		struct cand *c = ck->real[i];
		ext2_ino_t want = i + 1 < ck->nreal ? ck->real[i + 1]->ino : 0;

		if (snap_next(&c->inode) != want) {
			snap_next(&c->inode) = want;
			if (write_cand(ck, c))
				return -1;
		}
		c->list_pos = i;
	}
	ck->fs->super->s_snapshot_list = ck->nreal ? ck->real[0]->ino : 0;
	ext2fs_mark_super_dirty(ck->fs);
	ck->list_broken = 0;
	return 0;
}

/*
 * The active snapshot: the newest one not being deleted (a deleted one
 * stays on the list until its blocks are handed over), or 0.
 */
static ext2_ino_t newest_live(struct checker *ck)
{
	int i;

	for (i = 0; i < ck->nreal; i++)
		if (!(ck->real[i]->inode.i_flags & EXT4_SNAPFILE_DELETED_FL))
			return ck->real[i]->ino;
	return 0;
}

static int fix_super_fields(struct checker *ck, void *arg)
{
	struct ext2_super_block *sb = ck->fs->super;
	uint32_t maxid = ck->nreal ? ck->real[0]->inode.i_generation : 0;

	if (ck->nreal) {
		ext2fs_set_feature_has_snapshot(sb);
		sb->s_snapshot_inum = newest_live(ck);
		if (sb->s_snapshot_id < maxid)
			sb->s_snapshot_id = maxid;
	} else {
		ext2fs_clear_feature_has_snapshot(sb);
		sb->s_snapshot_inum = 0;
		sb->s_snapshot_list = 0;
		sb->s_snapshot_r_blocks_count = 0;
	}
	ext2fs_mark_super_dirty(ck->fs);
	return 0;
}

static int fix_reserve(struct checker *ck, void *arg)
{
	ck->fs->super->s_snapshot_r_blocks_count = nx_snap_cow_reserve(ck->fs);
	ext2fs_mark_super_dirty(ck->fs);
	return 0;
}

static int fix_is_snapshot(struct checker *ck, void *arg)
{
	ck->fs->super->s_flags &= ~EXT2_FLAGS_IS_SNAPSHOT;
	ext2fs_mark_super_dirty(ck->fs);
	return 0;
}

static void check_list_and_super(struct checker *ck)
{
	struct ext2_super_block *sb = ck->fs->super;
	int has = ext2fs_has_feature_has_snapshot(sb) != 0;
	uint32_t maxid = ck->nreal ? ck->real[0]->inode.i_generation : 0;
	int super_ok;

	if (sb->s_flags & EXT2_FLAGS_IS_SNAPSHOT)
		finding(ck, 1, fix_is_snapshot, NULL, "the superblock says "
			"this is a snapshot image (IS_SNAPSHOT)");
	if (!list_is_right(ck))
		finding(ck, !ck->ids_ambiguous, fix_list, NULL,
			"snapshot list: %s%sdoes not link the %d snapshot(s) "
			"newest first", ck->list_problem,
			ck->list_problem[0] ? "; it " : "", ck->nreal);
	if (ck->nreal)
		super_ok = has && sb->s_snapshot_inum == newest_live(ck) &&
			   sb->s_snapshot_id >= maxid;
	else
		super_ok = !has && !sb->s_snapshot_inum &&
			   !sb->s_snapshot_list &&
			   !sb->s_snapshot_r_blocks_count;
	if (ck->nreal && sb->s_snapshot_r_blocks_count >
	    ext2fs_blocks_count(sb) / 8)
		finding(ck, 1, fix_reserve, NULL, "superblock: the copy-on-write "
			"reserve (%llu blocks) is more than an eighth of the "
			"volume", (unsigned long long)sb->s_snapshot_r_blocks_count);
	if (!super_ok)
		finding(ck, !ck->ids_ambiguous, fix_super_fields, NULL,
			"superblock: snapshot fields (has_snapshot %d, active "
			"inode %u, last id %u, reserve %llu) do not match the "
			"%d snapshot(s)", has, sb->s_snapshot_inum,
			sb->s_snapshot_id,
			(unsigned long long)sb->s_snapshot_r_blocks_count,
			ck->nreal);
	if (ck->snapdir && !ck->nreal)
		say(ck, NX_CHECK_WARNING, "/%s exists but holds no snapshot",
		    NX_SNAPDIR_NAME);
}

/* ---- block ownership ---- */

struct dup_owner {
	blk64_t blk;
	ext2_ino_t ino;
};

struct dup_pass {
	struct checker *ck;
	ext2fs_block_bitmap dup;
	struct dup_owner *own;
	size_t n, cap;
};

static void note_dup_owner(void *priv, ext2_ino_t ino, blk64_t blk,
			   e2_blkcnt_t blockcnt)
{
	struct dup_pass *dp = priv;

	if (!ext2fs_test_block_bitmap2(dp->dup, blk) || dp->n >= 4096)
		return;
	if (nx_grow((void **)&dp->own, &dp->cap, dp->n, sizeof(*dp->own), 64))
		return;
	dp->own[dp->n].blk = blk;
	dp->own[dp->n].ino = ino;
	dp->n++;
}

static int by_block(const void *a, const void *b)
{
	const struct dup_owner *x = a, *y = b;

	if (x->blk != y->blk)
		return x->blk < y->blk ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void owner_label(struct checker *ck, ext2_ino_t ino, char *buf,
			size_t len)
{
	struct cand *c = find_cand(ck, ino);

	if (c && c->real)
		cand_label(c, buf, len);
	else
		snprintf(buf, len, "inode %u", ino);
}

/* Second pass (only when there are doubly owned blocks): name the owners. */
static void report_dups(struct checker *ck, ext2fs_block_bitmap dup,
			blk64_t ndup)
{
	struct dup_pass dp = { ck, dup, NULL, 0, 0 };
	struct nx_owner_scan scan = { 0 };
	size_t i, j;
	int shown = 0;

	if (ext2fs_allocate_block_bitmap(ck->fs, "rescan", &scan.used))
		return;
	scan.claim = note_dup_owner;
	scan.priv = &dp;
	nx_scan_owners(ck->fs, &scan);
	ext2fs_free_block_bitmap(scan.used);
	qsort(dp.own, dp.n, sizeof(*dp.own), by_block);
	for (i = 0; i < dp.n && shown < MAX_REPORTED; i = j) {
		char line[900], who[NX_NAME_MAX + 64];
		size_t used;

		used = snprintf(line, sizeof(line), "block %llu is owned by ",
				(unsigned long long)dp.own[i].blk);
		if (ext2fs_test_block_bitmap2(ck->meta, dp.own[i].blk))
			used += snprintf(line + used, sizeof(line) - used,
					 "filesystem metadata, ");
		for (j = i; j < dp.n && dp.own[j].blk == dp.own[i].blk; j++) {
			owner_label(ck, dp.own[j].ino, who, sizeof(who));
			if (used < sizeof(line))
				used += snprintf(line + used,
						 sizeof(line) - used, "%s%s",
						 j > i ? ", " : "", who);
		}
		say(ck, NX_CHECK_ERROR, "%s", line);
		shown++;
	}
	if (ndup > (blk64_t)shown)
		say(ck, NX_CHECK_ERROR, "%llu blocks are owned more than once "
		    "in all", (unsigned long long)ndup);
	free(dp.own);
}

/*
 * First block >= N (or END) whose bit in MAP differs from SET: where a
 * run of equal bits ends.  Word-wise in libext2fs, so that comparing the
 * bitmaps of a large, mostly empty volume costs its runs, not its blocks.
 */
static blk64_t run_end(ext2fs_block_bitmap map, int set, blk64_t n,
		       blk64_t end)
{
	blk64_t hit;
	errcode_t err;

	if (n >= end)
		return end;
	err = set ? ext2fs_find_first_zero_block_bitmap2(map, n, end - 1, &hit)
		  : ext2fs_find_first_set_block_bitmap2(map, n, end - 1, &hit);
	return err ? end : hit;
}

/* Allocation bitmap against ownership, both ways, run by run. */
static void compare_bitmap(struct checker *ck, ext2fs_block_bitmap used)
{
	ext2_filsys fs = ck->fs;
	blk64_t b = fs->super->s_first_data_block;
	blk64_t end = ext2fs_blocks_count(fs->super);
	blk64_t nfree_used = 0, nleak = 0, first_fu = 0, first_leak = 0;

	while (b < end) {
		int u = ext2fs_test_block_bitmap2(used, b) != 0;
		int m = ext2fs_test_block_bitmap2(fs->block_map, b) != 0;
		blk64_t eu = run_end(used, u, b + 1, end);
		blk64_t em = run_end(fs->block_map, m, b + 1, end);
		blk64_t next = eu < em ? eu : em;

		if (u && !m) {
			if (!nfree_used)
				first_fu = b;
			nfree_used += next - b;
		}
		if (!u && m) {
			if (!nleak)
				first_leak = b;
			nleak += next - b;
		}
		b = next;
	}
	if (nfree_used)
		say(ck, NX_CHECK_ERROR, "%llu owned blocks are marked free in "
		    "the block bitmap (first: %llu)",
		    (unsigned long long)nfree_used,
		    (unsigned long long)first_fu);
	if (nleak)
		say(ck, NX_CHECK_ERROR, "%llu blocks are marked in use but "
		    "owned by nothing (first: %llu)",
		    (unsigned long long)nleak, (unsigned long long)first_leak);
}

/* First pass over all inodes: ownership, and every inode with the flag. */
static errcode_t scan_ownership(struct checker *ck)
{
	struct nx_owner_scan *scan = &ck->scan;
	errcode_t err;

	err = ext2fs_allocate_block_bitmap(ck->fs, "owned", &scan->used);
	if (!err)
		err = ext2fs_allocate_block_bitmap(ck->fs, "dup", &scan->dup);
	if (!err)
		err = ext2fs_allocate_block_bitmap(ck->fs, "meta", &ck->meta);
	if (err)
		return err;
	nx_mark_fs_metadata(ck->fs, ck->meta);
	scan->skip = note_flagged;
	scan->claim = note_claim;
	scan->priv = ck;
	scan->prog = ck->prog;
	return nx_scan_owners(ck->fs, scan);
}

/* Once snapshots have names: report what the scan found. */
static void report_ownership(struct checker *ck)
{
	struct nx_owner_scan *scan = &ck->scan;

	if (scan->nbadino)
		say(ck, NX_CHECK_ERROR, "%u inodes have unreadable block maps "
		    "(inode %u: %s)", scan->nbadino, scan->bad_ino,
		    error_message(scan->bad_err));
	if (scan->nbad)
		say(ck, NX_CHECK_ERROR, "%llu block pointers point outside the "
		    "volume", (unsigned long long)scan->nbad);
	if (scan->ndup)
		report_dups(ck, scan->dup, scan->ndup);
	compare_bitmap(ck, scan->used);
}

/* ---- through the engine: what each snapshot preserved ---- */

/*
 * Count the blocks of [N, STOP) that are not set in MAP into *BAD (the
 * first of all into *FIRST), run by run.  Blocks past MAP's end (a
 * take-time bitmap of a smaller volume) are not set.
 */
static void count_unset(ext2fs_block_bitmap map, blk64_t n, blk64_t stop,
			blk64_t *bad, blk64_t *first)
{
	blk64_t lim = ext2fs_get_block_bitmap_end2(map) + 1;
	blk64_t cut = stop < lim ? stop : lim, zero;

	while (n < stop) {
		zero = n < cut ? run_end(map, 1, n, cut) : n;
		if (zero >= stop)
			break;
		n = zero < cut ? run_end(map, 0, zero, cut) : stop;
		if (n == lim)
			n = stop;	/* unset on past the map's end */
		if (!*bad)
			*first = zero;
		*bad += n - zero;
	}
}

static void check_preserved(struct checker *ck, struct nx_volume *vol)
{
	struct nx_snapstore *store = vol->snap;
	ext2_filsys fs = vol->fs;
	blk64_t end = ext2fs_blocks_count(fs->super) - 1;
	int i;

	for (i = 0; store && i < store->nsnaps; i++) {
		struct nx_snap *s = store->snaps[i];
		ext2fs_block_bitmap take = NULL;
		blk64_t n = fs->super->s_first_data_block, found, bad = 0;
		blk64_t first_bad = 0;
		errcode_t err;

		/* Half handed over: it has no view of its own any more. */
		if (s->deleted)
			continue;
		err = nx_snap_read_take_bitmap(store, i, &take);
		if (err) {
			say(ck, NX_CHECK_ERROR, "snapshot '%s' cannot be read "
			    "through its view: %s", s->name,
			    error_message(err));
			continue;
		}
		while (n <= end &&
		       !ext2fs_find_first_set_block_bitmap2(s->mapped, n, end,
							    &found)) {
			n = run_end(s->mapped, 1, found, end + 1);
			count_unset(take, found, n, &bad, &first_bad);
		}
		if (bad)
			say(ck, NX_CHECK_ERROR, "snapshot '%s' preserves %llu "
			    "blocks that were free when it was taken (first: "
			    "%llu)", s->name, (unsigned long long)bad,
			    (unsigned long long)first_bad);
		ext2fs_free_block_bitmap(take);
	}
}

static errcode_t check_views(struct checker *ck, const char *device)
{
	struct nx_volume *vol = NULL;
	char msg[512] = "";
	errcode_t err;

	err = nx_open_volume(device, NX_VOL_RDONLY, &vol, msg, sizeof(msg));
	if (err) {
		say(ck, NX_CHECK_ERROR, "the snapshot engine refuses the "
		    "volume: %s", msg[0] ? msg : error_message(err));
		return 0;
	}
	nx_volume_lock(vol);
	/* (the engine lists no deleted snapshot: count them all) */
	if ((vol->snap ? vol->snap->nsnaps : 0) != ck->nreal)
		say(ck, NX_CHECK_ERROR, "the snapshot engine reads %d of the %d "
		    "snapshots", vol->snap ? vol->snap->nsnaps : 0, ck->nreal);
	check_preserved(ck, vol);
	nx_volume_unlock(vol);
	ck->res->views_checked = 1;
	return nx_volume_close(vol);
}

static void free_checker(struct checker *ck)
{
	free(ck->cands);
	free(ck->real);
	if (ck->meta)
		ext2fs_free_block_bitmap(ck->meta);
	if (ck->scan.used)
		ext2fs_free_block_bitmap(ck->scan.used);
	if (ck->scan.dup)
		ext2fs_free_block_bitmap(ck->scan.dup);
}

errcode_t nx_check(const char *device, int flags, nx_check_report_fn report,
		   void *priv, const struct nx_progress *prog,
		   struct nx_check_result *res, char *msg, size_t msglen)
{
	struct checker ck = { 0 };
	struct nx_rawvol *raw = NULL;
	int list_ok, i;
	errcode_t err;

	memset(res, 0, sizeof(*res));
	ck.repair = (flags & NX_CHECK_REPAIR) != 0;
	ck.report = report;
	ck.priv = priv;
	ck.res = res;
	ck.prog = prog;
	err = nx_raw_open(device, ck.repair ? NX_RAW_REPAIR : 0, &raw, msg,
			  msglen);
	if (err)
		return err;
	ck.fs = raw->fs;
	if (raw->sb_csum_fixed)
		say(&ck, NX_CHECK_FIXED, "the superblock's checksum was wrong; "
		    "it is rewritten");
	say(&ck, NX_CHECK_INFO, "checking block ownership");
	err = scan_ownership(&ck);
	if (!err) {
		say(&ck, NX_CHECK_INFO, "checking the snapshot list");
		err = load_names(&ck);
	}
	if (err) {
		nx_set_msg(msg, msglen, "%s: %s", device, error_message(err));
		goto out;
	}
	follow_list(&ck);
	classify(&ck);
	err = sort_real(&ck);
	if (err)
		goto out;
	check_ids(&ck);
	report_ownership(&ck);
	check_list_and_super(&ck);
	res->nsnaps = ck.nreal;
	/* Those being deleted are no snapshots to the user any more. */
	for (i = 0; i < ck.nreal; i++)
		if (ck.real[i]->inode.i_flags & EXT4_SNAPFILE_DELETED_FL)
			res->nsnaps--;
	list_ok = ck.nreal && list_is_right(&ck);
	ck.fs = NULL;
	err = nx_raw_release_fs(raw);
	if (err) {
		nx_set_msg(msg, msglen, "%s: writing the repairs failed: %s",
			device, error_message(err));
		goto out;
	}
	if (list_ok) {
		say(&ck, NX_CHECK_INFO, "checking what each snapshot "
		    "preserves");
		err = check_views(&ck, device);
		if (err)
			nx_set_msg(msg, msglen, "%s: %s", device,
				error_message(err));
	}
out:
	free_checker(&ck);
	nx_raw_close(raw);
	return err;
}
