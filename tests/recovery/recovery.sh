#!/usr/bin/env bash
# Elastic recovery of ddprun end to end, on 127.0.0.1: a standalone
# ddprun-rdzv (port 0, read from its log through a FIFO) and one ddprun per
# node, training with train (2 workers per node) unless said otherwise.
#
#   identical       a worker of node 1 SIGKILLed between checkpoints: the
#                   group restarts, resumes and ends with the weights of an
#                   uninterrupted run.
#   identical_local a checkpoint directory per node, and node 0 slower to
#                   stop than node 1: every node keeps its node rank across
#                   the restart, so rank 0 finds its checkpoint again.
#   budget          --max-restarts 2 and a worker that always fails: three
#                   attempts on every node (RESTART_COUNT 0, 1, 2 on every
#                   rank), then every ddprun exits with the worker's code.
#   nodeloss        --nnodes 2:3 and --global-batch 48, one of three agents
#                   SIGKILLed after the checkpoint of step 5: the job
#                   resumes from it on two nodes (world 4, batch 12 per rank
#                   instead of 8) and ends with the loss of an uninterrupted
#                   2x2 run; the lost agent's workers die.
#   nodeloss_batch  the same with --batch 8 instead (48 on world 6): train
#                   keeps the checkpoint's global batch 48 on world 4 (12
#                   per rank) and says so; same loss.
#   nodeloss_fixed  --nnodes 3, the same kill, no replacement within the
#                   server's --replacement-timeout 3: the survivors stop with
#                   exit 3 and a message that names the lost node and the
#                   wait.
#   replace         --nnodes 3, the same kill, and a new ddprun (a
#                   replacement, as Kubernetes starts a pod again) joins
#                   within the wait: the job goes on in generation 2 on 3
#                   nodes without spending its budget of 0, and ends 0.
#   latejoin        --nnodes 2:3 running on two nodes: a third joins, the
#                   group restarts to take it in (world 6, no restart spent).
#   hang            a worker SIGSTOPped mid-step with --hang-timeout 3: the
#                   group restarts and completes with the uninterrupted
#                   weights; the rank named is the stopped one (not a rank
#                   that waits for it in an all-reduce), with its last step
#                   and every local rank's stack; the server restarts the
#                   group on that verdict at once, without holding it as
#                   the echo of another failure.
#   hang_busy       hangprobe (train's progress reports): rank 3 busy-loops
#                   at a step while the others wait, blocked: rank 3 is the
#                   one named (busy on the CPU), at S (bounded by S + 10 s),
#                   and every rank's stack is in the summary and in
#                   stack.txt.
#   hang_busy_cpu   the same in a program that does not report: rank 3,
#                   busy while its peers use no CPU, is named.
#   hang_sleep_cpu  ... rank 3 sleeps instead: named, by its stack.
#   hang_spin       train itself, rank 3 busy-looping at step 150
#                   (DDPRUN_SPIN_TEST): rank 3 named, busy on the CPU.
#   root_cause      --max-restarts 0, a worker SIGKILLed while its agent is
#                   slow to notice: the peers that lost it are reported
#                   first, but every ddprun exits 137 naming the SIGKILL.
#
# Where a job must be caught mid-run, its workers start through a wrapper
# that reads $tmp/hold: while the file holds a number, workers started then
# keep each finished checkpoint that many ms before its rename
# (DDPRUN_CKPT_TEST_DELAY_MS), which holds the job at a known step.
#
# Usage: recovery.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL [HANGPROBE]
set -u
mode=${1:?usage: recovery.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL [HANGPROBE]}
rdzv=${2:?} ddprun=${3:?} train=${4:?} rtool=${5:?} hangprobe=${6:-}
name=$mode
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# shellcheck source=job.sh
. "$(dirname "$0")/job.sh"

t_start=$(date +%s.%N)
id=rec_${mode}_$$

