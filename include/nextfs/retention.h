/*
 * retention.h - the snapshot timeline: names made of the take time and
 * which of them a retention spec keeps (nextfs(1), "snapshot prune";
 * nextfs-fuse(1), snapshot_every / snapshot_keep).
 * Layer: snap/ (calls fs/ and volume/).
 *
 * Contract:
 * - A timeline name is exactly "@GMT-YYYY.MM.DD-HH.MM.SS" (Samba
 *   vfs_shadow_copy2's default format), a valid UTC date and time in the
 *   years 1970-9999.  nx_tl_name_parse() accepts nothing else, so a name
 *   a person chose is never mistaken for one; the name is the snapshot's
 *   time for retention.
 * - nx_keep_parse() reads "last=N,hourly=N,daily=N,weekly=N,monthly=N,
 *   yearly=N" (any subset, each once, ',' or ':' between entries) and
 *   refuses an empty spec or one that keeps nothing, with one line.
 * - nx_keep_decide() is pure: given the names and the current time it
 *   says, for each, keep (and why) or delete.  Only timeline names not
 *   later than NOW take part; the rest are kept and count for nothing.
 *   A timeline snapshot is kept when it is one of the LAST newest, or
 *   the newest of one of the N newest hours / days / ISO weeks (Monday
 *   to Sunday) / months / years, UTC, that hold a timeline snapshot.
 * - nx_tl_take() takes a snapshot named after the current time through
 *   a callback, waiting for the next second when that name exists.
 * Nothing here touches a volume.
 */
#ifndef NEXTFS_RETENTION_H
#define NEXTFS_RETENTION_H

#include <stddef.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>

/* "@GMT-YYYY.MM.DD-HH.MM.SS" and its NUL. */
#define NX_TL_NAME_SIZE	25

/* Format T (seconds since the epoch, UTC) as a timeline name. */
void nx_tl_name_format(int64_t t, char buf[NX_TL_NAME_SIZE]);
/* 0 and *T if NAME is a timeline name, else -1. */
int nx_tl_name_parse(const char *name, int64_t *t);

/* The periods of a spec, in the order of the reasons below. */
enum nx_keep_rule {
	NX_KEEP_LAST, NX_KEEP_HOURLY, NX_KEEP_DAILY, NX_KEEP_WEEKLY,
	NX_KEEP_MONTHLY, NX_KEEP_YEARLY, NX_KEEP_NRULES
};

struct nx_keep_spec {
	unsigned count[NX_KEEP_NRULES];	/* 0: the rule keeps nothing */
};

/* "last", "hourly", ... */
const char *nx_keep_rule_name(int rule);
/* Parse SPEC; EINVAL with MSG (one line) when it is not valid. */
errcode_t nx_keep_parse(const char *spec, struct nx_keep_spec *keep,
			char *msg, size_t msglen);

/* One snapshot, in and out of nx_keep_decide(). */
struct nx_keep_item {
	const char *name;		/* in */
	unsigned reasons;		/* out: 1 << NX_KEEP_* that keep it */
	int timeline;			/* out: a timeline name, not in the future */
	int keep;			/* out: 1 keep, 0 delete */
};

/*
 * Decide for the N ITEMS (any order) under KEEP at time NOW.  Items that
 * are not timeline snapshots (named by a person, or dated after NOW)
 * get keep = 1, timeline = 0, reasons = 0.  EINVAL if KEEP keeps nothing.
 */
errcode_t nx_keep_decide(const struct nx_keep_spec *keep, int64_t now,
			 struct nx_keep_item *items, size_t n);

/*
 * "30s", "15m", "1h", "1d": 0 and *SECONDS (1 s to 366 days), or EINVAL
 * with MSG.
 */
errcode_t nx_duration_parse(const char *s, unsigned *seconds,
			    char *msg, size_t msglen);

/*
 * Take a timeline snapshot: TAKE(ARG, NAME) with the name of the current
 * second (CLOCK_REALTIME).  When it returns EEXIST (a snapshot of this
 * second exists), wait for the next second and try again, up to
 * NX_TL_TAKE_TRIES names in all.
 * The name used goes to NAME.  Returns what TAKE last returned.
 */
#define NX_TL_TAKE_TRIES	5
errcode_t nx_tl_take(errcode_t (*take)(void *arg, const char *name),
		     void *arg, char name[NX_TL_NAME_SIZE]);

#endif
