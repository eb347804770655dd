#!/usr/bin/env bash
# The GPU checks, in one run of at most 8 minutes on a machine with one GPU
# (NVIDIA driver, CUDA 13, NCCL; none of ddprun's Debian libraries needed),
# from a bundle made by deploy/bundle.sh on the build machine:
#
#   deploy/bundle.sh build build-gpu-bundle             # build machine
#   OUT=/tmp/gpu-out tests/gpu/check.sh build-gpu-bundle  # GPU machine,
#                                                     # repository root
# The bundle carries a copy: build-gpu-bundle/tests/gpu/check.sh finds its
# bundle by itself. The bundle may also be given as $BUNDLE.
#
# Parts, each bounded with timeout:
#   kernels  gpu_kernel_check: every kernel, the optimizers and the model
#            against the CPU code (rel. error < 1e-5 fp32, < 1e-2 bf16)
#   gemm     gpu_bench: this GPU's own cuBLAS GEMM rate (bf16, tf32, fp32)
#   match    train under ddprun --standalone --nproc-per-node 1 on the GPU
#            (NCCL) and on the CPU, same seed: final loss within 0.2%
#            (fp32) and 5% (bf16) of the CPU's
#   compress the match job with --grad-compress fp16 and bf16 (NCCL's
#            two-byte sums): final loss within 1% of the CPU's fp32 run;
#            powersgd (cuBLAS products) within 1% of the CPU's PowerSGD
#            run, and with an overflow skipped
#   scale    --precision fp16 with --loss-scale dynamic (the scaler on the
#            device): loss within 5% of the CPU's; an injected overflow
#            skips its step and halves the scale; the floor stops (exit 5)
#   ckpt     a checkpoint written on the GPU resumes on the CPU and one
#            written on the CPU resumes on the GPU; each run's final loss
#            within 0.2% of an uninterrupted CPU run; a PowerSGD run with
#            the loss scaler resumed on the device: the uninterrupted
#            run's weights, bit for bit
#   bench    --layers 8 --width 8192 --batch 8192 in fp32 (TF32 GEMMs) and
#            bf16: median step time and TFLOP/s, next to the GEMM rate
#            (target: bf16 at 60% or more of the bf16 GEMM rate)
#   torch    the same MLP in PyTorch eager, when python3 imports torch
# Results under $OUT (a new temporary directory when unset): summary.txt
# (one line per check, then the figures), each part's log, env.txt.
# Exit 0 when every correctness check passed (a missed performance target
# is reported, not failed); 1 otherwise; 2 for a bad invocation.
#
# check.sh BUNDLE --rehearse runs the same steps where there is no GPU:
# the GPU side on the CPU (fp32, no TF32), kernels, GEMM and PyTorch left
# out, a small benchmark; it checks this script's own plumbing (the lines
# it reads, the runs it chains) in CI, so that the GPU machine's minutes
# go to the GPU.
set -u
t_start=$(date +%s)
budget=470 # seconds for everything; parts that would pass it are skipped

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rehearse=0
if [ "${2:-}" = --rehearse ]; then
  rehearse=1
elif [ -n "${2:-}" ]; then
  echo "usage: tests/gpu/check.sh BUNDLE_DIR [--rehearse]" >&2
  exit 2
fi
# The device of the GPU side, and its precisions.
dev=cuda precisions="fp32 bf16"
[ "$rehearse" -eq 1 ] && dev=cpu precisions=fp32
B=${1:-${BUNDLE:-}}
if [ -z "$B" ] && [ -x "$here/../../bin/train" ]; then
  B=$here/../..
fi
if [ -z "$B" ] || [ ! -x "$B/bin/train" ]; then
  echo "usage: tests/gpu/check.sh BUNDLE_DIR  (a directory made by" \
       "deploy/bundle.sh, with bin/train)" >&2
  exit 2
fi
B=$(cd "$B" && pwd)
OUT=${OUT:-$(mktemp -d /tmp/ddprun-gpu-check.XXXXXX)}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
failures=0