case $mode in
identical)
  ref ref
  agent_env=(DDPRUN_CKPT_TEST_KILL_AT=12:3)
  server srv 2 1
  s=$srv_pid
  # The nodes share a checkpoint directory (identical_local: one each).
  agent n0 2 1 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
  a0=$agent_pid
  agent n1 2 1 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
  a1=$agent_pid
  finish "$a0"; expect_rc n0 "$rc" 0
  finish "$a1"; expect_rc n1 "$rc" 0
  finish "$s"; expect_rc srv "$rc" 0
  all n0 n1
  grep -q "rank 3: test hook: killing this worker after step 12" "$tmp/all" ||
    fail "rank 3 was not killed after step 12"
  # Rank 3 was on node 1: its agent spawned it in generation 1.
  k=
  for n in n0 n1; do
    holds_rank "$(ev $n)" 1 3 && k=$n
  done
  [ -n "$k" ] || fail "no agent spawned rank 3 in generation 1"
  events "$(ev $k)" assign | grep -q '"gen":1,"node_rank":1,' ||
    fail "rank 3 was not on node 1: $(events "$(ev $k)" assign)"
  events "$(ev $k)" exit | grep -q '"gen":1,"rank":3,.*"signal":9,' ||
    fail "node 1 recorded no SIGKILL of rank 3"
  [ "$(events "$(ev srv)" restart | field restart_count)" = 1 ] ||
    fail "the server did not restart exactly once"
  # The restart names the SIGKILL, not a peer's exit 4 after losing rank 3.
  events "$(ev srv)" restart | grep -q '"reason":"restart 1 of 1: rank 3 .* was killed by signal SIGKILL' ||
    fail "the restart does not name rank 3's SIGKILL:" \
      "$(events "$(ev srv)" restart | sed -n 's/.*"reason":"\([^"]\{0,160\}\).*/\1/p')"
  for n in n0 n1; do
    [ "$(spawn_gens "$(ev $n)")" = "1 1 2 2 " ] ||
      fail "$n spawned generations $(spawn_gens "$(ev $n)"), not 1 1 2 2"
    events "$(ev $n)" assign | grep -q '"gen":2,.*"restart_count":1' ||
      fail "$n: generation 2 was not restart 1"
  done
  for n in n0 n1; do
    grep -q "^ddprun: restarting the workers (generation 2, restart 1 of 1)" \
      "$tmp/$n.err" || fail "$n did not say that it restarts"
  done
  grep -q "resuming at step 10 of 40" "$tmp/all" ||
    fail "the restarted group did not resume at step 10"
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] ||
    fail "weights $crc after the restart differ from the uninterrupted $ref_crc"
  echo "identical: rank 3 killed after step 12, resumed at 10: $crc = $ref_crc"
  ;;

identical_local)
  # A checkpoint directory per node, as on hosts with local disks: rank 0
  # writes into its node's. Rank 3 (node 1) is SIGKILLed while rank 0
  # keeps its checkpoint of step 10 for 1 s before the rename; rank 0
  # ignores SIGTERM (a worker finishing its checkpoint), so node 0 stops a
  # second after node 1. Every node must keep its node rank across the
  # restart, so that rank 0 finds its checkpoint again.
  ref ref
  echo 1000 >"$tmp/hold"
  server srv 2 1
  s=$srv_pid
  for n in n0 n1; do
    agent $n 2 1 /bin/sh -c '[ "$RANK" = 0 ] && trap "" TERM; exec "$@"' \
      "$tmp/noterm" \
      "${hold_wrapper[@]}" "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt.$n"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  k=$(holder 1 3 n0 n1) || exit 1
  r0=$(holder 1 0 n0 n1) || exit 1
  wait_for "$wait_secs" "$tmp/$r0.err" \
    "ckpt-0000000010.bin.tmp.* is written; waiting" ||
    { show "$r0"; fail "rank 0 never reached its checkpoint of step 10"; }
  rm -f "$tmp/hold"
  kill -KILL "$(events "$(ev $k)" spawn | grep '"gen":1,"rank":3,' | field pid)"
  for n in n0 n1; do
    w=${apid[$n]}
    finish "$w"; expect_rc $n "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  all n0 n1
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] || fail "weights $crc differ from $ref_crc"
  r0b=$(holder 2 0 n0 n1) || exit 1
  for n in n0 n1; do
    r1=$(events "$(ev $n)" assign | grep '"gen":1,' | field node_rank)
    r2=$(events "$(ev $n)" assign | grep '"gen":2,' | field node_rank)
    [ "$r1" = "$r2" ] ||
      fail "$n was node $r1 in generation 1 and node $r2 after the" \
        "restart, so rank 0 moved away from its checkpoints:" \
        "$(grep 'no checkpoint in\|resuming at' "$tmp/$r0b.err" | tail -n 1)"
  done
  grep -q "resuming at step 10 of 40 .* from $tmp/ckpt.$r0/" "$tmp/all" ||
    fail "the restarted group did not resume at step 10"
  echo "identical_local: resumed at step 10 from $r0's directory: $crc"
  ;;

