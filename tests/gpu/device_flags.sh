#!/usr/bin/env bash
# train's --device, --precision and --tf32 on a machine without a GPU:
# bad values are refused with exit 2 before anything runs; --device cuda
# and --precision bf16|fp16 are configuration errors (exit 2) that say what to
# do; --device auto runs on the CPU and computes what --device cpu does.
#   device_flags.sh TRAIN
set -u
train=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" 2>/dev/null; exit 1; }

# expect CODE PATTERN ARGS...: exit code and a line of the output.
expect() {
  local code=$1 pattern=$2
  shift 2
  timeout 60 "$train" "$@" >"$tmp/out" 2>&1
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "train $* exited $rc, expected $code"
  grep -q -e "$pattern" "$tmp/out" || fail "train $*: no line matching '$pattern'"
  echo "ok: train $* -> exit $rc"
}

small=(--steps 3 --samples 512 --eval-samples 64 --batch 16 --width 16
       --input-dim 8 --classes 4)
expect 2 "expected auto, cpu or cuda" --device gpu
expect 2 "expected fp32, bf16 or fp16" --precision fp8
expect 0 "--precision" --help
grep -q -e "--device" "$tmp/out" || fail "--help does not list --device"
grep -q -e "--tf32" "$tmp/out" || fail "--help does not list --tf32"

if compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null; then
  echo "SKIP: a GPU is visible here; this test checks the CPU-only behaviour"
  exit 77
fi
expect 2 "use --device cpu" --device cuda "${small[@]}"
expect 2 "needs --device cuda" --precision bf16 "${small[@]}"
expect 2 "needs --device cuda" --device cpu --precision bf16 "${small[@]}"
expect 2 "needs --device cuda" --precision fp16 --loss-scale dynamic "${small[@]}"
expect 2 "needs --device cuda" --device cpu --precision fp16 "${small[@]}"
expect 0 "device cpu" --device auto "${small[@]}"
auto=$(grep -o 'weights_crc32=0x[0-9a-f]*' "$tmp/out")
expect 0 "device cpu" --device cpu "${small[@]}"
cpu=$(grep -o 'weights_crc32=0x[0-9a-f]*' "$tmp/out")
[ -n "$auto" ] && [ "$auto" = "$cpu" ] || fail "auto ($auto) and cpu ($cpu) differ"
echo "ok: --device auto computes what --device cpu does ($cpu)"
