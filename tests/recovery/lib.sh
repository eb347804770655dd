# shellcheck shell=bash
# Shared by the recovery tests (sourced, bash). Sets up a private
# temporary directory whose path is the test's marker: every process of
# the test carries it on its command line (log and checkpoint directories,
# the worker's arguments), so the exit trap and the final check find them
# all in /proc. Nothing here sleeps to wait: servers report their port
# through a FIFO, output is followed with tail -F (inotify), and processes
# are awaited through pidfds (rtool gone).
#
# The caller sets name, rdzv, ddprun, train, rtool (and test_secs, the
# test's deadline in seconds, 100 by default) before sourcing. With
# KEEP_TMP set in the environment the directory is kept, for a look after
# the fact.

fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}
command -v timeout >/dev/null 2>&1 || { echo "SKIP: no timeout"; exit 77; }
command -v tail >/dev/null 2>&1 || { echo "SKIP: no tail"; exit 77; }

tmp=
bg_pids=      # wrappers started here (timeout, tail); killed on exit
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  local p
  for p in $bg_pids; do
    kill -KILL "$p" 2>/dev/null
  done
  if [ -n "$tmp" ]; then
    # Again while some remain: a ddprun may have spawned since the scan.
    local pass left
    for pass in 1 2 3; do
      left=$(marked_pids)
      [ -z "$left" ] && break
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null
      # shellcheck disable=SC2086
      "$rtool" gone 5 $left >/dev/null 2>&1
    done
    for p in $bg_pids; do
      { wait "$p"; } 2>/dev/null
    done
    if [ -n "${KEEP_TMP:-}" ]; then
      echo "kept $tmp" >&2
    else
      rm -rf "$tmp"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
tmp=$(mktemp -d "${TMPDIR:-/tmp}/recovery_$name.XXXXXX") ||
  fail "mktemp -d failed"
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
# Every wait ends by this time, whatever it was given (ctest allows 120 s).
deadline=$(($(date +%s) + ${test_secs:-100}))

