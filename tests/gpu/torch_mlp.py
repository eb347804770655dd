#!/usr/bin/env python3
"""The benchmark's MLP in PyTorch eager, for train's step time to stand next to.

Same layers as train (input-dim -> layers x (Linear + ReLU) of width ->
Linear -> classes, cross-entropy), same batch, AdamW with PyTorch's default
implementation. fp32 runs the GEMMs on TF32 tensor cores (as train --tf32);
bf16 runs under autocast (bf16 compute, fp32 master weights), as train
--precision bf16. The inputs are random tensors made on the GPU once: no
data pipeline cost, which train does pay (its host makes every batch).

  torch_mlp.py --layers 8 --width 8192 --batch 8192 --precision bf16

Prints one line:
  torch precision=bf16 layers=8 width=8192 batch=8192 steps=20 median_step_ms=41.2 tflops=560.3
"""
import argparse
import statistics
import sys


def step_flops(batch, dims):
    """Forward 2BIO per Linear, backward 2BIO for the weights and 2BIO for
    the input of every Linear but the first (its input needs no gradient)."""
    io = [a * b for a, b in zip(dims[:-1], dims[1:])]
    return 2 * batch * (2 * sum(io) + sum(io[1:]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--input-dim", type=int, default=256)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("SKIP: torch sees no GPU")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "fp32"
    dev = torch.device("cuda")
    dims = [a.input_dim] + [a.width] * a.layers + [a.classes]
    mods = []
    for i in range(len(dims) - 1):
        mods.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    x = torch.randn(a.batch, a.input_dim, device=dev)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)

    def step():
        if a.precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up: cuBLAS heuristics, the allocator
        step()
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
    ends[0].record()
    for i in range(a.steps):
        step()
        ends[i + 1].record()
    torch.cuda.synchronize()
    ms = [ends[i].elapsed_time(ends[i + 1]) for i in range(a.steps)]
    med = statistics.median(ms)
    tflops = step_flops(a.batch, dims) / (med * 1e-3) / 1e12
    print(f"torch precision={a.precision} layers={a.layers} width={a.width} "
          f"batch={a.batch} steps={a.steps} median_step_ms={med:.3f} "
          f"tflops={tflops:.1f} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
