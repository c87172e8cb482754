/*
 * test_retention.c - the snapshot timeline (retention.h): timeline names
 * are parsed strictly and round-trip, retention specs are read or refused
 * with one clear line, and which snapshots a spec keeps, at a fake "now",
 * across the edges of hours, days, ISO weeks, months and years - checked
 * by hand for the edges and against a model built on the C library's
 * own calendar (gmtime_r, strftime %G-%V) for random timelines.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fixture.h"
#include "nextfs/retention.h"

/* Seconds since the epoch of a UTC date, by the C library. */
static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = s;
	return (int64_t)timegm(&tm);
}

static const char *name_of(int64_t t, char *buf)
{
	nx_tl_name_format(t, buf);
	return buf;
}

START_TEST(test_name_format_and_parse)
{
	static const int64_t samples[][6] = {
		{ 1970, 1, 1, 0, 0, 0 }, { 2024, 2, 29, 23, 59, 59 },
		{ 2026, 12, 4, 11, 54, 11 }, { 2000, 2, 29, 12, 0, 0 },
		{ 9999, 12, 31, 23, 59, 59 }, { 2100, 3, 1, 0, 0, 1 },
	};
	char buf[NX_TL_NAME_SIZE], want[64];
	int64_t t, back;
	size_t i;

	for (i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
		const int64_t *s = samples[i];

		t = utc((int)s[0], (int)s[1], (int)s[2], (int)s[3], (int)s[4],
			(int)s[5]);
		snprintf(want, sizeof(want),
			 "@GMT-%04d.%02d.%02d-%02d.%02d.%02d", (int)s[0],
			 (int)s[1], (int)s[2], (int)s[3], (int)s[4], (int)s[5]);
		ck_assert_str_eq(name_of(t, buf), want);
		ck_assert_int_eq(nx_tl_name_parse(buf, &back), 0);
		ck_assert_int_eq(back, t);
	}
	/* Random times agree with gmtime_r both ways. */
	srandom(18);
	for (i = 0; i < 20000; i++) {
		struct tm tm;
		time_t tt = (time_t)(random() % 253402300800LL);	/* < 10000 */

		gmtime_r(&tt, &tm);
		strftime(want, sizeof(want), "@GMT-%Y.%m.%d-%H.%M.%S", &tm);
		ck_assert_str_eq(name_of(tt, buf), want);
		ck_assert_int_eq(nx_tl_name_parse(want, &back), 0);
		ck_assert_int_eq(back, tt);
	}
}
END_TEST

START_TEST(test_name_parse_is_strict)
{
	static const char *const bad[] = {
		"", "monday", "@GMT-", "@GMT-2026.12.04-11.54",
		"@GMT-2026.12.04-11.54.110", "@gmt-2026.12.04-11.54.11",
		"@GMT_2026.12.04-11.54.11", "@GMT-2026-12-04-11.54.11",
		"@GMT-2026.12.04_11.54.11", "@GMT-2026.12.04-11:54:11",
		"@GMT-2026.13.04-11.54.11", "@GMT-2026.00.04-11.54.11",
		"@GMT-2026.02.29-11.54.11", "@GMT-2100.02.29-00.00.00",
		"@GMT-2026.04.31-00.00.00", "@GMT-2026.12.00-00.00.00",
		"@GMT-2026.12.04-24.00.00", "@GMT-2026.12.04-11.60.00",
		"@GMT-2026.12.04-11.54.60", "@GMT-1969.12.31-23.59.59",
		"@GMT-2026.12.4 -11.54.11", "@GMT-2026.12.+4-11.54.11",
		"@GMT-2026.12.04-11.54.1a", " @GMT-2026.12.04-11.54.11",
		"x@GMT-2026.12.04-11.54.1",
	};
	int64_t t;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(nx_tl_name_parse(bad[i], &t) == -1,
			      "'%s' parsed as a timeline name", bad[i]);
	ck_assert_int_eq(nx_tl_name_parse("@GMT-2024.02.29-00.00.00", &t), 0);
}
END_TEST

