/*
 * retention.c - timeline names and retention specs (retention.h).
 *
 * Dates are computed here rather than with timegm()/gmtime(): the
 * decision must not depend on the process's time zone or locale, and
 * the unit tests feed it times from any year.
 */
#include "nextfs/retention.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TL_PREFIX	"@GMT-"
#define TL_YEAR_MIN	1970
#define TL_YEAR_MAX	9999

/* Days since 1970-01-01 of a proleptic Gregorian date (years >= 1). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = y / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* The inverse, for days >= 0. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = z / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
	*m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static unsigned days_in_month(int64_t y, unsigned m)
{
	static const unsigned char mdays[12] = {
		31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31
	};
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return mdays[m - 1] + (m == 2 && leap);
}

void nx_tl_name_format(int64_t t, char buf[NX_TL_NAME_SIZE])
{
	int64_t y, day = t / 86400, sec = t % 86400;
	unsigned m, d;

	civil_from_days(day, &y, &m, &d);
	snprintf(buf, NX_TL_NAME_SIZE, TL_PREFIX "%04u.%02u.%02u-%02u.%02u.%02u",
		 (unsigned)y % 10000, m, d, (unsigned)(sec / 3600),
		 (unsigned)(sec / 60 % 60), (unsigned)(sec % 60));
}

/* LEN decimal digits at S (no sign, no space), or -1. */
static int64_t digits(const char *s, int len)
{
	int64_t v = 0;
	int i;

	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

int nx_tl_name_parse(const char *name, int64_t *t)
{
	/* @GMT-YYYY.MM.DD-HH.MM.SS: fields at fixed offsets, separators between */
	static const int at[] = { 9, 12, 15, 18, 21 };
	int64_t y, mo, d, h, mi, s;
	int i;

	if (strlen(name) != NX_TL_NAME_SIZE - 1 ||
	    strncmp(name, TL_PREFIX, strlen(TL_PREFIX)))
		return -1;
	for (i = 0; i < 5; i++)
		if (name[at[i]] != (i == 2 ? '-' : '.'))
			return -1;
	y = digits(name + 5, 4);
	mo = digits(name + 10, 2);
	d = digits(name + 13, 2);
	h = digits(name + 16, 2);
	mi = digits(name + 19, 2);
	s = digits(name + 22, 2);
	if (y < TL_YEAR_MIN || y > TL_YEAR_MAX || mo < 1 || mo > 12 ||
	    d < 1 || d > days_in_month(y, (unsigned)mo) || h < 0 || h > 23 ||
	    mi < 0 || mi > 59 || s < 0 || s > 59)
		return -1;
	*t = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
	     h * 3600 + mi * 60 + s;
	return 0;
}

static const char *const rule_names[NX_KEEP_NRULES] = {
	"last", "hourly", "daily", "weekly", "monthly", "yearly"
};

const char *nx_keep_rule_name(int rule)
{
	return rule >= 0 && rule < NX_KEEP_NRULES ? rule_names[rule] : "?";
}

#define KEEP_COUNT_MAX	1000000U

/* One "rule=N" entry of LEN bytes at S into KEEP; SEEN: rules given. */
static errcode_t parse_entry(const char *s, size_t len,
			     struct nx_keep_spec *keep, unsigned *seen,
			     char *msg, size_t msglen)
{
	const char *eq = memchr(s, '=', len);
	unsigned long v = 0;
	size_t i, klen;
	int rule;

	if (!len) {
		snprintf(msg, msglen, "empty entry (two separators in a row?)");
		return EINVAL;
	}
	klen = eq ? (size_t)(eq - s) : len;
	for (rule = 0; rule < NX_KEEP_NRULES; rule++)
		if (strlen(rule_names[rule]) == klen &&
		    !memcmp(rule_names[rule], s, klen))
			break;
	if (rule == NX_KEEP_NRULES) {
		snprintf(msg, msglen, "unknown rule '%.*s' (want last, hourly, "
			 "daily, weekly, monthly or yearly)", (int)klen, s);
		return EINVAL;
	}
	if (!eq || eq + 1 == s + len) {
		snprintf(msg, msglen, "%s needs a count (%s=N)",
			 rule_names[rule], rule_names[rule]);
		return EINVAL;
	}
	for (i = klen + 1; i < len; i++) {
		if (s[i] < '0' || s[i] > '9' || v > KEEP_COUNT_MAX) {
			snprintf(msg, msglen, "%s: '%.*s' is not a count from "
				 "0 to %u", rule_names[rule],
				 (int)(len - klen - 1), eq + 1, KEEP_COUNT_MAX);
			return EINVAL;
		}
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v > KEEP_COUNT_MAX) {
		snprintf(msg, msglen, "%s: '%.*s' is not a count from 0 to %u",
			 rule_names[rule], (int)(len - klen - 1), eq + 1,
			 KEEP_COUNT_MAX);
		return EINVAL;
	}
	if (*seen & (1U << rule)) {
		snprintf(msg, msglen, "%s given twice", rule_names[rule]);
		return EINVAL;
	}
	*seen |= 1U << rule;
	keep->count[rule] = (unsigned)v;
	return 0;
}

static int keeps_something(const struct nx_keep_spec *keep)
{
	int rule;

	for (rule = 0; rule < NX_KEEP_NRULES; rule++)
		if (keep->count[rule])
			return 1;
	return 0;
}

errcode_t nx_keep_parse(const char *spec, struct nx_keep_spec *keep,
			char *msg, size_t msglen)
{
	unsigned seen = 0;
	const char *p = spec;
	errcode_t err;

	memset(keep, 0, sizeof(*keep));
	if (!spec || !*spec) {
		snprintf(msg, msglen, "empty retention spec (want e.g. "
			 "last=10,hourly=24,daily=7)");
		return EINVAL;
	}
	for (;;) {
		size_t len = strcspn(p, ",:");

		err = parse_entry(p, len, keep, &seen, msg, msglen);
		if (err)
			return err;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (!keeps_something(keep)) {
		snprintf(msg, msglen, "'%s' keeps no snapshot (every count is "
			 "0); delete timeline snapshots by name instead", spec);
		return EINVAL;
	}
	return 0;
}

/* The period of rule RULE that T falls in (UTC), as a number. */
static int64_t period_key(int rule, int64_t t)
{
	int64_t day = t / 86400, y;
	unsigned m, d;

	switch (rule) {
	case NX_KEEP_HOURLY:
		return t / 3600;
	case NX_KEEP_DAILY:
		return day;
	case NX_KEEP_WEEKLY:
		/* 1970-01-01 was a Thursday: ISO weeks start 3 days earlier. */
		return (day + 3) / 7;
	case NX_KEEP_MONTHLY:
		civil_from_days(day, &y, &m, &d);
		return y * 12 + m - 1;
	case NX_KEEP_YEARLY:
		civil_from_days(day, &y, &m, &d);
		return y;
	}
	return 0;
}

struct ranked {
	int64_t t;
	size_t idx;
};

/* Newest first; equal times (never for distinct names): later item first. */
static int newest_first(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? 1 : -1;
	return x->idx < y->idx ? 1 : x->idx > y->idx ? -1 : 0;
}

errcode_t nx_keep_decide(const struct nx_keep_spec *keep, int64_t now,
			 struct nx_keep_item *items, size_t n)
{
	struct ranked *r;
	size_t i, nr = 0;
	int rule;

	if (!keeps_something(keep))
		return EINVAL;
	r = calloc(n ? n : 1, sizeof(*r));
	if (!r)
		return ENOMEM;
	for (i = 0; i < n; i++) {
		int64_t t;

		items[i].reasons = 0;
		items[i].timeline = nx_tl_name_parse(items[i].name, &t) == 0 &&
				    t <= now;
		items[i].keep = !items[i].timeline;
		if (items[i].timeline) {
			r[nr].t = t;
			r[nr].idx = i;
			nr++;
		}
	}
	qsort(r, nr, sizeof(*r), newest_first);
	for (i = 0; i < nr && i < keep->count[NX_KEEP_LAST]; i++)
		items[r[i].idx].reasons |= 1U << NX_KEEP_LAST;
	for (rule = NX_KEEP_HOURLY; rule < NX_KEEP_NRULES; rule++) {
		unsigned periods = 0;
		int64_t prev = -1;

		/* The first (newest) of each period, for the newest N periods. */
		for (i = 0; i < nr && periods < keep->count[rule]; i++) {
			int64_t key = period_key(rule, r[i].t);

			if (i && key == prev)
				continue;
			prev = key;
			periods++;
			items[r[i].idx].reasons |= 1U << rule;
		}
	}
	for (i = 0; i < nr; i++)
		items[r[i].idx].keep = items[r[i].idx].reasons != 0;
	free(r);
	return 0;
}

errcode_t nx_duration_parse(const char *s, unsigned *seconds,
			    char *msg, size_t msglen)
{
	static const struct { char unit; unsigned secs; } units[] = {
		{ 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 },
	};
	const unsigned max = 366U * 86400;
	unsigned long v = 0;
	size_t i, len = s ? strlen(s) : 0;

	for (i = 0; i + 1 < len && s[i] >= '0' && s[i] <= '9'; i++) {
		v = v * 10 + (unsigned long)(s[i] - '0');
		if (v > max)
			break;
	}
	if (len >= 2 && i == len - 1 && v >= 1 && v <= max) {
		size_t u;

		for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
			if (s[i] == units[u].unit && v * units[u].secs <= max) {
				*seconds = (unsigned)(v * units[u].secs);
				return 0;
			}
		}
	}
	snprintf(msg, msglen, "bad duration '%s' (want a number and a unit, "
		 "s, m, h or d, from 1s to 366d, e.g. 30s, 15m, 1h, 1d)",
		 s ? s : "");
	return EINVAL;
}

/* Sleep until the wall clock shows the next second. */
static void wait_next_second(void)
{
	struct timespec now, rest;

	clock_gettime(CLOCK_REALTIME, &now);
	rest.tv_sec = 0;
	rest.tv_nsec = 1000000000L - now.tv_nsec;
	while (nanosleep(&rest, &rest) != 0 && errno == EINTR)
		;
}

errcode_t nx_tl_take(errcode_t (*take)(void *arg, const char *name),
		     void *arg, char name[NX_TL_NAME_SIZE])
{
	struct timespec now;
	errcode_t err = EEXIST;
	int tries;

	/*
	 * A few seconds: a collision is another take or two in the same
	 * second, not a stream; past that, EEXIST says what is wrong.
	 */
	for (tries = 0; tries < NX_TL_TAKE_TRIES && err == EEXIST; tries++) {
		if (tries)
			wait_next_second();
		clock_gettime(CLOCK_REALTIME, &now);
		nx_tl_name_format((int64_t)now.tv_sec, name);
		err = take(arg, name);
	}
	return err;
}
