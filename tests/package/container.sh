#!/usr/bin/env bash
# The container image (label `container`): deploy/container/build.sh
# builds it from the .deb of package.deb (a base made by mmdebstrap, no
# registry), and inside it a 2-rank train job and a Python program that
# reports through ddprun_progress run, with the programs the .deb put in
# /usr/bin.
#
#   container.sh SRC_DIR DEB_DIR WORK_DIR
# Skipped (77), with the reason, where the container tools cannot run:
# not root, no buildah or mmdebstrap, or buildah unable to make a
# container here (storage driver vfs, isolation chroot).
set -euo pipefail
name=package.container
src=$1
debdir=$2
work=$3
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (buildah --isolation chroot, mmdebstrap)"
for tool in buildah mmdebstrap dpkg-deb; do
  command -v "$tool" >/dev/null ||
    skip "$tool not found (Debian: apt-get install buildah mmdebstrap)"
done
deb=$debdir/ddprun_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail "no $deb (package.deb makes it)"

export BUILDAH_ROOT=$work/buildah
buildah=(buildah --storage-driver vfs --root "$BUILDAH_ROOT/storage"
         --runroot "$BUILDAH_ROOT/run")
ctr=
extra_cleanup() {
  [ -z "$ctr" ] || "${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true
}
mkdir -p "$BUILDAH_ROOT"
probe=$("${buildah[@]}" from scratch 2>"$tmp/probe.err") ||
  skip "buildah cannot make a container here: $(tail -n 1 "$tmp/probe.err")"
"${buildah[@]}" rm "$probe" >/dev/null

t0=$SECONDS
run 600 build "$src/deploy/container/build.sh" "$deb" "$work"
[ "$rc" -eq 0 ] || die build "deploy/container/build.sh exited $rc"
tag=$(tail -n 1 "$tmp/build.out")
[ "$tag" = "localhost/ddprun:$version" ] || fail "the image is tagged '$tag'"
grep -q "image: $tag\$" "$src/deploy/k8s/job.yaml" ||
  fail "deploy/k8s/job.yaml does not name $tag"
base=$(sed -n 's/^build.sh: base .*(\(.*\))$/, the base in \1/p' "$tmp/build.err")
echo "image: $tag built in $((SECONDS - t0)) s${base:-, on the base of an earlier run}"
# The image this tag named before, now dangling in the test's storage.
"${buildah[@]}" rmi --prune >/dev/null 2>&1 || true

ctr=$("${buildah[@]}" from -q "$tag") || fail "buildah from $tag failed"
inside=("${buildah[@]}" run --isolation chroot "$ctr" --)
run 30 versions "${inside[@]}" sh -c 'for p in ddprun ddprun-rdzv train; do $p --version; done; dpkg-query -W -f "\${Version}\n" ddprun'
[ "$rc" -eq 0 ] || die versions "--version in the image exited $rc"
printf '%s\n' "ddprun $version (no GPU code)" "ddprun-rdzv $version (no GPU code)" \
  "train $version (no GPU code)" "$version" | diff - "$tmp/versions.out" >&2 ||
  fail "the image's versions are not $version"
[ "$("${inside[@]}" sh -c 'command -v train')" = /usr/bin/train ] ||
  fail "train in the image is not the .deb's /usr/bin/train"

check_job job "${inside[@]}" ddprun
"${buildah[@]}" copy "$ctr" "$src/tests/package/progress_job.py" /tmp/ >/dev/null
run 120 progress "${inside[@]}" ddprun --standalone --nproc-per-node 2 /tmp/progress_job.py
[ "$rc" -eq 0 ] || die progress "the progress job exited $rc in the image"
for r in 0 1; do
  grep -q "^\[rank$r\]:progress: rank $r reported step 20 .* from /usr/lib/python3/dist-packages/ddprun_progress/" \
    "$tmp/progress.out" || die progress "rank $r did not report through the packaged ddprun_progress"
done
echo "PASS: $name"