say() { echo "$*" | tee -a "$summary"; }
pass() { say "PASS $*"; }
failed() { say "FAIL $*"; failures=$((failures + 1)); }
skip() { say "SKIP $*"; }
left() { echo $((budget - ($(date +%s) - t_start))); }

# run NAME SECONDS CMD...: the command's output in $OUT/NAME.log, bounded
# by SECONDS and by what is left of the budget; sets rc (124: timed out).
run() {
  local name=$1 secs=$2
  shift 2
  local l
  l=$(left)
  if [ "$l" -lt 15 ]; then
    echo "(out of time budget)" >"$OUT/$name.log"
    rc=125
    return
  fi
  [ "$secs" -gt $((l - 5)) ] && secs=$((l - 5))
  local t0
  t0=$(date +%s)
  # (The braces take bash's "Killed" notice when a run ends by SIGKILL,
  # as the checkpoint writer does by design.)
  { timeout -k 5 "$secs" "$@" >"$OUT/$name.log" 2>&1; } 2>/dev/null
  rc=$?
  echo "  $name: exit $rc after $(($(date +%s) - t0)) s (limit $secs s)"
}

# final LOG KEY: a field of train's "final key=value ..." line (under
# ddprun prefixed "[rank0]:").
final() {
  sed -n 's/^\(\[rank0\]:\)\{0,1\}final /final /p' "$OUT/$1.log" | tail -1 |
    tr ' ' '\n' | grep "^$2=" | cut -d= -f2
}

# within A B TOL: |A - B| <= TOL * |B|.
within() {
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
    if (a == "" || b == "") exit 1
    d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
    exit !(d <= t * m) }'
}

reldiff() {
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d;
    m = b < 0 ? -b : b; printf("%.2g", (m > 0 ? d / m : d)) }'
}

# ---- environment: the CUDA libraries train needs, from the target --------
{
  echo "bundle: $B"
  date -u
  uname -a
  cat "$B/BUILD_INFO" 2>/dev/null
  command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -L
  command -v nvidia-smi >/dev/null && timeout 30 \
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
} >"$OUT/env.txt" 2>&1
# train and its GPU module (which train loads from beside itself).
objs=("$B/libexec/train")
[ -f "$B/libexec/libddprun_gpu.so" ] && objs+=("$B/libexec/libddprun_gpu.so")
missing() {
  LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ldd "${objs[@]}" 2>/dev/null | awk '/not found/ {print $1}' | sort -u
}
need=$(missing)
if [ -n "$need" ]; then
  dirs=()
  for d in ${CUDA_HOME:-} ${CUDA_PATH:-} ${NCCL_HOME:-} /usr/local/cuda \
           /usr/local/cuda-13* /usr/local/nccl* /opt/nvidia /usr/lib64 \
           /usr/lib/x86_64-linux-gnu; do
    [ -d "$d" ] && dirs+=("$d")
  done
  # pip's nvidia-* wheels (nvidia/cublas/lib, nvidia/nccl/lib, ...).
  py=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
  [ -n "$py" ] && [ -d "$py" ] && dirs+=("$py")
  for lib in $need; do
    [ ${#dirs[@]} -gt 0 ] || break
    hit=$(find "${dirs[@]}" -maxdepth 5 -name "$lib" 2>/dev/null | head -1)
    if [ -n "$hit" ]; then
      LD_LIBRARY_PATH="$(dirname "$hit")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
      echo "found $lib at $hit" >>"$OUT/env.txt"
    fi
  done
fi
need=$(missing)
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$OUT/env.txt"
LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  ldd "${objs[@]}" >>"$OUT/env.txt" 2>&1
if [ -n "$need" ]; then
  failed "env: train cannot load: $(echo $need) (set CUDA_HOME / NCCL_HOME or LD_LIBRARY_PATH; see $OUT/env.txt)"
  exit 1
fi
# The GPU module loads in train (its NCCL and cuBLAS, as train found them).
"$B/bin/train" --version >>"$OUT/env.txt" 2>&1
if [ "$rehearse" -eq 0 ] && ! "$B/bin/train" --version | grep -q '^GPU code: .*libddprun_gpu.so (CUDA'; then
  failed "env: train's GPU code does not load: $("$B/bin/train" --version | tail -1)"
  exit 1
fi
# Every program starts (a C library older than the bundle needs, or a
# missing library, shows here).
progs="train ddprun"
[ "$rehearse" -eq 0 ] && progs="$progs gpu_kernel_check gpu_bench"
for p in $progs; do
  if ! timeout 30 "$B/bin/$p" --help >"$OUT/start_$p.log" 2>&1; then
    failed "env: $p does not start: $(head -2 "$OUT/start_$p.log" | tr '\n' ' ') ($(cat "$B/BUILD_INFO" 2>/dev/null | grep needs))"
    exit 1
  fi
done
echo "results in $OUT"

# ---- kernels ---------------------------------------------------------------
if [ "$rehearse" -eq 1 ]; then
  skip "kernels: rehearsal without a GPU"
else
run kernels 120 "$B/bin/gpu_kernel_check"
case $rc in
  0) pass "kernels: $(grep -c '^ok' "$OUT/kernels.log") checks within tolerance ($(head -1 "$OUT/kernels.log"))" ;;
  77) failed "kernels: skipped, no GPU visible: $(head -1 "$OUT/kernels.log")" ;;
  *) failed "kernels: exit $rc; $(grep -m3 '^FAIL' "$OUT/kernels.log" | tr '\n' ';')" ;;
