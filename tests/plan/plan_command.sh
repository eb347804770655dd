#!/usr/bin/env bash
# `ddprun plan` on cases computed by hand: the table, the best choice, the
# JSON, a profile, and one-line errors with exit code 2.
#
# The uniform case: 100 MiB of gradients over a 100 ms backward pass,
# alpha 1 ms, 2 MiB/ms. A bucket of c MiB takes 1 + c/2 ms and bucket k is
# ready at k*c ms (c/1 MiB per ms of backward):
#   1 MiB:   100 buckets of 1.5 ms, one ready per ms: the backlog grows by
#            0.5 ms a bucket; the last ends at 1 + 1.5*100 = 151 (51 exposed;
#            hidden 1 - 51/150 = 0.660)
#   2 MiB:   50 of 2 ms, one ready each 2 ms: the last ends at 102
#            (2 exposed, hidden 1 - 2/100 = 0.980)
#   5 MiB:   20 of 3.5 ms: 103.5 (hidden 1 - 3.5/70 = 0.950)
#   10 MiB:  10 of 6 ms: 106 (hidden 1 - 6/60 = 0.900)
#   40 MiB:  40, 40, 20 MiB ready at 40, 80, 100 taking 21, 21, 11 ms:
#            40-61, 80-101, 101-112 (12 exposed, hidden 1 - 12/53 = 0.774)
#   100 MiB: one bucket of 51 ms from 100 to 151 (hidden 0)
# Best: 2 MiB (step 102). --forward-ms 3 --optimizer-ms 2 add 5 to each.
# Usage: plan_command.sh DDPRUN
set -u
ddprun=${1:?usage: plan_command.sh DDPRUN}
name=plan_command
fail() {
  echo "FAIL: $name: $*" >&2
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plan_command.XXXXXX") || fail "mktemp -d failed"
trap 'rm -rf "$tmp"' EXIT

row() {
  printf '%10s %8s %14s %10s %11s %7s %9s\n' "$@"
}
uniform="--grad-mib 100 --backward-ms 100 --alpha-ms 1 --bandwidth-mib-per-ms 2"

# The table.
{
  row "bucket MiB" buckets ms/all-reduce "finish ms" "exposed ms" hidden "step ms"
  row 1 100 1.500 151.000 51.000 0.660 151.000
  row 2 50 2.000 102.000 2.000 0.980 102.000
  row 5 20 3.500 103.500 3.500 0.950 103.500
  row 10 10 6.000 106.000 6.000 0.900 106.000
  row 40 3 21.000 112.000 12.000 0.774 112.000
  row 100 1 51.000 151.000 51.000 0.000 151.000
  echo "best: 2 MiB: 50 buckets, step 102.000 ms, 2.000 ms exposed"
} >"$tmp/want"
timeout 10 "$ddprun" plan $uniform --bucket-mib 1,2,5,10,40,100 \
  >"$tmp/got" 2>"$tmp/err" || fail "exited $?: $(cat "$tmp/err")"
diff -u "$tmp/want" "$tmp/got" >&2 || fail "the table differs from the hand-computed one"

# Forward and optimizer time add to every step, and do not change the best.
timeout 10 "$ddprun" plan $uniform --bucket-mib 10,2 --forward-ms 3 \
  --optimizer-ms 2 >"$tmp/got" 2>"$tmp/err" || fail "exited $?: $(cat "$tmp/err")"
grep -q "^best: 2 MiB: 50 buckets, step 107.000 ms, 2.000 ms exposed$" "$tmp/got" ||
  { cat "$tmp/got" >&2; fail "forward and optimizer time are not added"; }
grep -Eq "^ +10 +10 +6.000 +106.000 +6.000 +0.900 +111.000$" "$tmp/got" ||
  { cat "$tmp/got" >&2; fail "the 10 MiB row with 5 ms outside the backward pass"; }

# JSON: the same figures.
timeout 10 "$ddprun" plan $uniform --bucket-mib 40,2 --json >"$tmp/json" \
  2>"$tmp/err" || fail "--json exited $?: $(cat "$tmp/err")"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$tmp/json" <<'EOF' || fail "the JSON differs from the hand-computed figures"
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["bucket_mib"]: x for x in d["candidates"]}
want = {40: (3, 21, 53, 112, 12, 112), 2: (50, 2, 100, 102, 2, 102)}
for mib, (nb, ar, comm, fin, exp, step) in want.items():
    x = c[mib]
    got = (x["buckets"], x["allreduce_ms"], x["comm_ms"], x["finish_ms"],
           x["exposed_ms"], x["step_ms"])
    if got != (nb, ar, comm, fin, exp, step):
        sys.exit("bucket %g: got %s" % (mib, got))
if d["best_bucket_mib"] != 2:
    sys.exit("best %s" % d["best_bucket_mib"])
