"""A gloo job that hangs in one of two ways, for the flight recorder's
report (tests/torch/torch_fr.sh). Both ranks run three all-reduces,
reporting each step through ddprun_progress (which also answers the
agent's request for a flight-recorder dump); then
  --how skip    rank 1 broadcasts while rank 0 all-reduces: the ranks
                disagree at the same collective number;
  --how sleep   rank 1 sleeps before its fourth all-reduce: rank 0 waits
                in #N, rank 1 never entered it.
The process group's timeout (120 s) is longer than the test's hang
timeout, so ddprun's verdict comes first."""
import argparse
import datetime
import time

import torch
import torch.distributed as dist

import ddprun_progress

p = argparse.ArgumentParser()
p.add_argument("--how", choices=["skip", "sleep"], required=True)
a = p.parse_args()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
r = dist.get_rank()
t = torch.ones(4)
for i in range(3):
    dist.all_reduce(t)
    ddprun_progress.step(i + 1)
print("rank %d past step 3" % r, flush=True)
if r == 1 and a.how == "skip":
    dist.broadcast(t, 0)
elif r == 1:
    time.sleep(300)
else:
    dist.all_reduce(t)
