#!/usr/bin/env bash
# Installs PyTorch (CPU use; PyPI's Linux wheel, with its CUDA libraries)
# into DIR for tests/torch: python3 -m pip install --target, about 4.6 GB
# and a minute; and py-spy (a binary wheel, a few MB) into DIR/py-spy, whose
# bin/ the hang tests put on PATH. DIR already holding these versions is
# left alone. py-spy failing to install is not fatal: the tests that need
# it are skipped and say why.
#
#   tests/torch/install_torch.sh DIR
set -euo pipefail
dir=${1:?usage: tests/torch/install_torch.sh DIR}
version=2.11.0
pyspy_version=0.4.3
pip=(python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir)
if PYTHONPATH=$dir python3 -c "import torch, sys
sys.exit(0 if torch.__version__.split('+')[0] == '$version' else 1)" \
  >/dev/null 2>&1; then
  echo "install_torch.sh: torch $version already in $dir"
else
  rm -rf "$dir"
  "${pip[@]}" --target "$dir" "torch==$version" "numpy<3"
  echo "install_torch.sh: torch $version in $dir ($(du -sh "$dir" | cut -f1))"
fi
# Its own target: pip --target leaves an existing DIR/bin alone.
if [ "$("$dir/py-spy/bin/py-spy" --version 2>/dev/null)" = "py-spy $pyspy_version" ]; then
  echo "install_torch.sh: py-spy $pyspy_version already in $dir/py-spy"
elif rm -rf "$dir/py-spy" &&
  "${pip[@]}" --target "$dir/py-spy" "py-spy==$pyspy_version"; then
  echo "install_torch.sh: py-spy $pyspy_version in $dir/py-spy"
else
  echo "install_torch.sh: warning: py-spy did not install; the hang tests" \
    "that need it will be skipped" >&2
fi
