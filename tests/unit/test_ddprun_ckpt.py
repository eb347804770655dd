"""python/ddprun_ckpt without PyTorch: a fake `torch` module in sys.modules
stands in for torch.save and torch.load (it pickles behind a magic header,
and records what it was given). Checked: checkpoint names, the temporary
that never has one and the rename that commits, fsync before the rename,
cleanup on every failure, keep-K within the series and never beyond it,
the temporaries of dead writers, load_latest's order (the step in the
name, DDPRUN_CKPT_STEP first), garbage skipped with one line each, the
arguments torch.load gets, and the errors.

    python3 tests/unit/test_ddprun_ckpt.py      (ctest: unit.ddprun_ckpt)
"""
import contextlib
import io
import os
import pickle
import re
import stat
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)
import ddprun_ckpt  # noqa: E402

MAGIC = b"FAKETORCH\n"


class FakeTorch:
    """torch.save / torch.load stand-ins; `hook(path)` runs inside save
    after half the bytes are written, `fail` is raised there."""

    def __init__(self, load_has_weights_only=True):
        self.saved = []  # paths given to save
        self.loads = []  # (path, kwargs) given to load
        self.hook = None
        self.fail = None
        self.module = types.ModuleType("torch")
        self.module.save = self.save
        if load_has_weights_only:
            def load(f, map_location=None, pickle_module=None, *,
                     weights_only=None, mmap=None):
                return self.load(f, map_location=map_location,
                                 weights_only=weights_only)
        else:
            def load(f, map_location=None, pickle_module=None):
                return self.load(f, map_location=map_location)
        self.module.load = load

    def save(self, state, f):
        self.saved.append(f)
        data = MAGIC + pickle.dumps(state)
        with open(f, "wb") as out:
            out.write(data[:len(data) // 2])
            out.flush()
            if self.hook is not None:
                self.hook(f)
            if self.fail is not None:
                raise self.fail
            out.write(data[len(data) // 2:])

    def load(self, f, **kw):
        self.loads.append((f, kw))
        with open(f, "rb") as src:
            data = src.read()
        if not data.startswith(MAGIC):
            raise RuntimeError("PytorchStreamReader failed reading zip archive:\n"
                               "failed finding central directory")
        return pickle.loads(data[len(MAGIC):])


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.torch = FakeTorch()
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.dict(sys.modules,
                                            {"torch": self.torch.module}))
        stack.enter_context(mock.patch.dict(os.environ))
        os.environ.pop("DDPRUN_CKPT_DIR", None)
        os.environ.pop("DDPRUN_CKPT_STEP", None)
        self.addCleanup(stack.close)
        self.addCleanup(self.tmp.cleanup)

    def ls(self, d=None):
        return sorted(os.listdir(d or self.d))

    def put(self, name, content=None):
        """A file in the directory: a fake checkpoint of content, or
        garbage when content is None."""
        with open(os.path.join(self.d, name), "wb") as f:
            f.write(b"garbage" if content is None else
                    MAGIC + pickle.dumps(content))

    def load_quiet(self, **kw):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            state = ddprun_ckpt.load_latest(dir=self.d, **kw)
        return state, err.getvalue().splitlines()


class TestNames(Base):
    def test_step_of(self):
        cases = {
            "ckpt-0000000190.pt": 190, "step_190.pt": 190,
            "epoch3-step190": 190, "epoch3-step190.tar.gz": 190,
            "190": 190, "a1b22c.pt.5": 22, "ckpt-000.pt": 0,
            ".ckpt-0000000190.pt": None, "ckpt-0000000190.pt.tmp": None,
            "ckpt.pt": None, "ckpt.190.pt": None, "": None,
            "step_190.tmp": None, "step_%d.pt" % 2**64: None,
            "step_\u0661\u0662.pt": None,  # Arabic-Indic digits: not decimal ASCII
        }
        for name, step in cases.items():
            self.assertEqual(ddprun_ckpt._step_of(name), step, name)

    def test_directory(self):
        for value in (None, ""):
            if value is None:
                os.environ.pop("DDPRUN_CKPT_DIR", None)
            else:
                os.environ["DDPRUN_CKPT_DIR"] = value
            with self.assertRaisesRegex(RuntimeError, "--ckpt-dir.*dir="):
                ddprun_ckpt.directory()
            with self.assertRaisesRegex(RuntimeError, "DDPRUN_CKPT_DIR"):
                ddprun_ckpt.save({}, 1)
            with self.assertRaisesRegex(RuntimeError, "DDPRUN_CKPT_DIR"):
                ddprun_ckpt.load_latest()
        os.environ["DDPRUN_CKPT_DIR"] = self.d
        self.assertEqual(ddprun_ckpt.directory(), self.d)

    def test_environment_directory(self):
        os.environ["DDPRUN_CKPT_DIR"] = self.d
        path = ddprun_ckpt.save({"w": 1}, 7)
        self.assertEqual(path, os.path.join(self.d, "ckpt-0000000007.pt"))
        self.assertEqual(ddprun_ckpt.load_latest(), {"w": 1})

    def test_default_and_given_names(self):
        self.assertEqual(ddprun_ckpt.save({"a": 1}, 190, dir=self.d),
                         os.path.join(self.d, "ckpt-0000000190.pt"))
        ddprun_ckpt.save({"a": 2}, 190, dir=self.d, name="step_190.pt")
        ddprun_ckpt.save({"a": 3}, 191, dir=self.d, name="epoch3-step191.pt")
        ddprun_ckpt.save({"a": 4}, 12345678901, dir=self.d)
        self.assertEqual(self.ls(), ["ckpt-0000000190.pt", "ckpt-12345678901.pt",
                                     "epoch3-step191.pt", "step_190.pt"])

    def test_bad_names(self):
        bad = [".step_5.pt", "step_5.tmp", "step_5.pt.tmp", "step.pt", "ckpt.5.pt",
               "", ".", "..", "sub/step_5.pt", "/abs/step_5.pt", "step_5\0.pt", 5,
               b"step_5.pt"]
        for name in bad:
            with self.assertRaises(ValueError, msg=repr(name)) as cm:
                ddprun_ckpt.save({}, 5, dir=self.d, name=name)
            self.assertIn("last run of digits before its first '.'", str(cm.exception))
        with self.assertRaisesRegex(ValueError, "names step 6, not 5"):
            ddprun_ckpt.save({}, 5, dir=self.d, name="step_6.pt")
        with self.assertRaisesRegex(ValueError, "names step 15, not 5"):
            ddprun_ckpt.save({}, 5, dir=self.d, name="run5-step15.pt")
        self.assertEqual(self.ls(), [])
        self.assertEqual(self.torch.saved, [])

    def test_bad_steps_and_keep(self):
        for step, exc in ((-1, ValueError), (2**64, ValueError), ("5", TypeError),
                          (5.0, TypeError), (True, TypeError), (None, TypeError)):
            with self.assertRaises(exc, msg=repr(step)):
                ddprun_ckpt.save({}, step, dir=self.d)
        for keep in (0, -1, 1.5, "3", True):
            with self.assertRaisesRegex(ValueError, "keep", msg=repr(keep)):
                ddprun_ckpt.save({}, 5, dir=self.d, keep=keep)
        self.assertEqual(self.ls(), [])
        self.assertEqual(self.torch.saved, [])

    def test_import_without_torch(self):
        # A fresh interpreter where `import torch` fails: importing the
        # module works; save() raises ImportError and writes nothing.
        d = os.path.join(self.d, "ckpt")
        code = ("import sys; sys.modules['torch'] = None; "
                f"sys.path.insert(0, {PYTHON_DIR!r}); import ddprun_ckpt\n"
                "try:\n"
                f"    ddprun_ckpt.save({{}}, 1, dir={d!r})\n"
                "except ImportError:\n"
                "    print('no torch')\n"
                f"print(ddprun_ckpt.load_latest(dir={d!r}))\n")
        out = subprocess.run([sys.executable, "-B", "-c", code],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "no torch\nNone\n")
        self.assertFalse(os.path.exists(d))


class TestSave(Base):
    def test_temporary_is_never_a_checkpoint(self):
        ddprun_ckpt.save({"v": 1}, 10, dir=self.d)
        seen = []

        def hook(path):
            # Mid-write: the temporary sits in the same directory (a rename
            # within one file system), under a name that is no checkpoint's,
            # and the checkpoint's name still holds the previous content.
            tmp = os.path.basename(path)
            self.assertEqual(os.path.dirname(path), self.d)
            self.assertTrue(tmp.startswith("."), tmp)
            self.assertTrue(tmp.endswith(".tmp"), tmp)
            self.assertIsNone(ddprun_ckpt._step_of(tmp))
            names = self.ls()
            self.assertEqual([n for n in names if ddprun_ckpt._step_of(n) is not None],
                             ["ckpt-0000000010.pt"])
            self.assertIn(tmp, names)
            seen.append(tmp)

        self.torch.hook = hook
        path = ddprun_ckpt.save({"v": 2}, 10, dir=self.d)
        self.assertEqual(len(seen), 1)
        self.assertRegex(seen[0], r"^\.ckpt-0000000010\.pt\.[A-Za-z0-9_-]*\.%d-"
                         r"[0-9a-f]{8}\.tmp$" % os.getpid())
        self.assertEqual(self.ls(), ["ckpt-0000000010.pt"])  # replaced, no temporary
        state, _ = self.load_quiet()
        self.assertEqual(state, {"v": 2})
        self.assertEqual(path, os.path.join(self.d, "ckpt-0000000010.pt"))

    def test_temporaries_are_unique(self):
        self.torch.hook = lambda p: None
        for _ in range(3):
            ddprun_ckpt.save({}, 1, dir=self.d)
        self.assertEqual(len(set(self.torch.saved)), 3)

    def test_fsync_then_rename_then_directory(self):
        events = []
        real_fsync, real_rename = os.fsync, os.rename

        def fsync(fd):
            kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
            if kind == "file":
                self.assertEqual(os.fstat(fd).st_size,
                                 len(MAGIC + pickle.dumps({"x": 1})))
            events.append(kind)
            real_fsync(fd)

        def rename(a, b):
            events.append("rename")
            real_rename(a, b)

        with mock.patch("os.fsync", fsync), mock.patch("os.rename", rename):
            ddprun_ckpt.save({"x": 1}, 3, dir=self.d)
        self.assertEqual(events, ["file", "rename", "dir"])

    def test_directory_made_when_missing(self):
        d = os.path.join(self.d, "a", "b")
        ddprun_ckpt.save({}, 1, dir=d)
        self.assertEqual(self.ls(d), ["ckpt-0000000001.pt"])

    def test_failures_leave_no_temporary(self):
        ddprun_ckpt.save({"v": 1}, 4, dir=self.d)
        for exc in (RuntimeError("disk full"), OSError(28, "No space left"),
                    KeyboardInterrupt()):
            self.torch.fail = exc
            with self.assertRaises(type(exc)):
                ddprun_ckpt.save({"v": 2}, 5, dir=self.d)
            self.assertEqual(self.ls(), ["ckpt-0000000004.pt"])
        self.torch.fail = None

        # The rename fails: the name is taken by a directory that is not empty.
        os.makedirs(os.path.join(self.d, "ckpt-0000000006.pt", "x"))
        with self.assertRaises(OSError):
            ddprun_ckpt.save({"v": 3}, 6, dir=self.d)
        self.assertEqual(self.ls(), ["ckpt-0000000004.pt", "ckpt-0000000006.pt"])

        # The file's fsync fails.
        with mock.patch("os.fsync", side_effect=OSError(5, "I/O error")):
            with self.assertRaises(OSError):
                ddprun_ckpt.save({"v": 4}, 7, dir=self.d)
        self.assertEqual(self.ls(), ["ckpt-0000000004.pt", "ckpt-0000000006.pt"])
        state, _ = self.load_quiet()
        self.assertEqual(state, {"v": 1})

    def test_keep_newest_k_of_its_own(self):
        others = ["notes.txt", "step_2.pt", "ckpt-0000000001.bin", "best.pt",
                  ".ckpt-0000000001.pt", "ckpt-0000000001.pt.tmp"]
        for n in others:
            self.put(n)
        # Of the same shape but a directory, or a link: never removed.
        os.mkdir(os.path.join(self.d, "ckpt-0000000002.pt"))
        os.symlink("notes.txt", os.path.join(self.d, "ckpt-0000000003.pt"))
        for step in range(4, 10):
            ddprun_ckpt.save({"s": step}, step, dir=self.d)
        self.assertEqual(self.ls(), sorted(others + [
            "ckpt-0000000002.pt", "ckpt-0000000003.pt",
            "ckpt-0000000007.pt", "ckpt-0000000008.pt", "ckpt-0000000009.pt"]))

    def test_keep_counts_up_to_the_saved_step(self):
        # A newer checkpoint (resumed from an older one) is neither counted
        # nor removed; the one just saved always stays.
        for step in (1, 2, 3, 50):
            ddprun_ckpt.save({}, step, dir=self.d, keep=None)
        ddprun_ckpt.save({}, 4, dir=self.d, keep=2)
        self.assertEqual(self.ls(), ["ckpt-0000000003.pt", "ckpt-0000000004.pt",
                                     "ckpt-0000000050.pt"])
        ddprun_ckpt.save({}, 5, dir=self.d, keep=1)
        self.assertEqual(self.ls(), ["ckpt-0000000005.pt", "ckpt-0000000050.pt"])

    def test_keep_none_keeps_all(self):
        for step in range(1, 6):
            ddprun_ckpt.save({}, step, dir=self.d, keep=None)
        self.assertEqual(len(self.ls()), 5)

    def test_keep_follows_the_given_names_series(self):
        # The series is the name with any digits: epochs change, it holds.
        for epoch, step in ((1, 10), (1, 20), (2, 30), (3, 40)):
            ddprun_ckpt.save({}, step, dir=self.d, name=f"epoch{epoch}-step{step}.pt",
                             keep=2)
        self.put("ckpt-0000000001.pt", {})
        ddprun_ckpt.save({}, 50, dir=self.d, name="epoch3-step50.pt", keep=2)
        self.assertEqual(self.ls(), ["ckpt-0000000001.pt", "epoch3-step40.pt",
                                     "epoch3-step50.pt"])

    def test_stale_temporaries_of_dead_writers(self):
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        live = subprocess.Popen([sys.executable, "-c",
                                 "import sys; sys.stdin.read()"],
                                stdin=subprocess.PIPE)
        self.addCleanup(live.wait)
        self.addCleanup(live.stdin.close)
        host = ddprun_ckpt._host()
        names = {
            "dead": f".ckpt-0000000003.pt.{host}.{dead.pid}-0123abcd.tmp",
            "live": f".ckpt-0000000003.pt.{host}.{live.pid}-0123abcd.tmp",
            "mine": f".ckpt-0000000003.pt.{host}.{os.getpid()}-0123abcd.tmp",
            "other host": f".ckpt-0000000003.pt.{host}x.{dead.pid}-0123abcd.tmp",
            "not ours": f".ckpt-0000000003.pt.{host}.{dead.pid}.tmp",
        }
        for n in names.values():
            self.put(n)
        ddprun_ckpt.save({}, 4, dir=self.d)
        left = set(self.ls())
        self.assertNotIn(names["dead"], left)
        for k in ("live", "mine", "other host", "not ours"):
            self.assertIn(names[k], left, k)


class TestLoadLatest(Base):
    def test_none_when_empty_or_missing(self):
        state, err = self.load_quiet()
        self.assertIsNone(state)
        self.assertEqual(err, [])
        self.assertIsNone(ddprun_ckpt.load_latest(dir=os.path.join(self.d, "no")))
        self.assertEqual(self.torch.loads, [])

    def test_newest_by_the_step_in_the_name(self):
        self.put("step_9.pt", 9)
        self.put("step_10.pt", 10)    # after step_9.pt by number, not by text
        self.put("a-step_8.pt", 8)
        self.put("z.pt", "no step")
        self.put(".step_99.pt", 99)   # a temporary
        self.put("step_98.pt.tmp", 98)
        os.utime(os.path.join(self.d, "step_9.pt"))  # newest by time: no matter
        state, err = self.load_quiet()
        self.assertEqual(state, 10)
        self.assertEqual(err, [])

    def test_skips_garbage_with_one_warning_each(self):
        self.put("ckpt-0000000005.pt", {"step": 5})
        self.put("ckpt-0000000007.pt")                    # damaged
        os.mkdir(os.path.join(self.d, "epoch9-step8"))     # a directory
        os.symlink("nowhere", os.path.join(self.d, "ckpt-0000000009.pt"))
        os.symlink("ckpt-0000000005.pt", os.path.join(self.d, "link-6"))
        os.mkfifo(os.path.join(self.d, "fifo-10"))         # never opened
        state, err = self.load_quiet()
        self.assertEqual(state, {"step": 5})  # through the link of step 6
        self.assertEqual(len(err), 4, err)
        d = re.escape(self.d)
        self.assertRegex(err[0], f"^ddprun_ckpt: skipping {d}/fifo-10: not a regular file$")
        self.assertRegex(err[1], f"^ddprun_ckpt: skipping {d}/ckpt-0000000009.pt: "
                         "not a regular file$")
        self.assertRegex(err[2], f"^ddprun_ckpt: skipping {d}/epoch9-step8: "
                         "not a regular file$")
        self.assertRegex(err[3], f"^ddprun_ckpt: skipping {d}/ckpt-0000000007.pt: "
                         r"it does not load \(RuntimeError: PytorchStreamReader "
                         r"failed reading zip archive:\)$")
        self.assertEqual([os.path.basename(p) for p, _ in self.torch.loads],
                         ["ckpt-0000000007.pt", "link-6"])

    def test_none_when_nothing_loads(self):
        self.put("ckpt-0000000005.pt")
        self.put("ckpt-0000000006.pt")
        state, err = self.load_quiet()
        self.assertIsNone(state)
        self.assertEqual(len(err), 2, err)

    def test_ckpt_step_first(self):
        for s in (5, 7, 9):
            self.put(f"ckpt-{s:010d}.pt", s)
        os.environ["DDPRUN_CKPT_STEP"] = "7"
        self.assertEqual(self.load_quiet(), (7, []))
        for v in ("6", "", "x", "-7", "\u0667"):  # no such file, or not a step
            os.environ["DDPRUN_CKPT_STEP"] = v
            self.assertEqual(self.load_quiet(), (9, []), v)
        # Its file damaged: the others, newest first.
        self.put("ckpt-0000000007.pt")
        os.environ["DDPRUN_CKPT_STEP"] = "7"
        state, err = self.load_quiet()
        self.assertEqual(state, 9)
        self.assertEqual(len(err), 1)
        self.assertIn("ckpt-0000000007.pt: it does not load", err[0])

    def test_torch_load_arguments(self):
        self.put("ckpt-0000000001.pt", 1)
        self.load_quiet()
        self.load_quiet(map_location="cpu", weights_only=False)
        self.assertEqual([kw for _, kw in self.torch.loads],
                         [{"map_location": None, "weights_only": True},
                          {"map_location": "cpu", "weights_only": False}])
        # A torch.load without weights_only (before 1.13): not passed.
        old = FakeTorch(load_has_weights_only=False)
        with mock.patch.dict(sys.modules, {"torch": old.module}):
            state, _ = self.load_quiet(map_location="cpu")
        self.assertEqual(state, 1)
        self.assertEqual(old.loads[0][1], {"map_location": "cpu"})

    def test_weights_only_refusals(self):
        # torch 2.11's words: the cause, inside paragraphs of advice. A
        # refused global gets advice of ours; a damaged file does not.
        class UnpicklingError(Exception):
            pass

        refusals = {
            "ckpt-0000000002.pt": (
                "Weights only load failed. This file can still be loaded, ...\n"
                "\t(1) In PyTorch 2.6, we changed ...\n\tWeightsUnpickler error: "
                "Unsupported global: GLOBAL numpy._core.multiarray._reconstruct was "
                "not an allowed global by default. Please use `torch.serialization."
                "add_safe_globals([...])` ...\n\nCheck the documentation ..."),
            "ckpt-0000000001.pt": (
                "Weights only load failed. In PyTorch 2.6, ... Please file an issue "
                "with the following so that ...: WeightsUnpickler error: \n\n"
                "Unsupported operand 110\n\nCheck the documentation ..."),
        }
        for name in refusals:
            self.put(name, 1)

        def refuse(f, map_location=None, *, weights_only=None):
            raise UnpicklingError(refusals[os.path.basename(f)])

        self.torch.module.load = refuse
        state, err = self.load_quiet()
        self.assertIsNone(state)
        d = self.d
        self.assertEqual(err, [
            f"ddprun_ckpt: skipping {d}/ckpt-0000000002.pt: it does not load "
            "(UnpicklingError: Unsupported global: GLOBAL numpy._core.multiarray."
            "_reconstruct was not an allowed global by default; pass weights_only="
            "False for files you trust, or allow it with torch.serialization."
            "add_safe_globals)",
            f"ddprun_ckpt: skipping {d}/ckpt-0000000001.pt: it does not load "
            "(UnpicklingError: Unsupported operand 110)"])

    def test_reasons_are_one_line(self):
        self.put("ckpt-0000000001.pt", 1)
        long = "x" * 500
        for exc, want in ((EOFError(), "(EOFError)"),
                          (RuntimeError("\n  first. second\nthird"),
                           "(RuntimeError: first)"),
                          (OSError(long), f"(OSError: {long[:200]})")):
            def fail(f, map_location=None, *, weights_only=None, _e=exc):
                raise _e
            self.torch.module.load = fail
            _, err = self.load_quiet()
            self.assertEqual(len(err), 1)
            self.assertTrue(err[0].endswith(f"it does not load {want}"), err[0])

    def test_round_trip_with_save(self):
        for step in (3, 6, 9, 12):
            ddprun_ckpt.save({"step": step}, step, dir=self.d)
        self.assertEqual(self.load_quiet(), ({"step": 12}, []))


if __name__ == "__main__":
    unittest.main(verbosity=2)
