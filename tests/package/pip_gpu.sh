#!/usr/bin/env bash
# The GPU wheel where CUDA is missing (label `pip`): the wheel that
# package.pip built (WORK_DIR/wheelhouse), when it holds train's GPU
# module, goes into a fresh virtual environment, and runs from its bin/
# alone with only PATH and HOME set, in a private mount namespace where
# the system's NCCL and cuBLAS (and any /usr/local/cuda*) are not there:
# train --version says the module is present and which library it could
# not load; a 2-rank, 50-step job runs on the CPU; --device cuda exits 2
# with one line; every program resolves its libraries in the environment
# or the C library's, and the module all but NCCL and cuBLAS.
#
# With --pypi (label `pypi`), the same environment takes NCCL and cuBLAS
# from PyPI instead (pip install 'ddprun[cuda]': some 750 MB, downloaded
# once into WORK_DIR/nvidia): the module then loads them from
# site-packages/nvidia/..., which ldd and train --version show.
#
#   pip_gpu.sh SRC_DIR WORK_DIR [--pypi]
# Skipped (77) when the wheel has no GPU code, no mount namespace can be
# made here, or (--pypi) PyPI is unreachable.
set -euo pipefail
src=$1
work=$2
pypi=0
[ "${3:-}" = --pypi ] && pypi=1
name=package.pip_gpu
[ "$pypi" -eq 0 ] || name=package.pip_cuda
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"

wheels=("$work"/wheelhouse/ddprun-"$version"-py3-none-manylinux_*.whl)
wheel=${wheels[0]}
[ -f "$wheel" ] || skip "no wheel in $work/wheelhouse (package.pip builds it)"
python3 -m zipfile -l "$wheel" >"$tmp/wheel.txt" || fail "cannot list $wheel"
grep -q '^ddprun_gpu/libddprun_gpu.so ' "$tmp/wheel.txt" ||
  skip "$(basename "$wheel") has no GPU code (the build found no nvcc or NCCL)"

# The files and directories that hold the system's NCCL and cuBLAS: each
# CUDA installation's directory is covered by an empty tmpfs, a library
# elsewhere (a system library directory) by /dev/null.
dirs=() files=()
for d in /usr/local/cuda*; do
  [ -d "$d" ] && dirs+=("$(realpath "$d")")
done
while read -r f; do
  case $(realpath "$f") in
    /usr/local/cuda*|/opt/*) dirs+=("$(dirname "$(realpath "$f")")") ;;
    *) files+=("$(realpath "$f")") ;;
  esac
done < <(ldconfig -p | awk '$1 ~ /^lib(nccl|cublas|cublasLt)\.so/ {print $NF}')
# Each once, and none inside another (whose tmpfs already hides it).
mapfile -t dirs < <(printf '%s\n' "${dirs[@]}" | grep . | sort -u |
  awk '{ for (i = 1; i <= n; i++) if (index($0 "/", keep[i] "/") == 1) next
         keep[++n] = $0; print }')
hide='set -e
for d in $HIDE_DIRS; do mount -t tmpfs none "$d"; done
for f in $HIDE_FILES; do mount --bind /dev/null "$f"; done
exec env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$HOME_DIR" "$@"'
ns=(unshare -m)
[ "$(id -u)" -eq 0 ] || ns=(unshare -rm)
"${ns[@]}" true 2>/dev/null ||
  skip "cannot make a private mount namespace here (${ns[*]}), which hides the system's CUDA"
# without_cuda TAG CMD...: CMD there, bounded by 120 s.
without_cuda() {
  local tag=$1
  shift
  run 120 "$tag" env HIDE_DIRS="${dirs[*]}" HIDE_FILES="${files[*]}" \
    VENV="$venv" HOME_DIR="$tmp" "${ns[@]}" bash -c "$hide" bash "$@"
}

venv=$tmp/venv
t0=$SECONDS
python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
module=$site/ddprun_gpu/libddprun_gpu.so
if [ "$pypi" -eq 0 ]; then
  run 120 install "$venv/bin/pip" install --no-index --disable-pip-version-check "$wheel"
  [ "$rc" -eq 0 ] || die install "pip install of the wheel exited $rc"
else
  # The extra for the module's cuBLAS: cuda (CUDA 13) or cuda12.
  cublas=$(unzip -p "$wheel" ddprun_gpu/libddprun_gpu.so >"$tmp/mod.so" &&
           readelf -d "$tmp/mod.so" | sed -n 's/.*\[libcublas\.so\.\([0-9]*\)\].*/\1/p')
  extra=cuda
  [ "$cublas" = 13 ] || extra=cuda$cublas
  mkdir -p "$work/nvidia"
  # From the wheels an earlier run downloaded; PyPI only when they do not do.
  install_extra() {
    run 300 install "$venv/bin/pip" install --no-index --disable-pip-version-check \
      --find-links "$work/nvidia" "${wheel}[$extra]"
  }
  install_extra
  if [ "$rc" -ne 0 ]; then
    run 600 download "$venv/bin/pip" download --disable-pip-version-check \
      --dest "$work/nvidia" "${wheel}[$extra]"
    [ "$rc" -eq 0 ] || skip "pip download of ddprun[$extra]'s NCCL and cuBLAS failed (PyPI unreachable?): $(tail -1 "$tmp/download.err")"
    echo "download: $(du -sh "$work/nvidia" | cut -f1) into $work/nvidia in $((SECONDS - t0)) s"
    install_extra
    [ "$rc" -eq 0 ] || die install "pip install ddprun[$extra] exited $rc"
  fi
