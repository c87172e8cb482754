/*
 * test_periodic.c - the periodic thread (periodic.h) behind the daemon's
 * commit timer and snapshot timer: when it ticks, that a failing tick
 * does not end it, and that stopping it is immediate (an unmount must not
 * wait out an hourly snapshot period) yet lets a running tick finish (a
 * take in progress is not cut off before the volume closes).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fixture.h"
#include "nextfs/periodic.h"

/* What the ticks saw; waited on by the test. */
struct probe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned calls;
	unsigned fail_first;		/* this many ticks return EIO */
	struct timespec at[8];		/* CLOCK_REALTIME of each tick */
	pthread_t thread;		/* the thread ticks ran on */
	unsigned hold_ms;		/* each tick lasts this long */
	int finished;			/* the last tick returned */
};

static void probe_init(struct probe *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
}

static void probe_destroy(struct probe *p)
{
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
}

static errcode_t probe_tick(void *arg)
{
	struct probe *p = arg;
	errcode_t err;

	pthread_mutex_lock(&p->mu);
	if (p->calls < 8)
		clock_gettime(CLOCK_REALTIME, &p->at[p->calls]);
	p->thread = pthread_self();
	p->finished = 0;
	err = p->calls < p->fail_first ? EIO : 0;
	p->calls++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (p->hold_ms)
		usleep(p->hold_ms * 1000);
	pthread_mutex_lock(&p->mu);
	p->finished = 1;
	pthread_mutex_unlock(&p->mu);
	return err;
}

/* Wait (at most a minute: a stuck thread fails) for N ticks to start. */
static void wait_calls(struct probe *p, unsigned n)
{
	struct timespec limit;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &limit);
	limit.tv_sec += 60;
	pthread_mutex_lock(&p->mu);
	while (p->calls < n && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&p->cv, &p->mu, &limit);
	pthread_mutex_unlock(&p->mu);
	ck_assert_uint_ge(p->calls, n);
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) +
	       (t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The schedule: wall-clock ticks on multiples, intervals after the last. */
START_TEST(test_next_tick_is_due)
{
	static const struct {
		enum nx_periodic_clock clock;
		unsigned every;
		time_t now_s;
		long now_ns;
		time_t due_s;
		long due_ns;
	} cases[] = {
		{ NX_PERIODIC_WALLCLOCK, 3600, 7205, 500000000, 10800, 0 },
		/* at a multiple exactly: the next one, not this one again */
		{ NX_PERIODIC_WALLCLOCK, 3600, 7200, 0, 10800, 0 },
		/* daily: the next midnight UTC (2026-12-04 10:15 -> 12-05) */
		{ NX_PERIODIC_WALLCLOCK, 86400, 1796379300, 0, 1796428800, 0 },
		{ NX_PERIODIC_WALLCLOCK, 1, 100, 999999999, 101, 0 },
		/* intervals keep the fraction: EVERY after now */
		{ NX_PERIODIC_INTERVAL, 1, 5, 250000000, 6, 250000000 },
		{ NX_PERIODIC_INTERVAL, 3600, 7200, 0, 10800, 0 },
	};
	struct timespec now, due;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		now.tv_sec = cases[i].now_s;
		now.tv_nsec = cases[i].now_ns;
		due = nx_periodic_next(cases[i].clock, cases[i].every, &now);
		ck_assert_int_eq(due.tv_sec, cases[i].due_s);
		ck_assert_int_eq(due.tv_nsec, cases[i].due_ns);
	}
}
END_TEST

/*
 * A real wall-clock thread: one tick per second, never at the start and
 * never early, on a thread of its own; a failing tick is counted and the
 * next one comes anyway.
 */
