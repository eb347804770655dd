#!/usr/bin/env bash
# `ddprun status` against a server it cannot trust (hostile_rdzv):
#
#   flood    the server pushes RESTART frames without pause instead of
#            answering: ddprun status --timeout 2 says one line and exits 3,
#            long before the server stops (a client that keeps reading
#            until then fails the bound, which only catches that hang),
#            and its peak RSS stays under 128 MiB (a client that keeps
#            every push takes about 1 GiB in those 2 s)
#   refuse   the server refuses the client with a message that carries
#            control bytes and a newline: one line, escaped, and exit 2
#   records  the server's answer carries control bytes in its reason, a
#            where line, a stack text and a host, and a last stack text
#            that ends the frame without a newline or NUL: the table and
#            the JSON show them escaped and whole, and nothing is read past
#            a text (under ASan such a read fails the run); with --env, a
#            node's summary with control bytes ends the frame instead
#
# Usage: status_hostile.sh MODE DDPRUN HOSTILE_RDZV
set -u
mode=${1:?usage: status_hostile.sh MODE DDPRUN HOSTILE_RDZV}
ddprun=${2:?} hostile=${3:?}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/scratch.sh
. "$here/../lib/scratch.sh"
scratch_init "status_hostile_$mode"
fail() {
  echo "FAIL: status_hostile $mode: $*" >&2
  exit 1
}
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no timeout"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

# How long the server misbehaves: past the hang bound below.
server_secs=20
# The server prints its port and closes stdout: one blocking read, no poll.
exec 3< <(exec "$hostile" "$mode" "$server_secs")
pids="$pids $!"
read -r port <&3 || fail "hostile_rdzv reported no port"
exec 3<&-
status=("$ddprun" status --rdzv-endpoint "127.0.0.1:$port" --rdzv-id job)

# no_controls FILE: no byte below 0x20 but the newline, and no DEL.
no_controls() {
  if tr -d '\n' <"$1" | LC_ALL=C grep -q '[[:cntrl:]]'; then
    fail "$1 holds raw control bytes: $(LC_ALL=C grep -n '[[:cntrl:]]' "$1" |
      head -3 | cat -v)"
  fi
}
# has FILE TEXT: FILE holds TEXT (fixed string).
has() {
  grep -qF -- "$2" "$1" ||
    fail "$(basename "$1") lacks '$2': $(head -c 2000 "$1" | cat -v)"
}

# "${peak[@]}" FILE CMD...: runs CMD and writes its peak RSS (KiB) into
# FILE; exits as CMD did.
peak=(python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc if rc >= 0 else 128 - rc)')

case $mode in
flood)
  # ASan keeps freed blocks in a quarantine (256 MiB by default) that
  # would count in the RSS: a small one keeps the figure the program's.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
  t0=$(date +%s%N)
  scratch_run 60 st "${peak[@]}" "$tmp/rss" "${status[@]}" --timeout 2
  took_ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$rc" -eq 3 ] || fail "exit $rc, expected 3: $(cat "$tmp/st.err")"
  # The timeout covers connecting and the answer: about 2 s here. 10 s
  # only catches a client the flood holds until the server stops.
  [ "$took_ms" -lt 10000 ] ||
    fail "took $took_ms ms with --timeout 2 against a flood"
  rss_kib=$(cat "$tmp/rss")
  [ "$rss_kib" -lt $((128 * 1024)) ] ||
    fail "peak RSS $rss_kib KiB against a flood: the pushes are kept"
  echo "flood: exit 3 after $took_ms ms, peak RSS $rss_kib KiB"
  [ "$(wc -l <"$tmp/st.err")" -eq 1 ] ||
    fail "expected one line, got: $(cat "$tmp/st.err")"
  has "$tmp/st.err" "no answer from the rendezvous server 127.0.0.1:$port"
  [ ! -s "$tmp/st.out" ] || fail "output on stdout: $(cat "$tmp/st.out")"
  ;;
refuse)
  scratch_run 30 st "${status[@]}"
  [ "$rc" -eq 2 ] || fail "exit $rc, expected 2: $(cat -v "$tmp/st.err")"
  no_controls "$tmp/st.err"
  [ "$(wc -l <"$tmp/st.err")" -eq 1 ] ||
    fail "expected one line, got: $(cat -v "$tmp/st.err")"
  has "$tmp/st.err" "refused this client: run id 'job' is not this job's\x0a\x1b[2J('other')"
  ;;
records)
  scratch_run 30 text "${status[@]}" --stacks
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$tmp/text.err")"
  no_controls "$tmp/text.out"
  has "$tmp/text.out" 'done, exit code 1, 1.5 s ago: rank 1 \x1b[2Jfailed\x0d\x1b[1A'
  has "$tmp/text.out" '  rank 0: all_reduce \x1b[5m at train.py:3'
  # The last text whole, to its last byte, and no more.
  has "$tmp/text.out" '  rank 1: no stack: pid 4243 is gone\x1b[2J; nothing to read'
  [ "$(tail -n 1 "$tmp/text.out")" = \
    'pid 4243 is gone\x1b[2J; nothing to read' ] ||
    fail "the last stack text is not the last line: $(tail -n 2 "$tmp/text.out" | cat -v)"
  has "$tmp/text.out" '    all_reduce (torch/distributed.py:'
  has "$tmp/text.out" ')\x1b]0;owned\x07\x0d'
  has "$tmp/text.out" 'node?[31m-a'
  scratch_run 30 json "${status[@]}" --stacks --json
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$tmp/json.err")"
  no_controls "$tmp/json.out"
  has "$tmp/json.out" '"reason": "rank 1 \u001b[2Jfailed\u000d\u001b[1A"'
  has "$tmp/json.out" '"where": "no stack: pid 4243 is gone\u001b[2J; nothing to read", "text": "pid 4243 is gone\u001b[2J; nothing to read"}'
  has "$tmp/json.out" '"where": "all_reduce \u001b[5m at train.py:3"'
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' \
    "$tmp/json.out" || fail "the JSON does not parse"
  # The node's summary: its lines escaped, the last whole to its last byte.
  scratch_run 30 env "${status[@]}" --env
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$tmp/env.err")"
  no_controls "$tmp/env.out"
  has "$tmp/env.out" 'node 0 (node?[31m-a):'
  has "$tmp/env.out" '  env: GPUs: none'
  grep -qxF '  env: NCCL and torch variables: NCCL_DEBUG=\x1b[2JINFO\x0d' \
    "$tmp/env.out" ||
    fail "the summary's last line is not whole: $(cat -v "$tmp/env.out")"
  scratch_run 30 envj "${status[@]}" --env --json
  [ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$tmp/envj.err")"
  no_controls "$tmp/envj.out"
  has "$tmp/envj.out" '"env": ["env: GPUs: none", "env: NCCL and torch variables: NCCL_DEBUG=\u001b[2JINFO\u000d"]'
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' \
    "$tmp/envj.out" || fail "the JSON does not parse"
  ;;
*)
  fail "unknown mode"
  ;;
esac
echo "PASS: status_hostile $mode"
