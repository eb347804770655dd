#!/usr/bin/env bash
# A forwarded SIGUSR1 waits until the workers can take it (--signal-hold).
# The worker is a shell script that installs its SIGUSR1 trap only after
# sleeping SLEEP seconds, like a Python program importing torch.
#
#   late      SIGUSR1 to ddprun as the workers start: ddprun says it holds
#             the signal, both traps run, the job ends preempted (75),
#             nobody is killed by the signal.
#   never     a program that never handles SIGUSR1, --signal-hold 1: held
#             about a second, then sent anyway; the workers die of it and
#             the job ends preempted (75), not restarted.
#   at-once   --signal-hold 0: the late-trap workers die of the signal at
#             once (the behaviour without holding).
#   early     two nodes, SIGUSR1 to node 0's ddprun while it still waits
#             for node 1: held for the workers it starts later, whose traps
#             run; both ddprun exit 75.
#   blocked   workers that block SIGUSR1 for a while, then leave it to its
#             default action before they catch it (blocks_usr1.py): the
#             signal is not sent while it is only blocked (the agent's
#             bound on a block, 200 ms, set to an hour here), and reaches
#             the handlers.
#   starting  SIGUSR1 to ddprun before it has installed any handler (the
#             open of its --secret-file held 1.5 s by strace's fault
#             injection): it waits, blocked, instead of killing ddprun,
#             and reaches the workers. Skipped without strace.
#
# Usage: signal_hold.sh DDPRUN DDPRUN_RDZV
set -u
name=deploy_signal_hold
ddprun=${1:?usage: signal_hold.sh DDPRUN DDPRUN_RDZV} rdzv=${2:?}
. "$(dirname "$0")/lib.sh"

worker=$tmp/late_trap.sh
cat >"$worker" <<'EOF'
#!/bin/sh
sleep "$1"
# The first rank to exit ends the job: give the others a second to
# catch the signal too.
trap 'echo "caught USR1 rank $RANK"; sleep 1; exit 75' USR1
echo "rank $RANK ready"
while :; do sleep 0.05; done
EOF
chmod +x "$worker"
sigs=--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1

# ddprun_pid JOB: ddprun itself, the child of start's timeout wrapper.
ddprun_pid() {
  local p
  p=$(pgrep -P "$1" | head -n 1)
  [ -n "$p" ] || fail "no ddprun under pid $1"
  echo "$p"
}

# expect_preempted TAG: ddprun exited 75 and said why.
expect_preempted() {
  [ "$rc" -eq 75 ] || die "$1" "ddprun exited $rc, not 75"
  grep -q "^ddprun: job preempted (exit code 75)" "$tmp/$1.err" ||
    die "$1" "ddprun did not say the job was preempted"
  grep -q "restart 1 of" "$tmp/$1.err" && die "$1" "the job was restarted"
  return 0
}

# ---- late: held until the traps are installed -------------------------
start 60 late "$ddprun" --standalone --nproc-per-node 2 --max-restarts 2 \
  "$sigs" "$worker" 2
job=$bg
wait_for 20 "$tmp/late.err" '^ddprun: \[rank1\] local rank 1' ||
  die late "the workers did not start"
kill -USR1 "$(ddprun_pid "$job")"
finish "$job"
expect_preempted late
for r in 0 1; do
  grep -q "^ddprun: SIGUSR1 held for local rank $r until it handles it" \
    "$tmp/late.err" || die late "ddprun did not hold SIGUSR1 for local rank $r"
  grep -q "^\[rank$r\]:caught USR1 rank $r$" "$tmp/late.out" ||
    die late "rank $r's trap did not run"
  # The trap ran after the worker said it was ready: held, not lost.
  awk -v r="$r" '$0 == "[rank" r "]:rank " r " ready" { ready = NR }
    $0 == "[rank" r "]:caught USR1 rank " r { caught = NR }
    END { exit !(ready > 0 && caught > ready) }' "$tmp/late.out" ||
    die late "rank $r: no 'ready' line before 'caught'"
done
grep -q "killed by signal SIGUSR1\|sent anyway" "$tmp/late.err" &&
  die late "a worker was killed by the held signal"
echo "ok late: SIGUSR1 held until both traps were installed; exit 75"

# ---- never: sent anyway after --signal-hold -----------------------------
start 60 never "$ddprun" --standalone --nproc-per-node 2 --max-restarts 2 \
  "$sigs" --signal-hold 1 sleep 50
job=$bg
wait_for 20 "$tmp/never.err" '^ddprun: \[rank1\] local rank 1' ||
  die never "the workers did not start"
t0=$(date +%s%N)
kill -USR1 "$(ddprun_pid "$job")"
finish "$job"
ms=$((($(date +%s%N) - t0) / 1000000))
expect_preempted never
# The first worker killed ends the job: the other may be stopped first.
grep -q "does not handle SIGUSR1 .* (--signal-hold): sent anyway" \
  "$tmp/never.err" || die never "ddprun did not say it sent it anyway"
grep -q "preempted (SIGUSR1, which the worker does not handle)" \
  "$tmp/never.err" || die never "the rendezvous did not name the preemption"
# Held until a second after the workers' start: never much less.
[ "$ms" -ge 500 ] || die never "the job ended $ms ms after SIGUSR1: not held"
echo "ok never: sent anyway after --signal-hold 1 ($ms ms); exit 75"

