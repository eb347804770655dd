#!/usr/bin/env bash
# What a job says about itself, end to end, on 127.0.0.1: a standalone
# ddprun-rdzv and one ddprun per node.
#
#   never_starts         --nnodes 3, two nodes started: both say "2 of 3
#                        nodes joined (...); 1 more needed" at the server's
#                        next heartbeat after the second's start (bounded
#                        by 5 s), and again 10 s later; /metrics and
#                        ddprun status show
#                        the forming round; the join timeout names it.
#   never_starts_static  the same with --node-rank 0 and 1: "missing node
#                        rank 2", in /metrics too.
#   status               a 2 x 2 job with a secret, training: ddprun status
#                        shows 4 ranks whose steps advance between two calls
#                        a second apart and names the slowest (a SIGSTOPped
#                        rank: stopped, and the slowest); --stacks gives
#                        every rank's stack, grouped by where the ranks
#                        are; without the secret, or with a wrong
#                        one, one line and exit 2; against nothing
#                        listening, one line and exit 3 within --timeout.
#
# Usage: rdzv_status.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL
set -u
mode=${1:?usage: rdzv_status.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL}
rdzv=${2:?} ddprun=${3:?} train=${4:?} rtool=${5:?}
name=$mode
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=job.sh
. "$here/job.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

