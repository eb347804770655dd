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
      step; then, for overlap: in every step after the first, some bucket
      is ready (handed to the communication thread) before the step's last
      backward span ends, and in at least 3 of 4 of those steps some
      bucket's all-reduce starts before it ends; for
      no-overlap: in every step, no all-reduce starts before it ends.
  train_check.py buckets LAYERS WIDTH INPUT_DIM CLASSES CAP_MB FIRST_MB
      prints the byte sizes of the gradient buckets of train's synthetic
      MLP with those settings, comma-separated in bucket order, planned
      here as reducer.h says (reverse registration order; a bucket closes
      before a parameter that would overflow it): what every step of such a
      run all-reduces (its backward pass makes gradients ready in exactly
      that order, so the rebuild after step one keeps the plan)
  train_check.py ddp FILE STEPS RANK WORLD BACKEND BUCKETS OFFSET
      what `ddprun diagnose` reads in one rank's --trace of a run of STEPS
      steps: otherData.ddprun is {source "train", rank RANK, world WORLD,
      backend BACKEND} plus clock_offset_us = OFFSET, or without it when
      OFFSET is "-", with or without it (an integer) when OFFSET is "any"
      (under ddprun, whose agent may set one); the times are wall-clock microseconds (within an hour
      of the file's modification time); one "step N" span per step on the
      compute thread, N = 0 .. STEPS-1 in time order, without overlap, each
      holding one optimizer span and, per micro-batch, every layer's
      backward span and one "data" span, and every "data" span inside a
      step; each all-reduce
      span carries args bucket (its name's), bytes = BUCKETS[bucket] (the
      name's MiB agreeing) and ready_us, ready before the all-reduce starts
      (ready_us <= ts + 1 us) and inside its step; every step all-reduces
      each bucket once.

Exit status 0 when the check holds, 1 when it fails (with the reason on
stderr), 2 on bad usage.
"""
import array
import json
import math
import os
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
    late_steps = []
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
        # The reducer hands a bucket to the communication thread as its
        # last gradient is ready: in every step, the first is handed over
        # before the backward pass ends. When the thread starts it is up to
        # the scheduler (late now and then on a loaded 2-core host): most
        # steps, not every one, must start one before it ends.
        ready = [e["args"]["ready_us"] for e in a
                 if isinstance(e.get("args", {}).get("ready_us"), int)]
        if mode == "overlap" and k > 0 and ready and min(ready) >= bwd_end:
            fail("%s: in step %d no bucket is ready before the backward pass "
                 "ends (%d us; first ready at %d us)" %
                 (path, k + 1, bwd_end, min(ready)))
        if mode == "overlap" and k > 0 and early == 0:
            late_steps.append("step %d: first all-reduce %d us after it" %
                              (k + 1, first_ar - bwd_end))
        prev_end = o["ts"] + o["dur"]
    if mode == "overlap" and len(late_steps) * 4 > max(len(opt) - 1, 1):
        fail("%s: in %d of %d steps no all-reduce starts before the backward "
             "pass ends (%s)" % (path, len(late_steps), len(opt) - 1,
                                 "; ".join(late_steps)))
    if assigned != len(ar):
        fail("%s: %d all-reduce spans fall in no step" %
             (path, len(ar) - assigned))
    print("%s: %d steps, %d layers, %d all-reduce spans; buckets started "
          "during the backward pass per step: %s" %
          (path, steps, layers, len(ar), overlapped))


def plan_buckets(layers, width, input_dim, classes, cap_mb, first_mb):
    # Registration order: fc0.weight, fc0.bias, ..., head.weight, head.bias.
    sizes = []
    for k in range(layers + 1):
        head = k == layers
        n_in = input_dim if k == 0 else width
        n_out = classes if head else width
        sizes += [n_out * n_in, n_out]
    cap, first = int(cap_mb * 1048576.0), int(first_mb * 1048576.0)
    buckets, used, count = [0], 0, 0
    for n in reversed(sizes):
        b = 4 * n
        limit = first if len(buckets) == 1 else cap
        if count > 0 and used + b > limit:
            buckets.append(0)
            used, count = 0, 0
        buckets[-1] += b
        used += b
        count += 1
    return buckets


def cmd_buckets(args):
    layers, width, input_dim, classes = (int(a) for a in args[:4])
    cap_mb, first_mb = float(args[4]), float(args[5])
    print(",".join(str(b) for b in
                   plan_buckets(layers, width, input_dim, classes, cap_mb,
                                first_mb)))


def end(e):
    return e["ts"] + e["dur"]


def cmd_ddp(path, steps, rank, world, backend, buckets, offset):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s does not parse as JSON: %s" % (path, e))
    meta = doc.get("otherData", {}).get("ddprun") \
        if isinstance(doc.get("otherData"), dict) else None
    want = {"source": "train", "rank": rank, "world": world,
            "backend": backend}
    if offset == "any" and isinstance(meta, dict) and \
            isinstance(meta.get("clock_offset_us"), int):
        want["clock_offset_us"] = meta["clock_offset_us"]
    elif offset not in ("-", "any"):
        want["clock_offset_us"] = int(offset)
    if meta != want:
        fail("%s: otherData.ddprun is %r, expected %r" % (path, meta, want))
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        fail("%s has no traceEvents list" % path)
    xs = [e for e in events if e.get("ph") == "X"]
    if not xs:
        fail("%s: no spans" % path)
    for e in xs:
        if not isinstance(e.get("ts"), int) or not isinstance(e.get("dur"), int):
            fail("%s: bad ts/dur in %r" % (path, e))
    first = min(e["ts"] for e in xs)
    if abs(first / 1e6 - os.path.getmtime(path)) > 3600:
        fail("%s: the first span at %d us is not wall-clock time (the file "
             "was written at %.0f s since the epoch)" %
             (path, first, os.path.getmtime(path)))

    def on(tid, pred):
        return sorted((e for e in xs if e.get("tid") == tid and
                       pred(e["name"])), key=lambda e: e["ts"])
    step_spans = on(COMPUTE_TID, lambda n: n.startswith("step "))
    names = [e["name"] for e in step_spans]
    if names != ["step %d" % k for k in range(steps)]:
        fail("%s: step spans %s, expected step 0 .. step %d in order" %
             (path, names, steps - 1))
    for a, b in zip(step_spans, step_spans[1:]):
        if end(a) > b["ts"]:
            fail("%s: %s overlaps %s" % (path, a["name"], b["name"]))
    opt = on(COMPUTE_TID, lambda n: n == "optimizer")
    bwd = on(COMPUTE_TID, lambda n: n.endswith(".bwd"))
    data = on(COMPUTE_TID, lambda n: n == "data")
    ar = on(COMM_TID, lambda n: n.startswith("allreduce bucket "))
    layers = len(set(e["name"] for e in bwd))

    def inside(e, s):
        return s["ts"] <= e["ts"] and end(e) <= end(s)
    for s in step_spans:
        k = sum(1 for e in opt if inside(e, s))
        if k != 1:
            fail("%s: %s holds %d optimizer spans" % (path, s["name"], k))
        # One backward pass and one batch per micro-batch.
        k = sum(1 for e in bwd if inside(e, s))
        if k == 0 or k % layers != 0:
            fail("%s: %s holds %d backward spans of %d layers" %
                 (path, s["name"], k, layers))
        n = sum(1 for e in data if inside(e, s))
        if n != k // layers:
            fail("%s: %s holds %d data spans for %d micro-batches" %
                 (path, s["name"], n, k // layers))
    for e in data:
        if not any(inside(e, s) for s in step_spans):
            fail("%s: a data span at %d us (%d us) lies in no step" %
                 (path, e["ts"], e["dur"]))
    seen = [[] for _ in step_spans]
    for e in ar:
        args = e.get("args")
        if not isinstance(args, dict) or \
                not all(isinstance(args.get(k), int)
                        for k in ("bucket", "bytes", "ready_us")):
            fail("%s: all-reduce without int args bucket, bytes, ready_us: "
                 "%r" % (path, e))
        b = args["bucket"]
        if e["name"] != "allreduce bucket %d (%.2f MiB)" % \
                (b, args["bytes"] / 1048576.0):
            fail("%s: %r does not match its args %r" % (path, e["name"], args))
        if b >= len(buckets) or args["bytes"] != buckets[b]:
            fail("%s: bucket %d has %d bytes; the reducer's buckets: %s" %
                 (path, b, args["bytes"], buckets))
        if args["ready_us"] > e["ts"] + 1:
            fail("%s: bucket %d ready at %d us, %d us after its all-reduce "
                 "started (%d)" % (path, b, args["ready_us"],
                                   args["ready_us"] - e["ts"], e["ts"]))
        k = [i for i, s in enumerate(step_spans)
             if s["ts"] <= args["ready_us"] <= end(s)]
        if not k:
            fail("%s: bucket %d ready at %d us, in no step" %
                 (path, b, args["ready_us"]))
        seen[k[0]].append(b)
    for s, got in zip(step_spans, seen):
        if sorted(got) != list(range(len(buckets))):
            fail("%s: %s all-reduces buckets %s, expected each of %d once" %
                 (path, s["name"], sorted(got), len(buckets)))
    print("%s: %s; %d steps, %d data spans, %d all-reduces of %d buckets "
          "(%s bytes), ready before their start" %
          (path, meta, steps, len(data), len(ar), len(buckets),
           ",".join(str(b) for b in buckets)))


def main(argv):
    if len(argv) == 3 and argv[1] == "crc":
        cmd_crc(argv[2])
    elif len(argv) == 5 and argv[1] == "reldiff":
        cmd_reldiff(argv[2], argv[3], float(argv[4]))
    elif len(argv) == 5 and argv[1] == "trace" and \
            argv[4] in ("overlap", "no-overlap"):
        cmd_trace(argv[2], int(argv[3]), argv[4])
    elif len(argv) == 8 and argv[1] == "buckets":
        cmd_buckets(argv[2:])
    elif len(argv) == 9 and argv[1] == "ddp":
        cmd_ddp(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6],
                [int(b) for b in argv[7].split(",")], argv[8])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
