/*
 * bytechan.c - an io_manager over byte-range callbacks (see
 * include/nextfs/bytechan.h).
 *
 * libext2fs opens a device by name through io_manager->open(), so the
 * callbacks are registered under a unique name for exactly the duration
 * of ext2fs_open2(); the channel then carries its own copy of them.
 */
#include "nextfs/bytechan.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bytechan {
	struct nx_bytechan_ops ops;
	void *priv;
	char name[40];
	struct bytechan *next;		/* registry, while being opened */
};

static struct struct_io_manager bytechan_manager;
static struct bytechan *registry;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Take the registration of NAME: a copy that the channel will own. */
static struct bytechan *claim(const char *name)
{
	struct bytechan *b, *copy = NULL;

	pthread_mutex_lock(&registry_lock);
	for (b = registry; b; b = b->next)
		if (!strcmp(b->name, name))
			break;
	if (b && (copy = malloc(sizeof(*copy))))
		*copy = *b;
	pthread_mutex_unlock(&registry_lock);
	return copy;
}

static errcode_t bc_open(const char *name, int flags, io_channel *ret)
{
	struct bytechan *b = claim(name);
	io_channel chan = NULL;

	if (!b)
		return EXT2_ET_BAD_DEVICE_NAME;
	if ((flags & IO_FLAG_RW) && !b->ops.write) {
		free(b);
		return EROFS;
	}
	chan = calloc(1, sizeof(*chan));
	if (!chan || !(chan->name = strdup(name))) {
		free(chan);
		free(b);
		return EXT2_ET_NO_MEMORY;
	}
	chan->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	chan->manager = &bytechan_manager;
	chan->block_size = 1024;
	chan->refcount = 1;
	chan->private_data = b;
	*ret = chan;
	return 0;
}

static errcode_t bc_close(io_channel chan)
{
	if (--chan->refcount > 0)
		return 0;
	free(chan->private_data);
	free(chan->name);
	free(chan);
	return 0;
}

static errcode_t bc_set_blksize(io_channel chan, int blksize)
{
	chan->block_size = blksize;
	return 0;
}

/* libext2fs passes a negative count for a length in bytes. */
static uint64_t bc_len(io_channel chan, int count)
{
	return count < 0 ? (uint64_t)-count :
	       (uint64_t)count * chan->block_size;
}

static errcode_t bc_read_bytes(io_channel chan, uint64_t offset, void *data,
			       uint64_t len)
{
	struct bytechan *b = chan->private_data;

	return b->ops.read(b->priv, data, offset, len);
}

static errcode_t bc_write_bytes(io_channel chan, uint64_t offset,
				const void *data, uint64_t len)
{
	struct bytechan *b = chan->private_data;

	return b->ops.write ? b->ops.write(b->priv, data, offset, len) : EROFS;
}

static errcode_t bc_read_blk64(io_channel chan, unsigned long long block,
			       int count, void *data)
{
	return bc_read_bytes(chan, block * (uint64_t)chan->block_size, data,
			     bc_len(chan, count));
}

static errcode_t bc_read_blk(io_channel chan, unsigned long block, int count,
			     void *data)
{
	return bc_read_blk64(chan, block, count, data);
}

static errcode_t bc_write_blk64(io_channel chan, unsigned long long block,
				int count, const void *data)
{
	return bc_write_bytes(chan, block * (uint64_t)chan->block_size, data,
			      bc_len(chan, count));
}

static errcode_t bc_write_blk(io_channel chan, unsigned long block, int count,
			      const void *data)
{
	return bc_write_blk64(chan, block, count, data);
}

static errcode_t bc_write_byte(io_channel chan, unsigned long offset,
			       int size, const void *data)
{
	return bc_write_bytes(chan, offset, data, (uint64_t)size);
}

static errcode_t bc_flush(io_channel chan)
{
	return 0;
}

static errcode_t bc_set_option(io_channel chan, const char *option,
			       const char *arg)
{
	return EXT2_ET_INVALID_ARGUMENT;
}

static struct struct_io_manager bytechan_manager = {
	.magic = EXT2_ET_MAGIC_IO_MANAGER,
	.name = "nextfs byte channel",
	.open = bc_open,
	.close = bc_close,
	.set_blksize = bc_set_blksize,
	.read_blk = bc_read_blk,
	.write_blk = bc_write_blk,
	.flush = bc_flush,
	.write_byte = bc_write_byte,
	.set_option = bc_set_option,
	.read_blk64 = bc_read_blk64,
	.write_blk64 = bc_write_blk64,
};

static void unregister(struct bytechan *b)
{
	struct bytechan **pp;

	pthread_mutex_lock(&registry_lock);
	for (pp = &registry; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&registry_lock);
}

errcode_t nx_bytechan_open_fs(const struct nx_bytechan_ops *ops, void *priv,
			      int flags, ext2_filsys *ret)
{
	static unsigned long seq;
	struct bytechan reg = { .ops = *ops, .priv = priv };
	errcode_t err;

	pthread_mutex_lock(&registry_lock);
	snprintf(reg.name, sizeof(reg.name), "nextfs-bytechan:%lu", ++seq);
	reg.next = registry;
	registry = &reg;
	pthread_mutex_unlock(&registry_lock);
	err = ext2fs_open2(reg.name, NULL, flags, 0, 0, &bytechan_manager, ret);
	unregister(&reg);
	return err;
}
