#!/usr/bin/env bash
# The what-if of `ddprun diagnose`'s slow-rank pattern against the step it
# predicts, measured: train on 2 ranks (--cpu-bind auto, the model of
# tests/diagnose/slow_rank_train.sh), runs in pairs: one clean, one with
# rank 1's batches 20 ms slower to load (DDPRUN_DATA_TEST_DELAY_MS=20:1),
# traced and diagnosed. Lines:
#   diagnose_whatif run=I clean_ms=.. slow_ms=.. whatif_ms=..
#   diagnose_whatif runs=N clean_ms=.. whatif_ms=.. err=..
# (the last: medians over the runs; err the what-if against the clean
# step). Target: within 15%. A missed target is said on stderr; the exit
# status reflects only the checks (every job exits 0, every diagnosis
# names rank 1).
#
# Usage: diagnose_whatif.sh [--smoke] [--runs N] [--steps N] DDPRUN TRAIN
#   defaults: 3 runs of 30 steps; --smoke: 1 run of 10 steps, no target.
set -u
name=diagnose_whatif
runs=3 steps=30 smoke=0
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 runs=1 steps=10; shift ;;
    --runs) runs=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    *) break ;;
  esac
done
ddprun=${1:?usage: diagnose_whatif.sh [--smoke] [--runs N] [--steps N] DDPRUN TRAIN}
train=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
command -v python3 >/dev/null 2>&1 || skip "no python3 to read diagnose's JSON"
export OMP_NUM_THREADS=1
model=(--layers 8 --width 512 --input-dim 256 --classes 256 --batch 64
  --bucket-cap-mb 25 --steps "$steps" --log-every 1000)

# job TAG [TRAIN ARGS...]: median_step_ms of rank 0's final line in $step.
job() {
  local tag=$1
  shift
  run 120 "$tag" "$ddprun" --standalone --nproc-per-node 2 --cpu-bind auto \
    --log-level warn "$train" "${model[@]}" "$@"
  [ "$rc" -eq 0 ] || die "$tag" "the job exited $rc"
  step=$(sed -n 's/.*final .* median_step_ms=\([0-9.]*\) .*/\1/p' "$tmp/$tag.out")
  [ -n "$step" ] || die "$tag" "no final line"
}

: >"$tmp/rows"
for i in $(seq 1 "$runs"); do
  job "clean$i"
  clean=$step
  mkdir -p "$tmp/slow$i.trace"
  DDPRUN_DATA_TEST_DELAY_MS=20:1 job "slow$i" --trace "$tmp/slow$i.trace/t.json"
  grep -q "test hook: every batch takes 20 ms more to load" "$tmp/slow$i.err" ||
    die "slow$i" "the delay did not act"
  "$ddprun" diagnose --json "$tmp/slow$i.trace" >"$tmp/slow$i.json" \
    2>"$tmp/slow$i.diag.err" ||
    die "slow$i" "ddprun diagnose failed: $(head -n 3 "$tmp/slow$i.diag.err")"
  w=$(python3 - "$tmp/slow$i.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = [p for p in d["patterns"] if p["name"] == "slow_rank" and p["rank"] == 1]
print(p[0]["whatif_step_ms"] if p else "")
PY
  )
  [ -n "$w" ] || die "slow$i" "rank 1 not named: $(cat "$tmp/slow$i.json")"
  echo "$name run=$i clean_ms=$clean slow_ms=$step whatif_ms=$w"
  echo "$clean $w" >>"$tmp/rows"
done

read -r clean w err < <(python3 - "$tmp/rows" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
c = statistics.median(r[0] for r in rows)
w = statistics.median(r[1] for r in rows)
print(f"{c:.2f} {w:.2f} {w / c - 1:+.3f}")
PY
)
echo "$name runs=$runs clean_ms=$clean whatif_ms=$w err=$err"
if [ "$smoke" -eq 0 ]; then
  awk -v e="$err" 'BEGIN { exit !(e <= 0.15 && e >= -0.15) }' ||
    echo "$name: target missed: the what-if is $err off the clean step (target 15%)" >&2
fi
exit 0
