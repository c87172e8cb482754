/*
 * imgpatch.c - base images, their metadata regions, and patch programs
 * (format in imgpatch.h).
 *
 * Regions are found with libext2fs on the pristine base, once, for the
 * live filesystem and for each snapshot view; a view's block N is mapped
 * to the physical block that holds it with the snapshot engine's own
 * resolver, so a preserved metadata copy is patched where it really is.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <et/com_err.h>
#include "nextfs/open.h"
#include "nextfs/snapshot.h"
#include "snap_internal.h"
#include "fzjournal.h"
#include "imgpatch.h"

static const char *const rtype_names[FZ_NTYPES] = {
	"superblock", "group-desc", "block-bitmap", "inode-bitmap",
	"inode-table", "extent", "indirect", "dir", "xattr", "symlink",
	"orphan", "jsb", "jlog",
};

const char *fz_rtype_name(int type)
{
	return type >= 0 && type < FZ_NTYPES ? rtype_names[type] : "?";
}

/* ------------------------------------------------------------------ */
/* region discovery                                                    */
/* ------------------------------------------------------------------ */

struct scan {
	struct fz_base *b;
	ext2_filsys fs;
	int view;			/* 0 live, i + 1 views[i] */
	size_t cap;
	/* per inode, for the block iterator */
	ext2_ino_t ino;
	int type_meta;			/* FZ_EXTENT or FZ_IND */
	int type_data;			/* FZ_DIR, FZ_SYMLINK or -1 */
};

static ext2_filsys view_fs(const struct fz_base *b, int view)
{
	return view ? b->views[view - 1]->fs : b->vol->fs;
}

/* Physical block that holds block N of VIEW (0 when out of range). */
static blk64_t resolve(const struct fz_base *b, int view, blk64_t n)
{
	blk64_t phys = n;

	if (view && nx_snap_resolve(b->vol->snap, b->view_idx[view - 1], n,
				    &phys))
		return 0;
	return phys;
}

static void add_region(struct scan *s, int type, blk64_t logical,
		       uint32_t owner)
{
	struct fz_base *b = s->b;
	struct fz_region *r;
	blk64_t phys = resolve(b, s->view, logical);

	if (!phys || phys >= b->size / b->bs)
		return;
	if (b->nreg == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct fz_region *n = realloc(b->reg, cap * sizeof(*n));

		if (!n)
			return;
		b->reg = n;
		s->cap = cap;
	}
	r = &b->reg[b->nreg++];
	r->phys = phys;
	r->logical = logical;
	r->owner = owner;
	r->type = type;
	r->view = s->view;
}

static int scan_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		      blk64_t ref_blk, int ref_offset, void *priv)
{
	struct scan *s = priv;

	if (blockcnt < 0)
		add_region(s, s->type_meta, *blocknr, s->ino);
	else if (s->type_data >= 0)
		add_region(s, s->type_data, *blocknr, s->ino);
	return 0;
}

static void scan_inode(struct scan *s, ext2_ino_t ino,
		       struct ext2_inode_large *inode)
{
	ext2_filsys fs = s->fs;
	blk64_t acl = ext2fs_file_acl_block(fs, (struct ext2_inode *)inode);

	if (acl)
		add_region(s, FZ_XATTR, acl, ino);
	if (!ext2fs_inode_has_valid_blocks2(fs, (struct ext2_inode *)inode))
		return;
	s->ino = ino;
	s->type_meta = inode->i_flags & EXT4_EXTENTS_FL ? FZ_EXTENT : FZ_IND;
	if (LINUX_S_ISDIR(inode->i_mode))
		s->type_data = FZ_DIR;
	else if (LINUX_S_ISLNK(inode->i_mode))
		s->type_data = FZ_SYMLINK;
	else
		s->type_data = -1;
	ext2fs_block_iterate3(fs, ino, BLOCK_FLAG_READ_ONLY, NULL, scan_block,
			      s);
}

