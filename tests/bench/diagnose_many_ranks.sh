#!/usr/bin/env bash
# `ddprun diagnose DIR` over many ranks: N small train --trace files
# (tests/diagnose/fixtures/gen_ranks.py, 3 steps each, rank N/2 loads its
# data 3 ms slower), read from one directory. Checks the report (N ranks,
# rank N/2 named the slow rank, for its data loading) and prints the wall
# time and the peak resident memory of the command. The target: 30,000
# files in under 5 s on this 2-core machine. CI runs it with 2,000 files
# (diagnose.many_ranks) for the results only.
#   usage: diagnose_many_ranks.sh DDPRUN [N]     (default 30000)
set -u
ddprun=${1:?usage: diagnose_many_ranks.sh DDPRUN [N]}
n=${2:-30000}
name=diagnose_many_ranks
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "$name"

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

python3 "$here/../diagnose/fixtures/gen_ranks.py" "$tmp/traces" "$n" ||
  fail "generating $n traces failed"
# The command's wall time (s) and peak RSS (KiB), from its parent.
cat >"$tmp/measure.py" <<'EOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.run(sys.argv[2:]).returncode
wall = time.monotonic() - t0
with open(sys.argv[1], "w") as f:
    f.write("%.2f %d\n" % (wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)
EOF
scratch_run 600 diag python3 "$tmp/measure.py" "$tmp/measured" "$ddprun" \
  diagnose "$tmp/traces"
[ "$rc" = 0 ] || fail "ddprun diagnose exited $rc: $(tail -3 "$tmp/diag.err")"
grep -q "^ddprun diagnose: $n ranks (train, cpu), 3 steps" "$tmp/diag.out" ||
  fail "not $n ranks of 3 steps: $(head -1 "$tmp/diag.out")"
[ "$(grep -c '^ *[0-9][0-9]* .*/traces/tr\.rank[0-9]*\.json$' "$tmp/diag.out")" = "$n" ] ||
  fail "not $n rank rows in the report"
grep -q "slow rank: rank $((n / 2)) .* its data loading takes 3.0 ms more" \
  "$tmp/diag.out" ||
  fail "rank $((n / 2)) not named slow: $(grep -A3 '^patterns' "$tmp/diag.out")"
read -r wall rss <"$tmp/measured"
echo "$name: $n files: wall $wall s, peak RSS $((rss / 1024)) MiB"
