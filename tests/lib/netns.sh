# Two test hosts in network namespaces joined by a veth pair, for tests
# sourced from bash. The caller defines fail MESSAGE and skip MESSAGE
# (exit 77) and keeps the pids it starts in $pids; this file owns $tmp,
# the namespaces and their clean-up.
#
#   . tests/lib/netns.sh
#   netns_init NAME            # $ns_a $ns_b $addr_a $addr_b, $tmp, traps
#   netns_make_pair [HOOK]     # HOOK NS runs in each before veth0 goes up
#   netns_rdzv PORTVAR ARGS... # ddprun-rdzv in A on $addr_a, port read
#                              # from its "listening on" line (no polling)
#
# Addresses are 192.168.N.1 and .2 inside the namespaces only (N from the
# pid); the pair is created directly in them and never appears here.

netns_cleanup() {
  trap - EXIT INT TERM HUP
  for p in $pids; do
    kill -TERM "$p" 2>/dev/null
  done
  # Anything still inside the namespaces was started by this test.
  for ns in $netns_made; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null
    done
  done
  for p in $pids; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for ns in $netns_made; do
    ip netns del "$ns" 2>/dev/null
  done
  [ -n "$tmp" ] && [ -z "${NETNS_KEEP_TMP:-}" ] && rm -rf "$tmp"
}

netns_init() {
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
  command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
  ns_a=ddprun-$1-a-$$
  ns_b=ddprun-$1-b-$$
  local net=$(($$ % 250 + 1))
  addr_a=192.168.$net.1
  addr_b=192.168.$net.2
  tmp=
  pids=${pids:-}
  netns_made=
  trap netns_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || fail "mktemp -d failed"
}

netns_make_pair() {
  local ns
  for ns in $ns_a $ns_b; do
    ip netns add "$ns" 2>"$tmp/err" ||
      skip "ip netns add failed: $(head -n 1 "$tmp/err")"
    netns_made="$netns_made $ns"
  done
  ip link add veth0 netns "$ns_a" type veth peer name veth0 netns "$ns_b" \
    2>"$tmp/err" || skip "cannot create a veth pair: $(head -n 1 "$tmp/err")"
  ip -n "$ns_a" addr add "$addr_a/24" dev veth0 || fail "address in $ns_a"
  ip -n "$ns_b" addr add "$addr_b/24" dev veth0 || fail "address in $ns_b"
  for ns in $ns_a $ns_b; do
    ip -n "$ns" link set lo up || fail "lo up in $ns"
    [ -z "${1:-}" ] || "$1" "$ns"
    ip -n "$ns" link set veth0 up || fail "veth0 up in $ns"
  done
}

# netns_rdzv PORTVAR SECONDS RDZV ARGS...: starts RDZV in A on $addr_a with
# --port 0 under `timeout SECONDS`, adds it to $pids ($netns_rdzv_pid), and
# sets PORTVAR from its first "listening on" line (so no --log-level below
# info), read through a FIFO within 20 s. Its log lands in $netns_rdzv_log.
netns_rdzv_n=0
netns_rdzv() {
  local _var=$1 _secs=$2 _rdzv=$3 _line _port=
  shift 3
  netns_rdzv_n=$((netns_rdzv_n + 1))
  local fifo=$tmp/rdzv.$netns_rdzv_n.fifo
  netns_rdzv_log=$tmp/rdzv.$netns_rdzv_n.err
  mkfifo "$fifo" || fail "mkfifo failed"
  timeout -k 2 "$_secs" ip netns exec "$ns_a" "$_rdzv" --host "$addr_a" \
    --port 0 "$@" >/dev/null 2>"$fifo" &
  netns_rdzv_pid=$!
  pids="$pids $netns_rdzv_pid"
  exec 3<"$fifo"
  while IFS= read -r -t 20 _line <&3; do
    echo "$_line" >>"$netns_rdzv_log"
    case $_line in
      *"listening on $addr_a:"*)
        _port=${_line##*"listening on $addr_a:"}
        _port=${_port%% *}
        break
        ;;
    esac
  done
  [ -n "$_port" ] ||
    { cat "$netns_rdzv_log" >&2; fail "ddprun-rdzv did not report listening within 20 s"; }
  case $_port in
    *[!0-9]*) fail "the server reported port '$_port'" ;;
  esac
  cat <&3 >>"$netns_rdzv_log" &
  pids="$pids $!"
  exec 3<&-
  printf -v "$_var" '%s' "$_port"
}

# netns_make_star N: N test hosts, each in a namespace of its own
# (${star_ns[i]}, address ${star_addr[i]} = 192.168.N.(i+1)), joined by a
# bridge in one more namespace ($ns_sw), whose port p<i> leads to host i:
# `ip -n "$ns_sw" link set p<i> down` cuts host i off, `up` brings it back.
# After netns_init.
netns_make_star() {
  local n=$1 i ns net=$(($$ % 250 + 1))
  ns_sw=${ns_a%-a-*}-sw-$$
  ip netns add "$ns_sw" 2>"$tmp/err" ||
    skip "ip netns add failed: $(head -n 1 "$tmp/err")"
  netns_made="$netns_made $ns_sw"
  ip -n "$ns_sw" link add br0 type bridge 2>"$tmp/err" ||
    skip "cannot create a bridge: $(head -n 1 "$tmp/err")"
  ip -n "$ns_sw" link set br0 up || fail "br0 up in $ns_sw"
  star_ns=()
  star_addr=()
  for ((i = 0; i < n; i++)); do
    ns=${ns_a%-a-*}-$i-$$
    ip netns add "$ns" 2>"$tmp/err" ||
      skip "ip netns add failed: $(head -n 1 "$tmp/err")"
    netns_made="$netns_made $ns"
    ip link add veth0 netns "$ns" type veth peer name "p$i" netns "$ns_sw" \
      2>"$tmp/err" || skip "cannot create a veth pair: $(head -n 1 "$tmp/err")"
    ip -n "$ns_sw" link set "p$i" master br0 || fail "p$i into br0"
    ip -n "$ns_sw" link set "p$i" up || fail "p$i up"
    star_ns[i]=$ns
    star_addr[i]=192.168.$net.$((i + 1))
    ip -n "$ns" addr add "${star_addr[i]}/24" dev veth0 || fail "address in $ns"
    ip -n "$ns" link set lo up || fail "lo up in $ns"
    ip -n "$ns" link set veth0 up || fail "veth0 up in $ns"
  done
}
