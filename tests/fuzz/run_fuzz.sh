#!/bin/sh
# Builds the decoder fuzzer with clang in build-fuzz/, seeds it with one
# valid frame of every message type, and runs it for SECONDS (default 60).
# Exits non-zero when the fuzzer finds a crash; the reproducer is left in
# build-fuzz/fuzz-artifacts/.
#   usage: tests/fuzz/run_fuzz.sh [SECONDS]
set -eu

secs=${1:-60}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS]" >&2
	exit 2
	;;
esac

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)

CC=clang cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang \
	-DDDPRUN_FUZZ=ON -DDDPRUN_TESTS=ON -DDDPRUN_SANITIZE= >/dev/null
cmake --build "$build" --target fuzz_decode gen_corpus -j "$jobs"

seeds=$build/fuzz-seeds
corpus=$build/fuzz-corpus
artifacts=$build/fuzz-artifacts
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/tests/fuzz/gen_corpus" "$seeds"

# New inputs go to the first directory; the seeds are only read.
if ! "$build/tests/fuzz/fuzz_decode" -max_total_time="$secs" \
	-max_len=65536 -timeout=10 -print_final_stats=1 \
	-artifact_prefix="$artifacts/" "$corpus" "$seeds"; then
	echo "run_fuzz.sh: fuzz_decode failed; reproducer in $artifacts/" >&2
	exit 1
fi
