#!/usr/bin/env bash
# PyTorch's flight recorder in a hang report: ddprun sets
# TORCH_FR_BUFFER_SIZE for its workers, and its Python start-up hook
# (python/ddprun_boot) answers the agent's request for a dump
# (DDPRUN_FR_DUMP) even while the program is blocked in a collective. A
# 2-rank gloo job (ddp_fr.py) hangs after three all-reduces:
#   skip    rank 1 broadcasts where rank 0 all-reduces: the report says the
#           ranks disagree at that collective's number;
#   sleep   rank 1 sleeps: the report says it never entered the collective
#           rank 0 waits in;
#   plain   the same, in a program that does not import ddprun_progress
#           (and cannot: python/ is not on its PYTHONPATH);
#   dump    rank 1 dumps as NCCL's watchdog does when it times out a
#           collective (a pickle, at TORCH_FR_DUMP_TEMP_FILE + rank) and
#           aborts: the failure names the dump, in the attempt's directory,
#           and how torchfrtrace reads every rank's.
# Each rank's dump stays beside its logs, as JSON.
#
# Usage: torch_fr.sh MODE DDPRUN
set -u
mode=${1:?usage: torch_fr.sh MODE DDPRUN}
ddprun=${2:?}
name=torch_fr_$mode
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/steps.sh
. "$here/../lib/steps.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
[ "$mode" = plain ] || export PYTHONPATH=$here/../../python:$PYTHONPATH

run 120 job "$ddprun" --standalone --nproc-per-node 2 --hang-timeout 3 \
  --log-dir "$tmp/logs" --rdzv-id frjob "$here/ddp_fr.py" --how "$mode"
err=$tmp/job.err
if [ "$mode" = dump ]; then
  [ "$rc" -ne 0 ] || die job "ddprun exited 0 after a rank aborted"
  dir=$tmp/logs/frjob/attempt_0
  want="ddprun: rank 1: NCCL's flight recorder, dumped as it timed out a collective: $dir/nccl_trace_rank_1 (every rank's: torchfrtrace $dir -p nccl_trace_rank_)"
  grep -qxF "$want" "$err" || die job "the dump is not named as: $want"
  grep -q "rank 0: NCCL's flight recorder" "$err" &&
    die job "rank 0, which wrote no dump, is said to have one"
  python3 -c 'import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
sys.exit(0 if d.get("entries") else 1)' "$dir/nccl_trace_rank_1" ||
    die job "the dump holds no entries"
  echo "PASS: $name"
  exit 0
fi
[ "$rc" -eq 4 ] || die job "ddprun exited $rc, not 4 (timeout)"
line=$(grep "^ddprun: flight recorder (PyTorch): " "$err" | head -n 1)
[ -n "$line" ] || die job "no flight recorder line in the report"
n=$(echo "$line" | sed -n 's/.*rank 0 in #\([0-9]*\) gloo:all_reduce.*/\1/p')
[ -n "$n" ] || die job "rank 0 is not shown in its all-reduce: $line"
case $mode in
skip)
  echo "$line" | grep -q "rank 1 in #$n gloo:broadcast: the ranks disagree at #$n " ||
    die job "the disagreement at #$n is not named: $line"
  ;;
sleep | plain)
  echo "$line" | grep -q "rank 1 in #$((n - 1)) gloo:all_reduce: rank 1 never entered #$n$" ||
    die job "rank 1's absence from #$n is not named: $line"
  ;;
esac
grep -A9 "^ddprun: root cause" "$err" | grep -qF "flight recorder: ${line#ddprun: flight recorder (PyTorch): }" ||
  die job "the root cause lacks the flight recorder's line"
for r in 0 1; do
  f=$tmp/logs/frjob/attempt_0/$r/fr_trace.json
  [ -s "$f" ] || die job "no dump of rank $r in $f"
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d.get("entries") else 1)' "$f" || die job "rank $r's dump holds no entries"
done
echo "$mode: $line"
echo "PASS: $name"
