/*
 * fuzz_tool.c - nextfs-fuzz-tool: the harness without libFuzzer.
 *
 *   nextfs-fuzz-tool describe
 *       List the base images and their metadata regions.
 *   nextfs-fuzz-tool regions BASE-INDEX
 *       Every region of one base: index, block, kind, owner, view (for
 *       writing a patch program by hand).
 *   nextfs-fuzz-tool corpus DIR
 *       Write the initial corpus: per base an empty program and one no-op
 *       record aimed at the first region of each kind.
 *   nextfs-fuzz-tool run INPUT...
 *       Run patch programs as the fuzzer does and print what the browse saw.
 *   nextfs-fuzz-tool materialize INPUT OUT.img
 *       Write the image a patch program produces (regression images).
 *   nextfs-fuzz-tool browse IMAGE...
 *       Open whole images read-only and browse them.
 *
 * Bases come from $NEXTFS_FUZZ_BASES (default: the build's fuzz/bases).
 * Exit status 1 when a run saw a contract violation, 2 on usage errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <et/com_err.h>
#include "fzrun.h"

#ifndef NX_FUZZ_BASES
#define NX_FUZZ_BASES "fuzz/bases"
#endif

static uint8_t *read_input(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc(n + 1)) &&
	    fread(buf, 1, n, f) == (size_t)n) {
		*len = n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static void print_stats(const char *what, const struct nxb_stats *st)
{
	if (st->open_err) {
		printf("%s: refused: %s\n", what, st->open_msg[0] ?
		       st->open_msg : error_message(st->open_err));
	} else {
		printf("%s: %lu dirs, %lu entries, %lu files (%lu bytes), "
		       "%lu xattrs, %lu views, %lu clean errors\n", what,
		       st->dirs, st->entries, st->files, st->bytes,
		       st->xattrs, st->views, st->errors);
	}
	if (st->violations)
		printf("%s: VIOLATION (%lu): %s\n", what, st->violations,
		       st->violation);
}

static int write_file(const char *path, const uint8_t *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(buf, 1, len, f) == len;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static int cmd_corpus(struct fz_state *s, const char *dir)
{
	char path[4096];
	int i, t;

	if (mkdir(dir, 0755) && errno != EEXIST) {
		perror(dir);
		return 2;
	}
	for (i = 0; i < s->nbases; i++) {
		const struct fz_base *b = &s->bases[i];
		uint8_t in[FZ_HEADER + FZ_RECORD_HDR + 1] = { i, 0 };

		snprintf(path, sizeof(path), "%s/base%02d-empty", dir, i);
		if (write_file(path, in, FZ_HEADER))
			return 2;
		for (t = 0; t < FZ_NTYPES; t++) {
			size_t r;

			for (r = 0; r < b->nreg && b->reg[r].type != t; r++)
				;
			if (r == b->nreg)
				continue;
			/* xor with 0 at offset 0: changes nothing. */
			in[FZ_HEADER + 0] = 1;
			in[FZ_HEADER + 1] = r & 0xff;
			in[FZ_HEADER + 2] = r >> 8;
			in[FZ_HEADER + 3] = 0;
			in[FZ_HEADER + 4] = 0;
			in[FZ_HEADER + 5] = 0;
			in[FZ_HEADER + 6] = 0;
			snprintf(path, sizeof(path), "%s/base%02d-%s", dir, i,
				 fz_rtype_name(t));
			if (write_file(path, in, sizeof(in)))
				return 2;
		}
	}
	return 0;
}

static int cmd_regions(struct fz_state *s, const char *arg)
{
	int i = atoi(arg);
	size_t r;

	if (i < 0 || i >= s->nbases)
		return 2;
	for (r = 0; r < s->bases[i].nreg; r++) {
		const struct fz_region *g = &s->bases[i].reg[r];

		printf("%zu\tblock %llu\t%s\towner %u\tview %d\n", r,
		       (unsigned long long)g->phys, fz_rtype_name(g->type),
		       g->owner, g->view);
	}
	return 0;
}

static int cmd_run(struct fz_state *s, int argc, char **argv)
{
	struct nxb_stats st;
	int i, bad = 0, ret;

	for (i = 0; i < argc; i++) {
		size_t len = 0;
		uint8_t *in = read_input(argv[i], &len);

		if (!in) {
			perror(argv[i]);
			return 2;
		}
		ret = fz_run(s, in, len, &st);
		if (ret < 0)
			bad = 1;
		if (ret > 0)
			printf("%s: skipped ($NEXTFS_FUZZ_MASK)\n", argv[i]);
		else
			print_stats(argv[i], &st);
		free(in);
	}
	return bad;
}

static int cmd_browse(int argc, char **argv)
{
	struct nxb_stats st;
	int i, bad = 0;

	for (i = 0; i < argc; i++) {
		if (nxb_open_and_browse(argv[i], &st))
			bad = 1;
		print_stats(argv[i], &st);
	}
	return bad;
}

static int usage(void)
{
	fprintf(stderr, "usage: nextfs-fuzz-tool describe | regions BASE | "
		"corpus DIR | run INPUT... | materialize INPUT OUT.img | "
		"browse IMAGE...\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct fz_state s;
	size_t len = 0;
	uint8_t *in;
	int ret = 0;

	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "browse"))
		return cmd_browse(argc - 2, argv + 2);
	if (fz_state_init(&s, NX_FUZZ_BASES))
		return 2;
	if (!strcmp(argv[1], "describe")) {
		fz_state_describe(&s, stdout);
	} else if (!strcmp(argv[1], "regions") && argc == 3) {
		ret = cmd_regions(&s, argv[2]);
	} else if (!strcmp(argv[1], "corpus") && argc == 3) {
		ret = cmd_corpus(&s, argv[2]);
	} else if (!strcmp(argv[1], "run")) {
		ret = cmd_run(&s, argc - 2, argv + 2);
	} else if (!strcmp(argv[1], "materialize") && argc == 4) {
		in = read_input(argv[2], &len);
		if (!in || fz_materialize(&s, in, len, argv[3])) {
			perror(argv[2]);
			ret = 2;
		}
		free(in);
	} else {
		ret = usage();
	}
	fz_state_free(&s);
	return ret;
}
