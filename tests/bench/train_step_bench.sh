#!/usr/bin/env bash
# Step time of the reference model, for comparison with other frameworks
# on the same machine:
#
#   train --data synthetic --layers 4 --width 1024 --input-dim 256
#         --classes 256 --batch 64 --optimizer sgd       (batch per rank)
#
# on 1 rank with OMP_NUM_THREADS=1 and =2 (train alone), and on 2 ranks
# under `ddprun --standalone --nproc-per-node 2` (OMP_NUM_THREADS unset, so
# ddprun gives each rank 1; the summary line must say so), with the
# default --host-weights auto (weights=shared in the run's line where it
# shared them) and with --host-weights private. The settings alternate,
# run by run. Each run prints rank 0's figures from its final line; then,
# per setting, the median over the runs, and the 2-rank medians over the
# 1-rank one (OMP_NUM_THREADS=1):
#
#   train_step_bench setting=2ranks runs=3 steps=120 median_step_ms=..
#     samples_per_s=.. comm_ms=.. exposed_comm_ms=.. hidden_frac=..
#     compute_cpu_ms=.. compute_wait_ms=.. compute_vol_cs=..
#     compute_invol_cs=.. comm_cpu_ms=.. comm_wait_ms=.. comm_vol_cs=..
#     comm_invol_cs=.. min_step_ms=.. max_step_ms=..
#   train_step_bench ratio=2ranks/1rank_omp1 1.089
#
# samples_per_s is the global batch (64 x ranks) over the median step;
# min and max are those of the runs' medians (other load on the machine
# shows there first). compute_* and comm_* are rank 0's compute and
# communication threads per step (train --thread-stats): CPU time,
# run-queue wait, voluntary switches (wake-ups) and involuntary ones
# (preemptions); comm_* are 0 on 1 rank, and BLAS threads beyond the
# compute thread (OMP_NUM_THREADS=2) are not in them.
#
# Usage: train_step_bench.sh [--smoke] [BUILD_DIR [RUNS [STEPS]]]
#   BUILD_DIR holds train and ddprun (default: build), RUNS per setting
#   (default 3), STEPS per run (default 120). --smoke: 1 run of 10 steps.
# Exits 0 when every run finished and printed its final line.
set -u

smoke=0
if [ "${1:-}" = --smoke ]; then
  smoke=1
  shift
fi
build=${1:-build}
runs=${2:-3}
steps=${3:-120}
[ "$smoke" -eq 1 ] && { runs=1; steps=10; }
train=$build/train
ddprun=$build/ddprun
[ -x "$train" ] || { echo "train_step_bench: no $train" >&2; exit 1; }
[ -x "$ddprun" ] || { echo "train_step_bench: no $ddprun" >&2; exit 1; }
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no 'timeout'"; exit 77; }

tmp=
pid=
cleanup() {
  trap - EXIT INT TERM HUP
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train_step_bench.XXXXXX") || exit 1

model="--data synthetic --layers 4 --width 1024 --input-dim 256 --classes 256
       --batch 64 --optimizer sgd --samples 65536 --eval-samples 256
       --steps $steps --log-every $steps --thread-stats"
thread_keys="compute_cpu_ms compute_wait_ms compute_vol_cs compute_invol_cs
             comm_cpu_ms comm_wait_ms comm_vol_cs comm_invol_cs"

# field LINE KEY
field() {
  local v=" $1 "
  v=${v#*" $2="}
  echo "${v%% *}"
}

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

settings="1rank_omp1 1rank_omp2 2ranks 2ranks_private"
fail=0
for setting in $settings; do : >"$tmp/$setting.lines"; done
# The settings in alternation, run by run: the machine's speed drifts.
i=0
while [ "$i" -lt "$runs" ]; do
  i=$((i + 1))
  for setting in $settings; do
    case $setting in
      1rank_omp1) set -- env -u RANK -u WORLD_SIZE OMP_NUM_THREADS=1 "$train" $model; want=1 ;;
      1rank_omp2) set -- env -u RANK -u WORLD_SIZE OMP_NUM_THREADS=2 "$train" $model; want=2 ;;
      2ranks) set -- env -u OMP_NUM_THREADS "$ddprun" --standalone \
                --nproc-per-node 2 --log-level warn "$train" $model; want=1 ;;
      2ranks_private) set -- env -u OMP_NUM_THREADS "$ddprun" --standalone \
                --nproc-per-node 2 --log-level warn "$train" $model \
                --host-weights private; want=1 ;;
    esac
    timeout -k 2 300 "$@" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    rc=0
    wait "$pid" || rc=$?
    pid=
    line=$(sed -n 's/^\(\[rank0\]:\)\{0,1\}final \(.*\)$/\2/p' "$tmp/out" | tail -n 1)
    threads=$(grep -c "BLAS .*($want threads)" "$tmp/err")
    if [ "$rc" -ne 0 ] || [ -z "$line" ] || [ "$threads" -eq 0 ]; then
      echo "train_step_bench: $setting run $i: exit $rc, BLAS threads not $want or no final line" >&2
      tail -n 20 "$tmp/out" "$tmp/err" >&2
      fail=1
      continue
    fi
    shared=private
    grep -q "one shared copy of the weights" "$tmp/err" && shared=shared
    echo "$line" >>"$tmp/$setting.lines"
    thr=
    for key in $thread_keys; do
      thr="$thr $key=$(field "$line" "$key")"
    done
    echo "train_step_bench setting=$setting run=$i steps=$steps weights=$shared" \
         "median_step_ms=$(field "$line" median_step_ms)" \
         "samples_per_s=$(field "$line" samples_per_s)" \
         "comm_ms=$(field "$line" comm_ms)" \
         "exposed_comm_ms=$(field "$line" exposed_comm_ms)$thr"
  done
done
for setting in $settings; do
  [ -s "$tmp/$setting.lines" ] || continue
  out="train_step_bench setting=$setting runs=$(wc -l <"$tmp/$setting.lines") steps=$steps"
  for key in median_step_ms samples_per_s comm_ms exposed_comm_ms hidden_frac \
      $thread_keys; do
    v=$(while IFS= read -r l; do field "$l" "$key"; done <"$tmp/$setting.lines" | median)
    out="$out $key=$v"
  done
  range=$(while IFS= read -r l; do field "$l" median_step_ms; done <"$tmp/$setting.lines" |
          sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo, hi }')
  echo "$out min_step_ms=${range% *} max_step_ms=${range#* }"
  field "$out" median_step_ms >"$tmp/$setting.median"
done
# The 2-rank steps against the 1-rank one (OMP_NUM_THREADS=1 both).
if [ -s "$tmp/1rank_omp1.median" ]; then
  one=$(cat "$tmp/1rank_omp1.median")
  for setting in 2ranks 2ranks_private; do
    [ -s "$tmp/$setting.median" ] || continue
    echo "train_step_bench ratio=$setting/1rank_omp1 $(awk -v a="$(cat "$tmp/$setting.median")" -v b="$one" 'BEGIN { printf "%.3f", a / b }')"
  done
fi
exit "$fail"
