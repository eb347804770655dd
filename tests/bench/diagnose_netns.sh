#!/usr/bin/env bash
# `ddprun diagnose` against train's own figures on a rate-limited link:
# the set-up of plan_netns.sh (two namespaces, tbf 1 Gbit/s, a 2x1 job of
# train, 16 hidden layers of 512, --batch 768). For each cap (1, 25 and
# 100 MiB by default) one job with --trace; diagnose reads both ranks'
# traces; then one more job at the cap diagnose recommends from the 25 MiB
# job's traces (the default of DDP and train).
#
# Lines:
#   diagnose_netns cap_mib=25 train_exposed_ms=.. diag_exposed_ms=.. err=..
#     measured_ms=.. patterns=late_start,tail recommends_mib=..
#   diagnose_netns recommended_mib=.. measured_ms=.. best_of_three_mib=..
#     best_ms=.. ratio=..
# and the targets: exposed communication within 10% of train's (where
# train's is over 1 ms), a late start or a tail named at the largest cap,
# the recommended cap's step within 5% of the fastest of the three. A
# missed target is said on stderr; the exit status reflects only the
# checks (every job exits 0, every diagnosis parses).
#
# Usage: diagnose_netns.sh [--smoke] [--steps N] [--caps "1 25 100"]
#                          [--batch B] [--burst SIZE] [--gso-max-size BYTES]
#                          DDPRUN DDPRUN_RDZV TRAIN
#   --smoke: caps 1 and 25, 10 steps of --batch 32, no targets. Needs root,
#   iproute2, tc with tbf and python3; else "SKIP: <reason>", exit 77.
set -u

bench=diagnose_netns
# shellcheck source=ratelimited_pair.sh
. "$(dirname "$0")/ratelimited_pair.sh"

caps="1 25 100"
pair_args 10 "$@"
command -v python3 >/dev/null 2>&1 || skip "no python3 to read diagnose's JSON"
pair_setup

model="--data synthetic --layers 16 --width 512 --input-dim 256
       --classes 256 --batch $batch --optimizer sgd --lr 0.01 --samples 65536
       --eval-samples 256 --first-bucket-mb 1"

# diag TAG: diagnose of the job's traces into $tmp/TAG.diag.json; prints
# "exposed_ms patterns best_mib step_ms" (exposed: rank 0's median, as
# train's final line gives rank 0's).
diag() {
  "$ddprun" diagnose --json "$tmp/$1.trace" >"$tmp/$1.diag.json" \
    2>"$tmp/$1.diag.err" ||
    fail "$1: ddprun diagnose failed: $(head -n 3 "$tmp/$1.diag.err")"
  python3 - "$tmp/$1.diag.json" <<'PY' || fail "$1: diagnose's JSON does not parse"
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
r0 = [r for r in d["ranks"] if r["rank"] == 0][0]
pats = ",".join(p["name"] for p in d["patterns"]) or "none"
rec = d["recommendation"]
best = rec.get("best_bucket_mib") if rec.get("available") else None
print(r0["exposed_ms"] if r0["exposed_ms"] is not None else -1, pats,
      best if best is not None else -1, s["step_ms"])
PY
}

largest=$(echo "$caps" | tr ' ' '\n' | sort -n | tail -n 1)
: >"$tmp/rows"
for cap in $caps; do
  mkdir -p "$tmp/cap-$cap.trace"
  pair_job "cap-$cap" --bucket-cap-mb "$cap" --trace "$tmp/cap-$cap.trace/t.json"
  meas=$(field "$line" median_step_ms)
  texp=$(field "$line" exposed_comm_ms)
  read -r dexp pats best dstep <<<"$(diag "cap-$cap")"
  err=$(awk -v d="$dexp" -v t="$texp" 'BEGIN { printf "%+.3f", (t > 0 ? d / t - 1 : 0) }')
  echo "diagnose_netns cap_mib=$cap train_exposed_ms=$texp diag_exposed_ms=$dexp" \
       "err=$err measured_ms=$meas diag_step_ms=$dstep patterns=$pats recommends_mib=$best"
  echo "$cap $texp $dexp $meas $pats $best" >>"$tmp/rows"
done

rec=$(awk '$1 == 25 { print $6 }' "$tmp/rows")
[ -n "$rec" ] || rec=$(awk 'NR == 1 { print $6 }' "$tmp/rows")
best_cap=$(sort -k4 -g "$tmp/rows" | head -n 1 | cut -d' ' -f1)
best_ms=$(sort -k4 -g "$tmp/rows" | head -n 1 | cut -d' ' -f4)
if [ "$rec" != -1 ]; then
  rm_ms=$(awk -v c="$rec" '$1 == c { print $4 }' "$tmp/rows")
  if [ -z "$rm_ms" ]; then
    pair_job "cap-rec" --bucket-cap-mb "$rec"
    rm_ms=$(field "$line" median_step_ms)
  fi
  ratio=$(awk -v r="$rm_ms" -v b="$best_ms" 'BEGIN { printf "%.3f", (b > 0 ? r / b : 0) }')
else
  rm_ms=-1 ratio=0
fi
echo "diagnose_netns recommended_mib=$rec measured_ms=$rm_ms best_of_three_mib=$best_cap" \
     "best_ms=$best_ms ratio=$ratio"
if [ "$smoke" -eq 0 ]; then
  awk '{ t = $2; d = $3; if (t > 1 && (d / t - 1 > 0.10 || 1 - d / t > 0.10))
           printf "diagnose_netns: target missed: at %s MiB diagnose gives %.1f ms exposed, train %.1f ms (target within 10%%)\n", $1, d, t > "/dev/stderr" }' "$tmp/rows"
  pl=$(awk -v c="$largest" '$1 == c { print $5 }' "$tmp/rows")
  case ",$pl," in
    *,late_start,*|*,tail,*) ;;
    *) echo "diagnose_netns: target missed: at $largest MiB diagnose names '$pl', not a late start or a tail" >&2 ;;
  esac
  awk -v r="$ratio" 'BEGIN { exit !(r > 1.05 || r == 0) }' &&
    echo "diagnose_netns: target missed: the recommended cap ($rec MiB) takes $ratio of the fastest of the three (target at most 1.05)" >&2
fi
echo "PASS: diagnose_netns ($(wc -l <"$tmp/rows") caps, load $(cut -d' ' -f1-3 /proc/loadavg))"
