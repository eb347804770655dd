#!/usr/bin/env bash
# How long the readers take over a job's traces: RANKS files of about MB
# MiB each, made by repeating the steps of a real trace (the PyTorch
# fixture's three profiled steps, or train's six), every repeat moved past
# the last in time and numbered on. Prints the read time of all of them
# (dg_dump --summary, the readers only), the wall time of that command and
# of writing the merged trace.
#   usage: bench_read.sh DG_DUMP [MB] [RANKS] [torch|train]
# (defaults 25 MiB, 8 ranks, torch). The target: `ddprun diagnose` within
# 5 s for 8 x 25 MiB on this 2-core machine, the reading well under it.
set -u
dump=${1:?usage: bench_read.sh DG_DUMP [MB] [RANKS] [torch|train]}
mb=${2:-25}
ranks=${3:-8}
source=${4:-torch}
name=bench_read
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "$name"

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

python3 - "$here/fixtures" "$tmp/traces" "$mb" "$ranks" "$source" <<'EOF' ||
import gzip, json, os, sys
fix, out, mb, ranks, source = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
os.makedirs(out)
target = int(mb * 1048576)
if source == "torch":
    src = [fix + "/torch_gloo/vm_23034.1796118824426572618.pt.trace.json.gz",
           fix + "/torch_gloo/vm_23035.1796118824431246522.pt.trace.json.gz"]
else:
    src = [fix + "/train_v2/tr.rank%d.json.gz" % r for r in (0, 1)]
for r in range(ranks):
    path = src[r % 2]
    d = json.load(gzip.open(path, "rt"))
    ev = d["traceEvents"]
    meta = [e for e in ev if e.get("ph") == "M"]
    body = [e for e in ev if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    if source == "torch":
        steps = [e for e in body if e["name"].startswith("ProfilerStep#")]
        d["distributedInfo"]["rank"], d["distributedInfo"]["world_size"] = r, ranks
        prefix, first = "ProfilerStep#", min(int(e["name"][13:]) for e in steps)
    else:
        steps = [e for e in body if e["name"].startswith("step ")]
        d["otherData"]["ddprun"]["rank"], d["otherData"]["ddprun"]["world"] = r, ranks
        prefix, first = "step ", 0
    t0 = min(e["ts"] for e in steps)
    span = max(e["ts"] + e["dur"] for e in steps) - t0 + 1000
    nsteps = len(steps)
    head = {k: v for k, v in d.items() if k != "traceEvents"}
    text = json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n'
    with open("%s/rank%d.json" % (out, r), "w") as f:
        f.write(text)
        size, k, sep = len(text), 0, ""
        for e in meta:
            s = sep + json.dumps(e)
            f.write(s); size += len(s); sep = ",\n"
        while size < target:
            for e in body:
                e2 = dict(e)
                e2["ts"] = e["ts"] + k * span
                if e["name"].startswith(prefix) and e["ph"] == "X":
                    n = int(e["name"][len(prefix):])
                    e2["name"] = prefix + str(n + k * nsteps)
                if "args" in e and "ready_us" in e["args"]:
                    e2["args"] = dict(e["args"], ready_us=e["args"]["ready_us"] + k * span)
                s = sep + (json.dumps(e2, indent=None) if source == "torch"
                           else json.dumps(e2, separators=(",", ":")))
                f.write(s); size += len(s)
            k += 1
        f.write("\n  ]\n}\n")
EOF
  fail "generating the traces"

bytes=$(du -cb "$tmp"/traces/*.json | tail -1 | cut -f1)
t0=$(date +%s.%N)
scratch_run 600 read "$dump" --summary "$tmp/traces"
t1=$(date +%s.%N)
[ "$rc" = 0 ] || fail "dg_dump: $(cat "$tmp/read.err")"
grep -c '^rank ' "$tmp/read.out" | grep -qx "$ranks" ||
  fail "not $ranks ranks: $(cat "$tmp/read.out")"
steps=$(awk '/^rank /{print $6; exit}' "$tmp/read.out")
read_s=$(awk '/^read /{print $(NF-1)}' "$tmp/read.out")
t2=$(date +%s.%N)
scratch_run 600 merge "$dump" --merge "$tmp/merged.json" "$tmp"/traces/*.json
t3=$(date +%s.%N)
[ "$rc" = 0 ] || fail "merge: $(cat "$tmp/merge.err")"
awk -v b="$bytes" -v r="$ranks" -v s="$steps" -v rd="$read_s" \
  -v w="$(echo "$t1 - $t0" | bc)" -v m="$(echo "$t3 - $t2" | bc)" \
  -v src="$source" 'BEGIN {
    printf "bench_read: %d %s traces, %.1f MiB in all (%d steps each): " \
           "read %.3f s (%.0f MiB/s), dg_dump wall %.3f s, merge %.3f s\n",
           r, src, b / 1048576, s, rd, b / 1048576 / rd, w, m }'
