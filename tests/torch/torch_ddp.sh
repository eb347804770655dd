#!/usr/bin/env bash
# A real PyTorch DDP program (ddp_job.py: gloo on the CPU, env://, @record)
# under torchrun and under ddprun. Skipped (77) where python3 cannot import
# torch with gloo; .ci/run installs it (PyPI) into build-torch and sets
# DDPRUN_TORCH_PATH, which is put on PYTHONPATH here.
#
#   torchrun   python3 -m torch.distributed.run --standalone, 2 workers:
#              the reference weights (CRC-32 of every parameter).
#   standalone ddprun --standalone --nproc-per-node 2: the same weights on
#              both ranks.
#   two-node   a ddprun-rdzv and two ddprun of one worker each: the same
#              weights (MASTER_ADDR/MASTER_PORT from node 0).
#   restart    rank 1 raises before step 5 on the first attempt, with
#              --max-restarts 1: the root cause is the Python exception
#              (from TORCHELASTIC_ERROR_FILE), the group restarts with
#              TORCHELASTIC_RESTART_COUNT 1, resumes from rank 0's
#              checkpoint of step 5 and ends with the same weights.
#   no-budget  the same failure with --max-restarts 0: exit 1 and the
#              exception as the root cause.
#
# Usage: torch_ddp.sh DDPRUN DDPRUN_RDZV
set -u
name=torch_ddp
ddprun=${1:?usage: torch_ddp.sh DDPRUN DDPRUN_RDZV} rdzv=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"

# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_job.py

# crcs TAG: the distinct weight CRCs of TAG's final lines, and how many.
crcs() {
  sed -n 's/^\(\[rank[0-9]*\]:\)\{0,1\}final crc=\(0x[0-9a-f]*\) .*/\2/p' \
    "$tmp/$1.out" | sort | uniq -c | awk '{print $2 " x" $1}' | tr '\n' ' '
}

run 120 torchrun python3 -m torch.distributed.run --standalone \
  --nproc-per-node 2 "$job"
[ "$rc" -eq 0 ] || die torchrun "torchrun exited $rc"
want=$(crcs torchrun)
case $want in
  "0x"*" x2 ") ;;
  *) die torchrun "not one CRC on both ranks: $want" ;;
esac
echo "ok torchrun: $want"

run 120 standalone "$ddprun" --standalone --nproc-per-node 2 "$job"
[ "$rc" -eq 0 ] || die standalone "ddprun exited $rc"
[ "$(crcs standalone)" = "$want" ] ||
  die standalone "weights $(crcs standalone), torchrun's $want"
grep -q '^\[rank1\]:rank 1 of 2 local_rank 1 restart 0$' "$tmp/standalone.out" ||
  die standalone "rank 1 did not see its place in the group"
echo "ok standalone: $(crcs standalone)"

start 120 srv "$rdzv" --host 127.0.0.1 --port 0 --port-file "$tmp/port" \
  --nnodes 2 --rdzv-id torchjob
wait_for 20 "$tmp/port" '^[0-9]+$' || die srv "no port file"
node=(--nnodes 2 --nproc-per-node 1 --rdzv-id torchjob
      --rdzv-endpoint "127.0.0.1:$(cat "$tmp/port")")
start 120 n0 "$ddprun" "${node[@]}" --node-rank 0 "$job"
j0=$bg
start 120 n1 "$ddprun" "${node[@]}" --node-rank 1 "$job"
j1=$bg
finish "$j0"
[ "$rc" -eq 0 ] || die n0 "node 0's ddprun exited $rc"
finish "$j1"
[ "$rc" -eq 0 ] || die n1 "node 1's ddprun exited $rc"
cat "$tmp/n0.out" "$tmp/n1.out" >"$tmp/twonode.out"
[ "$(crcs twonode)" = "$want" ] ||
  die n0 "weights on two nodes $(crcs twonode), torchrun's $want"
echo "ok two-node: $(crcs twonode)"

fail_args=(--fail-rank 1 --fail-step 5)
run 180 restart "$ddprun" --standalone --nproc-per-node 2 --max-restarts 1 \
  "$job" --ckpt "$tmp/restart.pt" "${fail_args[@]}"
[ "$rc" -eq 0 ] || die restart "ddprun exited $rc"
grep -q "restart 1 of 1: rank 1 (local rank 1, pid [0-9]*) on node 0 ([^)]*) exited with code 1: RuntimeError: injected failure before step 5" \
  "$tmp/restart.err" || die restart "the restart does not name the exception"
for r in 0 1; do
  grep -q "^\[rank$r\]:rank $r of 2 local_rank $r restart 1$" \
    "$tmp/restart.out" || die restart "rank $r did not run again as restart 1"
  grep -q "^\[rank$r\]:rank $r: resumed at step 5$" "$tmp/restart.out" ||
    die restart "rank $r did not resume at step 5"
done
[ "$(crcs restart)" = "$want" ] ||
  die restart "weights after the restart $(crcs restart), torchrun's $want"
echo "ok restart: resumed at step 5, $(crcs restart)"

run 120 nobudget "$ddprun" --standalone --nproc-per-node 2 "$job" \
  "${fail_args[@]}"
[ "$rc" -eq 1 ] || die nobudget "ddprun exited $rc, not 1"
grep -A1 "^ddprun: root cause (first failure):" "$tmp/nobudget.err" |
  grep -q "rank 1 .* exited with code 1" ||
  die nobudget "the root cause is not rank 1's exit"
grep -q "^ddprun:     | RuntimeError: injected failure before step 5$" \
  "$tmp/nobudget.err" || die nobudget "the root cause lacks the exception"
echo "ok no-budget: exit 1, root cause: RuntimeError from rank 1"
echo "PASS: $name"
