#!/bin/sh
# Shared memory too small for the rings: a 2-rank job in a private mount
# namespace whose /dev/shm is a 1 MiB tmpfs. Each rank's send link must
# fall back to TCP with exactly one warning line, and every collective
# must still be exact.
#
# Usage: shm_fallback.sh DDPRUN COLL_CHECK
# Needs root (or a user namespace) for unshare --mount; otherwise it
# prints its reason and exits 77 (skipped). The namespace and its tmpfs
# vanish with the job.
set -u

ddprun=${1:?usage: shm_fallback.sh DDPRUN COLL_CHECK}
worker=${2:?}

command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare(1)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shm_fallback.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! unshare --mount --propagation private \
    sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>"$tmp/err"; then
  echo "SKIP: cannot mount a private /dev/shm: $(head -n 1 "$tmp/err")"
  exit 77
fi

timeout -k 5 100 unshare --mount --propagation private sh -c '
  mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 99
  exec "$0" --standalone --nproc-per-node 2 --log-level warn "$1" \
    --timeout-ms 30000' "$ddprun" "$worker" >"$tmp/out" 2>"$tmp/err"
rc=$?

show() {
  echo "--- stdout" >&2
  cat "$tmp/out" >&2
  echo "--- stderr" >&2
  cat "$tmp/err" >&2
}
[ "$rc" -eq 0 ] || { show; echo "FAIL: the job exited $rc" >&2; exit 1; }
for r in 0 1; do
  n=$(grep -c "^\[rank$r\]:ddprun pg: rank $r: shared memory to rank $((1 - r)) unavailable (posix_fallocate .*No space left on device); using TCP\$" "$tmp/err")
  [ "$n" -eq 1 ] || { show; echo "FAIL: rank $r printed $n fallback warnings, expected 1" >&2; exit 1; }
  grep -q "^\[rank$r\]:coll_check: rank $r of 2: ring of 2: tcp 0>1, tcp 1>0\$" "$tmp/out" ||
    { show; echo "FAIL: rank $r's links are not both TCP" >&2; exit 1; }
  grep -q "^\[rank$r\]:coll_check: rank $r of 2: ok" "$tmp/out" ||
    { show; echo "FAIL: rank $r's checks did not pass" >&2; exit 1; }
done
grep "shared memory" "$tmp/err"
echo "PASS: both links fell back to TCP, results exact"
exit 0
