"""Save and resume PyTorch checkpoints in ddprun's node-local checkpoint
directory, so that ddprun's agents can replicate them and a restarted group
resumes from the newest one.

    import ddprun_ckpt
    state = ddprun_ckpt.load_latest(map_location="cpu")  # None on a fresh start
    ...
    if rank == 0:                          # as with torch.save: one writer
        ddprun_ckpt.save({"model": model.state_dict(), "step": step}, step)

Under `ddprun --ckpt-dir DIR` every worker gets DDPRUN_CKPT_DIR=DIR, and
DDPRUN_CKPT_STEP (the newest step there) when DIR holds a checkpoint.
Outside ddprun, pass dir= to save() and load_latest().

A checkpoint is an entry of DIR that appears there by rename, named so that
its step can be read from its name: the step is the last run of decimal
digits in the part of the name before its first '.' (ckpt-0000000190.pt,
step_190.pt and epoch3-step190/ all name step 190). Names that begin with
'.' or end in '.tmp' are never checkpoints: save() writes under such a name
first, and the rename to the checkpoint's name is the commit.

save() runs on the calling process only: call it on rank 0, as one calls
torch.save there. load_latest() may run on every rank: ddprun makes sure
every node's DIR holds the newest checkpoint before the workers start.

Loading uses torch.load(weights_only=True) by default (where the installed
torch has the parameter, 1.13 and later): tensors, module and optimizer
state_dicts, torch.get_rng_state(), random.getstate() and plain Python
containers of numbers, strings and None load; arbitrary pickled objects
(numpy arrays, numpy's RNG state, your own classes) do not, and the file is
then skipped like a damaged one. For such states, and files you trust,
pass weights_only=False.

The module imports torch only inside save() and load_latest(): importing it
needs nothing but the standard library.
"""

import errno
import inspect
import os
import re
import secrets
import stat
import sys

__all__ = ["save", "load_latest", "directory", "DEFAULT_KEEP"]

DEFAULT_KEEP = 3  # as train's --ckpt-keep
_STEP_MAX = 2**64 - 1  # the agent reads steps as uint64
_PATTERN = ("a name that does not begin with '.' nor end in '.tmp', whose "
            "step is the last run of digits before its first '.' "
            "(ckpt-0000000190.pt, step_190.pt)")
_DIGITS = re.compile(r"[0-9]+")
# save()'s temporary: '.' + the checkpoint's name + host + pid + random +
# '.tmp'. The host is reduced to [A-Za-z0-9_-] so the fields split.
_TMP = re.compile(r"\.(?P<name>.+)\.(?P<host>[A-Za-z0-9_-]*)\."
                  r"(?P<pid>[0-9]+)-[0-9a-f]{8}\.tmp")


def _step_of(name):
    """The step that a directory entry's name gives, or None when the name
    is not a checkpoint's."""
    if not name or name.startswith(".") or name.endswith(".tmp") or "/" in name:
        return None
    runs = _DIGITS.findall(name.split(".", 1)[0])
    if not runs:
        return None
    step = int(runs[-1])
    return step if step <= _STEP_MAX else None


def _shape(name):
    """The checkpoints of one series: the name with any digits."""
    return re.compile("[0-9]+".join(re.escape(p) for p in _DIGITS.split(name)))


def _host():
    return re.sub(r"[^A-Za-z0-9_-]", "_", os.uname().nodename)


def _warn(line):
    # One write per line: the ranks' stderr may share one pipe.
    sys.stderr.write("ddprun_ckpt: " + line + "\n")
    sys.stderr.flush()


def directory():
    """The checkpoint directory that ddprun gives (DDPRUN_CKPT_DIR)."""
    d = os.environ.get("DDPRUN_CKPT_DIR")
    if not d:
        raise RuntimeError(
            "ddprun_ckpt: DDPRUN_CKPT_DIR is not set: run the program under "
            "`ddprun --ckpt-dir DIR`, or pass dir= to save() and load_latest()")
    return d


def _checkpoints(d):
    """(step, name) of every entry of d whose name is a checkpoint's,
    newest first (ties by name, for the same order on every rank)."""
    out = []
    for name in os.listdir(d):
        step = _step_of(name)
        if step is not None:
            out.append((step, name))
    out.sort(reverse=True)
    return out


def _is_file(path, follow=True):
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)


def _sweep_temporaries(d, names):
    """Removes the temporaries that save() left on this host in processes
    that no longer run (SIGKILLed while writing): on a tmpfs each holds
    memory until the job ends. A live writer's are left alone."""
    host = _host()
    for entry in names:
        m = _TMP.fullmatch(entry)
        if m is None or m.group("host") != host:
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue  # alive, another user's, or not ours to judge
        try:
            os.remove(os.path.join(d, entry))
        except FileNotFoundError:
            pass
        except OSError as e:
            _warn(f"cannot remove {os.path.join(d, entry)}, the temporary of "
                  f"a dead writer ({e.strerror})")


