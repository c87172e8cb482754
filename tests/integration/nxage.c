/*
 * nxage - age an unmounted ext2/3/4 image in a second: cut its free space
 * into a known pattern, as years of creating and deleting files would.
 *
 *   nxage IMAGE PATTERN
 *
 * Two regular files are added to the root directory: /tail, one block at
 * the first free block from the middle of the volume on, and /hog, which
 * takes every free block that PATTERN does not leave free, and always the
 * volume's last block.  Its own indirect or extent-tree blocks
 * come out of the same blocks, so exactly PATTERN's blocks stay free.
 * PATTERN says which free block B stays free (G is B's group, F the
 * volume's first data block):
 *
 *   every:K       B % K == 0 (every:2 every other block, every:3 every
 *                 third)
 *   runs:R:U      runs of R free blocks with U used between them
 *   checker:T     tiles of T blocks, free and used in turn, shifted by
 *                 one tile from one group to the next
 *   lastgroup     the last group (only)
 *   before        every other block below /tail (nothing after it)
 *
 * The files' blocks are not written: they read as whatever the image
 * held there (zeros on a fresh image).  e2fsck -fn finds the result
 * clean.  Exit status 0, or 1 with one line on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <et/com_err.h>
#include <ext2fs/ext2fs.h>

struct pattern {
	char kind;		/* 'e'very, 'r'uns, 'c'hecker, 'l'ast, 'b'efore */
	blk64_t a, b;
	blk64_t tail;		/* /tail's block */
};

/* The blocks /hog takes, in ascending order. */
struct pool {
	blk64_t *v;
	size_t n, next;
};

static struct pool pool;

static int stays_free(ext2_filsys fs, const struct pattern *p, blk64_t b)
{
	blk64_t rel = b - fs->super->s_first_data_block;
	dgrp_t g = ext2fs_group_of_blk2(fs, b);

	switch (p->kind) {
	case 'e':
		return b % p->a == 0;
	case 'r':
		return rel % (p->a + p->b) < p->a;
	case 'c':
		return (rel / p->a + g) % 2 == 0;
	case 'l':
		return g == fs->group_desc_count - 1;
	default:
		return b < p->tail && b % 2 == 0;
	}
}

static int parse_pattern(const char *s, struct pattern *p)
{
	unsigned long long a = 0, b = 0;

	memset(p, 0, sizeof(*p));
	if (sscanf(s, "every:%llu", &a) == 1 && a >= 2)
		p->kind = 'e';
	else if (sscanf(s, "runs:%llu:%llu", &a, &b) == 2 && a && b)
		p->kind = 'r';
	else if (sscanf(s, "checker:%llu", &a) == 1 && a)
		p->kind = 'c';
	else if (!strcmp(s, "lastgroup"))
		p->kind = 'l';
	else if (!strcmp(s, "before"))
		p->kind = 'b';
	else
		return -1;
	p->a = a;
	p->b = b;
	return 0;
}

/* libext2fs's block allocator while /hog is built: the next pool block. */
static errcode_t from_pool(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	if (pool.next >= pool.n)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	*ret = pool.v[pool.next++];
	return 0;
}

/* A new empty regular file NAME in the root directory. */
static errcode_t new_file(ext2_filsys fs, const char *name, ext2_ino_t *ret)
{
	struct ext2_inode inode;
	errcode_t err;

	err = ext2fs_new_inode(fs, EXT2_ROOT_INO, LINUX_S_IFREG | 0644, NULL,
			       ret);
	if (err)
		return err;
	ext2fs_inode_alloc_stats2(fs, *ret, +1, 0);
	memset(&inode, 0, sizeof(inode));
	inode.i_mode = LINUX_S_IFREG | 0644;
	inode.i_links_count = 1;
	inode.i_atime = inode.i_ctime = inode.i_mtime = (__u32)time(NULL);
	if (ext2fs_has_feature_extents(fs->super))
		inode.i_flags |= EXT4_EXTENTS_FL;
	err = ext2fs_write_new_inode(fs, *ret, &inode);
	if (!err && ext2fs_has_feature_extents(fs->super)) {
		ext2_extent_handle_t h;

		/* An empty tree in i_block (the handle writes its header). */
		err = ext2fs_extent_open2(fs, *ret, &inode, &h);
		if (!err) {
			ext2fs_extent_free(h);
			err = ext2fs_write_inode(fs, *ret, &inode);
		}
	}
	if (!err)
		err = ext2fs_link(fs, EXT2_ROOT_INO, name, *ret,
				  EXT2_FT_REG_FILE);
	if (err == EXT2_ET_DIR_NO_SPACE) {
		err = ext2fs_expand_dir(fs, EXT2_ROOT_INO);
		if (!err)
			err = ext2fs_link(fs, EXT2_ROOT_INO, name, *ret,
					  EXT2_FT_REG_FILE);
	}
	return err;
}

