#!/usr/bin/env bash
# From source: `cmake --install BUILD --prefix P` puts every file under P
# (the settings in P/etc, not /etc), and the installed unit names P's
# ddprun-rdzv and settings; the installed programs run a job.
#
#   install.sh SRC_DIR BUILD_DIR
set -euo pipefail
name=package.install
src=$1
build=$2
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"
p=$tmp/prefix
run 60 install cmake --install "$build" --prefix "$p"
[ "$rc" -eq 0 ] || die install "cmake --install exited $rc"
! grep -E '^-- (Installing|Up-to-date): ' "$tmp/install.out" | grep -v ": $p/" ||
  fail "cmake --install --prefix $p wrote outside it"
for f in bin/ddprun bin/ddprun-rdzv bin/train etc/ddprun/ddprun-rdzv.env \
         lib/systemd/system/ddprun-rdzv.service share/ddprun/slurm/ddprun.sbatch \
         share/ddprun/python/ddprun_progress/__init__.py \
         share/ddprun/python/ddprun_ckpt/__init__.py share/doc/ddprun/README.md; do
  [ -f "$p/$f" ] || fail "cmake --install put no $f in the prefix"
done
unit=$p/lib/systemd/system/ddprun-rdzv.service
grep -q "^ExecStart=$p/bin/ddprun-rdzv " "$unit" || fail "the unit's ExecStart= is not $p/bin/ddprun-rdzv"
grep -qx "EnvironmentFile=$p/etc/ddprun/ddprun-rdzv.env" "$unit" ||
  fail "the unit's EnvironmentFile= is not $p/etc/ddprun/ddprun-rdzv.env"
# With GPU code, the installed train finds its module in the prefix.
if [ -f "$build/libddprun_gpu.so" ]; then
  "$p/bin/train" --version | grep -q "^GPU code: $p/lib[^ ]*/ddprun/libddprun_gpu.so" ||
    fail "the installed train does not find its GPU module in $p: $("$p/bin/train" --version | tail -1)"
fi
export PATH=$p/bin:/usr/bin:/bin
check_job job ddprun
echo "PASS: $name"