EOF
else
  grep -q '"best_bucket_mib": 2}' "$tmp/json" || fail "--json: no best_bucket_mib 2"
fi

# A measured profile: parameters of 1, 2 and 0.5 MiB (in bucket order)
# ready at 1.5, 6 and 12 ms of a 12 ms backward pass, alpha 0.25 ms,
# 0.5 MiB/ms, 4 ms forward and 1 ms optimizer, first bucket 1 MiB. At
# 1 MiB: [1] [2, alone] [0.5] take 2.25, 4.25, 1.25 ms: 1.5-3.75, 6-10.25,
# 12-13.25, so 1.25 of 7.75 exposed (hidden 0.839) and a step of
# 5 + 13.25 = 18.25. At 4 MiB:
# [1] (the first bucket) [2, 0.5] ready at 1.5 and 12: 1.5-3.75, 12-17.25,
# 5.25 of 7.5 exposed (hidden 0.300), a step of 22.25. Best: 1 MiB.
cat >"$tmp/profile.json" <<'EOF'
{"version": 1, "world": 2, "bucket_cap_mib": 25, "first_bucket_mib": 1,
 "alpha_ms": 0.25, "bandwidth_mib_per_ms": 0.5,
 "forward_ms": 4, "backward_ms": 12, "optimizer_ms": 1,
 "measured_step_ms": 19,
 "params": [{"index": 2, "bytes": 1048576, "ready_ms": 1.5},
            {"index": 1, "bytes": 2097152, "ready_ms": 6},
            {"index": 0, "bytes": 524288, "ready_ms": 12}]}
EOF
timeout 10 "$ddprun" plan --profile "$tmp/profile.json" --bucket-mib 1,4 \
  >"$tmp/got" 2>"$tmp/err" || fail "--profile exited $?: $(cat "$tmp/err")"
{
  row "bucket MiB" buckets ms/all-reduce "finish ms" "exposed ms" hidden "step ms"
  row 1 3 4.250 13.250 1.250 0.839 18.250
  row 4 2 5.250 17.250 5.250 0.300 22.250
  echo "best: 1 MiB: 3 buckets, step 18.250 ms, 1.250 ms exposed"
} >"$tmp/want"
diff -u "$tmp/want" "$tmp/got" >&2 || fail "--profile: the table differs from the hand-computed one"
# --alpha-ms overrides the profile's: at 0 the 1 MiB finish is 13.
timeout 10 "$ddprun" plan --profile "$tmp/profile.json" --bucket-mib 1 \
  --alpha-ms 0 >"$tmp/got" 2>&1 || fail "--alpha-ms with --profile exited $?"
grep -Eq "^ +1 +3 +4.000 +13.000 " "$tmp/got" ||
  { cat "$tmp/got" >&2; fail "--alpha-ms does not override the profile"; }

# Bad input: one line on stderr that names the problem, exit 2.
bad() {
  local want=$1
  shift
  local rc=0
  timeout 10 "$ddprun" plan "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 2 ] || fail "plan $*: exit $rc, want 2"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || { cat "$tmp/err" >&2; fail "plan $*: not one line"; }
  grep -q -- "$want" "$tmp/err" || { cat "$tmp/err" >&2; fail "plan $*: does not say '$want'"; }
  [ ! -s "$tmp/out" ] || fail "plan $*: printed a result"
}
bad "--grad-mib is missing" --backward-ms 1 --alpha-ms 1 --bandwidth-mib-per-ms 1
bad "--bandwidth-mib-per-ms '0': expected a number above 0" $uniform --bandwidth-mib-per-ms 0
bad "--alpha-ms '-1': expected a number, 0 or more" $uniform --alpha-ms -1
bad "--bucket-mib '1,,2'" $uniform --bucket-mib 1,,2
bad "--bucket-mib 'x'" $uniform --bucket-mib x
bad "unknown option '--frobnicate'" $uniform --frobnicate 1
bad "--json2" $uniform --json2
bad "--alpha-ms needs a value" --alpha-ms
bad "over 10000000 buckets" $uniform --bucket-mib 0.000001
bad "cannot open the file" --profile "$tmp/none.json"
echo '{"alpha_ms": 1}' >"$tmp/short.json"
bad "not a profile: .*missing" --profile "$tmp/short.json"
bad "drop --grad-mib" --profile "$tmp/profile.json" --grad-mib 3

# --help lists every option; ddprun's own --help mentions plan.
timeout 10 "$ddprun" plan --help >"$tmp/help" || fail "plan --help exited $?"
for opt in --grad-mib --backward-ms --alpha-ms --bandwidth-mib-per-ms \
           --bucket-mib --forward-ms --optimizer-ms --profile --json; do
  grep -q -- "$opt" "$tmp/help" || fail "plan --help does not list $opt"
done
timeout 10 "$ddprun" --help | grep -q "ddprun plan" || fail "ddprun --help does not mention ddprun plan"
echo "PASS: $name"