esac
fi

# ---- gemm ------------------------------------------------------------------
gemm_rate() { awk -v k="$1" '$1 == "gemm" && $2 == k { for (i = 1; i < NF; i++) if ($(i+1) == "TFLOP/s") print $i }' "$OUT/gemm.log"; }
gemm_bf16= gemm_tf32=
if [ "$rehearse" -eq 1 ]; then
  skip "gemm: rehearsal without a GPU"
else
run gemm 120 "$B/bin/gpu_bench" --m 8192 --n 8192 --k 8192 --iters 20
gemm_bf16=$(gemm_rate bf16)
gemm_tf32=$(gemm_rate tf32)
if [ "$rc" -eq 0 ] && [ -n "$gemm_bf16" ]; then
  pass "gemm: cuBLAS 8192^3 bf16 $gemm_bf16, tf32 $gemm_tf32, fp32 $(gemm_rate fp32) TFLOP/s"
else
  failed "gemm: exit $rc (see $OUT/gemm.log)"
fi
fi

# ---- match: the same job on the GPU (NCCL) and the CPU ----------------------
# A task that is still being learned after 60 steps (loss about 3.2 of
# ln 32 = 3.47): a loss near 0 would make relative differences noise.
small=(--layers 2 --width 256 --input-dim 64 --classes 32 --batch 64
       --samples 8192 --eval-samples 1024 --lr 0.001 --seed 11 --log-every 10)
ddp=("$B/bin/ddprun" --standalone --nproc-per-node 1 --log-level warn)
run match_cpu 90 "${ddp[@]}" "$B/bin/train" --device cpu --steps 60 "${small[@]}"
cpu_rc=$rc
cpu_loss=$(final match_cpu loss)
side="GPU (NCCL)"
[ "$dev" = cpu ] && side="rehearsal (CPU)"
for prec in $precisions; do
  tol=0.002
  [ "$prec" = bf16 ] && tol=0.05
  run "match_$prec" 90 "${ddp[@]}" "$B/bin/train" --device "$dev" --precision "$prec" \
    --steps 60 "${small[@]}"
  loss=$(final "match_$prec" loss)
  if [ "$rc" -ne 0 ] || [ "$cpu_rc" -ne 0 ]; then
    failed "match $prec: exit $rc (cpu run: exit $cpu_rc); see $OUT/match_$prec.log"
  elif ! grep -q "device $dev" "$OUT/match_$prec.log"; then
    failed "match $prec: the run did not report device $dev"
  elif within "$loss" "$cpu_loss" "$tol"; then
    pass "match $prec: $side final loss $loss, CPU $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") (limit $tol)"
  else
    failed "match $prec: $side final loss $loss, CPU $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") over $tol"
  fi