static void scan_inodes(struct scan *s)
{
	ext2_filsys fs = s->fs;
	unsigned isz = EXT2_INODE_SIZE(fs->super);
	unsigned ipb = fs->blocksize / isz;
	ext2_ino_t ino, last_itable_ino = 0;
	struct ext2_inode_large inode;

	for (ino = 1; ino <= fs->super->s_inodes_count; ino++) {
		dgrp_t g = (ino - 1) / fs->super->s_inodes_per_group;
		ext2_ino_t idx = (ino - 1) % fs->super->s_inodes_per_group;
		ext2_ino_t first = ino - idx % ipb;

		if (!ext2fs_test_inode_bitmap2(fs->inode_map, ino))
			continue;
		if (first != last_itable_ino) {
			add_region(s, FZ_ITABLE,
				   ext2fs_inode_table_loc(fs, g) + idx / ipb,
				   first);
			last_itable_ino = first;
		}
		/*
		 * Reserved inodes other than the root and the journal hold
		 * nothing we read (the journal's map: read-write opens).
		 */
		if (ino < EXT2_FIRST_INO(fs->super) && ino != EXT2_ROOT_INO &&
		    !(ino == fs->super->s_journal_inum && !s->view))
			continue;
		if (ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&inode,
					   sizeof(inode)))
			continue;
		/* Snapshot files' maps are live-only (views hide them). */
		if (s->view && inode.i_flags & EXT4_SNAPFILE_FL)
			continue;
		scan_inode(s, ino, &inode);
	}
}

/* Inode table blocks of the orphan chain (s_last_orphan, i_dtime, ...). */
static void scan_orphans(struct scan *s)
{
	ext2_filsys fs = s->fs;
	ext2_ino_t ino = fs->super->s_last_orphan;
	unsigned ipb = fs->blocksize / EXT2_INODE_SIZE(fs->super);
	struct ext2_inode inode;
	int n;

	for (n = 0; n < 64 && ino >= EXT2_FIRST_INO(fs->super) &&
		    ino <= fs->super->s_inodes_count; n++) {
		dgrp_t g = (ino - 1) / fs->super->s_inodes_per_group;
		ext2_ino_t idx = (ino - 1) % fs->super->s_inodes_per_group;

		add_region(s, FZ_ORPHAN,
			   ext2fs_inode_table_loc(fs, g) + idx / ipb,
			   ino - idx % ipb);
		if (ext2fs_read_inode(fs, ino, &inode))
			break;
		ino = inode.i_dtime;
	}
}

/* ---- the journal: its superblock and the log a replay would apply ---- */

struct jscan {
	struct fz_base *b;
	blk64_t *map;			/* journal block -> image block */
	uint32_t nmap;
	struct fz_jlog *v;
	uint32_t *seq;
	size_t n, cap;
};

static const unsigned char *jscan_read(void *priv, uint32_t jblk)
{
	struct jscan *j = priv;
	const struct fz_base *b = j->b;

	if (jblk >= j->nmap || !j->map[jblk] ||
	    j->map[jblk] >= b->size / b->bs)
		return NULL;
	return b->img + j->map[jblk] * b->bs;
}

static void jscan_emit(void *priv, const struct fzj_block *e)
{
	struct jscan *j = priv;

	if (j->n == j->cap) {
		size_t cap = j->cap ? 2 * j->cap : 64;
		struct fz_jlog *v = realloc(j->v, cap * sizeof(*v));
		uint32_t *seq = realloc(j->seq, cap * sizeof(*seq));

		if (v)
			j->v = v;
		if (seq)
			j->seq = seq;
		if (!v || !seq)
			return;
		j->cap = cap;
	}
	j->v[j->n].phys = j->map[e->jblk];
	j->v[j->n].kind = e->kind;
	j->v[j->n].desc_phys = e->kind == FZJ_K_DATA ? j->map[e->desc_jblk] : 0;
	j->v[j->n].tag_off = e->tag_off;
	j->v[j->n].target = e->target;
	j->seq[j->n] = e->seq;
	j->n++;
}

