#!/usr/bin/env bash
# A 2x2 job across two network namespaces joined by a veth pair: the
# rendezvous server and node A live in one namespace, node B in the other,
# each with its own address, so MASTER_ADDR must be a real address of the
# master node and not loopback. Node B runs with NCCL_SOCKET_IFNAME=lo,
# which leaves out veth0, the interface it reaches the rendezvous from: it
# says so, once, and the job runs.
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

command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"
[ -x "$ddprun" ] || fail "ddprun not found at '$ddprun'"
[ -x "$rdzv" ] || fail "ddprun-rdzv not found at '$rdzv'"

# Names and the subnet come from this shell's pid, so concurrent runs (and
# whatever else the host has) do not collide. The addresses exist only
# inside the two namespaces.
# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
netns_init netns_2x2
netns_make_pair
netns_rdzv port 40 "$rdzv" --nnodes 2 --rdzv-id netns2x2

worker='echo ENV rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT'
for node in a b; do
  eval ns=\$ns_$node
  ifname=
  [ "$node" = b ] && ifname=lo
  TMPDIR=$tmp NCCL_SOCKET_IFNAME=$ifname timeout -k 2 30 \
    ip netns exec "$ns" "$ddprun" --nnodes 2 \
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
  cat "$netns_rdzv_log" >&2
}
[ "$rc_a" -eq 0 ] || { show; fail "ddprun in $ns_a exited with $rc_a"; }
[ "$rc_b" -eq 0 ] || { show; fail "ddprun in $ns_b exited with $rc_b"; }
want="this node reaches the rendezvous from $addr_b on veth0, which NCCL_SOCKET_IFNAME=lo leaves out"
[ "$(grep -c "$want" "$tmp/err.b")" = 1 ] ||
  { show; fail "node b did not say once: $want"; }
! grep -q "reaches the rendezvous from" "$tmp/err.a" ||
  { show; fail "node a, with no NCCL_SOCKET_IFNAME, warned"; }

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
