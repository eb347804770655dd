#!/usr/bin/env bash
# train without ddprun, in an environment that has none of the variables
# ddprun sets: a group of one that trains, evaluates, and ends stdout with
# the machine-readable final line (every documented key, world=1); --help
# lists the settings and the exit codes and exits 0; --trace is written at
# the path given.
#
# Usage: single_process.sh TRAIN
set -u
name=single_process
. "$(dirname "$0")/lib.sh"

train=${1:?usage: single_process.sh TRAIN}

run 20 help env -i PATH="$PATH" "$train" --help
[ "$rc" -eq 0 ] || { show help; fail "--help exited $rc"; }
for key in config data layers width batch steps lr optimizer bucket-cap-mb \
    first-bucket-mb no-overlap grad-accum comm-timeout trace dump-weights \
    ckpt-dir allow-schedule-change; do
  grep -q -- "^  --$key" "$tmp/help.out" ||
    { show help; fail "--help does not list --$key"; }
done
# Every code of the table, as ddprun acts on it.
for code in "2 +configuration error" "5 +non-finite loss" \
    "6 +checkpoint storage failure" "7 +out of memory" \
    "8 +another rank failed" "75 +preempted"; do
  grep -Eq "^  $code" "$tmp/help.out" ||
    { show help; fail "--help does not explain exit code ${code%% *}"; }
done
# The fault-injection variables the tests use (worker/train/fault_inject.h).
grep -q "^Environment (fault injection, for tests):" "$tmp/help.out" ||
  { show help; fail "--help has no fault-injection section"; }
for var in DDPRUN_CKPT_TEST_DELAY_MS DDPRUN_CKPT_TEST_KILL_AT \
    DDPRUN_PLAN_TEST_SCALE DDPRUN_COLL_TEST_EXTRA DDPRUN_SPIN_TEST; do
  grep -q "^  $var=" "$tmp/help.out" ||
    { show help; fail "--help does not list $var"; }
done

run 60 alone env -i PATH="$PATH" "$train" --layers 2 --width 64 \
  --input-dim 16 --classes 4 --samples 2048 --eval-samples 256 --batch 32 \
  --steps 30 --optimizer adamw --lr 0.003 --warmup 10 --seed 1234 \
  --trace "$tmp/alone.json"
[ "$rc" -eq 0 ] || { show alone; fail "train alone exited $rc"; }
grep -q "rank 0: local rank 0, world 1," "$tmp/alone.err" ||
  { show alone; fail "no summary line for a world of 1"; }
last=$(tail -n 1 "$tmp/alone.out")
case $last in
  "final "*) ;;
  *) show alone; fail "the last stdout line is not the final line: $last" ;;
esac
for key in loss accuracy eval_loss steps median_step_ms samples_per_s \
    comm_ms exposed_comm_ms hidden_frac world weights_crc32; do
  [ -n "$(final alone "$key")" ] || fail "the final line has no $key=: $last"
done
[ "$(final alone world)" = 1 ] || fail "world is not 1: $last"
[ "$(final alone steps)" = 30 ] || fail "steps is not 30: $last"
echo "$(final alone weights_crc32)" | grep -Eq '^0x[0-9a-f]{8}$' ||
  fail "weights_crc32 is not 0x and 8 hex digits: $last"
awk -v l="$(final alone loss)" -v a="$(final alone accuracy)" \
    -v m="$(final alone median_step_ms)" -v s="$(final alone samples_per_s)" \
    'BEGIN { exit !(l + 0 > 0 && l + 0 < 1.3863 && a >= 0 && a <= 1 && m > 0 && s > 0) }' ||
  fail "implausible values (loss must be under ln 4 after 30 steps): $last"
head -c 40 "$tmp/alone.json" | grep -q '^{"displayTimeUnit"' &&
  [ "$(tail -n 1 "$tmp/alone.json")" = "]}" ] ||
  fail "no complete trace at $tmp/alone.json"
echo "train alone: $last"
echo "PASS: $name"
