#!/usr/bin/env bash
# A chaos run: a 2-node x 2-worker train job with checkpoints every 5 steps
# (a standalone ddprun-rdzv, two ddprun on 127.0.0.1) is driven through
# FAULTS random faults drawn with a fixed seed:
#
#   kill    a random worker SIGKILLed
#   stop    a random worker SIGSTOPped; --hang-timeout 1 finds it
#   server  ddprun-rdzv SIGKILLed and started again on its port and its
#           --state-file: the workers keep running and the agents resume
#           their generation at once (a server without the file holds the
#           RESUMEs for its resume window, 5 s here, in which this short job
#           would run to its end; recovery.server_restart covers that)
#
# The job must survive them all, end with the weights of a run that never
# failed, and leave no process behind.
#
# Pacing: every worker keeps each finished checkpoint 300 ms before its
# rename (DDPRUN_CKPT_TEST_DELAY_MS, through the file $tmp/hold). Once the
# checkpoint of step N is committed, the job is therefore inside step N+5's
# write for a while, and that is when the next fault strikes; each fault
# then costs the job the steps since N, and the run advances five steps per
# fault (ten past a stopped worker, which does not keep rank 0 from
# committing the checkpoint it holds). A worker's fault counts as survived
# when a new generation's rank 0 has resumed and committed its next
# checkpoint; a server's when both agents are back in their generation and
# rank 0 has committed a checkpoint since.
#
# Usage: chaos.sh DDPRUN-RDZV DDPRUN TRAIN RTOOL [SEED [FAULTS [KINDS]]]
# KINDS, e.g. "server" or "kill stop": draw only these, evenly (by default
# kill 5, stop 3, server 2 in 10).
set -u
rdzv=${1:?usage: chaos.sh DDPRUN-RDZV DDPRUN TRAIN RTOOL [SEED [FAULTS [KINDS]]]}
ddprun=${2:?} train=${3:?} rtool=${4:?}
seed=${5:-20240611} faults=${6:-20} only=${7:-}
name=chaos
test_secs=105
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

job_secs=100   # every process of the run
wait_secs=20   # any one wait
run_secs=60    # the fault loop as a whole
id=chaos_$$
# A fault costs at most ten steps (a stopped worker lets rank 0 commit the
# checkpoint it holds); once the faults are over the job runs free.
steps=$((faults * 10 + 20))

args=(--layers 2 --width 128 --input-dim 32 --classes 8 --samples 8192
  --eval-samples 256 --batch 16 --steps "$steps" --log-every 5 --seed 5
  --ckpt-every 5)
