"""python/ddprun_boot/ddprun_fr.py without PyTorch: who claims the rank's
DDPRUN_FR_DUMP.ready (the first process; not a second while the first
lives; a dead owner's and its own claim taken over; made in place where
the file system has no hard links), what a request gets without torch and
with a stand-in torch._C._distributed_c10d (NCCL's recorder when it holds
entries, else the other; a failing dump says why), and start() outside
ddprun.

    python3 tests/unit/test_ddprun_fr.py      (ctest: unit.ddprun_fr)
"""
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import unittest
from unittest import mock

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "..", "..", "python", "ddprun_boot")
sys.path.insert(0, BOOT_DIR)
import ddprun_fr  # noqa: E402

C10D = "torch._C._distributed_c10d"


def dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


class Claim(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ready = os.path.join(self.dir.name, "fr_trace.json.ready")

    def tearDown(self):
        self.dir.cleanup()

    def owner(self):
        with open(self.ready) as f:
            return int(f.read())

    def leftovers(self):
        return sorted(n for n in os.listdir(self.dir.name)
                      if n != "fr_trace.json.ready")

    def test_first_claims_with_its_pid(self):
        self.assertTrue(ddprun_fr._claim(self.ready))
        self.assertEqual(self.owner(), os.getpid())
        self.assertEqual(self.leftovers(), [])

    def test_live_owner_kept(self):
        with open(self.ready, "w") as f:
            f.write("%d\n" % os.getppid())
        self.assertFalse(ddprun_fr._claim(self.ready))
        self.assertEqual(self.owner(), os.getppid())
        self.assertEqual(self.leftovers(), [])

    def test_dead_owner_taken_over(self):
        with open(self.ready, "w") as f:
            f.write("%d\n" % dead_pid())
        self.assertTrue(ddprun_fr._claim(self.ready))
        self.assertEqual(self.owner(), os.getpid())

    def test_own_claim_taken_again(self):
        # After an exec: the same pid, no thread.
        with open(self.ready, "w") as f:
            f.write("%d\n" % os.getpid())
        self.assertTrue(ddprun_fr._claim(self.ready))
        self.assertEqual(self.owner(), os.getpid())

    def test_garbage_taken_over(self):
        with open(self.ready, "w") as f:
            f.write("not a pid")
        self.assertTrue(ddprun_fr._claim(self.ready))
        self.assertEqual(self.owner(), os.getpid())

    def test_no_hard_links(self):
        err = OSError(1, "Operation not permitted")
        with mock.patch.object(ddprun_fr.os, "link", side_effect=err):
            self.assertTrue(ddprun_fr._claim(self.ready))
            self.assertEqual(self.owner(), os.getpid())
            # A second, while the first lives, does not; a dead one's is
            # taken over.
            with open(self.ready, "w") as f:
                f.write("%d\n" % os.getppid())
            self.assertFalse(ddprun_fr._claim(self.ready))
            with open(self.ready, "w") as f:
                f.write("%d\n" % dead_pid())
            self.assertTrue(ddprun_fr._claim(self.ready))
            self.assertEqual(self.owner(), os.getpid())
        self.assertEqual(self.leftovers(), [])

    def test_unwritable_directory(self):
        ready = os.path.join(self.dir.name, "none", "fr_trace.json.ready")
        self.assertFalse(ddprun_fr._claim(ready))


class Dump(unittest.TestCase):
    def tearDown(self):
        sys.modules.pop(C10D, None)

    def fake(self, **fns):
        m = types.ModuleType(C10D)
        for name, fn in fns.items():
            setattr(m, name, fn)
        sys.modules[C10D] = m

    def test_without_torch(self):
        sys.modules.pop(C10D, None)
        self.assertEqual(json.loads(ddprun_fr._dump()),
                         {"error": "torch.distributed is not loaded"})

    def test_nccl_first_when_it_has_entries(self):
        self.fake(_dump_nccl_trace_json=lambda c, a: b'{"entries": [1]}',
                  _dump_fr_trace_json=lambda c, a: b'{"entries": [2]}')
        self.assertEqual(json.loads(ddprun_fr._dump())["entries"], [1])

    def test_gloo_when_nccl_is_empty(self):
        self.fake(_dump_nccl_trace_json=lambda c, a: b'{"version": "2.10"}',
                  _dump_fr_trace_json=lambda c, a: '{"entries": [2]}')
        self.assertEqual(json.loads(ddprun_fr._dump())["entries"], [2])

    def test_neither_has_entries(self):
        self.fake(_dump_fr_trace_json=lambda c, a: b'{"version": "2.10"}')
        self.assertEqual(json.loads(ddprun_fr._dump()), {"version": "2.10"})

    def test_failing_dump_says_why(self):
        def boom(c, a):
            raise RuntimeError("no buffer")
        self.fake(_dump_fr_trace_json=boom)
        self.assertEqual(json.loads(ddprun_fr._dump()),
                         {"error": "_dump_fr_trace_json: no buffer"})

    def test_torch_without_a_recorder(self):
        self.fake()
        self.assertIn("no flight recorder",
                      json.loads(ddprun_fr._dump())["error"])


class Start(unittest.TestCase):
    def test_outside_ddprun(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            mod = importlib.reload(ddprun_fr)
            self.assertFalse(mod.start())
            self.assertFalse(mod.serving())

    def test_answers_a_request(self):
        with tempfile.TemporaryDirectory() as d:
            dump = os.path.join(d, "fr_trace.json")
            with mock.patch.dict(os.environ, {"DDPRUN_FR_DUMP": dump}):
                mod = importlib.reload(ddprun_fr)
                self.assertTrue(mod.start())
                self.assertTrue(mod.start())  # once per process
                self.assertTrue(mod.serving())
                open(dump + ".request", "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(dump) and time.monotonic() < deadline:
                    time.sleep(0.05)
                with open(dump) as f:
                    self.assertIn("error", json.load(f))
                self.assertFalse(os.path.exists(dump + ".request"))


if __name__ == "__main__":
    unittest.main()
