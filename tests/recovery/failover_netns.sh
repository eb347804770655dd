#!/usr/bin/env bash
# The rendezvous outlives its host: three test hosts in network namespaces
# joined by a bridge (tests/lib/netns.sh, netns_make_star), one ddprun each
# with --nnodes 2:3, one train worker each with a node-local --ckpt-dir;
# node 0's ddprun hosts the rendezvous server in-process (its endpoint is
# node 0's address; a fixed port, free in a namespace this test made), the
# others hold standby servers.
#
#   kill       node 0's ddprun and its worker are SIGKILLed mid-run: nodes 1
#              and 2 find node 1's standby, which takes the job over (term
#              2); node 0's place is lost (no restart spent: the budget
#              used stays what it was), the survivors train again from the
#              newest checkpoint they hold, on world 2, and end 0 with the
#              steps asked for. The seconds from the kill to rank 0's first
#              step of the new generation are printed (goal: under 5 s).
#   partition  node 0's link is cut mid-run, then restored: nodes 1 and 2
#              move on as above; node 0's server, left with a minority,
#              orders no restart (one restart order for the failure, the new
#              server's), and node 0's ddprun stops its worker and exits 3
#              saying why.
#   two        two nodes (--nnodes 1:2), node 0 killed as in kill: a move
#              needs a majority without the server's node, so node 1 says
#              once that the rendezvous cannot move, waits for its server
#              as before (join_timeout 5 s here) and exits 3.
#
# Usage: failover_netns.sh MODE DDPRUN TRAIN
# Needs root and iproute2 with bridges; otherwise "SKIP: <reason>", exit 77.
# Every process and namespace is removed on every exit path.
set -u

mode=${1:?usage: failover_netns.sh MODE DDPRUN TRAIN}
ddprun=${2:?}
train=${3:?}

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $mode: $*" >&2
  for i in 0 1 2; do
    [ -f "$tmp/err.$i" ] || continue
    echo "--- node $i stderr (last 40 lines)" >&2
    grep -v "test hook" "$tmp/err.$i" | tail -n 40 >&2
  done
  exit 1
}

command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"
# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
netns_init "fo$mode"
n_nodes=3 nnodes=2:3
[ "$mode" = two ] && n_nodes=2 nnodes=1:2
netns_make_star "$n_nodes"

# The job's secret: the server that takes the job over requires it too.
export DDPRUN_SECRET="failover-$mode-$$-secret"
port=29400  # in namespaces of this test's own: nothing else listens there
mport=29500 # the server's /metrics, the same
id=failover-$mode-$$
steps=600
train_args=(--layers 2 --width 128 --input-dim 32 --classes 8 --samples 8192
  --eval-samples 256 --batch 16 --steps "$steps" --log-every 10 --seed 11
  --ckpt-every 10)

# node I: ddprun in namespace I, in the background (pid in node_pid[I]).
declare -A node_pid
node() {
  local i=$1
  mkdir -p "$tmp/ck.$i" "$tmp/log.$i"
  # One file for stdout and stderr, in the order written: the workers'
  # lines and the agent's (err.I names the same file).
  ln -sf "out.$i" "$tmp/err.$i"
  # Each checkpoint is held 150 ms before its rename and the next one waits
  # for it: about 10 steps per 150 ms, so that the job is mid-run for
  # seconds.
  DDPRUN_CKPT_TEST_DELAY_MS=150 TMPDIR=$tmp timeout -k 2 90 \
    ip netns exec "${star_ns[i]}" "$ddprun" --nnodes "$nnodes" \
    --nproc-per-node 1 --rdzv-endpoint "${star_addr[0]}:$port" \
    --rdzv-id "$id" \
    --rdzv-conf "join_timeout=$join_s,heartbeat_timeout=2,last_call_timeout=1,metrics_port=$mport" \
    --max-restarts 3 --log-dir "$tmp/log.$i" --ckpt-dir "$tmp/ck.$i" \
    --stop-grace 2 "$train" "${train_args[@]}" >"$tmp/out.$i" 2>&1 &
  node_pid[$i]=$!
  pids="$pids $!"
}

join_s=40
[ "$mode" = two ] && join_s=5
node 0
# The server listens once node 0's ddprun has printed its first round line
# or its standby summary; the others retry their connection until then.
for ((i = 1; i < n_nodes; i++)); do
  node "$i"
done

