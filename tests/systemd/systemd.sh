#!/bin/bash
# deploy/systemd/ddprun-rdzv.service, checked as far as a machine without
# systemd as PID 1 allows.
#   systemd.sh MODE RDZV DDPRUN RTOOL
# MODE:
#   verify  systemd-analyze verify accepts the unit (pointed at the built
#           binary) and rejects a broken copy; its hardening is all there
#           and systemd-analyze security rates its exposure at most 2.0
#   exec    the unit's own ExecStart=, expanded from the environment file
#           with a credentials directory, serves a job that authenticates
#           with the secret and answers /metrics; the secret appears in no
#           output; under strace, every system call it makes is one that
#           its SystemCallFilter= allows, and it opens only AF_INET and
#           AF_INET6 sockets (RestrictAddressFamilies=)
# systemd-analyze is installed from Debian's systemd package when missing
# (root); the test is skipped, saying why, when that cannot be done.
name=$1
rdzv=$(realpath "$2") || exit 1
ddprun=$(realpath "$3") || exit 1
rtool=$(realpath "$4") || exit 1
train=/nonexistent # lib.sh wants one
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
unit=$here/../../deploy/systemd/ddprun-rdzv.service
envf=$here/../../deploy/systemd/ddprun-rdzv.env
test_secs=80
# shellcheck source=../recovery/lib.sh
. "$here/../recovery/lib.sh"

need_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's systemd package for systemd-analyze" >&2
    timeout 300 apt-get install -y -qq --no-install-recommends systemd \
      >"$tmp/apt.log" 2>&1 ||
      { timeout 120 apt-get update -qq >>"$tmp/apt.log" 2>&1 &&
        timeout 300 apt-get install -y -qq --no-install-recommends systemd \
          >>"$tmp/apt.log" 2>&1; }
  fi
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  echo "SKIP: systemd-analyze is missing and Debian's systemd package could not be installed: $(tail -n 1 "$tmp/apt.log" 2>/dev/null)"
  exit 77
}

# local_unit FILE: the unit, pointed at the built binary and at files
# under $tmp, written to FILE.
local_unit() {
  cp "$envf" "$tmp/ddprun-rdzv.env"
  echo "not the real secret" >"$tmp/secret"
  sed -e "s#^ExecStart=/usr/local/bin/ddprun-rdzv #ExecStart=$rdzv #" \
    -e "s#^EnvironmentFile=.*#EnvironmentFile=$tmp/ddprun-rdzv.env#" \
    -e "s#^LoadCredential=ddprun-secret:.*#LoadCredential=ddprun-secret:$tmp/secret#" \
    "$unit" >"$1"
  grep -q "^ExecStart=$rdzv " "$1" || fail "ExecStart= does not start with /usr/local/bin/ddprun-rdzv"
}