# ---- at-once: --signal-hold 0 ------------------------------------------
start 60 atonce "$ddprun" --standalone --nproc-per-node 2 --max-restarts 2 \
  "$sigs" --signal-hold 0 "$worker" 5
job=$bg
wait_for 20 "$tmp/atonce.err" '^ddprun: \[rank1\] local rank 1' ||
  die atonce "the workers did not start"
kill -USR1 "$(ddprun_pid "$job")"
finish "$job"
expect_preempted atonce
grep -q "killed by signal SIGUSR1" "$tmp/atonce.err" ||
  die atonce "no worker was killed by SIGUSR1"
grep -q "caught USR1" "$tmp/atonce.out" && die atonce "a trap ran"
grep -q "held for local rank" "$tmp/atonce.err" && die atonce "held"
echo "ok at-once: --signal-hold 0 sends at once; exit 75"

# ---- early: before node 0's workers exist --------------------------------
start 60 srv "$rdzv" --host 127.0.0.1 --port 0 --port-file "$tmp/port" \
  --nnodes 2 --rdzv-id sighold --log-level debug
wait_for 20 "$tmp/port" '^[0-9]+$' || die srv "no port file"
port=$(cat "$tmp/port")
node=(--nnodes 2 --nproc-per-node 2 --rdzv-endpoint "127.0.0.1:$port"
      --rdzv-id sighold "$sigs")
start 60 n0 "$ddprun" "${node[@]}" --node-rank 0 "$worker" 0.5
j0=$bg
wait_for 20 "$tmp/srv.err" 'joined round 1 \(1 of 2\)' ||
  die srv "node 0 did not join"
kill -USR1 "$(ddprun_pid "$j0")"
wait_for 20 "$tmp/n0.err" "SIGUSR1 arrived while no workers run" ||
  die n0 "node 0 did not keep SIGUSR1 for its workers"
start 60 n1 "$ddprun" "${node[@]}" --node-rank 1 "$worker" 0.5
j1=$bg
finish "$j0"
expect_preempted n0
finish "$j1"
[ "$rc" -eq 75 ] || die n1 "node 1's ddprun exited $rc, not 75"
for r in 0 1; do
  grep -q "^\[rank$r\]:caught USR1 rank $r$" "$tmp/n0.out" ||
    die n0 "rank $r's trap did not run"
done
echo "ok early: kept while joining, caught by the workers started later"

# ---- blocked: a block is not a handler -----------------------------------
start 60 blocked env DDPRUN_SIGHOLD_TEST_BLOCKED_MS=3600000 "$ddprun" \
  --standalone --nproc-per-node 2 "$sigs" \
  python3 "$(dirname "$0")/blocks_usr1.py" "$tmp/go"
job=$bg
for r in 0 1; do
  wait_for 20 "$tmp/blocked.out" "^\[rank$r\]:rank $r blocked" ||
    die blocked "rank $r never blocked SIGUSR1"
done
kill -USR1 "$(ddprun_pid "$job")"
for r in 0 1; do
  wait_for 20 "$tmp/blocked.err" "^ddprun: SIGUSR1 held for local rank $r" ||
    die blocked "SIGUSR1 was not held for local rank $r, which only blocks it"
done
: >"$tmp/go"
finish "$job"
expect_preempted blocked
for r in 0 1; do
  grep -q "^\[rank$r\]:caught USR1 rank $r$" "$tmp/blocked.out" ||
    die blocked "rank $r's handler did not run"
done
grep -q "killed by signal SIGUSR1" "$tmp/blocked.err" &&
  die blocked "a worker was killed by the held signal"
echo "ok blocked: SIGUSR1 held through the workers' block, caught after it"

# ---- starting: before ddprun handles signals at all -----------------------
if ! command -v strace >/dev/null 2>&1 ||
   ! strace -o /dev/null -e trace=none true 2>/dev/null; then
  echo "skipped starting: strace is missing or cannot trace here"
else
  head -c 32 /dev/urandom >"$tmp/secret"
  # (LeakSanitizer cannot run under ptrace: off for this run.)
  start 60 starting env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -o /dev/null -P "$tmp/secret" \
    -e inject=openat:delay_enter=1500000:when=1 \
    "$ddprun" --standalone --nproc-per-node 2 "$sigs" \
    --secret-file "$tmp/secret" "$worker" 0.5
  job=$bg
  # timeout -> env -> strace -> ddprun (env executes strace), once it has
  # blocked SIGUSR1 (bit 0x200 of SigBlk), still opening its secret file.
  deadline=$((SECONDS + 10))
  until p=$(pgrep -P "$(pgrep -P "$job" | head -n 1)" | head -n 1) &&
        [ -n "$p" ] &&
        blk=$(awk '/^SigBlk:/ {print $2}' "/proc/$p/status" 2>/dev/null) &&
        [ -n "$blk" ] && (( 0x$blk & 0x200 )); do
    [ "$SECONDS" -lt "$deadline" ] || die starting "ddprun never blocked SIGUSR1"
    sleep 0.02
  done
  kill -USR1 "$p"
  finish "$job"
  expect_preempted starting
  grep -q "SIGUSR1 arrived while no workers run" "$tmp/starting.err" ||
    die starting "ddprun did not keep the early SIGUSR1"
  for r in 0 1; do
    grep -q "^\[rank$r\]:caught USR1 rank $r$" "$tmp/starting.out" ||
      die starting "rank $r's trap did not run"
  done
  echo "ok starting: SIGUSR1 during ddprun's start waited and reached the workers"
fi
echo "PASS: $name"
