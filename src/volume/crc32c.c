/*
 * crc32c.c - ext2fs_crc32c_le() for the process (see
 * include/nextfs/crc32c.h for why and how it replaces libext2fs's).
 */
#include "nextfs/crc32c.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define CRC32C_POLY_LE	0x82F63B78U	/* Castagnoli, bit-reflected */

static nx_crc32c_fn active;
static const char *active_name = "none";
static pthread_once_t picked = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ */
/* The CRC32 instruction                                               */

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static __u32 crc32c_sse42(__u32 crc, unsigned char const *p, size_t len)
{
	uint64_t c = crc;

	/* Up to 8-byte alignment one byte at a time, then 8 at a time. */
	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return (__u32)c;
}
#endif

nx_crc32c_fn nx_crc32c_hardware(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		return crc32c_sse42;
#endif
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Software                                                            */

nx_crc32c_fn nx_crc32c_libext2fs(void)
{
	nx_crc32c_fn fn = (nx_crc32c_fn)dlsym(RTLD_NEXT, "ext2fs_crc32c_le");

	if (!fn || fn == ext2fs_crc32c_le) {
		/* Not found after us: ask the loaded library itself. */
		void *lib = dlopen("libext2fs.so.2", RTLD_LAZY | RTLD_NOLOAD);

		fn = lib ? (nx_crc32c_fn)dlsym(lib, "ext2fs_crc32c_le") : NULL;
		if (lib)
			dlclose(lib);
	}
	/* Never ourselves: that would recurse. */
	return fn == ext2fs_crc32c_le ? NULL : fn;
}

static uint32_t table[256];
static pthread_once_t table_made = PTHREAD_ONCE_INIT;

static void make_table(void)
{
	uint32_t i, c;
	int k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++)
			c = (c >> 1) ^ (c & 1 ? CRC32C_POLY_LE : 0);
		table[i] = c;
	}
}

__u32 nx_crc32c_table(__u32 crc, unsigned char const *p, size_t len)
{
	pthread_once(&table_made, make_table);
	while (len--)
		crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

/* ------------------------------------------------------------------ */
/* Choosing                                                            */

static void pick(void)
{
	nx_crc32c_fn fn = nx_crc32c_hardware();

	if (fn) {
		active_name = "sse4.2";
	} else if ((fn = nx_crc32c_libext2fs())) {
		active_name = "libext2fs";
	} else {
		fn = nx_crc32c_table;
		active_name = "table";
	}
	__atomic_store_n(&active, fn, __ATOMIC_RELEASE);
}

void nx_crc32c_init(void)
{
	pthread_once(&picked, pick);
}

const char *nx_crc32c_name(void)
{
	nx_crc32c_init();
	return active_name;
}

nx_crc32c_fn nx_crc32c_use(nx_crc32c_fn fn)
{
	nx_crc32c_init();
	return __atomic_exchange_n(&active, fn, __ATOMIC_ACQ_REL);
}

__u32 ext2fs_crc32c_le(__u32 crc, unsigned char const *p, size_t len)
{
	nx_crc32c_fn fn = __atomic_load_n(&active, __ATOMIC_ACQUIRE);

	if (!fn) {
		nx_crc32c_init();
		fn = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
	}
	return fn(crc, p, len);
}
