#!/usr/bin/env python3
"""The figures of one job of ckpt_netns.sh, from its stamped files, as one
line of key=value pairs on stdout.

Every input line begins with a CLOCK_REALTIME stamp in seconds (ckpt_probe
watch and stamp; the script's own $EPOCHREALTIME). The steps are rank 0's
step lines ("[rank0]:step K/N ... step X ms"): each ends at its stamp and
lasts its own X ms; a step is busy when its middle falls inside a copy.

  copy WATCH WRITER_IDX WRITER_LOG OTHER_LOG
      the copies of the checkpoints first renamed into watched directory
      WRITER_IDX: from that rename to the rename into the other directory;
      their bytes from OTHER_LOG's "received checkpoint" lines, the
      agent's own times from WRITER_LOG's "copied to node" lines.
  plain SENDS WRITER_LOG
      the plain copies in SENDS (ckpt_probe send lines), start to end.
  restore T_KILL SURVIVOR_LOG REPLACEMENT_LOG
      ms from the kill to: the survivor's workers of the new generation
      (survivor_ms), the replacement's round (round_ms), its restore line
      (restored_ms; fetch_ms is the fetch's own time from that line), its
      workers (workers_ms), every rank's start line (ranks_ms: each rank
      through the process group's set-up), rank 0's resume line
      (resumed_ms) and rank 0's first step line (first_step_ms).
"""
import re
import statistics
import sys

STEP = re.compile(r"^\[rank0\]:step (\d+)/\d+ .* step ([0-9.]+) ms")
NAN = float("nan")


def med(v):
    return statistics.median(v) if v else NAN


def lines(path):
    with open(path, errors="replace") as f:
        for line in f:
            t, _, rest = line.rstrip("\n").partition(" ")
            try:
                yield float(t), rest
            except ValueError:
                pass  # ckpt_probe watch's "ready"


def steps(path):
    out, final = [], None
    for t, rest in lines(path):
        m = STEP.match(rest)
        if m:
            out.append((t, float(m.group(2))))
        m = re.search(r"^\[rank0\]:final .*median_step_ms=([0-9.]+)", rest)
        if m:
            final = float(m.group(1))
    return out, final


def spans_out(spans, log):
    """spans: [(start, end, bytes)] of the copies that ended."""
    ms = [(e - s) * 1000 for s, e, _ in spans]
    st, final = steps(log)

    def inside(t, d):
        mid = t - d / 2000
        return any(s <= mid <= e for s, e, _ in spans)

    busy = [d for t, d in st if inside(t, d)]
    idle = [d for t, d in st if not inside(t, d)]
    nbytes = spans[0][2] if spans else 0
    m = med(ms)
    return ("copies=%d median_ms=%.0f min_ms=%.0f max_ms=%.0f bytes=%d "
            "mb_s=%.1f step_ms=%s busy_frac=%.2f busy_step_ms=%.1f "
            "idle_step_ms=%.1f" %
            (len(ms), m, min(ms, default=0), max(ms, default=0), nbytes,
             nbytes / m / 1000 if m > 0 else 0,
             "%.1f" % final if final else "-",
             len(busy) / len(st) if st else 0, med(busy), med(idle)))


def copy(watch, widx, wlog, olog):
    seen = {}
    for t, rest in lines(watch):
        idx, _, name = rest.partition(" ")
        seen.setdefault(name, []).append((t, idx))
    nbytes = {}
    for _, rest in lines(olog):
        m = re.search(r"ddprun: received checkpoint (\S+) \(step \d+, from "
                      r"node \d+, (\d+) bytes\)", rest)
        if m:
            nbytes[m.group(1)] = int(m.group(2))
    agent = []
    for _, rest in lines(wlog):
        m = re.search(r"ddprun: checkpoint \S+ copied to node \d+ .* in "
                      r"([0-9.]+) s$", rest)
        if m:
            agent.append(float(m.group(1)) * 1000)
    spans, written = [], 0
    for name, ev in seen.items():
        if ev[0][1] != widx:
            continue
        written += 1
        if len(ev) > 1:
            spans.append((ev[0][0], ev[1][0], nbytes.get(name, 0)))
    return "written=%d %s agent_ms=%.0f" % (
        written, spans_out(sorted(spans), wlog), med(agent))


def plain(sends, wlog):
    spans = []
    with open(sends) as f:
        for line in f:
            kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            if "start" in kv:
                spans.append((float(kv["start"]), float(kv["end"]),
                              int(kv["bytes"])))
    return "written=%d %s" % (len(spans), spans_out(spans, wlog))


def restore(t_kill, surv, repl):
    t0 = float(t_kill)

    def after(path, pat):
        return [(t - t0) * 1000 for t, rest in lines(path)
                if t >= t0 and re.search(pat, rest)]

    def first(paths, pat):
        v = [x for p in paths for x in after(p, pat)]
        return min(v) if v else NAN

    both = (surv, repl)
    spawned = r"^ddprun: \[rank\d+\] local rank"
    m = None
    for t, rest in lines(repl):
        m = m or re.search(r"^ddprun: restored checkpoint \S+ \(step (\d+)\)"
                           r" from node \d+ .* in ([0-9.]+) s$", rest)
    # Each rank's first line of its own, once its process group is up.
    ranks = [first(both, r"^\[rank%d\]:train: rank %d: local rank" % (k, k))
             for k in range(4)]
    return ("step=%s survivor_ms=%.0f round_ms=%.0f restored_ms=%.0f "
            "fetch_ms=%.0f workers_ms=%.0f ranks_ms=%.0f resumed_ms=%.0f "
            "first_step_ms=%.0f" %
            (m.group(1) if m else "-", first([surv], spawned),
             first([repl], r"^ddprun: generation \d+:"),
             first([repl], r"^ddprun: restored checkpoint"),
             float(m.group(2)) * 1000 if m else NAN,
             first([repl], spawned),
             max(ranks) if all(x == x for x in ranks) else NAN,
             first(both, r"^\[rank0\]:train: rank 0: resuming at step"),
             first(both, STEP.pattern)))


def main(argv):
    modes = {"copy": (copy, 4), "plain": (plain, 2), "restore": (restore, 3)}
    if len(argv) < 2 or argv[1] not in modes or \
            len(argv) != 2 + modes[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = modes[argv[1]]
    print(fn(*argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
