#!/usr/bin/env bash
# The Debian package (label `deb`): deploy/deb.sh builds a CPU-only .deb
# in WORK_DIR (configured for /usr); its contents, control fields and
# conffiles are checked, it is unpacked into a scratch root (dpkg -x), and
# from there a 2-rank train job and a Python program that reports through
# the packaged ddprun_progress run, with the system's libraries that the
# package declares.
#
#   deb.sh SRC_DIR WORK_DIR
# Skipped (77) without dpkg-deb, dpkg-shlibdeps or file.
set -euo pipefail
name=package.deb
src=$1
work=$2
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"
for tool in dpkg-deb dpkg-shlibdeps file; do
  command -v "$tool" >/dev/null ||
    skip "$tool not found (Debian: apt-get install dpkg-dev file)"
done

t0=$SECONDS
run 600 deb "$src/deploy/deb.sh" "$work" -DDDPRUN_CUDA=OFF
[ "$rc" -eq 0 ] || die deb "deploy/deb.sh exited $rc"
deb=$(tail -n 1 "$tmp/deb.out")
arch=$(dpkg --print-architecture)
[ "$(basename "$deb")" = "ddprun_${version}_$arch.deb" ] ||
  fail "the package is $deb, not ddprun_${version}_$arch.deb"
echo "deb: $(basename "$deb") built in $((SECONDS - t0)) s, $(du -k "$deb" | cut -f1) KiB"

# Contents.
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/contents.txt"
for f in ./usr/bin/ddprun ./usr/bin/ddprun-rdzv ./usr/bin/train \
         ./usr/lib/systemd/system/ddprun-rdzv.service ./etc/ddprun/ddprun-rdzv.env \
         ./usr/share/ddprun/slurm/ddprun.sbatch ./usr/share/doc/ddprun/README.md \
         ./usr/lib/python3/dist-packages/ddprun_progress/__init__.py \
         ./usr/lib/python3/dist-packages/ddprun_ckpt/__init__.py; do
  grep -qx "$f" "$tmp/contents.txt" || fail "the package lacks $f"
done
! grep -q '^\./usr/local/' "$tmp/contents.txt" || fail "the package installs under /usr/local"

# Control fields: the library packages (never the -dev ones), the version.
[ "$(dpkg-deb -f "$deb" Package)" = ddprun ] || fail "Package is not ddprun"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] ||
  fail "Version is $(dpkg-deb -f "$deb" Version), the project's $version"
depends=$(dpkg-deb -f "$deb" Depends)
echo "deb: Depends: $depends"
for pkg in libc6 libuv1 libsodium23 libdeflate0 libinih1 libopenblas0 libjansson4 zlib1g; do
  [[ ",$depends," =~ [,\ ]$pkg[\ ,] ]] || fail "Depends lacks $pkg: $depends"
done
! [[ $depends =~ -dev ]] || fail "Depends names a -dev package: $depends"
! [[ $depends =~ cublas|nccl ]] || fail "a CPU package depends on CUDA: $depends"
dpkg-deb -I "$deb" conffiles >"$tmp/conffiles" 2>/dev/null || fail "the package has no conffiles"
grep -qx /etc/ddprun/ddprun-rdzv.env "$tmp/conffiles" ||
  fail "/etc/ddprun/ddprun-rdzv.env is not a conffile"

# Unpacked into a scratch root.
root=$tmp/root
dpkg -x "$deb" "$root" || fail "dpkg -x failed"
unit=$root/usr/lib/systemd/system/ddprun-rdzv.service
grep -q '^ExecStart=/usr/bin/ddprun-rdzv ' "$unit" || fail "the unit's ExecStart= is not /usr/bin/ddprun-rdzv"
grep -qx 'EnvironmentFile=/etc/ddprun/ddprun-rdzv.env' "$unit" ||
  fail "the unit's EnvironmentFile= is not /etc/ddprun/ddprun-rdzv.env"
grep -qx 'LoadCredential=ddprun-secret:/etc/ddprun/secret' "$unit" ||
  fail "the unit's LoadCredential= is not /etc/ddprun/secret"
[ -x "$root/usr/share/ddprun/slurm/ddprun.sbatch" ] || fail "the Slurm script is not executable"
check_versions "$root/usr/bin" "no GPU code"

export PATH=$root/usr/bin:/usr/bin:/bin
export PYTHONPATH=$root/usr/lib/python3/dist-packages
[ "$(command -v train)" = "$root/usr/bin/train" ] || fail "train is not the package's"
check_job job ddprun
check_progress progress ddprun
grep -q "from $PYTHONPATH/ddprun_progress/__init__.py" "$tmp/progress.out" ||
  die progress "ddprun_progress was not the packaged one"
echo "PASS: $name"
