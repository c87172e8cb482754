/*
 * opstats.c - how many requests of each kind the session served (see
 * fuse_ops.h).
 *
 * The session runs a copy of the real operations table in which every
 * operation that has a handler first counts itself and then calls it.
 * One relaxed atomic add per request: cheap enough to stay on always,
 * so that "how many round trips does untar cost per file" can be asked
 * of any mount (the benchmark does) without -d and its logging.
 */
#include "nextfs/fuse_ops.h"

#include <stdio.h>
#include <string.h>

/* X(name, parameters, arguments): every request-carrying operation. */
#define NX_COUNTED_OPS(X)						\
	X(lookup, (fuse_req_t q, fuse_ino_t p, const char *n), (q, p, n)) \
	X(forget, (fuse_req_t q, fuse_ino_t i, uint64_t n), (q, i, n))	\
	X(forget_multi, (fuse_req_t q, size_t c,			\
			 struct fuse_forget_data *f), (q, c, f))	\
	X(getattr, (fuse_req_t q, fuse_ino_t i, struct fuse_file_info *f), \
	  (q, i, f))							\
	X(setattr, (fuse_req_t q, fuse_ino_t i, struct stat *a, int s,	\
		    struct fuse_file_info *f), (q, i, a, s, f))		\
	X(readlink, (fuse_req_t q, fuse_ino_t i), (q, i))		\
	X(mknod, (fuse_req_t q, fuse_ino_t p, const char *n, mode_t m,	\
		  dev_t d), (q, p, n, m, d))				\
	X(mkdir, (fuse_req_t q, fuse_ino_t p, const char *n, mode_t m),	\
	  (q, p, n, m))							\
	X(unlink, (fuse_req_t q, fuse_ino_t p, const char *n), (q, p, n)) \
	X(rmdir, (fuse_req_t q, fuse_ino_t p, const char *n), (q, p, n)) \
	X(symlink, (fuse_req_t q, const char *l, fuse_ino_t p,		\
		    const char *n), (q, l, p, n))			\
	X(rename, (fuse_req_t q, fuse_ino_t p, const char *n,		\
		   fuse_ino_t np, const char *nn, unsigned int f),	\
	  (q, p, n, np, nn, f))						\
	X(link, (fuse_req_t q, fuse_ino_t i, fuse_ino_t np,		\
		 const char *nn), (q, i, np, nn))			\
	X(open, (fuse_req_t q, fuse_ino_t i, struct fuse_file_info *f),	\
	  (q, i, f))							\
	X(read, (fuse_req_t q, fuse_ino_t i, size_t s, off_t o,	\
		 struct fuse_file_info *f), (q, i, s, o, f))		\
	X(write, (fuse_req_t q, fuse_ino_t i, const char *b, size_t s,	\
		  off_t o, struct fuse_file_info *f), (q, i, b, s, o, f)) \
	X(write_buf, (fuse_req_t q, fuse_ino_t i, struct fuse_bufvec *b, \
		      off_t o, struct fuse_file_info *f), (q, i, b, o, f)) \
	X(flush, (fuse_req_t q, fuse_ino_t i, struct fuse_file_info *f), \
	  (q, i, f))							\
	X(release, (fuse_req_t q, fuse_ino_t i, struct fuse_file_info *f), \
	  (q, i, f))							\
	X(fsync, (fuse_req_t q, fuse_ino_t i, int d,			\
		  struct fuse_file_info *f), (q, i, d, f))		\
	X(opendir, (fuse_req_t q, fuse_ino_t i, struct fuse_file_info *f), \
	  (q, i, f))							\
	X(readdir, (fuse_req_t q, fuse_ino_t i, size_t s, off_t o,	\
		    struct fuse_file_info *f), (q, i, s, o, f))		\
	X(readdirplus, (fuse_req_t q, fuse_ino_t i, size_t s, off_t o,	\
			struct fuse_file_info *f), (q, i, s, o, f))	\
	X(releasedir, (fuse_req_t q, fuse_ino_t i,			\
		       struct fuse_file_info *f), (q, i, f))		\
	X(fsyncdir, (fuse_req_t q, fuse_ino_t i, int d,		\
		     struct fuse_file_info *f), (q, i, d, f))		\
	X(statfs, (fuse_req_t q, fuse_ino_t i), (q, i))			\
	X(setxattr, (fuse_req_t q, fuse_ino_t i, const char *n,	\
		     const char *v, size_t s, int f), (q, i, n, v, s, f)) \
	X(getxattr, (fuse_req_t q, fuse_ino_t i, const char *n, size_t s), \
	  (q, i, n, s))							\
	X(listxattr, (fuse_req_t q, fuse_ino_t i, size_t s), (q, i, s))	\
	X(removexattr, (fuse_req_t q, fuse_ino_t i, const char *n),	\
	  (q, i, n))							\
	X(access, (fuse_req_t q, fuse_ino_t i, int m), (q, i, m))	\
	X(create, (fuse_req_t q, fuse_ino_t p, const char *n, mode_t m,	\
		   struct fuse_file_info *f), (q, p, n, m, f))		\
	X(fallocate, (fuse_req_t q, fuse_ino_t i, int m, off_t o,	\
		      off_t l, struct fuse_file_info *f), (q, i, m, o, l, f)) \
	X(lseek, (fuse_req_t q, fuse_ino_t i, off_t o, int w,		\
		  struct fuse_file_info *f), (q, i, o, w, f))		\
	X(ioctl, (fuse_req_t q, fuse_ino_t i, unsigned int c, void *a,	\
		  struct fuse_file_info *f, unsigned fl, const void *ib, \
		  size_t is, size_t os), (q, i, c, a, f, fl, ib, is, os))

enum {
#define X(name, params, args) NX_OPSTAT_##name,
	NX_COUNTED_OPS(X)
#undef X
	NX_OPSTAT_COUNT
};

static const char *const op_names[NX_OPSTAT_COUNT] = {
#define X(name, params, args) #name,
	NX_COUNTED_OPS(X)
#undef X
};

static uint64_t op_counts[NX_OPSTAT_COUNT];
static struct fuse_lowlevel_ops inner;	/* what the wrappers call */

#define X(name, params, args)						\
	static void counted_##name params				\
	{								\
		__atomic_fetch_add(&op_counts[NX_OPSTAT_##name], 1,	\
				   __ATOMIC_RELAXED);			\
		inner.name args;					\
	}
NX_COUNTED_OPS(X)
#undef X

void nx_fuse_opstats_wrap(const struct fuse_lowlevel_ops *ops,
			  struct fuse_lowlevel_ops *out)
{
	inner = *ops;
	*out = *ops;
	/* Only handlers that exist: libfuse reads capabilities off NULLs. */
#define X(name, params, args)						\
	if (ops->name)							\
		out->name = counted_##name;
	NX_COUNTED_OPS(X)
#undef X
}

size_t nx_fuse_opstats_format(char *buf, size_t size)
{
	size_t used = 0;
	int i, n;

	if (!size)
		return 0;
	buf[0] = 0;
	for (i = 0; i < NX_OPSTAT_COUNT; i++) {
		uint64_t c = __atomic_load_n(&op_counts[i], __ATOMIC_RELAXED);

		if (!c)
			continue;
		n = snprintf(buf + used, size - used, "%s %llu\n",
			     op_names[i], (unsigned long long)c);
		if (n < 0 || (size_t)n >= size - used) {
			buf[used] = 0;	/* whole lines only */
			break;
		}
		used += (size_t)n;
	}
	return used;
}
