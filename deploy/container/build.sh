#!/usr/bin/env bash
# Builds the ddprun image from a .deb, with no registry: the base is a
# Debian root made here by mmdebstrap from the Debian archive that apt
# reaches, imported as localhost/ddprun-base:SUITE; the image, built by
# buildah from deploy/container/Containerfile, is tagged
# localhost/ddprun:<the .deb's version> (the tag deploy/k8s/job.yaml names).
#
#   deploy/container/build.sh DEB [WORK_DIR]   # last line: the tag
#   deploy/deb.sh build-deb -DDDPRUN_CUDA=OFF && \
#     deploy/container/build.sh build-deb/ddprun_0.1.0_amd64.deb
#
# WORK_DIR (default: a directory beside the .deb) keeps the base's tarball
# and the build context. Settings, from the environment:
#   BUILDAH_ROOT    a storage directory of its own (default: buildah's)
#   STORAGE_DRIVER  vfs (default: works without overlay support) or overlay
#   ISOLATION       chroot (default: no user namespace needed) or oci
#   SUITE           the Debian release of the base (default bookworm)
#   MIRROR          an apt sources file or URL for mmdebstrap (default:
#                   this machine's /etc/apt/sources.list.d/debian.sources)
#   BASE            an image to build on instead (then no mmdebstrap)
# Needs root, buildah and mmdebstrap: run as root with apt-get, it installs
# the two when they are missing (INSTALL_TOOLS=0: it only says so).
set -euo pipefail
usage() { echo "usage: deploy/container/build.sh DEB [WORK_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
deb=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -f "$deb" ] || { echo "build.sh: no package $1 (deploy/deb.sh makes it)" >&2; exit 2; }
work=${2:-$(dirname "$deb")/container}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=${SUITE:-bookworm}
# The image's own tools, which deploy/setup.sh leaves out: installed here
# as root where apt-get is (INSTALL_TOOLS=0: only checked).
mkdir -p "$work"
need=()
for tool in buildah mmdebstrap; do
  [ "$tool" = mmdebstrap ] && [ -n "${BASE:-}" ] && continue
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ] && [ "${INSTALL_TOOLS:-1}" = 1 ] &&
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "build.sh: installing ${need[*]}" >&2
  { apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${need[@]}"; } >"$work/install.log" 2>&1 || {
    echo "build.sh: apt-get install ${need[*]} failed; see $work/install.log" >&2
    exit 1
  }
fi
for tool in buildah dpkg-deb; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool not found (Debian: apt-get install buildah; as root this script installs it)" >&2
    exit 2
  }
done
buildah=(buildah --storage-driver "${STORAGE_DRIVER:-vfs}")
if [ -n "${BUILDAH_ROOT:-}" ]; then
  buildah+=(--root "$BUILDAH_ROOT/storage" --runroot "$BUILDAH_ROOT/run")
fi
version=$(dpkg-deb -f "$deb" Version)
tag=localhost/ddprun:$version
mkdir -p "$work"
t0=$SECONDS

base=${BASE:-localhost/ddprun-base:$suite}
if [ -z "${BASE:-}" ] && ! "${buildah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || {
    echo "build.sh: mmdebstrap not found (Debian: apt-get install mmdebstrap)" >&2
    exit 2
  }
  mirror=${MIRROR:-}
  if [ -z "$mirror" ]; then
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
      [ -s "$f" ] && { mirror=$f; break; }
    done
  fi
  tarball=$work/base-$suite.tar
  if [ ! -s "$tarball" ]; then
    # minbase: apt, dpkg and the essential packages; </dev/null, or
    # mmdebstrap would read sources from a non-terminal stdin.
    mmdebstrap --variant=minbase --format=tar --include=ca-certificates \
      "$suite" "$tarball.part" ${mirror:+"$mirror"} </dev/null \
      >"$work/mmdebstrap.log" 2>&1 || {
      echo "build.sh: mmdebstrap $suite failed; see $work/mmdebstrap.log" >&2
      tail -3 "$work/mmdebstrap.log" >&2
      exit 1
    }
    mv "$tarball.part" "$tarball"
  fi
  ctr=$("${buildah[@]}" from scratch)
  "${buildah[@]}" add "$ctr" "$tarball" / >/dev/null
  "${buildah[@]}" config --cmd /bin/bash "$ctr"
  "${buildah[@]}" commit -q "$ctr" "$base" >/dev/null
  "${buildah[@]}" rm "$ctr" >/dev/null
  echo "build.sh: base $base from mmdebstrap $suite ($((SECONDS - t0)) s)" >&2
fi

ctx=$work/context
rm -rf "$ctx"
mkdir -p "$ctx"
cp "$deb" "$ctx/"
"${buildah[@]}" build --isolation "${ISOLATION:-chroot}" --layers=false \
  --build-arg "BASE=$base" --build-arg "DEB=$(basename "$deb")" \
  -f "$here/Containerfile" -t "$tag" "$ctx" >"$work/build.log" 2>&1 || {
  echo "build.sh: buildah build failed; see $work/build.log" >&2
  tail -5 "$work/build.log" >&2
  exit 1
}
echo "build.sh: $tag in $((SECONDS - t0)) s" >&2
echo "$tag"