# wait_for FILE PATTERN SECS: until FILE has a line matching PATTERN.
wait_for() {
  local end=$((SECONDS + $3))
  while ! grep -qE "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.05
  done
}
cat_out() { cat "$tmp/out.0" "$tmp/out.1" "$tmp/out.2" 2>/dev/null; }
# (stdout and stderr of each node are one file: see node)

# Mid-run: rank 0 (on node 0, which joined first... or wherever it is) has
# logged step 100.
end=$((SECONDS + 40))
until cat_out | grep -q '^\[rank0\]:step 100/'; do
  [ $SECONDS -lt $end ] || fail "the job did not reach step 100 within 40 s"
  sleep 0.05
done
# Which node holds rank 0 (and so writes the checkpoints)?
r0=
for ((i = 0; i < n_nodes; i++)); do
  grep -q '^\[rank0\]:step 100/' "$tmp/out.$i" && r0=$i
done
echo "$mode: rank 0 is on node $r0 at step 100"

# Lines of output so far: after them, a rank 0 that starts (from a
# checkpoint or not) and then logs a step is the new generation's.
declare -A lines_at_cut
for ((i = 1; i < n_nodes; i++)); do
  lines_at_cut[$i]=$(wc -l <"$tmp/out.$i")
done
t_cut=$EPOCHREALTIME
case $mode in
kill | two)
  # The ddprun and its worker, at once, as a host that dies takes them.
  for p in $(ip netns pids "${star_ns[0]}"); do
    kill -KILL "$p" 2>/dev/null
  done
  ;;
partition)
  ip -n "$ns_sw" link set p0 down || fail "cannot cut node 0's link"
  ;;
*) fail "unknown mode '$mode'" ;;
esac

if [ "$mode" = two ]; then
  rc1=0
  wait "${node_pid[1]}" || rc1=$?
  [ "$rc1" = 3 ] || fail "node 1 exited $rc1, not 3"
  n=$(grep -c "the rendezvous cannot move" "$tmp/err.1")
  [ "$n" = 1 ] || fail "node 1 said $n times that the rendezvous cannot move"
  grep -q "a job of 2 nodes has no majority without its server's node" \
    "$tmp/err.1" || fail "node 1 does not say why the rendezvous cannot move"
  grep -q "serves the job now" "$tmp/err.1" && fail "node 1 took over"
  echo "two: ok (node 1 said once that the rendezvous cannot move, exit 3)"
  exit 0
fi

# The survivors train again: a step line of generation 2 or later. The new
# generation's rank 0 is on node 1 or 2; its first step line after the cut.
gen2_step() {
  local i
  for i in 1 2; do
    tail -n +"$((lines_at_cut[$i] + 1))" "$tmp/out.$i" |
      awk '/^\[rank0\]:train: rank 0: .*(resuming at|starting at) step/ { s = 1 }
           s && /^\[rank0\]:step [0-9]+\// { print; exit }'
  done | head -n 1
}
end=$((SECONDS + 30))
until [ -n "$(gen2_step)" ]; do
  [ $SECONDS -lt $end ] || fail "the survivors did not train again within 30 s"
  sleep 0.02
done
t_again=$EPOCHREALTIME
again=$(awk -v a="$t_cut" -v b="$t_again" 'BEGIN { printf "%.2f", b - a }')
echo "$mode: the survivors trained again $again s after the $mode" \
  "($(gen2_step))"

# `ddprun status` finds the job at the endpoint's port on the node that
# took the rendezvous over (its standby holds that port, free there); the
# other survivor's standby says it is one; the lost endpoint gets a hint.
took=
for i in 1 2; do
  grep -q "serves the job now (term 2" "$tmp/err.$i" && took=$i
done
[ -n "$took" ] || fail "no node says it serves the job as term 2"
other=$((3 - took))
status() { # status NODE-TO-ASK-FROM ENDPOINT-NODE
  timeout 20 ip netns exec "${star_ns[$1]}" "$ddprun" status \
    --rdzv-endpoint "${star_addr[$2]}:$port" --rdzv-id "$id" --timeout 3
}
status "$took" "$took" >"$tmp/status.took" 2>&1 ||
  fail "ddprun status at the new server failed: $(cat "$tmp/status.took")"
grep -qiE "running|forming" "$tmp/status.took" ||
  fail "ddprun status at the new server: $(cat "$tmp/status.took")"