budget)
  server srv 2 2
  s=$srv_pid
  rec=$tmp/records
  agent n0 2 2 "$rtool" fail-worker "$rec" 4 3 13 "$wait_secs"
  a0=$agent_pid
  agent n1 2 2 "$rtool" fail-worker "$rec" 4 3 13 "$wait_secs"
  a1=$agent_pid
  finish "$a0"; expect_rc n0 "$rc" 13
  finish "$a1"; expect_rc n1 "$rc" 13
  finish "$s"; expect_rc srv "$rc" 13
  for n in n0 n1; do
    [ "$(spawn_gens "$(ev $n)")" = "1 1 2 2 3 3 " ] ||
      fail "$n spawned generations $(spawn_gens "$(ev $n)"), not 1 1 2 2 3 3"
    [ "$(events "$(ev $n)" assign | field restart_count | tr '\n' ' ')" = \
      "0 1 2 " ] || fail "$n: the attempts' restart counts are not 0 1 2"
    grep -q "^ddprun: job failed with exit code 13$" "$tmp/$n.err" ||
      { show $n; fail "$n did not say that the job failed"; }
    # The root cause: the node's own record, or the server's account.
    grep -A 1 "^ddprun: root cause (first failure" "$tmp/$n.err" |
      grep -q "rank 3 .*exited with code 13" ||
      { show $n; fail "$n did not name the root cause"; }
    events "$(ev $n)" stop | grep -q '"exit_code":13' ||
      fail "$n: no stop event with code 13"
  done
  for r in 0 1 2 3; do
    got=$(awk -v r=$r '$2 == r { print $1 }' "$rec" | sort -n | tr '\n' ' ')
    [ "$got" = "0 1 2 " ] ||
      fail "rank $r saw TORCHELASTIC_RESTART_COUNT $got, not 0 1 2"
  done
  [ "$(events "$(ev srv)" failure | grep -c '"rank":3,"exit_code":13')" = 3 ] ||
    fail "the server did not record 3 failures of rank 3"
  events "$(ev srv)" stop | grep -q '"exit_code":13,"reason":"restart budget of 2 spent; root cause: rank 3 ' ||
    fail "the server's stop event does not say the budget was spent"
  echo "budget: 3 attempts on both nodes, counts 0 1 2 on ranks 0-3, exit 13"
  ;;

