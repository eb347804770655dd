#!/usr/bin/env bash
# The NCCL unique id travels through the rendezvous store: every rank of a
# generation gets rank 0's id, another job gets another id, and a restarted
# group (a new generation) gets a new one. No GPU needed.
#   nccl_id.sh DDPRUN NCCL_ID_CHECK
set -u
ddprun=$1
check=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp"/*.out 2>/dev/null; exit 1; }

# ids TAG: "generation id" per rank line of TAG's output.
ids() {
  sed -n 's/^\(\[rank[0-9]*\]:\)\{0,1\}rank \([0-9]*\) of [0-9]* generation \([0-9]*\) nccl-id \([0-9a-f]*\)$/\3 \4/p' \
    "$tmp/$1.out"
}

timeout 60 "$ddprun" --standalone --nproc-per-node 3 --log-level warn \
  "$check" >"$tmp/a.out" 2>&1 || fail "job a exited $?"
[ "$(ids a | wc -l)" -eq 3 ] || fail "job a: expected 3 rank lines"
[ "$(ids a | sort -u | wc -l)" -eq 1 ] || fail "job a: the ranks got different ids"
echo "ok: 3 ranks got one id through the store"

timeout 60 "$ddprun" --standalone --nproc-per-node 3 --log-level warn \
  "$check" >"$tmp/b.out" 2>&1 || fail "job b exited $?"
[ "$(ids a | head -1 | cut -d' ' -f2)" != "$(ids b | head -1 | cut -d' ' -f2)" ] ||
  fail "two jobs got the same id"
echo "ok: another job got another id"

NCCL_ID_CHECK_FAIL_RANK=1 timeout 60 "$ddprun" --standalone --nproc-per-node 2 \
  --max-restarts 1 --log-level warn "$check" >"$tmp/c.out" 2>&1 ||
  fail "job c exited $? (one restart allowed)"
gens=$(ids c | cut -d' ' -f1 | sort -u | wc -l)
[ "$gens" -eq 2 ] || fail "job c: expected 2 generations, saw $gens"
[ "$(ids c | sort -u | wc -l)" -eq 2 ] ||
  fail "job c: expected one id per generation, the same on both ranks"
[ "$(ids c | cut -d' ' -f2 | sort -u | wc -l)" -eq 2 ] ||
  fail "job c: the restarted generation reused the id"
echo "ok: the restarted group (generation $(ids c | cut -d' ' -f1 | sort -u | tail -1)) got a new id"
