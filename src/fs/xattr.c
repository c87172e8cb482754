/*
 * xattr.c - extended attributes and POSIX ACLs.
 *
 * Storage is libext2fs's xattr handle (in-inode area first, then one
 * external block).  The handle is always opened with
 * XATTR_HANDLE_FLAG_RAW: libext2fs would otherwise translate ACLs itself,
 * but it returns 0 instead of ACL_UNDEFINED_ID as the id of the
 * owner/group/mask/other entries and validates nothing, so we do the
 * VFS <-> ext4 ACL translation here exactly as fs/posix_acl.c and
 * fs/ext4/acl.c do.
 *
 * Names, sizes and permissions follow fs/xattr.c (xattr_permission) and
 * the ext4 handlers.  libext2fs writes the inode itself whenever it
 * changes the xattrs, so the ctime stamp is applied afterwards on a fresh
 * copy of the inode, never on a copy read before the change.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>
#include "nextfs/inode.h"
#include "nextfs/xattr.h"

#define NX_XATTR_NAME_MAX	255	/* XATTR_NAME_MAX */
#define NX_XATTR_SIZE_MAX	65536	/* XATTR_SIZE_MAX */

#define ACL_ACCESS_NAME		"system.posix_acl_access"
#define ACL_DEFAULT_NAME	"system.posix_acl_default"

/* ---- names and namespaces ------------------------------------------ */

enum xattr_ns {
	NS_USER,
	NS_TRUSTED,
	NS_SECURITY,
	NS_GNU,
	NS_ACL_ACCESS,
	NS_ACL_DEFAULT,
};

struct xattr_ns_desc {
	const char *name;	/* prefix, or the whole name when exact */
	int exact;
	enum xattr_ns ns;
};

/*
 * The handlers ext4 registers.  Anything else, including ext4's private
 * "system.data" (inline data) and "system.richacl", is not ours to show.
 */
static const struct xattr_ns_desc namespaces[] = {
	{ "user.",		0, NS_USER },
	{ "trusted.",		0, NS_TRUSTED },
	{ "security.",		0, NS_SECURITY },
	{ "gnu.",		0, NS_GNU },
	{ ACL_ACCESS_NAME,	1, NS_ACL_ACCESS },
	{ ACL_DEFAULT_NAME,	1, NS_ACL_DEFAULT },
};

/* Like xattr_resolve_name(): ERANGE, EINVAL (bare prefix), EOPNOTSUPP. */
static errcode_t resolve_name(const char *name, enum xattr_ns *ns)
{
	size_t len = strlen(name), i;

	if (len == 0 || len > NX_XATTR_NAME_MAX)
		return ERANGE;
	for (i = 0; i < sizeof(namespaces) / sizeof(namespaces[0]); i++) {
		const struct xattr_ns_desc *d = &namespaces[i];
		size_t plen = strlen(d->name);

		if (d->exact ? strcmp(name, d->name) != 0 :
			       strncmp(name, d->name, plen) != 0)
			continue;
		if (!d->exact && len == plen)
			return EINVAL;
		*ns = d->ns;
		return 0;
	}
	return EOPNOTSUPP;
}

static int is_acl_ns(enum xattr_ns ns)
{
	return ns == NS_ACL_ACCESS || ns == NS_ACL_DEFAULT;
}

/* ---- permissions (fs/xattr.c: xattr_permission, may_write_xattr) ---- */

static int is_reg_or_dir(const struct ext2_inode_large *inode)
{
	return LINUX_S_ISREG(inode->i_mode) || LINUX_S_ISDIR(inode->i_mode);
}

static int is_immutable_or_append(const struct ext2_inode_large *inode)
{
	const struct ext2_inode *ei = (const struct ext2_inode *)inode;

	return nx_iflags_immutable(ei) || nx_iflags_append_only(ei);
}

static errcode_t may_read(const struct nx_cred *cred,
			  const struct ext2_inode_large *inode,
			  enum xattr_ns ns)
{
	const struct ext2_inode *ei = (const struct ext2_inode *)inode;

	switch (ns) {
	case NS_TRUSTED:
		/* Hidden, not forbidden: the kernel says "no such attr". */
		return nx_cred_is_root(cred) ? 0 : ENODATA;
	case NS_USER:
		if (!is_reg_or_dir(inode))
			return ENODATA;
		return nx_perm_access(cred, ei, R_OK);
	case NS_GNU:
		return nx_perm_access(cred, ei, R_OK);
	default:
		/* security.* and system.* are not restricted by the VFS. */
		return 0;
	}
}