nodeloss | nodeloss_batch | nodeloss_fixed | replace)
  if [ "$mode" = nodeloss ] || [ "$mode" = nodeloss_batch ]; then
    nn=2:3
    # One global batch for every world size: generation 2 (world 4)
    # resumes from generation 1's (world 6) checkpoint of step 5, held in
    # the one of step 10.
    for i in "${!train_args[@]}"; do
      [ "${train_args[$i]}" = --batch ] && b=$i && train_args[$i]=--global-batch &&
        train_args[$i + 1]=48
    done
    ref ref
    ref_loss=$(loss_of "$tmp/all")
    # nodeloss_batch: --batch 8 on world 6, whose global batch train keeps
    # on world 4 as the elastic job's (DDPRUN_MIN_NNODES, _MAX_).
    [ "$mode" = nodeloss_batch ] && train_args[$b]=--batch &&
      train_args[$b + 1]=8
    echo 30000@10 >"$tmp/hold"
    held_step=10
  else
    nn=3
    echo 30000 >"$tmp/hold"
    replace_secs=3
    [ "$mode" = replace ] && replace_secs=60
  fi
  server srv "$nn" 0
  s=$srv_pid
  for n in n0 n1 n2; do
    agent $n "$nn" 0 "${hold_wrapper[@]}" "$train" "${train_args[@]}" \
      --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1 n2
  held n0 n1 n2
  rm -f "$tmp/hold"
  # The victim: the agent of node rank 1.
  v=
  for n in n0 n1 n2; do
    events "$(ev $n)" assign | grep -q '"gen":1,"node_rank":1,' && v=$n
  done
  [ -n "$v" ] || fail "no agent holds node rank 1"
  vw=${apid[$v]}
  vpid=$(child_of "$vw") || exit 1
  victims=$(events "$(ev $v)" spawn | field pid | tr '\n' ' ')
  t_kill=$(date +%s.%N)
  kill -KILL "$vpid"
  finish "$vw"; expect_rc $v "$rc" 137
  # The dead agent's workers (and its watchdog) go away by themselves.
  # shellcheck disable=SC2086
  left=$("$rtool" gone 10 $victims) ||
    fail "workers of the killed agent $v still run 10 s after the kill: $left"
  gone_s=$(elapsed "$t_kill")
  survivors=
  for n in n0 n1 n2; do [ $n != "$v" ] && survivors="$survivors $n"; done
  if [ "$mode" = replace ]; then
    # The replacement: a new ddprun of the job, as a restarted pod is.
    agent n3 "$nn" 0 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
    apid[n3]=$agent_pid
    survivors="$survivors n3"
  fi
  want=0
  [ "$mode" = nodeloss_fixed ] && want=3
  for n in $survivors; do
    w=${apid[$n]}
    finish "$w"; expect_rc $n "$rc" $want
  done
  finish "$s"; expect_rc srv "$rc" $want
  events "$(ev srv)" node_lost | grep -q '"node_rank":1,' ||
    fail "the server recorded no loss of node 1"
  # shellcheck disable=SC2086
  all $survivors
  if [ "$mode" = nodeloss ] || [ "$mode" = nodeloss_batch ]; then
    for n in $survivors; do
      events "$(ev $n)" restart | grep -q "node 1 ('[^']*') lost" ||
        fail "$n was not restarted because node 1 was lost"
      events "$(ev $n)" assign | grep -q '"gen":1,.*"nnodes":3,"world_size":6,' ||
        fail "$n: generation 1 is not 3 nodes of world 6"
      events "$(ev $n)" assign | grep -q '"gen":2,.*"nnodes":2,"world_size":4,' ||
        fail "$n: generation 2 is not 2 nodes of world 4"
    done
    [ "$(world_of "$tmp/all")" = 4 ] ||
      fail "the job did not end on world 4: $(grep final "$tmp/all")"
    grep -q "resuming at step 5 of 40" "$tmp/all" ||
      fail "generation 2 did not resume from the checkpoint of step 5"
    grep -q "batch 12 x 4 ranks x 1 accum = 48," "$tmp/all" ||
      fail "generation 2 did not run batch 12 on 4 ranks"
    if [ "$mode" = nodeloss_batch ]; then
      grep -q "batch 8 x 6 ranks x 1 accum = 48," "$tmp/all" ||
        fail "generation 1 did not run --batch 8 on 6 ranks"
      grep -q "the elastic job (--nnodes 2:3) runs on 4 ranks now: keeping the checkpoint's global batch 48 with --batch 12 per rank (was 8)" \
        "$tmp/all" || fail "generation 2 did not say that it keeps the global batch"
      grep -q "cannot be split over" "$tmp/all" &&
        fail "a warning about sizes that 2:3 nodes of 2 never reach"
    fi
    loss=$(loss_of "$tmp/all")
    awk -v a="$loss" -v b="$ref_loss" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(a != "" && b != "" && d <= 1e-4 * b) }' ||
      fail "final loss $loss after the resume on world 4, $ref_loss uninterrupted"
    echo "$mode: node 1 lost, the job resumed at step 5 on world 4 and" \
      "ended with loss $loss (uninterrupted: $ref_loss)"
  elif [ "$mode" = replace ]; then
    for n in $survivors; do
      events "$(ev $n)" assign | grep -q '"gen":2,.*"nnodes":3,"world_size":6,' ||
        fail "$n: generation 2 is not 3 nodes of world 6"
    done
    events "$(ev srv)" restart | grep -q "waiting up to 60 s for a replacement" ||
      fail "the server did not wait for a replacement"
    grep -q '"restart_count":0' "$(ev srv)" && ! grep -q '"restart_count":1' "$(ev srv)" ||
      fail "the replacement spent the budget"
    grep -q '^\[rank0\]:final ' "$tmp/all" || fail "the job did not end"
    echo "replace: node 1 lost, a replacement joined, the job ended 0 on 3 nodes"
  else
    for n in $survivors; do
      grep -q "node 1 ('[^']*') lost (.*); 2 nodes remain and the job needs at least 3, and no replacement joined within 3 s" \
        "$tmp/$n.err" || { show $n; fail "$n did not say why it stopped"; }
    done
    events "$(ev srv)" stop | grep -q '"exit_code":3,.*node 1' ||
      fail "the server's stop event does not name node 1"
    echo "nodeloss_fixed: node 1 lost, both survivors exited 3"
  fi
  echo "the killed agent's workers were gone ${gone_s} s after the kill"
  ;;