done

# ---- compress: fp16 and bf16 gradients on NCCL ------------------------------
# The same job with the gradients summed in two bytes (cast, NCCL's fp16 or
# bf16 sum, cast back on the NCCL stream): final loss within 1% of the
# CPU's fp32 run.
for cmp in fp16 bf16; do
  run "compress_$cmp" 90 "${ddp[@]}" "$B/bin/train" --device "$dev" \
    --grad-compress "$cmp" --steps 60 "${small[@]}"
  loss=$(final "compress_$cmp" loss)
  if [ "$rc" -ne 0 ] || [ "$cpu_rc" -ne 0 ]; then
    failed "compress $cmp: exit $rc (cpu run: exit $cpu_rc); see $OUT/compress_$cmp.log"
  elif [ "$dev" = cuda ] && ! grep -q "gradients summed in $cmp" "$OUT/compress_$cmp.log"; then
    failed "compress $cmp: the run did not report the $cmp sum"
  elif within "$loss" "$cpu_loss" 0.01; then
    pass "compress $cmp: $side final loss $loss, CPU fp32 $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") (limit 0.01)"
  else
    failed "compress $cmp: $side final loss $loss, CPU fp32 $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") over 0.01"
  fi
done

# PowerSGD (rank 4, compressed from step 11) on cuBLAS and NCCL against the
# same compression on the CPU (OpenBLAS): final loss within 1%; then with
# --loss-scale dynamic and an infinity at step 15: the step is skipped, the
# error feedback and Q kept, and the run goes on to a finite loss.
run psgd_cpu 90 "${ddp[@]}" "$B/bin/train" --device cpu --grad-compress powersgd \
  --steps 60 "${small[@]}"
psgd_cpu_rc=$rc
psgd_cpu_loss=$(final psgd_cpu loss)
run psgd_dev 90 "${ddp[@]}" "$B/bin/train" --device "$dev" --grad-compress powersgd \
  --steps 60 "${small[@]}"
loss=$(final psgd_dev loss)
if [ "$rc" -ne 0 ] || [ "$psgd_cpu_rc" -ne 0 ]; then
  failed "compress powersgd: exit $rc (cpu run: exit $psgd_cpu_rc); see $OUT/psgd_dev.log"
elif [ "$dev" = cuda ] && ! grep -q "PowerSGD on cuBLAS" "$OUT/psgd_dev.log"; then
  failed "compress powersgd: the run did not report PowerSGD on cuBLAS"
elif within "$loss" "$psgd_cpu_loss" 0.01; then
  pass "compress powersgd: $side final loss $loss, CPU PowerSGD $psgd_cpu_loss, rel. diff $(reldiff "$loss" "$psgd_cpu_loss") (limit 0.01; CPU fp32 uncompressed $cpu_loss)"
else
  failed "compress powersgd: $side final loss $loss, CPU PowerSGD $psgd_cpu_loss, rel. diff $(reldiff "$loss" "$psgd_cpu_loss") over 0.01"
fi
DDPRUN_OVERFLOW_TEST=0@15 run psgd_skip 90 "${ddp[@]}" "$B/bin/train" --device "$dev" \
  --grad-compress powersgd --loss-scale dynamic --steps 60 "${small[@]}"
if [ "$rc" -eq 0 ] && [ "$(final psgd_skip skipped)" = 1 ] &&
   [ "$(final psgd_skip loss_scale)" = 32768 ] &&
   within "$(final psgd_skip loss)" "$psgd_cpu_loss" 0.02; then
  pass "compress powersgd skip: an infinity at step 15 skipped, scale 32768, final loss $(final psgd_skip loss)"
