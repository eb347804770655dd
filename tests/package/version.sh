#!/usr/bin/env bash
# One version everywhere: ddprun, ddprun-rdzv and train of this build say
# "NAME <version> (<features>)" with the version of project(ddprun
# VERSION ...) and the features of the generated header, and the version
# that pyproject.toml's regex gives the wheel's metadata is the same.
#
#   version.sh SRC_DIR BUILD_DIR
set -euo pipefail
name=package.version
src=$1
build=$2
# shellcheck source=lib.sh
. "$src/tests/package/lib.sh"

header=$build/generated/ddprun_version.h
features=$(sed -n 's/^#define DDPRUN_BUILD_FEATURES "\(.*\)"$/\1/p' "$header")
[ -n "$features" ] || fail "no DDPRUN_BUILD_FEATURES in $header"
case $features in
  "no GPU code"|"CUDA "[0-9]*", NCCL "[0-9]*.[0-9]*.[0-9]*) ;;
  *) fail "the build's features are '$features'" ;;
esac
check_versions "$build" "$features"

# The metadata provider's regex, applied as scikit-build-core applies it.
meta=$(python3 - "$src" <<'PY'
import re, sys, tomllib
src = sys.argv[1]
with open(f"{src}/pyproject.toml", "rb") as f:
    cfg = tomllib.load(f)["tool"]["scikit-build"]["metadata"]["version"]
assert cfg["provider"] == "scikit_build_core.metadata.regex", cfg
with open(f"{src}/{cfg['input']}") as f:
    m = re.search(cfg["regex"], f.read(), re.MULTILINE)
print(m.group("value") if m else "")
PY
) || fail "cannot read pyproject.toml's version"
[ "$meta" = "$version" ] || fail "pyproject.toml gives version '$meta', CMake $version"
echo "PASS: $name: $version ($features)"