latejoin)
  echo 30000 >"$tmp/hold"
  server srv 2:3 0
  s=$srv_pid
  for n in n0 n1; do
    agent $n 2:3 0 "${hold_wrapper[@]}" "$train" "${train_args[@]}" \
      --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  # Both nodes run (held at step 5); then the third comes.
  started 1 n0 n1
  held n0 n1
  events "$(ev srv)" round_complete | grep -q '"gen":1,"nnodes":2,' ||
    fail "generation 1 is not a round of 2 nodes"
  rm -f "$tmp/hold"
  agent n2 2:3 0 "${hold_wrapper[@]}" "$train" "${train_args[@]}" \
    --ckpt-dir "$tmp/ckpt"
  apid[n2]=$agent_pid
  for n in n0 n1 n2; do
    w=${apid[$n]}
    finish "$w"; expect_rc $n "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  events "$(ev srv)" node_joined | grep -q '"gen":1,' ||
    fail "the server recorded no node joining generation 1"
  for n in n0 n1 n2; do
    events "$(ev $n)" assign | tail -n 1 |
      grep -q '"nnodes":3,"world_size":6,.*"restart_count":0' ||
      fail "$n: the last generation is not 3 nodes of world 6, restart 0"
  done
  all n0 n1 n2
  [ "$(world_of "$tmp/all")" = 6 ] ||
    fail "the job did not end on world 6: $(grep final "$tmp/all")"
  [ "$(grep -c '^\[rank0\]:final ' "$tmp/all")" = 1 ] ||
    fail "not exactly one final line"
  echo "latejoin: a third node taken in, the job ended on world 6"
  ;;

