#!/bin/sh
# Builds the fuzzers with clang in build-fuzz/, seeds them and runs them
# for SECONDS (default 60). Exits non-zero when a fuzzer finds a crash; the
# reproducer is left in build-fuzz/fuzz-artifacts/ (decode) or
# build-fuzz/fuzz-artifacts-trace/ (trace).
#   usage: tests/fuzz/run_fuzz.sh [SECONDS] [decode|trace|both]
#   decode  the frame decoder, seeded with one valid frame of every message
#           type (the default)
#   trace   the trace readers of `ddprun diagnose` (dr_dg_read_buf), seeded
#           with tests/fuzz/trace_seeds/ and guided by trace.dict
#   both    the two side by side, SECONDS each (one CPU each)
# SECONDS 0 builds the fuzzers and runs nothing. Warnings are errors, as
# in every build of CI (DDPRUN_WERROR=OFF in the environment turns that off).
set -eu

secs=${1:-60}
target=${2:-decode}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS] [decode|trace|both]" >&2
	exit 2
	;;
esac
case $target in
decode | trace | both) ;;
*)
	echo "usage: $0 [SECONDS] [decode|trace|both]" >&2
	exit 2
	;;
esac

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)

CC=clang cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang \
	-DDDPRUN_FUZZ=ON -DDDPRUN_TESTS=ON -DDDPRUN_SANITIZE= \
	-DDDPRUN_WERROR="${DDPRUN_WERROR:-ON}" >/dev/null

case $target in
decode) cmake --build "$build" --target fuzz_decode gen_corpus -j "$jobs" ;;
trace) cmake --build "$build" --target fuzz_trace -j "$jobs" ;;
both) cmake --build "$build" --target fuzz_decode gen_corpus fuzz_trace -j "$jobs" ;;
esac
[ "$secs" -gt 0 ] || exit 0

fuzz_trace() {
	corpus=$build/fuzz-corpus-trace
	artifacts=$build/fuzz-artifacts-trace
	mkdir -p "$corpus" "$artifacts" || return 1
	# -rss_limit_mb: a gzip'd input of -max_len bytes inflates to at most
	# about 64 MiB (deflate's 1032:1), held once, under the readers' limit.
	if ! "$build/tests/fuzz/fuzz_trace" -max_total_time="$secs" \
		-max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-dict="$root/tests/fuzz/trace.dict" \
		-artifact_prefix="$artifacts/" "$corpus" "$root/tests/fuzz/trace_seeds"; then
		echo "run_fuzz.sh: fuzz_trace failed; reproducer in $artifacts/" >&2
		return 1
	fi
}

fuzz_decode() {
	seeds=$build/fuzz-seeds
	corpus=$build/fuzz-corpus
	artifacts=$build/fuzz-artifacts
	rm -rf "$seeds"
	mkdir -p "$seeds" "$corpus" "$artifacts" || return 1
	"$build/tests/fuzz/gen_corpus" "$seeds" || return 1
	# New inputs go to the first directory; the seeds are only read.
	if ! "$build/tests/fuzz/fuzz_decode" -max_total_time="$secs" \
		-max_len=65536 -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$artifacts/" "$corpus" "$seeds"; then
		echo "run_fuzz.sh: fuzz_decode failed; reproducer in $artifacts/" >&2
		return 1
	fi
}

case $target in
decode) fuzz_decode ;;
trace) fuzz_trace ;;
both)
	# The trace fuzzer's output goes to a file, shown once it ends, so that
	# the two fuzzers' lines do not interleave.
	log=$build/fuzz-trace.log
	fuzz_trace >"$log" 2>&1 &
	trace_pid=$!
	rc=0
	fuzz_decode || rc=1
	wait "$trace_pid" || rc=1
	echo "run_fuzz.sh: fuzz_trace's output:"
	cat "$log"
	exit "$rc"
	;;
esac
