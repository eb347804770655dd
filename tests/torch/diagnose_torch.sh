#!/usr/bin/env bash
# `ddprun diagnose` on a real PyTorch DDP program (ddp_profiled.py: gloo on
# the CPU, torch.profiler on every rank, 8 Linear layers of 512, 1 MiB
# buckets) run under ddprun with 2 ranks. Skipped (77) where python3 cannot
# import torch with gloo (.ci/run installs it and sets DDPRUN_TORCH_PATH).
#
#   found      every profiled step (5) of both ranks, each with its backward
#              pass and its 8 bucket all-reduces
#   figures    hidden and exposed communication (medians over ranks and
#              steps) within 10% of the same computation made here in
#              Python from the trace's own events
#   advice     a bucket_cap_mb; the job run with it is not slower than with
#              25 (median of 5 runs each, within 10% or the runs' spread)
#   slow rank  rank 1 sleeping 40 ms in its data loading each step: rank 1
#              named, its data loading the cause, and the what-if step
#              (median of 3 jobs) within 15% of the step measured without
#              the sleep, in the same jobs right after (median of 3).
#              These runs bind each rank to a CPU of its own and use DDP's
#              default buckets, so that the step without the sleep is not
#              one where the ranks contend for the same cores, which a job
#              of one rank per host never does.
#
# Usage: diagnose_torch.sh DDPRUN
set -u
name=diagnose_torch
ddprun=${1:?usage: diagnose_torch.sh DDPRUN}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"

# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_profiled.py

# job TAG ARGS...: the profiled job under ddprun, 2 ranks; its median step
# (ms, rank 0's line) in $step.
job() {
  local tag=$1
  shift
  run 180 "$tag" "$ddprun" --standalone --nproc-per-node 2 --log-level warn \
    "${bind[@]}" "$job" "$@"
  [ "$rc" -eq 0 ] || die "$tag" "the job exited $rc"
  step=$(sed -n 's/^\[rank0\]:step_ms median=\([0-9.]*\) .*/\1/p' "$tmp/$tag.out")
  [ -n "$step" ] || die "$tag" "no step_ms line"
}
# median3 A B C
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
bind=()

job base --bucket-cap-mb 1 --trace-dir "$tmp/base.trace"
"$ddprun" diagnose --json "$tmp/base.trace" >"$tmp/base.json" 2>"$tmp/base.diag.err" ||
  { cat "$tmp/base.diag.err" >&2; die base "ddprun diagnose failed"; }
python3 - "$tmp/base.json" "$tmp/base.trace" <<'PY' >"$tmp/base.check" ||
import glob, json, statistics, sys
d = json.load(open(sys.argv[1]))
assert d["source"] == "torch" and d["ranks_used"] == 2, (d["source"], d["ranks_used"])
assert d["steps"]["count"] == 5, d["steps"]
for r in d["ranks"]:
    assert r["trace_steps"] == 5, (r["rank"], r["trace_steps"])
    assert r["backward_ms"] and r["backward_ms"] > 0, r
assert len(d["buckets"]) == 8, len(d["buckets"])

# The same figures from the trace's own events: per rank and profiled step,
# the backward pass is the span of the autograd engine's functions, the
# communication the union of the gloo all-reduces, hidden its part inside
# the backward pass, exposed what runs after it until the optimizer starts.
hid, exp = [], []
for path in sorted(glob.glob(sys.argv[2] + "/*.json")):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    for s in steps:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ev if t0 <= e["ts"] < t1]
        bwd = [e for e in inside if e["name"].startswith("autograd::engine::evaluate_function:")]
        if not bwd:
            continue
        b0 = min(e["ts"] for e in bwd)
        b1 = max(e["ts"] + e["dur"] for e in bwd)
        opt = [e for e in inside if e["name"].startswith("Optimizer.step#")]
        o0 = min(e["ts"] for e in opt)
        # "finished": false marks one the profile stopped in: its end is
        # the profile's, not its own.
        comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in inside
                      if e["name"] == "gloo:all_reduce" and
                      e.get("args", {}).get("finished") is not False)
        union, h = [], 0.0
        for a, b in comm:
            if union and a <= union[-1][1]:
                union[-1][1] = max(union[-1][1], b)
            else:
                union.append([a, b])
        for a, b in union:
            h += max(0.0, min(b, b1) - max(a, b0))
        end = max(b for a, b in union)
        hid.append(h / 1000)
        exp.append((max(end, o0) - b1) / 1000 if end > b1 else 0.0)
