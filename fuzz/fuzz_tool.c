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
 *       record aimed at the first region of each kind, each once for the
 *       read-only open and once for the read-write session.
 *   nextfs-fuzz-tool run INPUT...
 *       Run patch programs as the fuzzer does and print what the browse saw.
 *   nextfs-fuzz-tool materialize INPUT OUT.img
 *       Write the image a patch program produces (regression images).
 *   nextfs-fuzz-tool seed BASE-NAME DAMAGED.img OUT
 *       The patch program that turns base BASE-NAME into DAMAGED.img (of
 *       the same size): raw records, checksums left as they are, written
 *       as OUT (read-only open) and OUT-rw (read-write session).  How
 *       mkseeds.sh feeds tests/integration/mkdamaged.py's damage in.
 *   nextfs-fuzz-tool browse IMAGE...
 *       Open whole images read-only and browse them.
 *   nextfs-fuzz-tool rw IMAGE...
 *       The read-write session (nxb_rw_session) on a copy of each image
 *       (in $TMPDIR); the image itself is not changed.
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
#include "fzjournal.h"
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
	if (st->rw && !st->open_err) {
		printf("%s: read-write: %lu dirs, %lu entries, %lu files, "
		       "%lu views, %lu clean errors; %s; %lu writes ok%s%s; "
		       "close: %s\n", what, st->dirs, st->entries, st->files,
		       st->views, st->errors, st->consistent ?
		       "bitmaps agree with the inodes" :
		       "bitmaps DISAGREE with the inodes (post-close contract "
		       "waived)", st->writes_ok,
		       st->left_open ? ", one file left open" : "",
		       st->snap_taken ? ", snapshot taken" : "",
		       st->close_err ? error_message(st->close_err) : "ok");
		if (st->reopen_err)
			printf("%s: reopen refused: %s\n", what,
			       st->reopen_msg[0] ? st->reopen_msg :
			       error_message(st->reopen_err));
		else
			printf("%s: reopened; second close: %s\n", what,
			       st->close2_err ? error_message(st->close2_err) :
			       "ok");
	} else if (st->open_err) {
		printf("%s: %srefused: %s\n", what, st->rw ? "read-write " : "",
		       st->open_msg[0] ?
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
	for (i = 0; i < 2 * s->nbases; i++) {
		const struct fz_base *b = &s->bases[i / 2];
		const char *mode = i % 2 ? "rw-" : "";
		uint8_t in[FZ_HEADER + FZ_RECORD_HDR + 1] = {
			i / 2, i % 2 ? FZ_FLAG_RW : 0 };

		snprintf(path, sizeof(path), "%s/base%02d-%sempty", dir, i / 2,
			 mode);
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
			snprintf(path, sizeof(path), "%s/base%02d-%s%s", dir,
				 i / 2, mode, fz_rtype_name(t));
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

		printf("%zu\tblock %llu\t%s\towner %u\tview %d", r,
		       (unsigned long long)g->phys, fz_rtype_name(g->type),
		       g->owner, g->view);
		if (g->type == FZ_JLOG && g->owner < s->bases[i].njlog) {
			const struct fz_jlog *e = &s->bases[i].jlog[g->owner];
			static const char *const kinds[] = {
				"descriptor", "logged copy of block", "revoke",
				"commit" };

			printf("\t%s", kinds[e->kind & 3]);
			if (e->kind == FZJ_K_DATA)
				printf(" %llu", (unsigned long long)e->target);
		}
		putchar('\n');
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

/* The read-write session on a scratch copy of each image. */
static int cmd_rw(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	char path[4096], buf[65536];
	struct nxb_stats st;
	int i, bad = 0;

	for (i = 0; i < argc; i++) {
		int in = open(argv[i], O_RDONLY | O_CLOEXEC), out;
		ssize_t n = 0;

		snprintf(path, sizeof(path), "%s/nextfs-fuzz-rw-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		out = mkstemp(path);
		if (in < 0 || out < 0) {
			perror(in < 0 ? argv[i] : path);
			return 2;
		}
		while ((n = read(in, buf, sizeof(buf))) > 0)
			if (write(out, buf, n) != n) {
				n = -1;
				break;
			}
		close(in);
		if (close(out) || n < 0) {
			perror(path);
			unlink(path);
			return 2;
		}
		if (nxb_rw_session(path, &st))
			bad = 1;
		print_stats(argv[i], &st);
		unlink(path);
	}
	return bad;
}

/* Raw records (op 2) for the bytes where IMG differs from base B. */
static size_t diff_records(const struct fz_base *b, const unsigned char *img,
			   uint8_t *out, size_t cap)
{
	size_t pos = 0, i = 0, n, last, k;
	int records = 0;

	while (i < b->size) {
		if (img[i] == b->img[i]) {
			i++;
			continue;
		}
		/* Up to 32 bytes from here, ending at the last that differs. */
		n = b->size - i < 32 ? b->size - i : 32;
		for (last = 0, k = 0; k < n; k++)
			if (img[i + k] != b->img[i + k])
				last = k;
		n = last + 1;
		if (records == FZ_MAX_RECORDS || pos + FZ_RECORD_HDR + n > cap)
			return 0;
		out[pos++] = 2;
		out[pos++] = (uint8_t)(i >> 16);
		out[pos++] = (uint8_t)(i >> 24);
		out[pos++] = (uint8_t)i;
		out[pos++] = (uint8_t)(i >> 8);
		out[pos++] = (uint8_t)(n - 1);
		memcpy(out + pos, img + i, n);
		pos += n;
		records++;
		i += n;
	}
	return pos;
}

static int cmd_seed(struct fz_state *s, const char *base, const char *image,
		    const char *out)
{
	uint8_t prog[FZ_HEADER + FZ_MAX_RECORDS * (FZ_RECORD_HDR + 32)];
	char path[4096];
	unsigned char *img;
	size_t len = 0, n;
	int i, ret = 2;

	for (i = 0; i < s->nbases && strcmp(s->bases[i].name, base); i++)
		;
	img = read_input(image, &len);
	if (i == s->nbases || !img || len != s->bases[i].size) {
		fprintf(stderr, "nextfs-fuzz-tool: %s: no base %s of that "
			"size\n", image, base);
		goto out;
	}
	n = diff_records(&s->bases[i], img, prog + FZ_HEADER,
			 sizeof(prog) - FZ_HEADER);
	if (!n) {
		fprintf(stderr, "nextfs-fuzz-tool: %s differs from %s in no "
			"byte, or in too many for one input\n", image, base);
		goto out;
	}
	prog[0] = (uint8_t)i;
	prog[1] = FZ_FLAG_STALE;
	snprintf(path, sizeof(path), "%s", out);
	if (write_file(path, prog, FZ_HEADER + n))
		goto out;
	prog[1] = FZ_FLAG_STALE | FZ_FLAG_RW;
	snprintf(path, sizeof(path), "%s-rw", out);
	if (write_file(path, prog, FZ_HEADER + n))
		goto out;
	ret = 0;
out:
	free(img);
	return ret;
}

static int usage(void)
{
	fprintf(stderr, "usage: nextfs-fuzz-tool describe | regions BASE | "
		"corpus DIR | run INPUT... | materialize INPUT OUT.img | "
		"seed BASE DAMAGED.img OUT | browse IMAGE... | rw IMAGE...\n");
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
	if (!strcmp(argv[1], "rw"))
		return cmd_rw(argc - 2, argv + 2);
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
	} else if (!strcmp(argv[1], "seed") && argc == 5) {
		ret = cmd_seed(&s, argv[2], argv[3], argv[4]);
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