/* Set or remove of a non-ACL name. */
static errcode_t may_write(const struct nx_cred *cred,
			   const struct ext2_inode_large *inode,
			   const char *name, enum xattr_ns ns)
{
	const struct ext2_inode *ei = (const struct ext2_inode *)inode;

	if (is_immutable_or_append(inode))
		return EPERM;
	switch (ns) {
	case NS_TRUSTED:
		return nx_cred_is_root(cred) ? 0 : EPERM;
	case NS_SECURITY:
		/*
		 * The kernel leaves security.* to the LSM.  Under FUSE the
		 * LSM has already decided before we are called; for
		 * everything else allow the owner and root, except file
		 * capabilities, which are root's (CAP_SETFCAP) alone.
		 */
		if (strcmp(name, "security.capability") == 0)
			return nx_cred_is_root(cred) ? 0 : EPERM;
		return nx_perm_is_owner(cred, ei) ? 0 : EPERM;
	case NS_USER:
		if (!is_reg_or_dir(inode))
			return EPERM;
		/* Sticky directories: only the owner may label them. */
		if (LINUX_S_ISDIR(inode->i_mode) &&
		    (inode->i_mode & S_ISVTX) && !nx_perm_is_owner(cred, ei))
			return EPERM;
		return nx_perm_access(cred, ei, W_OK);
	default:
		return nx_perm_access(cred, ei, W_OK);
	}
}

static int may_list(const struct nx_cred *cred, enum xattr_ns ns)
{
	return ns != NS_TRUSTED || nx_cred_is_root(cred);
}

/* ---- libext2fs handle helpers --------------------------------------- */

/* Open INO's xattrs, untranslated; EXT2_ET_MISSING_EA_FEATURE passes up. */
static errcode_t xattrs_load(ext2_filsys fs, ext2_ino_t ino,
			     struct ext2_xattr_handle **ret)
{
	struct ext2_xattr_handle *h;
	unsigned int flags = XATTR_HANDLE_FLAG_RAW;
	errcode_t err;

	err = ext2fs_xattrs_open(fs, ino, &h);
	if (err)
		return err;
	err = ext2fs_xattrs_flags(h, &flags, NULL);
	if (!err)
		err = ext2fs_xattrs_read(h);
	if (err) {
		ext2fs_xattrs_close(&h);
		return err;
	}
	*ret = h;
	return 0;
}

/*
 * For a write: like ext4_xattr_update_super_block(), the first xattr on
 * a file system without the ext_attr feature turns the feature on.
 */
static errcode_t xattrs_load_for_write(ext2_filsys fs, ext2_ino_t ino,
				       struct ext2_xattr_handle **ret)
{
	errcode_t err = xattrs_load(fs, ino, ret);

	if (err != EXT2_ET_MISSING_EA_FEATURE)
		return err;
	ext2fs_set_feature_xattr(fs->super);
	ext2fs_mark_super_dirty(fs);
	return xattrs_load(fs, ino, ret);
}

/* Store NAME = VALUE; "does not fit" is ENOSPC, as in ext4. */
static errcode_t raw_set(struct ext2_xattr_handle *h, const char *name,
			 const void *value, size_t len)
{
	errcode_t err = ext2fs_xattr_set(h, name, value, len);

	return err == EXT2_ET_EA_NO_SPACE ? ENOSPC : err;
}

/* Copy of NAME's stored value (free with ext2fs_free_mem), or ENODATA. */
static errcode_t raw_get(struct ext2_xattr_handle *h, const char *name,
			 void **value, size_t *len)
{
	errcode_t err = ext2fs_xattr_get(h, name, value, len);

	return err == EXT2_ET_EA_KEY_NOT_FOUND ? ENODATA : err;
}

static int raw_exists(struct ext2_xattr_handle *h, const char *name,
		      errcode_t *err)
{
	void *value = NULL;
	size_t len;

	*err = raw_get(h, name, &value, &len);
	if (*err == 0) {
		ext2fs_free_mem(&value);
		return 1;
	}
	if (*err == ENODATA)
		*err = 0;
	return 0;
}

/*
 * libext2fs (1.47.0) rewrites the external block even when no attribute
 * is left in it; ext4 gives such a block back, and so do we.  Only INODE
 * in memory is updated.
 */
static errcode_t drop_empty_ea_block(ext2_filsys fs, ext2_ino_t ino,
				     struct ext2_inode_large *inode)
{
	blk64_t blk = ext2fs_file_acl_block(fs, (struct ext2_inode *)inode);
	struct ext2_ext_attr_header *hdr;
	errcode_t err;

	if (blk == 0)
		return 0;
	err = ext2fs_get_mem(fs->blocksize, &hdr);
	if (err)
		return err;
	err = ext2fs_read_ext_attr3(fs, blk, hdr, ino);
	if (!err && EXT2_EXT_IS_LAST_ENTRY(hdr + 1))
		err = ext2fs_free_ext_attr(fs, ino, inode);
	ext2fs_free_mem(&hdr);
	return err;
}

