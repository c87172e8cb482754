/*
 * periodic.h - a thread that does one thing at a fixed period until it is
 * stopped.  Layer: volume/ (the bottom); it calls nothing of nextfs, so
 * every layer above may use it.
 *
 * Contract: nx_periodic_start() starts a thread that calls TICK(ARG) once
 * per period, one call at a time, either
 *  - NX_PERIODIC_INTERVAL: EVERY seconds after the previous tick ended
 *    (the first EVERY seconds after the start), on the monotonic clock,
 *    so that setting the time neither stalls nor hurries it; or
 *  - NX_PERIODIC_WALLCLOCK: whenever the UTC time is a multiple of EVERY
 *    seconds (an hourly tick falls on the full hour, and a restart does
 *    not shift it); a step of the clock moves the tick with it.
 * A tick that outlasts its period makes the thread skip the ticks it
 * missed, never queue them.  A tick that fails (returns non-zero) does
 * not stop the thread: the next one comes at its time.  Saying what
 * failed is the tick's business (it knows what it was doing); the helper
 * only counts the ticks and the failures (nx_periodic_count).
 *
 * nx_periodic_stop() asks the thread to end and wakes it at once if it is
 * waiting for its next tick; a tick in progress is finished first.
 * nx_periodic_join() waits for the thread to end (stopping it if nobody
 * did), frees it and sets *P to NULL.  Both accept NULL (and *P NULL), so
 * stopping twice is harmless.  The one who started a thread stops and
 * joins it; a tick must not stop or join its own thread.
 */
#ifndef NEXTFS_PERIODIC_H
#define NEXTFS_PERIODIC_H

#include <time.h>
#include <ext2fs/ext2fs.h>

enum nx_periodic_clock {
	NX_PERIODIC_INTERVAL,	/* EVERY s after the previous tick */
	NX_PERIODIC_WALLCLOCK,	/* at multiples of EVERY s of UTC time */
};

typedef errcode_t (*nx_periodic_tick_fn)(void *arg);

struct nx_periodic;

/* EVERY must be at least 1.  EINVAL, ENOMEM or EAGAIN (no thread). */
errcode_t nx_periodic_start(enum nx_periodic_clock clock, unsigned every,
			    nx_periodic_tick_fn tick, void *arg,
			    struct nx_periodic **out);

void nx_periodic_stop(struct nx_periodic *p);
void nx_periodic_join(struct nx_periodic **p);

/* Ticks run so far (finished), and of those how many failed (FAILED may be NULL). */
unsigned long nx_periodic_count(struct nx_periodic *p,
				unsigned long *failed);

/*
 * When the tick after NOW is due (NOW read from CLOCK_MONOTONIC for an
 * interval, CLOCK_REALTIME for the wall clock): the thread's schedule,
 * exposed so that it can be checked without waiting for it.
 */
struct timespec nx_periodic_next(enum nx_periodic_clock clock,
				 unsigned every, const struct timespec *now);

#endif