hold_wrapper=(/bin/sh -c 'if [ -s "$0" ]; then
  DDPRUN_CKPT_TEST_DELAY_MS=$(cat "$0"); export DDPRUN_CKPT_TEST_DELAY_MS; fi
  exec "$@"' "$tmp/hold")

# new_server TAG: a server of the job on srv_port (0 at first).
new_server() {
  mkdir -p "$tmp/log.$1/$id" || fail "mkdir failed"
  start_server "$1" "$job_secs" --port "${srv_port:-0}" --nnodes 2 \
    --rdzv-id "$id" --max-restarts 100 --heartbeat-timeout 2 \
    --last-call-timeout 1 --log-dir "$tmp/log.$1" \
    --state-file "$tmp/rdzv.$id.state"
  srv_port=$port
}
# node TAG LOG ARGS...: a ddprun of the job, both streams appended to LOG;
# extra ddprun options in the array node_opts.
node_opts=()
node() {
  local tag=$1 log=$2 secs
  secs=$(bounded "$job_secs") || exit 1
  shift 2
  mkdir -p "$tmp/log.$tag/$id" && : >>"$tmp/log.$tag/$id/events.jsonl" ||
    fail "mkdir failed"
  timeout -k 2 "$secs" "$ddprun" --nnodes 2 --nproc-per-node 2 \
    --rdzv-endpoint "127.0.0.1:$srv_port" --rdzv-id "$id" \
    --rdzv-conf "is_host=0,join_timeout=$wait_secs,heartbeat_timeout=2" \
    --max-restarts 100 --log-dir "$tmp/log.$tag" --stop-grace 1 \
    "${node_opts[@]}" "$@" \
    >>"$log" 2>&1 &
  agent_pid=$!
  bg_pids="$bg_pids $agent_pid"
}
ev() { echo "$tmp/log.$1/$id/events.jsonl"; }

# wait_after SECS FILE FROM PATTERN: the first line after line FROM of FILE
# that matches PATTERN; its number in hit_line and its text in hit.
wait_after() {
  local secs file=$2 from=$3 pat=$4 fd tp got
  secs=$(bounded "$1") || exit 1
  exec {fd}< <(exec timeout "$secs" tail -n +"$((from + 1))" -F "$file" \
    2>/dev/null)
  tp=$!
  got=$(grep -n -m 1 -e "$pat" <&"$fd")
  kill "$tp" 2>/dev/null
  exec {fd}<&-
  [ -n "$got" ] || return 1
  hit_line=$((from + ${got%%:*}))
  hit=${got#*:}
}
lines() { wc -l <"$1"; }

# ---- the uninterrupted run ------------------------------------------------
t_start=$(date +%s.%N)
srv_port=0
id=chaos_ref_$$
new_server ref.srv
s=$srv_pid
node ref.n0 "$tmp/ref.log" "$train" "${args[@]}" --ckpt-dir "$tmp/ref.ckpt"
r0=$agent_pid
node ref.n1 "$tmp/ref.log" "$train" "${args[@]}" --ckpt-dir "$tmp/ref.ckpt"
r1=$agent_pid
for p in $r0 $r1 $s; do
  finish "$p"
  [ "$rc" -eq 0 ] || { tail -n 30 "$tmp/ref.log" >&2; fail "the reference run exited $rc"; }
done
ref_crc=$(crc_of "$tmp/ref.log")
[ -n "$ref_crc" ] || fail "the reference run printed no final line"
echo "reference: $steps steps, $ref_crc ($(elapsed "$t_start") s)"

# ---- the run under faults -------------------------------------------------
id=chaos_$$
srv_port=0
echo 300 >"$tmp/hold"
log=$tmp/job.log
: >"$log"
node_opts=(--hang-timeout 1)
srv_n=1
new_server srv1
srv_wrap=$srv_pid
declare -A apid # tag -> the timeout wrapper of its ddprun
for t in n0 n1; do
  node $t "$log" "${hold_wrapper[@]}" "$train" "${args[@]}" --ckpt-dir "$tmp/ckpt"
  apid[$t]=$agent_pid
done

start_re='^\[rank0\]:train: rank 0: \(resuming at step\|no checkpoint in\)'
ckpt_re='^\[rank0\]:\(checkpoint step [0-9]* \|final \)'
# Up to a generation that runs: its rank 0's start, then a checkpoint.
live() {
  if ! wait_after "$wait_secs" "$log" "$1" "$start_re"; then
    tail -n 40 "$log" >&2
    gone_nodes
    fail "$2: no generation started$gone_msg"
  fi
  started_at=$hit_line
  wait_after "$wait_secs" "$log" "$started_at" "$ckpt_re" ||
    { tail -n 40 "$log" >&2; fail "$2: no checkpoint after the start"; }
  case $hit in
  *"final "*) fail "$2: the job ended after $((i - 1)) of $faults faults" ;;
  esac
  at_step=$(echo "$hit" | sed 's/.*checkpoint step \([0-9]*\) .*/\1/')
}

# gone_nodes: sets gone_msg to which ddprun has already exited, and how
# (bash reaps its children at once: an exited one has no /proc entry).
gone_nodes() {
  local t w
  gone_msg=
  for t in n0 n1; do
    w=${apid[$t]}
    [ -e "/proc/$w" ] && continue
    finish "$w"
    gone_msg="$gone_msg; the ddprun of $t exited $rc after \"$(grep \
      '^ddprun: the rendezvous server' "$log" | tail -n 1)\""
  done
}

RANDOM=$seed
kinds=
i=1
live 0 "start"
while [ "$i" -le "$faults" ]; do
  [ "$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { print (b - a > '"$run_secs"') }')" = 1 ] &&
    fail "past $run_secs s after $((i - 1)) faults"
  # The workers of the running generation: each agent's last spawns.
  pids=()
  ranks=()
  for n in n0 n1; do
    while read -r line; do
      pids+=("$(echo "$line" | field pid)")
      ranks+=("$(echo "$line" | field rank)")
    done < <(events "$(ev $n)" spawn | tail -n 2)
  done
  [ "${#pids[@]}" -eq 4 ] || fail "fault $i: not 4 workers in the events"
  before=$at_step
  draw=$((RANDOM % 10))
  w=$((RANDOM % 4))
  case $draw in
  [0-4]) kind=kill ;;
  [5-7]) kind=stop ;;
  *) kind=server ;;
  esac
  if [ -n "$only" ]; then
    read -ra allowed <<<"$only"
    kind=${allowed[draw % ${#allowed[@]}]}
  fi
  from=$(lines "$log")
  t_fault=$(date +%s.%N)
  case $kind in
  kill)
    what="SIGKILL rank ${ranks[w]} (pid ${pids[w]})"
    kill -KILL "${pids[w]}" 2>/dev/null
    ;;
  stop)
    what="SIGSTOP rank ${ranks[w]} (pid ${pids[w]})"
    kill -STOP "${pids[w]}" 2>/dev/null
    ;;
  server)
    what="SIGKILL ddprun-rdzv and start it again on port $srv_port"
    sp=$(child_of "$srv_wrap") || exit 1
    kill -KILL "$sp"
    finish "$srv_wrap"
    [ "$rc" -eq 137 ] || fail "fault $i: the server exited $rc before the kill"
    # Both agents noticed and reconnect before the new server listens.
    keep_re='the workers keep running; reconnecting to '
    wait_after "$wait_secs" "$log" "$from" "$keep_re" &&
      wait_after "$wait_secs" "$log" "$hit_line" "$keep_re" ||
      { tail -n 30 "$log" >&2; fail "fault $i: the agents do not reconnect"; }
    srv_n=$((srv_n + 1))
    new_server "srv$srv_n"
    srv_wrap=$srv_pid
    ;;
  esac
  kinds="$kinds $kind"
  [ "$i" -eq "$faults" ] && rm -f "$tmp/hold"
  if [ "$kind" = server ]; then
    back_re='^ddprun: back in generation [0-9]* as node'
    wait_after "$wait_secs" "$log" "$from" "$back_re" &&
      wait_after "$wait_secs" "$log" "$hit_line" "$back_re" &&
      wait_after "$wait_secs" "$log" "$hit_line" "$ckpt_re" ||
      { tail -n 40 "$log" >&2; fail "fault $i ($what): the agents did not resume"; }
    case $hit in
    *"final "*) fail "fault $i: the job ended after $((i - 1)) of $faults faults" ;;
    esac
    at_step=$(echo "$hit" | sed 's/.*checkpoint step \([0-9]*\) .*/\1/')
  else
    live "$from" "fault $i ($what)"
  fi
  echo "fault $i/$faults, step $before committed: $what; step $at_step" \
    "committed again $(elapsed "$t_fault") s later"
  i=$((i + 1))
done

for p in "${apid[@]}"; do
  finish "$p"
  [ "$rc" -eq 0 ] || { tail -n 40 "$log" >&2; fail "a ddprun exited $rc"; }
done
finish "$srv_wrap"
[ "$rc" -eq 0 ] || fail "the last ddprun-rdzv exited $rc"
crc=$(crc_of "$log")
[ "$crc" = "$ref_crc" ] ||
  fail "weights $crc after $faults faults differ from the uninterrupted $ref_crc"
expect_no_leftovers
for k in kill stop server; do
  printf '%s=%s ' "$k" "$(echo "$kinds" | tr ' ' '\n' | grep -c "^$k$")"
done
echo
echo "PASS: chaos: $faults faults (seed $seed), weights $crc as uninterrupted," \
  "$(elapsed "$t_start") s"
