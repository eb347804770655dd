#!/usr/bin/env bash
# One logger, one --log-level for ddprun's own lines and its hosted
# server's: info shows the binding and the per-rank summary; error keeps
# only failures (the summary of a failed job among them).
#
# Usage: log_level.sh DDPRUN
set -u
ddprun=${1:?usage: log_level.sh DDPRUN}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/log_level.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: log_level: $*" >&2; cat "$tmp/err" >&2; exit 1; }
run() {
  rc=0
  timeout -k 2 60 "$ddprun" --standalone --nproc-per-node 2 --log-level "$1" \
    "${@:2}" >/dev/null 2>"$tmp/err" || rc=$?
}

run info /bin/true
[ "$rc" -eq 0 ] || fail "a job of /bin/true exited $rc"
grep -q "^ddprun: binding: local rank 1: " "$tmp/err" || fail "info: no binding line"
grep -q "^ddprun: \[rank1\] local rank 1 of 2" "$tmp/err" || fail "info: no rank summary"
grep -q "^ddprun [0-9:.]* INFO  round 1 complete" "$tmp/err" || fail "info: no server line"

run error /bin/true
[ "$rc" -eq 0 ] || fail "a job of /bin/true exited $rc"
[ ! -s "$tmp/err" ] || fail "error: a job that succeeds still printed"

run error /bin/false
[ "$rc" -eq 1 ] || fail "a job of /bin/false exited $rc, not 1"
grep -q "^ddprun: job failed with exit code 1$" "$tmp/err" || fail "error: no summary"
grep -q "^ddprun: root cause (first failure" "$tmp/err" || fail "error: no root cause"
grep -q "binding:\|\[rank0\] local rank" "$tmp/err" && fail "error: info lines printed"
echo "PASS: log_level: info and error govern ddprun's lines and its server's"
