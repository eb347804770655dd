#!/bin/bash
# The rendezvous server's metrics endpoint, end to end.
#   metrics.sh MODE RDZV DDPRUN RTOOL
# MODE:
#   job     a 2-node job on a standalone ddprun-rdzv: /metrics while it
#           forms, while it runs, after a worker is killed (generation 2,
#           one restart), and after it ended (/healthz 503); store
#           operations and refused handshakes counted exactly
#   http    bad, huge and slow HTTP requests; scrapes go on meanwhile
#   slots   every connection slot held by a slow client: a scrape still
#           succeeds at once
#   inproc  ddprun --standalone --rdzv-conf metrics_port=0
#   errors  bad metrics flags and a taken metrics port: exit 2, one line
#   clock   a 2-node job whose node 1 has its clock stamps skewed by
#           -250 ms (DDPRUN_TEST_CLOCK_SKEW_MS): one warning naming it, its
#           offset in /metrics and in its workers' DDPRUN_CLOCK_OFFSET_US,
#           and node 0's near zero, in generations 1 and 2
name=$1
rdzv=$2
ddprun=$3
rtool=$4
train=/nonexistent # lib.sh wants one; these tests run worker.sh instead
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
test_secs=80
# shellcheck source=../recovery/lib.sh
. "$here/../recovery/lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

mc() { python3 "$here/mclient.py" "$@"; }

# scrape TAG: /metrics into $tmp/TAG.prom, checked by mclient.py.
scrape() {
  mc metrics "$mport" >"$tmp/$1.prom" || fail "scrape $1 failed"
}
# val TAG SERIES: the value of SERIES (name and labels, exactly as
# exposed) in the scrape TAG.
val() {
  local v
  v=$(awk -v s="$2" '$1 == s { print $2 }' "$tmp/$1.prom")
  [ -n "$v" ] || fail "scrape $1 has no $2"
  echo "$v"
}
# expect TAG SERIES VALUE: SERIES is VALUE (compared as numbers).
expect() {
  local v
  v=$(val "$1" "$2") || exit 1
  awk -v a="$v" -v b="$3" 'BEGIN { exit !(a + 0 == b + 0) }' ||
    fail "scrape $1: $2 is $v, expected $3"
}
# expect_cmp TAG SERIES OP VALUE: SERIES OP VALUE, OP one of < <= >= >.
expect_cmp() {
  local v
  v=$(val "$1" "$2") || exit 1
  awk -v a="$v" -v b="$4" -v op="$3" 'BEGIN {
    ok = op == "<" ? a < b : op == "<=" ? a <= b : op == ">=" ? a >= b : a > b
    exit !ok }' || fail "scrape $1: $2 is $v, expected $3 $4"
}
# health CODE: GET /healthz answers CODE; its body in $tmp/health.
health() {
  mc get "$mport" /healthz >"$tmp/health" || fail "GET /healthz failed"
  [ "$(head -n 1 "$tmp/health")" = "$1" ] ||
    fail "/healthz answered $(tr '\n' ' ' <"$tmp/health"), not $1"
}
# Every family docs/ddprun-rdzv.md documents, in each scrape.
families=(job_info start_time_seconds job_state job_exit_code generation
  rounds_completed_total restarts_total max_restarts worker_failures_total
  nodes_lost_total nodes_alive nodes_waiting nodes_min nodes_max world_size
  heartbeat_age_max_seconds heartbeat_timeout_seconds round_nodes_joined
  round_nodes_needed round_waiting_seconds store_keys
  store_operations_total store_stale_requests_total store_waiters
  connections connections_accepted_total handshakes_refused_total
  connections_dropped_total
  joins_refused_total http_responses_total uptime_seconds)
# The families of one series per node of the running round: their HELP and
# TYPE always, their series only while a round runs.
node_families=(node_clock_offset_seconds node_clock_uncertainty_seconds)
# The families of one series per rank of the running round whose figure is
# known: their HELP and TYPE always (their series: rank_health.sh).
rank_families=(rank_rss_bytes rank_rss_peak_bytes rank_cpu_ratio
  rank_gpu_memory_bytes rank_gpu_utilization_ratio)
