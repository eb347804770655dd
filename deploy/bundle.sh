#!/usr/bin/env bash
# Packs ddprun's programs with the shared libraries they need that a GPU
# machine may lack (libuv, inih, libsodium, OpenBLAS and its Fortran
# runtime, ...), so they run where only the NVIDIA driver, CUDA 13 and NCCL
# are installed.
#
#   deploy/bundle.sh BUILD_DIR OUT_DIR [--with-cuda-libs]
#
# OUT_DIR/libexec/  the real binaries: train, ddprun, ddprun-rdzv, and
#                   gpu_kernel_check and gpu_bench when they were built;
#                   beside train its GPU code, libddprun_gpu.so, which
#                   train loads from there
# OUT_DIR/lib/      the libraries, as ldd resolved them here
# OUT_DIR/bin/      one wrapper per binary that puts lib/ first on
#                   LD_LIBRARY_PATH and execs the binary (workers that
#                   ddprun starts inherit it)
# OUT_DIR/tests/gpu the GPU check scripts (check.sh runs from there too)
#
# Left out, as the target provides them: the C library and its parts
# (libc, libm, libpthread, libdl, librt, ld-linux), the compiler runtime
# (libstdc++, libgcc_s, which PyTorch programs under ddprun also load),
# the driver (libcuda, libnvidia-*), and unless --with-cuda-libs, the CUDA
# toolkit's libraries (cuBLAS, cuBLASLt, NCCL, which the GPU module loads;
# the CUDA runtime is linked statically into it). --with-cuda-libs copies
# those too (some 700 MB).
set -euo pipefail

usage() {
  echo "usage: deploy/bundle.sh BUILD_DIR OUT_DIR [--with-cuda-libs]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
build=$1
out=$2
with_cuda=0
if [ $# -ge 3 ]; then
  [ "$3" = "--with-cuda-libs" ] || usage
  with_cuda=1
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -x "$build/train" ] || { echo "bundle.sh: no $build/train; build first (deploy/setup.sh)" >&2; exit 2; }

programs=()
for p in train ddprun ddprun-rdzv gpu_kernel_check gpu_bench; do
  [ -x "$build/$p" ] && programs+=("$p")
done
# gpu_kernel_check and the module are built exactly when the GPU code is:
# without them this train runs on the CPU only, and tests/gpu/check.sh
# cannot use the bundle.
gpu=yes
if [ ! -x "$build/gpu_kernel_check" ] || [ ! -f "$build/libddprun_gpu.so" ]; then
  gpu=no
  echo "bundle.sh: warning: $build has no GPU code (no gpu_kernel_check):" \
       "its train runs on the CPU only; reconfigure with" \
       "cmake -S . -B $build -DDDPRUN_CUDA=ON and build before bundling" \
       "for a GPU machine" >&2
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/libexec" "$out/lib" "$out/tests/gpu"

# A library the target is expected to have.
provided() {
  case "$1" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|\
    libstdc++.so.*|libgcc_s.so.*|libcuda.so.*|libnvidia-*|linux-vdso.so.*)
      return 0 ;;
    libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libcudart.so.*)
      [ "$with_cuda" -eq 0 ] ;;
    *) return 1 ;;
  esac
}

# copy_libs FILE: the libraries FILE needs into lib/.
copy_libs() {
  # "libuv.so.1 => /lib/x86_64-linux-gnu/libuv.so.1 (0x...)"
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    provided "$name" && continue
    if [ "$path" = "not" ]; then
      echo "bundle.sh: $(basename "$1") needs $name, which is not found here" >&2
      exit 1
    fi
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$1")
}

if [ "$gpu" = yes ]; then
  cp "$build/libddprun_gpu.so" "$out/libexec/"
  copy_libs "$build/libddprun_gpu.so"
fi
for p in "${programs[@]}"; do
  cp "$build/$p" "$out/libexec/$p"
  copy_libs "$build/$p"
  cat > "$out/bin/$p" <<EOF
#!/bin/sh
# ddprun bundle: runs libexec/$p with the bundle's libraries first.
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$here/libexec/$p" "\$@"
EOF
  chmod +x "$out/bin/$p"
done
{
  echo "built from: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "bundled: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  grep -E '^(DDPRUN_CUDA|CMAKE_BUILD_TYPE|CMAKE_CUDA_ARCHITECTURES):' \
    "$build/CMakeCache.txt" 2>/dev/null
  # The oldest C library the bundle runs on.
  need=$(objdump -T "$out"/libexec/* "$out"/lib/* 2>/dev/null |
         grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "needs: glibc ${need#GLIBC_} or later"
  echo "gpu code: $gpu"
} >"$out/BUILD_INFO"
cp "$here"/tests/gpu/check.sh "$here"/tests/gpu/torch_mlp.py "$out/tests/gpu/"
chmod +x "$out"/tests/gpu/*
du -sh "$out" | awk -v n="${#programs[@]}" \
  '{print "bundle.sh: " n " programs and their libraries in " $2 " (" $1 ")"}'
ls "$out/lib"