static void scan_journal(struct scan *s)
{
	struct fz_base *b = s->b;
	ext2_filsys fs = s->fs;
	ext2_ino_t jino = fs->super->s_journal_inum;
	struct jscan j = { .b = b };
	struct ext2_inode inode;
	struct fzj jr;
	uint32_t i, done;
	size_t k, keep = 0;

	if (!ext2fs_has_feature_journal(fs->super) || !jino ||
	    ext2fs_read_inode(fs, jino, &inode))
		return;
	j.nmap = EXT2_I_SIZE(&inode) / fs->blocksize;
	if (!j.nmap || j.nmap > (1U << 20))
		return;
	j.map = calloc(j.nmap, sizeof(*j.map));
	if (!j.map)
		return;
	for (i = 0; i < j.nmap; i++)
		if (ext2fs_bmap2(fs, jino, &inode, NULL, 0, i, NULL,
				 &j.map[i]))
			j.map[i] = 0;
	if (!j.map[0] || j.map[0] >= b->size / b->bs)
		goto out;
	b->jsb = j.map[0];
	add_region(s, FZ_JSB, b->jsb, 0);
	if (fzj_parse_sb(b->img + b->jsb * b->bs, b->bs, &jr))
		goto out;
	b->jseq = jr.seq;
	b->jfirst = jr.first;
	b->jmaxlen = jr.maxlen;
	b->jstart = jr.start;
	if (!jr.start || jr.last > j.nmap)
		goto out;
	done = fzj_walk(&jr, jr.start, jr.seq, jscan_read, jscan_emit, &j);
	/* Only what a replay applies: the complete transactions. */
	for (k = 0; k < j.n; k++)
		if (j.seq[k] - jr.seq < done)
			j.v[keep++] = j.v[k];
	if (!keep)
		goto out;
	b->needs_recovery = 1;
	b->jlog = j.v;
	b->njlog = keep;
	j.v = NULL;
	for (k = 0; k < b->njlog; k++)
		add_region(s, FZ_JLOG, b->jlog[k].phys, k);
out:
	free(j.v);
	free(j.seq);
	free(j.map);
}

static void scan_fs(struct fz_base *b, int view, size_t *cap)
{
	struct scan s = { .b = b, .view = view, .cap = *cap };
	ext2_filsys fs = view_fs(b, view);
	blk64_t sb_blk = fs->super->s_first_data_block;
	unsigned per = EXT2_DESC_PER_BLOCK(fs->super);
	dgrp_t g;
	unsigned i;

	s.fs = fs;
	add_region(&s, FZ_SB, SUPERBLOCK_OFFSET / fs->blocksize, 0);
	for (i = 0; i < fs->desc_blocks; i++)
		add_region(&s, FZ_GDT, ext2fs_descriptor_block_loc2(fs, sb_blk,
								     i),
			   i * per);
	for (g = 0; g < fs->group_desc_count; g++) {
		add_region(&s, FZ_BBITMAP, ext2fs_block_bitmap_loc(fs, g), g);
		add_region(&s, FZ_IBITMAP, ext2fs_inode_bitmap_loc(fs, g), g);
	}
	scan_inodes(&s);
	if (!view) {
		scan_orphans(&s);
		scan_journal(&s);
	}
	*cap = s.cap;
}

static int cmp_region(const void *a, const void *b)
{
	const struct fz_region *x = a, *y = b;

	if (x->phys != y->phys)
		return x->phys < y->phys ? -1 : 1;
	/* Prefer the live view's reading of a shared block. */
	if (x->view != y->view)
		return (int)x->view - (int)y->view;
	/* An orphan's inode table block is of the rarer kind. */
	return (x->type != FZ_ORPHAN) - (y->type != FZ_ORPHAN);
}

static void sort_regions(struct fz_base *b)
{
	size_t i, n = 0;

	qsort(b->reg, b->nreg, sizeof(*b->reg), cmp_region);
	for (i = 0; i < b->nreg; i++)
		if (!n || b->reg[n - 1].phys != b->reg[i].phys)
			b->reg[n++] = b->reg[i];
	b->nreg = n;
	memset(b->count, 0, sizeof(b->count));
	for (i = 0; i < n; i++)
		b->count[b->reg[i].type]++;
}

const struct fz_region *fz_find_region(const struct fz_base *b, blk64_t phys)
{
	size_t lo = 0, hi = b->nreg;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (b->reg[mid].phys == phys)
			return &b->reg[mid];
		if (b->reg[mid].phys < phys)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static errcode_t read_file(const char *path, unsigned char **buf, size_t *size)
{
	struct stat st;
	ssize_t got;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	errcode_t err = 0;

	if (fd < 0)
		return errno;
	if (fstat(fd, &st) < 0 || st.st_size <= 0) {
		err = fstat(fd, &st) < 0 ? errno : EINVAL;
		goto out;
	}
	*buf = malloc(st.st_size);
	if (!*buf) {
		err = ENOMEM;
		goto out;
	}
	got = pread(fd, *buf, st.st_size, 0);
	if (got != st.st_size) {
		free(*buf);
		err = EIO;
		goto out;
	}
	*size = st.st_size;
out:
	close(fd);
	return err;
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n <= 0)
			return -1;
		buf = (const char *)buf + n;
		len -= n;
		off += n;
	}
	return 0;
}

