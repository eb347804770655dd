#!/usr/bin/env bash
# Each rank's health as its agent observes it, for any program, end to end
# (ddprun --standalone --nproc-per-node 2, python3 workers):
#
#   status  rank 0 spins, rank 1 holds 200 MiB more: `ddprun status` shows
#           both RSS figures and their peaks, names rank 1 as above the
#           median, shows more CPU use for rank 0 than for rank 1 (not a
#           share of a CPU, which load decides); /metrics has the per-rank
#           gauges. With a stand-in NVML (DDPRUN_TEST_NVML_LIB, the unit
#           tests' fake_nvml, told the workers' pids once they run), the
#           GPU columns, the GPU nearly full named, the GPU memory gauge.
#   oom     rank 1, once the agent has seen it hold 100 MiB, moves itself
#           into a memory cgroup of 64 MiB and allocates until the kernel
#           kills it: the failure summary names the OOM killer with its
#           last RSS and peak. Needs root and a writable memory cgroup (v2
#           with the memory controller, or v1); skipped (77) otherwise.
#   oom_shell  the same under a shell that passes its child's end on as
#           exit code 137: named as the OOM killer's too.
#
# Usage: rank_health.sh MODE DDPRUN FAKE_NVML
set -u
mode=${1:?usage: rank_health.sh MODE DDPRUN FAKE_NVML}
ddprun=${2:?} fake_nvml=${3:?}
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rank_health.XXXXXX") || exit 1
pid=
cg=
cleanup() {
  touch "$tmp/stop"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  [ -z "$cg" ] || rmdir "$cg" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: rank_health.$mode: $*" >&2
  for f in err status.txt; do
    [ -f "$tmp/$f" ] && { echo "--- $f" >&2; tail -n 40 "$tmp/$f" >&2; }
  done
  exit 1
}
host=$(hostname)

# The workers: each says it runs (its pid, in ready.RANK), rank 0 where
# the job's server is; then each does what the mode asks until stop.
cat >"$tmp/worker.py" <<'EOF'
import os, sys, time
d, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
deadline = time.time() + 90


def touched(n_bytes):
    b = bytearray(n_bytes)
    for i in range(0, n_bytes, 4096):
        b[i] = 1
    return b


def say(name, text):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))


def stopped():
    return os.path.exists(os.path.join(d, "stop")) or time.time() > deadline


hold = touched((200 if mode == "status" else 100) << 20) if rank == 1 else None
if rank == 0:
    say("endpoint", "%s %s\n" % (os.environ["DDPRUN_RDZV_ENDPOINT"],
                                 os.environ["DDPRUN_RUN_ID"]))
say("ready.%d" % rank, "%d\n" % os.getpid())
if mode == "status" and rank == 0:
    while not stopped():  # spin
        for _ in range(20000):
            pass
elif mode == "oom" and rank == 1:
    while not os.path.exists(os.path.join(d, "go")) and not stopped():
        time.sleep(0.05)
    with open(os.path.join(d, "cgroup")) as f:
        cg = f.read().strip()
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    more = []
    while not stopped():  # until the kernel kills it
        more.append(touched(8 << 20))
    sys.exit(5)  # not killed: the test says so
else:
    while not stopped():
        time.sleep(0.05)
EOF

