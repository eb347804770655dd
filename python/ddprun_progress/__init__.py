"""Report training progress to ddprun, so that --hang-timeout judges a rank
by its steps rather than by the CPU time of its processes.

    import ddprun_progress
    for step in range(steps):
        train_step()
        ddprun_progress.step(step + 1)

Under ddprun, the agent names a progress file in DDPRUN_PROGRESS_FILE and
the rank's slot in LOCAL_RANK. Importing this module maps the slot and
marks it as reporting; from the first step() on, a rank whose reports stop
for --hang-timeout seconds has hung (exit code 4). Outside ddprun (either
variable unset, the file missing or too short) every call is a no-op.

The slot is written exactly as proto/progress.c writes it (docs/ddprun.md,
"Hangs"): slot LOCAL_RANK is the 64 bytes at LOCAL_RANK * 64, in the
host's byte order; uint64 seq at offset 0 (increases with every report),
uint64 step at offset 8, uint32 flags at offset 16 (1: the rank reports).
step is stored before seq, each with one aligned 8-byte store. Python has
no release fence: on a weakly ordered CPU the agent may read a new seq
with the previous step, which only delays the step it prints.

No dependencies beyond the standard library; thread-safe enough for one
training loop (calls from several threads may reuse a seq, which costs
nothing but one report).

The flight recorder: ddprun's start-up hook for Python programs
(ddprun_fr, on the PYTHONPATH ddprun gives its workers) already answers
the agent's requests for a dump in every program, this one or not;
importing this module starts it too where Python skipped the hook.
"""

import mmap
import os

__all__ = ["step", "enabled", "SLOT_BYTES"]

SLOT_BYTES = 64
_REPORTS = 1

_words = None  # memoryview of the slot as unsigned 64-bit words
_seq = 0


def _attach():
    path = os.environ.get("DDPRUN_PROGRESS_FILE")
    local_rank = os.environ.get("LOCAL_RANK")
    if not path or local_rank is None:
        return None
    try:
        slot = int(local_rank)
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except (ValueError, OSError):
        return None
    try:
        size = os.fstat(fd).st_size
        if slot < 0 or size < (slot + 1) * SLOT_BYTES:
            return None
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    base = slot * SLOT_BYTES
    view = memoryview(mm)[base:base + SLOT_BYTES]
    view.cast("I")[4] = _REPORTS  # flags, offset 16
    return view.cast("Q")


def enabled():
    """True when this process runs under ddprun and reports to it."""
    return _words is not None


def step(n):
    """Reports that the rank has completed step n (any non-negative int)."""
    global _seq
    if _words is None:
        return
    _seq += 1
    _words[1] = int(n) & 0xFFFFFFFFFFFFFFFF  # step, offset 8
    _words[0] = _seq  # seq, offset 0: last, so a new seq has its step


def _fr_start():
    try:
        import ddprun_fr
    except ImportError:  # outside ddprun, or its hooks turned off
        return
    ddprun_fr.start()


_words = _attach()
_fr_start()