# The families of one series per node or missing rank of a forming round:
# their HELP and TYPE always, their series only while a round forms.
round_families=(round_node_info round_rank_missing)
all_present() {
  local f
  for f in "${families[@]}"; do
    grep -q "^ddprun_rdzv_$f[{ ]" "$tmp/$1.prom" ||
      fail "scrape $1 lacks ddprun_rdzv_$f"
  done
  for f in "${node_families[@]}" "${round_families[@]}" "${rank_families[@]}"; do
    grep -qx "# TYPE ddprun_rdzv_$f gauge" "$tmp/$1.prom" ||
      fail "scrape $1 lacks the family ddprun_rdzv_$f"
  done
}
# no_round TAG NEEDED: the scrape TAG shows no node in a forming round,
# and NEEDED nodes needed (0 while a round runs).
no_round() {
  local f
  expect "$1" ddprun_rdzv_round_nodes_joined 0
  expect "$1" ddprun_rdzv_round_nodes_needed "$2"
  for f in "${round_families[@]}"; do
    ! grep -q "^ddprun_rdzv_$f{" "$tmp/$1.prom" ||
      fail "scrape $1 has series of ddprun_rdzv_$f with no round forming"
  done
}
# nodes_present TAG N: each per-node family has N series in the scrape TAG.
nodes_present() {
  local f n
  for f in "${node_families[@]}"; do
    n=$(grep -c "^ddprun_rdzv_$f{" "$tmp/$1.prom")
    [ "$n" = "$2" ] || fail "scrape $1 has $n series of ddprun_rdzv_$f, not $2"
  done
}
# near A B TOL: |A - B| <= TOL, as numbers.
near() {
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d
    exit !(d <= t) }'
}
# pid_of RANK RESTART: the worker's pid from its "up" line.
pid_of() {
  sed -n "s/^up rank=$1 restart=$2 pid=\([0-9]*\)$/\1/p" "$tmp/up" | tail -n 1
}
# node TAG ARGS...: a ddprun of job mjob with one worker.sh per rank.
node() {
  local tag=$1
  shift
  start_agent "$tag" 60 --nproc-per-node 1 --log-dir "$tmp/log.$tag" \
    --stop-grace 2 "$@" bash "$here/worker.sh" "$tmp/up"
}