static void spec_ok(const char *s, unsigned last, unsigned hourly,
		    unsigned daily, unsigned weekly, unsigned monthly,
		    unsigned yearly)
{
	struct nx_keep_spec k;
	char msg[256] = "";

	ck_assert_msg(nx_keep_parse(s, &k, msg, sizeof(msg)) == 0,
		      "'%s' refused: %s", s, msg);
	ck_assert_uint_eq(k.count[NX_KEEP_LAST], last);
	ck_assert_uint_eq(k.count[NX_KEEP_HOURLY], hourly);
	ck_assert_uint_eq(k.count[NX_KEEP_DAILY], daily);
	ck_assert_uint_eq(k.count[NX_KEEP_WEEKLY], weekly);
	ck_assert_uint_eq(k.count[NX_KEEP_MONTHLY], monthly);
	ck_assert_uint_eq(k.count[NX_KEEP_YEARLY], yearly);
}

/* SPEC is refused with one line that contains WANT. */
static void spec_bad(const char *s, const char *want)
{
	struct nx_keep_spec k;
	char msg[256] = "";

	ck_assert_msg(nx_keep_parse(s, &k, msg, sizeof(msg)) == EINVAL,
		      "'%s' accepted", s);
	ck_assert_msg(strstr(msg, want) != NULL, "'%s': message '%s' lacks "
		      "'%s'", s, msg, want);
	ck_assert_ptr_null(strchr(msg, '\n'));
}

START_TEST(test_spec_parse)
{
	spec_ok("last=10,hourly=24,daily=7,weekly=4,monthly=12,yearly=3",
		10, 24, 7, 4, 12, 3);
	spec_ok("daily=7:hourly=24", 0, 24, 7, 0, 0, 0);
	spec_ok("yearly=1,last=0:monthly=2", 0, 0, 0, 0, 2, 1);
	spec_ok("last=1000000", 1000000, 0, 0, 0, 0, 0);
	spec_bad("", "empty");
	spec_bad("daily", "daily needs a count");
	spec_bad("daily=", "daily needs a count");
	spec_bad("daily=x", "not a count");
	spec_bad("daily=-1", "not a count");
	spec_bad("daily= 1", "not a count");
	spec_bad("daily=1000001", "not a count");
	spec_bad("daily=99999999999999999999", "not a count");
	spec_bad("minutely=5", "unknown rule 'minutely'");
	spec_bad("Daily=5", "unknown rule");
	spec_bad("daily=1,,hourly=2", "empty entry");
	spec_bad("daily=1,", "empty entry");
	spec_bad("daily=1,daily=2", "daily given twice");
	spec_bad("last=0", "keeps no snapshot");
	spec_bad("last=0:daily=0", "keeps no snapshot");
}
END_TEST

START_TEST(test_duration_parse)
{
	static const struct { const char *s; unsigned secs; } good[] = {
		{ "1s", 1 }, { "30s", 30 }, { "15m", 900 }, { "1h", 3600 },
		{ "1d", 86400 }, { "366d", 366 * 86400 },
	};
	static const char *const bad[] = {
		"", "0s", "1", "s", "1x", "-1s", "1.5h", "367d", "1h30m",
		" 1s", "1S", "99999999999999999999s",
	};
	char msg[256];
	unsigned v;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ck_assert_int_eq(nx_duration_parse(good[i].s, &v, msg,
						   sizeof(msg)), 0);
		ck_assert_uint_eq(v, good[i].secs);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg[0] = 0;
		ck_assert_msg(nx_duration_parse(bad[i], &v, msg, sizeof(msg)) ==
			      EINVAL, "'%s' accepted", bad[i]);
		ck_assert_ptr_nonnull(strstr(msg, "bad duration"));
	}
}
END_TEST

/* ------------------------------------------------------------ decisions */

#define MAXN	64

struct case_ {
	struct nx_keep_item it[MAXN];
	char names[MAXN][NX_TL_NAME_SIZE + 16];
	size_t n;
};

static void add_time(struct case_ *c, int64_t t)
{
	nx_tl_name_format(t, c->names[c->n]);
	c->it[c->n].name = c->names[c->n];
	c->n++;
}

static void add_name(struct case_ *c, const char *name)
{
	snprintf(c->names[c->n], sizeof(c->names[0]), "%s", name);
	c->it[c->n].name = c->names[c->n];
	c->n++;
}

static void decide(struct case_ *c, const char *spec, int64_t now)
{
	struct nx_keep_spec k;
	char msg[256];

	ck_assert_int_eq(nx_keep_parse(spec, &k, msg, sizeof(msg)), 0);
	ck_assert_int_eq(nx_keep_decide(&k, now, c->it, c->n), 0);
}

