# shellcheck shell=bash
# Sourced by the PyTorch tests after tests/lib/steps.sh: puts
# DDPRUN_TORCH_PATH (where .ci/run installs torch) on PYTHONPATH, skips
# (77) where python3 cannot import torch with gloo, and runs one BLAS
# thread per process.
if [ -n "${DDPRUN_TORCH_PATH:-}" ]; then
  PYTHONPATH=$DDPRUN_TORCH_PATH${PYTHONPATH:+:$PYTHONPATH}
  export PYTHONPATH
fi
timeout 120 python3 -c 'import torch.distributed as d, sys
sys.exit(0 if d.is_available() and d.is_gloo_available() else 1)' \
  >"$tmp/import.log" 2>&1 ||
  skip "python3 cannot import torch with gloo ($(tail -n 1 "$tmp/import.log"));" \
    "set DDPRUN_TORCH_PATH to a directory holding it (.ci/run installs one)"
export OMP_NUM_THREADS=1
