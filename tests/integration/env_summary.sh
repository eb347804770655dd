#!/usr/bin/env bash
# The node's environment summary and its checks, end to end on one node
# (ddprun --standalone), with a stand-in /proc and /sys
# (DDPRUN_TEST_SYSROOT: two GPUs, an InfiniBand port, two NUMA nodes):
#   - the summary on the console before the workers start, and at the head
#     of every rank's stdout.log under --log-dir;
#   - the NCCL a Python program will load, from its environment's wheel;
#   - NCCL_SOCKET_IFNAME naming no interface that is up, and two local
#     ranks given one GPU: exit 2, one line, no worker started;
#   - OMP_NUM_THREADS x ranks above the CPUs: a warning, the job runs.
#
# With the unit tests' stand-in NVML (FAKE_NVML, optional), the GPUs'
# memory is in the summary too.
#
# Usage: env_summary.sh DDPRUN [FAKE_NVML]
set -u
ddprun=${1:?usage: env_summary.sh DDPRUN [FAKE_NVML]}
fake_nvml=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/env_summary.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: env_summary: $*" >&2; cat "$tmp/err" >&2; exit 1; }

root=$tmp/root
mkdir -p "$root/proc/driver/nvidia/gpus/0000:18:00.0" \
  "$root/proc/driver/nvidia/gpus/0000:3b:00.0" \
  "$root/sys/class/infiniband/mlx5_0/ports/1" \
  "$root/sys/devices/system/node/node0" "$root/sys/devices/system/node/node1" \
  "$root/dev/shm"
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5" \
  >"$root/proc/driver/nvidia/version"
printf 'Model: \t\t NVIDIA H200\n' \
  >"$root/proc/driver/nvidia/gpus/0000:18:00.0/information"
printf 'Model: \t\t NVIDIA H200\n' \
  >"$root/proc/driver/nvidia/gpus/0000:3b:00.0/information"
echo "4: ACTIVE" >"$root/sys/class/infiniband/mlx5_0/ports/1/state"
echo "400 Gb/sec (4X NDR)" >"$root/sys/class/infiniband/mlx5_0/ports/1/rate"
echo "InfiniBand" >"$root/sys/class/infiniband/mlx5_0/ports/1/link_layer"
ncpu=$(nproc)
echo "0-$((ncpu - 1))" >"$root/sys/devices/system/node/node0/cpulist"
echo "$ncpu" >"$root/sys/devices/system/node/node1/cpulist"

# run NAME ARGS...: ddprun with the stand-in tree; a worker touches
# $tmp/NAME.started.
run() {
  local name=$1
  shift
  rc=0
  DDPRUN_TEST_SYSROOT=$root timeout -k 2 60 "$ddprun" --standalone \
    --nproc-per-node 2 --log-dir "$tmp/logs.$name" "$@" >/dev/null \
    2>"$tmp/err" || rc=$?
}
worker=(sh -c 'touch "$0.started"; echo "rank $RANK ran"')

# The summary, on the console and in each rank's file.
mem=
if [ -n "$fake_nvml" ]; then
  export DDPRUN_TEST_NVML_LIB=$fake_nvml
  export FAKE_NVML_MEM=1000:85899345920,2000:150323855360
  mem=(", 80.0 GiB" ", 140.0 GiB")
else
  mem=("" "")
fi
CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=WARN run ok --gpu-bind isolate \
  "${worker[@]}" "$tmp/ok"
[ "$rc" -eq 0 ] || fail "the job exited $rc"
for want in \
  "^ddprun: env: GPUs: 2, driver 550.54.15: 0 NVIDIA H200 (0000:18:00.0${mem[0]}), 1 NVIDIA H200 (0000:3b:00.0${mem[1]})$" \
  "^ddprun: binding: local rank 0: cpus all (NUMA 0), gpu 0 (NVIDIA H200, 0000:18:00.0)$" \
  "^ddprun: binding: local rank 1: cpus all (NUMA 0), gpu 1 (NVIDIA H200, 0000:3b:00.0)$" \
  "^ddprun: env: NCCL: " \
  "^ddprun: env: InfiniBand/RoCE: mlx5_0 port 1 ACTIVE, 400 Gb/sec (4X NDR), InfiniBand; NCCL will use them$" \
  "^ddprun: env: NCCL and torch variables: .*NCCL_DEBUG=WARN"; do
  grep -q "$want" "$tmp/err" || fail "the console lacks: $want"