case $name in
verify)
  need_analyze
  local_unit "$tmp/ddprun-rdzv.service"
  r=0
  (cd "$tmp" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify ddprun-rdzv.service) \
    >"$tmp/verify.out" 2>&1 || r=$?
  [ "$r" = 0 ] || fail "systemd-analyze verify exited $r: $(cat "$tmp/verify.out")"
  ! grep -q "ddprun-rdzv.service" "$tmp/verify.out" ||
    fail "systemd-analyze verify complained: $(cat "$tmp/verify.out")"
  # The check bites: a misspelt value and an unknown key are reported.
  sed -e 's/^ProtectSystem=strict$/ProtectSystem=strictt/' \
    -e 's/^NoNewPrivileges=yes$/NoNewPrivilege=yes/' \
    "$tmp/ddprun-rdzv.service" >"$tmp/broken.service"
  (cd "$tmp" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify broken.service) \
    >"$tmp/broken.out" 2>&1
  grep -q "strictt" "$tmp/broken.out" &&
    grep -q "NoNewPrivilege" "$tmp/broken.out" ||
    fail "systemd-analyze verify missed a broken unit: $(cat "$tmp/broken.out")"
  for d in "Restart=on-failure" "RestartPreventExitStatus=2" "DynamicUser=yes" \
    "NoNewPrivileges=yes" "ProtectSystem=strict" "ProtectHome=yes" \
    "PrivateTmp=yes" "PrivateDevices=yes" "CapabilityBoundingSet=" \
    "RestrictAddressFamilies=AF_INET AF_INET6" "SystemCallFilter=@system-service" \
    "LoadCredential=ddprun-secret:/etc/ddprun/secret"; do
    grep -qx -e "$d" "$unit" || fail "the unit has no line '$d'"
  done
  grep -q -- "--secret-file %d/ddprun-secret" "$unit" ||
    fail "ExecStart= does not read the secret from the credential"
  if systemd-analyze security --help 2>/dev/null | grep -q -- "--offline"; then
    (cd "$tmp" && SYSTEMD_LOG_COLOR=0 systemd-analyze security --offline=yes \
      --no-pager ddprun-rdzv.service) >"$tmp/security.out" 2>&1
    score=$(sed -n 's/.*Overall exposure level for ddprun-rdzv.service: \([0-9.]*\).*/\1/p' \
      "$tmp/security.out")
    [ -n "$score" ] || fail "no exposure level: $(tail -n 3 "$tmp/security.out")"
    awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
      fail "exposure level $score is over 2.0: $(grep '✗' "$tmp/security.out")"
    echo "systemd-analyze security: exposure level $score"
  else
    echo "systemd-analyze has no --offline; exposure level not measured"
  fi
  echo "verify: the unit is accepted, a broken copy is not"
  ;;

