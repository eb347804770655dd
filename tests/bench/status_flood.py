#!/usr/bin/env python3
"""What a flood of `STATUS --stacks` requests costs a training job.

Starts ddprun-rdzv (port file) and a one-node `ddprun ... train` job of 2
ranks against it, waits until train logs steps, measures the step time
train reports for --before seconds, then sends N STATUS requests with
DR_STATUS_STACKS pipelined on one connection (and, with --conns C, on C
connections at once) and measures the step times until every request is
answered (a JOB_STATUS or an ERROR) or --timeout passes. Prints one
key=value line: the steps' medians before and during the flood, how long
the answers took, how many were JOB_STATUS and ERROR, and how many stack
collections the server asked the agent for (its event log's "stacks"
lines are not written, so they are counted from the agent's log at debug
level: "collecting the stacks").

Usage: status_flood.py BUILD_DIR [--requests 100] [--conns 1]
                       [--before 3] [--timeout 60] [--proto 5]
"""
import argparse
import os
import re
import select
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

MAGIC = 0x4452
HELLO, WELCOME, ERROR, STATUS, JOB_STATUS = 1, 2, 5, 28, 29


def frame(version, mtype, req, fields):
    body = b""
    for f in fields:
        if isinstance(f, int):
            body += struct.pack(">BQ", 1, f)
        else:
            body += struct.pack(">BI", 2, len(f)) + f
    return struct.pack(">HBBII", MAGIC, version, mtype, req, len(body)) + body


def read_frames(sock, buf):
    """Whole frames out of buf (bytes), and the rest."""
    out = []
    while len(buf) >= 12:
        _, _, mtype, req, n = struct.unpack(">HBBII", buf[:12])
        if len(buf) < 12 + n:
            break
        out.append((mtype, req))
        buf = buf[12 + n:]
    return out, buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--before", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--proto", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="status_flood.")
    run_id = f"flood-{os.getpid()}"
    procs = []
    try:
        pf = os.path.join(tmp, "port")
        srv = subprocess.Popen(
            [os.path.join(a.build, "ddprun-rdzv"), "--nnodes", "1",
             "--rdzv-id", run_id, "--host", "127.0.0.1", "--port", "0",
             "--port-file", pf], stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "srv.err"), "wb"))
        procs.append(srv)
        t_end = time.monotonic() + 15
        while not os.path.exists(pf) and time.monotonic() < t_end:
            time.sleep(0.01)
        port = int(open(pf).read())
        job = subprocess.Popen(
            [os.path.join(a.build, "ddprun"), "--nnodes", "1",
             "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", run_id, "--rdzv-conf", "is_host=0",
             "--log-level", "debug",
             os.path.join(a.build, "train"), "--layers", "4", "--width",
             "256", "--input-dim", "64", "--classes", "16", "--batch", "32",
             "--steps", "1000000", "--log-every", "10"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "job.err"),
                                                "wb"),
            env=dict(os.environ, TMPDIR=tmp))
        procs.append(job)
        steps = []  # (monotonic time, step ms)
        pat = re.compile(rb"step [0-9]+/[0-9]+ .* step ([0-9.]+) ms")
        jbuf = b""

        def pump(until):
            nonlocal jbuf
            while time.monotonic() < until:
                r, _, _ = select.select([job.stdout], [], [],
                                        max(0.0, until - time.monotonic()))
                if not r:
                    return
                chunk = os.read(job.stdout.fileno(), 65536)
                if not chunk:
                    return
                jbuf += chunk
                *lines, jbuf = jbuf.split(b"\n")
                for ln in lines:
                    m = pat.search(ln)
                    if m:
                        steps.append((time.monotonic(), float(m.group(1))))

        t_first = time.monotonic() + 30
        while not steps and time.monotonic() < t_first:
            pump(time.monotonic() + 0.2)
        if not steps:
            sys.exit("no step lines from train")
        pump(time.monotonic() + a.before)
        before = [ms for _, ms in steps]
        socks = []
        for i in range(a.conns):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(frame(a.proto, HELLO, 1, [run_id.encode(), b"flood"]))
            socks.append([s, b""])
        t0 = time.monotonic()
        for s, _ in socks:
            s.sendall(b"".join(frame(a.proto, STATUS, 2 + k, [1, 20000])
                               for k in range(a.requests)))
        want = a.conns * a.requests
        got = {JOB_STATUS: 0, ERROR: 0}
        n_steps0 = len(steps)
        deadline = t0 + a.timeout
        while sum(got.values()) < want and time.monotonic() < deadline:
            r, _, _ = select.select([x[0] for x in socks] + [job.stdout], [],
                                    [], 0.1)
            for x in socks:
                if x[0] in r:
                    chunk = x[0].recv(1 << 20)
                    if not chunk:
                        sys.exit("the server closed a flooding connection")
                    fr, x[1] = read_frames(x[0], x[1] + chunk)
                    for mtype, _ in fr:
                        if mtype in got:
                            got[mtype] += 1
            if job.stdout in r:
                pump(time.monotonic() + 0.001)
        t_answered = time.monotonic() - t0
        pump(time.monotonic() + 1.0)
        during = [ms for t, ms in steps[n_steps0:] if t <= t0 + t_answered]
        job_err = open(os.path.join(tmp, "job.err"), "rb").read()
        collections = job_err.count(b"collecting the stacks")
        print(f"requests={want} conns={a.conns} answered_s={t_answered:.2f} "
              f"job_status={got[JOB_STATUS]} error={got[ERROR]} "
              f"collections={collections} "
              f"step_ms_before={statistics.median(before):.2f} "
              f"step_ms_during="
              f"{statistics.median(during) if during else float('nan'):.2f} "
              f"step_lines_during={len(during)}")
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        subprocess.run(["rm", "-rf", tmp], check=False)


if __name__ == "__main__":
    main()
