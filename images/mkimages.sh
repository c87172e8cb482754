#!/bin/bash
# mkimages.sh - make ext2/3/4 image files for nextfs demos and tests.
#
#   images/mkimages.sh demo OUT.img
#       64 MiB ext4 image (Debian 12 default features) populated with a few
#       example files and directories, owned by the calling user.
#
#   images/mkimages.sh FLAVOUR OUT.img SIZE [MKE2FS-ARGS...]
#       Empty image of SIZE (mke2fs size syntax: 64M, 1G, ...) with an
#       explicit feature set.  FLAVOUR is one of:
#         ext2         1 KiB blocks, no journal, indirect block maps
#         ext3         4 KiB blocks, journal, indirect block maps
#         ext4         Debian 12 ext4 defaults (extents, flex_bg, 64bit,
#                      metadata_csum, huge_file, dir_nlink, extra_isize)
#         ext4-inline  ext4 + inline_data
#       Extra arguments go to mke2fs last (e.g. -d DIR to populate, -N 64,
#       -m 0, -E root_owner=65534:65534, -U UUID).
#
#   Every image's root directory belongs to the calling user (mke2fs -E
#   root_owner=UID:GID; an -E given among the extra arguments is merged,
#   and its own root_owner wins), so that an unprivileged mount can write
#   to it.
#
#   images/mkimages.sh --features FLAVOUR
#       Print the feature list of FLAVOUR (used by the tests).
#
# The feature lists are explicit ("none," first clears mke2fs' base
# features) and mke2fs reads a private, minimal mke2fs.conf, so the result
# does not depend on the host's /etc/mke2fs.conf.

set -euo pipefail

MKE2FS=${MKE2FS:-$(command -v mke2fs || echo /sbin/mke2fs)}

BASE=ext_attr,resize_inode,dir_index,filetype,sparse_super,large_file
EXT4=$BASE,has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize

usage()
{
	sed -n '2,29s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

# Prints "TYPE BLOCKSIZE FEATURES" for a flavour.
flavour_params()
{
	case "$1" in
	ext2)		echo "ext2 1024 $BASE" ;;
	ext3)		echo "ext3 4096 $BASE,has_journal" ;;
	ext4)		echo "ext4 4096 $EXT4" ;;
	ext4-inline)	echo "ext4 4096 $EXT4,inline_data" ;;
	*)		echo "mkimages.sh: unknown flavour '$1'" >&2; exit 2 ;;
	esac
}

# A mke2fs.conf that defines the types we use and nothing else, so that
# no host default (features, inode size, ratios, hash) leaks in.
write_config()
{
	cat >"$1" <<-'EOF'
	[defaults]
		base_features = sparse_super
		default_mntopts = acl,user_xattr
		enable_periodic_fsck = 0
		blocksize = 4096
		inode_size = 256
		inode_ratio = 16384
		hash_alg = half_md4
		reserved_ratio = 5.0

	[fs_types]
		ext2 = {
			inode_size = 256
		}
		ext3 = {
			inode_size = 256
		}
		ext4 = {
			inode_size = 256
		}
		nextfs = {
			inode_size = 256
		}
	EOF
}

# Print ARGS (NUL-terminated) with root_owner=<caller> as the first
# extended option: merged into an -E among them (mke2fs keeps only the
# last -E; within one, the last root_owner counts), else as a new -E.
with_root_owner()
{
	local owner="root_owner=$(id -u):$(id -g)" merged=0 a

	while [ $# -gt 0 ]; do
		a=$1
		shift
		case $a in
		-E)
			if [ $# -gt 0 ]; then
				printf '%s\0%s\0' -E "$owner,$1"
				shift
				merged=1
				continue
			fi ;;
		-E?*)
			a="-E$owner,${a#-E}"
			merged=1 ;;
		esac
		printf '%s\0' "$a"
	done
	[ $merged = 1 ] || printf '%s\0%s\0' -E "$owner"
}

# make_image FLAVOUR OUT SIZE [MKE2FS-ARGS...]
make_image()
{
	local flavour=$1 out=$2 size=$3
	shift 3
	local type bsize features conf rc=0 args

	read -r type bsize features < <(flavour_params "$flavour")
	mapfile -t -d '' args < <(with_root_owner "$@")
	conf=$(mktemp "${TMPDIR:-/tmp}/mke2fs.conf.XXXXXX")
	write_config "$conf"
	: >"$out"	# (an existing file keeps mke2fs quiet)
	# Inode ratio 4096: room for the tests' 5000-entry directories even
	# on small images.  -T nextfs keeps mke2fs from applying its
	# "small"/"floppy" size classes.
	MKE2FS_CONFIG=$conf "$MKE2FS" -q -F -t "$type" -T nextfs \
		-O "none,$features" -b "$bsize" -I 256 -i 4096 \
		"${args[@]}" "$out" "$size" || rc=$?
	rm -f -- "$conf"
	return $rc
}

# Example content for the demo image.
populate_demo()
{
	local d=$1 i

	mkdir -p "$d/docs" "$d/src" "$d/photos/2024" "$d/many"
	cat >"$d/README.txt" <<-'EOF'
	Welcome to nextfs.

	This is an ordinary ext4 image, served from user space by nextfs-fuse.
	Everything you do here is written to the image file; unmount with
	"fusermount3 -u MOUNTPOINT" and check it with "e2fsck -fn IMAGE".
	EOF
	cat >"$d/src/hello.c" <<-'EOF'
	#include <stdio.h>

	int main(void)
	{
		printf("hello from an ext4 image\n");
		return 0;
	}
	EOF
	for i in 1 2 3; do
		printf 'Chapter %d\n\nSome text for chapter %d.\n' "$i" "$i" \
			>"$d/docs/chapter$i.txt"
	done
	head -c 200000 /dev/urandom >"$d/photos/2024/holiday.raw"
	for i in $(seq -w 1 200); do
		echo "file $i" >"$d/many/file$i"
	done
	# A sparse file: 32 MiB apparent size, two small data regions.
	printf 'start' | dd of="$d/sparse.bin" bs=1 conv=notrunc 2>/dev/null
	printf 'end' | dd of="$d/sparse.bin" bs=1 seek=$((32 * 1024 * 1024 - 3)) \
		conv=notrunc 2>/dev/null
	ln -s docs/chapter1.txt "$d/latest-chapter"
	ln "$d/README.txt" "$d/docs/README-hardlink.txt"
	if command -v setfattr >/dev/null; then
		setfattr -n user.comment -v "tagged with an xattr" \
			"$d/docs/chapter2.txt" 2>/dev/null || true
	fi
	chmod 0755 "$d" "$d/docs" "$d/src" "$d/photos" "$d/photos/2024" "$d/many"
}

make_demo()
{
	local out=$1 tmp rc=0

	tmp=$(mktemp -d "${TMPDIR:-/tmp}/nextfs-demo.XXXXXX")
	populate_demo "$tmp/root"
	# Debian 12 defaults for ext4 (inode ratio 16384).
	make_image ext4 "$out" 64M -i 16384 -L nextfs-demo -d "$tmp/root" ||
		rc=$?
	rm -rf -- "$tmp"
	return $rc
}

main()
{
	[ $# -ge 1 ] || usage
	case "$1" in
	-h|--help)
		usage ;;
	--features)
		[ $# -eq 2 ] || usage
		flavour_params "$2" | cut -d' ' -f3 ;;
	demo)
		[ $# -eq 2 ] || usage
		make_demo "$2" ;;
	*)
		[ $# -ge 3 ] || usage
		make_image "$@" ;;
	esac
}

main "$@"
