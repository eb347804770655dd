#!/usr/bin/env bash
# A rendezvous server at its open-files limit closes the connections it
# cannot take before it answers them. ddprun says so once, as such ("the
# server refused the connection ... too many open files on the server?"),
# keeps trying until join_timeout, and joins as soon as the server has
# descriptors again.
#
# Usage: fd_limit_agent.sh DDPRUN-RDZV DDPRUN
set -u
rdzv=${1:?usage: fd_limit_agent.sh DDPRUN-RDZV DDPRUN} ddprun=${2:?}
command -v prlimit >/dev/null 2>&1 || { echo "SKIP: no prlimit"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fd_limit_agent.XXXXXX") || exit 1
srv= pid= holder=
cleanup() {
  [ -n "$holder" ] && kill -KILL "$holder" 2>/dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  [ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: fd_limit_agent: $*" >&2
  for f in "$tmp"/*.err; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

timeout -k 2 60 "$rdzv" --host 127.0.0.1 --port 0 --nnodes 1 --rdzv-id fdlim \
  --handshake-timeout 60 --log-level info 2>"$tmp/srv.err" &
srv=$!
port=$(timeout 20 tail -n +1 -F "$tmp/srv.err" 2>/dev/null |
  grep -m 1 -o "listening on 127.0.0.1:[0-9]*" | sed 's/.*://')
[ -n "$port" ] || fail "the server did not report its port"
pid=$(cat "/proc/$srv/task/$srv/children" 2>/dev/null | awk '{print $1}')
[ -n "$pid" ] || fail "no ddprun-rdzv under timeout"
held=$(ls "/proc/$pid/fd" | wc -l)
# Room for four clients, taken by four connections that never say HELLO;
# every later connection is closed unanswered.
prlimit --pid "$pid" --nofile="$((held + 4)):$((held + 4))" || fail "prlimit failed"
# (held by a process of their own, so that nothing else inherits them)
(
  for fd in 3 4 5 6 7 8; do
    eval "exec $fd<>/dev/tcp/127.0.0.1/$port" || exit 1
  done
  echo connected
  exec sleep 60
) >"$tmp/hold.out" 2>&1 &
holder=$!
timeout 10 tail -n +1 -F "$tmp/hold.out" 2>/dev/null | grep -q -m 1 connected ||
  fail "the connections that hold the server's descriptors did not connect"

# node TAG JOIN_TIMEOUT: a one-node ddprun of /bin/true.
node() {
  timeout -k 2 30 "$ddprun" --nnodes 1 --nproc-per-node 1 \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id fdlim \
    --rdzv-conf "is_host=0,join_timeout=$2" /bin/true >/dev/null 2>"$tmp/$1.err"
}

# join_timeout 3 s: about thirty attempts, refused, said once.
rc=0
node a1 3 || rc=$?
[ "$rc" -eq 3 ] || fail "ddprun against a server at its limit exited $rc, not 3"
n=$(grep -c "refused the connection (closed it before answering HELLO" "$tmp/a1.err")
[ "$n" -eq 1 ] || fail "the refusal was said $n times, not once"
grep -q "too many open files on the server?" "$tmp/a1.err" ||
  fail "the refusal does not suggest the server's open-files limit"
more=$(sed -n 's/^ddprun: gave up joining .* s; \([0-9]*\) more attempts ended as the one said above$/\1/p' "$tmp/a1.err")
[ -n "$more" ] && [ "$more" -ge 1 ] || fail "the repeated attempts were not counted"
echo "ok: one line for the refusal and $more more refused attempts"

# The connections that held the server's descriptors go while ddprun
# retries: it joins and runs.
node a2 20 &
a2=$!
timeout 10 tail -n +1 -F "$tmp/a2.err" 2>/dev/null |
  grep -q -m 1 "refused the connection" || fail "the second ddprun was not refused"
kill -KILL "$holder"
wait "$holder" 2>/dev/null
rc=0
wait "$a2" || rc=$?
[ "$rc" -eq 0 ] || fail "ddprun exited $rc once the server had descriptors again"
echo "PASS: fd_limit_agent: refused once, then joined and ran"
