#!/bin/sh
# Runs the rendezvous, store and launch benchmarks several times and prints
# their result lines. Usage: tests/bench/run_benchmarks.sh [BUILD_DIR] [RUNS]
# BUILD_DIR holds rdzv_scale, store_bench, launch_bench, stamp, ddprun and
# ddprun-rdzv (default: build).
set -eu
build=${1:-build}
runs=${2:-3}
fail=0
for agents in 1000 12500; do
  i=0
  while [ "$i" -lt "$runs" ]; do
    "$build/rdzv_scale" --agents "$agents" --nproc-per-node 8 || fail=1
    i=$((i + 1))
  done
done
i=0
while [ "$i" -lt "$runs" ]; do
  "$build/store_bench" --clients 64 --seconds 5 --value-bytes 64 || fail=1
  i=$((i + 1))
done
i=0
while [ "$i" -lt "$runs" ]; do
  "$build/launch_bench" --mode standalone --nproc 16 --runs 20 || fail=1
  "$build/launch_bench" --mode two-node --nproc 8 --runs 10 || fail=1
  i=$((i + 1))
done
exit "$fail"
