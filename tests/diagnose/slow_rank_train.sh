#!/usr/bin/env bash
# `ddprun diagnose` on train with one slow rank: 2 ranks (each on a CPU of
# its own, --cpu-bind auto), rank 1's batches 20 ms slower to load
# (DDPRUN_DATA_TEST_DELAY_MS=20:1). Diagnose must name rank 1, its data
# loading as the cause, and a what-if step within 15% of the step train
# measures without the delay (the median of 3 runs).
#
# Usage: slow_rank_train.sh DDPRUN TRAIN
set -u
name=slow_rank_train
ddprun=${1:?usage: slow_rank_train.sh DDPRUN TRAIN} train=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
command -v python3 >/dev/null 2>&1 || skip "no python3 to read diagnose's JSON"
export OMP_NUM_THREADS=1
model=(--layers 8 --width 512 --input-dim 256 --classes 256 --batch 64
  --bucket-cap-mb 25 --steps 30 --log-every 1000)

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

job clean1; c1=$step
job clean2; c2=$step
job clean3; c3=$step
clean=$(printf '%s\n' "$c1" "$c2" "$c3" | sort -g | sed -n 2p)
mkdir -p "$tmp/trace"
export DDPRUN_DATA_TEST_DELAY_MS=20:1
job slow --trace "$tmp/trace/t.json"
unset DDPRUN_DATA_TEST_DELAY_MS
grep -q "test hook: every batch takes 20 ms more to load" "$tmp/slow.err" ||
  die slow "the delay did not act"
"$ddprun" diagnose --json "$tmp/trace" >"$tmp/diag.json" 2>"$tmp/diag.err" ||
  die slow "ddprun diagnose failed: $(head -n 3 "$tmp/diag.err")"
python3 - "$tmp/diag.json" "$clean" "$step" <<'PY' || die slow "rank 1 not named as it should be"
import json, sys
d = json.load(open(sys.argv[1]))
clean, slow = float(sys.argv[2]), float(sys.argv[3])
p = [p for p in d["patterns"] if p["name"] == "slow_rank"]
assert p, [q["name"] for q in d["patterns"]]
p = p[0]
print(p["text"])
assert p["rank"] == 1 and p["cause"] == "data", (p["rank"], p["cause"])
w = p["whatif_step_ms"]
print(f"what-if {w:.1f} ms; measured {clean:.1f} ms without the delay, {slow:.1f} with it")
assert abs(w - clean) <= 0.15 * clean, (w, clean)
PY
echo "PASS: $name: rank 1 named, data loading the cause"