case $name in
job)
  id=mjob
  start_server srv 70 --port 0 --nnodes 2 --rdzv-id $id --max-restarts 1 \
    --heartbeat-timeout 2 --last-call-timeout 1 --metrics-port 0 \
    --metrics-port-file "$tmp/mport" --linger 30 --log-dir "$tmp/log.srv"
  s=$srv_pid
  mport=$(cat "$tmp/mport") || fail "no metrics port file"
  [ "$mport" -gt 0 ] || fail "metrics port '$mport'"
  grep -q "serving metrics on http://127.0.0.1:$mport/metrics" "$tmp/srv.err" ||
    fail "ddprun-rdzv did not log its metrics port"

  scrape forming
  all_present forming
  expect forming 'ddprun_rdzv_job_state{state="forming"}' 1
  expect forming 'ddprun_rdzv_job_state{state="running"}' 0
  expect forming 'ddprun_rdzv_job_info{run_id="mjob"}' 1
  expect forming ddprun_rdzv_generation 1
  expect forming ddprun_rdzv_nodes_alive 0
  expect forming ddprun_rdzv_rounds_completed_total 0
  expect forming ddprun_rdzv_job_exit_code -1
  expect forming ddprun_rdzv_max_restarts 1
  expect forming ddprun_rdzv_nodes_min 2
  expect forming ddprun_rdzv_heartbeat_timeout_seconds 2
  no_round forming 2 # no node yet
  expect forming ddprun_rdzv_round_waiting_seconds 0
  health 200

  # Store requests and refusals whose counts the job cannot change: its
  # workers (worker.sh) never touch the store.
  mc store "$port" $id || fail "store requests failed"
  mc refuse "$port" $id || fail "refused handshakes misbehaved"

  : >"$tmp/up"
  node n0 --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id $id \
    --rdzv-conf is_host=0,heartbeat_timeout=2,last_call_timeout=1 \
    --max-restarts 1
  a0=$agent_pid
  node n1 --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id $id \
    --rdzv-conf is_host=0,heartbeat_timeout=2,last_call_timeout=1 \
    --max-restarts 1
  a1=$agent_pid
  wait_for 30 "$tmp/up" "^up rank=0 restart=0 " || fail "rank 0 did not start"
  wait_for 30 "$tmp/up" "^up rank=1 restart=0 " || fail "rank 1 did not start"

  scrape running
  all_present running
  nodes_present running 2
  no_round running 0
  expect running 'ddprun_rdzv_job_state{state="running"}' 1
  expect running ddprun_rdzv_generation 1
  expect running ddprun_rdzv_nodes_alive 2
  expect running ddprun_rdzv_world_size 2
  expect running ddprun_rdzv_rounds_completed_total 1
  expect running ddprun_rdzv_restarts_total 0
  expect running ddprun_rdzv_worker_failures_total 0
  expect_cmp running ddprun_rdzv_heartbeat_age_max_seconds '<' 2
  expect_cmp running ddprun_rdzv_connections '>=' 2
  expect_cmp running ddprun_rdzv_connections_accepted_total '>=' 6
  for op in set:3 get:2 multi_get:1 add:2 cas:1 delete:1 check:1 barrier:1; do
    expect running "ddprun_rdzv_store_operations_total{op=\"${op%%:*}\"}" \
      "${op##*:}"
  done
  expect running 'ddprun_rdzv_store_keys{scope="job"}' 3
  expect running ddprun_rdzv_store_waiters 0
  expect running ddprun_rdzv_store_stale_requests_total 1
  expect running 'ddprun_rdzv_handshakes_refused_total{reason="run_id"}' 1
  expect running 'ddprun_rdzv_handshakes_refused_total{reason="version"}' 1
  expect running 'ddprun_rdzv_handshakes_refused_total{reason="malformed"}' 1
  expect running 'ddprun_rdzv_handshakes_refused_total{reason="no_secret"}' 0
  expect running 'ddprun_rdzv_http_responses_total{code="200"}' 3
  expect running ddprun_rdzv_joins_refused_total 0
  health 200
  grep -q "running generation 1" "$tmp/health" || fail "/healthz: $(cat "$tmp/health")"

  # A third node for a job of two is refused, and counted.
  node n2 --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id $id \
    --rdzv-conf is_host=0,join_timeout=10
  finish "$agent_pid"
  [ "$rc" != 0 ] || fail "a third node was let into a job of two"
  scrape refused
  expect refused ddprun_rdzv_joins_refused_total 1
  expect refused ddprun_rdzv_nodes_alive 2
  expect refused ddprun_rdzv_generation 1

  # A forced restart: rank 1 killed, both nodes start generation 2.
  victim=$(pid_of 1 0)
  [ -n "$victim" ] || fail "no pid for rank 1"
  kill -KILL "$victim"
  wait_for 30 "$tmp/up" "^up rank=0 restart=1 " || fail "rank 0 did not restart"
  wait_for 30 "$tmp/up" "^up rank=1 restart=1 " || fail "rank 1 did not restart"
  scrape restarted
  all_present restarted
  nodes_present restarted 2
  expect restarted 'ddprun_rdzv_job_state{state="running"}' 1
  expect restarted ddprun_rdzv_generation 2
  expect restarted ddprun_rdzv_restarts_total 1
  expect restarted ddprun_rdzv_rounds_completed_total 2
  expect restarted ddprun_rdzv_nodes_alive 2
  expect restarted ddprun_rdzv_world_size 2
  expect_cmp restarted ddprun_rdzv_worker_failures_total '>=' 1
  expect restarted ddprun_rdzv_nodes_lost_total 0
  # The job scope outlives generations.
  expect restarted 'ddprun_rdzv_store_keys{scope="job"}' 3
  health 200

  # Success: every worker of generation 2 exits 0.
  kill -USR1 "$(pid_of 0 1)" "$(pid_of 1 1)"
  finish "$a0"; [ "$rc" = 0 ] || { show n0; fail "node 0 exited $rc"; }
  finish "$a1"; [ "$rc" = 0 ] || { show n1; fail "node 1 exited $rc"; }
  wait_for 10 "$tmp/log.srv/$id/events.jsonl" '.*"event":"stop"' ||
    fail "the server recorded no stop"
  # Lingering, the server still answers with the outcome.
  scrape done
  all_present done
  nodes_present done 0
  expect done 'ddprun_rdzv_job_state{state="done"}' 1
  expect done ddprun_rdzv_job_exit_code 0
  expect done ddprun_rdzv_nodes_alive 0
  expect done ddprun_rdzv_generation 2
  health 503
  grep -q "exit code 0" "$tmp/health" || fail "/healthz: $(cat "$tmp/health")"
  # A SIGTERM ends the linger; the exit code stays the job's.
  kill -TERM "$(child_of "$s")"
  finish "$s"
  [ "$rc" = 0 ] || { show srv; fail "ddprun-rdzv exited $rc after a lingering SIGTERM"; }
  expect_no_leftovers
  echo "job: metrics consistent while forming, running, restarted (generation 2) and done"
  ;;

