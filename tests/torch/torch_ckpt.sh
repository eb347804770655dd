#!/usr/bin/env bash
# python/ddprun_ckpt in a real PyTorch DDP job (ddp_job.py --ddprun-ckpt 3:
# gloo on the CPU, 2 ranks, 20 steps; rank 0 saves every 3 steps, every
# rank resumes with load_latest()) whose worker is SIGKILLed mid-run, under
# ddprun --max-restarts 1. Skipped (77) where python3 cannot import torch
# with gloo (tests/torch/lib.sh).
#
#   reference  no checkpoint, no failure: the weights (CRC-32 of every
#              parameter), the same on both ranks.
#   kill       rank 1 is SIGKILLed before step 14: the group restarts,
#              resumes at step 12 and ends with the reference weights.
#   save       rank 0 is SIGKILLed inside its save of step 12, while
#              torch.save writes the temporary, with --max-restarts 0: the
#              job ends (exit 137) with checkpoints 3, 6 and 9 and the
#              temporary of step 12 under a name that is no checkpoint's.
#   rerun      the same job run again on that directory: it resumes at
#              step 9, its first save removes the dead writer's temporary,
#              and it ends with the reference weights.
#
# Each directory holds a damaged checkpoint of a later step (step_9999.pt)
# and a directory named as one (epoch9-step9998): every rank skips each
# with one line on stderr at each start, and neither is removed; a job
# leaves ckpt-0000000012.pt, ...15.pt and ...18.pt (keep 3) and no
# temporary. Each job runs under `ddprun --ckpt-dir DIR`, which gives the
# workers DDPRUN_CKPT_DIR (ddprun owns that variable: one inherited from
# its own environment never reaches them).
#
# Usage: torch_ckpt.sh DDPRUN
set -u
name=torch_ckpt
ddprun=${1:?usage: torch_ckpt.sh DDPRUN}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_job.py
# ddprun_ckpt from the checkout, without writing __pycache__ into it.
export PYTHONPATH=$here/../../python:$PYTHONPATH PYTHONDONTWRITEBYTECODE=1

# crcs TAG: the distinct weight CRCs of TAG's final lines, and how many.
crcs() {
  sed -n 's/^\(\[rank[0-9]*\]:\)\{0,1\}final crc=\(0x[0-9a-f]*\) .*/\2/p' \
    "$tmp/$1.out" | sort | uniq -c | awk '{print $2 " x" $1}' | tr '\n' ' '
}
common=(--standalone --nproc-per-node 2)
args=(--steps 20)

run 180 reference "$ddprun" "${common[@]}" "$job" "${args[@]}"
[ "$rc" -eq 0 ] || die reference "ddprun exited $rc"
want=$(crcs reference)
case $want in
  "0x"*" x2 ") ;;
  *) die reference "not one CRC on both ranks: $want" ;;
esac
echo "ok reference: $want"

# listing DIR: every entry of DIR, in byte order, on one line.
listing() {
  # shellcheck disable=SC2012  # names of our own making: no newline in them
  (cd "$1" && LC_ALL=C ls -A | tr '\n' ' ')
}

# plant DIR: a checkpoint directory with the garbage in it.
plant() {
  mkdir -p "$1/epoch9-step9998"
  echo "not a checkpoint" >"$1/step_9999.pt"
}

