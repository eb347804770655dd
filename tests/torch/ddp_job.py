"""A PyTorch DDP job (gloo, CPU) that runs the same under torchrun and ddprun.

It reads only what torchrun's contract gives a worker: init_process_group
from env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), LOCAL_RANK, and
TORCHELASTIC_RESTART_COUNT; @record writes an uncaught exception to
TORCHELASTIC_ERROR_FILE. Every step is deterministic (seeded data and
model, DistributedSampler, one thread, deterministic algorithms), so two
launchers that hand out the same ranks produce the same weights.

  --steps N          optimizer steps (SGD with momentum, batch 16 per rank)
  --ckpt PATH        rank 0 saves model, optimizer and step after each step
                     (torch.save, then rename); a run that finds it resumes
  --fail-rank R --fail-step S
                     rank R raises RuntimeError before step S, on the job's
                     first attempt only (TORCHELASTIC_RESTART_COUNT 0)
  --ddprun-ckpt N    with ddprun_ckpt (python/ on PYTHONPATH): every rank
                     resumes from load_latest() of DDPRUN_CKPT_DIR; rank 0
                     saves model, optimizer and step every N steps
  --kill-rank R --kill-step S [--kill-in-save]
                     rank R SIGKILLs itself before step S, or inside its
                     save of step S (while torch.save writes the temporary),
                     on the job's first attempt only

Prints "rank R of W local_rank L restart K" first and, last, on every rank,
"final crc=0x... loss=..." with the CRC-32 of the float32 weights.
"""
import argparse
import os
import signal
import struct
import zlib

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def say(line):
    # One write per line: the ranks share the launcher's stdout, and
    # print() may write the text and its newline apart.
    os.write(1, (line + "\n").encode())


def weights_crc(model):
    crc = 0
    for p in model.parameters():
        values = p.detach().flatten().tolist()
        crc = zlib.crc32(struct.pack(f"<{len(values)}f", *values), crc)
    return crc


class KillOnPickle:
    """Dies as torch.save pickles it: a save cut short by SIGKILL."""

    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGKILL)


def load_state(a):
    if a.ddprun_ckpt:
        import ddprun_ckpt
        return ddprun_ckpt.load_latest(map_location="cpu")
    if a.ckpt and os.path.exists(a.ckpt):
        return torch.load(a.ckpt)
    return None


@record
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ckpt", default="")
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-step", type=int, default=-1)
    ap.add_argument("--ddprun-ckpt", type=int, default=0)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-step", type=int, default=-1)
    ap.add_argument("--kill-in-save", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != int(os.environ["RANK"]) or world != int(os.environ["WORLD_SIZE"]):
        raise RuntimeError("the process group disagrees with RANK/WORLD_SIZE")
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    say(f"rank {rank} of {world} local_rank {os.environ['LOCAL_RANK']} "
        f"restart {restart}")

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    data = TensorDataset(x, y)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    state = load_state(a)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        say(f"rank {rank}: resumed at step {start}")
    ddp = DDP(model)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank,
                                 shuffle=True, seed=3, drop_last=True)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    per_epoch = len(loader)
    loss = torch.zeros(())
    step = start
    while step < a.steps:
        epoch = step // per_epoch
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            if i < step - epoch * per_epoch:
                continue  # done before the checkpoint: same order, skipped
            if step >= a.steps:
                break
            if rank == a.fail_rank and step == a.fail_step and restart == 0:
                raise RuntimeError(f"injected failure before step {step}")
            kill = rank == a.kill_rank and restart == 0
            if kill and step == a.kill_step and not a.kill_in_save:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            if a.ckpt and rank == 0:
                tmp = a.ckpt + ".tmp"
                torch.save({"model": model.state_dict(),
                            "opt": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, a.ckpt)
            if a.ddprun_ckpt and rank == 0 and step % a.ddprun_ckpt == 0:
                import ddprun_ckpt
                state = {"model": model.state_dict(), "opt": opt.state_dict(),
                         "step": step}
                if kill and a.kill_in_save and step == a.kill_step:
                    state["kill"] = KillOnPickle()
                ddprun_ckpt.save(state, step)
            # No rank runs ahead of rank 0's checkpoint.
            dist.barrier()
    total = loss.detach().clone()
    dist.all_reduce(total)
    say(f"final crc=0x{weights_crc(model):08x} "
        f"loss={total.item() / world:.6f} world={world}")
    # Without this, about one run in four (torch 2.11, under torchrun and
    # ddprun alike) hung at exit: ~ProcessGroupGloo joined its gloo thread
    # while holding the interpreter lock that thread was waiting for.
    del ddp, loader
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
