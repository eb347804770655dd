#!/usr/bin/env bash
# Overlap of the gradient all-reduce with the backward pass on a real, slow
# link: two network namespaces joined by a veth pair, each end shaped by
#   tc qdisc add dev veth0 root tbf rate 1gbit burst 64kb latency 50ms
# (netem is not available). ddprun-rdzv runs in namespace A; each run is a
# 2x1 job (one ddprun per namespace, --rdzv-conf is_host=0) of train, one
# rank per namespace with OMP_NUM_THREADS=1, so the ring crosses the link
# over TCP in both directions at once.
#
# The model: an MLP of 16 hidden layers of 512 (--input-dim 256 --classes
# 256: 4,202,752 parameters, 16.8 MB of gradients) at --batch 768 per rank.
# A 2-rank ring sends and receives the gradient's size once per step on
# each rank: 16.8 MB at 1 Gbit/s is 134 ms, and the backward pass of 768
# samples takes 128 ms on one core here (the calibration run at the start
# measures it: train alone, OMP_NUM_THREADS=1, from its trace). With a
# fixed batch, backward and communication both grow with the parameters,
# so the batch balances them; many narrow layers keep the gradients that
# become ready last (fc1, fc0: 1.5 MiB) a small part of the whole, since
# they can only be sent after the backward pass.
#
# For each bucket cap (--caps, MiB) the job runs with overlap and with
# --no-overlap; each line gives rank 0's final line: the median step time,
# and the mean communication, exposed communication and hidden fraction
# per step:
#
#   overlap_netns cap_mib=5 buckets=5 mode=overlap run=1 median_step_ms=..
#     comm_ms=.. exposed_comm_ms=.. hidden_frac=.. exposed_frac=..
#     compute_cpu_ms=.. compute_wait_ms=.. compute_invol_cs=..
#     comm_cpu_ms=.. comm_vol_cs=..
#
# (the last five: rank 0's compute and communication threads per step,
# from train --thread-stats: CPU time, run-queue wait, preemptions of the
# compute thread, CPU time and wake-ups of the communication thread),
# then a table (per cap and mode, the run with the median step time), and
# the two targets: exposed communication under 15% of all communication at
# the best cap (the overlapped run with the shortest step), and that step
# at most 0.75 of the shortest non-overlapped step. A missed target is said
# on stderr; the exit status reflects only the checks (every job exits 0,
# prints its final line, and its ring uses TCP across the link).
#
# Usage: overlap_netns.sh [--smoke] [--steps N] [--runs N] [--caps "1 5 25 100"]
#                         [--modes M] [--batch B] [--layers L] [--width W]
#                         [--burst SIZE] [--gso-max-size BYTES]
#                         [--trace-dir DIR] DDPRUN DDPRUN_RDZV TRAIN
#   --burst: the tbf bucket (64kb; a larger one means fewer shaper timers).
#   --gso-max-size: largest GSO packet on the veth pair; under the burst,
#   tbf passes GSO packets whole instead of splitting them into MTU-sized
#   packets (see tests/bench/README.md).
#   --trace-dir: keep each job's per-rank traces there (DIR/TAG.RANK.json).
#   --modes: "overlap", "no-overlap" or both (the default).
#   --smoke: caps 1 and 25, 4 steps of --batch 32, no targets, bounded to
#   well under a minute. Needs root, iproute2 and tc with tbf; otherwise
#   prints "SKIP: <reason>" and exits 77. Every process and both namespaces
#   are removed on every exit path.
set -u

bench=overlap_netns
# shellcheck source=ratelimited_pair.sh
. "$(dirname "$0")/ratelimited_pair.sh"
# scratch_run (before pair_setup, which makes $tmp).
# shellcheck source=../lib/scratch.sh
. "$(dirname "$0")/../lib/scratch.sh"

caps="1 5 25 100"
layers=16
width=512
trace_dir=
modes="overlap no-overlap"
pair_option() {
  case $1 in
    --layers) layers=$2 ;;
    --width) width=$2 ;;
    --trace-dir) trace_dir=$2 ;;
    --modes) modes=$2 ;;
    *) return 1 ;;
  esac
}
pair_args 4 "$@"
pair_setup

model="--data synthetic --layers $layers --width $width --input-dim 256
       --classes 256
       --batch $batch --optimizer sgd --lr 0.01 --samples 65536
       --eval-samples 256 --first-bucket-mb 1"

# Calibration: the backward pass of one rank alone on one core, from its
# trace (python3 reads it; without python3 this figure is left out).
if command -v python3 >/dev/null 2>&1; then
  scratch_run "$job_secs" calib \
    env -u RANK -u WORLD_SIZE OMP_NUM_THREADS=1 "$train" \
    $model --steps $((steps < 10 ? steps : 10)) --log-every 1000 \
    --trace "$tmp/calib.json"
  [ "$rc" -eq 0 ] || { cat "$tmp/calib.err" >&2; fail "calibration run exited $rc"; }
  python3 - "$tmp/calib.json" <<'EOF' || fail "cannot read the calibration trace"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
opt = sorted((e for e in ev if e["name"] == "optimizer"), key=lambda e: e["ts"])
prev, fwd, bwd = -1, [], []
for o in opt:
    step = [e for e in ev if e["tid"] == 0 and prev <= e["ts"] < o["ts"]]
    b = [e for e in step if e["name"].endswith(".bwd")]
    f = [e for e in step if e["name"].endswith(".fwd")]
    bwd.append(max(e["ts"] + e["dur"] for e in b) - min(e["ts"] for e in b))
    fwd.append(sum(e["dur"] for e in f))
    prev = o["ts"] + o["dur"]