else
  failed "compress powersgd skip: exit $rc, skipped=$(final psgd_skip skipped) loss_scale=$(final psgd_skip loss_scale) loss $(final psgd_skip loss) (see $OUT/psgd_skip.log)"
fi

# ---- scale: --precision fp16 with the loss scaler on the device ------------
# fp16 activations and GEMM inputs (fp32 master weights) with --loss-scale
# dynamic: final loss within 5% of the CPU's fp32 run; then an infinity put
# into the gradient at step 5 (DDPRUN_OVERFLOW_TEST): the step is skipped
# and the scale halves (the final line: skipped=1 loss_scale=32768),
# as on the CPU; and overflows at every step from 5 with the scale starting
# at 2: the run stops at the floor with exit 5. The rehearsal runs it in
# fp32 (the CPU has no fp16 model). An overflow only in the fp16 sum needs
# two ranks, which one GPU cannot hold under NCCL: the CPU tests cover it.
sprec=fp16
[ "$rehearse" -eq 1 ] && sprec=fp32
run scale_fp16 90 "${ddp[@]}" "$B/bin/train" --device "$dev" --precision "$sprec" \
  --loss-scale dynamic --steps 60 "${small[@]}"
loss=$(final scale_fp16 loss)
if [ "$rc" -ne 0 ] || [ "$cpu_rc" -ne 0 ]; then
  failed "scale $sprec: exit $rc (cpu run: exit $cpu_rc); see $OUT/scale_fp16.log"
elif [ "$(final scale_fp16 loss_scale)" != 65536 ] || [ "$(final scale_fp16 skipped)" != 0 ]; then
  failed "scale $sprec: loss_scale=$(final scale_fp16 loss_scale) skipped=$(final scale_fp16 skipped), expected 65536 and 0"
elif within "$loss" "$cpu_loss" 0.05; then
  pass "scale $sprec: $side final loss $loss with --loss-scale dynamic, CPU fp32 $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") (limit 0.05)"
else
  failed "scale $sprec: $side final loss $loss, CPU fp32 $cpu_loss, rel. diff $(reldiff "$loss" "$cpu_loss") over 0.05"
fi
DDPRUN_OVERFLOW_TEST=0@5 run scale_skip 90 "${ddp[@]}" "$B/bin/train" --device "$dev" \
  --precision "$sprec" --loss-scale dynamic --steps 60 "${small[@]}"
if [ "$rc" -eq 0 ] && [ "$(final scale_skip skipped)" = 1 ] &&
   [ "$(final scale_skip loss_scale)" = 32768 ] &&
   [ "$(final scale_skip overflow_rank)" = 0 ] &&
   grep -q "overflow at step 5 in rank 0's gradient: step skipped, loss scale 65536 -> 32768" "$OUT/scale_skip.log"; then
  pass "scale skip: an infinity at step 5 skipped it, scale 65536 -> 32768, final loss $(final scale_skip loss)"
else
  failed "scale skip: exit $rc, skipped=$(final scale_skip skipped) loss_scale=$(final scale_skip loss_scale) (expected 1, 32768; see $OUT/scale_skip.log)"
fi
DDPRUN_OVERFLOW_TEST=0@5:40 run scale_floor 90 "${ddp[@]}" "$B/bin/train" --device "$dev" \
  --precision "$sprec" --loss-scale dynamic:2 --steps 60 "${small[@]}"
if [ "$rc" -ne 0 ] && grep -q "at its floor of 1" "$OUT/scale_floor.log" &&
   grep -q "exit code 5" "$OUT/scale_floor.log"; then
  pass "scale floor: overflows from step 5 with the scale at 2 stopped the run at the floor (exit 5)"
else
  failed "scale floor: exit $rc; expected exit 5 at the floor (see $OUT/scale_floor.log)"
fi

