/*
 * sanity.h - is this a volume nextfs may serve, and may it write to it?
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: the checks the kernel makes before it mounts an ext2/3/4
 * volume (ext4_fill_super and what it calls), made before nextfs writes
 * a byte, reading only:
 *
 *  - nx_probe_device(): what is on the device at all.  One line naming
 *    what it is when it is not ext2/3/4 (another file system's or swap's
 *    signature, an external journal, a partition table, zeros), an empty
 *    or too small file, and - for writers - a file or device that cannot
 *    be opened for writing (where -o ro would work).
 *  - nx_sanity_precheck(): the superblock and group descriptors as they
 *    are on the device, before any journal replay: superblock fields and
 *    checksum, geometry against the device size, descriptor ranges and
 *    checksums.
 *  - nx_sanity_check_layout(): the part of that which an open handle
 *    needs again after a replay (libext2fs trusts these fields).
 *  - nx_sanity_check_loaded(): on an open handle with its bitmaps loaded
 *    (after any replay): every group's bitmaps and inode table marked in
 *    use, the root directory's inode, the orphan list and the block map
 *    of every orphan that will be freed.
 *  - nx_sanity_walk_map(): one inode's block map (the snapshot engine
 *    checks the snapshot files' maps with it before anything is written).
 *  - nx_sanity_bitmap_problem(): names the group when libext2fs refused a
 *    bitmap for its checksum.
 *
 * Each finding has a level: NX_DAMAGE_RW volumes may be read but must not
 * be written; NX_DAMAGE_FATAL ones cannot be served at all.  The PROBLEM
 * text says what is wrong (no device name, no advice); FIX, where set,
 * replaces the standard advice.  nx_sanity_refusal() makes the one line
 * the user sees: the device, the problem, and the fix (-o ro to read it;
 * e2fsck, or "nextfs check --repair" on a volume with snapshots).  The
 * feature policy (volume.c) and a damaged journal (journal.c, found when
 * it is loaded, before anything is written) are refused the same way.
 */
#ifndef NEXTFS_SANITY_H
#define NEXTFS_SANITY_H

#include <stdint.h>
#include <ext2fs/ext2fs.h>

enum nx_damage_level {
	NX_DAMAGE_NONE = 0,
	NX_DAMAGE_RW,		/* readable, never to be written */
	NX_DAMAGE_FATAL,	/* cannot be served */
};

struct nx_damage {
	enum nx_damage_level level;
	char problem[256];
	int own_fix;		/* 0: the standard advice */
	char fix[256];		/* else this ("": no repair to advise) */
};

struct nx_probe {
	uint64_t size;			/* bytes */
	int blockdev;
	struct ext2_super_block sb;	/* as on the device */
};

/*
 * Look at DEVICE (see above).  0, or an errcode with one line in MSG
 * (EXT2_ET_BAD_MAGIC for no ext2/3/4 file system, EROFS/EACCES/EPERM for
 * a writer that cannot write).
 */
errcode_t nx_probe_device(const char *device, int rdonly, struct nx_probe *p,
			  char *msg, size_t msglen);

/*
 * Record a finding in D unless D already holds one at least as bad; the
 * _fix form with its own advice FIX ("" for none).
 */
void nx_damage_note(struct nx_damage *d, enum nx_damage_level level,
		    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void nx_damage_note_fix(struct nx_damage *d, enum nx_damage_level level,
			const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * ERR and MSG from loading or replaying the journal (txn.h, journal.h):
 * damage becomes a refusal as above; anything else gets DEVICE named.
 */
int nx_sanity_journal_damage(errcode_t err);
errcode_t nx_sanity_journal_refusal(const char *device, errcode_t err,
				    int rdonly, int has_snapshot, char *msg,
				    size_t msglen);

/* See above.  Each adds its worst finding to D and returns its level. */
enum nx_damage_level nx_sanity_precheck(const char *device,
					const struct nx_probe *p,
					struct nx_damage *d);
enum nx_damage_level nx_sanity_check_layout(ext2_filsys fs,
					    struct nx_damage *d);
enum nx_damage_level nx_sanity_check_loaded(ext2_filsys fs,
					    struct nx_damage *d);
/* The root directory's inode alone (fatal: reading needs it too). */
enum nx_damage_level nx_sanity_check_root(ext2_filsys fs,
					  struct nx_damage *d);
void nx_sanity_bitmap_problem(ext2_filsys fs, errcode_t err,
			      struct nx_damage *d);

/*
 * The block map of inode INO (INODE as read: extent tree or indirect
 * blocks), checked as the kernel checks one before it uses it - extent
 * headers (magic, depth, entry counts, checksum), entries in order, every
 * block inside the volume, no map block used twice - reading only.  FN,
 * if not NULL, gets each run the map holds: COUNT blocks from PBLK, file
 * data at logical LBLK, or map blocks (LBLK == NX_MAP_META); a non-zero
 * return stops the walk and is returned (FN says why where it wants).
 * Damage returns EXT2_ET_FILESYSTEM_CORRUPTED with PROBLEM saying what,
 * starting "it ..." or "its ..." (the caller names whose map it is).
 * Inodes without a map (inline data, fast symlinks, devices) pass.
 */
#define NX_MAP_META	((blk64_t)-1)
typedef errcode_t (*nx_map_fn)(void *priv, blk64_t pblk, blk64_t count,
			       blk64_t lblk);
errcode_t nx_sanity_walk_map(ext2_filsys fs, ext2_ino_t ino,
			     struct ext2_inode *inode, nx_map_fn fn,
			     void *priv, char *problem, size_t len);

/*
 * The line for DEVICE refused (RDONLY: even for reading) because of D;
 * HAS_SNAPSHOT picks the repair advice.  Returns the errcode to return.
 */
errcode_t nx_sanity_refusal(const char *device, const struct nx_damage *d,
			    int rdonly, int has_snapshot, char *msg,
			    size_t msglen);

#endif
