"""Sort-family benchmark: topk, sort, argsort, cumsum and multinomial, ember beside torch (CPU) in one run.

    python bench/bench_sort.py [--threads N] [--reps R]

Each row is the median of R timed runs, the libraries interleaved inside every repetition so that
machine noise hits them alike. Ratios are torch's time / ember's: above 1 means ember is faster.
"""
import argparse
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=int(os.environ.get("EMBER_NUM_THREADS", os.cpu_count() or 1)))
ap.add_argument("--reps", type=int, default=15)
args = ap.parse_args()

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from timing import settle_and_warm

import ember as em

em.set_num_threads(args.threads)
torch.set_num_threads(args.threads)

try:
    import mlx.core as mx
except ImportError:  # MLX has wheels only for macOS and some Linux setups: its column is then empty
    mx = None


def bench(cases, inner=1):
    """cases: {lib: fn}. Returns {lib: median seconds per call}, the libraries interleaved each rep, each
    settled and warmed (timing.settle_and_warm) before it is timed."""
    times = {lib: [] for lib in cases}
    for _ in range(args.reps):
        for lib, fn in cases.items():
            settle_and_warm(fn, 0.02)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[lib].append((time.perf_counter() - t0) / inner)
    return {lib: statistics.median(ts) for lib, ts in times.items()}


def mlx_case(fn):
    return {"mlx": lambda: mx.eval(fn())} if mx is not None else {}


def main():
    rng = np.random.default_rng(0)
    rows = []
    for shape in ((32, 50257), (1, 50257)):
        a = rng.standard_normal(shape).astype(np.float32)
        e, t = em.tensor(a), torch.from_numpy(a)
        m = mx.array(a) if mx is not None else None
        for k in (1, 10, 50):
            r = bench({"ember": lambda e=e, k=k: em.topk(e, k), "torch": lambda t=t, k=k: torch.topk(t, k),
                       **mlx_case(lambda m=m, k=k: mx.topk(m, k, axis=-1))}, inner=5)
            rows.append((f"topk k={k}, {shape[0]}x{shape[1]} f32", r))
    a = rng.standard_normal((256, 4096)).astype(np.float32)
    e, t = em.tensor(a), torch.from_numpy(a)
    m = mx.array(a) if mx is not None else None
    rows.append(("sort(-1), 256x4096 f32", bench({"ember": lambda: em.sort(e), "torch": lambda: torch.sort(t),
                                                    **mlx_case(lambda: mx.sort(m, axis=-1))})))
    rows.append(("argsort(-1), 256x4096 f32", bench({"ember": lambda: em.argsort(e),
                                                       "torch": lambda: torch.argsort(t),
                                                       **mlx_case(lambda: mx.argsort(m, axis=-1))})))
    ai = rng.integers(-10**6, 10**6, (256, 4096))
    ei, ti = em.tensor(ai), torch.from_numpy(ai)
    rows.append(("sort(-1), 256x4096 int64", bench({"ember": lambda: em.sort(ei), "torch": lambda: torch.sort(ti)})))
    for dim in (-1, 0):
        rows.append((f"cumsum({dim}), 256x4096 f32", bench({"ember": lambda dim=dim: em.cumsum(e, dim),
                                                             "torch": lambda dim=dim: torch.cumsum(t, dim),
                                                             **mlx_case(lambda dim=dim: mx.cumsum(m, axis=dim))})))
    w = rng.random((32, 50257)).astype(np.float32)
    ew, tw = em.tensor(w), torch.from_numpy(w)
    for s, repl in ((1, False), (16, False), (64, True)):
        rows.append((f"multinomial {s}{' w/ repl' if repl else ''}, 32x50257 f32",
                     bench({"ember": lambda s=s, repl=repl: em.multinomial(ew, s, repl),
                            "torch": lambda s=s, repl=repl: torch.multinomial(tw, s, repl)})))

    print(f"ember {em.__version__}, torch {torch.__version__}{', mlx ' + mx.__version__ if mx else ''}; "
          f"{args.threads} threads each; median of {args.reps} interleaved runs\n")
    print("| op | ember | torch | mlx | torch / ember | target | met |")
    print("|---|---:|---:|---:|---:|---|:-:|")
    for name, r in rows:
        cells = [f"{r[lib] * 1e3:.3g} ms" if lib in r else "-" for lib in ("ember", "torch", "mlx")]
        ratio = r["torch"] / r["ember"]
        print(f"| {name} | {' | '.join(cells)} | {ratio:.2f}x | >= 0.8x torch | {'yes' if ratio >= 0.8 else 'NO'} |")


if __name__ == "__main__":
    main()