# ---- ckpt: GPU -> CPU and CPU -> GPU ----------------------------------------
# One process each (no ddprun): the checkpoint code is the same. The first
# run of a pair is killed by train's test hook right after its step-20
# checkpoint; the second resumes from it and finishes the 40 steps.
solo=(env -u RANK -u WORLD_SIZE -u LOCAL_RANK)
run ckpt_ref 90 "${solo[@]}" "$B/bin/train" --device cpu --steps 40 "${small[@]}"
ref_loss=$(final ckpt_ref loss)
for pair in "$dev:cpu" "cpu:$dev"; do
  w=${pair%:*}
  rd=${pair#*:}
  dir=$OUT/ckpt_${w}_to_${rd}
  rm -rf "$dir"
  run "ckpt_write_$w" 90 "${solo[@]}" DDPRUN_CKPT_TEST_KILL_AT=20 "$B/bin/train" \
    --device "$w" --steps 40 --ckpt-dir "$dir" --ckpt-every 20 "${small[@]}"
  wrc=$rc
  run "ckpt_resume_$rd" 90 "${solo[@]}" "$B/bin/train" --device "$rd" --steps 40 --ckpt-dir "$dir" \
    --ckpt-every 20 "${small[@]}"
  loss=$(final "ckpt_resume_$rd" loss)
  if [ "$wrc" -eq 0 ] || ! grep -q "^checkpoint step 20 " "$OUT/ckpt_write_$w.log" ||
     ! grep -q "test hook: killing" "$OUT/ckpt_write_$w.log"; then
    failed "ckpt $w->$rd: the $w run did not write step 20 and stop (exit $wrc)"
  elif [ "$rc" -ne 0 ] || ! grep -q "resuming at step 20" "$OUT/ckpt_resume_$rd.log"; then
    failed "ckpt $w->$rd: the $rd run did not resume at step 20 (exit $rc)"
  elif within "$loss" "$ref_loss" 0.002; then
    pass "ckpt $w->$rd: written on $w at step 20, resumed on $rd: final loss $loss, uninterrupted CPU $ref_loss, rel. diff $(reldiff "$loss" "$ref_loss")"
  else
    failed "ckpt $w->$rd: final loss $loss, uninterrupted CPU $ref_loss: rel. diff $(reldiff "$loss" "$ref_loss") over 0.002"
  fi
done

# PowerSGD with the loss scaler on the device: a checkpoint at step 20 (Q,
# the error feedback and the scale, downloaded from the device) resumed on
# the device gives the uninterrupted device run's weights, bit for bit.
pargs=(--device "$dev" --grad-compress powersgd --loss-scale dynamic --steps 40
       "${small[@]}")
run ckpt_psgd_ref 90 "${solo[@]}" "$B/bin/train" "${pargs[@]}"
dir=$OUT/ckpt_psgd
rm -rf "$dir"
run ckpt_psgd_write 90 "${solo[@]}" DDPRUN_CKPT_TEST_KILL_AT=20 "$B/bin/train" \
  "${pargs[@]}" --ckpt-dir "$dir" --ckpt-every 20
run ckpt_psgd_resume 90 "${solo[@]}" "$B/bin/train" "${pargs[@]}" --ckpt-dir "$dir" \
  --ckpt-every 20
ref_crc=$(final ckpt_psgd_ref weights_crc32)
crc=$(final ckpt_psgd_resume weights_crc32)
if [ "$rc" -eq 0 ] && grep -q "resuming at step 20" "$OUT/ckpt_psgd_resume.log" &&
   [ -n "$crc" ] && [ "$crc" = "$ref_crc" ]; then
  pass "ckpt powersgd: resumed on $dev at step 20 with Q and the error feedback: weights $crc, the uninterrupted run's"
else
  failed "ckpt powersgd: exit $rc, weights $crc, uninterrupted $ref_crc (see $OUT/ckpt_psgd_resume.log)"
fi

# ---- bench: the large MLP ---------------------------------------------------
L=8 W=8192 BATCH=8192
[ "$rehearse" -eq 1 ] && L=2 W=256 BATCH=256
big=(--layers "$L" --width "$W" --batch "$BATCH" --input-dim 256 --classes 16
     --steps 30 --warmup 0 --lr 0.0001 --log-every 10 --eval-samples 8192
     --seed 3)
# FLOPs of one step: forward 2BIO per Linear, backward 2BIO for the
# weights and 2BIO for the input of all but the first Linear.
flops=$(awk -v L="$L" -v W="$W" -v B="$BATCH" 'BEGIN { io0 = 256 * W;
  io = io0 + (L - 1) * W * W + W * 16; printf "%.0f", 2 * B * (2 * io + io - io0) }')
tflops() { awk -v f="$flops" -v ms="$1" 'BEGIN { if (ms > 0) printf "%.3g", f / (ms * 1e-3) / 1e12 }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f", 100 * a / b }'; }
declare -A step_ms
for prec in $precisions; do
  extra=(--precision "$prec")
  [ "$prec" = fp32 ] && [ "$dev" = cuda ] && extra+=(--tf32)
  run "bench_$prec" 150 "${ddp[@]}" "$B/bin/train" --device "$dev" "${extra[@]}" "${big[@]}"
  ms=$(final "bench_$prec" median_step_ms)
  step_ms[$prec]=$ms
  if [ "$rc" -ne 0 ] || [ -z "$ms" ]; then
    failed "bench $prec: exit $rc; see $OUT/bench_$prec.log"
    continue
  fi
  tf=$(tflops "$ms")
  g=$gemm_bf16
  label="bf16"
  [ "$prec" = fp32 ] && { g=$gemm_tf32; label="tf32"; }
  line="bench $prec$([ "$prec" = fp32 ] && [ "$dev" = cuda ] && echo ' (TF32 GEMMs)'): --layers $L --width $W --batch $BATCH on $dev: median step $ms ms, $tf TFLOP/s"
  if [ -n "$g" ]; then
    line="$line = $(pct "$tf" "$g")% of the measured $label GEMM rate $g TFLOP/s"
  else
    line="$line (no GEMM rate measured)"
  fi
  if [ "$prec" = bf16 ]; then
    if awk -v a="$tf" -v b="$g" 'BEGIN { exit !(b > 0 && a >= 0.6 * b) }'; then
      pass "$line (target 60%: met)"
    else
      say "MISS $line (target 60%: missed)"
    fi
  else
    pass "$line"
  fi
done

# ---- torch: the same MLP in PyTorch eager -----------------------------------
# A reference for the performance targets only: a PyTorch that fails or
# runs out of the budget is reported, never counted as a failed check.
if [ "$rehearse" -eq 1 ]; then
  skip "torch: rehearsal without a GPU"
elif [ "$(left)" -lt 30 ]; then
  skip "torch: out of time budget"
elif timeout 25 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  for prec in fp32 bf16; do
    run "torch_$prec" 150 python3 "$here/torch_mlp.py" --precision "$prec" \
      --layers 8 --width 8192 --batch 8192 --steps 20
    tms=$(tr ' ' '\n' <"$OUT/torch_$prec.log" | grep '^median_step_ms=' | cut -d= -f2)
    ours=${step_ms[$prec]:-}
    if [ "$rc" -ne 0 ] || [ -z "$tms" ]; then
      skip "torch $prec: exit $rc; see $OUT/torch_$prec.log"
    elif [ -n "$ours" ] && awk -v a="$ours" -v b="$tms" 'BEGIN { exit !(a <= b) }'; then
      pass "torch $prec: PyTorch eager $tms ms per step ($(tflops "$tms") TFLOP/s), train $ours ms: at or below PyTorch's (target met)"
    else
      say "MISS torch $prec: PyTorch eager $tms ms per step ($(tflops "$tms") TFLOP/s), train ${ours:-?} ms: above PyTorch's (target missed)"
    fi
  done
else
  skip "torch: python3 cannot import torch with CUDA here"
fi

say "checks failed: $failures; $(($(date +%s) - t_start)) s in all; results in $OUT"
[ "$failures" -eq 0 ]