/* The kept items as a string of 'K'/'-', in input order. */
static const char *kept(const struct case_ *c)
{
	static char s[MAXN + 1];
	size_t i;

	for (i = 0; i < c->n; i++)
		s[i] = c->it[i].keep ? 'K' : '-';
	s[c->n] = 0;
	return s;
}

static const int64_t far_future = 300000000000LL;

START_TEST(test_only_timeline_names_are_eligible)
{
	struct case_ c = { .n = 0 };
	int64_t t0 = utc(2026, 12, 4, 10, 0, 0);

	add_name(&c, "monday");
	add_time(&c, t0);
	add_name(&c, "@GMT-2026.12.04-10.00.0");	/* not strict */
	add_time(&c, t0 + 60);
	add_name(&c, "@GMT-2026.02.30-10.00.00");	/* no such day */
	add_time(&c, t0 + 120);
	add_name(&c, "before-upgrade");
	decide(&c, "last=1", far_future);
	ck_assert_str_eq(kept(&c), "K-K-KKK");
	ck_assert_int_eq(c.it[0].timeline, 0);
	ck_assert_int_eq(c.it[2].timeline, 0);
	ck_assert_int_eq(c.it[1].timeline, 1);
	ck_assert_uint_eq(c.it[0].reasons, 0);
	ck_assert_uint_eq(c.it[5].reasons, 1U << NX_KEEP_LAST);
	/* Named snapshots take no place in a period either. */
	decide(&c, "hourly=1", far_future);
	ck_assert_str_eq(kept(&c), "K-K-KKK");
}
END_TEST

START_TEST(test_future_snapshots_kept_not_counted)
{
	struct case_ c = { .n = 0 };
	int64_t now = utc(2026, 12, 4, 12, 0, 0);

	add_time(&c, now - 7200);
	add_time(&c, now - 3600);
	add_time(&c, now);		/* "now" itself is not the future */
	add_time(&c, now + 1);		/* the clock went back */
	add_time(&c, now + 86400 * 365);
	decide(&c, "last=2", now);
	ck_assert_str_eq(kept(&c), "-KKKK");
	ck_assert_int_eq(c.it[3].timeline, 0);
	ck_assert_uint_eq(c.it[3].reasons, 0);
}
END_TEST

START_TEST(test_last_n)
{
	struct case_ c = { .n = 0 };
	int64_t t0 = utc(2026, 12, 4, 12, 0, 0);
	int i;

	/* Input order does not matter: newest first is by the names. */
	for (i = 0; i < 6; i++)
		add_time(&c, t0 + ((i * 5) % 6) * 10);	/* 0, 50, 40, ... */
	decide(&c, "last=3", far_future);
	ck_assert_str_eq(kept(&c), "-KKK--");
	decide(&c, "last=4", far_future);
	ck_assert_str_eq(kept(&c), "-KKKK-");
	decide(&c, "last=100", far_future);
	ck_assert_str_eq(kept(&c), "KKKKKK");

	/*
	 * Ties: names are unique, so equal times cannot come from a volume;
	 * given them anyway, the decision is still one per slot and
	 * deterministic (the later item counts as the newer).
	 */
	c.n = 0;
	add_time(&c, t0);
	add_time(&c, t0);
	add_time(&c, t0 - 1);
	decide(&c, "last=1", far_future);
	ck_assert_str_eq(kept(&c), "-K-");
	decide(&c, "hourly=1", far_future);
	ck_assert_str_eq(kept(&c), "-K-");
}
END_TEST

