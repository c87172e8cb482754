/*
 * periodic.c - a thread that ticks at a fixed period (periodic.h).
 *
 * The thread sleeps on a condition variable bound to the clock its
 * schedule is written in, so nx_periodic_stop() wakes it at once with a
 * signal, and an unmount never waits out a period.  The mutex is held
 * while the thread waits and released while it ticks: a stop during a
 * tick is seen when the tick returns.
 */
#include "nextfs/periodic.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct nx_periodic {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;		/* signalled to stop */
	int stop;
	enum nx_periodic_clock clock;
	unsigned every;			/* seconds */
	nx_periodic_tick_fn tick;
	void *arg;
	unsigned long ticks, failed;	/* under mu */
};

static clockid_t clock_id(enum nx_periodic_clock clock)
{
	return clock == NX_PERIODIC_WALLCLOCK ? CLOCK_REALTIME :
						CLOCK_MONOTONIC;
}

struct timespec nx_periodic_next(enum nx_periodic_clock clock,
				 unsigned every, const struct timespec *now)
{
	struct timespec due = *now;

	if (clock == NX_PERIODIC_WALLCLOCK) {
		due.tv_sec = (now->tv_sec / every + 1) * every;
		due.tv_nsec = 0;
	} else {
		due.tv_sec += every;
	}
	return due;
}

static int reached(const struct timespec *now, const struct timespec *due)
{
	return now->tv_sec > due->tv_sec ||
	       (now->tv_sec == due->tv_sec && now->tv_nsec >= due->tv_nsec);
}

/* With P->mu held: wait for the next tick; 0 when told to stop. */
static int wait_due(struct nx_periodic *p)
{
	struct timespec now, due;

	clock_gettime(clock_id(p->clock), &now);
	due = nx_periodic_next(p->clock, p->every, &now);
	while (!p->stop) {
		clock_gettime(clock_id(p->clock), &now);
		if (reached(&now, &due))
			return 1;
		pthread_cond_timedwait(&p->cv, &p->mu, &due);
	}
	return 0;
}

static void *periodic_main(void *arg)
{
	struct nx_periodic *p = arg;
	errcode_t err;

	pthread_mutex_lock(&p->mu);
	while (wait_due(p)) {
		pthread_mutex_unlock(&p->mu);
		err = p->tick(p->arg);
		pthread_mutex_lock(&p->mu);
		p->ticks++;
		if (err)
			p->failed++;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static errcode_t init_sync(struct nx_periodic *p)
{
	pthread_condattr_t attr;
	errcode_t err;

	if (pthread_condattr_init(&attr) != 0)
		return ENOMEM;
	err = pthread_condattr_setclock(&attr, clock_id(p->clock));
	if (!err)
		err = pthread_cond_init(&p->cv, &attr);
	pthread_condattr_destroy(&attr);
	if (err)
		return err;
	err = pthread_mutex_init(&p->mu, NULL);
	if (err)
		pthread_cond_destroy(&p->cv);
	return err;
}

errcode_t nx_periodic_start(enum nx_periodic_clock clock, unsigned every,
			    nx_periodic_tick_fn tick, void *arg,
			    struct nx_periodic **out)
{
	struct nx_periodic *p;
	errcode_t err;

	*out = NULL;
	if (!every || !tick)
		return EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ENOMEM;
	p->clock = clock;
	p->every = every;
	p->tick = tick;
	p->arg = arg;
	err = init_sync(p);
	if (err) {
		free(p);
		return err;
	}
	if (pthread_create(&p->thread, NULL, periodic_main, p) != 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return EAGAIN;
	}
	*out = p;
	return 0;
}

void nx_periodic_stop(struct nx_periodic *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void nx_periodic_join(struct nx_periodic **pp)
{
	struct nx_periodic *p = pp ? *pp : NULL;

	if (!p)
		return;
	nx_periodic_stop(p);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
	*pp = NULL;
}

unsigned long nx_periodic_count(struct nx_periodic *p, unsigned long *failed)
{
	unsigned long ticks;

	pthread_mutex_lock(&p->mu);
	ticks = p->ticks;
	if (failed)
		*failed = p->failed;
	pthread_mutex_unlock(&p->mu);
	return ticks;
}
