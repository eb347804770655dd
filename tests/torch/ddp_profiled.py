"""A PyTorch DDP job (gloo, CPU) profiled on every rank with torch.profiler,
for `ddprun diagnose`: a stack of Linear layers, one DDP bucket per
--bucket-cap-mb, steps timed by the job itself.

  --steps N            steps in all (the profiler records --active of them
                       after --wait + --warmup)
  --bucket-cap-mb MB   DDP's bucket_cap_mb
  --trace-dir DIR      tensorboard_trace_handler's directory
  --slow-rank R --slow-ms MS
                       rank R sleeps MS in its data loading each step
  --then-clean         then the same run again, untraced and without the
                       sleep, in the same processes: the step without it
  --layers L --width W --batch B

Prints, on rank 0, "step_ms median=... steps=..." over the profiled steps
(the slowest rank's step, as all-reduces make every rank wait for it), and
with --then-clean "clean_step_ms median=..." for the second run.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule
from torch.profiler import tensorboard_trace_handler


def slow_collate(sleep_s):
    """The batch's collation, where the slow rank sleeps: inside the
    DataLoader's __next__, which the profiler records as data loading."""
    def collate(items):
        if sleep_s > 0:
            time.sleep(sleep_s)
        return torch.stack(items)
    return collate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--wait", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--active", type=int, default=5)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--trace-dir", default="")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--then-clean", action="store_true")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(a.width, a.width)
                                  for _ in range(a.layers)])
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.001)
    sleep_s = a.slow_ms / 1000.0 if rank == a.slow_rank else 0.0

    def run(sleep_s, trace_dir):
        """One profiled run of --steps; the median of its profiled steps,
        the slowest rank's."""
        g = torch.Generator().manual_seed(rank)
        data = list(torch.randn(a.batch * a.steps, a.width, generator=g))
        loader = torch.utils.data.DataLoader(
            data, batch_size=a.batch, collate_fn=slow_collate(sleep_s))
        sched = schedule(wait=a.wait, warmup=a.warmup, active=a.active,
                         repeat=1)
        handler = tensorboard_trace_handler(trace_dir) if trace_dir else None
        times = []
        with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                     on_trace_ready=handler, record_shapes=True) as prof:
            it = iter(loader)
            for step in range(a.steps):
                t0 = time.perf_counter()
                xb = next(it)
                opt.zero_grad()
                loss = ddp(xb).square().mean()
                loss.backward()
                opt.step()
                prof.step()
                times.append((time.perf_counter() - t0) * 1000.0)
        del it, prof, loader
        profiled = times[a.wait + a.warmup:a.wait + a.warmup + a.active]
        mine = torch.tensor([statistics.median(profiled)])
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        return mine.item(), len(profiled)

    ms, n = run(sleep_s, a.trace_dir)
    if rank == 0:
        os.write(1, f"step_ms median={ms:.3f} steps={n}\n".encode())
    if a.then_clean:
        ms, n = run(0.0, "")
        if rank == 0:
            os.write(1, f"clean_step_ms median={ms:.3f} steps={n}\n".encode())
    del ddp
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.11 at interpreter exit, after a profiled gloo job, aborted
    # now and then ("terminate called without an active exception": a gloo
    # thread still joinable as its object is destroyed). Everything is
    # written and the group is down: leave without that teardown.
    os._exit(0)


if __name__ == "__main__":
    main()
