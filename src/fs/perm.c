/*
 * perm.c - credential helpers and the kernel's permission rules
 * (generic_permission, may_delete, inode_owner_or_capable).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "nextfs/perm.h"

void nx_cred_self(struct nx_cred *cred)
{
	int n;

	memset(cred, 0, sizeof(*cred));
	cred->uid = geteuid();
	cred->gid = getegid();
	cred->umask = 022;
	n = getgroups(NX_MAX_GROUPS, cred->groups);
	cred->ngroups = n > 0 ? n : 0;
}

int nx_cred_in_group(const struct nx_cred *cred, gid_t gid)
{
	int i;

	if (cred->gid == gid)
		return 1;
	for (i = 0; i < cred->ngroups; i++)
		if (cred->groups[i] == gid)
			return 1;
	return 0;
}

static uid_t owner_of(const struct ext2_inode *inode)
{
	return inode_uid(*inode);
}

static gid_t group_of(const struct ext2_inode *inode)
{
	return inode_gid(*inode);
}

errcode_t nx_perm_access(const struct nx_cred *cred,
			 const struct ext2_inode *inode, int mask)
{
	mode_t mode = inode->i_mode;
	int granted;

	mask &= R_OK | W_OK | X_OK;
	if (nx_cred_is_root(cred)) {
		/*
		 * CAP_DAC_OVERRIDE: read and write always; execute only if
		 * some execute bit is set or it is a directory (search).
		 */
		if (!(mask & X_OK) || S_ISDIR(mode) ||
		    (mode & (S_IXUSR | S_IXGRP | S_IXOTH)))
			return 0;
		return EACCES;
	}
	if (cred->uid == owner_of(inode))
		granted = (mode >> 6) & 7;
	else if (nx_cred_in_group(cred, group_of(inode)))
		granted = (mode >> 3) & 7;
	else
		granted = mode & 7;
	return (granted & mask) == mask ? 0 : EACCES;
}

int nx_perm_is_owner(const struct nx_cred *cred,
		     const struct ext2_inode *inode)
{
	return nx_cred_is_root(cred) || cred->uid == owner_of(inode);
}

errcode_t nx_perm_may_delete(const struct nx_cred *cred,
			     const struct ext2_inode *dir,
			     const struct ext2_inode *victim)
{
	errcode_t err = nx_perm_access(cred, dir, W_OK | X_OK);

	if (err)
		return err;
	/* Sticky directory: only the owner of the entry or the directory. */
	if ((dir->i_mode & S_ISVTX) && !nx_cred_is_root(cred) &&
	    cred->uid != owner_of(victim) && cred->uid != owner_of(dir))
		return EPERM;
	return 0;
}