(unset DDPRUN_SECRET; status "$took" "$took") >"$tmp/status.nosecret" 2>&1 &&
  fail "the new server answered a client without the job's secret"
grep -q "requires the job's shared secret" "$tmp/status.nosecret" ||
  fail "without the secret: $(cat "$tmp/status.nosecret")"
status "$other" "$other" >"$tmp/status.other" 2>&1 &&
  fail "a standby answered ddprun status as the job's server"
grep -q "standby rendezvous server" "$tmp/status.other" ||
  fail "the standby's refusal does not say so: $(cat "$tmp/status.other")"
if [ "$mode" = kill ]; then
  status "$took" 0 >"$tmp/status.lost" 2>&1 &&
    fail "the lost endpoint answered ddprun status"
  grep -q "the rendezvous may have moved" "$tmp/status.lost" ||
    fail "no hint where the rendezvous went: $(cat "$tmp/status.lost")"
fi
# So does /metrics, served by the server that took the job over.
timeout 20 ip netns exec "${star_ns[took]}" python3 -c '
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
  "http://${star_addr[took]}:$mport/metrics" >"$tmp/metrics" 2>&1 ||
  fail "no /metrics from the new server: $(tail -n 3 "$tmp/metrics")"
grep -qE '^ddprun_rdzv_generation [2-9]' "$tmp/metrics" ||
  fail "the new server's /metrics: $(grep generation "$tmp/metrics")"
echo "$mode: ddprun status and /metrics follow the job to node $took's" \
  "${star_addr[took]}:$port and :$mport"

if [ "$mode" = partition ]; then
  # Node 0 stops its worker and exits; then its link comes back.
  rc0=0
  wait "${node_pid[0]}" || rc0=$?
  ip -n "$ns_sw" link set p0 up || fail "cannot restore node 0's link"
  [ "$rc0" = 3 ] || fail "the cut-off ddprun exited $rc0, not 3"
  grep -qE "majority|steps down|needs at least 2" "$tmp/err.0" ||
    fail "the cut-off ddprun does not say why it stopped"
  # Its server ordered no restart after the cut.
  n_old=$(grep '"source":"server"' "$tmp/log.0/$id/events.jsonl" |
    grep -c '"event":"restart"')
  [ "${n_old:-0}" = 0 ] ||
    fail "the cut-off server ordered $n_old restarts"
fi

for i in 1 2; do
  rc=0
  wait "${node_pid[$i]}" || rc=$?
  [ "$rc" = 0 ] || fail "node $i's ddprun exited $rc"
done
if [ "$mode" = kill ]; then
  rc0=0
  wait "${node_pid[0]}" || rc0=$?
  [ "$rc0" = 137 ] || [ "$rc0" = 124 ] || true # killed: its code is SIGKILL's
fi

# The job ended with the steps asked for, on world 2, in a later
# generation, on the server of term 2 that node 1 or 2 took over with.
cat_out | grep -q "^\[rank0\]:done: $steps steps" ||
  fail "rank 0 did not end with $steps steps"
cat_out | grep -q "^\[rank0\]:final loss=.* world=2 " ||
  fail "the job did not end on world 2"
grep -q "the rendezvous moved from ${star_addr[0]} to " "$tmp/err.1" "$tmp/err.2" ||
  fail "no node says the rendezvous moved from ${star_addr[0]}"
for i in 1 2; do # the summary of each survivor says where it moved
  grep -q "the rendezvous moved from ${star_addr[0]}:$port to .* (${star_addr[0]}:$port lost) during the job" \
    "$tmp/err.$i" || fail "node $i's summary does not say the rendezvous moved"
done
# The budget: not reset, not spent by the loss of a node.
ev=$tmp/log.$took/$id/events.jsonl
grep -q '"event":"moved".*"restarts_used":0' "$ev" ||
  fail "the takeover does not carry the budget used (0): $(grep moved "$ev")"
grep '"source":"server"' "$ev" | grep '"event":"restart"' >"$tmp/restarts"
n_new=$(wc -l <"$tmp/restarts")
[ "$n_new" = 1 ] || fail "the new server ordered $n_new restarts, not 1"
grep -q '"restart_count":0' "$tmp/restarts" ||
  fail "the restart spent the budget: $(cat "$tmp/restarts")"
echo "$mode: ok (node $took took the rendezvous over; trained again after $again s)"