/*
 * The xattrs of INO changed on disk: stamp ctime (and the new MODE if
 * non-NULL) on a fresh copy of the inode and write it once.
 */
static errcode_t stamp_change(struct nx_volume *vol, ext2_ino_t ino,
			      const mode_t *mode)
{
	struct ext2_inode_large inode;
	errcode_t err = nx_inode_read(vol, ino, &inode);

	if (!err)
		err = drop_empty_ea_block(vol->fs, ino, &inode);
	if (err)
		return err;
	if (mode)
		inode.i_mode = *mode;
	nx_inode_touch(&inode, NX_TOUCH_CTIME);
	return nx_inode_write(vol, ino, &inode);
}

/* getxattr/listxattr size protocol: 0 asks, too small is ERANGE. */
static errcode_t reply(void *buf, size_t size, const void *data, size_t len,
		       size_t *lenp)
{
	*lenp = len;
	if (size == 0)
		return 0;
	if (size < len)
		return ERANGE;
	if (len)
		memcpy(buf, data, len);
	return 0;
}

/* ---- POSIX ACLs: formats ------------------------------------------- */

/* ext4's on-disk ACL (fs/ext4/acl.h): short entries lack the id. */
#define EXT4_ACL_VERSION	0x0001

struct ext4_acl_header {
	uint32_t a_version;
};

struct ext4_acl_entry {
	uint16_t e_tag;
	uint16_t e_perm;
	uint32_t e_id;
};

struct ext4_acl_entry_short {
	uint16_t e_tag;
	uint16_t e_perm;
};

#define ACL_PERM_BITS	(ACL_READ | ACL_WRITE | ACL_EXECUTE)
#define ACL_NO_ID	((uint32_t)ACL_UNDEFINED_ID)

struct acl_entry {
	uint16_t tag;
	uint16_t perm;
	uint32_t id;
};

struct acl {
	size_t count;
	struct acl_entry e[];
};

static struct acl *acl_alloc(size_t count)
{
	struct acl *acl = calloc(1, sizeof(*acl) +
				 count * sizeof(struct acl_entry));

	if (acl)
		acl->count = count;
	return acl;
}

static struct acl *acl_dup(const struct acl *src)
{
	struct acl *acl = acl_alloc(src->count);

	if (acl)
		memcpy(acl->e, src->e, src->count * sizeof(src->e[0]));
	return acl;
}

static int tag_has_id(uint16_t tag)
{
	return tag == ACL_USER || tag == ACL_GROUP;
}

static int tag_is_known(uint16_t tag)
{
	switch (tag) {
	case ACL_USER_OBJ:
	case ACL_USER:
	case ACL_GROUP_OBJ:
	case ACL_GROUP:
	case ACL_MASK:
	case ACL_OTHER:
		return 1;
	}
	return 0;
}

/*
 * The tag and permissions of an entry as stored (little-endian, both
 * formats): 0 unless the tag is one we know; the id is the caller's.
 */
static int read_entry_head(struct acl_entry *e, uint16_t tag, uint16_t perm)
{
	e->tag = ext2fs_le16_to_cpu(tag);
	e->perm = ext2fs_le16_to_cpu(perm);
	e->id = ACL_NO_ID;
	return tag_is_known(e->tag);
}

/*
 * posix_acl_from_xattr(): the value the kernel hands us.  No value or a
 * bare header means "no ACL" (*ACL = NULL).  The value need not be
 * aligned (FUSE passes it right after the name in the request), so the
 * header and entries are copied out, not accessed in place.
 */
static errcode_t acl_from_xattr(const void *value, size_t size,
				struct acl **ret)
{
	struct posix_acl_xattr_header hdr;
	struct posix_acl_xattr_entry xe;
	const char *p;
	struct acl *acl;
	size_t count, i;

	*ret = NULL;
	if (!value || size == 0)
		return 0;
	if (size < sizeof(hdr))
		return EINVAL;
	memcpy(&hdr, value, sizeof(hdr));
	if (ext2fs_le32_to_cpu(hdr.a_version) != POSIX_ACL_XATTR_VERSION)
		return EOPNOTSUPP;
	if ((size - sizeof(hdr)) % sizeof(xe))
		return EINVAL;
	count = (size - sizeof(hdr)) / sizeof(xe);
	if (count == 0)
		return 0;
	acl = acl_alloc(count);
	if (!acl)
		return ENOMEM;
	p = (const char *)value + sizeof(hdr);
	for (i = 0; i < count; i++, p += sizeof(xe)) {
		struct acl_entry *e = &acl->e[i];

		memcpy(&xe, p, sizeof(xe));
		if (!read_entry_head(e, xe.e_tag, xe.e_perm))
			goto invalid;
		if (tag_has_id(e->tag)) {
			e->id = ext2fs_le32_to_cpu(xe.e_id);
			if (e->id == ACL_NO_ID)
				goto invalid;
		}
	}
	*ret = acl;
	return 0;
invalid:
	free(acl);
	return EINVAL;
}

