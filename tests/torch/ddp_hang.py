"""A PyTorch DDP job (gloo, CPU) whose one rank gets stuck: for ddprun's
--hang-timeout, which must name that rank and not the one waiting for it.

  --sleep-rank R --sleep-step S
                 rank R sleeps for an hour in step S, before its forward
                 pass; the other rank reaches the all-reduce of step S's
                 backward pass and waits there
  --report       report every step to ddprun (import ddprun_progress; its
                 python/ directory on PYTHONPATH)

The rank that sleeps prints "rank R sleeps in step S at T" (T: wall-clock
seconds) just before it does.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def say(line):
    os.write(1, (line + "\n").encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sleep-rank", type=int, default=-1)
    ap.add_argument("--sleep-step", type=int, default=-1)
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    progress = None
    if a.report:
        import ddprun_progress as progress
        if not progress.enabled():
            raise RuntimeError("ddprun_progress is not reporting")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(a.steps):
        if rank == a.sleep_rank and step == a.sleep_step:
            say(f"rank {rank} sleeps in step {step} at {time.time():.3f}")
            time.sleep(3600)  # the line the stack must show
        x = torch.randn(16, 16, generator=g)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()  # the peer waits here, in the all-reduce
        opt.step()
        if progress is not None:
            progress.step(step + 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
