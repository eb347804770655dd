# Shared by the train tests; sourced, not run. The sourcing script sets
# `name` first. Provides a private temporary directory ($tmp), bounded runs
# whose output lands in $tmp, and cleanup of every process started through
# `run` on every exit path.
#
#   run SECS TAG CMD...   runs CMD with stdout in $tmp/TAG.out, stderr in
#                         $tmp/TAG.err, killed after SECS (then SIGKILL 2 s
#                         later); its exit status is left in $rc; fails
#                         when CMD timed out or a sanitizer reported
#   final TAG KEY         KEY's value on the last `final` line of rank 0 (or
#                         of a process run without ddprun) in $tmp/TAG.out
#   show TAG              prints TAG's stdout and stderr to stderr
#   need_python           skips (exit 77) when python3 is missing
#   no_leftovers          fails when a process still names $tmp

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}

command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"

# shellcheck source=../lib/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_init "train_$name"

# In the background and waited for, so that a signal to this script runs
# the traps at once instead of after the command.
run() {
  local secs=$1 tag=$2
  scratch_run "$@"
  shift 2
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    show "$tag"
    fail "$tag: still running after $secs s: $*"
  fi
  # Builds with -fsanitize=undefined report and carry on.
  if grep -q "runtime error:\|Sanitizer" "$tmp/$tag.err"; then
    show "$tag"
    fail "$tag: a sanitizer report: $*"
  fi
}

show() {
  echo "--- $1: stdout" >&2
  tail -n 40 "$tmp/$1.out" >&2
  echo "--- $1: stderr" >&2
  tail -n 40 "$tmp/$1.err" >&2
}

final() {
  local line
  line=$(sed -n 's/^\(\[rank0\]:\)\{0,1\}final \(.*\)$/ \2 /p' "$tmp/$1.out" |
         tail -n 1)
  case $line in
    *" $2="*)
      line=${line#*" $2="}
      echo "${line%% *}"
      ;;
  esac
}

need_python() {
  command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
}

no_leftovers() {
  local left
  left=$(pgrep -f -- "$tmp/" 2>/dev/null | tr '\n' ' ')
  if [ -n "$left" ]; then
    pids="$pids $left"
    ps -o pid,ppid,args -p "${left% }" >&2
    fail "processes left behind: $left"
  fi
}
