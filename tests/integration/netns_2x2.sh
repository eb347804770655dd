#!/usr/bin/env bash
# A 2x2 job across two network namespaces joined by a veth pair: the
# rendezvous server and node A live in one namespace, node B in the other,
# each with its own address, so MASTER_ADDR must be a real address of the
# master node and not loopback.
#
# Usage: netns_2x2.sh DDPRUN DDPRUN_RDZV
# Needs root and iproute2. Exits 77 (skipped) with "SKIP: <reason>" when the
# namespaces cannot be made. Every process and both namespaces are removed on
# every exit path; the whole test is bounded well below ctest's TIMEOUT so
# the EXIT trap always gets to run.
set -u

ddprun=${1:?usage: netns_2x2.sh DDPRUN DDPRUN_RDZV}
rdzv=${2:?usage: netns_2x2.sh DDPRUN DDPRUN_RDZV}

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"
[ -x "$ddprun" ] || fail "ddprun not found at '$ddprun'"
[ -x "$rdzv" ] || fail "ddprun-rdzv not found at '$rdzv'"

# Names and the subnet come from this shell's pid, so concurrent runs (and
# whatever else the host has) do not collide. The addresses exist only
# inside the two namespaces.
ns_a=ddprun-a-$$
ns_b=ddprun-b-$$
net=$(($$ % 250 + 1))
addr_a=192.168.$net.1
addr_b=192.168.$net.2

tmp=
pids=
made_a=0
made_b=0

cleanup() {
  trap - EXIT INT TERM HUP
  for p in $pids; do
    kill -TERM "$p" 2>/dev/null
  done
  # Anything still inside the namespaces was started by this test.
  for ns in $ns_a $ns_b; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null
    done
  done
  for p in $pids; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  [ "$made_a" -eq 1 ] && ip netns del "$ns_a" 2>/dev/null
  [ "$made_b" -eq 1 ] && ip netns del "$ns_b" 2>/dev/null
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

tmp=$(mktemp -d "${TMPDIR:-/tmp}/netns_2x2.XXXXXX") || fail "mktemp -d failed"

if ! ip netns add "$ns_a" 2>"$tmp/err"; then
  skip "ip netns add failed: $(head -n 1 "$tmp/err")"
fi
made_a=1
if ! ip netns add "$ns_b" 2>"$tmp/err"; then
  skip "ip netns add failed: $(head -n 1 "$tmp/err")"
fi
made_b=1
# Created directly inside the namespaces: the pair never appears in the
# namespace this test runs in.
if ! ip link add veth0 netns "$ns_a" type veth peer name veth0 netns "$ns_b" \
    2>"$tmp/err"; then
  skip "cannot create a veth pair: $(head -n 1 "$tmp/err")"
fi
ip -n "$ns_a" addr add "$addr_a/24" dev veth0 || fail "address on $ns_a"
ip -n "$ns_b" addr add "$addr_b/24" dev veth0 || fail "address on $ns_b"
for ns in $ns_a $ns_b; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  ip -n "$ns" link set veth0 up || fail "veth0 up in $ns"
done

# The server in A, on A's address, on a port the kernel picks. Its log
# goes through a FIFO: the first "listening on" line gives the port, so
# nothing polls.
mkfifo "$tmp/rdzv.fifo" || fail "mkfifo failed"
timeout -k 2 40 ip netns exec "$ns_a" "$rdzv" --host "$addr_a" --port 0 \
  --nnodes 2 --rdzv-id netns2x2 >"$tmp/rdzv.out" 2>"$tmp/rdzv.fifo" &
rdzv_pid=$!
pids="$pids $rdzv_pid"
exec 3<"$tmp/rdzv.fifo"
port=
while IFS= read -r -t 10 line <&3; do
  echo "$line" >>"$tmp/rdzv.err"
  case $line in
    *"listening on $addr_a:"*)
      port=${line##*"listening on $addr_a:"}
      port=${port%% *}
      break
      ;;
  esac
done
[ -n "$port" ] || { cat "$tmp/rdzv.err" >&2; fail "ddprun-rdzv did not report listening within 10 s"; }
cat <&3 >>"$tmp/rdzv.err" &
pids="$pids $!"
exec 3<&-
case $port in
  '' | *[!0-9]*) fail "the server reported port '$port'" ;;
esac

