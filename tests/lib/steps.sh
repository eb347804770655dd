# shellcheck shell=bash
# Helpers of the end-to-end test scripts (sourced): a temporary directory,
# processes that are killed at exit (tests/lib/scratch.sh), bounded runs
# and waits, and how a failure shows the output of the run it concerns.
# The sourcing script sets `name` first and may define `extra_cleanup`.

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}
skip() {
  echo "SKIP: $name: $*"
  exit 77
}

# shellcheck source=scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"
scratch_init "$name"

show() {
  echo "--- $1: stdout" >&2
  tail -n 30 "$tmp/$1.out" >&2
  echo "--- $1: stderr" >&2
  tail -n 30 "$tmp/$1.err" >&2
}
die() {
  show "$1"
  fail "$2"
}

# run SECS TAG CMD...: output to $tmp/TAG.{out,err}, status in $rc; a run
# past SECS fails the test.
run() {
  local secs=$1 tag=$2
  scratch_run "$@"
  shift 2
  [ "$rc" -ne 124 ] || die "$tag" "$tag: still running after $secs s: $*"
}

# start SECS TAG CMD...: like run, in the background; its pid in $bg.
start() {
  local secs=$1 tag=$2
  shift 2
  timeout -k 2 "$secs" "$@" >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
  bg=$!
  pids="$pids $bg"
}

# finish PID: waits for a process from start; its status in $rc.
finish() {
  rc=0
  wait "$1" || rc=$?
  pids=${pids% "$1"}
}

# wait_for SECS FILE PATTERN: until a line of FILE matches (grep -E).
wait_for() {
  local deadline=$((SECONDS + $1))
  until grep -qE "$3" "$2" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}