# bounded SECS: SECS, or less when the test's deadline comes first.
bounded() {
  local left=$((deadline - $(date +%s)))
  [ "$left" -gt 0 ] || fail "past the test's deadline"
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# The pids of every process whose command line holds the marker $tmp/,
# apart from this shell and its subshells.
marked_pids() {
  local d cmd
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    [ "${d#/proc/}" = "$BASHPID" ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
    case $cmd in
    *"$tmp/"*) echo "${d#/proc/}" ;;
    esac
  done
}

# describe_pids PID...: one line each, pid and command line.
describe_pids() {
  local p
  for p in "$@"; do
    echo "  $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-200)"
  done
}

# expect_no_leftovers: no process of the test remains. Processes of the
# job that are still on their way out (a killed agent's watchdog, workers
# it is killing) get 10 s to exit, awaited through pidfds.
expect_no_leftovers() {
  local left
  left=$(marked_pids)
  [ -z "$left" ] && return 0
  # shellcheck disable=SC2086
  "$rtool" gone 10 $left >/dev/null
  left=$(marked_pids)
  [ -z "$left" ] && return 0
  # shellcheck disable=SC2086
  fail "processes of the job left behind:"$'\n'"$(describe_pids $left)"
}

# show TAG: the tail of TAG's output files.
show() {
  local f
  for f in "$tmp/$1.out" "$tmp/$1.err"; do
    [ -e "$f" ] || continue
    echo "--- ${f##*/}" >&2
    tail -n 40 "$f" >&2
  done
}

# start_server TAG SECS ARGS...: ddprun-rdzv on 127.0.0.1 (under timeout
# SECS, or less by the test's deadline) with ARGS; sets srv_pid (the timeout wrapper) and, when ARGS hold
# --port 0, port, read from the "listening on ADDR:PORT" line through a
# FIFO. The rest of its stderr goes to $tmp/TAG.err.
start_server() {
  local tag=$1 secs fifo=$tmp/$1.fifo line fd got=
  secs=$(bounded "$2") || exit 1
  shift 2
  rm -f "$fifo"
  mkfifo "$fifo" || fail "mkfifo $fifo failed"
  timeout -k 2 "$secs" "$rdzv" --host 127.0.0.1 "$@" >"$tmp/$tag.out" \
    2>"$fifo" &
  srv_pid=$!
  bg_pids="$bg_pids $srv_pid"
  exec {fd}<"$fifo"
  while IFS= read -r -t 20 line <&"$fd"; do
    echo "$line" >>"$tmp/$tag.err"
    case $line in
    *" listening on "*)
      got=${line##* listening on }
      got=${got%% *}
      break
      ;;
    esac
  done
  if [ -z "$got" ]; then
    exec {fd}<&-
    show "$tag"
    fail "$tag: ddprun-rdzv did not report that it listens"
  fi
  port=${got##*:}
  # Keep its stderr drained so that it never blocks on a full pipe.
  cat <&"$fd" >>"$tmp/$tag.err" &
  bg_pids="$bg_pids $!"
  exec {fd}<&-
}

# start_agent TAG SECS ARGS...: ddprun ARGS under timeout SECS (or less by
# the test's deadline), with the environment assignments of the array
# agent_env, output to $tmp/TAG.{out,err}; sets agent_pid (the timeout
# wrapper, whose child is ddprun itself: env executes it).
agent_env=()
start_agent() {
  local tag=$1 secs
  secs=$(bounded "$2") || exit 1
  shift 2
  # The files exist before this returns: a wait_for on them may come
  # before the background job has opened them.
  : >"$tmp/$tag.out"
  : >"$tmp/$tag.err"
  timeout -k 2 "$secs" env "${agent_env[@]}" "$ddprun" "$@" \
    >>"$tmp/$tag.out" 2>>"$tmp/$tag.err" &
  agent_pid=$!
  bg_pids="$bg_pids $agent_pid"
}

# child_of PID: the process that the timeout wrapper PID runs.
child_of() {
  local c
  read -r c _ <"/proc/$1/task/$1/children" 2>/dev/null
  [ -n "$c" ] || fail "pid $1 has no child"
  echo "$c"
}

# finish PID: waits for a wrapper; its status in $rc (124: it timed out).
finish() {
  rc=0
  { wait "$1" || rc=$?; } 2>/dev/null
}

# wait_for SECS FILE PATTERN: until FILE holds a line matching the basic
# regular expression PATTERN (from its start), followed with tail -F.
# Returns 1 after SECS. FILE must exist: tail follows a missing file by
# polling once a second.
wait_for() {
  local secs file=$2 pat=$3 fd tp r=0
  secs=$(bounded "$1") || exit 1
  [ -e "$file" ] || fail "wait_for: $file does not exist"
  exec {fd}< <(exec timeout "$secs" tail -n +1 -F "$file" 2>/dev/null)
  tp=$!
  grep -q -m 1 -e "$pat" <&"$fd" || r=1
  kill "$tp" 2>/dev/null
  exec {fd}<&-
  return "$r"
}

# The weights' CRC on the last final line of rank 0 in FILE.
crc_of() {
  sed -n 's/^\[rank0\]:final .*weights_crc32=\(0x[0-9a-f]*\).*$/\1/p' "$1" |
    tail -n 1
}
# The world size on the last final line of rank 0 in FILE.
world_of() {
  sed -n 's/^\[rank0\]:final .* world=\([0-9]*\) .*$/\1/p' "$1" | tail -n 1
}

# The loss on the last final line of rank 0 in FILE.
loss_of() {
  sed -n 's/^\[rank0\]:final loss=\([0-9.e+-]*\) .*$/\1/p' "$1" | tail -n 1
}

# elapsed T0: seconds since T0 (a date +%s.%N), with 3 decimals.
elapsed() {
  awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
}

# events FILE EVENT: the lines of EVENT in an events.jsonl.
events() {
  grep -e "\"event\":\"$2\"" "$1" 2>/dev/null
}
# field NAME: the value of the JSON field NAME of each line on stdin
# (numbers and plain strings).
field() {
  sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}
