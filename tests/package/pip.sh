#!/usr/bin/env bash
# The pip install (label `pip`): deploy/wheel.sh builds the sdist, the
# wheel from it and the binary wheel (auditwheel); that wheel is installed
# into a fresh virtual environment, and from its bin/ alone a 2-rank train
# job and a Python program that reports through ddprun_progress run; the
# installed programs load no library from outside the environment but
# glibc's and those the manylinux policy takes from the system; the
# versions agree with the package's metadata. A wheel built with CUDA
# holds train's GPU module, whose NCCL and cuBLAS are the one exception
# (the system's here, said; package.pip_gpu runs it without them). The
# wheel stays in WORK_DIR/wheelhouse for package.pip_gpu.
#
#   pip.sh SRC_DIR WORK_DIR      (DDPRUN_PYTOOLS: the tools' virtual
#                                 environment, tests/package/install_pytools.sh)
# Skipped (77) where the tools are not installed (PyPI unreachable).
set -euo pipefail
name=package.pip
src=$1
work=$2
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"

tools=${DDPRUN_PYTOOLS:-$src/build-pytools}
"$tools/bin/python" -c 'import build, scikit_build_core, auditwheel' 2>/dev/null ||
  skip "no build, scikit-build-core and auditwheel in $tools (PyPI unreachable?); install them with tests/package/install_pytools.sh DIR and set DDPRUN_PYTOOLS=DIR"
python3 -c 'import venv, ensurepip' 2>/dev/null ||
  skip "python3 cannot make a virtual environment (Debian: apt-get install python3-venv)"

t0=$SECONDS
run 600 wheel env PYTHON="$tools/bin/python" "$src/deploy/wheel.sh" "$work"
[ "$rc" -eq 0 ] || die wheel "deploy/wheel.sh exited $rc"
echo "wheel: built in $((SECONDS - t0)) s"
wheel=$(tail -n 1 "$tmp/wheel.out")
case $(basename "$wheel") in
  "ddprun-$version-py3-none-manylinux_"*"_x86_64.whl") ;;
  *) fail "the wheel is $wheel, not ddprun-$version-py3-none-manylinux_*_x86_64.whl" ;;
esac
[ -f "$work/dist/ddprun-$version.tar.gz" ] || fail "no sdist ddprun-$version.tar.gz"
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB;" \
  "sdist $(du -k "$work/dist/ddprun-$version.tar.gz" | cut -f1) KiB"

# The sdist holds what the build needs and no build output.
tar tzf "$work/dist/ddprun-$version.tar.gz" >"$tmp/sdist.txt"
for f in pyproject.toml CMakeLists.txt cmake/version.cmake \
         python/ddprun_progress/__init__.py python/ddprun_ckpt/__init__.py \
         worker/train/train_main.c PKG-INFO; do
  grep -qx "ddprun-$version/$f" "$tmp/sdist.txt" || fail "the sdist lacks $f"
done
! grep -qE "^ddprun-$version/build[^/]*/" "$tmp/sdist.txt" ||
  fail "the sdist holds a build directory: $(grep -m1 -E '/build[^/]*/' "$tmp/sdist.txt")"

# The wheel: the programs, the module, the libraries beyond glibc.
"$tools/bin/python" -m zipfile -l "$wheel" | awk '{print $1}' >"$tmp/wheel.txt"
for f in ddprun.scripts/ddprun ddprun.scripts/ddprun-rdzv ddprun.scripts/train \
         "ddprun-$version.data/scripts/ddprun" "ddprun-$version.data/scripts/train" \
         ddprun_progress/__init__.py ddprun_ckpt/__init__.py; do
  grep -qx "$f" "$tmp/wheel.txt" || fail "the wheel lacks $f"
done
# The extra that brings py-spy (the Python stacks of a hung rank).
"$tools/bin/python" - "$wheel" "$version" >"$tmp/metadata.txt" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    print(z.read("ddprun-%s.dist-info/METADATA" % sys.argv[2]).decode())
PY
grep -qx "Provides-Extra: stacks" "$tmp/metadata.txt" ||
  fail "the wheel has no stacks extra: $(grep '^Provides-Extra' "$tmp/metadata.txt" | tr '\n' ' ')"
