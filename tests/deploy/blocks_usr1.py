"""A worker that blocks SIGUSR1 for a while (as a shell or posix_spawn does
around a fork), then leaves it to its default action before it catches it:
a SIGUSR1 sent to it during the block ends it once the block is lifted.

Usage: blocks_usr1.py GO-FILE: blocks until GO-FILE exists, then 0.3 s of
the default action, then a handler that says so and exits 75."""
import os
import signal
import sys
import time

rank, go = os.environ["RANK"], sys.argv[1]
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print(f"rank {rank} blocked", flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
time.sleep(0.3)


def caught(sig, frame):
    print(f"caught USR1 rank {rank}", flush=True)
    time.sleep(1)
    sys.exit(75)


signal.signal(signal.SIGUSR1, caught)
print(f"rank {rank} ready", flush=True)
while True:
    time.sleep(0.05)
