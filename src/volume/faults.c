/*
 * faults.c - fault plans for the block I/O layer (see nextfs/faults.h).
 *
 * Tests use these to simulate a crash (every write after the Nth is
 * dropped), a failing disk (EIO) or a full one (ENOSPC) underneath the
 * whole stack, so that recovery and error paths run on real code.
 */
#include <errno.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "nextfs/faults.h"
#include "nextfs/volume.h"

static int parse_u64(const char *s, char **end, uint64_t *v)
{
	unsigned long long x;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	x = strtoull(s, end, 10);
	if (errno)
		return -1;
	*v = x;
	return 0;
}

static errcode_t parse_cut(const char *val, struct nx_faults *f)
{
	char *end;

	if (parse_u64(val, &end, &f->cut_after) || !f->cut_after)
		return EINVAL;
	if (!*end)
		return 0;
	if (!strcmp(end, ":drop"))
		f->cut_mode = NX_FAULT_DROP;
	else if (!strcmp(end, ":eio"))
		f->cut_mode = NX_FAULT_EIO;
	else if (!strcmp(end, ":enospc"))
		f->cut_mode = NX_FAULT_ENOSPC;
	else
		return EINVAL;
	return 0;
}

static errcode_t parse_range(const char *val, struct nx_faults *f)
{
	char *end;

	if (parse_u64(val, &end, &f->read_eio_first))
		return EINVAL;
	f->read_eio_count = 1;
	if (*end == '+' && parse_u64(end + 1, &end, &f->read_eio_count))
		return EINVAL;
	return *end || !f->read_eio_count ? EINVAL : 0;
}

static errcode_t parse_item(char *item, struct nx_faults *f)
{
	char *val = strchr(item, '=');
	uint64_t unit;
	char *end;

	if (!val)
		return EINVAL;
	*val++ = 0;
	if (!strcmp(item, "cut"))
		return parse_cut(val, f);
	if (!strcmp(item, "read_eio"))
		return parse_range(val, f);
	if (!strcmp(item, "slow_read"))
		return parse_u64(val, &end, &f->slow_read_us) || *end ||
		       f->slow_read_us > 10000000 ? EINVAL : 0;
	if (!strcmp(item, "slow_sync"))
		return parse_u64(val, &end, &f->slow_sync_us) || *end ||
		       f->slow_sync_us > 10000000 ? EINVAL : 0;
	if (!strcmp(item, "unit")) {
		if (parse_u64(val, &end, &unit) || *end || unit < 512 ||
		    unit > 65536 || (unit & (unit - 1)))
			return EINVAL;
		f->unit = (uint32_t)unit;
		return 0;
	}
	return EINVAL;
}

errcode_t nx_faults_parse(const char *spec, struct nx_faults *f, char *msg,
			  size_t msglen)
{
	char *copy, *item, *save = NULL;
	errcode_t err = 0;

	memset(f, 0, sizeof(*f));
	f->unit = 4096;
	copy = strdup(spec);
	if (!copy)
		return EXT2_ET_NO_MEMORY;
	for (item = strtok_r(copy, ",", &save); item && !err;
	     item = strtok_r(NULL, ",", &save)) {
		char shown[64];

		snprintf(shown, sizeof(shown), "%s", item);
		err = parse_item(item, f);
		if (err)
			nx_set_msg(msg, msglen, "bad fault spec item '%s' "
				   "(want cut=N[:drop|:eio|:enospc], "
				   "read_eio=FIRST[+COUNT], slow_read=USEC, "
				   "slow_sync=USEC, unit=BYTES)", shown);
	}
	free(copy);
	return err;
}

static int cut_fate(const struct nx_faults *f)
{
	switch (f->cut_mode) {
	case NX_FAULT_EIO:
		return EIO;
	case NX_FAULT_ENOSPC:
		return ENOSPC;
	default:
		return NX_FAULT_SKIP;
	}
}

int nx_faults_on_write(struct nx_faults *f, uint64_t off, uint64_t len)
{
	if (!f || !f->cut_after)
		return 0;
	if (f->writes_done < f->cut_after && !f->writes_cut) {
		f->writes_done++;
		return 0;
	}
	f->writes_cut++;
	return cut_fate(f);
}

int nx_faults_on_read(struct nx_faults *f, uint64_t off, uint64_t len)
{
	uint64_t first, last;

	if (!f || !f->read_eio_count || !len)
		return 0;
	first = off / f->unit;
	last = (off + len - 1) / f->unit;
	if (last < f->read_eio_first ||
	    first >= f->read_eio_first + f->read_eio_count)
		return 0;
	return EIO;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(us / 1000000);
	ts.tv_nsec = (long)(us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void nx_faults_slow_shared_read(const struct nx_faults *f)
{
	if (f && f->slow_read_us)
		sleep_us(f->slow_read_us);
}

void nx_faults_slow_sync(const struct nx_faults *f)
{
	if (f && f->slow_sync_us)
		sleep_us(f->slow_sync_us);
}

int nx_faults_on_sync(struct nx_faults *f)
{
	/* After a cut, a sync cannot make anything durable any more. */
	if (!f || !f->writes_cut)
		return 0;
	return cut_fate(f);
}
