#!/usr/bin/env bash
# The all-reduce overlaps the backward pass, as the per-rank traces show.
# On 2 ranks, a model whose gradients fill 18 buckets (each weight
# matrix is above the 0.5 MiB cap and has one of its own):
#  - with overlap, in every step after the first (the first one observes
#    the ready order and then the buckets are rebuilt) some bucket's
#    all-reduce starts on the communication thread before the last "*.bwd"
#    span of the step ends;
#  - with --no-overlap, in no step does an all-reduce start before then.
# Both traces of each run must parse as JSON and hold the forward, backward,
# loss, optimizer and all-reduce spans of every step (train_check.py
# trace), and what `ddprun diagnose` reads (train_check.py ddp): the
# rank's otherData, one "step N" span per step holding its data, backward
# and optimizer spans, and on each all-reduce the bucket's index, its
# exact byte size (as the reducer plans this model's buckets) and when its
# last gradient was ready, before the all-reduce starts.
#
# The backward pass after the first bucket is ready takes about 55 ms
# here. A woken communication thread waits for a core while both ranks
# compute on a 2-core machine: up to 5 ms seen on an idle machine, up to
# 15 ms beside other jobs; with --layers 4 --width 512 (about 7 ms) some
# steps show no overlap at all.
#
# Usage: overlap_trace.sh DDPRUN TRAIN TRAIN_CHECK_PY
set -u
name=overlap_trace
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: overlap_trace.sh DDPRUN TRAIN TRAIN_CHECK_PY}
train=${2:?}
check=${3:?}
need_python

steps=12
model="--layers 8 --width 1024 --input-dim 256 --classes 256 --batch 64
       --samples 4096 --eval-samples 128 --steps $steps --log-every 4
       --bucket-cap-mb 0.5 --first-bucket-mb 1 --optimizer sgd --lr 0.05"
buckets=$(python3 "$check" buckets 8 1024 256 256 0.5 1) ||
  fail "cannot plan the buckets"

for mode in overlap no-overlap; do
  flag=
  [ "$mode" = no-overlap ] && flag=--no-overlap
  run 90 "$mode" "$ddprun" --standalone --nproc-per-node 2 --log-level warn \
    "$train" $model $flag --comm-schedule thread --trace "$tmp/$mode.{rank}.json"
  [ "$rc" -eq 0 ] || { show "$mode"; fail "$mode: ddprun exited $rc"; }
  nb=$(sed -n 's/.*\[rank0\]:train: rank 0: .* \([0-9]*\) buckets:.*/\1/p' \
       "$tmp/$mode.err")
  [ "${nb:-0}" -ge 4 ] ||
    { show "$mode"; fail "$mode: expected at least 4 buckets, got '$nb'"; }
  echo "$mode: $(grep -h '^\[rank0\]:final' "$tmp/$mode.out")"
  for rank in 0 1; do
    python3 "$check" trace "$tmp/$mode.$rank.json" "$steps" "$mode" ||
      fail "$mode: the trace of rank $rank"
    python3 "$check" ddp "$tmp/$mode.$rank.json" "$steps" "$rank" 2 cpu \
      "$buckets" any || fail "$mode: what diagnose reads in rank $rank's trace"
  done
done

no_leftovers
echo "PASS: $name"
