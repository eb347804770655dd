#!/usr/bin/env bash
# A rendezvous server restarted on its --state-file continues the job's
# generation count and restart budget. One node of 2 workers, --max-restarts
# 2: rank 1 is killed after step 3 on the job's first attempt (restart 1,
# generation 2); the state file then says that generation 2 runs; ddprun-rdzv
# is SIGKILLed and started again on the same port and file; the agent
# reconnects with its workers still running, the server takes generation 2
# back with restart 1 of 2 (a fresh budget would be generation 1, restart 0
# of 2), and the job completes without another restart; the file is removed
# at the end. Then a state file that is not one is refused (exit 2, one line), as
# is one the server cannot write.
#
# Usage: server_state.sh DDPRUN-RDZV DDPRUN TRAIN RTOOL
set -u
rdzv=${1:?usage: server_state.sh DDPRUN-RDZV DDPRUN TRAIN RTOOL}
ddprun=${2:?} train=${3:?} rtool=${4:?}
name=server_state
test_secs=100
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

job_secs=90
wait_secs=30
id=state_$$
state=$tmp/rdzv.state

srv() {
  start_server "$1" "$job_secs" --port "$2" --nnodes 1 --rdzv-id "$id" \
    --max-restarts 2 --state-file "$state" --log-dir "$tmp/log.$1"
}

srv s1 0
s1=$srv_pid
# Each checkpoint is held 100 ms before its rename: the job lasts a few
# seconds, long enough to be caught between two of them.
agent_env=(DDPRUN_CKPT_TEST_KILL_AT=3:1 DDPRUN_CKPT_TEST_DELAY_MS=100)
start_agent a "$job_secs" --nnodes 1 --nproc-per-node 2 \
  --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
  --rdzv-conf "is_host=0,join_timeout=$wait_secs" --max-restarts 2 \
  --log-dir "$tmp/log.a" "$train" --layers 2 --width 128 --input-dim 32 \
  --classes 8 --samples 8192 --eval-samples 256 --batch 16 --steps 2000 \
  --log-every 100 --ckpt-every 50 --ckpt-dir "$tmp/ckpt"
a=$agent_pid
wait_for "$wait_secs" "$tmp/a.err" 'generation 2, restart 1 of 2' ||
  { show a; fail "the job did not restart once"; }
wait_for "$wait_secs" "$tmp/a.out" '^\[rank0\]:checkpoint step' ||
  { show a; fail "generation 2 wrote no checkpoint"; }
# The state holds generation 2's resume token: private to the server.
printf 'ddprun-rdzv-state 3\nrun_id %s\ngeneration 2\nrestarts_used 1\nrunning 1 2\n' "$id" |
  cmp -s - <(head -n 5 "$state") &&
  sed -n 6p "$state" | grep -Eq '^token [0-9a-f]{32}$' &&
  printf 'node 0 2 %s\n' "$(hostname)" | cmp -s - <(tail -n +7 "$state") ||
  fail "the state file says: $(cat "$state" 2>&1)"
[ "$(stat -c %a "$state")" = 600 ] || fail "the state file is mode $(stat -c %a "$state"), not 600"

kill -KILL "$(child_of "$s1")"
finish "$s1"
[ "$rc" -eq 137 ] || fail "the first ddprun-rdzv exited $rc, not 137"
wait_for "$wait_secs" "$tmp/a.err" "the workers keep running; reconnecting to 127.0.0.1:$port" ||
  { show a; fail "the agent does not reconnect with its workers running"; }
srv s2 "$port"
s2=$srv_pid
grep -q "job '$id' continues from $state: generation 2 was running on 1 node (world size 2), restarts used 1 of 2" \
  "$tmp/s2.err" || { show s2; fail "the new server did not take up the state"; }
finish "$a"
[ "$rc" -eq 0 ] || { show a; fail "ddprun exited $rc"; }
finish "$s2"
[ "$rc" -eq 0 ] || { show s2; fail "the second ddprun-rdzv exited $rc"; }
grep -q 'back in generation 2 as node 0 after' "$tmp/a.err" ||
  { show a; fail "the job did not go on in generation 2"; }
sed -n '/reconnecting to/,$p' "$tmp/a.err" | grep -q 'restarting the workers' &&
  fail "the workers restarted after the server restart"
# Rank 0 started twice, for generations 1 and 2, and never again.
[ "$(grep -c 'rank 0: no checkpoint in .*; starting at step 0' "$tmp/a.err")" = 2 ] &&
  ! grep -q 'resuming at step' "$tmp/a.err" ||
  { show a; fail "rank 0 did not start exactly twice (generations 1 and 2)"; }
[ ! -e "$state" ] || fail "the state file outlived the job"
grep -q '^\[rank0\]:final ' "$tmp/a.out" || fail "no final line"
expect_no_leftovers

# Refusals: a file that is not a state, a path that cannot be written.
echo "not a state" >"$state"
timeout 10 "$rdzv" --nnodes 1 --rdzv-id "$id" --port 0 --state-file "$state" \
  >/dev/null 2>"$tmp/bad.err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] &&
  grep -q "is not a state this server wrote; remove it" "$tmp/bad.err" ||
  fail "a foreign state file: exit $rc, $(cat "$tmp/bad.err")"
# A running generation whose node list is cut short is not a state either.
printf 'ddprun-rdzv-state 2\nrun_id %s\ngeneration 4\nrestarts_used 0\nrunning 2 4\nnode 0 2 h0\n' \
  "$id" >"$state"