/* posix_acl_to_xattr(): what getxattr returns. */
static errcode_t acl_to_xattr(const struct acl *acl, void **value,
			      size_t *size)
{
	struct posix_acl_xattr_header *hdr;
	struct posix_acl_xattr_entry *xe;
	size_t i;

	*size = sizeof(*hdr) + acl->count * sizeof(*xe);
	hdr = malloc(*size);
	if (!hdr)
		return ENOMEM;
	hdr->a_version = ext2fs_cpu_to_le32(POSIX_ACL_XATTR_VERSION);
	xe = (struct posix_acl_xattr_entry *)(hdr + 1);
	for (i = 0; i < acl->count; i++, xe++) {
		xe->e_tag = ext2fs_cpu_to_le16(acl->e[i].tag);
		xe->e_perm = ext2fs_cpu_to_le16(acl->e[i].perm);
		xe->e_id = ext2fs_cpu_to_le32(tag_has_id(acl->e[i].tag) ?
					      acl->e[i].id : ACL_NO_ID);
	}
	*value = hdr;
	return 0;
}

/* ext4_acl_from_disk(); a corrupt value is EINVAL as in ext4. */
static errcode_t acl_from_disk(const void *value, size_t size,
			       struct acl **ret)
{
	const struct ext4_acl_header *hdr = value;
	const char *p, *end = (const char *)value + size;
	struct acl *acl;
	size_t n = 0;

	*ret = NULL;
	if (size < sizeof(*hdr) ||
	    ext2fs_le32_to_cpu(hdr->a_version) != EXT4_ACL_VERSION)
		return EINVAL;
	if (size == sizeof(*hdr))
		return 0;
	/* Every entry takes at least a short entry's room. */
	acl = acl_alloc((size - sizeof(*hdr)) /
			sizeof(struct ext4_acl_entry_short));
	if (!acl)
		return ENOMEM;
	for (p = (const char *)(hdr + 1); p < end; n++) {
		const struct ext4_acl_entry *de = (const void *)p;
		struct acl_entry *e = &acl->e[n];

		if (end - p < (ptrdiff_t)sizeof(struct ext4_acl_entry_short))
			goto invalid;
		if (!read_entry_head(e, de->e_tag, de->e_perm))
			goto invalid;
		if (!tag_has_id(e->tag)) {
			p += sizeof(struct ext4_acl_entry_short);
			continue;
		}
		if (end - p < (ptrdiff_t)sizeof(*de))
			goto invalid;
		e->id = ext2fs_le32_to_cpu(de->e_id);
		p += sizeof(*de);
	}
	acl->count = n;
	*ret = acl;
	return 0;
invalid:
	free(acl);
	return EINVAL;
}

/* ext4_acl_to_disk(). */
static errcode_t acl_to_disk(const struct acl *acl, void **value,
			     size_t *size)
{
	struct ext4_acl_header *hdr;
	char *p;
	size_t i;

	*size = sizeof(*hdr);
	for (i = 0; i < acl->count; i++)
		*size += tag_has_id(acl->e[i].tag) ?
			 sizeof(struct ext4_acl_entry) :
			 sizeof(struct ext4_acl_entry_short);
	hdr = malloc(*size);
	if (!hdr)
		return ENOMEM;
	hdr->a_version = ext2fs_cpu_to_le32(EXT4_ACL_VERSION);
	p = (char *)(hdr + 1);
	for (i = 0; i < acl->count; i++) {
		struct ext4_acl_entry *de = (void *)p;

		de->e_tag = ext2fs_cpu_to_le16(acl->e[i].tag);
		de->e_perm = ext2fs_cpu_to_le16(acl->e[i].perm);
		if (tag_has_id(acl->e[i].tag)) {
			de->e_id = ext2fs_cpu_to_le32(acl->e[i].id);
			p += sizeof(*de);
		} else {
			p += sizeof(struct ext4_acl_entry_short);
		}
	}
	*value = hdr;
	return 0;
}

/* ---- POSIX ACLs: semantics (fs/posix_acl.c) ------------------------ */

/*
 * posix_acl_valid(): owner, named users, group, named groups, mask,
 * other, in that order; the mask is required once named entries exist.
 */
