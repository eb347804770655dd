"""PyTorch's flight recorder, answered for ddprun's hang report.

ddprun puts this directory first on the PYTHONPATH of the programs it
launches (DDPRUN_PYTHON_HOOKS=0 in ddprun's environment turns that off);
its sitecustomize.py calls start() as every Python process of a rank
starts. When ddprun names a file in DDPRUN_FR_DUMP, the first Python
process of the rank claims it (DDPRUN_FR_DUMP + ".ready", holding its pid:
a later process defers to a live owner and takes over from a dead one or
from itself before an exec) and starts a daemon thread. The thread waits
for the agent's request (DDPRUN_FR_DUMP + ".request", looked for five
times a second) and answers it with the flight recorder of this process
(torch._C._distributed_c10d._dump_nccl_trace_json or _dump_fr_trace_json:
every process group's last collectives with their sequence numbers), written to DDPRUN_FR_DUMP
whole (under another name first). It runs while the training loop is
blocked in a collective, which releases the GIL. It never imports torch
itself: a process that has not loaded torch.distributed answers with
{"error": ...}. Standard library only; never raises.
"""

import json
import os
import sys
import threading
import time

__all__ = ["start", "serving"]

_serving = False
_lock = threading.Lock()


def serving():
    """True when this process answers the agent's dump requests."""
    return _serving


def _dump():
    """The flight recorder of this process, as JSON bytes: NCCL's (a CUDA
    build keeps NCCL's collectives in a recorder of their own) when it
    holds entries, else the one of the other process groups (gloo)."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return json.dumps({"error": "torch.distributed is not loaded"}).encode()
    out = None
    for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            got = fn(True, False)
        except Exception as e:  # a dump that fails says why
            out = json.dumps({"error": "%s: %s" % (name, e)}).encode()
            continue
        out = got if isinstance(got, bytes) else str(got).encode()
        try:
            if json.loads(out).get("entries"):
                return out
        except (ValueError, AttributeError):
            pass
    if out is None:
        why = "this torch has no flight recorder (_dump_fr_trace_json)"
        return json.dumps({"error": why}).encode()
    return out


def _serve(path):
    request = path + ".request"
    tmp = "%s.part.%d" % (path, os.getpid())
    while True:
        time.sleep(0.2)
        if not os.path.exists(request):
            continue
        try:
            os.unlink(request)
        except OSError:
            pass
        try:
            with open(tmp, "wb") as f:
                f.write(_dump())
            os.replace(tmp, path)
        except OSError:
            pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _owner(ready):
    try:
        with open(ready) as f:
            return int(f.read().strip() or "0")
    except (OSError, ValueError):
        return 0


def _create(ready, me):
    """ready made in place, holding me; FileExistsError when it is there."""
    fd = os.open(ready, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write("%d\n" % me)


def _claim(ready):
    """True when this process is to answer: it made ready, holding its
    pid, or took it over from a dead owner or from itself (an exec keeps
    the pid, not the thread)."""
    me = os.getpid()
    tmp = "%s.%d" % (ready, me)
    try:
        with open(tmp, "w") as f:
            f.write("%d\n" % me)
    except OSError:
        return False
    try:
        for _ in range(3):
            try:
                os.link(tmp, ready)  # whole, or not at all
                return True
            except FileExistsError:
                pass
            except OSError:  # no hard links here: made in place instead
                try:
                    _create(ready, me)
                    return True
                except FileExistsError:
                    pass
                except OSError:
                    return False
            owner = _owner(ready)
            if owner != me and owner > 0 and _alive(owner):
                return False
            try:
                os.unlink(ready)
            except OSError:
                pass
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def start():
    """Answers the agent's dump requests from this process when it is the
    rank's first Python process; a no-op outside ddprun. True when this
    process answers."""
    global _serving
    path = os.environ.get("DDPRUN_FR_DUMP")
    if not path:
        return False
    with _lock:
        if _serving:
            return True
        if not _claim(path + ".ready"):
            return False
        _serving = True
    threading.Thread(target=_serve, args=(path,), name="ddprun-fr",
                     daemon=True).start()
    return True
