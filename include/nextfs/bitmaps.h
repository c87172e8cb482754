/*
 * bitmaps.h - loading the allocation bitmaps of a volume at open.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: nx_bitmaps_read(FS) leaves in fs->block_map and fs->inode_map
 * exactly what ext2fs_read_bitmaps() would (the same bits, the same
 * errors: EXT2_ET_BLOCK_BITMAP_READ, EXT2_ET_BLOCK_BITMAP_CSUM_INVALID
 * and their inode twins, the same tail flags), but its cost follows the
 * groups in use, not the size of the volume: a group whose bitmap is
 * uninitialised (BLOCK_UNINIT / INODE_UNINIT with a valid descriptor
 * checksum) costs no read and no work on the bitmap, and the bitmap
 * blocks that must be read are asked of the device all at once
 * (nx_blkio_prefetch) before they are read one by one.  Volumes
 * libext2fs handles differently (bigalloc, image files, a channel that
 * is not nx_blkio's) get ext2fs_read_bitmaps() itself.  Bitmaps already
 * loaded are kept, as ext2fs_read_bitmaps() does.
 */
#ifndef NEXTFS_BITMAPS_H
#define NEXTFS_BITMAPS_H

#include <ext2fs/ext2fs.h>

errcode_t nx_bitmaps_read(ext2_filsys fs);

#endif
