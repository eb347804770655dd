#!/usr/bin/env bash
# What checkpoints cost the steps: the reference model with AdamW
#
#   train --data synthetic --layers 4 --width 1024 --input-dim 256
#         --classes 256 --batch 64 --optimizer adamw    (batch per rank)
#
# on 2 ranks under `ddprun --standalone --nproc-per-node 2`, writing a
# checkpoint (42 MiB: weights and both AdamW moments) into a tmpfs
# directory (/dev/shm) every step, every 10, every 100, and never. The
# variants alternate, run by run (a round is one run of each), each run in
# an empty directory (no resume). Each run prints rank 0's figures; then,
# per variant, the median over the runs, and the median over the rounds of
# the ratio of its figure to that of the round's run without checkpoints
# (rounds keep the runs compared close in time: other work on the machine
# moves the step time by more than checkpoints do):
#
#   ckpt_cost variant=every10 run=1 steps=300 median_step_ms=..
#     wall_step_ms=.. ckpt_written=.. ckpt_waits=.. ckpt_wait_ms=..
#   ckpt_cost variant=every10 runs=3 steps=300 median_step_ms=..
#     wall_step_ms=.. ... ratio_median=1.004 ratio_wall=1.012
#
# median_step_ms is train's (its final line): the median of the steps'
# own times, from the first batch to the optimizer, which leaves out what
# happens between steps and, being a median, a stall that only one step
# in ten takes. wall_step_ms is the loop's wall time over its steps (the
# "done: N steps in S s" line: from the first step to the final report,
# checkpoints, the evaluation of 256 samples and the wait for the last
# write included): what the checkpoints really cost. The ckpt_* figures
# come from train's final line where it has them (they are absent in a
# train that writes in the step): checkpoints written, checkpoint steps
# that waited for the previous write, and how long.
#
# Usage: ckpt_cost.sh [--smoke] BUILD [RUNS [STEPS]]
#   BUILD holds train and ddprun; RUNS per variant (default 3), STEPS per
#   run (default 300). --smoke: 1 run of 20 steps each.
# Exits 0 when every run finished and printed its final line; 77 without
# a writable /dev/shm.
set -u

smoke=0
if [ "${1:-}" = --smoke ]; then
  smoke=1
  shift
fi
build=${1:?usage: ckpt_cost.sh [--smoke] BUILD [RUNS [STEPS]]}
runs=${2:-3}
steps=${3:-300}
[ "$smoke" -eq 1 ] && { runs=1; steps=20; }
train=$build/train
ddprun=$build/ddprun
[ -x "$train" ] || { echo "ckpt_cost: no $train" >&2; exit 1; }
[ -x "$ddprun" ] || { echo "ckpt_cost: no $ddprun" >&2; exit 1; }
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no 'timeout'"; exit 77; }
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "SKIP: no writable /dev/shm"; exit 77; }

tmp=
shm=
pid=
cleanup() {
  trap - EXIT INT TERM HUP
  # timeout passes the TERM on to ddprun, which stops its workers, and
  # exits after it (a KILL now would leave ddprun running).
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  [ -n "$tmp" ] && rm -rf "$tmp"
  [ -n "$shm" ] && rm -rf "$shm"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt_cost.XXXXXX") || exit 1
shm=$(mktemp -d /dev/shm/ckpt_cost.XXXXXX) || exit 1

model="--data synthetic --layers 4 --width 1024 --input-dim 256 --classes 256
       --batch 64 --optimizer adamw --samples 65536 --eval-samples 256
       --steps $steps --log-every $steps"

# field LINE KEY
field() {
  local v=" $1 "
  case $v in *" $2="*) ;; *) echo -; return ;; esac
  v=${v#*" $2="}
  echo "${v%% *}"
}

median() {
  grep -v '^-$' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f\n", a / b }'
}

variants="none every1 every10 every100"
keys="median_step_ms wall_step_ms ckpt_written ckpt_waits ckpt_wait_ms"
fail=0
for v in $variants; do : >"$tmp/$v.lines"; : >"$tmp/$v.rounds"; done
# The variants in alternation, run by run: the machine's speed drifts.
i=0
while [ "$i" -lt "$runs" ]; do
  i=$((i + 1))
  for v in $variants; do
    dir=$shm/$v.$i
    ckpt=()
    [ "$v" = none ] || ckpt=(--ckpt-dir "$dir" --ckpt-every "${v#every}")
    # shellcheck disable=SC2086
    timeout -k 2 600 env -u OMP_NUM_THREADS "$ddprun" --standalone \
      --nproc-per-node 2 --log-level warn "$train" $model "${ckpt[@]}" \
      >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    rc=0
    wait "$pid" || rc=$?
    pid=
    rm -rf "$dir"
    line=$(sed -n 's/^\(\[rank0\]:\)\{0,1\}final \(.*\)$/\2/p' "$tmp/out" | tail -n 1)
    secs=$(sed -n 's/^\(\[rank0\]:\)\{0,1\}done: [0-9]* steps in \([0-9.]*\) s,.*/\2/p' \
           "$tmp/out" | tail -n 1)
    if [ "$rc" -ne 0 ] || [ -z "$line" ] || [ -z "$secs" ]; then
      echo "ckpt_cost: $v run $i: exit $rc or no final line" >&2
      tail -n 20 "$tmp/out" "$tmp/err" >&2
      fail=1
      continue
    fi
    wall=$(awk -v s="$secs" -v n="$steps" 'BEGIN { printf "%.3f", s * 1000 / n }')
    out="median_step_ms=$(field "$line" median_step_ms) wall_step_ms=$wall"
    for key in ckpt_written ckpt_waits ckpt_wait_ms; do
      out="$out $key=$(field "$line" "$key")"
    done
    echo "$out" >>"$tmp/$v.lines"
    echo "$i $out" >>"$tmp/$v.rounds"
    echo "ckpt_cost variant=$v run=$i steps=$steps $out"
  done
done
for v in $variants; do
  [ -s "$tmp/$v.lines" ] || continue
  out=
  for key in $keys; do
    m=$(while IFS= read -r l; do field "$l" "$key"; done <"$tmp/$v.lines" | median)
    out="$out $key=$m"
  done
  # Per round, against that round's run without checkpoints.
  for key in median_step_ms wall_step_ms; do
    m=$(while read -r round l; do
          base=$(sed -n "s/^$round //p" "$tmp/none.rounds" 2>/dev/null)
          [ -n "$base" ] || continue
          ratio "$(field "$l" "$key")" "$(field "$base" "$key")"
        done <"$tmp/$v.rounds" | median)
    out="$out ratio_${key%_step_ms}=$m"
  done
  echo "ckpt_cost variant=$v runs=$(wc -l <"$tmp/$v.lines") steps=$steps$out"
done
exit "$fail"
