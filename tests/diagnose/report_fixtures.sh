#!/usr/bin/env bash
# `ddprun diagnose`'s report on the trace fixtures, end to end:
#   - profiled without record_shapes (torch_noshape, torch_accum): the
#     bucket-size line says so and what to change, in the text and as the
#     JSON's reason; with shapes (torch_colls) it recommends, and never
#     says so;
#   - the slowest backward ops (torch_colls, torch_gloo's combined cycles,
#     torch_accum's last backward pass of each step, train_v2's layers):
#     the JSON's backward_ops equal fixtures/expect_backward.py's own
#     reading of the same files, and the text shows the same ops in the
#     same order with the same figures;
#   - traces without backward ops (those fixtures with them taken out):
#     one line in the text, null in the JSON.
# Usage: report_fixtures.sh DDPRUN FIXTURES
set -u
ddprun=${1:?usage: report_fixtures.sh DDPRUN FIXTURES}
fix=${2:?usage: report_fixtures.sh DDPRUN FIXTURES}
name=report_fixtures
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "$name"
command -v python3 >/dev/null || { echo "SKIP: $name: no python3"; exit 77; }

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

# diagnose TAG ARGS...: the text report in $tmp/TAG.out, the JSON in
# $tmp/TAG.json.
diagnose() {
  local tag=$1
  shift
  scratch_run 30 "$tag.json" "$ddprun" diagnose --json "$@"
  [ "$rc" = 0 ] || fail "$tag: diagnose --json exited $rc: $(cat "$tmp/$tag.json.err")"
  mv "$tmp/$tag.json.out" "$tmp/$tag.json"
  scratch_run 30 "$tag" "$ddprun" diagnose "$@"
  [ "$rc" = 0 ] || fail "$tag: diagnose exited $rc: $(cat "$tmp/$tag.err")"
}

# ---- record_shapes ---------------------------------------------------------
want="bucket size: no recommendation: the traces have no tensor sizes \
(profiled without record_shapes); profile with \
torch.profiler.profile(record_shapes=True) to get a bucket size from the \
all-reduces' sizes"
for d in torch_noshape torch_accum; do
  diagnose "$d" "$fix/$d"
  grep -qxF "$want" "$tmp/$d.out" ||
    fail "$d: no record_shapes line: $(grep '^bucket size' "$tmp/$d.out")"
  python3 - "$tmp/$d.json" "${want#bucket size: no recommendation: }" <<'EOF' ||
import json, sys
rec = json.load(open(sys.argv[1]))["recommendation"]
assert rec["available"] is False and rec["reason"] == sys.argv[2], rec
EOF
    fail "$d: the JSON's reason is not the record_shapes one"
done
diagnose colls "$fix/torch_colls"
grep -q '^bucket size (the planner' "$tmp/colls.out" ||
  fail "torch_colls: no recommendation: $(grep '^bucket size' "$tmp/colls.out")"
grep -q 'record_shapes' "$tmp/colls.out" &&
  fail "torch_colls has shapes, yet: $(grep record_shapes "$tmp/colls.out")"

