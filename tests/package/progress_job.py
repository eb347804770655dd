"""A program that reports its steps to ddprun's agent (ddprun_progress,
as installed with ddprun) and checks that they land in the agent's
progress file: slot LOCAL_RANK, uint64 step at byte 8 (docs/ddprun.md)."""

import os
import struct
import sys

import ddprun_progress

rank = int(os.environ["RANK"])
if not ddprun_progress.enabled():
    sys.exit(f"progress: rank {rank}: ddprun_progress is not enabled under ddprun "
             f"(DDPRUN_PROGRESS_FILE={os.environ.get('DDPRUN_PROGRESS_FILE')})")
for step in range(1, 21):
    ddprun_progress.step(step)
path = os.environ["DDPRUN_PROGRESS_FILE"]
slot = int(os.environ["LOCAL_RANK"]) * ddprun_progress.SLOT_BYTES
with open(path, "rb") as f:
    f.seek(slot)
    seq, seen = struct.unpack("=QQ", f.read(16))
if seen != 20 or seq == 0:
    sys.exit(f"progress: rank {rank}: the slot says step {seen}, seq {seq}")
print(f"progress: rank {rank} reported step {seen} to {path} "
      f"from {ddprun_progress.__file__}", flush=True)
