#!/usr/bin/env bash
# ddprun --hang-timeout 5 on a PyTorch DDP job (ddp_hang.py, gloo) of two
# nodes on 127.0.0.1 (a ddprun-rdzv on port 0, one ddprun per node, one
# rank each) whose rank 1 sleeps forever in step 5 while rank 0, on the
# other node, waits for it in the all-reduce of its backward pass. Skipped
# (77) where python3 cannot import torch with gloo or py-spy is missing.
#
# Each agent sees only its own rank: rank 0's, that it waits with no
# culprit on its node, a verdict the server holds; rank 1's, that it
# sleeps. Wanted: rank 1 alone is blamed, at the timeout after it began
# to sleep (bounded by the timeout + 10 s), and is the job's root cause on
# both nodes; rank 1's node shows
# py-spy's stack at the sleep's line; rank 0's node shows rank 0 in
# backward at its line as the group stops, and keeps its stack.txt.
#
# Usage: torch_hang_nodes.sh DDPRUN DDPRUN-RDZV
set -u
ddprun=${1:?usage: torch_hang_nodes.sh DDPRUN DDPRUN-RDZV}
rdzv=${2:?usage: torch_hang_nodes.sh DDPRUN DDPRUN-RDZV}
name=torch_hang_nodes
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_hang.py

pyspy=$(command -v py-spy 2>/dev/null) ||
  pyspy=${DDPRUN_TORCH_PATH:+$DDPRUN_TORCH_PATH/py-spy/bin/py-spy}
[ -n "$pyspy" ] && [ -x "$pyspy" ] ||
  skip "py-spy is not installed (tests/torch/install_torch.sh installs it beside torch)"
PATH=$(dirname "$pyspy"):$PATH
sleep_line=$(grep -n 'time.sleep(3600)' "$job" | cut -d: -f1)
backward_line=$(grep -n 'loss.backward()' "$job" | cut -d: -f1)

start 90 srv "$rdzv" --host 127.0.0.1 --port 0 --nnodes 2 --rdzv-id hn \
  --heartbeat-timeout 2 --log-dir "$tmp/log.srv"
srv=$bg
wait_for 20 "$tmp/srv.err" ' listening on 127\.0\.0\.1:[0-9]+' ||
  die srv "ddprun-rdzv did not say where it listens"
port=$(sed -n 's/.* listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/srv.err" | head -n 1)
for n in 0 1; do
  start 90 "n$n" "$ddprun" --nnodes 2 --nproc-per-node 1 \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id hn \
    --rdzv-conf is_host=0,join_timeout=60 --hang-timeout 5 \
    --log-dir "$tmp/log.n$n" "$job" --sleep-rank 1 --sleep-step 5
  eval "a$n=\$bg"
done
for n in 0 1; do
  eval "p=\$a$n"
  finish "$p"
  [ "$rc" -eq 4 ] || die "n$n" "node $n's ddprun exited $rc, not 4 (timeout)"
done
finish "$srv"
[ "$rc" -eq 4 ] || die srv "ddprun-rdzv exited $rc, not 4"

# Which node ran which rank.
k1=$(grep -l '^ddprun: \[rank1\] local rank 0' "$tmp/n0.err" "$tmp/n1.err" | head -n 1)
k0=$(grep -l '^ddprun: \[rank0\] local rank 0' "$tmp/n0.err" "$tmp/n1.err" | head -n 1)
[ -n "$k1" ] && [ -n "$k0" ] && [ "$k1" != "$k0" ] ||
  { show n0; show n1; fail "the two ranks are not on two nodes"; }
t1=$(basename "$k1" .err) t0=$(basename "$k0" .err)

# Rank 1 alone is blamed, and it is the root cause on both nodes.
grep -q "^ddprun: rank 1 is to blame: it sleeps, at time.sleep <- main at ddp_hang.py:$sleep_line$" "$k1" ||
  die "$t1" "rank 1's node does not blame it for sleeping at ddp_hang.py:$sleep_line"
[ "$(cat "$k0" "$k1" | grep -c 'is to blame')" = 1 ] ||
  { show n0; show n1; fail "not exactly one rank blamed: $(grep -h 'to blame' "$k0" "$k1")"; }
for f in "$k0" "$k1"; do
  grep -q "^ddprun: root cause (first failure.*):" "$f" &&
    grep -A1 "^ddprun: root cause (first failure.*):" "$f" |
    grep -q "rank 1 .*exited with code 4" ||
    { cat "$f" >&2; fail "$(basename "$f" .err): the root cause is not rank 1"; }
done
slept=$(sed -n 's/^\[rank1\]:rank 1 sleeps in step 5 at \([0-9.]*\)$/\1/p' "$tmp/$t1.out")
[ -n "$slept" ] || die "$t1" "rank 1 did not say when it began to sleep"
named=$(grep '"event":"failure"' "$tmp/log.srv/hn/events.jsonl" | grep '"rank":1,' |
  head -n 1 | sed -n 's/.*"time":\([0-9.]*\).*/\1/p')
[ -n "$named" ] || fail "the server recorded no failure of rank 1"
took=$(awk -v a="$slept" -v b="$named" 'BEGIN { printf "%.2f", b - a }')
awk -v t="$took" 'BEGIN { exit !(t > 0 && t <= 15.0) }' ||
  fail "rank 1 was named $took s after it began to sleep, not within 5 + 10 s"

# Where each rank is, each on its node.
grep -A1 "^ddprun: where the ranks of this node are (stacks by py-spy [0-9.]*):" "$k1" |
  grep -q "^ddprun:   rank 1: time.sleep <- main at ddp_hang.py:$sleep_line$" ||
  die "$t1" "rank 1's node does not show it at its sleep"
grep -A1 "^ddprun: where the ranks of this node are (stacks by py-spy [0-9.]*), as the group stops:" "$k0" |
  grep -q "^ddprun:   rank 0: .*backward <- main at ddp_hang.py:$backward_line$" ||
  die "$t0" "rank 0's node does not show it in backward (ddp_hang.py:$backward_line)"
grep -q "torch/autograd/" "$tmp/log.$t0/hn/attempt_0/0/stack.txt" ||
  die "$t0" "rank 0's stack.txt is not in autograd"
echo "rank 1 named $took s after it began to sleep; on its node:"
grep -A1 "^ddprun: where the ranks of this node are" "$k1"
echo "on rank 0's node:"
grep -A1 "^ddprun: where the ranks of this node are" "$k0"
echo "PASS: $name"
