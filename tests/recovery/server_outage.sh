#!/usr/bin/env bash
# The control plane must not cost the data plane: a rendezvous server that
# stops, crashes or restarts in the middle of a 2-node job (2 workers each,
# budget 1) costs no training step, and a node really lost meanwhile is
# still found once the server is back.
#
#   pause             ddprun-rdzv SIGSTOPped for 5 s (2.5 heartbeat
#                     timeouts) and continued: the job ends with the weights
#                     of an uninterrupted run, in generation 1, restart count
#                     0, every logged step once.
#   pause_nodeloss    the same pause, with agent n1's ddprun SIGKILLed in it:
#                     once continued, the server names its node lost (exit 3).
#   restart           ddprun-rdzv SIGKILLed and started again on its port
#                     (no state file): the agents reconnect with the workers
#                     still running, the new server takes generation 1 back
#                     from their RESUMEs (which carry its token) at the end
#                     of its resume window, and the job ends as uninterrupted.
#   restart_state     the same with --state-file on both servers: the new one
#                     expects generation 1 from the file.
#   restart_nodeloss  the server SIGKILLed, agent n1's ddprun SIGKILLed while
#                     it is down, the server started again on its state file:
#                     n1's node never resumes and is named lost, with its
#                     host from the file (exit 3).
#   reset             as restart, but the agents' first reconnection is reset
#                     during the handshake: they keep trying and resume.
#   join_reset        the agents' very first connection is reset during the
#                     handshake: they keep trying until join_timeout.
#
# Usage: server_outage.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL
set -u
mode=${1:?usage: server_outage.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL}
rdzv=${2:?} ddprun=${3:?} train=${4:?} rtool=${5:?}
name=server_$mode
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=job.sh
. "$(dirname "$0")/job.sh"

# midrun HOLD_MS [SERVER-ARGS...]: a 2x2 job with budget 1 on server srv1
# and agents n0 and n1 (apid), every checkpoint held HOLD_MS before its
# rename so that the job outlasts the fault; returns once rank 0 has
# committed the checkpoint of step 5. Sets s1 (srv1's wrapper) and r0 (the
# tag of rank 0's node).
midrun() {
  local n hold=$1
  shift
  echo "$hold" >"$tmp/hold"
  server srv1 2 1 "$@"
  s1=$srv_pid
  for n in n0 n1; do
    agent $n 2 1 "${hold_wrapper[@]}" "$train" "${train_args[@]}" \
      --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  r0=$(holder 1 0 n0 n1) || exit 1
  wait_for "$wait_secs" "$tmp/$r0.out" '^\[rank0\]:checkpoint step 5 ' ||
    { show "$r0"; fail "no checkpoint of step 5"; }
}
# kill_server: SIGKILLs srv1's ddprun-rdzv at t_kill.
kill_server() {
  kill -KILL "$(child_of "$s1")" || fail "cannot kill srv1"
  t_kill=$(date +%s.%N)
  finish "$s1"; expect_rc srv1 "$rc" 137
}
# reconnecting: both agents said they lost the server and keep the workers.
reconnecting() {
  local n
  for n in n0 n1; do
    wait_for "$wait_secs" "$tmp/$n.err" \
      "the workers keep running; reconnecting to 127.0.0.1:$port" ||
      { show $n; fail "$n does not reconnect with its workers running"; }
  done
}
# no_step_lost SERVER_TAG: the job ended well on srv1 (or SERVER_TAG) as
# if nothing had happened: weights of the uninterrupted run, generation 1
# only, TORCHELASTIC_RESTART_COUNT 0, rank 0's logged steps those of the
# uninterrupted run, once each, and no resume from a checkpoint.
no_step_lost() {
  local n steps ref_steps
  job_ends "$1"
  all n0 n1
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] || fail "weights $crc differ from $ref_crc"
  for n in n0 n1; do
    [ "$(events "$(ev $n)" assign | field restart_count | tr '\n' ' ')" = "0 " ] ||
      fail "$n was not assigned once with restart count 0"
    [ "$(spawn_gens "$(ev $n)")" = "1 1 " ] ||
      fail "$n spawned generations $(spawn_gens "$(ev $n)"), not 1 1"
    events "$(ev $n)" restart | grep -q . && fail "$n restarted its workers"
  done
  grep -q "resuming at step" "$tmp/all" && fail "the job resumed from a checkpoint"
  steps=$(grep -o '^\[rank0\]:step [0-9]*/' "$tmp/all" | tr '\n' ' ')
  ref_steps=$(cat "$tmp/ref.n0.out" "$tmp/ref.n1.out" |
    grep -o '^\[rank0\]:step [0-9]*/' | tr '\n' ' ')
  [ "$steps" = "$ref_steps" ] ||
    fail "rank 0 logged steps '$steps', the uninterrupted run '$ref_steps'"
}
# reset_listener: on $port, resets the first 2 connections during their
# handshake; reset_listener_done waits until it has.
reset_listener() {
  local line
  mkfifo "$tmp/reset.fifo" || fail "mkfifo failed"
  timeout -k 2 "$wait_secs" "$rtool" reset-listener 127.0.0.1 "$port" 2 \
    "$wait_secs" >"$tmp/reset.fifo" 2>"$tmp/reset.err" &
  rl=$!
  bg_pids="$bg_pids $rl"
  read -r -t "$wait_secs" line <"$tmp/reset.fifo"
  [ "$line" = "listening on 127.0.0.1:$port" ] ||
    fail "the resetting listener did not start: $line $(cat "$tmp/reset.err")"
}
reset_listener_done() {
  finish "$rl"
  [ "$rc" -eq 0 ] || fail "the resetting listener saw no 2 connections: $(cat "$tmp/reset.err")"
}

