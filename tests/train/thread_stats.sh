#!/usr/bin/env bash
# The compute and communication threads' per-step figures
# (worker/train/train_threads.h):
#  - 2 ranks with --trace: rank 0's final line ends with the nine keys,
#    numbers; both threads used some CPU (the communication thread's
#    all-reduces), the communication thread woke up about once a step or
#    more, the compute thread used no more CPU per step than a step lasts;
#    each rank's trace holds, per step, the four counters ("cpu ms",
#    "run-queue wait ms", "voluntary switches", "involuntary switches")
#    with a "compute" and a "comm" series, each at or before its step's
#    span and after the previous one's end, and rank 0's "cpu ms" add up
#    to its final line's mean;
#    (--comm-schedule thread: the communication thread is what is measured);
#  - 2 ranks on one CPU with --thread-stats: the inline schedule, said at
#    start, and comm_* at 0;
#  - 1 process with --thread-stats: the keys, with comm_* at 0 (no
#    communication thread); without it or --trace: none of them.
#
# Usage: thread_stats.sh DDPRUN TRAIN
set -u
name=thread_stats
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: thread_stats.sh DDPRUN TRAIN}
train=${2:?}
need_python

steps=20
model="--layers 2 --width 256 --input-dim 64 --classes 8 --samples 4096
       --eval-samples 64 --batch 32 --optimizer sgd --lr 0.05 --steps $steps
       --bucket-cap-mb 0.1 --first-bucket-mb 0.05"
keys="compute_cpu_ms compute_wait_ms compute_vol_cs compute_invol_cs
      comm_cpu_ms comm_wait_ms comm_vol_cs comm_invol_cs thread_sample_us"

run 60 two env OMP_NUM_THREADS=1 "$ddprun" --standalone --nproc-per-node 2 \
  --log-level warn "$train" $model --comm-schedule thread \
  --trace "$tmp/two.{rank}.json"
[ "$rc" -eq 0 ] || { show two; fail "2 ranks: ddprun exited $rc"; }
for k in $keys; do
  v=$(final two "$k")
  case $v in
    '' | *[!0-9.]*) show two; fail "2 ranks: final $k='$v', not a number" ;;
  esac
done
line=$(grep '^\[rank0\]:final ' "$tmp/two.out" | tail -n 1)
echo "2 ranks: ${line#*peak_rss_median_mib=}"
python3 - "$(final two compute_cpu_ms)" "$(final two comm_cpu_ms)" \
  "$(final two comm_vol_cs)" "$(final two median_step_ms)" <<'EOF' ||
import sys
cpu, comm, wakeups, step = map(float, sys.argv[1:])
bad = []
if not cpu > 0: bad.append("compute_cpu_ms %g is not above 0" % cpu)
if not comm > 0: bad.append("comm_cpu_ms %g is not above 0" % comm)
if not wakeups >= 0.5:
    bad.append("comm_vol_cs %g: the communication thread did not sleep "
               "between steps" % wakeups)
# A step's interval also holds the work between steps: some slack.
if not cpu <= 2 * step + 2:
    bad.append("compute_cpu_ms %g is more than a step lasts (%g ms)"
               % (cpu, step))
if bad: sys.exit("FAIL: " + "; ".join(bad))
EOF
  fail "2 ranks: implausible figures"

python3 - "$tmp/two" "$steps" "$(final two compute_cpu_ms)" <<'EOF' ||
import json, sys
base, steps, mean = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
names = ["cpu ms", "run-queue wait ms", "voluntary switches",
         "involuntary switches"]
for rank in (0, 1):
    ev = json.load(open("%s.%d.json" % (base, rank)))["traceEvents"]
    spans = sorted((e for e in ev if e.get("ph") == "X" and
                    e["name"].startswith("step ")), key=lambda e: e["ts"])
    if len(spans) != steps:
        sys.exit("FAIL: rank %d: %d step spans" % (rank, len(spans)))
    for n in names:
        cs = sorted((e for e in ev if e.get("ph") == "C" and e["name"] == n),
                    key=lambda e: e["ts"])
        if len(cs) != steps:
            sys.exit("FAIL: rank %d: %d '%s' counters for %d steps"
                     % (rank, len(cs), n, steps))
        for k, (c, s) in enumerate(zip(cs, spans)):
            a = c.get("args", {})
            if sorted(a) != ["comm", "compute"] or \
                    any(not isinstance(v, (int, float)) or v < 0
                        for v in a.values()):
                sys.exit("FAIL: rank %d: '%s' %d has args %s" % (rank, n, k, a))
            prev_end = spans[k - 1]["ts"] + spans[k - 1]["dur"] if k else 0
            if not prev_end <= c["ts"] <= s["ts"]:
                sys.exit("FAIL: rank %d: '%s' %d at %d, not between step "
                         "%d's end %d and step %d's start %d"
                         % (rank, n, k, c["ts"], k - 1, prev_end, k, s["ts"]))
        if rank == 0 and n == "cpu ms":
            total = sum(c["args"]["compute"] for c in cs)
            if abs(total / steps - mean) > 0.005 * mean + 0.002:
                sys.exit("FAIL: rank 0: the 'cpu ms' counters average %.3f "
                         "ms, the final line says %.3f" % (total / steps, mean))
print("traces: %d steps x 4 counters per rank, in place" % steps)
EOF
  fail "2 ranks: the trace's counters"

# The inline schedule has no communication thread either: comm_* at 0,
# the compute thread's CPU holds the all-reduces, and the summary says why
# (pinned to one CPU, auto must choose it).
run 60 inl env OMP_NUM_THREADS=1 taskset -c 0 "$ddprun" --standalone \
  --nproc-per-node 2 --log-level warn "$train" $model --thread-stats
[ "$rc" -eq 0 ] || { show inl; fail "inline: ddprun exited $rc"; }
grep -q "collectives on the waiting thread: 2 ranks x 1 compute thread + a communication thread each fill the 1 CPU allowed" "$tmp/inl.out" "$tmp/inl.err" ||
  { show inl; fail "inline: the summary does not say why the collectives run inline"; }
[ "$(final inl comm_cpu_ms)" = 0.000 ] && [ "$(final inl comm_vol_cs)" = 0.00 ] ||
  { show inl; fail "inline: comm_cpu_ms=$(final inl comm_cpu_ms) comm_vol_cs=$(final inl comm_vol_cs), expected 0"; }

run 60 one env -i PATH="$PATH" OMP_NUM_THREADS=1 "$train" $model --thread-stats
[ "$rc" -eq 0 ] || { show one; fail "1 process: train exited $rc"; }
for k in comm_cpu_ms comm_wait_ms; do
  [ "$(final one "$k")" = 0.000 ] ||
    { show one; fail "1 process: $k=$(final one "$k"), expected 0.000"; }
done
for k in comm_vol_cs comm_invol_cs; do
  [ "$(final one "$k")" = 0.00 ] ||
    { show one; fail "1 process: $k=$(final one "$k"), expected 0.00"; }
done
v=$(final one compute_cpu_ms)
case $v in
  '' | *[!0-9.]*) show one; fail "1 process: compute_cpu_ms='$v'" ;;
esac

run 60 off env -i PATH="$PATH" OMP_NUM_THREADS=1 "$train" $model
[ "$rc" -eq 0 ] || { show off; fail "off: train exited $rc"; }
! grep -q "compute_cpu_ms\|thread_sample_us" "$tmp/off.out" ||
  { show off; fail "off: the threads' keys without --thread-stats"; }

no_leftovers
echo "PASS: $name"
