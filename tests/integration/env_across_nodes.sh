#!/usr/bin/env bash
# The nodes' environments side by side, end to end on 127.0.0.1: a
# standalone ddprun-rdzv and two ddprun agents of one node each, one with
# NCCL_SOCKET_IFNAME=lo and the other with NCCL_SOCKET_IFNAME=^nosuch
# (both pass each agent's own check: lo is up, and ^nosuch excludes only
# an interface that does not exist). Their workers say where the job's
# server is (DDPRUN_RDZV_ENDPOINT, DDPRUN_RUN_ID) and run until told to
# stop:
#
#   - `ddprun status --env` against the running job prints both nodes'
#     summaries, "node N (HOST):" and the very lines each agent printed on
#     its console, indented; --json carries them per node; without --env
#     neither does;
#   - the server warns once that NCCL_SOCKET_IFNAME differs between the
#     nodes of round 1, naming both values, and records the event in the
#     job's events.jsonl; the job still runs, and ends with exit code 0.
#
# Usage: env_across_nodes.sh DDPRUN-RDZV DDPRUN
set -u
rdzv=${1:?usage: env_across_nodes.sh DDPRUN-RDZV DDPRUN}
ddprun=${2:?usage: env_across_nodes.sh DDPRUN-RDZV DDPRUN}
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no timeout"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/env_across_nodes.XXXXXX") || exit 1
pids=   # the timeout wrappers of the server and the agents
drain=  # the cat that keeps the server's stderr drained
cleanup() {
  touch "$tmp/stop"
  local p
  for p in $pids; do
    kill -TERM "$p" 2>/dev/null
  done
  for p in $pids; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  [ -z "$drain" ] || kill "$drain" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: env_across_nodes: $*" >&2
  for f in srv.err a0.err a1.err status.txt; do
    [ -f "$tmp/$f" ] && { echo "--- $f" >&2; tail -n 30 "$tmp/$f" >&2; }
  done
  exit 1
}
host=$(hostname)
id=envx_$$

# The server, its stderr through a FIFO until it says where it listens.
mkfifo "$tmp/srv.fifo" || fail "mkfifo failed"
timeout -k 2 60 "$rdzv" --host 127.0.0.1 --port 0 --nnodes 2 --rdzv-id "$id" \
  --log-dir "$tmp/logs" 2>"$tmp/srv.fifo" &
