#!/bin/bash
# mkseeds.sh - make the fuzzer's base images and initial corpus.
#
#   fuzz/mkseeds.sh WORKLOAD TOOL MKIMAGES OUTDIR [MKDAMAGED]
#
# WORKLOAD is nextfs-fuzz-workload, TOOL nextfs-fuzz-tool, MKIMAGES the
# project's images/mkimages.sh.  Writes OUTDIR/bases/*.img (small 1 KiB
# block images of each flavour, some with snapshots) and OUTDIR/corpus/
# (one no-op patch program per base and metadata kind), then touches
# OUTDIR/seeds.stamp.  meson runs this at build time with -Dfuzz=true.
# Bases 08-10 are left with a journal to replay and an orphan (see the
# "crash" and "orphan:" steps of nextfs-fuzz-workload).  With MKDAMAGED
# (tests/integration/mkdamaged.py), the corpus also gets the damage the
# kernel refuses at mount, made on bases 00-03, as patch programs.
set -euo pipefail

[ $# -eq 4 ] || [ $# -eq 5 ] || { sed -n '2,14s/^# \{0,1\}//p' "$0" >&2; exit 2; }
WORKLOAD=$1 TOOL=$2 MKIMAGES=$3 OUT=$4 MKDAMAGED=${5:-}
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
	case " $* " in
	*" crash "*) replayed "$name" "$img" "$*" ;;
	esac
}

# A base left with a journal to replay: stock e2fsck replays it and frees
# the orphan on a copy, which must then be clean (unless it has snapshots,
# which stock e2fsck does not know).
replayed()
{
	local name=$1 img=$2 steps=$3 copy=$OUT/bases/.check.tmp
	case " $steps " in *" take:"*) return 0 ;; esac
	cp -- "$img" "$copy"
	"$E2FSCK" -fy "$copy" >/dev/null 2>&1 || [ $? -eq 1 ] || {
		echo "mkseeds.sh: e2fsck cannot replay $name" >&2
		exit 1
	}
	if ! "$E2FSCK" -fn "$copy" >/dev/null 2>&1; then
		echo "mkseeds.sh: $name is not clean after e2fsck's replay" >&2
		exit 1
	fi
	rm -f -- "$copy"
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
# Journals that need replay (a commit cut off right after its commit
# block) and an orphan (a file unlinked while open, committed before).
base 08-ext3-replay	ext3		3M	"-J size=1" \
	orphan:held crash churn:1
base 09-ext4-replay	ext4		3M	"-J size=1" \
	orphan:held crash churn:1
base 10-ext4-snap-replay ext4		3M	"-J size=1" \
	take:first churn:1 orphan:held crash churn:2

NEXTFS_FUZZ_BASES=$OUT/bases "$TOOL" corpus "$OUT/corpus"

# Damaged seeds: each kind of damage of mkdamaged.py that keeps the size,
# on the bases without snapshots, as the patch program from the base.
if [ -n "$MKDAMAGED" ]; then
	dmg=$OUT/damaged.tmp
	rm -rf -- "$dmg"
	for b in 00-ext2 01-ext3 02-ext4 03-ext4-inline; do
		python3 "$MKDAMAGED" --same-size "$OUT/bases/$b.img" "$dmg" |
		while read -r img; do
			name=$(basename "$img" .img)
			NEXTFS_FUZZ_BASES=$OUT/bases "$TOOL" seed "$b.img" \
				"$img" "$OUT/corpus/damaged-$name"
		done
	done
	rm -rf -- "$dmg"
fi
NEXTFS_FUZZ_BASES=$OUT/bases "$TOOL" describe >"$OUT/bases/README"
touch "$OUT/seeds.stamp"
