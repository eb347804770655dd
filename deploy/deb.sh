#!/usr/bin/env bash
# Builds the Debian package: configures BUILD_DIR for /usr (the programs
# only, no tests), builds it and runs `cpack -G DEB` there.
#
#   deploy/deb.sh BUILD_DIR [CMAKE_ARGS...]   # prints the .deb's path
#   deploy/deb.sh build-deb -DDDPRUN_CUDA=OFF  # a CPU-only package
#
# The package needs dpkg-dev (dpkg-shlibdeps) and file. Without
# -DDDPRUN_CUDA=OFF, a machine with the CUDA toolkit builds the GPU code,
# and the package then recommends NVIDIA's libcublas and libnccl2 packages
# (train runs on the CPU without them).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: deploy/deb.sh BUILD_DIR [CMAKE_ARGS...]" >&2; exit 2; }
build=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in dpkg-shlibdeps file; do
  command -v "$tool" >/dev/null || {
    echo "deb.sh: $tool not found (Debian: apt-get install dpkg-dev file)" >&2
    exit 2
  }
done
cmake -S "$here" -B "$build" -DCMAKE_INSTALL_PREFIX=/usr -DDDPRUN_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
rm -f "$build"/ddprun_*.deb
(cd "$build" && cpack -G DEB >cpack.log 2>&1) || {
  echo "deb.sh: cpack -G DEB failed; see $build/cpack.log" >&2
  tail -5 "$build/cpack.log" >&2
  exit 1
}
ls "$build"/ddprun_*.deb
