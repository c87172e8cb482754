/*
 * perm.h - caller credentials and the kernel's permission rules.
 * Layer: fs/ (calls volume/).
 *
 * Contract: struct nx_cred describes who is asking (from fuse_req_ctx, or
 * filled by tests).  The checks mirror fs/namei.c and fs/attr.c of Linux:
 * uid 0 is treated as holding CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and
 * CAP_FSETID.  Each returns 0 or an errno (EACCES/EPERM).
 */
#ifndef NEXTFS_PERM_H
#define NEXTFS_PERM_H

#include <sys/types.h>
#include <ext2fs/ext2fs.h>

#define NX_MAX_GROUPS 64

struct nx_cred {
	uid_t uid;
	gid_t gid;
	mode_t umask;			/* applied by the caller to new modes */
	int ngroups;			/* supplementary groups in groups[] */
	gid_t groups[NX_MAX_GROUPS];
};

/* Fill CRED for the daemon's own user (tests, offline tools). */
void nx_cred_self(struct nx_cred *cred);

static inline int nx_cred_is_root(const struct nx_cred *c)
{
	return c->uid == 0;
}

int nx_cred_in_group(const struct nx_cred *cred, gid_t gid);

/* May CRED access INODE for MASK (R_OK|W_OK|X_OK)?  0 or EACCES. */
errcode_t nx_perm_access(const struct nx_cred *cred,
			 const struct ext2_inode *inode, int mask);

/*
 * May CRED remove or rename VICTIM out of DIR?  Checks write+search on DIR
 * and the sticky bit.  0, EACCES or EPERM.
 */
errcode_t nx_perm_may_delete(const struct nx_cred *cred,
			     const struct ext2_inode *dir,
			     const struct ext2_inode *victim);

/* Is CRED the owner of INODE, or root?  (chmod, utimens to explicit times) */
int nx_perm_is_owner(const struct nx_cred *cred,
		     const struct ext2_inode *inode);

#endif
