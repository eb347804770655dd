#!/usr/bin/env bash
# A worker that cannot be forked (EAGAIN: the process limit, a cgroup's
# pids.max) is not a configuration error: the group restarts from the
# job's budget, and a fork that keeps failing ends the job with exit code
# 7 (out of memory or processes) naming fork(). The failure is injected
# with strace (root in CI ignores RLIMIT_NPROC): ddprun's first clone() is
# its watchdog's fork, the later ones are the workers' (threads use
# clone3).
#
# Usage: fork_fail.sh DDPRUN
set -u
ddprun=${1:?usage: fork_fail.sh DDPRUN}
command -v strace >/dev/null 2>&1 || { echo "SKIP: no strace"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fork_fail.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: fork_fail: $*" >&2
  sed 's/^/  | /' "$tmp/err" >&2
  exit 1
}
# run WHEN BUDGET: ddprun of 2 workers of /bin/true under strace, its
# clone() calls number WHEN failing with EAGAIN; status in rc. (The leak
# checker of a sanitized build cannot run under ptrace.)
run() {
  rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
    timeout -k 5 60 strace -f -qq -o /dev/null \
    -e trace=clone -e inject=clone:error=EAGAIN:when="$1" \
    "$ddprun" --standalone --nproc-per-node 2 --max-restarts "$2" \
    --log-level warn /bin/true >"$tmp/out" 2>"$tmp/err" || rc=$?
}
# Where injection works, timeout(1) cannot fork its command; it fails at
# once, where bash retries a failed fork for 15 s.
if strace -qq -o /dev/null -e trace=clone -e inject=clone:error=EAGAIN \
  timeout 5 /bin/true 2>/dev/null; then
  echo "SKIP: strace cannot inject system call errors here"
  exit 77
fi

# The first worker's fork fails once: one restart, then the job ends well.
run 2 1
[ "$rc" -eq 0 ] || fail "one failed fork with --max-restarts 1: exit $rc, not 0"
grep -q "cannot start local rank 0: fork() failed (Resource temporarily unavailable)" \
  "$tmp/err" || fail "the failed fork was not named"
grep -q "restart 1 of 1: rank 0 .* exited with code 7: cannot start '/bin/true': fork() failed" \
  "$tmp/err" || fail "the group was not restarted from the budget"
echo "ok: a failed fork restarts the group"

# Every worker fork fails: the budget is spent, exit 7, never 2.
run 2+ 1
[ "$rc" -eq 7 ] || fail "failing forks with --max-restarts 1: exit $rc, not 7"
grep -q "^ddprun: job failed with exit code 7 (out of memory)" "$tmp/err" ||
  fail "the summary does not give exit code 7"
grep -q "restart budget of 1 spent" "$tmp/err" || fail "the budget was not spent"
grep -q "configuration error" "$tmp/err" && fail "a failed fork was taken for a configuration error"
echo "PASS: fork_fail: restartable, exit 7 once the budget is spent"
