#!/usr/bin/env bash
# ddprun's start-up hook for Python programs (python/ddprun_boot): first on
# the workers' PYTHONPATH, it makes the rank's first Python process answer
# the agent's flight-recorder requests, without the program's help.
#   - the user's own sitecustomize still runs, and their PYTHONPATH follows
#     the hook's, whole; without one, PYTHONPATH is the hook's alone;
#   - the rank's process answers (its pid in DDPRUN_FR_DUMP.ready), a
#     Python child it starts does not;
#   - an exec keeps the answering with the process; a Python process that
#     ran and exited first hands it to the next;
#   - a request is answered without torch, saying torch is not loaded;
#   - DDPRUN_PYTHON_HOOKS=0 leaves PYTHONPATH as the user set it.
set -u
ddprun=$1
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tmp/user"
echo 'print("USER sitecustomize", flush=True)' >"$tmp/user/sitecustomize.py"
cat >"$tmp/prog.py" <<'PY'
import os, subprocess, sys, time
try:
    import ddprun_fr
    serving = ddprun_fr.serving()
except ImportError:
    serving = None
stage = sys.argv[1] if len(sys.argv) > 1 else "main"
print("PY %s pid=%d serving=%s" % (stage, os.getpid(), serving), flush=True)
print("PY %s path=%s" % (stage, os.environ.get("PYTHONPATH", "<unset>")),
      flush=True)
with open("/proc/self/environ", "rb") as f:
    env = f.read().split(b"\0")
print("PY %s fr-dump-entries=%d" % (
    stage, sum(1 for e in env if e.startswith(b"DDPRUN_FR_DUMP="))),
    flush=True)
if stage == "exec":
    os.execv(sys.executable, [sys.executable, sys.argv[0], "after-exec"])
if serving is None:
    sys.exit(0)
child = subprocess.run(
    [sys.executable, "-c", "import ddprun_fr; print(ddprun_fr.serving())"],
    capture_output=True, text=True).stdout.split("\n")
print("PY %s child-serving=%s" % (stage, ",".join(child).strip(",")),
      flush=True)
dump = os.environ["DDPRUN_FR_DUMP"]
print("PY %s ready=%s" % (stage, open(dump + ".ready").read().strip()),
      flush=True)
open(dump + ".request", "w").close()
for _ in range(100):
    if os.path.exists(dump):
        break
    time.sleep(0.1)
with open(dump) as f:
    print("PY %s dump=%s" % (stage, f.read()), flush=True)
PY

run() { # label out command...
  local label=$1 out=$2 rc
  shift 2
  timeout 60 "$@" >"$out" 2>&1
  rc=$?
  [ "$rc" = 0 ] || { cat "$out"; fail "$label: ddprun exited $rc"; }
}
expect() { # label out pattern count
  local n
  n=$(grep -cE "$3" "$2")
  [ "$n" = "$4" ] || { cat "$2"; fail "$1: $4 lines match '$3', not $n"; }
}

# The user's sitecustomize and PYTHONPATH, the answering process; a
# DDPRUN_FR_DUMP in ddprun's environment (a ddprun run by a worker of
# another) is replaced, not passed on beside the rank's own.
DDPRUN_FR_DUMP=/nonexistent/fr PYTHONPATH=$tmp/user:/opt/x run user "$tmp/out1" \
  "$ddprun" --standalone --nproc-per-node 2 "$tmp/prog.py"
expect user "$tmp/out1" '^\[rank[01]\]:USER sitecustomize$' 2
expect user "$tmp/out1" "^\[rank[01]\]:PY main path=/[^:]*/pyboot:$tmp/user:/opt/x$" 2
expect user "$tmp/out1" '^\[rank[01]\]:PY main pid=[0-9]+ serving=True$' 2
expect user "$tmp/out1" '^\[rank[01]\]:PY main fr-dump-entries=1$' 2
expect user "$tmp/out1" '^\[rank[01]\]:PY main child-serving=USER sitecustomize,False$' 2
for r in 0 1; do
  pid=$(sed -n "s/^\[rank$r\]:PY main pid=\([0-9]*\) .*/\1/p" "$tmp/out1")
  grep -qx "\[rank$r\]:PY main ready=$pid" "$tmp/out1" ||
    { cat "$tmp/out1"; fail "user: rank $r's ready file does not hold its pid $pid"; }
done
expect user "$tmp/out1" '^\[rank[01]\]:PY main dump=\{"error": "torch.distributed is not loaded"\}$' 2

# Without a PYTHONPATH: the hook's alone (no empty entry, which would put
# the working directory on sys.path).
env -u PYTHONPATH "$ddprun" --standalone --nproc-per-node 1 "$tmp/prog.py" \
  >"$tmp/out2" 2>&1 || { cat "$tmp/out2"; fail "unset: ddprun failed"; }
expect unset "$tmp/out2" '^\[rank0\]:PY main path=/[^:]*/pyboot$' 1

# An exec: the same process answers after it.
run exec "$tmp/out3" "$ddprun" --standalone --nproc-per-node 1 \
  "$tmp/prog.py" exec
expect exec "$tmp/out3" '^\[rank0\]:PY exec pid=[0-9]+ serving=True$' 1
expect exec "$tmp/out3" '^\[rank0\]:PY after-exec pid=[0-9]+ serving=True$' 1
expect exec "$tmp/out3" '^\[rank0\]:PY after-exec dump=\{"error"' 1

# A Python process that ran first and exited: the next one answers.
cat >"$tmp/wrap.sh" <<SH
#!/bin/sh
python3 -c 'import ddprun_fr; print("PRE serving=%s" % ddprun_fr.serving())'
exec python3 "$tmp/prog.py" second
SH
chmod +x "$tmp/wrap.sh"
run pre "$tmp/out4" "$ddprun" --standalone --nproc-per-node 1 --no-python \
  "$tmp/wrap.sh"
expect pre "$tmp/out4" '^\[rank0\]:PRE serving=True$' 1
expect pre "$tmp/out4" '^\[rank0\]:PY second pid=[0-9]+ serving=True$' 1
expect pre "$tmp/out4" '^\[rank0\]:PY second dump=\{"error"' 1

# Turned off: PYTHONPATH as given, no hook.
DDPRUN_PYTHON_HOOKS=0 PYTHONPATH=$tmp/user run off "$tmp/out5" \
  "$ddprun" --standalone --nproc-per-node 1 "$tmp/prog.py"
expect off "$tmp/out5" "^\[rank0\]:PY main path=$tmp/user$" 1
expect off "$tmp/out5" '^\[rank0\]:PY main pid=[0-9]+ serving=None$' 1
echo "PASS: python_hook"