srv=$!
pids="$pids $srv"
exec {fd}<"$tmp/srv.fifo"
port=
while IFS= read -r -t 20 line <&"$fd"; do
  echo "$line" >>"$tmp/srv.err"
  case $line in
  *" listening on "*)
    port=${line##* listening on }
    port=${port%% *}
    port=${port##*:}
    break
    ;;
  esac
done
[ -n "$port" ] || fail "ddprun-rdzv did not say where it listens"
cat <&"$fd" >>"$tmp/srv.err" &
drain=$!
exec {fd}<&-

# Each worker writes where the job's server is, then waits for stop (60 s
# at most: a bound on a hang, not a time the test relies on).
worker='echo "$DDPRUN_RDZV_ENDPOINT $DDPRUN_RUN_ID" >"$0/ep.$GROUP_RANK.tmp" &&
  mv "$0/ep.$GROUP_RANK.tmp" "$0/ep.$GROUP_RANK"
i=0
while [ ! -e "$0/stop" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done'
ifnames=(lo '^nosuch')
for i in 0 1; do
  NCCL_SOCKET_IFNAME=${ifnames[$i]} timeout -k 2 60 "$ddprun" --nnodes 2 \
    --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
    --rdzv-conf is_host=0 /bin/sh -c "$worker" "$tmp" \
    >"$tmp/a$i.out" 2>"$tmp/a$i.err" &
  apid[i]=$!
  pids="$pids ${apid[i]}"
done

# wait_file FILE: FILE exists, within 30 s, while the agents run.
wait_file() {
  for _ in $(seq 300); do
    [ -s "$1" ] && return 0
    kill -0 "${apid[0]}" 2>/dev/null && kill -0 "${apid[1]}" 2>/dev/null ||
      return 1
    sleep 0.1
  done
  return 1
}
wait_file "$tmp/ep.0" || fail "node 0's worker did not start"
wait_file "$tmp/ep.1" || fail "node 1's worker did not start"
read -r ep run <"$tmp/ep.0"
[ "$run" = "$id" ] || fail "the worker's DDPRUN_RUN_ID is '$run', not '$id'"
status() { timeout 30 "$ddprun" status --rdzv-endpoint "$ep" --rdzv-id "$run" "$@"; }

# The text: each node's header, then its summary's lines indented.
status --env >"$tmp/status.txt" || fail "ddprun status --env failed"
cat "$tmp/status.txt"
for n in 0 1; do
  grep -qx "node $n ($host):" "$tmp/status.txt" || fail "no header of node $n"
done
[ "$(grep -c '^  env: GPUs: ' "$tmp/status.txt")" -eq 2 ] ||
  fail "not two GPU lines"
[ "$(grep -c '^  binding: local rank 0: ' "$tmp/status.txt")" -eq 2 ] ||
  fail "not two binding lines"
grep -Eq '^  env: NCCL and torch variables: (.* )?NCCL_SOCKET_IFNAME=lo( |$)' \
  "$tmp/status.txt" || fail "node with NCCL_SOCKET_IFNAME=lo not shown"
grep -Eq '^  env: NCCL and torch variables: (.* )?NCCL_SOCKET_IFNAME=\^nosuch( |$)' \
  "$tmp/status.txt" || fail "node with NCCL_SOCKET_IFNAME=^nosuch not shown"
grep -q "not known to this server" "$tmp/status.txt" &&
  fail "a node's summary not known to the server that it joined"
status >"$tmp/plain.txt" || fail "ddprun status failed"
grep -q "env: GPUs" "$tmp/plain.txt" && fail "summaries without --env"

# The JSON: each node's lines are those its agent printed, in order.
status --env --json >"$tmp/status.json" || fail "ddprun status --env --json failed"
python3 - "$tmp" <<'EOF' || fail "the JSON's summaries are not the agents': $(cat "$tmp/status.json")"
import json, re, sys
d = sys.argv[1]
j = json.load(open(d + "/status.json"))
said = []
for i in (0, 1):
    with open("%s/a%d.err" % (d, i)) as f:
        said.append([l[len("ddprun: "):].rstrip("\n") for l in f
                     if re.match(r"ddprun: (env|binding): ", l)])
got = [n["env"] for n in j["nodes"]]
assert sorted(n["node_rank"] for n in j["nodes"]) == [0, 1], j["nodes"]
assert all(said) and sorted(got) == sorted(said), (got, said)
EOF
status --json >"$tmp/plain.json" || fail "ddprun status --json failed"
grep -q '"env"' "$tmp/plain.json" && fail "the JSON has summaries without --env"

# The job ends well; the server said once that the values differ.
touch "$tmp/stop"
for i in 0 1; do
  rc=0
  wait "${apid[i]}" || rc=$?
  [ "$rc" -eq 0 ] || fail "node agent $i exited $rc"
done
rc=0
wait "$srv" || rc=$?
pids=
[ "$rc" -eq 0 ] || fail "ddprun-rdzv exited $rc"
wait "$drain"
drain=
warn="WARN  NCCL_SOCKET_IFNAME differs between the nodes of round 1:"
tail="; NCCL on each node binds that interface, and nodes that cannot reach each other's hang in their first collective: set the same on every node, or unset it"
[ "$(grep -cF "$warn" "$tmp/srv.err")" -eq 1 ] || fail "not one warning"
grep -qF "$warn 'lo' on $host, '^nosuch' on $host$tail" "$tmp/srv.err" ||
  grep -qF "$warn '^nosuch' on $host, 'lo' on $host$tail" "$tmp/srv.err" ||
  fail "the warning does not name both values"
grep -F "$warn" "$tmp/srv.err"
ev=$(grep -F '"event":"socket_ifname_differs"' "$tmp/logs/$id/events.jsonl") ||
  fail "no socket_ifname_differs event in events.jsonl"
case $ev in
*'"gen":1,"variable":"NCCL_SOCKET_IFNAME","values":"'*"'lo' on $host"*) ;;
*) fail "the event does not name the values: $ev" ;;
esac
echo "PASS: env_across_nodes: ddprun status --env shows both nodes' summaries; the server warns that NCCL_SOCKET_IFNAME differs"
