#!/usr/bin/env bash
# What `ddprun diagnose` reads in train's --trace, beyond the steps of a
# healthy run (overlap_trace.sh checks those):
#  - DDPRUN_CLOCK_OFFSET_US=-1234 puts "clock_offset_us": -1234 in the
#    trace's otherData; a value that is not an integer (or overflows)
#    leaves it out with exactly one warning line; with --grad-accum 2
#    every step holds two "data" spans, one per micro-batch;
#  - a run that stops mid-way still leaves valid JSON: a non-finite loss
#    (exit 5, the trace closed on the way out), and a job whose rank 1 is
#    SIGKILLed after step 3 (its trace holds the 3 steps it flushed; rank 0,
#    stopped by its agent or failing its next collective, still parses).
#
# Usage: trace_format.sh DDPRUN TRAIN TRAIN_CHECK_PY
set -u
name=trace_format
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: trace_format.sh DDPRUN TRAIN TRAIN_CHECK_PY}
train=${2:?}
check=${3:?}
need_python

# Small caps: 4 buckets of this small model's gradients.
small="--layers 2 --width 64 --input-dim 16 --classes 4 --samples 1024
       --eval-samples 64 --batch 16 --optimizer sgd --lr 0.05
       --bucket-cap-mb 0.01 --first-bucket-mb 0.001"
buckets=$(python3 "$check" buckets 2 64 16 4 0.01 0.001) ||
  fail "cannot plan the buckets"

# Steps "step 0" .. "step K-1" in order, K >= MIN; the file must parse.
steps_at_least() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
steps = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and
                e["name"].startswith("step ")), key=lambda e: e["ts"])
names = [e["name"] for e in steps]
if names != ["step %d" % k for k in range(len(names))] or \
        len(names) < int(sys.argv[2]):
    sys.exit("FAIL: %s: step spans %s, expected step 0 .. at least step %d"
             % (sys.argv[1], names, int(sys.argv[2]) - 1))
print("%s: parses, %d steps" % (sys.argv[1], len(names)))
EOF
}

# The clock offset, and two data spans per step with --grad-accum 2.
run 30 offset env -u RANK -u WORLD_SIZE DDPRUN_CLOCK_OFFSET_US=-1234 \
  "$train" $small --steps 4 --grad-accum 2 --trace "$tmp/offset.json"
[ "$rc" -eq 0 ] || { show offset; fail "offset: train exited $rc"; }
python3 "$check" ddp "$tmp/offset.json" 4 0 1 cpu "$buckets" -1234 ||
  fail "offset: the trace"
n_data=$(grep -c '"name":"data","ph":"X","pid":0,"tid":0,' "$tmp/offset.json")
[ "$n_data" -eq 8 ] ||
  fail "offset: $n_data data spans for 4 steps of 2 micro-batches, expected 8"
! grep -q "CLOCK_OFFSET" "$tmp/offset.err" ||
  { show offset; fail "offset: a warning about a valid offset"; }

k=0
for bad in 12x 99999999999999999999; do
  k=$((k + 1))
  run 30 "bad$k" env -u RANK -u WORLD_SIZE DDPRUN_CLOCK_OFFSET_US="$bad" \
    "$train" $small --steps 2 --trace "$tmp/bad$k.json"
  [ "$rc" -eq 0 ] || { show "bad$k"; fail "offset '$bad': train exited $rc"; }
  n=$(grep -c "ignoring DDPRUN_CLOCK_OFFSET_US='$bad'" "$tmp/bad$k.err")
  [ "$n" -eq 1 ] ||
    { show "bad$k"; fail "offset '$bad': $n warning lines, expected 1"; }
  python3 "$check" ddp "$tmp/bad$k.json" 2 0 1 cpu "$buckets" - ||
    fail "offset '$bad': the trace"
done
echo "malformed offsets: one warning each: $(head -n 1 "$tmp/bad1.err")"

# A non-finite loss: exit 5, the trace closed on the way out.
run 30 nonfinite env -u RANK -u WORLD_SIZE "$train" --layers 2 --width 128 \
  --input-dim 32 --classes 8 --samples 4096 --eval-samples 64 --batch 64 \
  --steps 50 --optimizer sgd --momentum 0.9 --lr 1000 --warmup 0 \
  --seed 1234 --trace "$tmp/nonfinite.json"
[ "$rc" -eq 5 ] || { show nonfinite; fail "nonfinite: exit $rc, expected 5"; }
steps_at_least "$tmp/nonfinite.json" 1 || fail "nonfinite: the trace"

# Rank 1 SIGKILLs itself once 3 steps are done; nothing restarts it.
# ddprun then exits 137 (128 + SIGKILL, the root cause), which `run` would
# take for its timeout: the elapsed time tells them apart.
began=$SECONDS
scratch_run 60 killed env DDPRUN_CKPT_TEST_KILL_AT=3:1 "$ddprun" \
  --standalone --nproc-per-node 2 --max-restarts 0 --log-level warn \
  "$train" $small --steps 40 --trace "$tmp/killed.{rank}.json"
[ $((SECONDS - began)) -lt 60 ] || { show killed; fail "killed: still running after 60 s"; }
! grep -q "runtime error:\|Sanitizer" "$tmp/killed.err" ||
  { show killed; fail "killed: a sanitizer report"; }
[ "$rc" -eq 137 ] || { show killed; fail "killed: ddprun exited $rc, expected 137"; }
grep -q "test hook: killing this worker after step 3" "$tmp/killed.err" ||
  { show killed; fail "killed: rank 1 was not killed after step 3"; }
python3 "$check" ddp "$tmp/killed.1.json" 3 1 2 cpu "$buckets" any ||
  fail "killed: rank 1's trace"
# Rank 0 finished step 2 before rank 1 could finish step 3.
steps_at_least "$tmp/killed.0.json" 2 || fail "killed: rank 0's trace"

no_leftovers
echo "PASS: $name"