static errcode_t acl_valid(const struct acl *acl)
{
	enum { S_OWNER, S_USERS, S_GROUPS, S_OTHER, S_DONE } state = S_OWNER;
	int needs_mask = 0;
	size_t i;

	for (i = 0; i < acl->count; i++) {
		const struct acl_entry *e = &acl->e[i];

		if (e->perm & ~ACL_PERM_BITS)
			return EINVAL;
		switch (e->tag) {
		case ACL_USER_OBJ:
			if (state != S_OWNER)
				return EINVAL;
			state = S_USERS;
			break;
		case ACL_USER:
			if (state != S_USERS)
				return EINVAL;
			needs_mask = 1;
			break;
		case ACL_GROUP_OBJ:
			if (state != S_USERS)
				return EINVAL;
			state = S_GROUPS;
			break;
		case ACL_GROUP:
			if (state != S_GROUPS)
				return EINVAL;
			needs_mask = 1;
			break;
		case ACL_MASK:
			if (state != S_GROUPS)
				return EINVAL;
			state = S_OTHER;
			break;
		case ACL_OTHER:
			if (state != S_OTHER &&
			    !(state == S_GROUPS && !needs_mask))
				return EINVAL;
			state = S_DONE;
			break;
		default:
			return EINVAL;
		}
	}
	return state == S_DONE ? 0 : EINVAL;
}

/*
 * posix_acl_equiv_mode(): the permission bits ACL implies go into *MODE;
 * returns 1 if the ACL says more than the mode can (named entries or a
 * mask), 0 if the mode alone expresses it.
 */
static int acl_equiv_mode(const struct acl *acl, mode_t *mode)
{
	mode_t bits = 0;
	int not_equiv = 0;
	size_t i;

	for (i = 0; i < acl->count; i++) {
		mode_t perm = acl->e[i].perm & S_IRWXO;

		switch (acl->e[i].tag) {
		case ACL_USER_OBJ:
			bits |= perm << 6;
			break;
		case ACL_GROUP_OBJ:
			bits |= perm << 3;
			break;
		case ACL_OTHER:
			bits |= perm;
			break;
		case ACL_MASK:
			bits = (bits & ~S_IRWXG) | (perm << 3);
			not_equiv = 1;
			break;
		default:
			not_equiv = 1;
			break;
		}
	}
	*mode = (*mode & ~(mode_t)(S_IRWXU | S_IRWXG | S_IRWXO)) | bits;
	return not_equiv;
}

static struct acl_entry *acl_find(struct acl *acl, uint16_t tag)
{
	size_t i;

	for (i = 0; i < acl->count; i++)
		if (acl->e[i].tag == tag)
			return &acl->e[i];
	return NULL;
}

/*
 * posix_acl_create_masq(): a new inode's access ACL is its parent's
 * default ACL limited by the requested MODE, and the mode by the ACL.
 * Returns 1 if the ACL must be stored, 0 if the mode says it all.
 */
static int acl_create_masq(struct acl *acl, mode_t *mode_p)
{
	struct acl_entry *group = acl_find(acl, ACL_GROUP_OBJ);
	struct acl_entry *mask = acl_find(acl, ACL_MASK);
	struct acl_entry *owner = acl_find(acl, ACL_USER_OBJ);
	struct acl_entry *other = acl_find(acl, ACL_OTHER);
	struct acl_entry *g = mask ? mask : group;
	mode_t mode = *mode_p;
	size_t i;
	int not_equiv = mask != NULL;

	if (!owner || !other || !g)
		return -1;
	for (i = 0; i < acl->count; i++)
		if (tag_has_id(acl->e[i].tag))
			not_equiv = 1;
	owner->perm &= (mode >> 6) & S_IRWXO;
	mode &= (owner->perm << 6) | ~(mode_t)S_IRWXU;
	other->perm &= mode & S_IRWXO;
	mode &= other->perm | ~(mode_t)S_IRWXO;
	g->perm &= (mode >> 3) & S_IRWXO;
	mode &= (g->perm << 3) | ~(mode_t)S_IRWXG;
	*mode_p = mode;
	return not_equiv;
}

/* posix_acl_chmod_masq(): the ACL follows a chmod to MODE. */
static errcode_t acl_chmod_masq(struct acl *acl, mode_t mode)
{
	struct acl_entry *owner = acl_find(acl, ACL_USER_OBJ);
	struct acl_entry *other = acl_find(acl, ACL_OTHER);
	struct acl_entry *g = acl_find(acl, ACL_MASK);

	if (!g)
		g = acl_find(acl, ACL_GROUP_OBJ);
	if (!owner || !other || !g)
		return EIO;
	owner->perm = (mode & S_IRWXU) >> 6;
	g->perm = (mode & S_IRWXG) >> 3;
	other->perm = mode & S_IRWXO;
	return 0;
}

/* ---- POSIX ACLs: storage ------------------------------------------- */

/* INO's ACL NAME, or *ACL = NULL if it has none. */
static errcode_t acl_load(ext2_filsys fs, ext2_ino_t ino, const char *name,
			  struct acl **acl)
{
	struct ext2_xattr_handle *h;
	void *value = NULL;
	size_t len;
	errcode_t err;

