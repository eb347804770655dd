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

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"

ns_a=ddprun-comm-a-$$
ns_b=ddprun-comm-b-$$
net=$(($$ % 250 + 1))
addr_a=192.168.$net.1
addr_b=192.168.$net.2
tmp=
pids=
made=

cleanup() {
  trap - EXIT INT TERM HUP
  for p in $pids; do
    kill -TERM "$p" 2>/dev/null
  done
  for ns in $made; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null
    done
  done
  for p in $pids; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for ns in $made; do
    ip netns del "$ns" 2>/dev/null
  done
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

tmp=$(mktemp -d "${TMPDIR:-/tmp}/netns_coll.XXXXXX") || fail "mktemp -d failed"
for ns in $ns_a $ns_b; do
  ip netns add "$ns" 2>"$tmp/err" ||
    skip "ip netns add failed: $(head -n 1 "$tmp/err")"
  made="$made $ns"
done
ip link add veth0 netns "$ns_a" type veth peer name veth0 netns "$ns_b" \
  2>"$tmp/err" || skip "cannot create a veth pair: $(head -n 1 "$tmp/err")"
ip -n "$ns_a" addr add "$addr_a/24" dev veth0 || fail "address in $ns_a"
ip -n "$ns_b" addr add "$addr_b/24" dev veth0 || fail "address in $ns_b"
for ns in $ns_a $ns_b; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  ip -n "$ns" link set veth0 up || fail "veth0 up in $ns"
done

# The server, on A's address and a port the kernel picks; its log goes
# through a FIFO whose first "listening on" line gives the port.
mkfifo "$tmp/rdzv.fifo" || fail "mkfifo failed"
timeout -k 2 90 ip netns exec "$ns_a" "$rdzv" --host "$addr_a" --port 0 \
  --nnodes 2 --rdzv-id commnet 2>"$tmp/rdzv.fifo" >"$tmp/rdzv.out" &
pids="$pids $!"
exec 3<"$tmp/rdzv.fifo"
port=
while IFS= read -r -t 20 line <&3; do
  echo "$line" >>"$tmp/rdzv.err"
  case $line in
    *"listening on $addr_a:"*)
      port=${line##*"listening on $addr_a:"}
      port=${port%% *}
      break
      ;;
  esac
done
[ -n "$port" ] || { cat "$tmp/rdzv.err" >&2; fail "ddprun-rdzv did not report listening within 20 s"; }
cat <&3 >>"$tmp/rdzv.err" &
pids="$pids $!"
exec 3<&-

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
  cat "$tmp/rdzv.err" >&2
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
