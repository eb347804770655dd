#!/usr/bin/env bash
# The collectives across two network namespaces: a 2x2 job whose ring
# crosses a veth pair over TCP for real (192.168.x.y addresses that exist
# only inside the namespaces) and uses shared memory inside each one.
# ddprun-rdzv runs in namespace A; one ddprun per namespace joins it.
#
# Usage: netns_coll.sh DDPRUN DDPRUN_RDZV COLL_CHECK
# Needs root and iproute2; otherwise prints "SKIP: <reason>" and exits 77.
# Readiness of the server is its "listening on" log line, read from a
# FIFO (no polling). Every process and both namespaces are removed on
# every exit path, and every step is bounded well below ctest's TIMEOUT.
set -u

ddprun=${1:?usage: netns_coll.sh DDPRUN DDPRUN_RDZV COLL_CHECK}
rdzv=${2:?}
worker=${3:?}

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# shellcheck source=../lib/netns.sh
. "$(dirname "$0")/../lib/netns.sh"
netns_init netns_coll
netns_make_pair
netns_rdzv port 90 "$rdzv" --nnodes 2 --rdzv-id commnet

for node in a b; do
  eval ns=\$ns_$node
  timeout -k 2 80 ip netns exec "$ns" "$ddprun" --nnodes 2 \
    --nproc-per-node 2 --rdzv-endpoint "$addr_a:$port" --rdzv-id commnet \
    --rdzv-conf is_host=0,join_timeout=30 --log-level warn \
    "$worker" --timeout-ms 30000 >"$tmp/out.$node" 2>"$tmp/err.$node" &
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
[ "$rc_a" -eq 0 ] || { show; fail "ddprun in $ns_a exited $rc_a"; }
[ "$rc_b" -eq 0 ] || { show; fail "ddprun in $ns_b exited $rc_b"; }

cat "$tmp/out.a" "$tmp/out.b" >"$tmp/all"
n_ok=$(grep -c "coll_check: rank [0-3] of 4: ok" "$tmp/all")
[ "$n_ok" -eq 4 ] || { show; fail "$n_ok of 4 ranks passed"; }
# Every rank sees the same ring: two shared-memory links inside the
# namespaces and two TCP links across them.
ring=$(sed -n 's/.*coll_check: rank [0-3] of 4: \(ring of 4: .*\)/\1/p' "$tmp/all" | sort -u)
[ "$(echo "$ring" | wc -l)" -eq 1 ] || { show; fail "ranks disagree on the ring: $ring"; }
n_shm=$(echo "$ring" | grep -o shm | wc -l)
n_tcp=$(echo "$ring" | grep -o tcp | wc -l)
[ "$n_shm" -eq 2 ] && [ "$n_tcp" -eq 2 ] || { show; fail "expected 2 shm and 2 tcp links: $ring"; }
echo "PASS: 2x2 across $ns_a ($addr_a) and $ns_b ($addr_b): $ring"
exit 0
