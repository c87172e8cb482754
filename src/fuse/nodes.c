/*
 * nodes.c - which inodes the kernel still references.
 *
 * The kernel keeps an inode alive while it has looked it up (nlookup,
 * dropped by FORGET) or while a file handle is open.  ext4 keeps an
 * unlinked inode's data until the last such reference goes away; we do
 * the same by remembering, per inode, both counts and whether it lost a
 * name.  Only referenced inodes have an entry, so the table stays as
 * small as the kernel's inode cache.
 *
 * The caller holds the volume lock for every call, which also protects
 * the table (releasing an inode needs that lock anyway).
 */
#include <errno.h>
#include <stdlib.h>
#include "nextfs/fuse_ops.h"
#include "nextfs/inode.h"

struct nx_node {
	struct nx_node *next;		/* hash chain */
	ext2_ino_t ino;
	uint64_t nlookup;		/* entry replies minus forgets */
	uint32_t nopen;			/* open file/dir handles */
	int unlinked;			/* lost a name: maybe release at the end */
};

struct nx_nodes {
	struct nx_node **buckets;
	size_t nbuckets;		/* power of two */
	size_t count;
	size_t nunlinked;		/* entries with unlinked set */
};

#define NX_NODES_MIN_BUCKETS	256

static size_t bucket_of(size_t nbuckets, ext2_ino_t ino)
{
	/*
	 * Fibonacci hashing: inode numbers are dense, spread them out.  The
	 * product's top bits are the well-mixed ones: bits 32 and up of it
	 * put 100k consecutive inodes into 8k of 64k buckets, and a lookup
	 * walked 7 entries on average.
	 */
	return (size_t)(((uint64_t)ino * 0x9E3779B97F4A7C15ULL) >>
			(64 - __builtin_ctzll(nbuckets)));
}

struct nx_nodes *nx_nodes_new(void)
{
	struct nx_nodes *nodes = calloc(1, sizeof(*nodes));

	if (!nodes)
		return NULL;
	nodes->nbuckets = NX_NODES_MIN_BUCKETS;
	nodes->buckets = calloc(nodes->nbuckets, sizeof(*nodes->buckets));
	if (!nodes->buckets) {
		free(nodes);
		return NULL;
	}
	return nodes;
}

void nx_nodes_free(struct nx_nodes *nodes)
{
	size_t i;

	if (!nodes)
		return;
	for (i = 0; i < nodes->nbuckets; i++) {
		struct nx_node *n = nodes->buckets[i], *next;

		for (; n; n = next) {
			next = n->next;
			free(n);
		}
	}
	free(nodes->buckets);
	free(nodes);
}

static struct nx_node **find_slot(const struct nx_nodes *nodes,
				  ext2_ino_t ino)
{
	struct nx_node **p = &nodes->buckets[bucket_of(nodes->nbuckets, ino)];

	while (*p && (*p)->ino != ino)
		p = &(*p)->next;
	return p;
}

/* Double the bucket array when chains get long; failure is harmless. */
static void maybe_grow(struct nx_nodes *nodes)
{
	size_t nb = nodes->nbuckets * 2, i;
	struct nx_node **b;

	if (nodes->count < nodes->nbuckets * 2)
		return;
	b = calloc(nb, sizeof(*b));
	if (!b)
		return;
	for (i = 0; i < nodes->nbuckets; i++) {
		struct nx_node *n = nodes->buckets[i], *next;

		for (; n; n = next) {
			size_t k = bucket_of(nb, n->ino);

			next = n->next;
			n->next = b[k];
			b[k] = n;
		}
	}
	free(nodes->buckets);
	nodes->buckets = b;
	nodes->nbuckets = nb;
}

static struct nx_node *get_node(struct nx_nodes *nodes, ext2_ino_t ino)
{
	struct nx_node **slot = find_slot(nodes, ino), *n;

	if (*slot)
		return *slot;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->ino = ino;
	*slot = n;
	nodes->count++;
	maybe_grow(nodes);
	return n;
}

/*
 * Drop the entry once the kernel holds no reference; an inode that lost
 * its name on the way is released now (a no-op if it still has links).
 */
static errcode_t put_node(struct nx_nodes *nodes, struct nx_volume *vol,
			  struct nx_node *n)
{
	struct nx_node **slot;
	ext2_ino_t ino = n->ino;
	int unlinked = n->unlinked;

	if (n->nlookup || n->nopen)
		return 0;
	slot = find_slot(nodes, ino);
	*slot = n->next;
	nodes->count--;
	if (unlinked)
		nodes->nunlinked--;
	free(n);
	return unlinked ? nx_inode_release(vol, ino) : 0;
}

/* One more lookup (or, with OPEN, open handle) of INO; the root has none. */
static errcode_t take_ref(struct nx_nodes *nodes, ext2_ino_t ino, int open)
{
	struct nx_node *n;

	if (ino == EXT2_ROOT_INO)
		return 0;
	n = get_node(nodes, ino);
	if (!n)
		return ENOMEM;
	if (open)
		n->nopen++;
	else
		n->nlookup++;
	return 0;
}

errcode_t nx_nodes_lookup(struct nx_nodes *nodes, ext2_ino_t ino)
{
	return take_ref(nodes, ino, 0);
}

errcode_t nx_nodes_forget(struct nx_nodes *nodes, struct nx_volume *vol,
			  ext2_ino_t ino, uint64_t count)
{
	struct nx_node *n = *find_slot(nodes, ino);

	if (!n)
		return 0;	/* root, or a reference we never handed out */
	n->nlookup = count < n->nlookup ? n->nlookup - count : 0;
	return put_node(nodes, vol, n);
}

errcode_t nx_nodes_open(struct nx_nodes *nodes, ext2_ino_t ino)
{
	return take_ref(nodes, ino, 1);
}

errcode_t nx_nodes_close(struct nx_nodes *nodes, struct nx_volume *vol,
			 ext2_ino_t ino)
{
	struct nx_node *n = *find_slot(nodes, ino);

	if (!n || !n->nopen)
		return 0;
	n->nopen--;
	return put_node(nodes, vol, n);
}

errcode_t nx_nodes_unlinked(struct nx_nodes *nodes, struct nx_volume *vol,
			    ext2_ino_t ino)
{
	struct nx_node *n;

	if (!ino || ino == EXT2_ROOT_INO)
		return 0;
	n = *find_slot(nodes, ino);
	if (!n)
		return nx_inode_release(vol, ino);
	if (!n->unlinked)
		nodes->nunlinked++;
	n->unlinked = 1;
	return 0;
}

size_t nx_nodes_pending(const struct nx_nodes *nodes)
{
	return nodes->nunlinked;
}

int nx_nodes_busy(const struct nx_nodes *nodes, ext2_ino_t ino)
{
	return *find_slot(nodes, ino) != NULL;
}

errcode_t nx_nodes_release_all(struct nx_nodes *nodes, struct nx_volume *vol)
{
	errcode_t ret = 0, err;
	size_t i;

	for (i = 0; i < nodes->nbuckets; i++) {
		struct nx_node *n = nodes->buckets[i], *next;

		for (; n; n = next) {
			next = n->next;
			if (n->unlinked) {
				err = nx_inode_release(vol, n->ino);
				if (err && !ret)
					ret = err;
			}
			free(n);
		}
		nodes->buckets[i] = NULL;
	}
	nodes->count = 0;
	nodes->nunlinked = 0;
	return ret;
}
