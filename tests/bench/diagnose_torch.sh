#!/usr/bin/env bash
# `ddprun diagnose` on a real PyTorch DDP program (tests/torch/ddp_profiled.py:
# gloo on the CPU, torch.profiler on every rank, 8 Linear layers of 512), 2
# ranks under ddprun: the figures of speed that tests/torch/diagnose_torch.sh
# leaves to a benchmark.
#
#   advice     the cap diagnose recommends from a 1 MiB job's traces against
#              DDP's default 25 MiB, RUNS runs of each, interleaved. Target:
#              the recommended cap's median step not slower than 25's beyond
#              the noise (10%, or the spread of the middle three runs of
#              either when larger).
#   what-if    rank 1 sleeping 40 ms in its data loading each step (each rank
#              bound to a CPU of its own, DDP's default buckets), 3 jobs, each
#              diagnosed and each running the same steps again without the
#              sleep in the same processes (--then-clean): the step the
#              what-if predicts, measured where nothing else has changed.
#              Target: the median what-if within 15% of the median step
#              without the sleep.
#
# Lines:
#   diagnose_torch advice_mib=.. advice_ms=.. default_ms=.. runs=..
#   diagnose_torch whatif_ms=.. clean_ms=.. err=.. jobs=..
# A missed target is said on stderr; the exit status reflects only the
# checks (every job exits 0, every diagnosis names rank 1). Skipped (77)
# where python3 cannot import torch with gloo (DDPRUN_TORCH_PATH, as for
# tests/torch).
#
# Usage: diagnose_torch.sh [--smoke] [--runs N] DDPRUN
#   defaults: 5 runs of each cap; --smoke: the recommendation without the
#   runs that time it, 1 what-if job, no targets.
set -u
name=diagnose_torch_bench
runs=5 jobs=3 smoke=0
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 runs=0 jobs=1; shift ;;
    --runs) runs=${2:?}; shift 2 ;;
    *) break ;;
  esac
done
ddprun=${1:?usage: diagnose_torch.sh [--smoke] [--runs N] DDPRUN}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=../torch/lib.sh
. "$here/../torch/lib.sh"
job=$here/../torch/ddp_profiled.py

# job TAG ARGS...: the profiled job under ddprun, 2 ranks; its median step
# (ms, rank 0's line) in $step.
job() {
  local tag=$1
  shift
  run 180 "$tag" "$ddprun" --standalone --nproc-per-node 2 --log-level warn \
    "${bind[@]}" "$job" "$@"
  [ "$rc" -eq 0 ] || die "$tag" "the job exited $rc"
  step=$(sed -n 's/^\[rank0\]:step_ms median=\([0-9.]*\) .*/\1/p' "$tmp/$tag.out")
  [ -n "$step" ] || die "$tag" "no step_ms line"
}
# stats VALUES...: "median spread" (spread: of the middle three values, 0
# for fewer than three).
stats() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
    m = int((NR + 1) / 2)
    print (NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2), (NR >= 3 ? v[m + 1] - v[m - 1] : 0) }'
}
bind=()

job base --bucket-cap-mb 1 --trace-dir "$tmp/base.trace"
"$ddprun" diagnose --json "$tmp/base.trace" >"$tmp/base.json" 2>"$tmp/base.diag.err" ||
  die base "ddprun diagnose failed: $(head -n 3 "$tmp/base.diag.err")"
rec=$(python3 - "$tmp/base.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["recommendation"]
print("%g" % r["best_bucket_mib"] if r["available"] else "")
PY
)
[ -n "$rec" ] || die base "no recommendation: $(cat "$tmp/base.json")"

rs=() ds=()
for i in $(seq 1 "$runs"); do
  job "rec$i" --bucket-cap-mb "$rec"; rs+=("$step")
  job "d25$i" --bucket-cap-mb 25; ds+=("$step")
done
if [ "$runs" -gt 0 ]; then
  read -r mr rspread < <(stats "${rs[@]}")
  read -r md dspread < <(stats "${ds[@]}")
  echo "$name advice_mib=$rec advice_ms=$mr default_ms=$md runs=$runs" \
    "(${rs[*]} against ${ds[*]})"
  awk -v r="$mr" -v d="$md" -v a="$rspread" -v b="$dspread" 'BEGIN {
    n = 0.10 * d; if (a > n) n = a; if (b > n) n = b; exit !(r <= d + n) }' ||
    echo "$name: target missed: bucket_cap_mb=$rec takes $mr ms, slower than" \
      "25's $md ms beyond the noise" >&2
else
  echo "$name advice_mib=$rec (not timed)"
fi

bind=(--cpu-bind auto)
ws=() cs=()
for i in $(seq 1 "$jobs"); do
  job "slow$i" --steps 12 --active 8 --slow-rank 1 --slow-ms 40 --then-clean \
    --trace-dir "$tmp/slow$i.trace"
  c=$(sed -n 's/^\[rank0\]:clean_step_ms median=\([0-9.]*\) .*/\1/p' "$tmp/slow$i.out")
  [ -n "$c" ] || die "slow$i" "no clean_step_ms line"
  "$ddprun" diagnose --json "$tmp/slow$i.trace" >"$tmp/slow$i.json" \
    2>"$tmp/slow$i.diag.err" || die "slow$i" "ddprun diagnose failed"
  w=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
p = [p for p in d["patterns"] if p["name"] == "slow_rank" and p["rank"] == 1]
print(p[0]["whatif_step_ms"] if p else "")' "$tmp/slow$i.json")
  [ -n "$w" ] || die "slow$i" "rank 1 not named: $(cat "$tmp/slow$i.json")"
  ws+=("$w") cs+=("$c")
done
read -r w _ < <(stats "${ws[@]}")
read -r c _ < <(stats "${cs[@]}")
err=$(awk -v w="$w" -v c="$c" 'BEGIN { printf "%+.3f", w / c - 1 }')
echo "$name whatif_ms=$w clean_ms=$c err=$err jobs=$jobs" \
  "(${ws[*]} against ${cs[*]})"
if [ "$smoke" -eq 0 ]; then
  awk -v e="$err" 'BEGIN { exit !(e <= 0.15 && e >= -0.15) }' ||
    echo "$name: target missed: the what-if is $err off the step without the" \
      "sleep (target 15%)" >&2
fi
exit 0
