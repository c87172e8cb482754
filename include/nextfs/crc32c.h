/*
 * crc32c.h - the CRC32C behind every metadata checksum, in hardware.
 * Layer: volume/ (the bottom: calls nothing above it).
 *
 * Contract: nextfs defines ext2fs_crc32c_le() for the whole process.
 * With metadata_csum, libext2fs checksums every inode, extent block,
 * directory block, bitmap and group descriptor through that function
 * and calls it through its procedure linkage table, so the definition in
 * our executable is the one it runs (ELF symbol interposition; the same
 * for the JBD2 checksums of journal.c).  Same function, same results:
 * the Castagnoli CRC, reflected, seeded by the caller, no final
 * inversion.  Where the CPU has it (x86-64 SSE4.2) the CRC32 instruction
 * computes it; elsewhere libext2fs's own table-driven code does (found
 * with dlsym(RTLD_NEXT)), or a table of ours if that cannot be found.
 * Why: libext2fs's software CRC was a third of the daemon's CPU time in
 * random overwrites under a snapshot (each rewrites extent leaves).
 *
 * nx_crc32c_init() picks the implementation (idempotent, thread-safe;
 * nx_open_volume() calls it, which also keeps this file in every binary
 * that opens a volume).  nx_crc32c_name() says which one runs.
 * nx_crc32c_use() replaces it and returns the previous one: for tests
 * only, which prove with it that libext2fs really calls through here.
 */
#ifndef NEXTFS_CRC32C_H
#define NEXTFS_CRC32C_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>

typedef __u32 (*nx_crc32c_fn)(__u32 crc, unsigned char const *p, size_t len);

void nx_crc32c_init(void);
const char *nx_crc32c_name(void);
nx_crc32c_fn nx_crc32c_use(nx_crc32c_fn fn);

/* The implementations, for tests (NULL where this CPU or build has none). */
nx_crc32c_fn nx_crc32c_hardware(void);
nx_crc32c_fn nx_crc32c_libext2fs(void);
__u32 nx_crc32c_table(__u32 crc, unsigned char const *p, size_t len);

#endif