done
s=$(grep -n "^ddprun: env: GPUs" "$tmp/err" | cut -d: -f1)
r=$(grep -n "^ddprun: \[rank0\] local rank" "$tmp/err" | cut -d: -f1)
[ -n "$s" ] && [ -n "$r" ] && [ "$s" -lt "$r" ] ||
  fail "the summary does not come before the workers start"
n=0
for f in $(find "$tmp/logs.ok" -name stdout.log); do
  head -n 1 "$f" | grep -q "^ddprun: env: GPUs: 2, driver 550.54.15" ||
    fail "$f does not begin with the summary: $(head -n 2 "$f")"
  grep -q "^ddprun: env: InfiniBand/RoCE: mlx5_0" "$f" ||
    fail "$f lacks the InfiniBand line"
  grep -q "rank [01] ran$" "$f" || fail "$f lacks the rank's own output"
  n=$((n + 1))
done
[ "$n" -eq 2 ] || fail "$n rank files, not 2"

# A Python program: the NCCL of its environment's nvidia-nccl wheel.
py=$(command -v python3) || { echo "SKIP part: no python3"; py=; }
if [ -n "$py" ]; then
  v=$tmp/venv
  site=$v/lib/python3.11/site-packages
  mkdir -p "$v/bin" "$site/nvidia/nccl/lib" "$site/nvidia_nccl_cu12-2.21.5.dist-info"
  ln -s "$py" "$v/bin/python3"
  : >"$site/nvidia/nccl/lib/libnccl.so.2"
  run py "$v/bin/python3" -c 'pass'
  [ "$rc" -eq 0 ] || fail "the Python job exited $rc"
  grep -q "^ddprun: env: NCCL: $site/nvidia/nccl/lib/libnccl.so.2, version 2.21.5 (from the program's Python environment)$" \
    "$tmp/err" || fail "the Python program's NCCL is not named"
fi

# Settings that cannot work: exit 2 and one line, before any worker.
NCCL_SOCKET_IFNAME=nosuch run ifname "${worker[@]}" "$tmp/ifname"
[ "$rc" -eq 2 ] || fail "NCCL_SOCKET_IFNAME=nosuch: exit $rc, not 2"
grep -q "^ddprun: NCCL_SOCKET_IFNAME=nosuch names no interface that is up on this node (up: .*lo.*); .*set it to one of those, or unset it$" \
  "$tmp/err" || fail "NCCL_SOCKET_IFNAME=nosuch: no line that says so"
[ ! -e "$tmp/ifname.started" ] || fail "a worker started despite NCCL_SOCKET_IFNAME"

CUDA_VISIBLE_DEVICES=1,1 run dup --gpu-bind isolate "${worker[@]}" "$tmp/dup"
[ "$rc" -eq 2 ] || fail "two ranks on GPU 1: exit $rc, not 2"
grep -q "^ddprun: local ranks 0 and 1 are both given GPU 1 " "$tmp/err" ||
  fail "two ranks on GPU 1: no line that says so"
[ ! -e "$tmp/dup.started" ] || fail "a worker started on a shared GPU"

# Only slow: a warning, and the job runs.
OMP_NUM_THREADS=$((ncpu * 4)) run omp "${worker[@]}" "$tmp/omp"
[ "$rc" -eq 0 ] || fail "OMP_NUM_THREADS=$((ncpu * 4)): exit $rc"
grep -q "WARN  OMP_NUM_THREADS=$((ncpu * 4)) x 2 local ranks = $((ncpu * 8)) threads on $ncpu CPUs" \
  "$tmp/err" || fail "no warning for OMP_NUM_THREADS=$((ncpu * 4))"
[ -e "$tmp/omp.started" ] || fail "the job did not run after a warning"
echo "PASS: env_summary: the summary on the console and in each rank's file," \
  "the Python program's NCCL, two fatal settings refused before any worker," \
  "one slow one warned"