http)
  start_server srv 40 --port 0 --nnodes 1 --rdzv-id mhttp \
    --handshake-timeout 1 --metrics-port 0 --metrics-port-file "$tmp/mport"
  s=$srv_pid
  mport=$(cat "$tmp/mport") || fail "no metrics port file"
  mc bad "$mport" 1 || fail "bad requests were not answered as they should be"
  scrape after
  expect after 'ddprun_rdzv_http_responses_total{code="405"}' 1
  expect after 'ddprun_rdzv_http_responses_total{code="404"}' 1
  expect after 'ddprun_rdzv_http_responses_total{code="400"}' 2
  expect after 'ddprun_rdzv_http_responses_total{code="431"}' 1
  expect after 'ddprun_rdzv_http_responses_total{code="408"}' 8
  expect after 'ddprun_rdzv_http_responses_total{code="200"}' 6
  # The rendezvous port was never touched by any of it.
  expect after ddprun_rdzv_connections_accepted_total 0
  # A silent client of the rendezvous port is dropped after the handshake
  # timeout, and counted.
  mc silent "$port" 3 || fail "a silent client was not dropped"
  scrape silent
  expect silent 'ddprun_rdzv_handshakes_refused_total{reason="timeout"}' 1
  expect silent ddprun_rdzv_connections_accepted_total 1
  expect silent ddprun_rdzv_connections 0
  health 200
  kill -TERM "$(child_of "$s")"
  finish "$s"
  [ "$rc" = 143 ] || fail "ddprun-rdzv exited $rc on SIGTERM, not 143"
  expect_no_leftovers
  ;;

slots)
  # A head deadline far longer than the test: only eviction lets the
  # scrape in.
  start_server srv 40 --port 0 --nnodes 1 --rdzv-id mslots \
    --handshake-timeout 30 --metrics-port 0 --metrics-port-file "$tmp/mport"
  s=$srv_pid
  mport=$(cat "$tmp/mport") || fail "no metrics port file"
  mc slots "$mport" 64 || fail "slow clients locked the scrape out"
  mc slots "$mport" 200 || fail "slow clients locked the scrape out"
  scrape after
  expect after 'ddprun_rdzv_http_responses_total{code="408"}' 0
  health 200
  kill -TERM "$(child_of "$s")"
  finish "$s"
  [ "$rc" = 143 ] || fail "ddprun-rdzv exited $rc on SIGTERM, not 143"
  expect_no_leftovers
  ;;

