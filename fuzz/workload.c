/*
 * workload.c - nextfs-fuzz-workload: fill a base image for the fuzzer
 * through the nextfs library itself, so that the bases hold what nextfs
 * writes (htree directories it converted, inline data, xattr blocks,
 * ACLs, unwritten extents) and snapshots with real preserved blocks.
 *
 *   nextfs-fuzz-workload IMAGE STEP...
 *     populate        directories (one big enough to become an htree),
 *                     small/medium/large/sparse/fragmented files, fast and slow
 *                     symlinks, a hard link, device nodes, xattrs, an ACL,
 *                     preallocated space
 *     take:NAME       take a snapshot
 *     churn:N         overwrite, append, truncate, unlink, create, rename
 *                     (round N) so the active snapshot preserves blocks
 *     delete:NAME     delete a snapshot (hands blocks to an older one)
 *
 * Steps that a flavour cannot do (fallocate on ext2, say) only warn.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <et/com_err.h>
#include "nextfs/dir.h"
#include "nextfs/file.h"
#include "nextfs/inode.h"
#include "nextfs/snapshot.h"
#include "nextfs/xattr.h"

static struct nx_cred root;
static int failures;

static void warn(const char *what, errcode_t err)
{
	if (err)
		fprintf(stderr, "nextfs-fuzz-workload: %s: %s\n", what,
			error_message(err));
}

/* Steps the base must have: a failure here fails the seed build. */
static void must(const char *what, errcode_t err)
{
	if (err) {
		warn(what, err);
		failures++;
	}
}

static ext2_ino_t path_ino(struct nx_volume *vol, const char *path)
{
	char buf[512], *name, *save = NULL;
	ext2_ino_t ino = EXT2_ROOT_INO;

	snprintf(buf, sizeof(buf), "%s", path);
	for (name = strtok_r(buf, "/", &save); name;
	     name = strtok_r(NULL, "/", &save))
		if (nx_lookup(vol, ino, name, &ino))
			return 0;
	return ino;
}

static void fill(char *buf, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)('a' + (i * 7 + seed * 13 + i / 97) % 26);
}

static ext2_ino_t make_file(struct nx_volume *vol, ext2_ino_t dir,
			    const char *name, uint64_t off, size_t len,
			    unsigned seed)
{
	ext2_ino_t ino = 0;
	size_t done = 0;
	char *buf;

	if (nx_lookup(vol, dir, name, &ino)) {
		must(name, nx_mknod(vol, &root, dir, name, S_IFREG | 0644, 0,
				    &ino));
		if (!ino)
			return 0;
	}
	if (!len)
		return ino;
	buf = malloc(len);
	if (!buf)
		abort();
	fill(buf, len, seed);
	must(name, nx_file_write(vol, ino, buf, len, off, &done));
	free(buf);
	return ino;
}

static void remove_name(struct nx_volume *vol, const char *dirpath,
			const char *name)
{
	ext2_ino_t dir = path_ino(vol, dirpath), victim = 0;

	if (!dir)
		return;
	warn(name, nx_unlink(vol, &root, dir, name, &victim));
	if (victim)
		warn(name, nx_inode_release(vol, victim));
}

/* An access ACL in the kernel's xattr format: u::rw-,u:1000:r--,g::r--,m::r--,o::r--. */
static void set_acl(struct nx_volume *vol, ext2_ino_t ino)
{
	static const struct { uint16_t tag, perm; uint32_t id; } e[] = {
		{ 0x01, 6, ~0u }, { 0x02, 4, 1000 }, { 0x04, 4, ~0u },
		{ 0x10, 4, ~0u }, { 0x20, 4, ~0u },
	};
	unsigned char buf[4 + sizeof(e)];
	uint32_t version = 2;

	memcpy(buf, &version, 4);
	memcpy(buf + 4, e, sizeof(e));
	warn("acl", nx_setxattr(vol, &root, ino, "system.posix_acl_access",
				buf, sizeof(buf), 0));
}