fi
echo "install: $(du -sh "$venv" | cut -f1) in $((SECONDS - t0)) s"

without_cuda version train --version
[ "$rc" -eq 0 ] || die version "train --version exited $rc"
line=$(sed -n 2p "$tmp/version.out")
echo "train --version without CUDA: $line"
if [ "$pypi" -eq 0 ]; then
  grep -qE "^GPU code: $module, not loadable: lib(nccl|cublas|cublasLt)\.so" <<<"$line" ||
    fail "train --version does not say that the module's NCCL or cuBLAS is missing: $line"
else
  grep -qE "^GPU code: $module \(CUDA runtime [0-9.]+, NCCL [0-9.]+ from $site/nvidia/nccl/lib/libnccl\.so\.2, cuBLAS [0-9.]+ from $site/nvidia/[a-z0-9]+/lib/libcublas\.so\.[0-9]+\)$" <<<"$line" ||
    fail "train --version does not load NCCL and cuBLAS from $site/nvidia: $line"
fi

# ldd, from there: the programs in the environment or the C library; the
# module too, but for its NCCL and cuBLAS (missing, or PyPI's).
without_cuda ldd ldd "$site"/ddprun.scripts/ddprun "$site"/ddprun.scripts/ddprun-rdzv \
  "$site"/ddprun.scripts/train "$module"
[ "$rc" -eq 0 ] || die ldd "ldd exited $rc"
obj=
while read -r lib arrow path _; do
  case $lib in /*:) obj=$(basename "${lib%:}"); continue ;; esac
  [ "$arrow" = "=>" ] || continue
  case $path in "$venv"/*) continue ;; esac
  case $lib in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libgcc_s.so.*|libz.so.*) ;;
    libstdc++.so.*) [ "$obj" = libddprun_gpu.so ] || fail "$obj loads $lib from $path" ;;
    libnccl.so.*|libcublas.so.*|libcublasLt.so.*)
      [ "$obj" = libddprun_gpu.so ] && [ "$pypi" -eq 0 ] && [ "$path" = not ] ||
        fail "$obj: $lib => $path"
      echo "ldd: $obj: $lib not found, as expected" ;;
    *) fail "$obj loads $lib from $path, outside the environment" ;;
  esac
done <"$tmp/ldd.out"

t0=$SECONDS
without_cuda job ddprun --standalone --nproc-per-node 2 train --steps 50
[ "$rc" -eq 0 ] || die job "the job exited $rc"
grep -qE '^\[rank0\]:final loss=[0-9.]+ .*steps=50 .*world=2 ' "$tmp/job.out" ||
  die job "no final line of a 2-rank, 50-step job"
grep -q 'device cpu' "$tmp/job.err" "$tmp/job.out" || die job "the job did not say device cpu"
echo "job: 2 ranks x 50 steps on the CPU in $((SECONDS - t0)) s"

if [ "$pypi" -eq 0 ]; then
  without_cuda cuda train --device cuda --steps 3
  [ "$rc" -eq 2 ] || die cuda "train --device cuda exited $rc, not 2"
  [ "$(wc -l <"$tmp/cuda.err")" -eq 1 ] && [ ! -s "$tmp/cuda.out" ] ||
    die cuda "train --device cuda printed more than one line"
  grep -qE "^train: --device cuda: the GPU code could not be loaded \(lib(nccl|cublas|cublasLt)\.so" "$tmp/cuda.err" ||
    die cuda "train --device cuda does not name the library it could not load"
  echo "train --device cuda: exit 2: $(cat "$tmp/cuda.err")"
fi
echo "PASS: $name"