	*acl = NULL;
	err = xattrs_load(fs, ino, &h);
	if (err == EXT2_ET_MISSING_EA_FEATURE)
		return 0;
	if (err)
		return err;
	err = raw_get(h, name, &value, &len);
	ext2fs_xattrs_close(&h);
	if (err == ENODATA)
		return 0;
	if (err)
		return err;
	err = acl_from_disk(value, len, acl);
	ext2fs_free_mem(&value);
	return err;
}

/* Store ACL as NAME of INO, or remove NAME if ACL is NULL. */
static errcode_t acl_store(ext2_filsys fs, ext2_ino_t ino, const char *name,
			   const struct acl *acl, int *changed)
{
	struct ext2_xattr_handle *h;
	void *value = NULL;
	size_t len;
	errcode_t err;

	*changed = 0;
	if (!acl) {
		err = xattrs_load(fs, ino, &h);
		if (err == EXT2_ET_MISSING_EA_FEATURE)
			return 0;
		if (err)
			return err;
		/* Removing an ACL that is not there is not an error. */
		if (raw_exists(h, name, &err)) {
			err = ext2fs_xattr_remove(h, name);
			*changed = !err;
		}
		ext2fs_xattrs_close(&h);
		return err;
	}
	err = acl_to_disk(acl, &value, &len);
	if (err)
		return err;
	err = xattrs_load_for_write(fs, ino, &h);
	if (!err) {
		err = raw_set(h, name, value, len);
		*changed = !err;
		ext2fs_xattrs_close(&h);
	}
	free(value);
	return err;
}

/* getxattr of an ACL name: the disk format turned into the VFS one. */
static errcode_t acl_get(struct ext2_xattr_handle *h, const char *name,
			 void **value, size_t *len)
{
	struct acl *acl;
	void *raw = NULL;
	size_t raw_len;
	errcode_t err = raw_get(h, name, &raw, &raw_len);

	if (err)
		return err;
	err = acl_from_disk(raw, raw_len, &acl);
	ext2fs_free_mem(&raw);
	if (err)
		return err;
	if (!acl)
		return ENODATA;
	err = acl_to_xattr(acl, value, len);
	free(acl);
	return err;
}

/*
 * setxattr/removexattr of an ACL name (vfs_set_acl, set_posix_acl,
 * ext4_set_acl).  An access ACL that the mode can express is not stored
 * at all; either way the mode takes the ACL's permission bits.
 */
static errcode_t acl_set(struct nx_volume *vol, const struct nx_cred *cred,
			 ext2_ino_t ino, const struct ext2_inode_large *inode,
			 enum xattr_ns ns, const void *value, size_t size)
{
	const char *name = ns == NS_ACL_ACCESS ? ACL_ACCESS_NAME :
						 ACL_DEFAULT_NAME;
	mode_t mode = inode->i_mode;
	struct acl *acl;
	int changed = 0;
	errcode_t err;

	err = acl_from_xattr(value, size, &acl);
	if (err)
		return err;
	if (is_immutable_or_append(inode))
		err = EPERM;
	else if (LINUX_S_ISLNK(mode))
		err = EOPNOTSUPP;
	else if (ns == NS_ACL_DEFAULT && !LINUX_S_ISDIR(mode))
		err = acl ? EACCES : 0;		/* nothing to remove */
	else if (!nx_perm_is_owner(cred, (const struct ext2_inode *)inode))
		err = EPERM;
	else if (acl)
		err = acl_valid(acl);
	if (err || (ns == NS_ACL_DEFAULT && !LINUX_S_ISDIR(mode)))
		goto out;

	if (ns == NS_ACL_ACCESS && acl) {
		if (acl_equiv_mode(acl, &mode) == 0) {
			free(acl);
			acl = NULL;
		}
		if (!nx_cred_is_root(cred) &&
		    !nx_cred_in_group(cred, inode_gid(*inode)))
			mode &= ~S_ISGID;
	}
	err = acl_store(vol->fs, ino, name, acl, &changed);
	if (!err && (changed || mode != inode->i_mode))
		err = stamp_change(vol, ino,
				   mode != inode->i_mode ? &mode : NULL);
out:
	free(acl);
	return err;
}

