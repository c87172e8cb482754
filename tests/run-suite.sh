#!/bin/sh
# tests/run-suite.sh - build and run the test suite in the ordinary build
# (build/) and in a build with AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer (build-san/).  This is the test command of
# README.md and of CI (.ci/run).
#
#   tests/run-suite.sh                          see below
#   tests/run-suite.sh [MESON-TEST-ARGS...]     e.g. --suite unit: these
#                                               tests, in both builds
#
# Without arguments, build-san/ runs every test, and build/ every test but
# the integration scripts' runs on the ext2, ext3 and ext4-inline flavours:
# the unit tests and the ext4 run of each integration script (and any
# test without a flavour) run in both builds; running all four flavours
# twice would take the CI run (2 cores) past 15 minutes.  The sanitized
# daemon is the one the integration tests exercise in full.
#
# Missing build directories are set up; a build-san/ that exists without
# the sanitizers is reconfigured.  Both builds' tests always run; the exit
# status is non-zero if either failed.
#
# In build-san/ every sanitizer report fails its test: UBSan reports are
# fatal (-fno-sanitize-recover), ASan/LSan ones make the process exit
# non-zero, and the integration harness also fails a test on any report in
# the daemon's log or in a tool's output (tests/integration/nxharness.py).
set -u
cd "$(dirname "$0")/.." || exit 1

SAN_OPTS="-Db_sanitize=address,undefined -Db_lundef=false"

san_configured() {
	meson introspect --buildoptions build-san 2>/dev/null | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
sys.exit(0 if opts.get("b_sanitize") == "address,undefined" else 1)'
}

if [ ! -d build ]; then
	meson setup build || exit 1
fi
if [ ! -d build-san ]; then
	# shellcheck disable=SC2086
	meson setup build-san $SAN_OPTS || exit 1
elif ! san_configured; then
	# shellcheck disable=SC2086
	meson configure build-san $SAN_OPTS || exit 1
fi

status=0
now() { date +%s; }

t0=$(now)
echo "=== run-suite: ordinary build (build/)"
if [ $# -eq 0 ]; then
	# "meson test --list" builds first; if that fails, run everything
	# below so that the build error is what gets reported.
	tests=$(meson test -C build --list 2>/dev/null |
		sed -n 's|^[^ ]* / ||p' |
		grep -Ev '^integ-.*-(ext2|ext3|ext4-inline)$')
	# shellcheck disable=SC2086
	meson test -C build --print-errorlogs $tests || status=1
else
	meson test -C build --print-errorlogs "$@" || status=1
fi
t1=$(now)
echo "=== run-suite: ASan+UBSan build (build-san/)"
# Sanitized code runs slower: more time before meson (and libcheck, for
# each unit test case) calls it a timeout.
CK_TIMEOUT_MULTIPLIER=3 \
	meson test -C build-san --print-errorlogs --timeout-multiplier 3 "$@" ||
	status=1
t2=$(now)

echo "=== run-suite: build/ $((t1 - t0)) s, build-san/ $((t2 - t1)) s:" \
	"$([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
