/*
 * fzrun.c - see fzrun.h.
 *
 * The memfd holds the current base between runs; a run writes only the
 * blocks its patches (and checksum fixes) changed, and writes the base's
 * bytes back afterwards, so a run costs what it touches, not the image.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fzrun.h"

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n <= 0)
			return -1;
		buf = (const char *)buf + n;
		len -= n;
		off += n;
	}
	return 0;
}

int fz_state_init(struct fz_state *s, const char *default_dir)
{
	const char *dir = getenv("NEXTFS_FUZZ_BASES");

	const char *mask = getenv("NEXTFS_FUZZ_MASK");

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	fz_work_init(&s->work);
	if (mask && strstr(mask, "first-data-block"))
		s->mask_first_data_block = 1;
	if (mask && strstr(mask, "huge-dir"))
		nxb_max_dir_size = 64ULL << 20;
	if (!dir || !*dir)
		dir = default_dir;
	s->nbases = fz_bases_load_dir(dir, &s->bases);
	if (s->nbases <= 0) {
		fprintf(stderr, "nextfs-fuzz: no usable base images in %s "
			"(set NEXTFS_FUZZ_BASES)\n", dir);
		return -1;
	}
	s->fd = memfd_create("nextfs-fuzz-image", MFD_CLOEXEC);
	if (s->fd < 0) {
		perror("nextfs-fuzz: memfd_create");
		return -1;
	}
	snprintf(s->dev, sizeof(s->dev), "/proc/self/fd/%d", s->fd);
	return 0;
}

void fz_state_free(struct fz_state *s)
{
	int i;

	fz_work_free(&s->work);
	for (i = 0; i < s->nbases; i++)
		fz_base_free(&s->bases[i]);
	free(s->bases);
	if (s->fd >= 0)
		close(s->fd);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

void fz_state_describe(const struct fz_state *s, FILE *out)
{
	int i, t;

	for (i = 0; i < s->nbases; i++) {
		const struct fz_base *b = &s->bases[i];

		fprintf(out, "base %d: %s, %zu KiB, %d snapshot(s), %zu "
			"regions:", i, b->name, b->size >> 10, b->nviews,
			b->nreg);
		for (t = 0; t < FZ_NTYPES; t++)
			if (b->count[t])
				fprintf(out, " %s=%zu", fz_rtype_name(t),
					b->count[t]);
		fputc('\n', out);
	}
}

/* Make the memfd hold exactly what WORK holds. */
static int sync_out(struct fz_state *s)
{
	const struct fz_work *w = &s->work;
	unsigned bs = w->base->bs;
	size_t i;

	if (s->in_fd != w->base) {
		if (ftruncate(s->fd, 0) || write_all(s->fd, w->base->img,
						     w->size, 0))
			return -1;
		s->in_fd = w->base;
	}
	for (i = 0; i < w->ndirty; i++)
		if (write_all(s->fd, w->img + w->dirty[i] * bs, bs,
			      w->dirty[i] * bs))
			return -1;
	return 0;
}

static void restore(struct fz_state *s)
{
	const struct fz_work *w = &s->work;
	unsigned bs = w->base->bs;
	size_t i;

	for (i = 0; i < w->ndirty; i++)
		if (write_all(s->fd, w->base->img + w->dirty[i] * bs, bs,
			      w->dirty[i] * bs))
			s->in_fd = NULL;	/* rewrite all next time */
}

/* The kernel's rule: block 1 for 1 KiB blocks (no bigalloc), else 0. */
static int masked(const struct fz_state *s)
{
	const struct ext2_super_block *sb = (const void *)
		(s->work.img + SUPERBLOCK_OFFSET);
	uint32_t want = s->work.base->bs == 1024 ? 1 : 0;

	return s->mask_first_data_block &&
	       ext2fs_le32_to_cpu(sb->s_first_data_block) != want;
}

int fz_run(struct fz_state *s, const uint8_t *input, size_t len,
	   struct nxb_stats *st)
{
	int ret;

	fz_apply(&s->work, s->bases, s->nbases, input, len);
	if (masked(s)) {
		memset(st, 0, sizeof(*st));
		return 1;
	}
	if (sync_out(s)) {
		perror("nextfs-fuzz: writing the image");
		abort();
	}
	if (len >= FZ_HEADER && input[1] & FZ_FLAG_RW) {
		ret = nxb_rw_session(s->dev, st);
		/* The volume wrote anywhere: the next run rewrites it all. */
		s->in_fd = NULL;
		return ret;
	}
	ret = nxb_open_and_browse(s->dev, st);
	restore(s);
	return ret;
}

int fz_materialize(struct fz_state *s, const uint8_t *input, size_t len,
		   const char *path)
{
	int fd, ret;

	fz_apply(&s->work, s->bases, s->nbases, input, len);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ret = write_all(fd, s->work.img, s->work.size, 0);
	if (close(fd))
		ret = -1;
	return ret;
}
