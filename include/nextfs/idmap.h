/*
 * idmap.h - "-o fakeroot": the mounting user acts as the volume's root.
 * Layer: fuse/ (calls every layer below).
 *
 * Contract: with the map on, user id 0 and the mounting user's id trade
 * places between the volume and the kernel, and so do group 0 and the
 * user's group: files the volume records as root's are shown as the
 * user's, and what the user creates or chowns to themselves is recorded
 * as root's.  Trading (not merging) keeps the map its own inverse, so
 * every owner reads back as it was written and nothing on the volume
 * changes by mounting.  Applied at the FUSE boundary only: to every
 * attribute handed to the kernel, to the caller's credentials and to
 * chown's ids.  A caller who is root stays root (it acts as the volume's
 * root too).  For a mounting user who is root the map is the identity.
 * Not translated: ids inside POSIX ACL entries (user:ID, group:ID).
 */
#ifndef NEXTFS_IDMAP_H
#define NEXTFS_IDMAP_H

#include <sys/types.h>
#include <sys/stat.h>
#include "nextfs/perm.h"

struct nx_idmap {
	int on;
	uid_t uid;		/* the mounting user: trades with uid 0 */
	gid_t gid;		/* ... and their group: trades with gid 0 */
};

/* The map for the calling process's user, on if FAKEROOT. */
void nx_idmap_init(struct nx_idmap *map, int fakeroot);

/* Volume <-> kernel, either way (the map is its own inverse). */
uid_t nx_idmap_uid(const struct nx_idmap *map, uid_t uid);
gid_t nx_idmap_gid(const struct nx_idmap *map, gid_t gid);

/* The owner and group of ST, as the kernel is to see them. */
void nx_idmap_stat(const struct nx_idmap *map, struct stat *st);
/* A caller (uid, gid, groups) as the volume's ids; root stays root. */
void nx_idmap_cred(const struct nx_idmap *map, struct nx_cred *cred);

#endif
