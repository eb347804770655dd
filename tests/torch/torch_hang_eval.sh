#!/usr/bin/env bash
# The default hang watch (--hang-timeout auto, its floor lowered to 2 s by
# the test hook DDPRUN_TEST_HANG_FLOOR_MS) on a PyTorch job whose rank 0
# evaluates for 8 s while rank 1 waits for it in a barrier: no verdict, the
# job ends 0. The same job under --hang-timeout 2 (strict) names rank 0 as
# busy while its peer waits: what auto is lenient about.
#
# Usage: torch_hang_eval.sh DDPRUN
set -u
ddprun=${1:?usage: torch_hang_eval.sh DDPRUN}
name=torch_hang_eval
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
job=$here/ddp_eval.py

run 120 auto env DDPRUN_TEST_HANG_FLOOR_MS=2000 "$ddprun" --standalone \
  --nproc-per-node 2 "$job" --eval-s 8
[ "$rc" -eq 0 ] || die auto "the job under auto exited $rc, not 0"
grep -q "^\[rank0\]:rank 0 evaluates for 8 s" "$tmp/auto.out" ||
  die auto "rank 0 did not evaluate"
! grep -q "is to blame\|treating it as hung" "$tmp/auto.err" ||
  die auto "a long evaluation was called a hang"
[ "$(grep -c '^\[rank[01]\]:rank [01] done$' "$tmp/auto.out")" = 2 ] ||
  die auto "not both ranks finished"

run 120 strict "$ddprun" --standalone --nproc-per-node 2 --hang-timeout 2 \
  "$job" --eval-s 60
[ "$rc" -eq 4 ] || die strict "the job under --hang-timeout 2 exited $rc, not 4"
grep -q "^ddprun: rank 0 is to blame: it is busy on the CPU while its peers wait" \
  "$tmp/strict.err" || die strict "rank 0 is not blamed as busy"
echo "auto: an 8 s evaluation on rank 0 against a 2 s floor ended 0;" \
  "strict: $(grep -m1 'is to blame' "$tmp/strict.err")"
echo "PASS: $name"
