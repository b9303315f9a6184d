"""Gradient checkpointing: peak memory and time of a 12-layer transformer training step with and without it.

    python bench/bench_checkpoint.py [--dim 256] [--seq 256] [--batch 4] [--layers 12] [--reps 3]

Peak memory is em.memory_stats()'s peak_allocated_bytes over one step (forward + backward), reset
before each step; time is the median of --reps steps. The model: TransformerBlocks (rms norm, causal
attention through the fused sdpa, gated MLP), float32, on the CPU.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np

import ember as em

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--dim", type=int, default=256)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--reps", type=int, default=3)
args = ap.parse_args()


def build(checkpoint):
    em.manual_seed(0)
    return [em.nn.TransformerBlock(args.dim, args.heads, checkpoint=checkpoint) for _ in range(args.layers)]


def step(blocks, x):
    h = x
    for b in blocks:
        h = b(h)
    return (h * h).mean().backward()


def measure(blocks, x):
    times, peaks = [], []
    step(blocks, x)  # warm-up
    for _ in range(args.reps):
        em.reset_peak_memory_stats()
        base = em.memory_stats("cpu")["allocated_bytes"]
        t0 = time.perf_counter()
        g = step(blocks, x)
        times.append(time.perf_counter() - t0)
        peaks.append(em.memory_stats("cpu")["peak_allocated_bytes"] - base)
        del g
    return statistics.median(times), max(peaks)


def main():
    x = em.tensor(np.random.default_rng(0).standard_normal((args.batch, args.seq, args.dim)).astype(np.float32))
    t0, p0 = measure(build(False), x)
    t1, p1 = measure(build(True), x)
    print(f"{args.layers} TransformerBlocks, dim {args.dim}, {args.heads} heads, batch {args.batch} x seq {args.seq}, "
          f"float32, {em.get_num_threads()} threads\n")
    print("| | peak memory of a step (MiB) | step time (s) |")
    print("|---|---:|---:|")
    print(f"| without checkpointing | {p0 / 2**20:.1f} | {t0:.3f} |")
    print(f"| checkpoint=True | {p1 / 2**20:.1f} | {t1:.3f} |")
    print(f"| ratio | {p1 / p0:.2f}x | {t1 / t0:.2f}x |")


if __name__ == "__main__":
    main()
