# shellcheck shell=bash
# shellcheck disable=SC2154  # the sourcing script sets them (see below)
# shellcheck disable=SC2034  # pair_args sets them for the sourcing script
# The rate-limited namespace pair of overlap_netns.sh and plan_netns.sh,
# sourced by both: their common options, two network namespaces joined by
# a veth pair, both ends shaped by `tc qdisc add dev veth0 root tbf rate
# 1gbit burst $burst latency 50ms` (GSO segments capped at $gso bytes first
# when set), and one 2x1 job of train on it (one rank per namespace,
# ddprun-rdzv in namespace A).
#
# The script sets bench (its name) before sourcing, caps (its default)
# before pair_args, model (train's arguments) before pair_job. It may
# define pair_option (its own options) and pair_before_job, run before each
# job. Provides skip, fail, field, pair_args, pair_setup, pair_job; $tmp,
# $ns_a, $ns_b, $addr_a and the cleanup come from tests/lib/netns.sh.

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $bench: $*" >&2
  exit 1
}

# pair_args SMOKE_STEPS ARGS...: the options both scripts take, then
# DDPRUN DDPRUN_RDZV TRAIN (ddprun, rdzv, train). --steps N (30), --runs N
# (1), --caps "..." (the script's), --batch B (768), --burst SIZE (64kb),
# --gso-max-size BYTES (none); any other goes to the script's
# pair_option NAME VALUE, which returns non-zero for one it does not take.
# --smoke: SMOKE_STEPS steps of --batch 32, caps 1 and 25, one run. Sets
# job_secs, the bound on each job.
pair_args() {
  local smoke_steps=$1
  shift
  smoke=0
  steps=30
  runs=1
  batch=768
  burst=64kb
  gso=
  while [ $# -gt 3 ]; do
    case $1 in
      --smoke) smoke=1; shift; continue ;;
      --steps) steps=$2 ;;
      --runs) runs=$2 ;;
      --caps) caps=$2 ;;
      --batch) batch=$2 ;;
      --burst) burst=$2 ;;
      --gso-max-size) gso=$2 ;;
      *)
        if ! declare -F pair_option >/dev/null || ! pair_option "$1" "$2"; then
          echo "$bench: unknown option $1" >&2
          exit 2
        fi ;;
    esac
    shift 2
  done
  ddprun=${1:?usage: $bench.sh [options] DDPRUN DDPRUN_RDZV TRAIN}
  rdzv=${2:?}
  train=${3:?}
  if [ "$smoke" -eq 1 ]; then
    steps=$smoke_steps
    runs=1
    caps="1 25"
    batch=32
  fi
  job_secs=$((smoke ? 25 : 60 + steps * 3))
}

# shellcheck source=../lib/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/netns.sh"

# Before the link goes up: GSO segments no larger than the tbf burst, when
# asked (see tests/bench/README.md).
cap_gso() {
  [ -n "$gso" ] || return 0
  ip -n "$1" link set veth0 gso_max_size "$gso" 2>"$tmp/err" ||
    fail "gso_max_size $gso in $1: $(head -n 1 "$tmp/err")"
}

# pair_setup: after pair_args, the tools checked, the namespaces and the
# shaped link made (skip, exit 77, where this host cannot).
pair_setup() {
  command -v tc >/dev/null 2>&1 || skip "no 'tc' command (iproute2)"
  command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command"
  local f ns
  for f in "$ddprun" "$rdzv" "$train"; do
    [ -x "$f" ] || fail "not an executable: $f"
  done
  netns_init "$bench"
  netns_make_pair cap_gso
  for ns in $ns_a $ns_b; do
    ip netns exec "$ns" tc qdisc add dev veth0 root tbf rate 1gbit \
      burst "$burst" latency 50ms 2>"$tmp/err" ||
      skip "tc tbf in $ns failed: $(head -n 1 "$tmp/err")"
  done
}

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