timeout 10 "$rdzv" --nnodes 2 --rdzv-id "$id" --port 0 --state-file "$state" \
  >/dev/null 2>"$tmp/bad.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "is not a state this server wrote" "$tmp/bad.err" ||
  fail "a cut node list: exit $rc, $(cat "$tmp/bad.err")"
# loads TAG ARGS...: a ddprun-rdzv on the state file, stopped by SIGTERM
# once it listens (not by timeout(1), whose SIGCONT after the SIGTERM can
# cancel the SIGSTOP of a sanitizer's leak check at exit and leave it
# waiting for good); its log in $tmp/TAG.err.
loads() {
  local tag=$1 p
  shift
  : >"$tmp/$tag.err"
  "$rdzv" --port 0 --state-file "$state" "$@" >/dev/null 2>"$tmp/$tag.err" &
  p=$!
  wait_for 20 "$tmp/$tag.err" 'listening on' ||
    { kill -KILL "$p"; wait "$p"; fail "$tag: the server did not start: $(cat "$tmp/$tag.err")"; }
  kill -TERM "$p"
  local i=0
  while kill -0 "$p" 2>/dev/null && [ "$i" -lt 200 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -0 "$p" 2>/dev/null &&
    { kill -KILL "$p"; wait "$p"; fail "$tag: still running 20 s after SIGTERM"; }
  wait "$p"
}
# A version 1 file (no phase) still loads: its generation was forming.
printf 'ddprun-rdzv-state 1\nrun_id %s\ngeneration 4\nrestarts_used 1\n' "$id" >"$state"
loads v1 --nnodes 2 --rdzv-id "$id" --max-restarts 2
grep -q "continues from $state: generation 5, restarts used 1 of 2" "$tmp/v1.err" ||
  fail "a version 1 state file: $(cat "$tmp/v1.err")"
# More restarts used than this server's budget: the budget is spent, never
# more than spent.
printf 'ddprun-rdzv-state 3\nrun_id %s\ngeneration 4\nrestarts_used 7\nforming\n' "$id" >"$state"
loads over --nnodes 2 --rdzv-id "$id" --max-restarts 2
grep -q "says 7 restarts used, over this server's budget of 2: the budget is spent" "$tmp/over.err" &&
  grep -q "generation 5, restarts used 2 of 2" "$tmp/over.err" ||
  fail "a state over the budget: $(cat "$tmp/over.err")"

# Values no job has are not a state: a generation that would wrap, a count
# over 32 bits, a world that is not the sum of its nodes, a token cut short.
tok=0123456789abcdef0123456789abcdef
bad_states=(
  "generation 18446744073709551615\nrestarts_used 0\nforming"
  "generation 3\nrestarts_used 4294967296\nforming"
  "generation 3\nrestarts_used -1\nforming"
  "generation 3\nrestarts_used 0\nrunning 1 3\ntoken $tok\nnode 0 2 h0"
  "generation 3\nrestarts_used 0\nrunning 1 70000\ntoken $tok\nnode 0 70000 h0"
  "generation 3\nrestarts_used 0\nrunning 1 2\ntoken ${tok:0:30}\nnode 0 2 h0"
)
for body in "${bad_states[@]}"; do
  printf "ddprun-rdzv-state 3\nrun_id %s\n$body\n" "$id" >"$state"
  timeout 10 "$rdzv" --nnodes 1 --rdzv-id "$id" --port 0 --state-file "$state" \
    >/dev/null 2>"$tmp/bad.err"
  rc=$?
  [ "$rc" -eq 2 ] && grep -q "is not a state this server wrote" "$tmp/bad.err" ||
    fail "a state with '$body': exit $rc, $(cat "$tmp/bad.err")"
done

# A FIFO at the path is refused at once, not read (which would block the
# server before it listens).
rm -f "$state"
mkfifo "$state"
timeout 10 "$rdzv" --nnodes 1 --rdzv-id "$id" --port 0 --state-file "$state" \
  >/dev/null 2>"$tmp/fifo.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "cannot read --state-file $state (not a regular file" "$tmp/fifo.err" ||
  fail "a FIFO as the state file: exit $rc, $(cat "$tmp/fifo.err")"
rm -f "$state"

# A link planted where the old writer put its temporary file: the server
# writes its state without following it, 0600.
echo "not to be overwritten" >"$tmp/victim"
ln -s "$tmp/victim" "$state.tmp"
start_server s3 "$job_secs" --port 0 --nnodes 1 --rdzv-id "$id" \
  --state-file "$state" --log-dir "$tmp/log.s3"
[ "$(cat "$tmp/victim")" = "not to be overwritten" ] ||
  fail "the server wrote through a link: $(cat "$tmp/victim")"
[ -f "$state" ] && [ ! -L "$state" ] && [ "$(stat -c %a "$state")" = 600 ] ||
  fail "the state file is not a 0600 regular file: $(ls -l "$state")"
kill -TERM "$srv_pid"
finish "$srv_pid"
ls "$state".?????? >/dev/null 2>&1 && fail "temporary state files left: $(ls "$state".*)"
timeout 10 "$rdzv" --nnodes 1 --rdzv-id "$id" --port 0 \
  --state-file "$tmp/no/such/dir/state" >/dev/null 2>"$tmp/bad.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "cannot write --state-file" "$tmp/bad.err" ||
  fail "an unwritable state path: exit $rc, $(cat "$tmp/bad.err")"
echo "PASS: $name: generation 2 with restart 1 of 2 taken back after the server restart;" \
  "bad state files, a FIFO and values out of bounds refused, a version 1 file loads," \
  "no link followed"
