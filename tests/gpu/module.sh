#!/usr/bin/env bash
# train's GPU module in the build tree (a build with CUDA; no GPU needed):
# train links neither the CUDA libraries nor NCCL; the module exports its
# one table and nothing else; and it loads in train, which catches a call
# in the GPU code to a function of train's libraries that train itself
# does not hold (dlopen: "undefined symbol"). train --version then names
# the NCCL and cuBLAS the module loaded. Skipped (77) where this machine
# has no NCCL or cuBLAS to load.
#   module.sh TRAIN MODULE
set -u
train=$1
module=$2
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$module" ] || fail "no $module"
libs=$(ldd "$train") || fail "ldd $train failed"
! grep -E 'lib(cudart|cublas|cublasLt|nccl)\.so' <<<"$libs" ||
  fail "train links a CUDA library itself"
exports=$(nm -D --defined-only "$module" | awk '{print $3}' | grep -v '^_' | sort)
[ "$exports" = dr_gpu_module_v1 ] || fail "the module exports more than its table: $(echo $exports)"
line=$("$train" --version | sed -n 2p)
echo "$line"
case $line in
  "GPU code: $(realpath "$module") (CUDA runtime "*", NCCL "*" from /"*", cuBLAS "*" from /"*")") ;;
  *"cannot open shared object file"*) echo "SKIP: no NCCL or cuBLAS here to load"; exit 77 ;;
  *) fail "train does not load its module: $line" ;;
esac
echo "ok: train loads $module; it exports only dr_gpu_module_v1; train links no CUDA library"