grep -q "^Requires-Dist: py-spy>=0.3.14; extra == ['\"]stacks['\"]$" "$tmp/metadata.txt" ||
  fail "the stacks extra does not require py-spy: $(grep '^Requires-Dist' "$tmp/metadata.txt" | tr '\n' ' ')"
for lib in libuv libsodium libdeflate libinih libjansson libopenblas libgfortran; do
  grep -qE "^ddprun\.libs/$lib" "$tmp/wheel.txt" || fail "the wheel carries no $lib"
done
! grep -qE "^ddprun\.libs/lib(nccl|cublas)" "$tmp/wheel.txt" ||
  fail "the wheel carries $(grep -m1 -E '^ddprun\.libs/lib(nccl|cublas)' "$tmp/wheel.txt")"
gpu=no
grep -qx ddprun_gpu/libddprun_gpu.so "$tmp/wheel.txt" && gpu=yes
echo "wheel: GPU code: $gpu"

venv=$tmp/venv
python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
run 120 install "$venv/bin/pip" install --no-index --disable-pip-version-check "$wheel"
[ "$rc" -eq 0 ] || die install "pip install of the wheel exited $rc"

# From the environment's bin/ only.
export PATH=$venv/bin:/usr/bin:/bin
unset PYTHONPATH LD_LIBRARY_PATH
for p in ddprun ddprun-rdzv train python3; do
  [ "$(command -v "$p")" = "$venv/bin/$p" ] || fail "$p is $(command -v "$p"), not $venv/bin/$p"
done
features="no GPU code"
if [ "$gpu" = yes ]; then
  features=$(train --version | sed -n "s/^train $version (\(CUDA .*, NCCL .*\))\$/\1/p")
  [ -n "$features" ] || fail "the GPU wheel's train --version says: $(train --version | head -1)"
fi
check_versions "$venv/bin" "$features"
[ "$gpu" = no ] || echo "train --version: $(cat "$tmp/train_gpu_line")"
meta=$(python3 -c 'import importlib.metadata as m; print(m.version("ddprun"))')
[ "$meta" = "$version" ] || fail "the package's metadata says $meta, the programs $version"

# Every library resolves inside the environment, or is glibc's, the
# compiler's runtime or zlib (the libraries the manylinux policy leaves to
# the system; auditwheel never copies them).
site=$(python3 -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
objs="ddprun.scripts/ddprun ddprun.scripts/ddprun-rdzv ddprun.scripts/train"
[ "$gpu" = no ] || objs="$objs ddprun_gpu/libddprun_gpu.so"
for o in $objs; do
  exe=$site/$o
  p=$(basename "$o")
  [ -f "$exe" ] || fail "no $exe"
  ldd "$exe" >"$tmp/ldd.$p" || fail "ldd $exe failed"
  while read -r lib arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case $path in "$venv"/*) continue ;; esac
    case $lib in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libgcc_s.so.*|libz.so.*) ;;
      libstdc++.so.*) [ "$p" = libddprun_gpu.so ] ||
                        fail "$p loads $lib from $path, outside the environment" ;;
      # The module's NCCL and cuBLAS: the system's or PyPI's, never the wheel's.
      libnccl.so.*|libcublas.so.*|libcublasLt.so.*)
        [ "$p" = libddprun_gpu.so ] || fail "$p loads $lib: only the GPU module may"
        echo "ldd: $p: $lib => $path (not in the wheel)" ;;
      *) fail "$p loads $lib from $path, outside the environment" ;;
    esac
  done <"$tmp/ldd.$p"
  [ "$p" = libddprun_gpu.so ] || ! grep -q "not found" "$tmp/ldd.$p" ||
    fail "$p: $(grep 'not found' "$tmp/ldd.$p" | head -1)"
done
! grep -hE 'libuv|libsodium|libdeflate|openblas|libinih|libjansson|gfortran' "$tmp"/ldd.* |
  grep -v "=> $venv/" || fail "a vendored library resolves outside $venv"

t0=$SECONDS
check_job job ddprun
echo "job: 2 ranks x 50 steps from $venv/bin in $((SECONDS - t0)) s"
check_progress progress ddprun
grep -q "from $site/ddprun_progress/__init__.py" "$tmp/progress.out" ||
  die progress "ddprun_progress was not the installed one"
echo "PASS: $name"
