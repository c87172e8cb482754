/*
 * fzrun.h - one fuzz execution: patch a base image, put it in a memfd,
 * open and browse it through nxbrowse, and put the memfd back.  Shared by
 * the libFuzzer harness and the standalone tool.
 */
#ifndef NEXTFS_FUZZ_FZRUN_H
#define NEXTFS_FUZZ_FZRUN_H

#include <stddef.h>
#include <stdint.h>
#include "imgpatch.h"
#include "nxbrowse.h"

struct fz_state {
	struct fz_base *bases;
	int nbases;
	struct fz_work work;
	int fd;				/* the memfd the volume is opened from */
	char dev[64];			/* /proc/self/fd/N */
	const struct fz_base *in_fd;	/* base the memfd holds (outside runs) */
	int mask_first_data_block;	/* known-issue masks ($NEXTFS_FUZZ_MASK) */
};

/*
 * Load the bases of DIR ($NEXTFS_FUZZ_BASES, else DEFAULT_DIR).
 * $NEXTFS_FUZZ_MASK (comma separated) steers around bugs already
 * reported, so that a run can find the next one:
 *   first-data-block  skip images whose s_first_data_block is not the
 *                     one the block size implies (libext2fs overflow)
 *   huge-dir          do not list directories over 64 MiB (readdir
 *                     walks every block of the size)
 */
int fz_state_init(struct fz_state *s, const char *default_dir);

void fz_state_free(struct fz_state *s);

/* Print one line per base: size and regions per type. */
void fz_state_describe(const struct fz_state *s, FILE *out);

/*
 * Run INPUT: read-only open and browse (nxb_open_and_browse), or with
 * FZ_FLAG_RW in its flags byte the read-write session (nxb_rw_session).
 * 1 if a mask skipped it, -1 if nxbrowse saw a contract violation (see ST).
 */
int fz_run(struct fz_state *s, const uint8_t *input, size_t len,
	   struct nxb_stats *st);

/* Write the image INPUT produces to PATH. */
int fz_materialize(struct fz_state *s, const uint8_t *input, size_t len,
		   const char *path);

#endif
