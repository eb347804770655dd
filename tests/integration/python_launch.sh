#!/usr/bin/env bash
# Python programs under ddprun: a .py file runs as `python3 -u prog.py`, -m
# runs a module, --no-python executes the file itself, $PYTHON_EXEC picks
# the interpreter. Each worker prints its rank and arguments; the test
# checks both ranks ran with the torchrun variables a script reads.
set -u
ddprun=$1
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$tmp/prog.py" <<'PY'
import os, sys
print("PY rank=%s world=%s local=%s master=%s:%s args=%s dash_u=%d" % (
    os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"],
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
    ",".join(sys.argv[1:]), int("-u" in sys.orig_argv)))
PY
mkdir -p "$tmp/pkg"
cp "$tmp/prog.py" "$tmp/pkg/mod.py"

check() { # label file dash_u (python3 ran with -u)
  local n
  n=$(grep -c "PY rank=[01] world=2 local=[01] master=127.0.0.1:[0-9]* args=a,-b dash_u=$3" "$2")
  [ "$n" = 2 ] || { cat "$2"; fail "$1: expected 2 worker lines, got $n"; }
  grep -q "\[rank0\]:PY rank=0" "$2" && grep -q "\[rank1\]:PY rank=1" "$2" ||
    fail "$1: rank prefixes do not match"
}

run() { # label out err command...
  local label=$1 out=$2 err=$3 rc
  shift 3
  "$@" >"$out" 2>"$err"
  rc=$?
  [ "$rc" = 0 ] || { cat "$err"; fail "$label exited $rc"; }
}

run ".py" "$tmp/out1" "$tmp/err1" \
  timeout 30 "$ddprun" --standalone --nproc-per-node 2 "$tmp/prog.py" a -b
check ".py" "$tmp/out1" 1

run "-m" "$tmp/out2" "$tmp/err2" env PYTHONPATH="$tmp/pkg" \
  timeout 30 "$ddprun" --standalone --nproc-per-node 2 -m mod a -b
check "-m" "$tmp/out2" 1

# --no-python: the file runs itself through its #! line.
{ echo '#!/usr/bin/env python3'; cat "$tmp/prog.py"; } >"$tmp/self.py"
chmod +x "$tmp/self.py"
run "--no-python" "$tmp/out3" "$tmp/err3" \
  timeout 30 "$ddprun" --standalone --nproc-per-node 2 --no-python \
  "$tmp/self.py" a -b
check "--no-python" "$tmp/out3" 0

# PYTHON_EXEC that does not exist: refused at once, exit 2.
PYTHON_EXEC=/nonexistent/python timeout 10 "$ddprun" --standalone \
  "$tmp/prog.py" >"$tmp/out4" 2>"$tmp/err4"
rc=$?
[ "$rc" = 2 ] || fail "a missing PYTHON_EXEC exited $rc, not 2"
grep -q "cannot execute '/nonexistent/python'" "$tmp/err4" || { cat "$tmp/err4"; fail "no 'cannot execute' line"; }
echo "PASS: .py, -m, --no-python and PYTHON_EXEC"
