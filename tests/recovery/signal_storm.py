#!/usr/bin/env python3
"""Signals at the worst moment: ddprun and ddprun-rdzv end with their code,
never by a signal, whatever phase a storm of signals finds them in.

A storm is one signal sent to the process as fast as a loop can, from a
phase's start until the process has exited (start-up, running, stopping).
Each case asserts how the process ended (exited with a code, not killed
by a signal: Popen.returncode is negative for a signal) and that no
process of its job is left.

  startup   ddprun started with SIGINT blocked by its parent (a signal sent
            before its handlers exist stays pending), a SIGINT storm from
            the start: the job stops with exit 130.
  int       SIGINT storm once both workers run, through the stop: 130.
  hup       SIGHUP storm likewise: 129.
  usr1      train under --signals-to-handle SIGUSR1, a SIGUSR1 storm once
            it trains (a Slurm script resends it): train checkpoints and
            exits 75 (preempted), and so does ddprun, during whose stop the
            storm goes on.
  rdzv      ddprun-rdzv started with SIGTERM blocked, a SIGTERM storm from
            the start, and a storm once it listens: exit 143 each time.

Usage: signal_storm.py DDPRUN DDPRUN-RDZV TRAIN [CASE...]
"""
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

DEADLINE_S = 60  # per case: catches a hang, never a slow machine


def fail(msg):
    print(f"FAIL: signal_storm: {msg}", flush=True)
    sys.exit(1)


def storm(proc, sig, stop):
    """Sends sig to proc until it has exited (or stop is set)."""
    sent = 0
    while not stop.is_set():
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            break
        sent += 1
        if proc.poll() is not None:  # reaped: its pid may be reused
            break
    return sent


def job_left(run_id):
    """Pids of processes whose environment names the job's run id."""
    mark = f"TORCHELASTIC_RUN_ID={run_id}".encode()
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    left.append(int(pid))
        except OSError:
            pass
    return left


def read_until(fd, needle, secs):
    """Reads fd (a pipe) until a line contains needle; returns what it read."""
    buf = b""
    end = time.monotonic() + secs
    while needle.encode() not in buf:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            fail(f"no '{needle}' within {secs} s; read: {buf[-2000:]!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            fail(f"the output ended before '{needle}': {buf[-2000:]!r}")
        buf += chunk
    return buf


def run_case(name, argv, sig, want, ready=None, blocked=None, run_id=None,
             env=None):
    """Starts argv, waits for ready (a string in its output) if given, storms
    it with sig until it exits, and checks it exited with want."""
    def pre():
        os.setpgid(0, 0)  # a process group of its own: the storm is ours
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_BLOCK, {blocked})

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=pre, env=env)
    err = b""
    try:
        if ready is not None:
            err = read_until(proc.stdout.fileno(), ready, DEADLINE_S)
        stop = threading.Event()
        sent = [0]
        t = threading.Thread(target=lambda: sent.__setitem__(
            0, storm(proc, sig, stop)))
        t.start()
        rest = []
        drain = threading.Thread(target=lambda: rest.append(proc.stdout.read()))
        drain.start()
        try:
            rc = proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            fail(f"{name}: still running after {DEADLINE_S} s of a "
                 f"{signal.Signals(sig).name} storm")
        stop.set()
        t.join()
        drain.join()
        err += b"".join(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc < 0:
        fail(f"{name}: killed by {signal.Signals(-rc).name} after "
             f"{sent[0]} signals; expected exit {want}")
    if rc != want:
        fail(f"{name}: exited {rc}, not {want}; output: {err[-1500:]!r}")
    if run_id is not None:
        left = job_left(run_id)
        if left:
            fail(f"{name}: processes of the job left: {left}")
    print(f"{name}: exited {rc} under a storm of {sent[0]} "
          f"{signal.Signals(sig).name}", flush=True)


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ddprun, rdzv, train = sys.argv[1:4]
    cases = sys.argv[4:] or ["startup", "int", "hup", "usr1", "rdzv"]
    tmp = tempfile.mkdtemp(prefix="signal_storm.")
    env = dict(os.environ, TMPDIR=tmp)
    base = [ddprun, "--standalone", "--nproc-per-node", "2"]
    sleeper = ["/bin/sh", "-c", "echo rank $RANK runs >&2; exec sleep 60"]
    for case in cases:
        run_id = f"storm-{case}-{os.getpid()}"
        ident = ["--rdzv-id", run_id]
        if case == "startup":
            run_case(case, base + ident + sleeper, signal.SIGINT, 130,
                     blocked=signal.SIGINT, run_id=run_id, env=env)
        elif case in ("int", "hup"):
            sig = signal.SIGINT if case == "int" else signal.SIGHUP
            run_case(case, base + ident + sleeper, sig, 128 + sig,
                     ready="rank 1 runs", run_id=run_id, env=env)
        elif case == "usr1":
            ckpt = os.path.join(tmp, "ckpt")
            argv = base + ident + [
                "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGUSR1",
                train, "--layers", "2", "--width", "64", "--input-dim", "16",
                "--classes", "4", "--batch", "8", "--steps", "100000",
                "--log-every", "1", "--ckpt-dir", ckpt, "--ckpt-every",
                "1000"]
            run_case(case, argv, signal.SIGUSR1, 75, ready="step 2/",
                     run_id=run_id, env=env)
        elif case == "rdzv":
            argv = [rdzv, "--nnodes", "1", "--rdzv-id", run_id, "--host",
                    "127.0.0.1", "--port", "0"]
            run_case(case, argv, signal.SIGTERM, 143, blocked=signal.SIGTERM,
                     env=env)
            run_case(case, argv, signal.SIGTERM, 143, ready="listening on",
                     env=env)
        else:
            fail(f"unknown case {case}")
    subprocess.run(["rm", "-rf", tmp], check=False)
    print(f"PASS: signal_storm: {' '.join(cases)}")


if __name__ == "__main__":
    main()
