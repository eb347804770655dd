#!/usr/bin/env bash
# ddprun --hang-timeout 5 on a PyTorch DDP job (ddp_hang.py, gloo, 2 ranks)
# whose rank 1 sleeps forever in step 5 while rank 0 waits for it in the
# all-reduce of its backward pass. Skipped (77) where python3 cannot import
# torch with gloo, and (plain, report) where py-spy is not installed
# (.ci/run installs both from PyPI: tests/torch/install_torch.sh).
#
#   plain    no change to the program: rank 1 is named, by the CPU time of
#            its processes and its stack, at the timeout after it began to
#            sleep (bounded by the timeout + 10 s: a verdict that never
#            comes, not a slow host);
#            py-spy's stacks show rank 1 at the sleep's line and rank 0 in
#            backward at its line; both are in stack.txt.
#   report   the program reports every step (import ddprun_progress): rank 1
#            alone is named, by its reports, as in plain.
#   nopyspy  PATH without py-spy (or any other tool): the summary says so
#            and shows the kernel's view; rank 1 is still named.
#
# Usage: torch_hang.sh MODE DDPRUN
set -u
mode=${1:?usage: torch_hang.sh MODE DDPRUN}
ddprun=${2:?}
name=torch_hang_$mode
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_hang.py
python=$(python3 -c 'import sys; print(sys.executable)')

pyspy=$(command -v py-spy 2>/dev/null) ||
  pyspy=${DDPRUN_TORCH_PATH:+$DDPRUN_TORCH_PATH/py-spy/bin/py-spy}
if [ "$mode" != nopyspy ]; then
  [ -n "$pyspy" ] && [ -x "$pyspy" ] && "$pyspy" --version >/dev/null 2>&1 ||
    skip "py-spy is not installed (python3 -m pip install py-spy;" \
      "tests/torch/install_torch.sh installs it beside torch)"
  PATH=$(dirname "$pyspy"):$PATH
fi

sleep_line=$(grep -n 'time.sleep(3600)' "$job" | cut -d: -f1)
backward_line=$(grep -n 'loss.backward()' "$job" | cut -d: -f1)
args=(--sleep-rank 1 --sleep-step 5)
envs=()
case $mode in
report)
  args+=(--report)
  envs=(PYTHONPATH="$here/../../python:$PYTHONPATH")
  ;;
nopyspy)
  mkdir -p "$tmp/nobin"
  envs=(PATH="$tmp/nobin" PYTHON_EXEC="$python")
  ;;
esac
run 120 job env "${envs[@]}" "$ddprun" --standalone --nproc-per-node 2 \
  --hang-timeout 5 --log-dir "$tmp/logs" --rdzv-id hangjob "$job" "${args[@]}"
[ "$rc" -eq 4 ] || die job "ddprun exited $rc, not 4 (timeout)"
err=$tmp/job.err

# Rank 1 alone is named, at the timeout.
grep -q "^ddprun: rank 1 is to blame: it sleeps" "$err" ||
  die job "rank 1 is not blamed for sleeping: $(grep 'to blame' "$err")"
[ "$(grep -c 'is to blame' "$err")" = 1 ] || die job "more than one blamed"
grep -A1 "^ddprun: root cause (first failure):" "$err" |
  grep -q "rank 1  local rank 1 .* exited with code 4" ||
  die job "the root cause is not rank 1"
slept=$(sed -n 's/^\[rank1\]:rank 1 sleeps in step 5 at \([0-9.]*\)$/\1/p' \
  "$tmp/job.out")
[ -n "$slept" ] || die job "rank 1 did not say when it began to sleep"
named=$(grep '"event":"failure"' "$tmp/logs/hangjob/events.jsonl" |
  grep '"source":"agent"' | head -n 1 | sed -n 's/.*"time":\([0-9.]*\).*/\1/p')
took=$(awk -v a="$slept" -v b="$named" 'BEGIN { printf "%.2f", b - a }')
awk -v t="$took" 'BEGIN { exit !(t > 0 && t <= 15.0) }' ||
  die job "rank 1 was named $took s after it began to sleep, not within 5 + 10 s"
if [ "$mode" = report ]; then
  grep -q "hung: no progress for [0-9.]* s after step 5 (--hang-timeout 5.0 s)" \
    "$err" || die job "rank 1 is not judged by its reports (after step 5)"
else
  grep -q "hung: no progress for [0-9.]* s: its processes used no CPU time" \
    "$err" || die job "rank 1 is not judged by its CPU time"
fi

# Where each rank is.
where=$(sed -n '/^ddprun: where the ranks of this node are/,/^ddprun: full stacks/p' "$err" |
  head -n 4)
if [ "$mode" = nopyspy ]; then
  echo "$where" | grep -qF "; py-spy not found on PATH nor beside the program's python (pip install 'ddprun[stacks]', or pip install py-spy); eu-stack not found on PATH)" ||
    die job "the summary does not say that py-spy is missing: $where"
  echo "$where" | grep -q "^ddprun:   rank 1: kernel: .*nanosleep" ||
    die job "rank 1's kernel stack is not in nanosleep: $where"
else
  echo "$where" | grep -q "(stacks by py-spy [0-9.]*)" ||
    die job "the stacks are not py-spy's: $where"
  echo "$where" | grep -q "^ddprun:   rank 1: time.sleep <- main at ddp_hang.py:$sleep_line$" ||
    die job "rank 1 is not shown at its sleep (ddp_hang.py:$sleep_line): $where"
  echo "$where" | grep -q "^ddprun:   rank 0: .*backward <- main at ddp_hang.py:$backward_line$" ||
    die job "rank 0 is not shown in backward (ddp_hang.py:$backward_line): $where"
  grep -q "^    main (.*ddp_hang.py:$sleep_line)$" \
    "$tmp/logs/hangjob/attempt_0/1/stack.txt" || die job "no py-spy stack.txt of rank 1"
  grep -q "torch/autograd/" "$tmp/logs/hangjob/attempt_0/0/stack.txt" ||
    die job "rank 0's stack.txt is not in autograd"
fi
echo "ok $mode: rank 1 named $took s after it began to sleep;"
echo "$where"
echo "PASS: $name"
