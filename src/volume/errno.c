/*
 * errno.c - translate libext2fs error codes into errno values.
 *
 * libext2fs returns either a plain errno (small values) or a com_err code
 * from the ext2 error table.  The kernel only understands errno, so every
 * FUSE reply goes through nx_errno().  Anything unexpected becomes EIO:
 * the caller must never see success for a failed operation.
 */
#include <errno.h>
#include <ext2fs/ext2fs.h>
#include "nextfs/volume.h"

struct err_map {
	errcode_t code;
	int err;
};

static const struct err_map err_table[] = {
	{ EXT2_ET_NO_MEMORY, ENOMEM },
	{ EXT2_ET_BLOCK_ALLOC_FAIL, ENOSPC },
	{ EXT2_ET_INODE_ALLOC_FAIL, ENOSPC },
	{ EXT2_ET_DIR_NO_SPACE, ENOSPC },
	{ EXT2_ET_DIR_NO_SPACE_FOR_CSUM, ENOSPC },
	{ EXT2_ET_EA_NO_SPACE, ENOSPC },
	{ EXT2_ET_INLINE_DATA_NO_SPACE, ENOSPC },
	{ EXT2_ET_TOOSMALL, ENOSPC },
	{ EXT2_ET_RES_GDT_BLOCKS, ENOSPC },
	{ EXT2_ET_FILE_NOT_FOUND, ENOENT },
	{ EXT2_ET_NO_DIRECTORY, ENOTDIR },
	{ EXT2_ET_DIR_EXISTS, EEXIST },
	{ EXT2_ET_FILE_EXISTS, EEXIST },
	{ EXT2_ET_RO_FILSYS, EROFS },
	{ EXT2_ET_EA_KEY_NOT_FOUND, ENODATA },
	{ EXT2_ET_NO_INLINE_DATA, ENODATA },
	{ EXT2_ET_EA_BAD_NAME_LEN, ERANGE },
	{ EXT2_ET_EA_BAD_VALUE_SIZE, E2BIG },
	{ EXT2_ET_FILE_TOO_BIG, EFBIG },
	{ EXT2_ET_EXTENT_NOT_SUPPORTED, EOPNOTSUPP },
	{ EXT2_ET_UNIMPLEMENTED, EOPNOTSUPP },
	{ EXT2_ET_OP_NOT_SUPPORTED, EOPNOTSUPP },
	{ EXT2_ET_INVALID_ARGUMENT, EINVAL },
	{ EXT2_ET_BAD_INODE_NUM, ESTALE },
	{ EXT2_ET_SHORT_READ, EIO },
	{ EXT2_ET_SHORT_WRITE, EIO },
	{ EXT2_ET_FILE_RO, EROFS },
};

int nx_errno(errcode_t err)
{
	size_t i;

	if (err == 0)
		return 0;
	if (err > 0 && err < 4096)
		return (int)err;	/* already an errno */
	for (i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
		if (err_table[i].code == err)
			return err_table[i].err;
	return EIO;
}