def _prune(d, saved, step, keep):
    """Keeps the newest `keep` of the checkpoints of saved's series whose
    step is at most step (saved among them), as train's --ckpt-keep does:
    regular files alone are removed, and newer ones are left alone."""
    shape = _shape(saved)
    kept = 1
    for s, name in _checkpoints(d):
        if name == saved or s > step or not shape.fullmatch(name):
            continue
        path = os.path.join(d, name)
        if not _is_file(path, follow=False):
            continue
        if kept < keep:
            kept += 1
            continue
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            _warn(f"cannot remove the old checkpoint {path} ({e.strerror})")


def _fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        # Some file systems cannot sync a directory; the rename is done.
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _check_args(step, name, keep):
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"ddprun_ckpt: step must be an int, not {type(step).__name__}")
    if not 0 <= step <= _STEP_MAX:
        raise ValueError(f"ddprun_ckpt: step {step} is not in [0, 2**64)")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int)
                             or keep < 1):
        raise ValueError(f"ddprun_ckpt: keep must be an int of 1 or more, or "
                         f"None to keep every checkpoint, not {keep!r}")
    if name is None:
        return f"ckpt-{step:010d}.pt"
    named = _step_of(name) if isinstance(name, str) and "\0" not in name else None
    if named is None or name in (".", ".."):
        raise ValueError(f"ddprun_ckpt: {name!r} is not a checkpoint's name: "
                         f"give {_PATTERN}")
    if named != step:
        raise ValueError(f"ddprun_ckpt: {name!r} names step {named}, not {step}: "
                         f"the step is the last run of digits before its first '.'")
    return name


def save(state, step, *, name=None, dir=None, keep=DEFAULT_KEEP):
    """Writes state with torch.save as the checkpoint of step, atomically.

    Call it on one process (rank 0), as torch.save: it writes, it does not
    gather. The file is written under a temporary name in the directory
    (beginning with '.', unique to this process), flushed and fsynced, then
    renamed to `ckpt-{step:010d}.pt`, or to name (which must name step), and
    the directory fsynced. A checkpoint of that name is replaced. On any
    failure the temporary is removed and the error raised: the directory
    holds the new checkpoint whole, or not at all.

    Then the checkpoints of the same series (the name with other digits:
    ckpt-*.pt by default) up to step are pruned to the newest `keep`
    (None: keep them all). Nothing else in the directory is removed, but
    the temporaries that killed writers of this host left.

    dir: the directory, for use outside ddprun (default: directory()); it
    is created when missing. Returns the checkpoint's path.
    """
    final = _check_args(step, name, keep)
    d = directory() if dir is None else os.fspath(dir)
    import torch

    os.makedirs(d, exist_ok=True)
    _sweep_temporaries(d, os.listdir(d))
    path = os.path.join(d, final)
    tmp = os.path.join(d, f".{final}.{_host()}.{os.getpid()}-"
                          f"{secrets.token_hex(4)}.tmp")
    # Created first, exclusively: a name that collides fails here rather
    # than writing over another process's file.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     0o666))
    try:
        torch.save(state, tmp)
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)
    if keep is not None:
        _prune(d, final, step, keep)
    return path


def _load_kwargs(torch, map_location, weights_only):
    kw = {"map_location": map_location}
    try:
        if "weights_only" in inspect.signature(torch.load).parameters:
            kw["weights_only"] = weights_only
    except (TypeError, ValueError):
        pass  # no signature to read: torch's own default
    return kw


def _reason(e):
    """One line for an exception of torch.load. Its weights-only refusals
    wrap the cause (a damaged file's bytes, or a global it does not allow)
    in paragraphs of advice: the cause alone is kept, with advice of ours
    where the cause is a refused global."""
    text, hint = str(e), ""
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.split(". ", 1)[0][:200]
    if marker in str(e) and line.startswith("Unsupported global"):
        hint = ("; pass weights_only=False for files you trust, or allow it "
                "with torch.serialization.add_safe_globals")
    return f"{type(e).__name__}: {line}{hint}" if line else type(e).__name__


def load_latest(map_location=None, *, dir=None, weights_only=True):
    """The newest checkpoint of the directory, torch.load()ed; None when
    there is none (or the directory does not exist).

    Newest by the step in the name; when DDPRUN_CKPT_STEP is set and a
    checkpoint of that step is there, it comes first. An entry that is not
    a regular file (a link to one is), or that does not load, is skipped
    with one line on stderr, and the next newest is tried.

    map_location: as torch.load's (a checkpoint that rank 0 saved from its
    GPU loads onto that GPU on every rank without it: give "cpu" or the
    rank's device). weights_only: see the module's documentation.
    dir: the directory, for use outside ddprun (default: directory()).
    """
    d = directory() if dir is None else os.fspath(dir)
    try:
        found = _checkpoints(d)
    except FileNotFoundError:
        return None
    want = os.environ.get("DDPRUN_CKPT_STEP", "")
    if want.isdigit() and want.isascii():
        found.sort(key=lambda c: c[0] != int(want))  # stable: newest first kept
    if not found:
        return None
    import torch

    kw = _load_kwargs(torch, map_location, weights_only)
    for _, name in found:
        path = os.path.join(d, name)
        if not _is_file(path):
            _warn(f"skipping {path}: not a regular file")
            continue
        try:
            return torch.load(path, **kw)
        except Exception as e:  # noqa: BLE001 - any damage means "try the next"
            _warn(f"skipping {path}: it does not load ({_reason(e)})")
    return None