id=st_${mode}_$$
host=$(hostname)
status() { "$ddprun" status --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" "$@"; }
# scrape TAG: /metrics into $tmp/TAG.prom (checked by mclient.py).
scrape() {
  python3 "$here/../metrics/mclient.py" metrics "$mport" >"$tmp/$1.prom" ||
    fail "scrape $1 failed"
}
# expect_series TAG SERIES VALUE: SERIES (exactly as exposed) is VALUE.
expect_series() {
  local v
  v=$(awk -v s="$2" '$1 == s { print $2 }' "$tmp/$1.prom")
  [ -n "$v" ] || fail "scrape $1 has no $2"
  awk -v a="$v" -v b="$3" 'BEGIN { exit !(a + 0 == b + 0) }' ||
    fail "scrape $1: $2 is $v, expected $3"
}
# le A B: A <= B, as numbers.
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

case $mode in
never_starts | never_starts_static)
  start_server srv 40 --port 0 --nnodes 3 --rdzv-id "$id" \
    --heartbeat-timeout 2 --metrics-port 0 --metrics-port-file "$tmp/mport"
  s=$srv_pid
  mport=$(cat "$tmp/mport") || fail "no metrics port file"
  if [ "$mode" = never_starts ]; then
    # Long enough to hear the unchanged status again, 10 s on.
    jt=15
    ranks=("" "")
    in="($host, $host)"
    need="1 more needed"
    # Once node 0 has given up, node 1 waits alone.
    alone="1 of 3 nodes joined ($host); 2 more needed"
  else
    jt=5
    ranks=("--node-rank 0" "--node-rank 1")
    in="($host as node 0, $host as node 1)"
    need="missing node rank 2"
    alone="1 of 3 nodes joined ($host as node 1); missing node ranks 0, 2"
  fi
  for i in 0 1; do
    # shellcheck disable=SC2086
    start_agent "n$i" 40 --nnodes 3 --nproc-per-node 1 ${ranks[$i]} \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
      --rdzv-conf "is_host=0,join_timeout=$jt,heartbeat_timeout=2" \
      /bin/sh -c "exit 0" "$tmp/marker"
    apid[n$i]=$agent_pid
    # The first waits alone before the second starts: it is told so.
    [ "$i" = 0 ] || break
    wait_for 10 "$tmp/n0.err" ".*1 of 3 nodes joined ($host" ||
      { show n0; fail "node 0 was not told that it waits alone"; }
    t1=$(date +%s.%N)
  done
  want="2 of 3 nodes joined $in; $need"
  for n in n0 n1; do
    wait_for 10 "$tmp/$n.err" ".*waiting .* for the rendezvous at 127.0.0.1:$port (round 1): $want\$" ||
      { show $n; fail "$n did not say '$want'"; }
    took=$(elapsed "$t1")
    echo "$n: '$want' $took s after the second node started"
    # Told at the server's next heartbeat (every 2/3 s), not at the next
    # repeat of an unchanged status (10 s on): 5 s leaves room for a
    # loaded host.
    le "$took" 5 || fail "$n took $took s to say who is missing"
  done

  scrape forming
  expect_series forming ddprun_rdzv_round_nodes_joined 2
  expect_series forming ddprun_rdzv_round_nodes_needed 1
  [ "$(grep -c '^ddprun_rdzv_round_node_info{' "$tmp/forming.prom")" = 2 ] ||
    fail "/metrics does not list the 2 nodes that joined"
  if [ "$mode" = never_starts ]; then
    [ "$(grep -c "^ddprun_rdzv_round_node_info{node=\"any\",host=\"$host\"" "$tmp/forming.prom")" = 2 ] ||
      fail "/metrics does not list both nodes as node 'any' on $host"
    grep -q '^ddprun_rdzv_round_rank_missing{' "$tmp/forming.prom" &&
      fail "/metrics lists missing ranks of dynamic ranks"
  else
    expect_series forming 'ddprun_rdzv_round_rank_missing{node="2"}' 1
    [ "$(grep -c '^ddprun_rdzv_round_rank_missing{' "$tmp/forming.prom")" = 1 ] ||
      fail "/metrics lists other missing ranks than 2"
    grep -q "^ddprun_rdzv_round_node_info{node=\"1\",host=\"$host\"" "$tmp/forming.prom" ||
      fail "/metrics does not list node 1"
  fi
  status >"$tmp/status" 2>&1 || { cat "$tmp/status"; fail "ddprun status failed"; }
  grep -q "forming generation 1" "$tmp/status" &&
    grep -q "nodes: 2 of --nnodes 3 joined, 2 workers; 1 more needed" "$tmp/status" ||
    { cat "$tmp/status"; fail "ddprun status does not show the forming round"; }

  if [ "$mode" = never_starts ]; then
    # Nothing changes: said again about 10 s later, before the timeout.
    wait_for 14 "$tmp/n0.err" ".*waiting 1[0-9]\.[0-9] s for the rendezvous.*: $want\$" ||
      { show n0; fail "node 0 did not say it again while it waited"; }
  fi
  # Node 0 gives up first; node 1 says what it heard last: node 0 still
  # in, or, once told, gone.
  for n in n0 n1; do
    finish "${apid[$n]}"
    expect_rc $n "$rc" 3
    grep -q -F -e "s: $want; are the other nodes started" \
      -e "s: $alone; are the other nodes started" "$tmp/$n.err" ||
      { show $n; fail "$n's join timeout does not say who is missing"; }
  done
  grep -q -F "did not complete within join_timeout=$jt s: $want; are the other nodes started" \
    "$tmp/n0.err" || { show n0; fail "n0's join timeout does not say who is missing"; }
  kill -TERM "$(child_of "$s")" 2>/dev/null
  finish "$s"
  ;;

status)
  # Nothing listening: one line, exit 3, within the timeout.
  t0=$(date +%s.%N)
  rc=0
  "$ddprun" status --rdzv-endpoint 127.0.0.1:1 --rdzv-id "$id" --timeout 1 \
    >"$tmp/none.out" 2>"$tmp/none.err" || rc=$?
  took=$(elapsed "$t0")
  echo "nothing listening: exit $rc after $took s: $(cat "$tmp/none.err")"
  [ "$rc" = 3 ] || fail "against nothing listening: exit $rc, not 3"
  [ "$(wc -l <"$tmp/none.err")" = 1 ] && [ ! -s "$tmp/none.out" ] ||
    fail "against nothing listening: not one line on stderr"
  le "$took" 11 || fail "against nothing listening: $took s, --timeout 1"
  "$ddprun" --help | grep -q "ddprun status --rdzv-endpoint HOST:PORT" ||
    fail "ddprun --help does not list ddprun status"

  printf 'status-secret-%s\n' "$$" >"$tmp/secret"
  printf 'not-the-secret\n' >"$tmp/wrong"
  server srv 2 0 --secret-file "$tmp/secret"
  s=$srv_pid
  agent_opts=(--secret-file "$tmp/secret")
  long=(--layers 2 --width 128 --input-dim 32 --classes 8 --samples 8192
    --eval-samples 256 --batch 16 --steps 100000000 --log-every 100000
    --seed 11)
  for n in n0 n1; do
    agent $n 2 0 "$train" "${long[@]}"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  sf=(--secret-file "$tmp/secret")
  # The agents report at their heartbeat: until all 4 ranks have steps.
  for _ in $(seq 50); do
    status "${sf[@]}" --json >"$tmp/s0.json" 2>"$tmp/s0.err" &&
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["ranks"]
sys.exit(not (len(r) == 4 and all(x["step"] for x in r)))' "$tmp/s0.json" &&
      break
    sleep 0.2
  done
  status "${sf[@]}" --json >"$tmp/s1.json" || fail "ddprun status --json failed"
  sleep 1
  status "${sf[@]}" --json >"$tmp/s2.json" || fail "ddprun status --json failed"
  python3 - "$tmp/s1.json" "$tmp/s2.json" <<'EOF' || fail "the steps do not advance"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for j in (a, b):
    assert j["state"] == "running" and j["generation"] == 1, j
    assert [n["node_rank"] for n in j["nodes"]] == [0, 1], j["nodes"]
    assert all(n["heartbeat_age_s"] < 2 for n in j["nodes"]), j["nodes"]
    assert [r["rank"] for r in j["ranks"]] == [0, 1, 2, 3], j["ranks"]
    assert all(r["state"] == "running" and r["pid"] > 0 for r in j["ranks"])
    assert j["slowest"] is not None
