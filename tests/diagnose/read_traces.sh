#!/usr/bin/env bash
# The trace readers on whole files, as `ddprun diagnose` will call them
# (through tests/diagnose/dg_dump):
#   - a real 2-rank train run with --trace: one step per --steps, the
#     evaluation after training in none, every step's buckets;
#   - the PyTorch fixtures as a directory: two ranks, the profiling cycles
#     of each combined;
#   - the merged trace: valid JSON (Python's json), one process per rank,
#     every input event in it, ranks' clocks moved;
#   - every broken input: exit 1, nothing on stdout, exactly one line on
#     stderr that names the file.
# Usage: read_traces.sh DG_DUMP FIXTURES [DDPRUN TRAIN]
set -u
dump=${1:?usage: read_traces.sh DG_DUMP FIXTURES [DDPRUN TRAIN]}
fix=${2:?usage: read_traces.sh DG_DUMP FIXTURES [DDPRUN TRAIN]}
ddprun=${3:-}
train=${4:-}
name=read_traces
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "$name"

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

# ---- a real train run ------------------------------------------------------
if [ -n "$ddprun" ] && [ -x "$train" ]; then
  mkdir "$tmp/run"
  scratch_run 120 run "$ddprun" --standalone --nproc-per-node 2 "$train" \
    --steps 5 --trace "$tmp/run/tr.json"
  [ "$rc" = 0 ] || fail "train --trace exited $rc: $(tail -3 "$tmp/run.err")"
  scratch_run 30 dump "$dump" "$tmp/run"
  [ "$rc" = 0 ] || fail "dg_dump of the run: $(cat "$tmp/dump.err")"
  for r in 0 1; do
    grep -q "^rank $r .* source train .* steps 5$" "$tmp/dump.out" ||
      fail "rank $r: not 5 steps: $(grep '^rank' "$tmp/dump.out")"
  done
  # Every step has its buckets (the evaluation's forward passes, after the
  # last step, belong to none).
  steps=$(grep -c '^step ' "$tmp/dump.out")
  [ "$steps" = 10 ] || fail "$steps steps, not 10"
  if grep '^step ' "$tmp/dump.out" | grep -q ' colls 0$'; then
    fail "a step without its all-reduces"
  fi
  # Gradient accumulation: the backward is the last micro-batch's, after
  # every forward of the step.
  mkdir "$tmp/accum"
  scratch_run 120 accum "$ddprun" --standalone --nproc-per-node 2 "$train" \
    --steps 2 --grad-accum 3 --trace "$tmp/accum/tr.json"
  [ "$rc" = 0 ] || fail "train --grad-accum exited $rc: $(tail -3 "$tmp/accum.err")"
  scratch_run 30 dump "$dump" "$tmp/accum/tr.rank1.json"
  [ "$rc" = 0 ] || fail "dg_dump of the accumulating run: $(cat "$tmp/dump.err")"
  grep -q '2 steps accumulate gradients' "$tmp/dump.out" ||
    fail "accumulation not noted: $(grep '^note' "$tmp/dump.out")"
  awk '/^step / { if (!($10 <= $12 && $13 <= $15)) bad = 1; n++ }
       END { exit (bad || n != 2) }' "$tmp/dump.out" ||
    fail "forward, backward and optimizer out of order: $(grep '^step' "$tmp/dump.out")"
fi

# ---- PyTorch, a directory --------------------------------------------------
scratch_run 30 torch "$dump" --summary "$fix/torch_gloo"
[ "$rc" = 0 ] || fail "dg_dump torch_gloo: $(cat "$tmp/torch.err")"
grep -q '^rank 0 source torch steps 4 colls 24$' "$tmp/torch.out" ||
  fail "torch rank 0: $(cat "$tmp/torch.out")"
grep -q '^rank 1 source torch steps 4 colls 24$' "$tmp/torch.out" ||
  fail "torch rank 1: $(cat "$tmp/torch.out")"
grep -q 'combined' "$tmp/torch.out" || fail "no word of the combined cycles"

