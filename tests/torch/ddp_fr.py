"""A gloo job that hangs in one of two ways, for the flight recorder's
report (tests/torch/torch_fr.sh). Both ranks run three all-reduces,
reporting each step through ddprun_progress (ddprun's Python start-up
hook answers the agent's request for a flight-recorder dump, the program
need not import anything); then
  --how skip    rank 1 broadcasts while rank 0 all-reduces: the ranks
                disagree at the same collective number;
  --how sleep   rank 1 sleeps before its fourth all-reduce: rank 0 waits
                in #N, rank 1 never entered it;
  --how plain   as sleep, in a program that does not import ddprun_progress
                (its hang judged by CPU time);
  --how dump    rank 1 dumps its flight recorder as NCCL's watchdog does on
                a collective's timeout (a pickle, to TORCH_FR_DUMP_TEMP_FILE
                and its rank) and aborts, as that watchdog then does.
The process group's timeout (120 s) is longer than the test's hang
timeout, so ddprun's verdict comes first."""
import argparse
import datetime
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--how", choices=["skip", "sleep", "plain", "dump"],
               required=True)
a = p.parse_args()
if a.how != "plain":
    import ddprun_progress
    step = ddprun_progress.step
else:
    def step(_):
        pass
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
r = dist.get_rank()
t = torch.ones(4)
for i in range(3):
    dist.all_reduce(t)
    step(i + 1)
print("rank %d past step 3" % r, flush=True)
if r == 1 and a.how == "dump":
    import os
    import torch._C._distributed_c10d as c10d
    with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(r), "wb") as f:
        f.write(c10d._dump_fr_trace(True, False))
    os.abort()
elif r == 1 and a.how == "skip":
    dist.broadcast(t, 0)
elif r == 1:
    time.sleep(300)
else:
    dist.all_reduce(t)
