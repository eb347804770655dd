#!/usr/bin/env bash
# Gradient compression on a slow link: the namespace pair of
# overlap_netns.sh (two network namespaces joined by a veth pair, both ends
# shaped by `tc qdisc add dev veth0 root tbf rate 1gbit burst 64kb latency
# 50ms`, ddprun-rdzv in namespace A, a 2x1 job of train, one rank per
# namespace, OMP_NUM_THREADS=1), one job per --grad-compress setting, all
# in one run of this script.
#
# The model: an MLP of 2 hidden layers of 2048 on 512 inputs, 16 classes
# (5,285,904 parameters, 21.1 MB of gradients), --batch 2 per rank, SGD:
# the ring moves 21.1 MB per step on each rank, about 170 ms at 1 Gbit/s,
# many times the backward pass (the profile measures it; the script checks
# that the uncompressed job's communication is at least 3x its backward
# pass). The batch is small so that what compression cannot shrink (the
# forward and backward passes, the optimizer) stays a small part of the
# step, as on a link-bound job. Each job runs with --bucket-cap-mb auto
# --profile-out, so the bucket cap is chosen with the compression in
# force; PowerSGD's plan profiles the steps after its uncompressed start.
#
# Per setting a line:
#   compress_netns run=1 setting=fp16 cap_mib=.. step_ms=.. predicted_ms=..
#     err=.. from_none_ms=.. from_none_err=.. ratio=.. loss=.. eval_loss=..
# step_ms is the median step over the steps after the (last) plan (train's
# "plan: bucket cap ... over steps" line), predicted_ms the plan's
# prediction for it (from the setting's own profile), from_none_ms what
# `ddprun plan --profile <the uncompressed job's profile> --compress
# SETTING` predicts with this setting's measured compute rates, ratio the
# step over the uncompressed one. Then a table, and the targets: fp16 at
# most 0.6 and PowerSGD at most 0.3 of the uncompressed step, each plan's
# prediction within 15% of its measurement (the prediction from the
# uncompressed profile is shown beside it: it has the probe's all-reduce
# cost, which compute overlapping the all-reduces slows in the run). A missed target is said on
# stderr; the exit status reflects only the checks (every job exits 0,
# prints its final line and its plan, and its ring uses TCP across the
# link).
#
# Usage: compress_netns.sh [--smoke] [--steps N] [--runs N]
#                          [--settings "none fp16 bf16 powersgd"]
#                          [--burst SIZE] [--gso-max-size BYTES]
#                          [--keep DIR] DDPRUN DDPRUN_RDZV TRAIN
#   --keep: copy each job's output and profile into DIR.
#   DR_BENCH_EXTRA (environment): more train arguments for each full job,
#   after the script's (e.g. "--log-every 1" for a line per step).
#   --smoke: 8 steps per setting at --bucket-cap-mb 25 (PowerSGD from step
#   3), no plan, no targets, well under a minute. The full run is also
#   registered as the ctest bench_compress_netns, which skips (77) unless
#   DDPRUN_BENCH_FULL=1. Needs root, iproute2 and tc with tbf; otherwise
#   prints "SKIP: <reason>" and exits 77. Every process and both
#   namespaces are removed on every exit path.
set -u

bench=compress_netns
if [ "${DDPRUN_BENCH_FULL_GATE:-0}" = 1 ] && [ "${DDPRUN_BENCH_FULL:-0}" != 1 ]; then
  echo "SKIP: the full benchmark runs with DDPRUN_BENCH_FULL=1"
  exit 77
fi
# shellcheck source=ratelimited_pair.sh
. "$(dirname "$0")/ratelimited_pair.sh"

caps=auto
settings="none fp16 powersgd"
keep=
pair_option() {
  case $1 in
    --settings) settings=$2 ;;
    --keep) keep=$2 ;;
    *) return 1 ;;
  esac
}
pair_args 8 "$@"
case " $settings " in
  *" none "*) ;;
  *) settings="none $settings" ;; # the reference
esac
pair_setup

model="--data synthetic --layers 2 --width 2048 --input-dim 512
       --classes 16 --batch 2 --optimizer sgd --lr 0.05 --samples 65536
       --eval-samples 512 --first-bucket-mb 1"