START_TEST(test_newest_of_each_period)
{
	struct case_ c = { .n = 0 };
	int64_t h = utc(2026, 12, 4, 9, 0, 0);

	/* three snapshots in hour 9, two in hour 10, one in hour 12 */
	add_time(&c, h + 1);
	add_time(&c, h + 1800);
	add_time(&c, h + 3599);		/* newest of hour 9 */
	add_time(&c, h + 3600);		/* hour 10 begins */
	add_time(&c, h + 7199);		/* newest of hour 10 */
	add_time(&c, h + 3 * 3600 + 5);	/* hour 12 (hour 11 has none) */
	decide(&c, "hourly=2", far_future);
	ck_assert_str_eq(kept(&c), "----KK");
	/* The last N periods *that have one*: hour 11 is skipped. */
	decide(&c, "hourly=3", far_future);
	ck_assert_str_eq(kept(&c), "--K-KK");
	decide(&c, "hourly=100", far_future);
	ck_assert_str_eq(kept(&c), "--K-KK");
	/* Overlapping rules: both reasons recorded, kept once. */
	decide(&c, "last=1,hourly=1,daily=1", far_future);
	ck_assert_str_eq(kept(&c), "-----K");
	ck_assert_uint_eq(c.it[5].reasons, (1U << NX_KEEP_LAST) |
			  (1U << NX_KEEP_HOURLY) | (1U << NX_KEEP_DAILY));
}
END_TEST

START_TEST(test_day_boundary)
{
	struct case_ c = { .n = 0 };
	int64_t mid = utc(2026, 12, 5, 0, 0, 0);

	add_time(&c, mid - 86400);	/* Dec 4 00:00:00 */
	add_time(&c, mid - 1);		/* Dec 4 23:59:59 */
	add_time(&c, mid);		/* Dec 5 00:00:00 */
	add_time(&c, mid + 1);		/* Dec 5 00:00:01 */
	decide(&c, "daily=2", far_future);
	ck_assert_str_eq(kept(&c), "-K-K");
	decide(&c, "daily=1", far_future);
	ck_assert_str_eq(kept(&c), "---K");
}
END_TEST

START_TEST(test_iso_week_boundaries)
{
	struct case_ c = { .n = 0 };

	add_time(&c, utc(2026, 11, 28, 12, 0, 0));	/* Sat, week 48 */
	add_time(&c, utc(2026, 11, 29, 23, 59, 59));	/* Sun, week 48 */
	add_time(&c, utc(2026, 11, 30, 0, 0, 0));	/* Mon, week 49 */
	add_time(&c, utc(2026, 12, 6, 23, 59, 59));	/* Sun, week 49 */
	decide(&c, "weekly=2", far_future);
	ck_assert_str_eq(kept(&c), "-K-K");

	/* Thu 2026-12-31 and Fri 2027-01-01 share ISO week 2026-W53. */
	c.n = 0;
	add_time(&c, utc(2026, 12, 27, 10, 0, 0));	/* Sun, week 52 */
	add_time(&c, utc(2026, 12, 31, 10, 0, 0));	/* Thu, week 53 */
	add_time(&c, utc(2027, 1, 1, 10, 0, 0));	/* Fri, week 53 */
	add_time(&c, utc(2027, 1, 4, 0, 0, 0));		/* Mon, 2027-W01 */
	decide(&c, "weekly=2", far_future);
	ck_assert_str_eq(kept(&c), "--KK");
	decide(&c, "weekly=3", far_future);
	ck_assert_str_eq(kept(&c), "K-KK");
	/* ... while the years split there. */
	decide(&c, "yearly=2", far_future);
	ck_assert_str_eq(kept(&c), "-K-K");
}
END_TEST

START_TEST(test_month_and_year_boundaries)
{
	struct case_ c = { .n = 0 };

	add_time(&c, utc(2024, 1, 31, 23, 59, 59));
	add_time(&c, utc(2024, 2, 1, 0, 0, 0));
	add_time(&c, utc(2024, 2, 29, 23, 59, 59));	/* leap day */
	add_time(&c, utc(2024, 3, 1, 0, 0, 0));
	add_time(&c, utc(2024, 12, 31, 23, 59, 59));
	add_time(&c, utc(2025, 1, 1, 0, 0, 0));
	decide(&c, "monthly=3", far_future);
	ck_assert_str_eq(kept(&c), "---KKK");
	decide(&c, "monthly=5", far_future);
	ck_assert_str_eq(kept(&c), "K-KKKK");
	decide(&c, "yearly=1", far_future);
	ck_assert_str_eq(kept(&c), "-----K");
	decide(&c, "yearly=2", far_future);
	ck_assert_str_eq(kept(&c), "----KK");
}
END_TEST

START_TEST(test_decide_refuses_empty_spec)
{
	struct nx_keep_spec k;
	struct case_ c = { .n = 0 };

	memset(&k, 0, sizeof(k));
	add_time(&c, 1000000);
	ck_assert_int_eq(nx_keep_decide(&k, far_future, c.it, c.n), EINVAL);
}
END_TEST

