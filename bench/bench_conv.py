"""Convolutions at model shapes: ember beside torch (CPU) with the same thread count, forward and
forward + backward, as a markdown table.

    python bench/bench_conv.py [--threads N] [--reps R] [--only SUBSTRING]

Each cell is the median of R calls, the libraries alternating call by call so machine noise hits
both alike (each timed call right after an untimed one, see timing.py). The ratio is torch's time over ember's: above 1 means ember is faster.
"""
import argparse
import os
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=int(os.environ.get("EMBER_NUM_THREADS", os.cpu_count() or 1)))
ap.add_argument("--reps", type=int, default=9)
ap.add_argument("--only", default="", help="run the rows whose name contains this")
args = ap.parse_args()
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import numpy as np
import torch
import torch.nn.functional as F
from timing import median_ms

import ember as em

em.set_num_threads(args.threads)
torch.set_num_threads(args.threads)

# (name, conv function names, input shape, weight shape, kwargs)
CASES = [
    ("whisper conv1 (80 -> 384, k3)", "conv1d", (1, 80, 3000), (384, 80, 3), dict(padding=1)),
    ("whisper conv2 (384 -> 384, k3, s2)", "conv1d", (1, 384, 3000), (384, 384, 3), dict(stride=2, padding=1)),
    ("resnet 3x3 (64 -> 64, 56x56, N=8)", "conv2d", (8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ("resnet 3x3 s2 (64 -> 128, 56x56, N=8)", "conv2d", (8, 64, 56, 56), (128, 64, 3, 3), dict(stride=2, padding=1)),
    ("resnet 3x3 (128 -> 128, 28x28, N=8)", "conv2d", (8, 128, 28, 28), (128, 128, 3, 3), dict(padding=1)),
    ("resnet 1x1 (256 -> 64, 56x56, N=8)", "conv2d", (8, 256, 56, 56), (64, 256, 1, 1), dict()),
    ("resnet 1x1 s2 downsample (64 -> 128, 56x56, N=8)", "conv2d", (8, 64, 56, 56), (128, 64, 1, 1), dict(stride=2)),
    ("upsample 4x4 s2 transpose (128 -> 64, 28x28, N=8)", "conv_transpose2d", (8, 128, 28, 28), (128, 64, 4, 4),
     dict(stride=2, padding=1)),
]


def run_case(name, fn, xs, ws, kw, rng):
    """One table row: forward (no graph) and forward + backward, ember beside torch."""
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    ef, tf = getattr(em.nn, fn), getattr(F, fn)
    xe, we = em.tensor(x), em.tensor(w)
    xv, wv = em.Var(x), em.Var(w)
    xt, wt = torch.tensor(x), torch.tensor(w)
    xg, wg = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)

    def em_fwd():
        with em.no_grad():
            ef(xe, we, **kw)

    def torch_fwd():
        with torch.no_grad():
            tf(xt, wt, **kw)

    def em_both():
        ef(xv, wv, **kw).sum().backward()

    def torch_both():
        xg.grad = wg.grad = None
        tf(xg, wg, **kw).sum().backward()

    a, b = median_ms([em_fwd, torch_fwd], args.reps)
    c, d = median_ms([em_both, torch_both], args.reps)
    print(f"| {name} | {a:.2f} ms | {b:.2f} ms | {b / a:.2f}x | {c:.2f} ms | {d:.2f} ms | {d / c:.2f}x |")


def main():
    rng = np.random.default_rng(0)
    print(f"# conv benchmark, {args.threads} threads, torch {torch.__version__}, ember {em._C.isa()} kernels, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print("| case | ember fwd | torch fwd | torch / ember | ember fwd+bwd | torch fwd+bwd | torch / ember |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        if args.only in case[0]:
            run_case(*case, rng)


if __name__ == "__main__":
    main()