for x, y in zip(a["ranks"], b["ranks"]):
    assert y["step"] > x["step"], (x, y)
    assert y["steps_per_s"] is not None and y["steps_per_s"] > 0, y
    print("rank %d: step %d, then %d a second later (%.0f steps/s)"
          % (x["rank"], x["step"], y["step"], y["steps_per_s"] or 0))
EOF
  status "${sf[@]}" >"$tmp/s3.txt" || fail "ddprun status failed"
  cat "$tmp/s3.txt"
  grep -q "^job '$id' at 127.0.0.1:$port: running generation 1 for" "$tmp/s3.txt" &&
    [ "$(grep -c '^  [0-3] .* running ' "$tmp/s3.txt")" = 4 ] &&
    grep -q "^slowest: rank [0-3] (node [01] on $host, pid [0-9]*) at step" "$tmp/s3.txt" ||
    fail "ddprun status does not show 4 running ranks and the slowest"

  # --stacks: every rank's stack, taken by its agent, grouped by where the
  # ranks are, then each in full.
  status "${sf[@]}" --stacks >"$tmp/stacks.txt" || fail "ddprun status --stacks failed"
  [ "$(grep -c '^--- rank [0-3] (node [01] on .*, pid [1-9][0-9]*)$' "$tmp/stacks.txt")" = 4 ] ||
    { cat "$tmp/stacks.txt"; fail "--stacks does not give one stack per rank"; }
  python3 - "$tmp/stacks.txt" <<'EOF' ||
import re, sys
text = open(sys.argv[1]).read()
head = text.split("\n--- rank")[0].split("\n")
assert "where the ranks are:" in head, head
ranks = []
for line in head[head.index("where the ranks are:") + 1:]:
    m = re.match(r"  ranks? ([0-9, -]+): (.+)$", line)
    assert m, line
    assert not m.group(2).startswith(("no stack", "unknown")), line
    for part in m.group(1).split(", "):
        a, _, b = part.partition("-")
        ranks += range(int(a), int(b or a) + 1)
assert sorted(ranks) == [0, 1, 2, 3], ranks
EOF
    { cat "$tmp/stacks.txt"; fail "--stacks does not group the 4 ranks by where they are"; }
  status "${sf[@]}" --stacks --json >"$tmp/stacks.json" || fail "--stacks --json failed"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stacks"]
assert sorted(x["rank"] for x in s) == [0, 1, 2, 3], s
assert all(x["ok"] and x["where"] and x["text"] for x in s), s' "$tmp/stacks.json" ||
    fail "--stacks --json does not give a stack per rank"
  echo "--stacks:"
  sed -n '/^where the ranks are:/,/^---/p' "$tmp/stacks.txt" | sed '$d'
  grep -A1 -m1 '^--- rank 0' "$tmp/stacks.txt"

  # A stopped rank: "stopped", and the slowest.
  pid3=$(python3 -c 'import json,sys
print([r["pid"] for r in json.load(open(sys.argv[1]))["ranks"] if r["rank"] == 3][0])' "$tmp/s2.json")
  kill -STOP "$pid3"
  # Until its agent has reported it stopped (the ranks that wait for it
  # stop at its step, so "slowest" alone can hold by a tie before that).
  for _ in $(seq 50); do
    status "${sf[@]}" >"$tmp/s4.txt" && grep -q "^  3 .* $pid3 *stopped " "$tmp/s4.txt" &&
      grep -q "^slowest: rank 3 " "$tmp/s4.txt" && break
    sleep 0.2
  done
  kill -CONT "$pid3"
  grep -q "^  3 .* $pid3 *stopped " "$tmp/s4.txt" &&
    grep -q "^slowest: rank 3 (node 1 on $host, pid $pid3)" "$tmp/s4.txt" ||
    { cat "$tmp/s4.txt"; fail "a stopped rank is not shown stopped and slowest"; }

  # Without the secret, or with a wrong one: refused in one line, exit 2.
  for how in none wrong; do
    rc=0
    if [ $how = none ]; then
      (unset DDPRUN_SECRET; status >"$tmp/$how.out" 2>"$tmp/$how.err") || rc=$?
    else
      status --secret-file "$tmp/wrong" >"$tmp/$how.out" 2>"$tmp/$how.err" || rc=$?
    fi
    echo "secret $how: exit $rc: $(cat "$tmp/$how.err")"
    [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/$how.err")" = 1 ] && [ ! -s "$tmp/$how.out" ] ||
      fail "status with secret '$how' was not refused in one line with exit 2"
  done
  grep -q "requires the job's shared secret" "$tmp/none.err" ||
    fail "the refusal does not say a secret is needed"

  for n in n0 n1; do
    kill -TERM "$(child_of "${apid[$n]}")"
  done
  for n in n0 n1; do
    finish "${apid[$n]}"
    expect_rc $n "$rc" 143
  done
  finish "$s"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
expect_no_leftovers
echo "PASS: $name"