exec)
  command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
  mkdir -p "$tmp/creds" "$tmp/logs" "$tmp/state/ddprun-rdzv"
  secret="s3cr3t-$$-$RANDOM-never-printed"
  echo "$secret" >"$tmp/creds/ddprun-secret"
  chmod 0400 "$tmp/creds/ddprun-secret"
  python3 "$here/unit_argv.py" "$unit" "$envf" "$tmp/creds" "$tmp/logs" "$tmp/state" \
    DDPRUN_RDZV_HOST=127.0.0.1 DDPRUN_RDZV_PORT=0 DDPRUN_METRICS_HOST=127.0.0.1 \
    DDPRUN_METRICS_PORT=0 DDPRUN_NNODES=1 DDPRUN_RDZV_ID=sysd \
    "DDPRUN_RDZV_ARGS=--linger 30 --last-call-timeout 0" >"$tmp/argv" ||
    fail "cannot expand ExecStart="
  mapfile -d '' argv <"$tmp/argv"
  [ "${argv[0]}" = /usr/local/bin/ddprun-rdzv ] || fail "ExecStart= runs ${argv[0]}"
  argv[0]=$rdzv
  traced=()
  if grep -q __asan_init "$rdzv"; then
    # LeakSanitizer cannot run under ptrace, and the sanitizer's own
    # system calls are not the server's.
    echo "a sanitizer build: system calls not checked"
  elif command -v strace >/dev/null 2>&1 && strace -qq -o /dev/null true 2>/dev/null; then
    traced=(strace -f -qq -o "$tmp/trace")
  else
    echo "no working strace: system calls not checked"
  fi
  : >"$tmp/srv.err"
  timeout -k 2 60 "${traced[@]}" "${argv[@]}" >"$tmp/srv.out" 2>"$tmp/srv.err" &
  s=$!
  bg_pids="$bg_pids $s"
  wait_for 20 "$tmp/srv.err" ".* listening on 127.0.0.1:" ||
    { show srv; fail "the server did not start"; }
  port=$(sed -n 's/.* listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$tmp/srv.err")
  mport=$(sed -n 's#.*serving metrics on http://127.0.0.1:\([0-9]*\)/.*#\1#p' "$tmp/srv.err")
  [ -n "$port" ] && [ -n "$mport" ] || { show srv; fail "no ports logged"; }
  grep -q "shared secret required" "$tmp/srv.err" ||
    fail "the server did not take the secret from the credential"
  # A node without the secret is refused; one with it runs the job.
  r=0
  timeout 20 "$ddprun" --nnodes 1 --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id sysd --rdzv-conf is_host=0,join_timeout=5 \
    /bin/true >"$tmp/nosecret.out" 2>&1 || r=$?
  [ "$r" != 0 ] || fail "a node without the secret was let in"
  timeout 20 "$ddprun" --nnodes 1 --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id sysd --rdzv-conf is_host=0 --secret-file "$tmp/creds/ddprun-secret" \
    --log-dir "$tmp/logs/node" /bin/true >"$tmp/n0.out" 2>"$tmp/n0.err" ||
    { show n0; fail "the job failed"; }
  python3 "$here/../metrics/mclient.py" metrics "$mport" >"$tmp/m.prom" ||
    fail "scrape failed"
  grep -qx 'ddprun_rdzv_job_state{state="done"} 1' "$tmp/m.prom" ||
    fail "the job is not done: $(grep job_state "$tmp/m.prom")"
  grep -qx 'ddprun_rdzv_handshakes_refused_total{reason="no_secret"} 1' "$tmp/m.prom" ||
    fail "the refused node was not counted: $(grep refused "$tmp/m.prom")"
  [ -s "$tmp/logs/ddprun/sysd/events.jsonl" ] ||
    fail "no events under the logs directory (%L/ddprun)"
  # The server itself, under timeout (and strace).
  target=$(child_of "$s")
  [ -z "${traced[*]}" ] || target=$(child_of "$target")
  kill -TERM "$target"
  finish "$s"
  [ "$rc" = 0 ] || { show srv; fail "ddprun-rdzv exited $rc, not the job's 0"; }
  ! grep -rqF -e "$secret" "$tmp"/*.out "$tmp"/*.err "$tmp/logs" ||
    fail "the secret appears in an output or log"
  if [ -n "${traced[*]}" ]; then
    # The calls SystemCallFilter= allows: @system-service without
    # @privileged, groups expanded.
    # expand GROUP: its system calls, nested groups expanded (each once).
    expand() {
      local todo=("$1") seen=" " g x
      while [ ${#todo[@]} -gt 0 ]; do
        g=${todo[0]}
        todo=("${todo[@]:1}")
        case $seen in *" $g "*) continue ;; esac
        seen="$seen$g "
        # Members are the indented lines; the first line names the group.
        for x in $(systemd-analyze syscall-filter --no-pager "$g" |
          sed -n 's/^ \{1,\}\([-@a-z0-9_]\{1,\}\)$/\1/p'); do
          case $x in
          @*) todo+=("$x") ;;
          *) echo "$x" ;;
          esac
        done
      done
    }
    if command -v systemd-analyze >/dev/null 2>&1; then
      expand @system-service | sort -u >"$tmp/allowed"
      expand @privileged | sort -u >"$tmp/denied"
      sed -n 's/^[0-9]\{1,\} \{1,\}\([a-z0-9_]*\)(.*/\1/p' "$tmp/trace" | sort -u >"$tmp/used"
      [ -s "$tmp/used" ] || fail "strace recorded no system calls"
      # execve is strace's own start of the binary, before the filter
      # would apply under systemd.
      out=$(comm -23 "$tmp/used" "$tmp/allowed" | grep -vx execve)
      [ -z "$out" ] || fail "system calls outside @system-service: $(echo $out)"
      out=$(comm -12 "$tmp/used" "$tmp/denied")
      [ -z "$out" ] || fail "system calls in @privileged: $(echo $out)"
      echo "$(wc -l <"$tmp/used") distinct system calls, all allowed by SystemCallFilter="
    else
      echo "no systemd-analyze: system calls recorded, not checked"
    fi
    fams=$(sed -n 's/^[0-9]\{1,\} \{1,\}socket(\(AF_[A-Z0-9]*\),.*/\1/p' "$tmp/trace" | sort -u | tr '\n' ' ')
    case " $fams" in
    *" AF_INET "*) ;;
    *) fail "no AF_INET socket traced (families: $fams)" ;;
    esac
    for f in $fams; do
      [ "$f" = AF_INET ] || [ "$f" = AF_INET6 ] ||
        fail "a socket of family $f, which RestrictAddressFamilies= forbids"
    done
  fi
  expect_no_leftovers
  echo "exec: ExecStart= serves a job with the secret from the credential"
  ;;
*)
  fail "unknown mode"
  ;;
esac