: >"$tmp/rows"
r=0
while [ "$r" -lt "$runs" ]; do
  r=$((r + 1))
  for s in $settings; do
    tag=$s-$r
    if [ "$smoke" -eq 1 ]; then
      pair_job "$tag" --grad-compress "$s" --bucket-cap-mb 25 \
        --powersgd-start-step 3
      echo "compress_netns run=$r setting=$s" \
           "median_step_ms=$(field "$line" median_step_ms)" \
           "loss=$(field "$line" loss)"
      continue
    fi
    pair_job "$tag" --grad-compress "$s" --bucket-cap-mb auto ${DR_BENCH_EXTRA:-} \
      --profile-out "$tmp/prof.$tag.json"
    [ -z "$keep" ] || { mkdir -p "$keep" && cp "$tmp/$tag".* "$tmp/prof.$tag.json" "$keep/"; }
    sum=$(grep '^plan: bucket cap [0-9.]* MiB over steps' "$tmp/$tag.rank0" | tail -n 1)
    [ -n "$sum" ] || { tail -n 30 "$tmp/$tag.rank0" >&2; fail "$tag: no plan was made"; }
    cap=$(echo "$sum" | sed -n 's/^plan: bucket cap \([0-9.]*\) MiB.*/\1/p')
    step=$(echo "$sum" | sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p')
    pred=$(echo "$sum" | sed -n 's/.*predicted \([0-9.]*\) ms.*/\1/p')
    loss=$(field "$line" loss)
    eval_loss=$(field "$line" eval_loss)
    comm=$(field "$line" comm_ms)
    bwd=$(sed -n 's/.*"backward_ms": \([0-9.e+-]*\),.*/\1/p' "$tmp/prof.$tag.json")
    # The uncompressed profile, told this setting and its compute rates.
    gf=$(sed -n 's/.*"gemm_gflops": \([0-9.e+-]*\),.*/\1/p' "$tmp/prof.$tag.json")
    cm=$(sed -n 's/.*"cast_mib_per_ms": \([0-9.e+-]*\),.*/\1/p' "$tmp/prof.$tag.json")
    "$ddprun" plan --profile "$tmp/prof.none-$r.json" --bucket-mib "$cap" \
      --compress "$s" --gemm-gflops "${gf:-0}" --cast-mib-per-ms "${cm:-0}" \
      --json >"$tmp/pred.$tag.json" 2>"$tmp/err" ||
      fail "ddprun plan --profile --compress $s: $(cat "$tmp/err")"
    fromnone=$(sed -n 's/.*"step_ms": \([0-9.]*\).*/\1/p' "$tmp/pred.$tag.json" | head -n 1)
    [ "$s" = none ] && { ref=$step; ref_comm=$comm; ref_bwd=$bwd; }
    awk -v r="$r" -v s="$s" -v c="$cap" -v m="$step" -v p="$pred" \
        -v f="$fromnone" -v ref="$ref" -v l="$loss" -v e="$eval_loss" \
        -v comm="$comm" -v bwd="$bwd" 'BEGIN {
      printf "compress_netns run=%s setting=%s cap_mib=%s step_ms=%s predicted_ms=%s err=%+.3f from_none_ms=%s from_none_err=%+.3f ratio=%.3f loss=%s eval_loss=%s comm_ms=%s backward_ms=%s\n",
        r, s, c, m, p, p / m - 1, f, f / m - 1, m / ref, l, e, comm, bwd
    }' | tee -a "$tmp/rows"
  done
done
[ "$smoke" -eq 1 ] && exit 0

awk -v comm="$ref_comm" -v bwd="$ref_bwd" '
  function v(k,   x) { x = " " $0 " "; sub(".* " k "=", "", x); sub(" .*", "", x); return x }
  function med(a, n,   i, j, t) {
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    s = v("setting")
    if (!(s in n)) order[++ns] = s
    i = ++n[s]
    M[s, i] = v("step_ms"); P[s, i] = v("predicted_ms"); F[s, i] = v("from_none_ms")
    R[s, i] = v("ratio"); L[s, i] = v("loss"); E[s, i] = v("eval_loss"); C[s, i] = v("cap_mib")
  }
  END {
    printf "\n| setting | runs | cap MiB (each run) | step ms | ratio | predicted ms | error | from the fp32 profile | error | loss | eval loss |\n"
    printf "|---|---|---|---|---|---|---|---|---|---|---|\n"
    bad = 0
    for (k = 1; k <= ns; k++) {
      s = order[k]
      delete a; for (i = 1; i <= n[s]; i++) a[i] = M[s, i]; m = med(a, n[s])
      delete a; for (i = 1; i <= n[s]; i++) a[i] = P[s, i]; p = med(a, n[s])
      delete a; for (i = 1; i <= n[s]; i++) a[i] = F[s, i]; f = med(a, n[s])
      delete a; for (i = 1; i <= n[s]; i++) a[i] = R[s, i]; r = med(a, n[s])
      delete a; for (i = 1; i <= n[s]; i++) a[i] = L[s, i]; l = med(a, n[s])
      delete a; for (i = 1; i <= n[s]; i++) a[i] = E[s, i]; e = med(a, n[s])
      caps = C[s, 1]; for (i = 2; i <= n[s]; i++) caps = caps "/" C[s, i]
      printf "| %s | %d | %s | %.1f | %.3f | %.1f | %+.1f%% | %.1f | %+.1f%% | %.4f | %.4f |\n",
        s, n[s], caps, m, r, p, (p / m - 1) * 100, f, (f / m - 1) * 100, l, e
      lim = s == "fp16" || s == "bf16" ? 0.6 : s ~ /^powersgd/ ? 0.3 : 0
      if (lim > 0 && r > lim) { printf "target missed: %s at %.3f of the uncompressed step (target %.1f)\n", s, r, lim > "/dev/stderr"; bad = 1 }
      ep = p / m - 1
      if ((ep < 0 ? -ep : ep) > 0.15) { printf "target missed: %s predicted %+.1f%% off (target 15%%)\n", s, ep * 100 > "/dev/stderr"; bad = 1 }
    }
    printf "\nuncompressed: communication %.1f ms per step, backward pass %.1f ms (%.1fx)\n", comm, bwd, (bwd > 0 ? comm / bwd : 0)
    if (comm < 3 * bwd) { printf "target missed: communication under 3x the backward pass\n" > "/dev/stderr" }
    if (!bad) print "targets met: fp16 <= 0.6, powersgd <= 0.3 of the uncompressed step; plan predictions within 15%"
  }' "$tmp/rows"