mh, me = statistics.median(hid), statistics.median(exp)
dh, de = d["summary"]["hidden_ms"], d["summary"]["exposed_ms"]
print(f"hidden: diagnose {dh:.3f} ms, events {mh:.3f} ms; "
      f"exposed: diagnose {de:.3f} ms, events {me:.3f} ms")
for what, x, y in (("hidden", dh, mh), ("exposed", de, me)):
    assert abs(x - y) <= 0.10 * max(y, 0.5), f"{what}: {x:.3f} vs {y:.3f} ms ({d['notes']})"
rec = d["recommendation"]
assert rec["available"], rec.get("reason")
print(f"recommends {rec['best_bucket_mib']:g}")
PY
  { cat "$tmp/base.check" >&2; die base "diagnose's figures disagree with the trace's events"; }
cat "$tmp/base.check"
rec=$(sed -n 's/^recommends //p' "$tmp/base.check")
echo "found: 5 steps x 2 ranks, 8 bucket all-reduces each"

# advice: the recommended cap against 25, five runs of each, interleaved;
# their medians compared, within noise: 10%, or the spread of the middle
# three runs of either when larger (a 2-core host shared with other work).
rs=() ds=()
for i in 1 2 3 4 5; do
  job rec$i --bucket-cap-mb "$rec"; rs+=("$step")
  job d25$i --bucket-cap-mb 25; ds+=("$step")
done
read -r mr rspread < <(printf '%s\n' "${rs[@]}" | sort -g | awk '{v[NR]=$1} END {print v[3], v[4]-v[2]}')
read -r md dspread < <(printf '%s\n' "${ds[@]}" | sort -g | awk '{v[NR]=$1} END {print v[3], v[4]-v[2]}')
echo "advice: bucket_cap_mb=$rec step $mr ms (${rs[*]}), 25: $md ms (${ds[*]}); medians of 5"
awk -v r="$mr" -v d="$md" -v a="$rspread" -v b="$dspread" 'BEGIN {
  n = 0.10 * d; if (a > n) n = a; if (b > n) n = b; exit !(r <= d + n) }' ||
  die advice "bucket_cap_mb=$rec takes $mr ms, slower than 25's $md ms beyond the noise"

# slow rank: rank 1 sleeps 40 ms in its data loading; three jobs, each
# diagnosed, each running the same steps again without the sleep right
# after, in the same processes (--then-clean): the step the what-if
# predicts, measured where nothing else has changed. Medians of the three.
bind=(--cpu-bind auto)
long=(--steps 12 --active 8)
cs=()
for i in 1 2 3; do
  job slow$i "${long[@]}" --slow-rank 1 --slow-ms 40 --then-clean \
    --trace-dir "$tmp/slow$i.trace"
  c=$(sed -n 's/^\[rank0\]:clean_step_ms median=\([0-9.]*\) .*/\1/p' "$tmp/slow$i.out")
  [ -n "$c" ] || die "slow$i" "no clean_step_ms line"
  cs+=("$c")
  "$ddprun" diagnose --json "$tmp/slow$i.trace" >"$tmp/slow$i.json" \
    2>"$tmp/slow$i.diag.err" || die slow "ddprun diagnose failed"
done
clean=$(median3 "${cs[@]}")
python3 - "$clean" "$tmp"/slow[123].json <<'PY' || die slow "rank 1 not named as it should be"
import json, statistics, sys
clean = float(sys.argv[1])
ws = []
for f in sys.argv[2:]:
    d = json.load(open(f))
    slow = [p for p in d["patterns"] if p["name"] == "slow_rank"]
    assert slow, (f, [p["name"] for p in d["patterns"]])
    p = slow[0]
    print(p["text"])
    assert p["rank"] == 1, p["rank"]
    assert p["data_excess_ms"] > p["compute_excess_ms"], (p["data_excess_ms"], p["compute_excess_ms"])
    assert "data" in p["text"], p["text"]
    ws.append(p["whatif_step_ms"])
w = statistics.median(ws)
print(f"what-if {w:.1f} ms (median of {', '.join(f'{x:.1f}' for x in ws)}), "
      f"measured without the sleep {clean:.1f} ms")
assert abs(w - clean) <= 0.15 * clean, (w, clean)
PY
echo "PASS: $name: figures agree with the events, bucket_cap_mb=$rec, rank 1 named"
