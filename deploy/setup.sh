#!/usr/bin/env bash
# Installs the Debian packages ddprun's build and tests need and builds it
# into build/. The container image's own tools (buildah, mmdebstrap) come
# in where the image is built: deploy/container/build.sh installs them.
# Idempotent: run it again after pulling changes.
#   deploy/setup.sh                 # Release-ish build in build/
#   BUILD_DIR=out deploy/setup.sh   # another build directory
#   CMAKE_ARGS="-DDDPRUN_WERROR=ON" deploy/setup.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$here/build}

packages=(
  build-essential cmake pkg-config   # toolchain
  libuv1-dev                         # server and agent event loops
  libinih-dev                        # config files
  libsodium-dev                      # shared-secret authentication
  uthash-dev                         # hash tables of the store
  libopenblas-dev                    # the worker's CPU math (BLAS)
  libcmocka-dev                      # unit tests
  libjansson-dev zlib1g-dev          # ddprun diagnose: trace JSON, gzip'd traces
  libdeflate-dev                     # checkpoints: a fast CRC-32
  clang libclang-rt-14-dev           # fuzz targets (libFuzzer)
  elfutils                           # eu-stack: a stuck native rank's stack
  iproute2                           # network-namespace tests
  systemd strace python3             # tests/systemd and tests/metrics
  python3-yaml                       # deploy tests: parse the Kubernetes manifests
  python3-venv                       # tests/package: the wheel's tools and a fresh environment
  dpkg-dev file                      # cpack -G DEB: dpkg-shlibdeps declares the library packages
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    sudo_cmd=(sudo)
  else
    echo "setup.sh: installing packages needs root or sudo" >&2
    exit 1
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# shellcheck disable=SC2086
cmake -S "$here" -B "$build_dir" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
echo "setup.sh: built $(ls "$build_dir"/ddprun "$build_dir"/ddprun-rdzv "$build_dir"/train | tr '\n' ' ')"
