#!/usr/bin/env python3
"""Checks on what train writes: weight dumps and Chrome traces.

  train_check.py crc FILE
      the CRC-32 (zlib's) of FILE as 0x%08x: the checksum train prints
      as weights_crc32 over the same bytes
  train_check.py reldiff A B BOUND
      A and B are --dump-weights files (raw little-endian fp32); fails
      unless both hold the same number of finite floats and
      ||A - B||_2 / ||A||_2 < BOUND
  train_check.py trace FILE STEPS overlap|no-overlap
      FILE is one rank's --trace of a run of STEPS steps. Fails unless it
      parses, has the forward, backward, loss, optimizer and all-reduce
      spans of every step on their threads, with at least two buckets per
      step; then, for overlap: in every step after the first, some bucket's
      all-reduce starts before the step's last backward span ends; for
      no-overlap: in every step, no all-reduce starts before it ends.

Exit status 0 when the check holds, 1 when it fails (with the reason on
stderr), 2 on bad usage.
"""
import array
import json
import math
import sys
import zlib

COMPUTE_TID = 0
COMM_TID = 1


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def load_floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        data = f.read()
    if len(data) == 0 or len(data) % 4 != 0:
        fail("%s: %d bytes is not a non-empty array of fp32" % (path, len(data)))
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def cmd_crc(path):
    with open(path, "rb") as f:
        print("0x%08x" % (zlib.crc32(f.read()) & 0xFFFFFFFF))


def cmd_reldiff(pa, pb, bound):
    a, b = load_floats(pa), load_floats(pb)
    if len(a) != len(b):
        fail("%s has %d floats, %s has %d" % (pa, len(a), pb, len(b)))
    if not all(math.isfinite(x) for x in a) or not all(math.isfinite(x) for x in b):
        fail("non-finite weights in %s or %s" % (pa, pb))
    diff = math.sqrt(sum((x - y) * (x - y) for x, y in zip(a, b)))
    norm = math.sqrt(sum(x * x for x in a))
    if norm == 0:
        fail("%s is all zeros" % pa)
    rel = diff / norm
    print("relative L2 difference %.3e over %d weights (bound %g)" %
          (rel, len(a), bound))
    if not rel < bound:
        fail("%s and %s differ by %.3e relative (bound %g)" % (pa, pb, rel, bound))


def spans(events, tid, pred):
    return [e for e in events
            if e.get("ph") == "X" and e.get("tid") == tid and pred(e["name"])]


def cmd_trace(path, steps, mode):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s does not parse as JSON: %s" % (path, e))
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        fail("%s has no traceEvents list" % path)
    for e in events:
        if e.get("ph") == "X":
            for k in ("name", "ts", "dur", "pid", "tid"):
                if k not in e:
                    fail("%s: span without '%s': %r" % (path, k, e))
            if not isinstance(e["ts"], int) or not isinstance(e["dur"], int) \
                    or e["dur"] < 0:
                fail("%s: bad ts/dur in %r" % (path, e))

    opt = sorted(spans(events, COMPUTE_TID, lambda n: n == "optimizer"),
                 key=lambda e: e["ts"])
    fwd = spans(events, COMPUTE_TID, lambda n: n.endswith(".fwd"))
    bwd = spans(events, COMPUTE_TID, lambda n: n.endswith(".bwd"))
    loss = spans(events, COMPUTE_TID, lambda n: n == "loss")
    ar = spans(events, COMM_TID, lambda n: n.startswith("allreduce bucket "))
    # The evaluation after the last step adds forward and loss spans.
    if opt:
        end = opt[-1]["ts"] + opt[-1]["dur"]
        fwd = [e for e in fwd if e["ts"] < end]
        loss = [e for e in loss if e["ts"] < end]
    for what, got in (("optimizer", opt), ("*.fwd", fwd), ("*.bwd", bwd),
                      ("loss", loss), ("allreduce bucket", ar)):
        if not got:
            fail("%s: no %s spans" % (path, what))
    if len(opt) != steps:
        fail("%s: %d optimizer spans for %d steps" % (path, len(opt), steps))
    if len(loss) != steps:
        fail("%s: %d loss spans for %d steps" % (path, len(loss), steps))
    layers = len(set(e["name"] for e in bwd))
    if len(bwd) != steps * layers or len(fwd) != steps * layers:
        fail("%s: %d fwd and %d bwd spans for %d layers x %d steps" %
             (path, len(fwd), len(bwd), layers, steps))

    # A step runs from the end of the previous optimizer span to the end of
    # its own; every bucket of a step ends before its optimizer starts.
    overlapped = []
    assigned = 0
    prev_end = -1
    for k, o in enumerate(opt):
        def inside(e):
            return prev_end <= e["ts"] and e["ts"] + e["dur"] <= o["ts"]
        b = [e for e in bwd if inside(e)]
        a = [e for e in ar if inside(e)]
        if len(b) != layers:
            fail("%s: step %d has %d backward spans, expected %d" %
                 (path, k + 1, len(b), layers))
        if len(a) < 2:
            fail("%s: step %d has %d all-reduce spans, expected several "
                 "buckets" % (path, k + 1, len(a)))
        assigned += len(a)
        bwd_end = max(e["ts"] + e["dur"] for e in b)
        first_ar = min(e["ts"] for e in a)
        early = sum(1 for e in a if e["ts"] < bwd_end)
        overlapped.append(early)
        if mode == "no-overlap" and first_ar < bwd_end:
            fail("%s: --no-overlap, yet in step %d an all-reduce starts at "
                 "%d us, %d us before the backward pass ends (%d)" %
                 (path, k + 1, first_ar, bwd_end - first_ar, bwd_end))
        if mode == "overlap" and k > 0 and early == 0:
            fail("%s: in step %d no all-reduce starts before the backward "
                 "pass ends (%d us; first all-reduce at %d us, %d us later)" %
                 (path, k + 1, bwd_end, first_ar, first_ar - bwd_end))
        prev_end = o["ts"] + o["dur"]
    if assigned != len(ar):
        fail("%s: %d all-reduce spans fall in no step" %
             (path, len(ar) - assigned))
    print("%s: %d steps, %d layers, %d all-reduce spans; buckets started "
          "during the backward pass per step: %s" %
          (path, steps, layers, len(ar), overlapped))


def main(argv):
    if len(argv) == 3 and argv[1] == "crc":
        cmd_crc(argv[2])
    elif len(argv) == 5 and argv[1] == "reldiff":
        cmd_reldiff(argv[2], argv[3], float(argv[4]))
    elif len(argv) == 5 and argv[1] == "trace" and \
            argv[4] in ("overlap", "no-overlap"):
        cmd_trace(argv[2], int(argv[3]), argv[4])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