hang)
  # A longer job: rank 3 is stopped in the middle of its steps, where the
  # other ranks soon wait for it in an all-reduce. 1000 steps: a loaded
  # machine runs them at 30 ms, and each run must end within job_secs.
  train_args=(--layers 2 --width 128 --input-dim 32 --classes 8
    --samples 8192 --eval-samples 256 --batch 16 --steps 1000 --log-every 50
    --seed 11 --ckpt-every 100)
  ref ref
  server srv 2 1
  s=$srv_pid
  agent_opts=(--hang-timeout 3)
  for n in n0 n1; do
    agent $n 2 1 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  k=$(holder 1 3 n0 n1) || exit 1
  r0=$(holder 1 0 n0 n1) || exit 1
  p3=$(events "$(ev $k)" spawn | grep '"gen":1,"rank":3,' | field pid)
  wait_for "$wait_secs" "$tmp/$r0.out" '^\[rank0\]:step 300/1000 ' ||
    { show $r0; fail "rank 0 never reached step 300"; }
  kill -STOP "$p3"
  t_stop=$(date +%s.%N)
  wait_for "$wait_secs" "$(ev srv)" '"event":"restart"' ||
    fail "no restart after the hang"
  restart_s=$(elapsed "$t_stop")
  for n in n0 n1; do
    w=${apid[$n]}
    finish "$w"; expect_rc $n "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  all n0 n1
  first=$(events "$(ev srv)" failure | head -n 1)
  named=$(grep "made no progress" "$tmp/all")
  echo "rank 3 (pid $p3) stopped after step 300 of rank 0; restart" \
    "${restart_s} s later; ddprun said:"
  echo "$named"
  echo "$named" | grep -q "^ddprun: rank [0-3] (local rank [01], pid [0-9]*) made no progress for [0-9.]* s after step [0-9]*; treating it as hung$" ||
    fail "no hung rank and its last step were named"
  echo "$first" | grep -q '"gen":1,"rank":[0-3],"exit_code":4,.*hung: no progress for [0-9.]* s after step [0-9]* (--hang-timeout 3.0 s)' ||
    fail "the server's first failure is not a hang (exit 4): $first"
  grep -q "resuming at step [1-9][0-9]* of 1000" "$tmp/all" ||
    fail "the restarted group did not resume from a checkpoint"
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] || fail "weights $crc differ from $ref_crc"
  echo "hang: the group restarted and completed: $crc"

  # The rank that was stopped is the one to blame, not a rank that waits
  # for it in a collective.
  step=$(echo "$first" | sed -n 's/.*hung: no progress for [0-9.]* s after step \([0-9]*\).*/\1/p')
  echo "$first" | grep -q '"gen":1,"rank":3,"exit_code":4,' ||
    fail "the hang was blamed on another rank than the stopped rank 3:" \
      "$(echo "$first" | sed -n 's/.*"what":"\([^"]*\)".*/\1/p')"
  [ -n "$step" ] && [ "$step" -ge 300 ] ||
    fail "rank 3's last step ($step) is not given or before 300"
  echo "$named" | grep -q "rank 3 (local rank 1, pid $p3) made no progress" ||
    fail "ddprun did not name rank 3 (pid $p3) as hung"
  grep -q "^ddprun: rank 3 is to blame: its processes are stopped" \
    "$tmp/$k.err" || fail "rank 3 is not blamed for being stopped"
  # Both local ranks' stacks, grouped, and in full beside their logs.
  grep -A2 "^ddprun: where the ranks of this node are (stacks by " \
    "$tmp/$k.err" | grep -q "^ddprun:   rank" ||
    fail "no stacks of the ranks of $k: $(grep -A3 'where the ranks' "$tmp/$k.err")"
  for r in 2 3; do
    [ -s "$tmp/log.$k/$id/attempt_0/$r/stack.txt" ] ||
      fail "no stack.txt of rank $r"
  done
  echo "hang: rank 3 named, after step $step;" \
    "$(grep -A3 '^ddprun: where the ranks' "$tmp/$k.err" | tr '\n' ' ')"

  # The verdict on a stopped worker is the root cause itself, not the echo
  # of another failure: the server restarts on it in the same step that
  # records it, where an echo would be held for the heartbeat timeout
  # (2 s here). The bound is half that hold.
  f_t=$(echo "$first" | field time)
  r_t=$(events "$(ev srv)" restart | head -n 1 | field time)
  late=$(awk -v f="$f_t" -v r="$r_t" 'BEGIN { printf "%.3f", r - f }')
  echo "hang: the server restarted $late s after the first verdict"
  awk -v l="$late" 'BEGIN { exit !(l < 1.0) }' ||
    fail "the server restarted $late s after the hang verdict" \
      "($(echo "$first" | sed -n 's/.*"what":"\([^"]*\)".*/\1/p'))," \
      "not at once"
  ;;

hang_auto_eval | hang_auto_sleep)
  # --hang-timeout auto (the default), its floor 2 s here: rank 3 (node 1)
  # reports its steps, then at step 100 spins for 8 s (an evaluation) or
  # sleeps for good, while the other ranks wait, blocked. The evaluation
  # is work: no verdict, every rank goes on and the job ends 0; node 0's
  # agent, whose ranks only wait, says so once and leaves the verdict to
  # node 1. The sleeper is named at once, as under --hang-timeout.
  how=spin
  [ "$mode" = hang_auto_sleep ] && how=sleep
  program=("$hangprobe" --rank 3 --at 100 --how "$how" --for 8000 --steps 300
    --marker "$tmp/")
  server srv 2 0
  s=$srv_pid
  agent_env=(DDPRUN_TEST_HANG_FLOOR_MS=2000)
  for n in n0 n1; do
    agent $n 2 0 "${program[@]}"
    apid[$n]=$agent_pid
  done
  want_rc=0
  [ "$mode" = hang_auto_sleep ] && want_rc=4
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc $n "$rc" $want_rc
  done
  finish "$s"; expect_rc srv "$rc" $want_rc
  all n0 n1
  k=$(holder 1 3 n0 n1) || exit 1
  o=n0
  [ "$k" = n0 ] && o=n1
  grep -q "hangprobe: rank 3 stuck at step 100 ($how)" "$tmp/all" ||
    fail "rank 3 did not get stuck"
  if [ "$mode" = hang_auto_eval ]; then
    ! grep -q "is to blame\|treating it as hung" "$tmp/all" ||
      fail "a long evaluation was called a hang: $(grep 'to blame' "$tmp/all")"
    grep -q "every rank of this node has made no progress for [0-9]* s, waiting; --hang-timeout auto leaves the verdict to the node whose rank they wait for" \
      "$tmp/$o.err" || { show "$o"; fail "$o did not say its ranks wait"; }
    echo "hang_auto_eval: an 8 s evaluation on rank 3 with auto's floor at 2 s:" \
      "no verdict, the job ended 0; $o said: $(grep -o 'every rank of this node.*waiting' "$tmp/$o.err" | head -n 1)"
  else
    grep -qE "^ddprun: rank 3 is to blame: it sleeps" "$tmp/$k.err" ||
      fail "rank 3 is not blamed for sleeping: $(grep 'to blame' "$tmp/all")"
    grep -q "(--hang-timeout auto: [0-9]* s)" "$tmp/$k.err" ||
      fail "the verdict does not say it came from auto"
    echo "hang_auto_sleep: $(grep -m1 'made no progress' "$tmp/$k.err")"
  fi
  ;;

hang_busy | hang_busy_cpu | hang_sleep_cpu | hang_spin)
  # Rank 3 (node 1) gets stuck at step 150 (1.5 s in), the others wait for
  # it, blocked; --max-restarts 0: the job ends with exit 4 on the verdict.
  # hang_spin: train itself, whose rank 3 busy-loops at its step 150
  # (DDPRUN_SPIN_TEST).
  how=spin
  [ "$mode" = hang_sleep_cpu ] && how=sleep
  probe_args=(--rank 3 --at 150 --how "$how" --marker "$tmp/")
  [ "$mode" = hang_busy ] || probe_args+=(--no-report)
  program=("$hangprobe" "${probe_args[@]}")
  case $mode in
  hang_busy) want="it is busy on the CPU" ;;
  hang_busy_cpu) want="it is busy on the CPU while its peers wait" ;;
  hang_spin)
    # Busy, or (on a host so loaded that the spin gets under a quarter of
    # a CPU) out of the collective its peer waits in: rank 3 either way.
    want="(it is busy on the CPU|it is not in the collective its peers wait in)"
    agent_env=(DDPRUN_SPIN_TEST=3@150)
    program=("$train" --layers 2 --width 128 --input-dim 32 --classes 8
      --samples 8192 --eval-samples 256 --batch 16 --steps 2000
      --log-every 50 --seed 11 --ckpt-dir "$tmp/ckpt")
    ;;
  *) want="it sleeps" ;;
  esac
  [ "$mode" = hang_spin ] || [ -n "$hangprobe" ] || fail "no hangprobe given"
  server srv 2 0
  s=$srv_pid
  agent_opts=(--hang-timeout 3)
  for n in n0 n1; do
    agent $n 2 0 "${program[@]}"
    apid[$n]=$agent_pid
  done
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc $n "$rc" 4
  done
  finish "$s"; expect_rc srv "$rc" 4
  all n0 n1
  k=$(holder 1 3 n0 n1) || exit 1
  # Both nodes' agents give a verdict at about the hang timeout; which
  # reaches the server first depends on load. The other node's verdict on
  # ranks that only wait is held as an echo, so the job's root cause is
  # rank 3's hang whatever the order.
  r3=$(events "$(ev srv)" failure |
    grep '"gen":1,"rank":3,"exit_code":4,"signal":0,"kind":"hang"' | head -n 1)
  [ -n "$r3" ] || fail "no failure reports rank 3's hang:" \
    "$(events "$(ev srv)" failure | sed -n 's/.*"what":"\([^"]*\)".*/\1/p')"
  events "$(ev srv)" stop | grep -q '"exit_code":4,"reason":"[^"]*rank 3 ' ||
    fail "the server's stop does not name rank 3:" \
      "$(events "$(ev srv)" stop | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p')"
  grep -qE "^ddprun: rank 3 is to blame: $want" "$tmp/$k.err" ||
    fail "rank 3 is not blamed with '$want': $(grep 'to blame' "$tmp/all")"
  [ "$(grep -c 'is to blame' "$tmp/all")" = 1 ] ||
    fail "more than one rank blamed: $(grep 'to blame' "$tmp/all")"
  if [ "$mode" = hang_spin ]; then
    grep -q "rank 3: test hook: .* step 150 (DDPRUN_SPIN_TEST)" "$tmp/all" ||
      fail "rank 3 did not announce its spin at step 150"
    # From the spin's start: rank 3's last report (its step 149), as the
    # verdict gives it ("for X s after step N").
    took=$(sed -n 's/.*made no progress for \([0-9.]*\) s after step.*/\1/p' \
      "$tmp/$k.err" | head -n 1)
    [ -n "$took" ] || fail "the verdict does not say for how long"
  else
    stuck=$(sed -n 's/^.*hangprobe: rank 3 stuck at step 150 ([a-z]*) at \([0-9.]*\)$/\1/p' \
      "$tmp/all" | head -n 1)
    [ -n "$stuck" ] || fail "rank 3 did not say when it got stuck"
    t_named=$(echo "$r3" | field time)
    took=$(awk -v a="$stuck" -v b="$t_named" 'BEGIN { printf "%.2f", b - a }')
  fi
  # Named at the hang timeout (3 s); the bound only catches a verdict
  # that never comes in time.
  awk -v t="$took" 'BEGIN { exit !(t <= 13.0) }' ||
    fail "rank 3 was named $took s after it got stuck, not within 3 + 10 s"
  grep -A2 "^ddprun: where the ranks of this node are (stacks by " \
    "$tmp/$k.err" | grep -q "^ddprun:   rank.* 3: " ||
    fail "no stack of rank 3: $(grep -A3 'where the ranks' "$tmp/$k.err")"
  [ -s "$tmp/log.$k/$id/attempt_0/3/stack.txt" ] || fail "no stack.txt of rank 3"
  echo "$mode: rank 3 named $took s after it got stuck ($how):"
  grep -A3 "^ddprun: rank 3 is to blame" "$tmp/$k.err"
  ;;

root_cause)
  # Rank 3 is SIGKILLed while its agent is slow (stopped) to notice; its
  # peers on the other node exit 4 (lost rank 3) and are reported first.
  # The root cause stays the SIGKILL of rank 3: every ddprun exits 137.
  train_args=(--layers 2 --width 128 --input-dim 32 --classes 8
    --samples 8192 --eval-samples 256 --batch 16 --steps 2000 --log-every 50
    --seed 11)
  server srv 2 0
  s=$srv_pid
  for n in n0 n1; do
    agent $n 2 0 "$train" "${train_args[@]}" --ckpt-dir "$tmp/ckpt"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  k=$(holder 1 3 n0 n1) || exit 1
  r0=$(holder 1 0 n0 n1) || exit 1
  [ "$k" != "$r0" ] || fail "ranks 0 and 3 on one node"
  kw=${apid[$k]}
  kpid=$(child_of "$kw") || exit 1
  p3=$(events "$(ev $k)" spawn | grep '"gen":1,"rank":3,' | field pid)
  wait_for "$wait_secs" "$tmp/$r0.out" '^\[rank0\]:step 300/2000 ' ||
    { show $r0; fail "rank 0 never reached step 300"; }
  kill -STOP "$kpid"
  kill -KILL "$p3"
  wait_for "$wait_secs" "$(ev srv)" '"event":"failure"'
  got=$?
  kill -CONT "$kpid"
  [ "$got" -eq 0 ] || fail "the server recorded no failure"
  for n in n0 n1; do
    w=${apid[$n]}
    finish "$w"; expect_rc $n "$rc" 137
  done
  finish "$s"; expect_rc srv "$rc" 137
  for n in n0 n1; do
    grep -A 1 "^ddprun: root cause (first failure" "$tmp/$n.err" |
      grep -q "rank 3 .*killed by signal SIGKILL" ||
      fail "$n does not name the SIGKILL of rank 3 as the root cause"
  done
  ;;

*)
  fail "unknown mode $mode"
  ;;
esac
expect_no_leftovers
echo "PASS: $name ($(elapsed "$t_start") s)"