static void populate(struct nx_volume *vol)
{
	ext2_ino_t d1 = 0, sub = 0, big = 0, ino = 0, medium;
	char name[32], value[700];
	int i;

	must("d1", nx_mkdir(vol, &root, EXT2_ROOT_INO, "d1", 0755, &d1));
	must("sub", nx_mkdir(vol, &root, d1, "sub", 0750, &sub));
	must("big", nx_mkdir(vol, &root, EXT2_ROOT_INO, "big", 0755, &big));
	/* Enough names to outgrow one 1 KiB block: becomes an htree. */
	for (i = 0; i < 90; i++) {
		snprintf(name, sizeof(name), "entry-with-a-long-name-%03d", i);
		must(name, nx_mknod(vol, &root, big, name, S_IFREG | 0644, 0,
				    &ino));
	}
	ino = make_file(vol, EXT2_ROOT_INO, "small", 0, 40, 1);
	warn("user.small", nx_setxattr(vol, &root, ino, "user.small", "v", 1,
				       0));
	medium = make_file(vol, EXT2_ROOT_INO, "medium", 0, 5000, 2);
	fill(value, sizeof(value), 3);
	warn("user.big", nx_setxattr(vol, &root, medium, "user.big", value,
				     sizeof(value), 0));
	warn("trusted.t", nx_setxattr(vol, &root, d1, "trusted.t", "xyz", 3,
				      0));
	set_acl(vol, medium);
	/* 40 KiB: past the 12 direct blocks of a 1 KiB-block file. */
	make_file(vol, EXT2_ROOT_INO, "large", 0, 40 << 10, 4);
	/* Data at 300 KiB: double-indirect on block-mapped volumes. */
	make_file(vol, EXT2_ROOT_INO, "sparse", 300 << 10, 1024, 5);
	make_file(vol, sub, "deep", 0, 3000, 6);
	/* Every other block: more extents than fit in the inode. */
	for (i = 0; i < 10; i++)
		make_file(vol, EXT2_ROOT_INO, "frag", (uint64_t)i * 2048, 1024,
			  7 + i);
	must("fast", nx_symlink(vol, &root, EXT2_ROOT_INO, "fast", "small",
				&ino));
	memset(value, 'p', 200);
	value[200] = 0;
	memcpy(value, "d1/", 3);
	must("slow", nx_symlink(vol, &root, EXT2_ROOT_INO, "slow", value,
				&ino));
	must("link", nx_link(vol, &root, medium, d1, "medium-link"));
	must("null", nx_mknod(vol, &root, d1, "null", S_IFCHR | 0666,
			      makedev(1, 3), &ino));
	must("fifo", nx_mknod(vol, &root, d1, "fifo", S_IFIFO | 0644, 0,
			      &ino));
	ino = make_file(vol, EXT2_ROOT_INO, "prealloc", 0, 0, 0);
	warn("fallocate", nx_file_fallocate(vol, ino, 0, 0, 8192));
}

static void churn(struct nx_volume *vol, unsigned round)
{
	char name[64];
	ext2_ino_t ino;
	int i;

	make_file(vol, EXT2_ROOT_INO, "medium", 100, 2000, 10 + round);
	ino = path_ino(vol, "large");
	if (ino) {
		make_file(vol, EXT2_ROOT_INO, "large", 40 << 10, 3000,
			  20 + round);
		warn("truncate", nx_file_truncate(vol, ino, 20 << 10));
	}
	ino = path_ino(vol, "sparse");
	if (ino)
		warn("truncate", nx_file_truncate(vol, ino, 100 << 10));
	snprintf(name, sizeof(name), "new-%u", round);
	make_file(vol, EXT2_ROOT_INO, name, 0, 7000, 30 + round);
	snprintf(name, sizeof(name), "newdir-%u", round);
	warn(name, nx_mkdir(vol, &root, EXT2_ROOT_INO, name, 0755, &ino));
	for (i = round * 10; i < (int)round * 10 + 10; i++) {
		snprintf(name, sizeof(name), "entry-with-a-long-name-%03d", i);
		remove_name(vol, "big", name);
	}
	if (round == 1) {
		remove_name(vol, "d1/sub", "deep");
		warn("rename", nx_rename(vol, &root, EXT2_ROOT_INO, "small",
					 path_ino(vol, "d1"), "small-moved",
					 0, NULL));
	}
	ino = path_ino(vol, "d1");
	if (ino)
		warn("user.churn", nx_setxattr(vol, &root, ino, "user.churn",
					       name, strlen(name), 0));
}

static void step(struct nx_volume *vol, const char *s)
{
	struct nx_snapinfo info;

	if (!strcmp(s, "populate"))
		populate(vol);
	else if (!strncmp(s, "take:", 5))
		must(s, nx_snap_take(vol, s + 5, &info));
	else if (!strncmp(s, "churn:", 6))
		churn(vol, (unsigned)atoi(s + 6));
	else if (!strncmp(s, "delete:", 7))
		must(s, nx_snap_delete(vol, s + 7));
	else {
		fprintf(stderr, "nextfs-fuzz-workload: unknown step %s\n", s);
		failures++;
	}
}

int main(int argc, char **argv)
{
	struct nx_volume *vol;
	char msg[512] = "";
	errcode_t err;
	int i;

	if (argc < 3) {
		fprintf(stderr, "usage: nextfs-fuzz-workload IMAGE STEP...\n");
		return 2;
	}
	err = nx_volume_open(argv[1], 0, &vol, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "nextfs-fuzz-workload: %s\n",
			msg[0] ? msg : error_message(err));
		return 1;
	}
	nx_volume_lock(vol);
	for (i = 2; i < argc; i++)
		step(vol, argv[i]);
	nx_volume_unlock(vol);
	must("close", nx_volume_close(vol));
	return failures ? 1 : 0;
}
