#!/usr/bin/env bash
# `ddprun diagnose` on inputs made to hurt it; each is refused at once in
# one line on stderr that names the file, exit 2, nothing on stdout:
#   - a gzip bomb (64 MiB of zeros in 64 KB) over --max-trace-mib 4: its
#     peak memory stays near the limit, not the bomb's size (13 MiB here,
#     20 under ASan; the bound is 40);
#   - a FIFO without a writer, named as a trace: refused, never waited on
#     (the deadline only catches a hang); inside a directory it is left out
#     and the report's note names it;
#   - an event whose dur is 1e308: refused, the event named.
# Usage: hostile_inputs.sh DDPRUN
set -u
ddprun=${1:?usage: hostile_inputs.sh DDPRUN}
name=hostile_inputs
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "$name"

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

# refused TAG WANT...: the last run exited 2, wrote nothing on stdout and
# one line on stderr holding every WANT.
refused() {
  local tag=$1
  shift
  [ "$rc" = 2 ] || fail "$tag: exit $rc, not 2: $(head -3 "$tmp/$tag.err")"
  [ ! -s "$tmp/$tag.out" ] || fail "$tag: wrote on stdout: $(head -3 "$tmp/$tag.out")"
  [ "$(wc -l <"$tmp/$tag.err")" = 1 ] || fail "$tag: not one line: $(cat "$tmp/$tag.err")"
  local w
  for w in "$@"; do
    grep -qF -- "$w" "$tmp/$tag.err" || fail "$tag: no '$w' in: $(cat "$tmp/$tag.err")"
  done
}

# ---- a gzip bomb -------------------------------------------------------------
head -c $((64 << 20)) /dev/zero | gzip -9 >"$tmp/bomb.json.gz" ||
  fail "making the bomb failed"
[ "$(stat -c %s "$tmp/bomb.json.gz")" -lt $((1 << 20)) ] || fail "the bomb is not small"
# The peak resident memory of the command (KiB), from its parent.
cat >"$tmp/peak.py" <<'EOF'
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
EOF
scratch_run 60 bomb python3 "$tmp/peak.py" "$tmp/peak" "$ddprun" diagnose \
  --max-trace-mib 4 "$tmp/bomb.json.gz"
refused bomb "$tmp/bomb.json.gz: gzip: inflates to 4 MiB or more, the limit" \
  "--max-trace-mib"
peak=$(cat "$tmp/peak")
echo "$name: the bomb's peak RSS $((peak / 1024)) MiB (limit 4 MiB, bomb 64 MiB)"
if [ "$peak" -gt $((40 << 10)) ]; then
  fail "peak RSS $((peak / 1024)) MiB for a limit of 4 MiB"
fi
for v in 0 2049 x 1.5 ""; do
  scratch_run 10 opt "$ddprun" diagnose --max-trace-mib "$v" "$tmp/bomb.json.gz"
  refused opt "--max-trace-mib '$v': expected MiB, 1 to 2048"
done

# ---- a FIFO ------------------------------------------------------------------
mkdir "$tmp/ranks"
python3 "$here/fixtures/gen_ranks.py" "$tmp/ranks" 2 1 || fail "gen_ranks failed"
mkfifo "$tmp/ranks/pipe.json" || fail "mkfifo failed"
scratch_run 20 fifo "$ddprun" diagnose "$tmp/ranks/pipe.json"
[ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "a FIFO hangs ddprun diagnose"
refused fifo "$tmp/ranks/pipe.json: not a regular file"
scratch_run 20 fifodir "$ddprun" diagnose "$tmp/ranks"
[ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "a FIFO in a directory hangs ddprun diagnose"
[ "$rc" = 0 ] || fail "a FIFO in a directory: exit $rc: $(cat "$tmp/fifodir.err")"
grep -q "^ddprun diagnose: 2 ranks (train, cpu)" "$tmp/fifodir.out" ||
  fail "a FIFO in a directory: not 2 ranks: $(head -1 "$tmp/fifodir.out")"
[ "$(grep -c 'pipe.json' "$tmp/fifodir.out")" = 1 ] ||
  fail "the FIFO is not named once: $(grep -i note "$tmp/fifodir.out")"
grep -q "1 left out, not regular files: pipe.json" "$tmp/fifodir.out" ||
  fail "the FIFO left out is not said: $(grep -i note "$tmp/fifodir.out")"
rm "$tmp/ranks/pipe.json"

# ---- a duration of 1e308 -----------------------------------------------------
sed -i 's/"name":"step 0","ph":"X","pid":1,"tid":0,"ts":\([0-9]*\),"dur":[0-9]*/"name":"step 0","ph":"X","pid":1,"tid":0,"ts":\1,"dur":1e308/' \
  "$tmp/ranks/tr.rank1.json"
grep -q '"dur":1e308' "$tmp/ranks/tr.rank1.json" || fail "no dur of 1e308 in the trace"
scratch_run 20 dur "$ddprun" diagnose "$tmp/ranks"
refused dur "$tmp/ranks/tr.rank1.json: traceEvents[0] \"step 0\": dur 1e+308 us is out of range"
echo "PASS: $name"
