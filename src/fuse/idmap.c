/*
 * idmap.c - "-o fakeroot": trade root's ids with the mounting user's
 * (see include/nextfs/idmap.h for the contract).
 *
 * Why a trade and not "everything shows as mine": a mount must not
 * change what the volume records.  With a plain squash, a file of the
 * user's own would read back as root's after a chown to "me", and chown
 * could not say which one was meant.
 */
#include "nextfs/idmap.h"

#include <string.h>
#include <unistd.h>

void nx_idmap_init(struct nx_idmap *map, int fakeroot)
{
	memset(map, 0, sizeof(*map));
	map->uid = getuid();
	map->gid = getgid();
	/* Root trading with root changes nothing. */
	map->on = fakeroot && (map->uid != 0 || map->gid != 0);
}

/* 0 and MINE trade places; every other id stays. */
static unsigned trade(unsigned id, unsigned mine)
{
	if (id == 0)
		return mine;
	return id == mine ? 0 : id;
}

uid_t nx_idmap_uid(const struct nx_idmap *map, uid_t uid)
{
	return map->on ? trade(uid, map->uid) : uid;
}

gid_t nx_idmap_gid(const struct nx_idmap *map, gid_t gid)
{
	return map->on ? trade(gid, map->gid) : gid;
}

void nx_idmap_stat(const struct nx_idmap *map, struct stat *st)
{
	st->st_uid = nx_idmap_uid(map, st->st_uid);
	st->st_gid = nx_idmap_gid(map, st->st_gid);
}

/*
 * Root (let in by allow_root or allow_other) stays root: the kernel has
 * already let it do anything, and judged as the mounting user the
 * daemon's own checks would refuse what the kernel allowed.
 */
void nx_idmap_cred(const struct nx_idmap *map, struct nx_cred *cred)
{
	int i;

	if (cred->uid == 0)
		return;
	cred->uid = nx_idmap_uid(map, cred->uid);
	cred->gid = nx_idmap_gid(map, cred->gid);
	for (i = 0; i < cred->ngroups; i++)
		cred->groups[i] = nx_idmap_gid(map, cred->groups[i]);
}
