#!/bin/bash
# mkseeds.sh - make the fuzzer's base images and initial corpus.
#
#   fuzz/mkseeds.sh WORKLOAD TOOL MKIMAGES OUTDIR
#
# WORKLOAD is nextfs-fuzz-workload, TOOL nextfs-fuzz-tool, MKIMAGES the
# project's images/mkimages.sh.  Writes OUTDIR/bases/*.img (small 1 KiB
# block images of each flavour, some with snapshots) and OUTDIR/corpus/
# (one no-op patch program per base and metadata kind), then touches
# OUTDIR/seeds.stamp.  meson runs this at build time with -Dfuzz=true.
set -euo pipefail

[ $# -eq 4 ] || { sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2; }
WORKLOAD=$1 TOOL=$2 MKIMAGES=$3 OUT=$4
E2FSCK=${E2FSCK:-$(command -v e2fsck || echo /sbin/e2fsck)}

# Leaks are reported by the sanitizer build but must not stop the build.
export LSAN_OPTIONS=${LSAN_OPTIONS:-exitcode=0}

rm -rf -- "$OUT/bases" "$OUT/corpus"
mkdir -p -- "$OUT/bases" "$OUT/corpus"

# base NAME FLAVOUR SIZE "MKE2FS-ARGS" [STEP...]
base()
{
	local name=$1 flavour=$2 size=$3 args=$4 img
	shift 4
	img=$OUT/bases/$name.img
	# shellcheck disable=SC2086
	"$MKIMAGES" "$flavour" "$img" "$size" -b 1024 -N 128 -m 0 $args
	"$WORKLOAD" "$img" populate "$@"
	# Without snapshots stock e2fsck must find the base clean.
	if [ $# -eq 0 ] && ! "$E2FSCK" -fn "$img" >/dev/null 2>&1; then
		echo "mkseeds.sh: $name is not e2fsck clean" >&2
		exit 1
	fi
}

base 00-ext2		ext2		512K	""
base 01-ext3		ext3		3M	"-J size=1"
base 02-ext4		ext4		1M	"-O ^has_journal"
base 03-ext4-inline	ext4-inline	1M	"-O ^has_journal"
base 04-ext2-snap	ext2		768K	"" \
	take:first churn:1 take:second churn:2
base 05-ext4-snap	ext4		1M	"-O ^has_journal" \
	take:first churn:1 take:second churn:2
base 06-ext4-inline-snap ext4-inline	1M	"-O ^has_journal" \
	take:a churn:1 take:b churn:2 take:c churn:3 delete:b
base 07-ext3-snap	ext3		3M	"-J size=1" \
	take:only churn:1

NEXTFS_FUZZ_BASES=$OUT/bases "$TOOL" corpus "$OUT/corpus"
NEXTFS_FUZZ_BASES=$OUT/bases "$TOOL" describe >"$OUT/bases/README"
touch "$OUT/seeds.stamp"
