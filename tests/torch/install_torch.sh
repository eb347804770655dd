#!/usr/bin/env bash
# Installs PyTorch (CPU use; PyPI's Linux wheel, with its CUDA libraries)
# into DIR for tests/torch: python3 -m pip install --target, about 4.6 GB
# and a minute. DIR already holding that version is left alone.
#
#   tests/torch/install_torch.sh DIR
set -euo pipefail
dir=${1:?usage: tests/torch/install_torch.sh DIR}
version=2.11.0
if PYTHONPATH=$dir python3 -c "import torch, sys
sys.exit(0 if torch.__version__.split('+')[0] == '$version' else 1)" \
  >/dev/null 2>&1; then
  echo "install_torch.sh: torch $version already in $dir"
  exit 0
fi
rm -rf "$dir"
python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir \
  --target "$dir" "torch==$version" "numpy<3"
echo "install_torch.sh: torch $version in $dir ($(du -sh "$dir" | cut -f1))"