static errcode_t open_views(struct fz_base *b)
{
	struct nx_snapinfo *list;
	int n, i;
	errcode_t err;

	err = nx_snap_list(b->vol, &list, &n);
	if (err)
		return err;
	for (i = 0; i < n && b->nviews < FZ_MAX_VIEWS; i++) {
		struct nx_volume *v;

		err = nx_snap_view_open(b->vol, list[i].ino, &v);
		if (!err)
			err = ext2fs_read_bitmaps(v->fs);
		if (err)
			break;
		b->view_idx[b->nviews] = nx_snap_index(b->vol->snap,
						       list[i].ino);
		b->views[b->nviews++] = v;
	}
	free(list);
	return err;
}

/*
 * A read-only open refuses a journal that needs recovery: the copy the
 * base is opened from (for regions and checksum parameters) has the
 * needs_recovery flag cleared, so it shows the volume as it is on disk
 * before replay.  The patched images keep the flag.
 */
static int open_as_recovered(struct fz_base *b)
{
	struct ext2_super_block sb;

	if (b->size < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE)
		return 0;
	memcpy(&sb, b->img + SUPERBLOCK_OFFSET, sizeof(sb));
	if (ext2fs_le16_to_cpu(sb.s_magic) != EXT2_SUPER_MAGIC ||
	    !(ext2fs_le32_to_cpu(sb.s_feature_incompat) &
	      EXT3_FEATURE_INCOMPAT_RECOVER))
		return 0;
	sb.s_feature_incompat = ext2fs_cpu_to_le32(
		ext2fs_le32_to_cpu(sb.s_feature_incompat) &
		~EXT3_FEATURE_INCOMPAT_RECOVER);
	if (ext2fs_le32_to_cpu(sb.s_feature_ro_compat) &
	    EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
		sb.s_checksum = ext2fs_cpu_to_le32(ext2fs_crc32c_le(~0U,
			(unsigned char *)&sb,
			offsetof(struct ext2_super_block, s_checksum)));
	return write_all(b->fd, &sb, sizeof(sb), SUPERBLOCK_OFFSET);
}

errcode_t fz_base_load(const char *path, struct fz_base *b, char *msg,
		       size_t msglen)
{
	const char *slash = strrchr(path, '/');
	char dev[64];
	size_t cap = 0;
	errcode_t err;
	int i;

	memset(b, 0, sizeof(*b));
	b->fd = -1;
	snprintf(b->name, sizeof(b->name), "%s", slash ? slash + 1 : path);
	err = read_file(path, &b->img, &b->size);
	if (err) {
		snprintf(msg, msglen, "%s: %s", path, strerror(err));
		return err;
	}
	b->fd = memfd_create("nextfs-fuzz-base", MFD_CLOEXEC);
	if (b->fd < 0 || write_all(b->fd, b->img, b->size, 0) ||
	    open_as_recovered(b)) {
		snprintf(msg, msglen, "%s: memfd: %s", path, strerror(errno));
		return errno;
	}
	snprintf(dev, sizeof(dev), "/proc/self/fd/%d", b->fd);
	err = nx_open_volume(dev, NX_VOL_RDONLY, &b->vol, msg, msglen);
	if (err)
		return err;
	b->bs = b->vol->fs->blocksize;
	err = open_views(b);
	if (err) {
		snprintf(msg, msglen, "%s: cannot open its snapshots: %s",
			 path, error_message(err));
		return err;
	}
	scan_fs(b, 0, &cap);
	for (i = 0; i < b->nviews; i++)
		scan_fs(b, i + 1, &cap);
	sort_regions(b);
	if (!b->nreg) {
		snprintf(msg, msglen, "%s: no metadata found", path);
		return EINVAL;
	}
	return 0;
}

void fz_base_free(struct fz_base *b)
{
	int i;

	for (i = 0; i < b->nviews; i++)
		nx_snap_view_close(b->views[i]);
	if (b->vol)
		nx_volume_close(b->vol);
	if (b->fd >= 0)
		close(b->fd);
	free(b->reg);
	free(b->img);
	free(b->jlog);
	memset(b, 0, sizeof(*b));
	b->fd = -1;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int fz_bases_load_dir(const char *dir, struct fz_base **bases)
{
	char *names[256], path[4096], msg[512];
	struct dirent *de;
	int n = 0, i, ok = 0;
	DIR *d = opendir(dir);

	if (!d) {
		fprintf(stderr, "nextfs-fuzz: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)) && n < 256) {
		size_t len = strlen(de->d_name);

		if (len > 4 && !strcmp(de->d_name + len - 4, ".img"))
			names[n++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);
	*bases = calloc(n ? n : 1, sizeof(**bases));
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (*bases && !fz_base_load(path, &(*bases)[ok], msg,
					    sizeof(msg)))
			ok++;
		else if (*bases) {
			fprintf(stderr, "nextfs-fuzz: skipping base %s: %s\n",
				path, msg);
			fz_base_free(&(*bases)[ok]);
		}
		free(names[i]);
	}
	return *bases && ok ? ok : -1;
}

/* ------------------------------------------------------------------ */
/* applying a patch program                                            */
/* ------------------------------------------------------------------ */

void fz_work_init(struct fz_work *w)
{
	memset(w, 0, sizeof(*w));
}

void fz_work_free(struct fz_work *w)
{
	free(w->img);
	free(w->dirty);
	free(w->dirty_map);
	memset(w, 0, sizeof(*w));
}

static void mark_dirty(struct fz_work *w, blk64_t blk)
{
	if (blk >= w->size / w->base->bs || w->dirty_map[blk])
		return;
	if (w->ndirty == w->capdirty) {
		size_t cap = w->capdirty ? 2 * w->capdirty : 64;
		blk64_t *n = realloc(w->dirty, cap * sizeof(*n));

		if (!n)
			abort();
		w->dirty = n;
		w->capdirty = cap;
	}
	w->dirty_map[blk] = 1;
	w->dirty[w->ndirty++] = blk;
}

/* Make WORK a pristine copy of base B. */
static void reset_work(struct fz_work *w, const struct fz_base *b)
{
	size_t i, nblk = b->size / b->bs;

	if (w->base != b) {
		unsigned char *img = realloc(w->img, b->size);
		unsigned char *map = realloc(w->dirty_map, nblk + 1);

		if (!img || !map)
			abort();
		w->img = img;
		w->dirty_map = map;
		memcpy(w->img, b->img, b->size);
		memset(w->dirty_map, 0, nblk + 1);
		w->base = b;
		w->size = b->size;
		w->ndirty = 0;
		return;
	}
	for (i = 0; i < w->ndirty; i++) {
		size_t off = w->dirty[i] * b->bs;

		memcpy(w->img + off, b->img + off, b->bs);
		w->dirty_map[w->dirty[i]] = 0;
	}
	w->ndirty = 0;
}

static void put_bytes(struct fz_work *w, uint64_t off, const uint8_t *data,
		      size_t len, int xor)
{
	unsigned bs = w->base->bs;
	size_t i;

	for (i = 0; i < len && off + i < w->size; i++) {
		if (xor)
			w->img[off + i] ^= data[i];
		else
			w->img[off + i] = data[i];
		mark_dirty(w, (off + i) / bs);
	}
}

static uint64_t interesting(const struct fz_base *b, uint8_t pick)
{
	ext2_filsys fs = b->vol->fs;
	uint64_t blocks = ext2fs_blocks_count(fs->super);
	uint64_t inodes = fs->super->s_inodes_count;
	const uint64_t v[] = {
		0, 1, 2, 3, 4, 11, 12, 0x7f, 0x80, 0xff, 0x100, 0x7fff,
		0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff,
		0x100000000ULL, ~0ULL, 0x8000000000000000ULL,
		b->bs - 1, b->bs, b->bs + 1, 2 * b->bs, 4096, 65536,
		blocks - 1, blocks, blocks + 1, 2 * blocks,
		inodes - 1, inodes, inodes + 1,
		fs->super->s_blocks_per_group, fs->super->s_inodes_per_group,
		fs->super->s_first_data_block, EXT2_INODE_SIZE(fs->super),
		0xf30a, 0xea020000, 0xef53, 0x10000000 /* EXTENTS_FL */,
		0x01000000 /* SNAPFILE_FL */, 0x1000 /* INDEX_FL */,
		0x10000000 | 0x01000000, 040755, 0100644, 0120777,
	};

	return v[pick % (sizeof(v) / sizeof(v[0]))];
}

/*
 * The same for journal structures, whose fields are big-endian: values
 * that matter to a replay (block types, tag flags, the magic, sequence
 * numbers around the base's, log bounds, device bounds).
 */
static uint64_t interesting_journal(const struct fz_base *b, uint8_t pick)
{
	uint64_t blocks = ext2fs_blocks_count(b->vol->fs->super);
	const uint64_t v[] = {
		0, 1, 2, 3, 4, 5, 8, 0xa, 0xb, 0x10, 0x1f, 0x20, 0xff,
		0xffff, 0x7fffffff, 0x80000000, 0xffffffff, ~0ULL,
		0x100000000ULL, FZJ_MAGIC, b->jseq, b->jseq - 1, b->jseq + 1,
		b->jseq + 2, b->jfirst, b->jfirst - 1, b->jmaxlen,
		b->jmaxlen - 1, b->jmaxlen + 1, b->jstart, b->jstart + 1,
		b->bs, b->bs / 2, 2 * b->bs, blocks - 1, blocks, blocks + 1,
		b->jsb, 12, 16,
	};

	return v[pick % (sizeof(v) / sizeof(v[0]))];
}

/* Run the patch records; returns how many were applied. */
static int apply_records(struct fz_work *w, const struct fz_base *b,
			 const uint8_t *in, size_t len)
{
	size_t pos = FZ_HEADER;
	int n = 0;

	while (pos + FZ_RECORD_HDR <= len && n < FZ_MAX_RECORDS) {
		const uint8_t *r = in + pos;
		unsigned op = r[0] & 3;
		unsigned reg = r[1] | r[2] << 8, off = r[3] | r[4] << 8;
		const struct fz_region *rg = &b->reg[reg % b->nreg];
		uint64_t at = rg->phys * b->bs + off % b->bs;
		size_t dlen;

		pos += FZ_RECORD_HDR;
		if (op == 3) {
			unsigned width = 1u << (r[5] & 3);
			uint64_t val;
			uint8_t bytes[8];
			unsigned i;

			int be = rg->type == FZ_JSB || rg->type == FZ_JLOG;

			if (pos >= len)
				break;
			val = be ? interesting_journal(b, in[pos++]) :
				   interesting(b, in[pos++]);
			for (i = 0; i < width; i++)
				bytes[i] = (uint8_t)(val >> (8 * (be ?
						width - 1 - i : i)));
			put_bytes(w, at, bytes, width, 0);
			n++;
			continue;
		}
		dlen = (r[5] % 32) + 1;
		if (dlen > len - pos)
			dlen = len - pos;
		if (!dlen)
			break;
		if (op == 2)
			at = ((uint64_t)reg << 16 | off) % w->size;
		put_bytes(w, at, in + pos, dlen, op == 1);
		pos += dlen;
		n++;
	}
	return n;
}

/* ------------------------------------------------------------------ */
/* checksums                                                           */
/* ------------------------------------------------------------------ */

static unsigned char *blk_ptr(struct fz_work *w, blk64_t blk)
{
	return w->img + blk * w->base->bs;
}

/*
 * The group-descriptor helpers of libext2fs work on fs->group_desc: lend
 * them the patched descriptor and take the result back.
 */
static void with_desc(ext2_filsys fs, dgrp_t g, unsigned char *raw,
		      void (*fn)(ext2_filsys, dgrp_t, void *), void *arg)
{
	struct ext2_group_desc *gd = ext2fs_group_desc(fs, fs->group_desc, g);
	unsigned dsz = EXT2_DESC_SIZE(fs->super);
	unsigned char saved[EXT2_MAX_DESC_SIZE];

	if (dsz > sizeof(saved))
		return;
	memcpy(saved, gd, dsz);
	memcpy(gd, raw, dsz);
	fn(fs, g, arg);
	memcpy(raw, gd, dsz);
	memcpy(gd, saved, dsz);
}

/* Where descriptor G of VIEW lives in the image, or NULL. */
static unsigned char *desc_ptr(struct fz_work *w, int view, dgrp_t g)
{
	const struct fz_base *b = w->base;
	ext2_filsys fs = view_fs(b, view);
	unsigned per = EXT2_DESC_PER_BLOCK(fs->super);
	blk64_t blk = ext2fs_descriptor_block_loc2(fs,
			fs->super->s_first_data_block, g / per);

	blk = resolve(b, view, blk);
	if (!blk || blk >= w->size / b->bs || g >= fs->group_desc_count)
		return NULL;
	mark_dirty(w, blk);
	return blk_ptr(w, blk) + (g % per) * EXT2_DESC_SIZE(fs->super);
}

struct bitmap_arg {
	unsigned char *bitmap;
	int inode;
};

static void set_bitmap_csum(ext2_filsys fs, dgrp_t g, void *priv)
{
	struct bitmap_arg *a = priv;

	if (a->inode)
		ext2fs_inode_bitmap_csum_set(fs, g, (char *)a->bitmap,
					     EXT2_INODES_PER_GROUP(fs->super) / 8);
	else
		ext2fs_block_bitmap_csum_set(fs, g, (char *)a->bitmap,
				EXT2_CLUSTERS_PER_GROUP(fs->super) / 8);
}

static void set_desc_csum(ext2_filsys fs, dgrp_t g, void *priv)
{
	ext2fs_group_desc_csum_set(fs, g);
}

static void fix_bitmap(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	struct bitmap_arg a = { blk_ptr(w, r->phys), r->type == FZ_IBITMAP };
	unsigned char *desc;

	if (!ext2fs_has_feature_metadata_csum(fs->super))
		return;
	desc = desc_ptr(w, r->view, r->owner);
	if (desc)
		with_desc(fs, r->owner, desc, set_bitmap_csum, &a);
}

/* Only inodes that differ from the base: a zeroed slot stays zero. */
static void fix_itable(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	unsigned isz = EXT2_INODE_SIZE(fs->super), i;
	unsigned char *p = blk_ptr(w, r->phys);
	const unsigned char *o = w->base->img + r->phys * w->base->bs;

	for (i = 0; i + isz <= fs->blocksize; i += isz)
		if (memcmp(p + i, o + i, isz))
			ext2fs_inode_csum_set(fs, r->owner + i / isz,
				(struct ext2_inode_large *)(p + i));
}

static void fix_extent(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	struct ext3_extent_header *eh = (void *)blk_ptr(w, r->phys);
	size_t tail = sizeof(*eh) + (size_t)ext2fs_le16_to_cpu(eh->eh_max) *
		      sizeof(struct ext3_extent);

	/* libext2fs finds the checksum from eh_max: keep it in the block. */
	if (ext2fs_le16_to_cpu(eh->eh_magic) == EXT3_EXT_MAGIC &&
	    tail + sizeof(struct ext3_extent_tail) <= fs->blocksize)
		ext2fs_extent_block_csum_set(fs, r->owner, eh);
}

static void fix_region(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	unsigned char *p = blk_ptr(w, r->phys);

	switch (r->type) {
	case FZ_BBITMAP:
	case FZ_IBITMAP:
		fix_bitmap(w, r);
		break;
	case FZ_ITABLE:
	case FZ_ORPHAN:
		fix_itable(w, r);
		break;
	case FZ_EXTENT:
		fix_extent(w, r);
		break;
	case FZ_DIR:
		ext2fs_dir_block_csum_set(fs, r->owner,
					  (struct ext2_dir_entry *)p);
		break;
	case FZ_XATTR:
		ext2fs_ext_attr_block_csum_set(fs, r->owner, r->logical,
				(struct ext2_ext_attr_header *)p);
		break;
	}
}

static void fix_descs(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	unsigned per = EXT2_DESC_PER_BLOCK(fs->super), i;
	unsigned dsz = EXT2_DESC_SIZE(fs->super);
	unsigned char *p = blk_ptr(w, r->phys);

	if (!ext2fs_has_group_desc_csum(fs))
		return;
	for (i = 0; i < per && r->owner + i < fs->group_desc_count; i++)
		with_desc(fs, r->owner + i, p + i * dsz, set_desc_csum, NULL);
}

static void fix_super(struct fz_work *w, const struct fz_region *r)
{
	ext2_filsys fs = view_fs(w->base, r->view);
	unsigned off = SUPERBLOCK_OFFSET % fs->blocksize;

	ext2fs_superblock_csum_set(fs, (struct ext2_super_block *)
				   (blk_ptr(w, r->phys) + off));
}

/* ---- journal checksums (only when the journal has them) ---- */

/* Journal parameters as a replay would read them: the patched jsb's. */
static int journal_params(struct fz_work *w, struct fzj *j)
{
	const struct fz_base *b = w->base;

	if (!b->jsb)
		return -1;
	if (!fzj_parse_sb(blk_ptr(w, b->jsb), b->bs, j))
		return 0;
	return fzj_parse_sb(b->img + b->jsb * b->bs, b->bs, j);
}

/*
 * A logged copy: first the checksum of the metadata it holds (if its
 * target is a metadata block we know; bitmaps' live in descriptors and
 * are left), then its tag's checksum in the descriptor.
 */
static void fix_jlog_data(struct fz_work *w, const struct fzj *j,
			  const struct fz_jlog *e)
{
	const struct fz_base *b = w->base;
	const struct fz_region *t = fz_find_region(b, e->target);
	unsigned char *desc, *tag;
	uint32_t csum;

	if (t && !t->view) {
		struct fz_region r = *t;

		r.phys = e->phys;
		switch (t->type) {
		case FZ_ITABLE:
		case FZ_ORPHAN:
		case FZ_EXTENT:
		case FZ_DIR:
		case FZ_XATTR:
			fix_region(w, &r);
			break;
		case FZ_GDT:
			fix_descs(w, &r);
			break;
		case FZ_SB:
			fix_super(w, &r);
			break;
		}
	}
	if (!fzj_has_csum(j) || e->tag_off + 16 > b->bs)
		return;
	desc = blk_ptr(w, e->desc_phys);
	mark_dirty(w, e->desc_phys);
	/* Sequence: the descriptor's, which the replay checks it against. */
	csum = fzj_data_csum(j, fzj_be32(desc + 8), blk_ptr(w, e->phys));
	tag = desc + e->tag_off;
	if (j->incompat & FZJ_INCOMPAT_CSUM_V3) {
		fzj_put_be32(tag + 12, csum);
	} else {
		tag[4] = (uint8_t)(csum >> 8);
		tag[5] = (uint8_t)csum;
	}
}

/* crc32c of BLK (LEN bytes) with the 4-byte field at OFF zeroed, put there. */
static void set_be_csum(unsigned char *blk, size_t len, size_t off,
			uint32_t seed)
{
	fzj_put_be32(blk + off, 0);
	fzj_put_be32(blk + off, ext2fs_crc32c_le(seed, blk, len));
}

/*
 * Logged copies (and their tags), then descriptor and revoke block tails,
 * commit blocks, the journal superblock.  A changed jsb (its UUID seeds
 * every checksum) redoes them all.
 */
static void fix_journal(struct fz_work *w)
{
	const struct fz_base *b = w->base;
	struct fzj j;
	size_t k;
	int all;

	if (!b->jsb || journal_params(w, &j))
		return;
	all = w->dirty_map[b->jsb];
	for (k = 0; k < b->njlog; k++)
		if (b->jlog[k].kind == FZJ_K_DATA &&
		    (all || w->dirty_map[b->jlog[k].phys]))
			fix_jlog_data(w, &j, &b->jlog[k]);
	if (!fzj_has_csum(&j))
		return;
	for (k = 0; k < b->njlog; k++) {
		const struct fz_jlog *e = &b->jlog[k];
		unsigned char *p = blk_ptr(w, e->phys);

		if (!all && !w->dirty_map[e->phys])
			continue;
		mark_dirty(w, e->phys);
		if (e->kind == FZJ_K_DESC || e->kind == FZJ_K_REVOKE)
			set_be_csum(p, b->bs, b->bs - 4, j.seed);
		else if (e->kind == FZJ_K_COMMIT)
			set_be_csum(p, b->bs, 16, j.seed);
	}
	if (all)
		set_be_csum(blk_ptr(w, b->jsb), FZJ_SB_SIZE, FZJ_SB_CHECKSUM,
			    ~0U);
}

/*
 * Dependencies first: bitmaps change descriptors, descriptors have their
 * own checksum; the superblock's covers only itself.  The journal last:
 * its checksums cover logged copies whatever they hold.
 */
static void fix_checksums(struct fz_work *w)
{
	const struct fz_base *b = w->base;
	size_t i, n = w->ndirty;

	for (i = 0; i < n; i++) {
		const struct fz_region *r = fz_find_region(b, w->dirty[i]);

		if (r && r->type != FZ_GDT && r->type != FZ_SB &&
		    r->type != FZ_JSB && r->type != FZ_JLOG)
			fix_region(w, r);
	}
	for (i = 0; i < w->ndirty; i++) {
		const struct fz_region *r = fz_find_region(b, w->dirty[i]);

		if (r && r->type == FZ_GDT)
			fix_descs(w, r);
	}
	for (i = 0; i < w->ndirty; i++) {
		const struct fz_region *r = fz_find_region(b, w->dirty[i]);

		if (r && r->type == FZ_SB)
			fix_super(w, r);
	}
	fix_journal(w);
}

const struct fz_base *fz_apply(struct fz_work *w, struct fz_base *bases,
			       int nbases, const uint8_t *input, size_t len)
{
	const struct fz_base *b = &bases[len ? input[0] % nbases : 0];

	reset_work(w, b);
	if (len <= FZ_HEADER)
		return b;
	apply_records(w, b, input, len);
	if (!(input[1] & FZ_FLAG_STALE))
		fix_checksums(w);
	return b;
}