/* Map blocks from the pool as INO's data until it is used up. */
static errcode_t fill_from_pool(ext2_filsys fs, ext2_ino_t ino)
{
	struct ext2_inode inode;
	blk64_t lblk = 0, b;
	errcode_t err = 0;

	while (!err && pool.next < pool.n) {
		b = pool.v[pool.next++];
		ext2fs_block_alloc_stats2(fs, b, +1);
		err = ext2fs_bmap2(fs, ino, NULL, NULL, BMAP_SET | BMAP_ALLOC,
				   lblk, NULL, &b);
		if (!err) {
			lblk++;
			continue;
		}
		ext2fs_block_alloc_stats2(fs, b, -1);
		/* The last block went to an indirect or tree block. */
		if (err == EXT2_ET_BLOCK_ALLOC_FAIL)
			err = 0;
		break;
	}
	if (!err)
		err = ext2fs_read_inode(fs, ino, &inode);
	if (!err) {
		ext2fs_iblk_add_blocks(fs, &inode, lblk);
		err = ext2fs_inode_size_set(fs, &inode,
					    (unsigned long long)lblk *
					    fs->blocksize);
	}
	if (!err)
		err = ext2fs_write_inode(fs, ino, &inode);
	return err;
}

/* /tail: one block at the first free one from the middle on. */
static errcode_t make_tail(ext2_filsys fs, struct pattern *p)
{
	blk64_t mid = ext2fs_blocks_count(fs->super) / 2, b;
	ext2_ino_t ino;
	errcode_t err;

	err = ext2fs_find_first_zero_block_bitmap2(fs->block_map, mid,
				ext2fs_blocks_count(fs->super) - 2, &b);
	if (err)
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	p->tail = b;
	err = new_file(fs, "tail", &ino);
	if (err)
		return err;
	pool.v = &p->tail;
	pool.n = 1;
	pool.next = 0;
	return fill_from_pool(fs, ino);
}

static errcode_t make_hog(ext2_filsys fs, const struct pattern *p)
{
	blk64_t b, last = ext2fs_blocks_count(fs->super) - 1;
	ext2_ino_t ino;
	errcode_t err;

	/* The inode and its directory entry first: they may take a block. */
	err = new_file(fs, "hog", &ino);
	if (err)
		return err;
	pool.v = malloc(sizeof(*pool.v) * (last + 1));
	if (!pool.v)
		return EXT2_ET_NO_MEMORY;
	pool.n = 0;
	pool.next = 0;
	/* The last block first: it is taken whatever happens at the end. */
	if (!ext2fs_test_block_bitmap2(fs->block_map, last))
		pool.v[pool.n++] = last;
	for (b = fs->super->s_first_data_block; b < last; b++)
		if (!ext2fs_test_block_bitmap2(fs->block_map, b) &&
		    !stays_free(fs, p, b))
			pool.v[pool.n++] = b;
	err = fill_from_pool(fs, ino);
	free(pool.v);
	return err;
}

int main(int argc, char **argv)
{
	struct pattern p;
	ext2_filsys fs;
	errcode_t err;

	if (argc != 3 || parse_pattern(argv[2], &p)) {
		fprintf(stderr, "usage: nxage IMAGE every:K|runs:R:U|checker:T|"
			"lastgroup|before\n");
		return 1;
	}
	err = ext2fs_open(argv[1], EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0,
			  unix_io_manager, &fs);
	if (err) {
		fprintf(stderr, "nxage: %s: %s\n", argv[1], error_message(err));
		return 1;
	}
	err = ext2fs_read_bitmaps(fs);
	if (!err) {
		ext2fs_set_alloc_block_callback(fs, from_pool, NULL);
		err = make_tail(fs, &p);
	}
	if (!err)
		err = make_hog(fs, &p);
	if (err) {
		fprintf(stderr, "nxage: %s: %s\n", argv[1], error_message(err));
		ext2fs_free(fs);
		return 1;
	}
	err = ext2fs_close_free(&fs);
	if (err) {
		fprintf(stderr, "nxage: %s: %s\n", argv[1], error_message(err));
		return 1;
	}
	return 0;
}
