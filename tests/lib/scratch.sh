# shellcheck shell=bash
# A private temporary directory and the processes a test started, both
# removed on every exit path (sourced).
#
#   scratch_init PREFIX   makes $tmp (${TMPDIR:-/tmp}/PREFIX.XXXXXX) and
#                         sets the traps: at exit, extra_cleanup (when the
#                         test defines it) runs first, then every pid in
#                         $pids gets SIGTERM, then SIGKILL, and is reaped,
#                         then $tmp is removed; INT, TERM and HUP exit
#                         130, 143 and 129 through the same cleanup.
#   scratch_run SECS TAG CMD...
#                         runs CMD under timeout SECS (SIGKILL 2 s later),
#                         stdout in $tmp/TAG.out, stderr in $tmp/TAG.err,
#                         in the background and waited for (so that a
#                         signal to the test runs the traps at once); its
#                         status in $rc (124 or 137: it ran past SECS).
tmp=
pids=
scratch_cleanup() {
  trap - EXIT INT TERM HUP
  if declare -F extra_cleanup >/dev/null; then
    extra_cleanup
  fi
  local p
  for p in $pids; do
    kill -TERM "$p" 2>/dev/null
  done
  for p in $pids; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  [ -n "$tmp" ] && rm -rf "$tmp"
}
scratch_init() {
  trap scratch_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") ||
    { echo "FAIL: $1: mktemp -d failed" >&2; exit 1; }
}
# shellcheck disable=SC2034  # rc is read by the test after the call
scratch_run() {
  local secs=$1 tag=$2
  shift 2
  timeout -k 2 "$secs" "$@" >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
  local pid=$!
  pids="$pids $pid"
  rc=0
  wait "$pid" || rc=$?
  pids=${pids% "$pid"}
}
