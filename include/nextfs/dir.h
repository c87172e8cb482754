/*
 * dir.h - the namespace: lookup, readdir and every operation that adds,
 * removes or moves names (mknod, mkdir, symlink, link, unlink, rmdir,
 * rename with RENAME_NOREPLACE/RENAME_EXCHANGE) plus readlink.
 * Layer: fs/ (calls volume/).
 *
 * Contract: names are validated (empty, '/', longer than 255 bytes ->
 * ENAMETOOLONG; never a corrupt dirent).  Permission checks follow the
 * kernel (search+write on directories, sticky bit) via perm.h.  Link
 * counts, '..' entries, dir_nlink, htree and inline-data directories are
 * kept consistent so that e2fsck -fn stays clean after every call.
 * Unlinking never frees an inode itself: it reports the victim, and the
 * caller calls nx_inode_release() once no open file refers to it.
 * The caller holds the volume lock.
 */
#ifndef NEXTFS_DIR_H
#define NEXTFS_DIR_H

#include <stdint.h>
#include <sys/types.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"
#include "nextfs/perm.h"

#define NX_NAME_MAX 255

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* 0, ENOENT (empty name), EINVAL (contains '/'), ENAMETOOLONG. */
errcode_t nx_name_check(const char *name);

/* Find NAME in DIR (no permission check: the kernel checked search). */
errcode_t nx_lookup(struct nx_volume *vol, ext2_ino_t dir, const char *name,
		    ext2_ino_t *ino);

/*
 * Called for each entry; NEXT is the cookie to pass back to resume after
 * this entry.  Return non-zero to stop (e.g. FUSE buffer full).
 */
typedef int (*nx_filldir_fn)(void *priv, const char *name, size_t namelen,
			     ext2_ino_t ino, unsigned char d_type,
			     uint64_t next);

/*
 * List DIR from cookie POS (0 = start; '.' and '..' included).  Cookies
 * stay valid while entries are added or removed elsewhere in DIR.
 */
errcode_t nx_readdir(struct nx_volume *vol, ext2_ino_t dir, uint64_t pos,
		     nx_filldir_fn fill, void *priv);

/* Regular files, fifos, sockets, char and block devices. */
errcode_t nx_mknod(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, mode_t mode, dev_t rdev,
		   ext2_ino_t *ino);
errcode_t nx_mkdir(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, mode_t mode,
		   ext2_ino_t *ino);
errcode_t nx_symlink(struct nx_volume *vol, const struct nx_cred *cred,
		     ext2_ino_t dir, const char *name, const char *target,
		     ext2_ino_t *ino);
errcode_t nx_link(struct nx_volume *vol, const struct nx_cred *cred,
		  ext2_ino_t ino, ext2_ino_t newdir, const char *newname);

/* *VICTIM (may be NULL) gets the unlinked inode; its nlink may now be 0. */
errcode_t nx_unlink(struct nx_volume *vol, const struct nx_cred *cred,
		    ext2_ino_t dir, const char *name, ext2_ino_t *victim);
errcode_t nx_rmdir(struct nx_volume *vol, const struct nx_cred *cred,
		   ext2_ino_t dir, const char *name, ext2_ino_t *victim);

/*
 * Rename with renameat2() FLAGS.  *REPLACED (may be NULL) gets the inode
 * that lost its name to the rename (0 if none); its nlink may now be 0.
 */
errcode_t nx_rename(struct nx_volume *vol, const struct nx_cred *cred,
		    ext2_ino_t olddir, const char *oldname,
		    ext2_ino_t newdir, const char *newname, unsigned flags,
		    ext2_ino_t *replaced);

/* Target of symlink INO into BUF (NUL terminated if it fits); *LEN its length. */
errcode_t nx_readlink(struct nx_volume *vol, ext2_ino_t ino, char *buf,
		      size_t bufsize, size_t *len);

/*
 * Internal to the namespace module (src/fs/dir.c, namei.c, rename.c):
 * one-entry primitives and shared rules.  Other modules use the calls
 * above.  None of these check permissions or update timestamps.
 */

/* EXT2_FT_* directory entry type for an inode of MODE. */
int nx_dir_file_type(mode_t mode);

/* Add NAME -> INO (of MODE); grows DIR or turns it into an htree. */
errcode_t nx_dir_add_entry(struct nx_volume *vol, ext2_ino_t dir,
			   const char *name, ext2_ino_t ino, mode_t mode);
/* Point the existing entry NAME at INO (of MODE) in place. */
errcode_t nx_dir_set_entry(struct nx_volume *vol, ext2_ino_t dir,
			   const char *name, ext2_ino_t ino, mode_t mode);
/* Remove the entry NAME (ENOENT if absent). */
errcode_t nx_dir_remove_entry(struct nx_volume *vol, ext2_ino_t dir,
			      const char *name);

/* Does DIR hold nothing but '.' and '..'? */
errcode_t nx_dir_is_empty(struct nx_volume *vol, ext2_ino_t dir, int *empty);

/* The '..' of DIR. */
errcode_t nx_dir_get_parent(struct nx_volume *vol, ext2_ino_t dir,
			    ext2_ino_t *parent);
/*
 * Make '..' of DIR point at PARENT.  INODE is the caller's copy of DIR's
 * inode: for inline-data directories '..' lives in it and the caller
 * writes it; block directories are updated on disk here.
 */
errcode_t nx_dir_set_parent(struct nx_volume *vol, ext2_ino_t dir,
			    struct ext2_inode_large *inode, ext2_ino_t parent);

/* Link counts of directories with the kernel's dir_nlink rules. */
int nx_dir_link_max(ext2_filsys fs, const struct ext2_inode_large *dir);
void nx_dir_nlink_inc(ext2_filsys fs, struct ext2_inode_large *dir);
void nx_dir_nlink_dec(struct ext2_inode_large *dir);

/* Kernel may_create()/may_delete() (namei.c).  ISDIR: victim must be a dir. */
errcode_t nx_dir_may_create(const struct nx_cred *cred,
			    const struct ext2_inode_large *dir);
errcode_t nx_dir_may_delete(const struct nx_cred *cred,
			    const struct ext2_inode_large *dir,
			    const struct ext2_inode_large *victim, int isdir);

#endif
