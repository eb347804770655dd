#!/usr/bin/env bash
# `ddprun diagnose` on train with one slow rank: 2 ranks (each on a CPU of
# its own, --cpu-bind auto), rank 1's batches 20 ms slower to load
# (DDPRUN_DATA_TEST_DELAY_MS=20:1). Diagnose must name rank 1 and its data
# loading as the cause (its data loading longer than rank 0's by at least
# half the delay, which is a sleep: no load makes it shorter), and compute
# the what-if: a step below the one measured with the delay, its fraction
# that step's. How close the what-if comes to the step measured without the
# delay is a figure of speed, not of behaviour: tests/bench/diagnose_whatif.sh
# measures and reports it.
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

mkdir -p "$tmp/trace"
run 120 slow env DDPRUN_DATA_TEST_DELAY_MS=20:1 "$ddprun" --standalone \
  --nproc-per-node 2 --cpu-bind auto --log-level warn "$train" --layers 8 \
  --width 512 --input-dim 256 --classes 256 --batch 64 --bucket-cap-mb 25 \
  --steps 30 --log-every 1000 --trace "$tmp/trace/t.json"
[ "$rc" -eq 0 ] || die slow "the job exited $rc"
grep -q "test hook: every batch takes 20 ms more to load" "$tmp/slow.err" ||
  die slow "the delay did not act"
"$ddprun" diagnose --json "$tmp/trace" >"$tmp/diag.json" 2>"$tmp/diag.err" ||
  die slow "ddprun diagnose failed: $(head -n 3 "$tmp/diag.err")"
python3 - "$tmp/diag.json" <<'PY' || die slow "rank 1 not named as it should be"
import json, sys
d = json.load(open(sys.argv[1]))
p = [p for p in d["patterns"] if p["name"] == "slow_rank"]
assert p, [q["name"] for q in d["patterns"]]
p = p[0]
print(p["text"])
assert p["rank"] == 1 and p["cause"] == "data", (p["rank"], p["cause"])
assert p["data_excess_ms"] >= 10 and p["data_excess_ms"] > p["compute_excess_ms"], \
    (p["data_excess_ms"], p["compute_excess_ms"])
step, w = d["summary"]["step_ms"], p["whatif_step_ms"]
assert 0 < w < step, (w, step)
assert abs(p["whatif_frac"] - (w / step - 1)) < 1e-3, (p["whatif_frac"], w, step)
assert "its data loading" in p["text"] and "if rank 1 ran" in p["text"], p["text"]
print(f"what-if {w:.1f} ms; the step with the delay {step:.1f} ms")
PY
echo "PASS: $name: rank 1 named, data loading the cause, the what-if computed"