/* ------------------------------------------------- against a model */

/* The period of RULE holding T, by the C library's calendar. */
static void model_key(int rule, int64_t t, char *buf, size_t len)
{
	static const char *const fmt[NX_KEEP_NRULES] = {
		"", "%Y-%m-%d %H", "%Y-%m-%d", "%G-W%V", "%Y-%m", "%Y"
	};
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, len, fmt[rule], &tm);
}

/*
 * Keep set by the definition, written differently: for each rule, the
 * distinct periods, newest first; the first N of them; in each, the
 * item with the greatest time.
 */
static void model(const struct nx_keep_spec *k, const int64_t *t, size_t n,
		  int *keep)
{
	char keys[MAXN][32];
	size_t i, j;
	int rule;

	for (i = 0; i < n; i++) {
		size_t newer = 0;

		for (j = 0; j < n; j++)
			newer += t[j] > t[i];
		keep[i] = newer < k->count[NX_KEEP_LAST];
	}
	for (rule = NX_KEEP_HOURLY; rule < NX_KEEP_NRULES; rule++) {
		for (i = 0; i < n; i++)
			model_key(rule, t[i], keys[i], sizeof(keys[i]));
		for (i = 0; i < n; i++) {
			int newest = 1;
			size_t newer_periods = 0;

			for (j = 0; j < n; j++)
				if (!strcmp(keys[j], keys[i]) && t[j] > t[i])
					newest = 0;
			if (!newest)
				continue;
			/* periods with a snapshot that are newer than i's */
			for (j = 0; j < n; j++) {
				size_t m;
				int first = 1;

				/* zero-padded: string order is time order */
				if (strcmp(keys[j], keys[i]) <= 0)
					continue;
				for (m = 0; m < j; m++)
					if (!strcmp(keys[m], keys[j]))
						first = 0;
				newer_periods += first;
			}
			if (newer_periods < k->count[rule])
				keep[i] = 1;
		}
	}
}

START_TEST(test_random_timelines_match_model)
{
	int64_t base = utc(2024, 12, 20, 0, 0, 0), t[MAXN];
	/* time scales: seconds to years apart */
	static const int64_t spread[] = { 600, 7200, 86400, 86400 * 9,
					  86400 * 40, 86400 * 500 };
	int keep[MAXN], round;
	size_t i;

	srandom(1818);
	for (round = 0; round < 3000; round++) {
		struct case_ c = { .n = 0 };
		struct nx_keep_spec k;
		int rule;

		memset(&k, 0, sizeof(k));
		for (rule = 0; rule < NX_KEEP_NRULES; rule++)
			if (random() % 2)
				k.count[rule] = (unsigned)(random() % 6);
		k.count[random() % NX_KEEP_NRULES] += 1;
		c.n = 0;
		for (i = 0; i < (size_t)(random() % MAXN); i++) {
			int64_t v = base + random() % spread[round % 6];
			size_t j;
			int dup = 0;

			for (j = 0; j < c.n; j++)
				dup |= t[j] == v;
			if (dup)
				continue;	/* names are unique */
			t[c.n] = v;
			add_time(&c, v);
		}
		ck_assert_int_eq(nx_keep_decide(&k, far_future, c.it, c.n), 0);
		model(&k, t, c.n, keep);
		for (i = 0; i < c.n; i++)
			ck_assert_msg(c.it[i].keep == keep[i],
				      "round %d: %s kept %d, model %d", round,
				      c.it[i].name, c.it[i].keep, keep[i]);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("retention");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_name_format_and_parse);
	tcase_add_test(tc, test_name_parse_is_strict);
	tcase_add_test(tc, test_spec_parse);
	tcase_add_test(tc, test_duration_parse);
	tcase_add_test(tc, test_only_timeline_names_are_eligible);
	tcase_add_test(tc, test_future_snapshots_kept_not_counted);
	tcase_add_test(tc, test_last_n);
	tcase_add_test(tc, test_newest_of_each_period);
	tcase_add_test(tc, test_day_boundary);
	tcase_add_test(tc, test_iso_week_boundaries);
	tcase_add_test(tc, test_month_and_year_boundaries);
	tcase_add_test(tc, test_decide_refuses_empty_spec);
	tcase_add_test(tc, test_random_timelines_match_model);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
