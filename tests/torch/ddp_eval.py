"""A gloo job whose rank 0 runs a long evaluation on the CPU (--eval-s
seconds of matrix products) while rank 1 waits for it in a barrier, as a
validation pass on rank 0 does (tests/torch/torch_hang_eval.sh)."""
import argparse
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--eval-s", type=float, required=True)
a = p.parse_args()
dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if r == 0:
    print("rank 0 evaluates for %.0f s" % a.eval_s, flush=True)
    x = torch.randn(256, 256)
    end = time.monotonic() + a.eval_s
    while time.monotonic() < end:
        x = torch.tanh(x @ x)
dist.barrier()
print("rank %d done" % r, flush=True)
dist.destroy_process_group()