# ---- the slowest backward ops ----------------------------------------------
# check TAG FIXTURE...: diagnose's backward_ops (JSON and text) against
# expect_backward.py's.
check() {
  local tag=$1
  shift
  diagnose "$tag" "$@"
  scratch_run 60 "$tag.want" python3 "$fix/expect_backward.py" "$@"
  [ "$rc" = 0 ] || fail "$tag: expect_backward.py: $(cat "$tmp/$tag.want.err")"
  python3 - "$tmp/$tag.json" "$tmp/$tag.out" "$tmp/$tag.want.out" <<'EOF' ||
import json, re, sys
got = json.load(open(sys.argv[1]))["backward_ops"]
text = open(sys.argv[2]).read().splitlines()
want = json.load(open(sys.argv[3]))
assert want is not None and len(want["top"]) >= 3, want
def close(a, b, tol):
    return abs(a - b) <= tol
# The JSON: every figure, to its 6 decimals.
for k in ("rank", "steps", "kinds"):
    assert got[k] == want[k], (k, got[k], want[k])
for k in ("backward_ms", "ops_ms"):
    assert close(got[k], want[k], 2e-6), (k, got[k], want[k])
assert [t["name"] for t in got["top"]] == [t["name"] for t in want["top"]], \
    ([t["name"] for t in got["top"]], [t["name"] for t in want["top"]])
for g, w in zip(got["top"], want["top"]):
    assert g["runs"] == w["runs"], (g, w)
    for k in ("total_ms", "ms_per_step", "share"):
        assert close(g[k], w[k], 2e-6), (k, g, w)
# The text: the heading, then one line per op in that order, then the sum.
head = "slowest backward ops (rank %d, the longest backward pass; mean per " \
       "step over %d step%s):" % (want["rank"], want["steps"],
                                   "" if want["steps"] == 1 else "s")
i = text.index(head)
rows = text[i + 2:i + 2 + len(want["top"])]
for k, (row, w) in enumerate(zip(rows, want["top"])):
    m = re.fullmatch(r"\s+(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)",
                     row)
    assert m, row
    assert int(m[1]) == k + 1 and m[2] == w["name"], (row, w)
    assert close(float(m[3]), w["ms_per_step"], 0.0006), (row, w)
    assert close(float(m[4]), w["total_ms"], 0.0006), (row, w)
    assert close(float(m[5]), 100 * w["share"], 0.06), (row, w)
    assert close(float(m[6]), w["runs"] / want["steps"], 1e-3), (row, w)
last = text[i + 2 + len(want["top"])]
assert last.startswith("  all %d op%s: " % (want["kinds"],
                                            "" if want["kinds"] == 1 else "s")), last
print("%s: rank %d, %s" % (sys.argv[1].rsplit("/", 1)[-1], want["rank"],
                           ", ".join(t["name"] for t in want["top"])))
EOF
    fail "$tag: backward ops differ from the traces' own (above)"
}
check colls "$fix/torch_colls"
check gloo "$fix/torch_gloo"
check accum "$fix/torch_accum"
check train "$fix/train_v2"

# ---- no backward ops ---------------------------------------------------------
mkdir "$tmp/nobwd"
python3 - "$fix" "$tmp/nobwd" <<'EOF' || fail "could not write the traces without backward ops"
import glob, gzip, json, os, sys
fix, out = sys.argv[1], sys.argv[2]
for src, drop in (("torch_colls", lambda n: n.startswith("autograd::engine::evaluate_function: ")),
                  ("train_v2", lambda n: n.endswith(".bwd"))):
    os.makedirs(os.path.join(out, src))
    for p in glob.glob(os.path.join(fix, src, "*.json.gz")):
        d = json.load(gzip.open(p, "rt"))
        d["traceEvents"] = [e for e in d["traceEvents"] if not drop(e.get("name", ""))]
        with gzip.open(os.path.join(out, src, os.path.basename(p)), "wt") as f:
            json.dump(d, f)
EOF
none="slowest backward ops: none in the traces (PyTorch's \
autograd::engine::evaluate_function events, train's LAYER.bwd spans)"
for d in torch_colls train_v2; do
  diagnose "nobwd_$d" "$tmp/nobwd/$d"
  grep -qxF "$none" "$tmp/nobwd_$d.out" ||
    fail "$d without backward ops: $(sed -n '/^slowest/,$p' "$tmp/nobwd_$d.out")"
  [ "$(grep -c '^slowest backward ops' "$tmp/nobwd_$d.out")" = 1 ] ||
    fail "$d without backward ops: more than one line"
  python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["backward_ops"] is None' \
    "$tmp/nobwd_$d.json" || fail "$d without backward ops: backward_ops is not null"
done
echo "PASS: $name"