START_TEST(test_ticks_every_second_through_failures)
{
	struct nx_periodic *t = NULL;
	struct timespec start;
	unsigned long ticks, failed;
	struct probe p;
	unsigned i;

	probe_init(&p);
	p.fail_first = 2;
	clock_gettime(CLOCK_REALTIME, &start);
	ck_assert_int_eq(nx_periodic_start(NX_PERIODIC_WALLCLOCK, 1,
					   probe_tick, &p, &t), 0);
	ck_assert_ptr_nonnull(t);
	wait_calls(&p, 3);
	nx_periodic_stop(t);
	/* the third may still run; the two failures are counted */
	ticks = nx_periodic_count(t, &failed);
	ck_assert_uint_ge(ticks, 2);
	ck_assert_uint_le(ticks, 3);
	ck_assert_uint_eq(failed, 2);
	nx_periodic_join(&t);
	ck_assert_ptr_null(t);
	ck_assert_uint_eq(p.calls, 3);
	ck_assert(!pthread_equal(p.thread, pthread_self()));
	for (i = 0; i < 3; i++) {
		/* each at or after its whole second, each in a later one */
		ck_assert_int_gt(p.at[i].tv_sec,
				 i ? p.at[i - 1].tv_sec : start.tv_sec);
	}
	probe_destroy(&p);
}
END_TEST

/*
 * Stopping a thread that waits for a tick a day away returns at once,
 * on both clocks; no tick runs.  (If the stop did not wake it, the join
 * would wait a day and the test would time out.)
 */
START_TEST(test_stop_wakes_a_waiting_thread)
{
	static const enum nx_periodic_clock clocks[] = {
		NX_PERIODIC_INTERVAL, NX_PERIODIC_WALLCLOCK
	};
	struct nx_periodic *t = NULL;
	struct timespec t0;
	struct probe p;
	unsigned i;

	for (i = 0; i < 2; i++) {
		probe_init(&p);
		ck_assert_int_eq(nx_periodic_start(clocks[i], 86400,
						   probe_tick, &p, &t), 0);
		usleep(100 * 1000);	/* let it go to sleep */
		clock_gettime(CLOCK_MONOTONIC, &t0);
		nx_periodic_stop(t);
		nx_periodic_join(&t);
		ck_assert(seconds_since(&t0) < 30);
		ck_assert_uint_eq(p.calls, 0);
		probe_destroy(&p);
	}
}
END_TEST

/*
 * A stop during a tick lets the tick finish and starts no other: the
 * snapshot timer's take completes before the volume is closed.
 */
START_TEST(test_stop_lets_the_running_tick_finish)
{
	struct nx_periodic *t = NULL;
	struct probe p;

	probe_init(&p);
	p.hold_ms = 300;
	ck_assert_int_eq(nx_periodic_start(NX_PERIODIC_INTERVAL, 1,
					   probe_tick, &p, &t), 0);
	wait_calls(&p, 1);
	nx_periodic_stop(t);		/* returns while the tick runs */
	nx_periodic_join(&t);
	ck_assert_int_eq(p.finished, 1);
	ck_assert_uint_eq(p.calls, 1);
	ck_assert_ptr_null(t);
	/* stopping and joining again, or nothing, is harmless */
	nx_periodic_stop(t);
	nx_periodic_join(&t);
	nx_periodic_join(NULL);
	probe_destroy(&p);
}
END_TEST

/* A period of 0 or no tick is refused, and nothing is started. */
START_TEST(test_bad_arguments_refused)
{
	struct probe p;
	struct nx_periodic *t = (void *)&p;	/* must become NULL */

	ck_assert_int_eq(nx_periodic_start(NX_PERIODIC_INTERVAL, 0,
					   probe_tick, &p, &t), EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(nx_periodic_start(NX_PERIODIC_WALLCLOCK, 1, NULL,
					   &p, &t), EINVAL);
	ck_assert_ptr_null(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("periodic");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_next_tick_is_due);
	tcase_add_test(tc, test_ticks_every_second_through_failures);
	tcase_add_test(tc, test_stop_wakes_a_waiting_thread);
	tcase_add_test(tc, test_stop_lets_the_running_tick_finish);
	tcase_add_test(tc, test_bad_arguments_refused);
	suite_add_tcase(s, tc);
	return nxt_run_suite(s);
}