# ---- the merged trace ------------------------------------------------------
scratch_run 30 merge "$dump" --merge "$tmp/merged.json" \
  "$fix"/torch_gloo/*.json.gz "$fix/train_v2/tr.rank0.json.gz"
[ "$rc" = 0 ] || fail "merge: $(cat "$tmp/merge.err")"
python3 - "$tmp/merged.json" "$fix" <<'EOF' || fail "the merged trace"
import collections, glob, gzip, json, sys
m = json.load(open(sys.argv[1]))
ev = m["traceEvents"]
assert m["otherData"]["ddprun"] == {"source": "merge", "inputs": 5}, m["otherData"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert names[0].startswith("rank 0 (") and names[1].startswith("rank 1 ("), names
# Every X event of every input is there, under its rank.
want = collections.Counter()
for f in sorted(glob.glob(sys.argv[2] + "/torch_gloo/*.json.gz")):
    d = json.load(gzip.open(f, "rt"))
    want[d["distributedInfo"]["rank"]] += sum(e.get("ph") == "X" for e in d["traceEvents"])
t = json.load(gzip.open(sys.argv[2] + "/train_v2/tr.rank0.json.gz", "rt"))
want[0] += sum(e.get("ph") == "X" for e in t["traceEvents"])
got = collections.Counter(e["pid"] for e in ev if e.get("ph") == "X")
assert got == want, (got, want)
# The train rank is on the server's clock: its ts moved by clock_offset_us.
first = min(e["ts"] for e in t["traceEvents"] if e.get("name") == "step 0")
assert any(e.get("name") == "step 0" and e["ts"] == first - 1234567 for e in ev)
EOF

# ---- broken inputs: one line each -----------------------------------------
bad=$tmp/bad
mkdir "$bad" "$bad/empty_dir"
printf '' >"$bad/empty.json"
head -c 5000 "$fix/train_v1/tr.rank0.json" >"$bad/truncated.json"
printf '{"traceEvents":[{"name":"x",}]}' >"$bad/invalid.json"
printf '[1, 2, 3]' >"$bad/array.json"
printf '"a string"' >"$bad/string.json"
printf '{"traceEvents":{"name":"x"}}' >"$bad/events_object.json"
printf '{"traceEvents":[{"name":"some other tool","ph":"X","ts":1,"dur":2}]}' \
  >"$bad/other_tool.json"
head -c 3000 "$fix/torch_gloo/vm_23034.1796118824426572618.pt.trace.json.gz" \
  >"$bad/truncated.json.gz"
printf '\037\213garbage' >"$bad/garbage.json.gz"
python3 -c 'import sys; sys.stdout.write("[" * 5000 + "]" * 5000)' \
  >"$bad/deep.json"
for f in empty truncated invalid array string events_object other_tool \
  truncated.json deep; do
  case $f in *.json) path=$bad/$f.gz ;; *) path=$bad/$f.json ;; esac
  scratch_run 30 bad "$dump" "$path"
  [ "$rc" = 1 ] || fail "$f: exit $rc, not 1"
  [ ! -s "$tmp/bad.out" ] || fail "$f: wrote to stdout: $(cat "$tmp/bad.out")"
  lines=$(wc -l <"$tmp/bad.err")
  [ "$lines" = 1 ] || fail "$f: $lines lines on stderr: $(cat "$tmp/bad.err")"
  grep -q "^$path: " "$tmp/bad.err" || fail "$f: the file is not named: $(cat "$tmp/bad.err")"
done
scratch_run 30 bad "$dump" "$bad/garbage.json.gz"
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/bad.err")" = 1 ] || fail "garbage gzip"
scratch_run 30 bad "$dump" "$bad/empty_dir"
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/bad.err")" = 1 ] || fail "empty directory"
grep -q 'no trace files' "$tmp/bad.err" || fail "empty directory: $(cat "$tmp/bad.err")"
# Two files that claim one rank at the same time.
cp "$fix/train_v2/tr.rank0.json.gz" "$bad/a.json.gz"
cp "$fix/train_v2/tr.rank0.json.gz" "$bad/b.json.gz"
scratch_run 30 bad "$dump" "$bad/a.json.gz" "$bad/b.json.gz"
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/bad.err")" = 1 ] || fail "one rank twice"
grep -q 'both claim rank 0' "$tmp/bad.err" || fail "one rank twice: $(cat "$tmp/bad.err")"
echo "PASS: $name"