worker='echo ENV rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT'
for node in a b; do
  eval ns=\$ns_$node
  TMPDIR=$tmp timeout -k 2 30 ip netns exec "$ns" "$ddprun" --nnodes 2 \
    --nproc-per-node 2 \
    --rdzv-endpoint "$addr_a:$port" --rdzv-id netns2x2 \
    --rdzv-conf is_host=0,join_timeout=20 sh -c "$worker" \
    >"$tmp/out.$node" 2>"$tmp/err.$node" &
  eval pid_$node=\$!
  eval pids=\"\$pids \$pid_$node\"
done

rc_a=0
rc_b=0
wait "$pid_a" || rc_a=$?
wait "$pid_b" || rc_b=$?

show() {
  for node in a b; do
    echo "--- node $node stdout" >&2
    cat "$tmp/out.$node" >&2
    echo "--- node $node stderr" >&2
    cat "$tmp/err.$node" >&2
  done
  echo "--- ddprun-rdzv stderr" >&2
  cat "$tmp/rdzv.err" >&2
}
[ "$rc_a" -eq 0 ] || { show; fail "ddprun in $ns_a exited with $rc_a"; }
[ "$rc_b" -eq 0 ] || { show; fail "ddprun in $ns_b exited with $rc_b"; }

cat "$tmp/out.a" "$tmp/out.b" >"$tmp/all"
# Each line: [rankN]:ENV rank=N local=L world=W group=G master=ADDR:PORT
if ! awk -v addr_a="$addr_a" -v addr_b="$addr_b" '
  function bad(msg) { print "FAIL: " msg ": " $0 > "/dev/stderr"; err = 1 }
  /ENV / {
    n++
    delete v
    if (!match($0, /^\[rank[0-9]+\]:ENV /)) { bad("line not prefixed [rankN]:"); next }
    prefix = substr($0, 6, index($0, "]") - 6)
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      v[kv[1]] = substr($i, length(kv[1]) + 2)
    }
    r = v["rank"]
    if (r !~ /^[0-3]$/) { bad("rank outside 0..3"); next }
    if (prefix != r) bad("prefix rank differs from RANK")
    if (seen[r]++) bad("rank " r " seen twice")
    if (v["world"] != 4) bad("WORLD_SIZE is not 4")
    if (v["local"] !~ /^[01]$/ || v["group"] !~ /^[01]$/ ||
        r + 0 != v["group"] * 2 + v["local"])
      bad("RANK != GROUP_RANK*2 + LOCAL_RANK")
    if (master == "") master = v["master"]
    else if (v["master"] != master) bad("MASTER differs between ranks")
  }
  END {
    if (n != 4) { print "FAIL: " n+0 " ENV lines, expected 4" > "/dev/stderr"; err = 1 }
    m = master
    sub(/:[0-9]+$/, "", m)
    p = substr(master, length(m) + 2)
    if (m != addr_a && m != addr_b) {
      print "FAIL: MASTER_ADDR " m " is not " addr_a " or " addr_b > "/dev/stderr"
      err = 1
    }
    if (p !~ /^[0-9]+$/ || p < 1 || p > 65535) {
      print "FAIL: MASTER_PORT \"" p "\" is not a port" > "/dev/stderr"
      err = 1
    }
    exit err
  }' "$tmp/all"; then
  show
  fail "the environment contract does not hold"
fi

# ddprun keeps its error files in a private directory under TMPDIR and
# removes it at exit.
for d in "$tmp"/ddprun-*; do
  [ -e "$d" ] && fail "ddprun left $d behind"
done

# Each node ran its own two ranks: node A's group and node B's group differ.
ga=$(sed -n 's/.* group=\([0-9]*\) .*/\1/p' "$tmp/out.a" | sort -u)
gb=$(sed -n 's/.* group=\([0-9]*\) .*/\1/p' "$tmp/out.b" | sort -u)
if [ "$(echo "$ga" | wc -l)" -ne 1 ] || [ "$(echo "$gb" | wc -l)" -ne 1 ] ||
   [ "$ga" = "$gb" ]; then
  show
  fail "each node should hold one GROUP_RANK (A: $ga, B: $gb)"
fi

echo "PASS: 2x2 across $ns_a ($addr_a) and $ns_b ($addr_b)," \
  "master $(sed -n 's/.* master=\([^ ]*\).*/\1/p' "$tmp/all" | head -n 1)"
exit 0