errcode_t nx_acl_inherit(struct nx_volume *vol, ext2_ino_t dir,
			 ext2_ino_t ino, struct ext2_inode_large *inode,
			 mode_t umask)
{
	struct acl *def = NULL, *acc = NULL;
	mode_t mode = inode->i_mode;
	int is_dir = LINUX_S_ISDIR(mode), stored = 0, changed, need_acc;
	errcode_t err;

	if (LINUX_S_ISLNK(mode))
		return 0;
	err = acl_load(vol->fs, dir, ACL_DEFAULT_NAME, &def);
	if (err)
		return err;
	if (!def) {
		mode &= ~(umask & 0777);
		if (mode == inode->i_mode)
			return 0;
		inode->i_mode = mode;
		return nx_inode_write(vol, ino, inode);
	}
	acc = acl_dup(def);
	if (!acc) {
		err = ENOMEM;
		goto out;
	}
	need_acc = acl_create_masq(acc, &mode);
	if (need_acc < 0) {
		err = EIO;	/* a default ACL without its base entries */
		goto out;
	}
	inode->i_mode = mode;
	err = nx_inode_write(vol, ino, inode);
	if (!err && need_acc) {
		err = acl_store(vol->fs, ino, ACL_ACCESS_NAME, acc, &changed);
		stored |= changed;
	}
	if (!err && is_dir) {
		err = acl_store(vol->fs, ino, ACL_DEFAULT_NAME, def, &changed);
		stored |= changed;
	}
	if (!err && stored)
		err = nx_inode_read(vol, ino, inode);
out:
	free(acc);
	free(def);
	return err;
}

errcode_t nx_acl_chmod(struct nx_volume *vol, ext2_ino_t ino, mode_t mode)
{
	struct acl *acl;
	int changed;
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	err = acl_load(vol->fs, ino, ACL_ACCESS_NAME, &acl);
	if (err || !acl)
		return err;
	err = acl_chmod_masq(acl, mode);
	if (!err)
		err = acl_store(vol->fs, ino, ACL_ACCESS_NAME, acl, &changed);
	free(acl);
	return err;
}

/* Remove NAME from INO's xattrs (ENODATA if absent). */
static errcode_t raw_remove(ext2_filsys fs, ext2_ino_t ino, const char *name)
{
	struct ext2_xattr_handle *h;
	errcode_t err = xattrs_load(fs, ino, &h);

	if (err == EXT2_ET_MISSING_EA_FEATURE)
		return ENODATA;
	if (err)
		return err;
	if (!raw_exists(h, name, &err) && !err)
		err = ENODATA;
	if (!err)
		err = ext2fs_xattr_remove(h, name);
	ext2fs_xattrs_close(&h);
	return err;
}

/* ---- the xattr calls ------------------------------------------------ */

errcode_t nx_getxattr(struct nx_volume *vol, const struct nx_cred *cred,
		      ext2_ino_t ino, const char *name, void *buf,
		      size_t size, size_t *len)
{
	struct ext2_inode_large inode;
	struct ext2_xattr_handle *h;
	enum xattr_ns ns;
	void *value = NULL;
	size_t vlen = 0;
	errcode_t err;

	*len = 0;
	err = resolve_name(name, &ns);
	if (!err)
		err = nx_inode_read(vol, ino, &inode);
	if (!err)
		err = may_read(cred, &inode, ns);
	if (!err && is_acl_ns(ns) && LINUX_S_ISLNK(inode.i_mode))
		err = EOPNOTSUPP;	/* symlinks have no ACL ops */
	if (err)
		return err;
	err = xattrs_load(vol->fs, ino, &h);
	if (err == EXT2_ET_MISSING_EA_FEATURE)
		return ENODATA;
	if (err)
		return err;
	if (is_acl_ns(ns)) {
		err = acl_get(h, name, &value, &vlen);
		if (!err)
			err = reply(buf, size, value, vlen, len);
		free(value);
	} else {
		err = raw_get(h, name, &value, &vlen);
		if (!err)
			err = reply(buf, size, value, vlen, len);
		if (value)
			ext2fs_free_mem(&value);
	}
	ext2fs_xattrs_close(&h);
	return err;
}

struct list_ctx {
	const struct nx_cred *cred;
	char *buf;
	size_t size;
	size_t len;
};

static int list_one(char *name, char *value, size_t value_len, void *data)
{
	struct list_ctx *c = data;
	enum xattr_ns ns;
	size_t n;

	/* Names without a handler (system.data, ...) are not listed. */
	if (resolve_name(name, &ns) != 0 || !may_list(c->cred, ns))
		return 0;
	n = strlen(name) + 1;
	if (c->len + n <= c->size)
		memcpy(c->buf + c->len, name, n);
	c->len += n;
	return 0;
}

errcode_t nx_listxattr(struct nx_volume *vol, const struct nx_cred *cred,
		       ext2_ino_t ino, char *buf, size_t size, size_t *len)
{
	struct list_ctx ctx = { cred, buf, size, 0 };
	struct ext2_xattr_handle *h;
	errcode_t err;

	*len = 0;
	err = xattrs_load(vol->fs, ino, &h);
	if (err == EXT2_ET_MISSING_EA_FEATURE)
		return 0;
	if (err)
		return err;
	err = ext2fs_xattrs_iterate(h, list_one, &ctx);
	ext2fs_xattrs_close(&h);
	if (err)
		return err;
	*len = ctx.len;
	return size && size < ctx.len ? ERANGE : 0;
}

