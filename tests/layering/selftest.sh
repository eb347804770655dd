#!/usr/bin/env bash
# check_layers.py catches what it is for: in a copy of the tree's headers,
# an include between two products of the launcher (status/ including the
# server's header), and one upward (proto/ including the agent's), each
# fail it; the tree as it is passes.
# Usage: selftest.sh PYTHON SOURCE_DIR
set -u
py=${1:?usage: selftest.sh PYTHON SOURCE_DIR} src=${2:?}
check=$src/tests/layering/check_layers.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: layering.selftest: $*"; exit 1; }

# The headers and the files that include them, in their folders.
(cd "$src" && find proto agent worker launcher -name '*.[ch]' -o -name '*.cu' \
  -o -name '*.cuh') | while read -r f; do
  mkdir -p "$tmp/$(dirname "$f")" && cp "$src/$f" "$tmp/$f"
done
"$py" "$check" "$tmp" >"$tmp/out" || fail "the copied tree fails: $(cat "$tmp/out")"

echo '#include "server.h"' >>"$tmp/launcher/status/status_cmd.c"
"$py" "$check" "$tmp" >"$tmp/out" && fail "status/ including server.h passed"
grep -q 'launcher/status/status_cmd.c:[0-9]*: launcher/status/ includes "server.h" of launcher/server/' "$tmp/out" ||
  fail "not named: $(cat "$tmp/out")"
cp "$src/launcher/status/status_cmd.c" "$tmp/launcher/status/status_cmd.c"

echo '#include "agent.h"' >>"$tmp/proto/wire_decode.c"
"$py" "$check" "$tmp" >"$tmp/out" && fail "proto/ including agent.h passed"
grep -q 'proto/wire_decode.c:[0-9]*: proto/ includes "agent.h" of agent/' "$tmp/out" ||
  fail "not named: $(cat "$tmp/out")"
echo "PASS: layering.selftest: a product including another and an upward include are caught"