# skipped TAG DIR STARTS: each rank skipped the garbage of DIR once at each
# of its STARTS, and ddprun_ckpt said nothing else.
skipped() {
  local tag=$1 d=$2 n=$3 r
  for r in 0 1; do
    [ "$(grep -c "^\[rank$r\]:ddprun_ckpt: skipping $d/step_9999.pt: it does not load (" \
      "$tmp/$tag.err")" = "$n" ] ||
      die "$tag" "rank $r did not skip the damaged step_9999.pt $n time(s)"
    [ "$(grep -c "^\[rank$r\]:ddprun_ckpt: skipping $d/epoch9-step9998: not a regular file$" \
      "$tmp/$tag.err")" = "$n" ] ||
      die "$tag" "rank $r did not skip the directory epoch9-step9998 $n time(s)"
  done
  [ "$(grep -c "^\[rank[01]\]:ddprun_ckpt:" "$tmp/$tag.err")" = $((4 * n)) ] ||
    die "$tag" "other lines from ddprun_ckpt: $(grep "^\[rank[01]\]:ddprun_ckpt:" \
      "$tmp/$tag.err" | grep -v -e step_9999.pt -e epoch9-step9998)"
}

# resumed TAG STEP RESTART: both ranks ran as RESTART and resumed at STEP.
resumed() {
  local r
  for r in 0 1; do
    grep -q "^\[rank$r\]:rank $r of 2 local_rank $r restart $3$" "$tmp/$1.out" ||
      die "$1" "rank $r did not run as restart $3"
    grep -q "^\[rank$r\]:rank $r: resumed at step $2$" "$tmp/$1.out" ||
      die "$1" "rank $r did not resume at step $2"
  done
}

# ended TAG DIR: the reference weights, and the checkpoints DIR keeps.
ended() {
  [ "$rc" -eq 0 ] || die "$1" "ddprun exited $rc"
  [ "$(crcs "$1")" = "$want" ] ||
    die "$1" "weights $(crcs "$1"), the reference's $want"
  left=$(listing "$2")
  [ "$left" = ".ddprun ckpt-0000000012.pt ckpt-0000000015.pt ckpt-0000000018.pt epoch9-step9998 step_9999.pt " ] ||
    die "$1" "the directory holds $left"
}

d=$tmp/kill.ckpt
plant "$d"
run 180 kill "$ddprun" "${common[@]}" --ckpt-dir "$d" --ckpt-keep 3 --max-restarts 1 \
  "$job" "${args[@]}" --ddprun-ckpt 3 --kill-rank 1 --kill-step 14
grep -q "restart 1 of 1: rank 1 (local rank 1, pid [0-9]*) .*killed by signal SIGKILL" \
  "$tmp/kill.err" || die kill "the restart does not name rank 1's SIGKILL"
resumed kill 12 1
skipped kill "$d" 2
ended kill "$d"
echo "ok kill: rank 1 SIGKILLed before step 14, resumed at step 12, $want; left $left"

d=$tmp/save.ckpt
plant "$d"
run 180 save "$ddprun" "${common[@]}" --ckpt-dir "$d" --ckpt-keep 3 --max-restarts 0 \
  "$job" "${args[@]}" --ddprun-ckpt 3 --kill-rank 0 --kill-step 12 --kill-in-save
[ "$rc" -eq 137 ] || die save "ddprun exited $rc, not 137 (SIGKILL)"
grep -A1 "^ddprun: root cause (first failure):" "$tmp/save.err" |
  grep -q "rank 0 .*killed by signal SIGKILL" || die save "the root cause is not rank 0's SIGKILL"
skipped save "$d" 1
left=$(listing "$d")
[[ $left =~ ^\.ckpt-0000000012\.pt\.[A-Za-z0-9_-]*\.[0-9]+-[0-9a-f]{8}\.tmp\ \.ddprun\ ckpt-0000000003\.pt\ ckpt-0000000006\.pt\ ckpt-0000000009\.pt\ epoch9-step9998\ step_9999\.pt\ $ ]] ||
  die save "after the SIGKILL in the save of step 12, the directory holds $left"
echo "ok save: rank 0 SIGKILLed in its save of step 12; left $left"

run 180 rerun "$ddprun" "${common[@]}" --ckpt-dir "$d" --ckpt-keep 3 \
  "$job" "${args[@]}" --ddprun-ckpt 3
resumed rerun 9 0
skipped rerun "$d" 1
ended rerun "$d"
echo "ok rerun: resumed at step 9, $want; left $left"
echo "PASS: $name"