errcode_t nx_setxattr(struct nx_volume *vol, const struct nx_cred *cred,
		      ext2_ino_t ino, const char *name, const void *value,
		      size_t size, int flags)
{
	struct ext2_inode_large inode;
	struct ext2_xattr_handle *h;
	enum xattr_ns ns;
	errcode_t err;
	int exists;

	if (nx_volume_rdonly(vol))
		return EROFS;
	err = resolve_name(name, &ns);
	if (err)
		return err;
	if (size > NX_XATTR_SIZE_MAX)
		return E2BIG;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return EINVAL;
	err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	/* ACLs ignore XATTR_CREATE/XATTR_REPLACE, as in the kernel. */
	if (is_acl_ns(ns))
		return acl_set(vol, cred, ino, &inode, ns, value, size);
	err = may_write(cred, &inode, name, ns);
	if (err)
		return err;

	err = xattrs_load_for_write(vol->fs, ino, &h);
	if (err)
		return err;
	exists = raw_exists(h, name, &err);
	if (!err && exists && (flags & XATTR_CREATE))
		err = EEXIST;
	if (!err && !exists && (flags & XATTR_REPLACE))
		err = ENODATA;
	if (!err)
		err = raw_set(h, name, value, size);
	ext2fs_xattrs_close(&h);
	if (err)
		return err;
	return stamp_change(vol, ino, NULL);
}

errcode_t nx_removexattr(struct nx_volume *vol, const struct nx_cred *cred,
			 ext2_ino_t ino, const char *name)
{
	struct ext2_inode_large inode;
	enum xattr_ns ns;
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	err = resolve_name(name, &ns);
	if (!err)
		err = nx_inode_read(vol, ino, &inode);
	if (err)
		return err;
	if (is_acl_ns(ns))
		return acl_set(vol, cred, ino, &inode, ns, NULL, 0);
	err = may_write(cred, &inode, name, ns);
	if (!err)
		err = raw_remove(vol->fs, ino, name);
	if (err)
		return err;
	return stamp_change(vol, ino, NULL);
}

/* ---- nextfs's own records (xattr.h) --------------------------------- */

static int is_private_name(const char *name)
{
	return strncmp(name, NX_XATTR_PRIVATE, strlen(NX_XATTR_PRIVATE)) == 0 &&
	       strlen(name) > strlen(NX_XATTR_PRIVATE) &&
	       strlen(name) <= NX_XATTR_NAME_MAX;
}

errcode_t nx_xattr_private_get(struct nx_volume *vol, ext2_ino_t ino,
			       const char *name, void **value, size_t *len)
{
	struct ext2_xattr_handle *h;
	void *raw = NULL;
	errcode_t err;

	*value = NULL;
	*len = 0;
	if (!is_private_name(name))
		return EINVAL;
	err = xattrs_load(vol->fs, ino, &h);
	if (err == EXT2_ET_MISSING_EA_FEATURE)
		return ENODATA;
	if (err)
		return err;
	err = raw_get(h, name, &raw, len);
	ext2fs_xattrs_close(&h);
	if (err)
		return err;
	*value = malloc(*len ? *len : 1);
	if (!*value)
		err = ENOMEM;
	else if (*len)
		memcpy(*value, raw, *len);
	ext2fs_free_mem(&raw);
	return err;
}

/* After a change: give back an external block left empty (no ctime). */
static errcode_t private_written(struct nx_volume *vol, ext2_ino_t ino)
{
	struct ext2_inode_large inode;
	blk64_t before;
	errcode_t err = nx_inode_read(vol, ino, &inode);

	if (err)
		return err;
	before = ext2fs_file_acl_block(vol->fs, (struct ext2_inode *)&inode);
	err = drop_empty_ea_block(vol->fs, ino, &inode);
	if (!err && before != ext2fs_file_acl_block(vol->fs,
					(struct ext2_inode *)&inode))
		err = nx_inode_write(vol, ino, &inode);
	return err;
}

errcode_t nx_xattr_private_set(struct nx_volume *vol, ext2_ino_t ino,
			       const char *name, const void *value,
			       size_t len)
{
	struct ext2_xattr_handle *h;
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	if (!is_private_name(name) || len > NX_XATTR_SIZE_MAX)
		return EINVAL;
	err = xattrs_load_for_write(vol->fs, ino, &h);
	if (err)
		return err;
	err = raw_set(h, name, value, len);
	ext2fs_xattrs_close(&h);
	return err ? err : private_written(vol, ino);
}

errcode_t nx_xattr_private_remove(struct nx_volume *vol, ext2_ino_t ino,
				  const char *name)
{
	errcode_t err;

	if (nx_volume_rdonly(vol))
		return EROFS;
	if (!is_private_name(name))
		return EINVAL;
	err = raw_remove(vol->fs, ino, name);
	return err ? err : private_written(vol, ino);
}
