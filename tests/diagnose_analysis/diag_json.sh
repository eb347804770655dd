#!/usr/bin/env bash
# `ddprun diagnose --json`'s schema (diag_report.h) on synthetic jobs:
# every report parses with python3's json module and has the documented
# fields, with null for what the traces do not give.
# Usage: diag_json.sh DIAG_DUMP
set -u
dump=${1:?usage: diag_json.sh DIAG_DUMP}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
fail() {
  echo "FAIL: diag_json: $*" >&2
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/diag_json.XXXXXX") || fail "mktemp -d failed"
trap 'rm -rf "$tmp"' EXIT
for s in full bare partial empty no_backward; do
  "$dump" "$s" >"$tmp/$s.json" || fail "$s: diag_dump exited $?"
  python3 -c 'import json, sys; json.load(sys.stdin)' <"$tmp/$s.json" \
    || fail "$s: not JSON"
  python3 - "$s" "$tmp/$s.json" <<'PY' || fail "$s: schema"
import json, sys
s = sys.argv[1]
with open(sys.argv[2]) as f:
    d = json.load(f)
STATS = ["step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms",
         "comm_ms", "hidden_ms", "exposed_ms", "arrival_ms", "wait_ms"]
def keys(obj, want, where):
    missing = [k for k in want if k not in obj]
    assert not missing, f"{where}: missing {missing}"
keys(d, ["version", "source", "backend", "world", "ranks_given", "ranks_used",
         "missing_ranks", "steps", "summary", "ranks", "buckets", "patterns",
         "recommendation", "backward_ops", "notes"], "top")
assert d["version"] == 1
keys(d["steps"], ["count", "first", "last"], "steps")
keys(d["summary"], STATS, "summary")
for r in d["ranks"]:
    keys(r, ["rank", "path", "trace_steps"] + STATS, "rank")
for b in d["buckets"]:
    keys(b, ["index", "bucket", "mib", "ready_ms", "start_ms", "end_ms",
             "queue_ms", "duration_ms", "samples"], "bucket")
for p in d["patterns"]:
    keys(p, ["name", "text", "ms", "frac", "cause", "cause_ms", "share", "count",
             "rank", "data_excess_ms", "compute_excess_ms", "whatif_step_ms",
             "whatif_frac"], "pattern")
    assert p["name"] in ("late_start", "backlog", "tail", "all_hidden",
                         "slow_rank"), p["name"]
rec = d["recommendation"]
keys(rec, ["available", "reason", "fit"], "recommendation")
if rec["fit"] is not None:
    keys(rec["fit"], ["alpha_ms", "bandwidth_mib_per_ms", "samples", "sizes",
                      "weak"], "fit")
if rec["available"]:
    assert rec["reason"] is None
    keys(rec, ["forward_ms", "backward_ms", "optimizer_ms", "first_bucket_mib",
               "gradients", "candidates", "best_bucket_mib", "change", "how",
               "in_use"], "recommendation")
    for c in rec["candidates"]:
        keys(c, ["bucket_mib", "buckets", "allreduce_ms", "comm_ms",
                 "finish_ms", "exposed_ms", "hidden_frac", "step_ms"],
             "candidate")
    assert rec["best_bucket_mib"] in [c["bucket_mib"] for c in rec["candidates"]]
    keys(rec["in_use"], ["largest_bucket_mib", "buckets", "predicted_step_ms",
                         "measured_step_ms"], "in_use")
else:
    assert isinstance(rec["reason"], str) and rec["reason"]
bo = d["backward_ops"]
if bo is not None:
    keys(bo, ["rank", "path", "steps", "backward_ms", "ops_ms", "kinds", "top"],
         "backward_ops")
    assert 0 < len(bo["top"]) <= 5 and len(bo["top"]) <= bo["kinds"]
    for t in bo["top"]:
        keys(t, ["name", "total_ms", "ms_per_step", "share", "runs"], "op")
assert all(isinstance(n, str) for n in d["notes"])
# What each job shows.
names = [p["name"] for p in d["patterns"]]
if s == "full":
    assert d["ranks"][0]["path"] == 'dir/"rank 0"\\\t.json', d["ranks"][0]["path"]
    slow = d["patterns"][names.index("slow_rank")]
    assert slow["rank"] == 3 and slow["cause"] == "data", slow
    assert abs(slow["whatif_step_ms"] - 94) < 1e-6, slow
    assert rec["available"] and rec["fit"]["weak"] is False
    assert abs(rec["in_use"]["measured_step_ms"] - 114) < 1e-6
    # Every rank's backward pass is 60 ms: rank 0's ops, over 5 steps.
    assert bo["rank"] == 0 and bo["steps"] == 5 and bo["kinds"] == 2, bo
    assert [t["name"] for t in bo["top"]] == [
        "AddmmBackward0", "torch::autograd::AccumulateGrad"], bo["top"]
    assert abs(bo["top"][0]["total_ms"] - 200) < 1e-6, bo["top"][0]
    assert abs(bo["top"][0]["share"] - 200 / 300) < 1e-6, bo["top"][0]
elif s == "bare":
    assert d["buckets"] == [] and names == [] and not rec["available"]
    assert bo is None
    assert rec["fit"] is None
elif s == "partial":
    assert d["world"] == 8 and d["ranks_used"] == 6
    assert d["missing_ranks"] == [3, 7] and d["steps"]["count"] == 3
    assert all(b["mib"] is None for b in d["buckets"])
    assert not rec["available"] and "sizes" in rec["reason"]
elif s == "empty":
    assert d["ranks"] == [] and d["steps"]["first"] is None
    assert d["summary"]["step_ms"] is None and d["world"] is None
elif s == "no_backward":
    assert d["summary"]["backward_ms"] is None and bo is None
    assert d["summary"]["hidden_ms"] is None
    assert not rec["available"] and rec["fit"] is not None
PY
done
echo "ok: diag_json"
