#!/usr/bin/env bash
# deploy/bundle.sh: the bundle holds the programs, their wrappers and the
# libraries the build found outside the C library and the CUDA toolkit;
# each program resolves those libraries inside the bundle; a job runs
# from it (ddprun starting train, both through their wrappers); the GPU
# script (check.sh --rehearse) runs its steps on the CPU.
#   bundle_check.sh BUNDLE_SH BUILD_DIR
set -u
bundle_sh=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for p in train ddprun; do
  [ -x "$build/$p" ] || { echo "SKIP: $build/$p is not built"; exit 77; }
done
out=$tmp/bundle
bash "$bundle_sh" "$build" "$out" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "bundle.sh failed"; }
cat "$tmp/log"
for p in train ddprun; do
  [ -x "$out/bin/$p" ] && [ -x "$out/libexec/$p" ] || fail "no bin/$p or libexec/$p"
done
[ -x "$out/tests/gpu/check.sh" ] || fail "no tests/gpu/check.sh in the bundle"

# Nothing the target provides was copied; the build's own libraries were.
for lib in "$out"/lib/*; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|\
    libstdc++.so.*|libgcc_s.so.*|libcuda.so.*|libcublas*|libnccl*)
      fail "bundled $(basename "$lib"), which the target provides" ;;
  esac
done
for need in libinih libsodium libopenblas libuv; do
  if ldd "$build/train" "$build/ddprun" | grep -q "$need"; then
    compgen -G "$out/lib/$need*" >/dev/null || fail "$need is not in the bundle"
  fi
done
echo "ok: bundle holds $(ls "$out/lib" | wc -l) libraries, none the target provides"

# A build with GPU code carries the module beside train, and the bundled
# train finds it there (its CUDA libraries as this machine has them).
if [ -f "$build/libddprun_gpu.so" ]; then
  [ -f "$out/libexec/libddprun_gpu.so" ] || fail "no libexec/libddprun_gpu.so in the bundle"
  "$out/bin/train" --version >"$tmp/version" 2>&1 || { cat "$tmp/version"; fail "train --version failed"; }
  grep -q "^GPU code: $out/libexec/libddprun_gpu.so" "$tmp/version" ||
    { cat "$tmp/version"; fail "the bundled train does not look for its module in libexec/"; }
  echo "ok: $(tail -1 "$tmp/version")"
fi

# With the wrapper's path, every bundled library resolves inside the bundle.
LD_LIBRARY_PATH="$out/lib" ldd "$out"/libexec/* >"$tmp/ldd"
for lib in "$out"/lib/*; do
  name=$(basename "$lib")
  if grep -q "$name =>" "$tmp/ldd" && grep "$name =>" "$tmp/ldd" | grep -vq "$out/lib/"; then
    fail "$name resolves outside the bundle: $(grep "$name =>" "$tmp/ldd" | head -1)"
  fi
done
echo "ok: the programs load their libraries from the bundle"

# A job from the bundle: ddprun starts train, both through wrappers.
timeout 60 "$out/bin/ddprun" --standalone --nproc-per-node 1 --log-level warn \
  "$out/bin/train" --device cpu --steps 3 --samples 256 --eval-samples 32 \
  --batch 16 --width 16 --input-dim 8 --classes 4 >"$tmp/job" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/job"; fail "the bundled job exited $rc"; }
grep -q '^\(\[rank0\]:\)\{0,1\}final loss=' "$tmp/job" || { cat "$tmp/job"; fail "no final line from the bundled job"; }
echo "ok: ddprun and train run from the bundle"

# The GPU script's own plumbing, rehearsed here on the CPU: the runs it
# chains and the lines it reads still fit train's output.
OUT=$tmp/check timeout 100 "$out/tests/gpu/check.sh" "$out" --rehearse \
  >"$tmp/check.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/check.log"; fail "check.sh --rehearse exited $rc"; }
for want in "PASS match fp32: rehearsal (CPU)" "PASS ckpt cpu->cpu: written on cpu at step 20, resumed" \
            "PASS compress fp16: rehearsal (CPU)" "PASS compress bf16: rehearsal (CPU)" \
            "PASS bench fp32: --layers 2 --width 256 --batch 256 on cpu: median step"; do
  grep -q "^$want" "$tmp/check/summary.txt" ||
    { cat "$tmp/check/summary.txt"; fail "no '$want' in the rehearsal"; }
done
grep -q "^checks failed: 0;" "$tmp/check/summary.txt" ||
  { cat "$tmp/check/summary.txt"; fail "the rehearsal counted failures"; }
echo "ok: tests/gpu/check.sh rehearsed on the CPU (match, checkpoints, benchmark)"