t_start=$(date +%s.%N)
id=out_${mode}_$$

case $mode in
pause)
  ref ref
  midrun 1500
  sp=$(child_of "$s1") || exit 1
  kill -STOP "$sp"
  sleep 5
  kill -CONT "$sp"
  no_step_lost srv1
  grep -q "did not run for [0-9]* ms (stopped or paused?)" "$tmp/srv1.err" ||
    { show srv1; fail "the server did not notice its stall"; }
  echo "pause: 5 s SIGSTOP of the server, no step lost, no restart; $crc"
  ;;

pause_nodeloss)
  midrun 1500
  kr=$(events "$(ev n1)" assign | field node_rank)
  sp=$(child_of "$s1") || exit 1
  kill -STOP "$sp"
  kill -KILL "$(child_of "${apid[n1]}")"
  finish "${apid[n1]}"
  sleep 5
  kill -CONT "$sp"
  t_cont=$(date +%s.%N)
  wait_for "$wait_secs" "$(ev srv1)" '"event":"stop"' ||
    { show srv1; fail "the server did not stop the job"; }
  found_s=$(elapsed "$t_cont")
  finish "${apid[n0]}"; expect_rc n0 "$rc" 3
  finish "$s1"; expect_rc srv1 "$rc" 3
  grep -q "node $kr ('[^']*') lost" "$tmp/n0.err" ||
    { show n0; fail "n0 does not name node $kr (n1) lost"; }
  echo "pause_nodeloss: node $kr named lost ${found_s} s after the server woke"
  ;;

restart | restart_state)
  ref ref
  st=()
  [ "$mode" = restart_state ] && st=(--state-file "$tmp/rdzv.state")
  midrun 1000 "${st[@]}"
  kill_server
  reconnecting
  srv_port=$port server srv2 2 1 "${st[@]}"
  no_step_lost srv2
  done_s=$(elapsed "$t_kill")
  if [ "$mode" = restart_state ]; then
    grep -q "generation 1 was running on 2 nodes (world size 4)" "$tmp/srv2.err" ||
      { show srv2; fail "the new server did not read generation 1 from its state"; }
    [ ! -e "$tmp/rdzv.state" ] || fail "the state file outlived the job"
  else
    # With no record of the job, the server holds the RESUMEs until its
    # window ends and takes back the generation one token claims whole.
    grep -q "resumes generation 1 into a server with no record of the job" "$tmp/srv2.err" &&
      grep -q "generation 1 taken back from the claims of its 2 nodes" "$tmp/srv2.err" ||
      { show srv2; fail "the new server did not take generation 1 back"; }
  fi
  grep -q "generation 1 taken back: all 2 nodes still run it" "$tmp/srv2.err" ||
    { show srv2; fail "the new server did not take both nodes back"; }
  for n in n0 n1; do
    grep -q "back in generation 1 as node [01] after" "$tmp/$n.err" ||
      { show $n; fail "$n did not say it is back in generation 1"; }
  done
  echo "$mode: server killed and restarted, no step lost, done ${done_s} s after the kill; $crc"
  ;;

restart_nodeloss)
  midrun 1000 --state-file "$tmp/rdzv.state"
  kill_server
  reconnecting
  kr=$(events "$(ev n1)" assign | field node_rank)
  kill -KILL "$(child_of "${apid[n1]}")"
  finish "${apid[n1]}"
  srv_port=$port server srv2 2 1 --state-file "$tmp/rdzv.state"
  t_up=$(date +%s.%N)
  wait_for "$wait_secs" "$(ev srv2)" '"event":"stop"' ||
    { show srv2; fail "the new server did not stop the job"; }
  found_s=$(elapsed "$t_up")
  finish "${apid[n0]}"; expect_rc n0 "$rc" 3
  finish "$srv_pid"; expect_rc srv2 "$rc" 3
  grep -q "node $kr ('$(hostname)') lost (did not resume within" "$tmp/n0.err" ||
    { show n0; show srv2; fail "n0 does not name node $kr (n1) lost"; }
  echo "restart_nodeloss: node $kr named lost ${found_s} s after the new server started"
  ;;

reset)
  # As server_restart, but the first connection the agents make while
  # reconnecting is reset during the handshake (a dying server's queue, a
  # proxy, a server that crashes as it starts): they go on trying until
  # join_timeout and resume on the real server.
  ref ref
  midrun 1000
  kill_server
  reset_listener
  reset_listener_done
  srv_port=$port server srv2 2 1
  no_step_lost srv2
  echo "reset: the agents survived a reset handshake and resumed; $crc"
  ;;

join_reset)
  # The agents' first connection is reset during the handshake (a server
  # that dies as it starts, or a dying one's queue): they go on trying
  # until join_timeout, as they do while nothing listens, and join the
  # real server. The port comes from a server on port 0, killed again.
  server probe 2 0
  sp=$(child_of "$srv_pid") || exit 1
  kill -KILL "$sp"
  finish "$srv_pid"
  reset_listener
  for n in n0 n1; do
    agent $n 2 0 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  reset_listener_done
  srv_port=$port server srv 2 0
  job_ends srv
  echo "join_reset: the agents survived a reset first handshake and joined"
  ;;

*)
  fail "unknown mode $mode"
  ;;
esac
expect_no_leftovers
echo "PASS: $name ($(elapsed "$t_start") s)"