inproc)
  : >"$tmp/up"
  node n0 --standalone --nproc-per-node 2 --rdzv-id minproc \
    --rdzv-conf metrics_port=0
  a0=$agent_pid
  wait_for 30 "$tmp/up" "^up rank=0 restart=0 " || fail "rank 0 did not start"
  wait_for 30 "$tmp/up" "^up rank=1 restart=0 " || fail "rank 1 did not start"
  line=$(grep -m 1 "serving metrics on http://" "$tmp/n0.err") ||
    { show n0; fail "ddprun did not log its metrics endpoint"; }
  mport=${line##*:}
  mport=${mport%%/*}
  scrape running
  all_present running
  expect running 'ddprun_rdzv_job_info{run_id="minproc"}' 1
  expect running 'ddprun_rdzv_job_state{state="running"}' 1
  expect running ddprun_rdzv_nodes_alive 1
  expect running ddprun_rdzv_world_size 2
  health 200
  kill -USR1 "$(pid_of 0 0)" "$(pid_of 1 0)"
  finish "$a0"; [ "$rc" = 0 ] || { show n0; fail "ddprun exited $rc"; }
  expect_no_leftovers
  ;;

errors)
  # exit2 WHAT PATTERN CMD...: CMD exits 2 with one stderr line matching
  # PATTERN.
  exit2() {
    local what=$1 pat=$2 r=0
    shift 2
    timeout 10 "$@" >"$tmp/e.out" 2>"$tmp/e.err" || r=$?
    [ "$r" = 2 ] || fail "$what: exit $r, not 2: $(cat "$tmp/e.err")"
    [ "$(wc -l <"$tmp/e.err")" = 1 ] || fail "$what: not one line: $(cat "$tmp/e.err")"
    grep -q -e "$pat" "$tmp/e.err" || fail "$what: $(cat "$tmp/e.err")"
  }
  exit2 "port 70000" "--metrics-port '70000' is not a port number" \
    "$rdzv" --nnodes 1 --rdzv-id e --port 0 --metrics-port 70000
  exit2 "port file alone" "need --metrics-port" \
    "$rdzv" --nnodes 1 --rdzv-id e --port 0 --metrics-port-file "$tmp/x"
  exit2 "bad linger" "--linger 'x' must be seconds" \
    "$rdzv" --nnodes 1 --rdzv-id e --port 0 --linger x
  exit2 "ddprun metrics_port" "metrics_port must be a port number" \
    "$ddprun" --standalone --rdzv-conf metrics_port=http /bin/true
  # A metrics port already taken (by another server's endpoint).
  start_server srv 30 --port 0 --nnodes 1 --rdzv-id e1 --metrics-port 0 \
    --metrics-port-file "$tmp/mport"
  s=$srv_pid
  mport=$(cat "$tmp/mport")
  exit2 "taken port" "metrics endpoint: bind() to 127.0.0.1:$mport failed (98: address already in use)" \
    "$rdzv" --host 127.0.0.1 --nnodes 1 --rdzv-id e2 --port 0 --metrics-port "$mport"
  exit2 "taken port, in process" "metrics endpoint: bind() to .*:$mport failed" \
    "$ddprun" --standalone --rdzv-conf "metrics_port=$mport" /bin/true
  kill -TERM "$(child_of "$s")"
  finish "$s"
  expect_no_leftovers
  ;;

clock)
  id=mclock
  host=$(hostname)
  start_server srv 70 --port 0 --nnodes 2 --rdzv-id $id --max-restarts 1 \
    --heartbeat-timeout 2 --last-call-timeout 1 --metrics-port 0 \
    --metrics-port-file "$tmp/mport"
  s=$srv_pid
  mport=$(cat "$tmp/mport") || fail "no metrics port file"
  : >"$tmp/up"
  join=(--nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id $id
    --rdzv-conf is_host=0,heartbeat_timeout=2,last_call_timeout=1
    --max-restarts 1)
  node n0 "${join[@]}" --node-rank 0
  a0=$agent_pid
  # Node 1 stamps its messages 250 ms early: its clock seems behind.
  agent_env=(DDPRUN_TEST_CLOCK_SKEW_MS=-250)
  node n1 "${join[@]}" --node-rank 1
  a1=$agent_pid
  agent_env=()
  # clock_of RANK RESTART FIELD: a worker's DDPRUN_CLOCK_* value.
  clock_of() {
    sed -n "s/^clock rank=$1 restart=$2 .*$3=\([^ ]*\).*$/\1/p" "$tmp/up" |
      tail -n 1
  }
  # check GEN RESTART: the workers' environment and /metrics agree with a
  # node 1 250 ms behind and a node 0 on the server's clock, within 20 ms.
  check() {
    local r off unc
    for r in 0 1; do
      wait_for 30 "$tmp/up" "^up rank=$r restart=$2 " ||
        { show n$r; fail "rank $r did not start (restart $2)"; }
    done
    for r in 0 1; do
      off=$(clock_of $r "$2" offset_us)
      unc=$(clock_of $r "$2" uncertainty_us)
      [ -n "$off" ] && [ "$off" != none ] && [ "$unc" != none ] ||
        fail "rank $r of generation $1 has no DDPRUN_CLOCK_OFFSET_US"
      near "$off" $((r * 250000)) 20000 ||
        fail "rank $r of generation $1: DDPRUN_CLOCK_OFFSET_US=$off, not" \
          "$((r * 250000)) +- 20000"
      near "$unc" 0 20000 || fail "rank $r: DDPRUN_CLOCK_UNCERTAINTY_US=$unc"
      echo "generation $1, node $r: DDPRUN_CLOCK_OFFSET_US=$off" \
        "DDPRUN_CLOCK_UNCERTAINTY_US=$unc"
    done
    scrape gen$1
    all_present gen$1
    nodes_present gen$1 2
    for r in 0 1; do
      labels="{node=\"$r\",host=\"$host\"}"
      off=$(val gen$1 "ddprun_rdzv_node_clock_offset_seconds$labels") || exit 1
      unc=$(val gen$1 "ddprun_rdzv_node_clock_uncertainty_seconds$labels") ||
        exit 1
      near "$off" "-0.$((r * 25))" 0.02 ||
        fail "generation $1: node $r's clock offset is $off s, not" \
          "-0.$((r * 25)) +- 0.02"
      near "$unc" 0 0.02 || fail "node $r's clock uncertainty is $unc s"
      echo "generation $1, node $r: node_clock_offset_seconds $off" \
        "(uncertainty $unc)"
    done
  }
  # warnings: the server's lines about a node's clock.
  warnings() { grep -c "clock is .* the server's" "$tmp/srv.err"; }
  check 1 0
  grep -q "DDPRUN_TEST_CLOCK_SKEW_MS=-250: .*fault injection" "$tmp/n1.err" ||
    { show n1; fail "node 1 did not say that its clock stamps are skewed"; }
  # Heartbeats every 0.67 s: two seconds of them, each one more sample
  # that must not repeat the warning.
  sleep 2
  [ "$(warnings)" = 1 ] ||
    { show srv; fail "$(warnings) clock warnings, not one"; }
  pat="node 1 ('$host') clock is 2[3-6][0-9] ms behind the server's (.* ms);"
  pat="$pat traces will be aligned by it; check NTP on that host$"
  grep -q "$pat" "$tmp/srv.err" ||
    { show srv; fail "no warning naming node 1 and about 250 ms"; }
  # Generation 2 (rank 0 killed): the estimate refined by the heartbeats
  # reaches the new workers; the offset has not moved, so no new warning.
  kill -KILL "$(pid_of 0 0)"
  check 2 1
  [ "$(warnings)" = 1 ] ||
    { show srv; fail "$(warnings) clock warnings after the restart, not one"; }
  grep "clock is" "$tmp/srv.err" | sed 's/^/server: /'
  kill -USR1 "$(pid_of 0 1)" "$(pid_of 1 1)"
  finish "$a0"; [ "$rc" = 0 ] || { show n0; fail "node 0 exited $rc"; }
  finish "$a1"; [ "$rc" = 0 ] || { show n1; fail "node 1 exited $rc"; }
  finish "$s"
  [ "$rc" = 0 ] || { show srv; fail "ddprun-rdzv exited $rc"; }
  expect_no_leftovers
  ;;

*)
  fail "unknown mode"
  ;;
esac
