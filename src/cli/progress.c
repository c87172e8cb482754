/*
 * progress.c - a one-line progress bar on stderr for long operations.
 *
 * Drawn only when stderr is a terminal, and only once the operation has
 * run for a second (short commands print nothing extra).  At most ten
 * redraws a second; the line is erased when the operation ends, so that
 * the command's real output is not interleaved with it.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nextfs/snaptool.h"
#include "cli.h"

struct bar {
	struct timespec start, last;
	int drawn;
};

static struct bar the_bar;

static double since(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) +
	       (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void draw(void *priv, const char *what, uint64_t done, uint64_t total)
{
	struct bar *bar = priv;
	struct timespec now;
	char line[41];
	int pct, fill;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (since(&bar->start, &now) < 1.0 ||
	    (bar->drawn && since(&bar->last, &now) < 0.1 && done < total))
		return;
	bar->last = now;
	pct = total ? (int)(done * 100 / total) : 0;
	if (pct > 100)
		pct = 100;
	fill = pct * 40 / 100;
	memset(line, '#', fill);
	memset(line + fill, '.', 40 - fill);
	line[40] = 0;
	fprintf(stderr, "\r%-18.18s [%s] %3d%%", what, line, pct);
	fflush(stderr);
	bar->drawn = 1;
}

void nx_cli_progress_begin(struct nx_progress *prog)
{
	memset(&the_bar, 0, sizeof(the_bar));
	clock_gettime(CLOCK_MONOTONIC, &the_bar.start);
	prog->fn = isatty(STDERR_FILENO) ? draw : NULL;
	prog->priv = &the_bar;
}

void nx_cli_progress_end(struct nx_progress *prog)
{
	if (the_bar.drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	the_bar.drawn = 0;
	prog->fn = NULL;
}