med = lambda v: sorted(v)[len(v) // 2] / 1e3
print("overlap_netns calibration: 1 rank, 1 thread: forward_ms=%.1f "
      "backward_ms=%.1f optimizer_ms=%.1f" %
      (med(fwd), med(bwd), med([o["dur"] for o in opt])))
EOF
fi
params=$(sed -n 's/.*model \([0-9]*\) parameters.*/\1/p' "$tmp/calib.err" 2>/dev/null)
if [ -n "$params" ]; then
  echo "overlap_netns link: 1 Gbit/s each way; $params parameters:" \
       "$(awk -v p="$params" 'BEGIN { printf "%.1f MB of gradients, %.1f ms", p * 4 / 1e6, p * 4 / 125e3 }')" \
       "to send and receive per step at line rate"
fi

: >"$tmp/rows"
for cap in $caps; do
  for mode in $modes; do
    flag=
    [ "$mode" = no-overlap ] && flag=--no-overlap
    r=0
    while [ "$r" -lt "$runs" ]; do
      r=$((r + 1))
      trace=
      [ -n "$trace_dir" ] && trace="--trace $trace_dir/ovl-$cap-$mode-$r.{rank}.json"
      pair_job "ovl-$cap-$mode-$r" --bucket-cap-mb "$cap" $flag $trace \
        --thread-stats
      step=$(field "$line" median_step_ms)
      comm=$(field "$line" comm_ms)
      exposed=$(field "$line" exposed_comm_ms)
      hidden=$(field "$line" hidden_frac)
      efrac=$(awk -v c="$comm" -v e="$exposed" 'BEGIN { printf "%.3f", (c > 0 ? e / c : 0) }')
      nb=$(sed -n 's/.*model [0-9]* parameters, \([0-9]*\) bucket.*/\1/p' \
           "$tmp/ovl-$cap-$mode-$r.a.err" | head -n 1)
      thr= kv=
      for key in compute_cpu_ms compute_wait_ms compute_invol_cs comm_cpu_ms \
          comm_vol_cs; do
        v=$(field "$line" "$key")
        thr="$thr ${v:--}"
        kv="$kv $key=${v:--}"
      done
      echo "overlap_netns cap_mib=$cap buckets=$nb mode=$mode run=$r" \
           "median_step_ms=$step comm_ms=$comm exposed_comm_ms=$exposed" \
           "hidden_frac=$hidden exposed_frac=$efrac$kv"
      echo "$cap $mode $step $comm $exposed $hidden $efrac ${nb:-?}$thr" >>"$tmp/rows"
    done
  done
done

# Per (cap, mode), the run with the median step time (the lower middle
# one of an even count) stands for it; then the table and the targets.
awk -v smoke="$smoke" '
  {
    k = $1 " " $2
    if (!(k in nr)) order[++n] = k
    i = ++nr[k]
    step[k, i] = $3; comm[k, i] = $4; expo[k, i] = $5; hid[k, i] = $6
    nb[k] = $8
    for (j = 9; j <= 13; j++) thr[k, i, j] = $j
  }
  function pick(k,   i, j, c, best) {
    for (i = 1; i <= nr[k]; i++) {
      c = 0
      for (j = 1; j <= nr[k]; j++)
        if (step[k, j] + 0 < step[k, i] + 0 || (step[k, j] + 0 == step[k, i] + 0 && j < i))
          c++
      if (c == int((nr[k] - 1) / 2)) best = i
    }
    return best
  }
  END {
    printf "\n| cap MiB | buckets | mode | runs | step ms | comm ms | exposed ms | hidden | exposed/comm | compute CPU ms | compute wait ms | compute preempted | comm CPU ms | comm wake-ups |\n"
    printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    best = ""; bestno = ""
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " "); r = pick(k)
      s = step[k, r]; c = comm[k, r]; e = expo[k, r]
      printf "| %s | %s | %s | %d | %.1f | %.1f | %.1f | %.3f | %.3f |", p[1], nb[k], p[2], nr[k], s, c, e, hid[k, r], (c > 0 ? e / c : 0)
      for (j = 9; j <= 13; j++) printf " %s |", thr[k, r, j]
      printf "\n"
      if (p[2] == "overlap" && (best == "" || s + 0 < bs)) { best = p[1]; bs = s; bc = c; be = e }
      if (p[2] == "no-overlap" && (bestno == "" || s + 0 < bns)) { bestno = p[1]; bns = s }
    }
    if (best == "" || bestno == "") exit 0
    ef = (bc > 0 ? be / bc : 0)
    ratio = (bns > 0 ? bs / bns : 0)
    printf "\noverlap_netns best_cap_mib=%s step_ms=%.1f exposed_frac=%.3f " \
           "no_overlap_best_cap_mib=%s no_overlap_step_ms=%.1f step_ratio=%.3f\n",
           best, bs, ef, bestno, bns, ratio
    if (smoke) exit 0
    if (!(ef < 0.15))
      printf "overlap_netns: target missed: exposed communication is %.0f%% of all communication at the best cap (target under 15%%)\n", ef * 100 > "/dev/stderr"
    if (!(ratio <= 0.75))
      printf "overlap_netns: target missed: the overlapped step is %.2f of the non-overlapped one (target at most 0.75)\n", ratio > "/dev/stderr"
  }' "$tmp/rows"
echo "PASS: overlap_netns ($(wc -l <"$tmp/rows") jobs)"
