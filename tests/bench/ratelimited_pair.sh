# shellcheck shell=bash
# shellcheck disable=SC2154  # the sourcing script sets them (see below)
# The rate-limited namespace pair of overlap_netns.sh and plan_netns.sh,
# sourced by both: two network namespaces joined by a veth pair, both ends
# shaped by `tc qdisc add dev veth0 root tbf rate 1gbit burst $burst latency
# 50ms` (GSO segments capped at $gso bytes first when set), and one 2x1 job
# of train on it (one rank per namespace, ddprun-rdzv in namespace A).
#
# The script sets before sourcing: bench (its name), ddprun, rdzv, train,
# burst, gso (may be empty); before pair_job: model (train's arguments),
# steps, job_secs. It may define pair_before_job, run before each job.
# Provides skip, fail, field, pair_job; $tmp, $ns_a, $ns_b, $addr_a and the
# cleanup come from tests/lib/netns.sh.

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $bench: $*" >&2
  exit 1
}

command -v tc >/dev/null 2>&1 || skip "no 'tc' command (iproute2)"
command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"
for f in "$ddprun" "$rdzv" "$train"; do
  [ -x "$f" ] || fail "not an executable: $f"
done

# shellcheck source=../lib/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/netns.sh"
netns_init "$bench"

# Before the link goes up: GSO segments no larger than the tbf burst, when
# asked (see README.md).
cap_gso() {
  [ -n "$gso" ] || return 0
  ip -n "$1" link set veth0 gso_max_size "$gso" 2>"$tmp/err" ||
    fail "gso_max_size $gso in $1: $(head -n 1 "$tmp/err")"
}
netns_make_pair cap_gso
for ns in $ns_a $ns_b; do
  ip netns exec "$ns" tc qdisc add dev veth0 root tbf rate 1gbit \
    burst "$burst" latency 50ms 2>"$tmp/err" ||
    skip "tc tbf in $ns failed: $(head -n 1 "$tmp/err")"
done

# field LINE KEY: the value of KEY=VALUE in LINE.
field() {
  local v=" $1 "
  v=${v#*" $2="}
  echo "${v%% *}"
}

# pair_job TAG TRAIN_ARGS...: one 2x1 job of train $model --steps $steps
# TRAIN_ARGS; fails unless both nodes exit 0 and the ring crosses the link
# over TCP. Rank 0's lines (without the [rank0]: prefix) go to
# $tmp/TAG.rank0, its final line (without "final ") to $line.
pair_job() {
  local tag=$1
  shift
  local port
  if declare -F pair_before_job >/dev/null; then pair_before_job; fi
  netns_rdzv port "$((job_secs + 20))" "$rdzv" --nnodes 2 --rdzv-id "$tag"
  local rdzv_pid=$netns_rdzv_pid
  local node p_a p_b
  for node in a b; do
    eval ns=\$ns_$node
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 timeout -k 2 "$job_secs" ip netns exec "$ns" \
      "$ddprun" --nnodes 2 --nproc-per-node 1 \
      --rdzv-endpoint "$addr_a:$port" --rdzv-id "$tag" \
      --rdzv-conf is_host=0,join_timeout=30 --log-level warn \
      "$train" $model --steps "$steps" --log-every "$steps" "$@" \
      >"$tmp/$tag.$node.out" 2>"$tmp/$tag.$node.err" &
    eval p_$node=\$!
    eval pids=\"\$pids \$p_$node\"
  done
  local rc_a=0 rc_b=0
  wait "$p_a" || rc_a=$?
  wait "$p_b" || rc_b=$?
  wait "$rdzv_pid" 2>/dev/null
  pids=
  if [ "$rc_a" -ne 0 ] || [ "$rc_b" -ne 0 ]; then
    for node in a b; do
      echo "--- $tag node $node" >&2
      tail -n 20 "$tmp/$tag.$node.out" "$tmp/$tag.$node.err" >&2
    done
    fail "$tag: ddprun exited $rc_a in $ns_a and $rc_b in $ns_b"
  fi
  grep -q "ring of 2: tcp" "$tmp/$tag".[ab].out "$tmp/$tag".[ab].err ||
    { tail -n 20 "$tmp/$tag.a.err" >&2; fail "$tag: the ring does not use TCP across the link"; }
  sed -n 's/^\[rank0\]:\(.*\)$/\1/p' "$tmp/$tag".[ab].out "$tmp/$tag".[ab].err \
    >"$tmp/$tag.rank0"
  line=$(sed -n 's/^final \(.*\)$/\1/p' "$tmp/$tag.rank0" | tail -n 1)
  [ -n "$line" ] || fail "$tag: no final line from rank 0"
}