# wait_file FILE SECS: FILE exists within SECS.
wait_file() {
  for _ in $(seq $(($2 * 10))); do
    [ -s "$1" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start ARGS...: ddprun in the background, its stderr in $tmp/err; the
# workers under a shell that forks them in oom_shell.
start() {
  local prog=(python3 "$tmp/worker.py" "$tmp" "${mode%_shell}")
  [ "$mode" != oom_shell ] ||
    prog=(sh -c 'python3 "$0" "$@"; exit $?' "${prog[@]:1}")
  timeout -k 5 90 "$ddprun" --standalone --nproc-per-node 2 \
    --rdzv-conf metrics_port=0 "$@" "${prog[@]}" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  wait_file "$tmp/endpoint" 30 || fail "rank 0 did not start"
  wait_file "$tmp/ready.1" 30 || fail "rank 1 did not start"
  read -r ep id <"$tmp/endpoint"
  pid0=$(cat "$tmp/ready.0")
  pid1=$(cat "$tmp/ready.1")
}

status() { "$ddprun" status --rdzv-endpoint "$ep" --rdzv-id "$id" "$@"; }

# until_json SECS PYTHON: `ddprun status --json` into $tmp/s.json until
# PYTHON (given j, the object, and r, its ranks by rank) holds.
until_json() {
  local secs=$1 check=$2
  for _ in $(seq $((secs * 5))); do
    status --json >"$tmp/s.json" 2>/dev/null &&
      python3 -c "import json,sys
j = json.load(open(sys.argv[1]))
r = {x['rank']: x for x in j['ranks']}
sys.exit(0 if len(r) == 2 and ($check) else 1)" "$tmp/s.json" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

MIB=$((1 << 20))
GIB=$((1 << 30))

case $mode in
status)
  : >"$tmp/procs"
  export DDPRUN_TEST_NVML_LIB=$fake_nvml FAKE_NVML_PROCS_FILE=$tmp/procs
  # Device 0: 76 of 80 GiB in use, 97% busy; device 1: 10 of 80, 12%.
  export FAKE_NVML_MEM="$((76 * GIB)):$((80 * GIB)),$((10 * GIB)):$((80 * GIB))"
  export FAKE_NVML_UTIL=97,12
  start
  # Until both RSS figures, rank 0's CPU and rank 1 named are reported
  # (the agents sample on their heartbeat; the CPU needs 2 s of samples).
  until_json 30 "r[0]['rss_bytes'] and r[1]['rss_bytes'] and
    r[0]['cpu'] is not None and r[1]['rss_above_median']" ||
    fail "ddprun status never showed both RSS figures and rank 0's CPU: $(cat "$tmp/s.json")"
  python3 - "$tmp/s.json" $MIB <<'EOF' || fail "the figures are off: $(cat "$tmp/s.json")"
import json, sys
j = json.load(open(sys.argv[1]))
mib = int(sys.argv[2])
r = {x["rank"]: x for x in j["ranks"]}
# rank 1 holds 200 MiB more than rank 0 (margins: the interpreter's own).
assert r[1]["rss_bytes"] >= r[0]["rss_bytes"] + 150 * mib, r
assert r[1]["rss_bytes"] >= 200 * mib and r[0]["rss_bytes"] < 150 * mib, r
for x in r.values():
    assert x["rss_peak_bytes"] >= x["rss_bytes"], x
assert r[1]["rss_above_median"] > 0.10 and r[0]["rss_above_median"] is None, r
assert j["rss_median_bytes"] == (r[0]["rss_bytes"] + r[1]["rss_bytes"]) // 2, j
# rank 0 spins, rank 1 sleeps: more CPU than the sleeper, whatever share
# of a CPU a loaded host leaves it; the sleeper far from one CPU.
assert r[0]["cpu"] > r[1]["cpu"] and r[1]["cpu"] < 0.5, r
# No GPU process yet: the GPU figures are unknown.
assert r[0]["gpu_memory_bytes"] is None and r[1]["gpu_memory_bytes"] is None, r
EOF
  status >"$tmp/status.txt" || fail "ddprun status failed"
  grep -q "^  rank .* rss  peak rss   cpu$" "$tmp/status.txt" ||
    fail "no rss, peak rss and cpu columns"
  grep -q "gpu" "$tmp/status.txt" && fail "GPU columns or lines without GPU figures"
  grep -Eq "^  1 .* running .* 2[0-9][0-9] MiB +2[0-9][0-9] MiB +[0-9]+%$" \
    "$tmp/status.txt" || fail "rank 1's row does not show its 200+ MiB"
  grep -Eq "^memory: rank 1: RSS 2[0-9][0-9] MiB, [0-9]+% above the median [0-9]+ MiB$" \
    "$tmp/status.txt" || fail "rank 1 is not named as above the median"
  grep -q "^memory: rank 0" "$tmp/status.txt" && fail "rank 0 named as above the median"
  cat "$tmp/status.txt"

  mport=$(sed -n 's#.*serving metrics on http://[^ ]*:\([0-9]*\)/metrics.*#\1#p' "$tmp/err" | head -n 1)
  [ -n "$mport" ] || fail "ddprun did not log its metrics endpoint"
  python3 "$(dirname "$0")/../metrics/mclient.py" metrics "$mport" >"$tmp/m.prom" ||
    fail "scrape failed"
  for f in rank_rss_bytes rank_rss_peak_bytes rank_cpu_ratio \
    rank_gpu_memory_bytes rank_gpu_utilization_ratio; do
    grep -qx "# TYPE ddprun_rdzv_$f gauge" "$tmp/m.prom" || fail "/metrics lacks ddprun_rdzv_$f"
  done
  rss1=$(awk -v s="ddprun_rdzv_rank_rss_bytes{rank=\"1\",node=\"0\",local_rank=\"1\",host=\"$host\"}" \
    '$1 == s { print $2 }' "$tmp/m.prom")
  [ -n "$rss1" ] && [ "$rss1" -ge $((200 * MIB)) ] ||
    fail "/metrics: rank 1's RSS gauge is '$rss1'"
  grep -q '^ddprun_rdzv_rank_cpu_ratio{rank="0",' "$tmp/m.prom" || fail "/metrics: no CPU gauge of rank 0"
  grep -q '^ddprun_rdzv_rank_gpu_memory_bytes{' "$tmp/m.prom" &&
    fail "/metrics: a GPU memory series while no rank holds a GPU context"

  # The GPUs: rank 0's process holds 3 GiB on device 0, rank 1's 1 GiB on
  # device 1.
  echo "0:$pid0:$((3 * GIB)),1:$pid1:$GIB" >"$tmp/procs"
  until_json 15 "r[0]['gpu_memory_bytes'] and r[1]['gpu_memory_bytes']" ||
    fail "the GPU figures never came: $(cat "$tmp/s.json")"
  python3 - "$tmp/s.json" $GIB <<'EOF' || fail "the GPU figures are off: $(cat "$tmp/s.json")"
import json, sys
j = json.load(open(sys.argv[1]))
gib = int(sys.argv[2])
r = {x["rank"]: x for x in j["ranks"]}
assert r[0]["gpu_memory_bytes"] == 3 * gib and r[0]["gpu_util_percent"] == 97, r
assert r[0]["gpu_device_used_bytes"] == 76 * gib, r
assert r[0]["gpu_device_total_bytes"] == 80 * gib and r[0]["gpu_memory_full"], r
assert r[1]["gpu_memory_bytes"] == gib and r[1]["gpu_util_percent"] == 12, r
assert not r[1]["gpu_memory_full"], r
EOF
  status >"$tmp/status.txt" || fail "ddprun status failed"
  grep -q "^  rank .* rss  peak rss   cpu   gpu mem  gpu$" "$tmp/status.txt" ||
    fail "no GPU columns"
  grep -Eq "^  0 .* 3\.0 GiB  97%$" "$tmp/status.txt" || fail "rank 0's GPU cells"
  grep -qx "gpu memory: rank 0 (node 0 on $host): its GPU has 95% of its memory in use (76.0 GiB of 80.0 GiB; the rank's processes 3.0 GiB)" \
    "$tmp/status.txt" || fail "the nearly full GPU is not named"
  grep -q "^gpu memory: rank 1" "$tmp/status.txt" && fail "rank 1's GPU named"
  cat "$tmp/status.txt"
  python3 "$(dirname "$0")/../metrics/mclient.py" metrics "$mport" >"$tmp/m.prom" ||
    fail "scrape failed"
  grep -qx "ddprun_rdzv_rank_gpu_memory_bytes{rank=\"0\",node=\"0\",local_rank=\"0\",host=\"$host\"} $((3 * GIB))" \
    "$tmp/m.prom" || fail "/metrics: rank 0's GPU memory gauge"
  grep -qx "ddprun_rdzv_rank_gpu_utilization_ratio{rank=\"0\",node=\"0\",local_rank=\"0\",host=\"$host\"} 0.97" \
    "$tmp/m.prom" || fail "/metrics: rank 0's GPU utilisation gauge"

  touch "$tmp/stop"
  rc=0
  wait "$pid" || rc=$?
  pid=
  [ "$rc" = 0 ] || fail "ddprun exited $rc"
  echo "PASS: rank_health.status: RSS, peak, CPU and GPU per rank in ddprun status and /metrics; rank 1 named above the median"
  ;;

oom | oom_shell)
  [ "$(id -u)" = 0 ] || { echo "SKIP: not root: no memory cgroup to make"; exit 77; }
  name=ddprun-rank-health-$$
  if grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
    mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
    cg=/sys/fs/cgroup/$name
    echo $((64 * MIB)) >"$cg/memory.max" || fail "cannot set $cg/memory.max"
    [ ! -e "$cg/memory.swap.max" ] || echo 0 >"$cg/memory.swap.max"
  elif [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/$name
    echo $((64 * MIB)) >"$cg/memory.limit_in_bytes" || fail "cannot set $cg's limit"
    echo 0 >"$cg/memory.swappiness" 2>/dev/null
  else
    echo "SKIP: no writable memory cgroup (v2 with the memory controller, or v1)"
    exit 77
  fi
  grep -q '^oom_kill ' /proc/vmstat ||
    { echo "SKIP: this kernel does not count OOM kills in /proc/vmstat"; exit 77; }
  echo "$cg" >"$tmp/cgroup"
  start --max-restarts 0
  # The agent has seen rank 1 hold its 100 MiB: its last RSS is known.
  until_json 30 "(r[1]['rss_bytes'] or 0) >= 100 * 2**20" ||
    fail "ddprun status never showed rank 1's 100 MiB: $(cat "$tmp/s.json")"
  touch "$tmp/go"
  rc=0
  wait "$pid" || rc=$?
  pid=
  [ "$rc" = 137 ] || fail "ddprun exited $rc, not 137 (128 + SIGKILL)"
  # The rank is python3 itself, or the shell that ran it.
  if [ "$mode" = oom ]; then
    what="killed by the OOM killer \(SIGKILL"
    server="was killed by signal SIGKILL: the OOM killer killed it (its last RSS"
    rpid=$pid1
  else
    what="exited with code 137 \(the OOM killer"
    server="exited with code 137: the OOM killer killed it (its last RSS"
    rpid="[0-9]+"
  fi
  what="$what; its last RSS 1[0-9][0-9] MiB, peak 1[0-9][0-9] MiB\)"
  grep -Eq "^ddprun: rank 1 \(local rank 1, pid $rpid\) $what; stopping" \
    "$tmp/err" || fail "the agent did not name the OOM killer as rank 1 failed"
  grep -A1 "^ddprun: root cause (first failure):" "$tmp/err" |
    grep -Eq "rank 1 +local rank 1 +pid $rpid +$what$" ||
    fail "the failure summary does not name the OOM killer"
  grep -qF "$server" "$tmp/err" ||
    fail "the server's root cause does not name the OOM killer"
  grep -B1 -A2 "root cause (first failure)" "$tmp/err"
  echo "PASS: rank_health.$mode: a rank the OOM killer killed is named so, with its last RSS and peak"
  ;;

*)
  fail "unknown mode $mode"
  ;;
esac
