# shellcheck shell=bash
# The job the recovery tests run, sourced after lib.sh by recovery.sh and
# server_outage.sh (bash): a standalone ddprun-rdzv and one ddprun per node
# on 127.0.0.1, training with train, each under a bound; helpers that find
# who holds which rank, wait for generations and checkpoints, and compare
# the end with an uninterrupted run.

# Bounds: each ddprun and server runs under timeout; each wait has its own.
job_secs=60
wait_secs=30
hb=2

train_args=(--layers 2 --width 128 --input-dim 32 --classes 8 --samples 8192
  --eval-samples 256 --batch 16 --steps 40 --log-every 5 --seed 11
  --ckpt-every 5)
hold_wrapper=(/bin/sh -c 'if [ -s "$0" ]; then
  DDPRUN_CKPT_TEST_DELAY_MS=$(cat "$0"); export DDPRUN_CKPT_TEST_DELAY_MS; fi
  exec "$@"' "$tmp/hold")

# log_dir TAG: $tmp/log.TAG, with an empty events file that the tests can
# follow from the start (ddprun appends to it).
log_dir() {
  mkdir -p "$tmp/log.$1/$id" && : >>"$tmp/log.$1/$id/events.jsonl" ||
    fail "cannot create $tmp/log.$1/$id"
}
# server TAG NNODES K [ARGS...]: a server for job $id, on srv_port (0 when
# unset).
server() {
  local tag=$1 nn=$2 k=$3
  shift 3
  log_dir "$tag"
  # A fixed-size job that loses a node stops at once unless a test sets
  # replace_secs (the wait for a replacement has its own cases).
  start_server "$tag" "$job_secs" --port "${srv_port:-0}" --nnodes "$nn" \
    --rdzv-id "$id" --max-restarts "$k" --heartbeat-timeout "$hb" \
    --last-call-timeout 1 --replacement-timeout "${replace_secs:-0}" \
    --log-dir "$tmp/log.$tag" "$@"
}
# agent TAG NNODES K PROGRAM...: one node of job $id, 2 workers; extra
# ddprun options in the array agent_opts, environment in agent_env.
agent() {
  local tag=$1 nn=$2 k=$3
  shift 3
  log_dir "$tag"
  start_agent "$tag" "$job_secs" --nnodes "$nn" --nproc-per-node 2 \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
    --rdzv-conf "is_host=0,join_timeout=$wait_secs,heartbeat_timeout=$hb,last_call_timeout=1" \
    --max-restarts "$k" --log-dir "$tmp/log.$tag" --stop-grace 2 \
    "${agent_opts[@]}" "$@"
}
agent_opts=()
declare -A apid # tag -> the timeout wrapper of its ddprun
ev() { echo "$tmp/log.$1/$id/events.jsonl"; }

# all TAG...: the tags' stdout and stderr, concatenated, in $tmp/all.
all() {
  local t
  for t in "$@"; do
    cat "$tmp/$t.out" "$tmp/$t.err"
  done >"$tmp/all"
}
# expect_rc TAG RC WANT: a wrapper's status.
expect_rc() {
  if [ "$2" -eq 124 ] || { [ "$2" -eq 137 ] && [ "$3" -ne 137 ]; }; then
    show "$1"
    fail "$1 still running after $job_secs s (status $2)"
  fi
  [ "$2" -eq "$3" ] || { show "$1"; fail "$1 exited $2, expected $3"; }
}

# ref TAG: an uninterrupted 2x2 run of the job; sets ref_crc.
ref() {
  local tag=$1 save_id=$id
  id=${save_id}_ref
  server "$tag.srv" 2 0
  local s=$srv_pid
  agent "$tag.n0" 2 0 "$train" "${train_args[@]}" --ckpt-dir "$tmp/$tag.ckpt"
  local a0=$agent_pid
  agent "$tag.n1" 2 0 "$train" "${train_args[@]}" --ckpt-dir "$tmp/$tag.ckpt"
  local a1=$agent_pid
  finish "$a0"; expect_rc "$tag.n0" "$rc" 0
  finish "$a1"; expect_rc "$tag.n1" "$rc" 0
  finish "$s"; expect_rc "$tag.srv" "$rc" 0
  all "$tag.n0" "$tag.n1"
  ref_crc=$(crc_of "$tmp/all")
  [ -n "$ref_crc" ] || { show "$tag.n0"; fail "the reference run printed no final line"; }
  [ "$(world_of "$tmp/all")" = 4 ] || fail "the reference run's world is not 4"
  id=$save_id
}

# spawn_gens EVENTS: the generations of the spawn events, sorted, one per spawn.
spawn_gens() { events "$1" spawn | field gen | sort -n | tr '\n' ' '; }

# holds_rank EVENTS GEN RANK: whether this agent spawned RANK in GEN.
holds_rank() {
  events "$1" spawn | grep -q "\"gen\":$2,\"rank\":$3,"
}
# holder GEN RANK TAG...: the agent (tag) that spawned RANK in GEN.
holder() {
  local gen=$1 rank=$2 t
  shift 2
  for t in "$@"; do
    holds_rank "$(ev "$t")" "$gen" "$rank" && { echo "$t"; return 0; }
  done
  fail "no agent of $* spawned rank $rank in generation $gen"
}
# started GEN TAG...: waits until every agent has spawned its workers of
# generation GEN.
started() {
  local gen=$1 t
  shift
  for t in "$@"; do
    wait_for "$wait_secs" "$(ev "$t")" \
      "\"event\":\"spawn\",\"gen\":$gen,.*\"local_rank\":1," ||
      { show "$t"; fail "$t started no workers of generation $gen"; }
  done
}
# held TAG...: waits until rank 0 of generation 1 keeps its checkpoint of
# step 5 before the rename (the hold).
held() {
  local r0 step=${held_step:-5}
  r0=$(holder 1 0 "$@") || exit 1
  wait_for "$wait_secs" "$tmp/$r0.err" \
    "ckpt-$(printf %010d "$step").bin.tmp.* is written; waiting" ||
    { show "$r0"; fail "rank 0 never reached its checkpoint of step $step"; }
}

# job_ends SERVER_TAG: agents n0 and n1 and the server exit 0.
job_ends() {
  local n
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc $n "$rc" 0
  done
  finish "$srv_pid"; expect_rc "$1" "$rc" 0
}
