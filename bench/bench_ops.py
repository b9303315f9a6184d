"""Core-op benchmark: ember beside torch (CPU) and numpy in one run, same thread count, as a markdown table.

    python bench/bench_ops.py [--threads N] [--reps R]

Each row is the median of R timed runs; the libraries are interleaved inside every repetition so that
machine noise hits them alike. Ratios are speed ratios (other library's time / ember's time): above 1
means ember is faster.
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

# numpy's BLAS reads its thread count when it loads, so this must come before the imports.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ember as em

em.set_num_threads(args.threads)
torch.set_num_threads(args.threads)


def timed(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def bench(cases, inner=1, reps=args.reps, settle=0.0):
    """cases: {lib: fn}. Returns {lib: median seconds per call}, interleaving the libraries each rep.

    settle: seconds to sleep before each timing. OpenBLAS and OpenMP workers spin for ~0.1 s after a
    parallel call; without a pause they steal a core from whichever library is timed next."""
    for fn in cases.values():  # warm up: first-touch pages, caches, lazy init
        timed(fn, max(1, inner // 10))
    times = {lib: [] for lib in cases}
    for _ in range(reps):
        for lib, fn in cases.items():
            if settle:
                time.sleep(settle)
            times[lib].append(timed(fn, inner))
    return {lib: statistics.median(ts) for lib, ts in times.items()}


def scatter_movement_rows(rng, rows):
    """scatter_reduce (sum, amax) of 1M elements into 1000x1000 along dim 0, pad reflect of an image
    batch, roll of a 1024x1024 matrix along both dims."""
    x = rng.standard_normal((1000, 1000)).astype(np.float32)
    ids = rng.integers(0, 1000, (1000, 1000))
    src = rng.standard_normal((1000, 1000)).astype(np.float32)
    ex, ei, es = em.tensor(x), em.tensor(ids), em.tensor(src)
    tx, ti, ts = torch.from_numpy(x.copy()), torch.from_numpy(ids), torch.from_numpy(src.copy())
    for red in ("sum", "amax"):
        r = bench({"ember": lambda red=red: ex.scatter_reduce(0, ei, es, red),
                   "torch": lambda red=red: tx.scatter_reduce(0, ti, ts, red)}, inner=5, settle=0.15)
        rows.append((f"scatter_reduce {red}, 1M into 1000x1000 f32", r, "ms", ("torch", 0.8)))
    img = rng.standard_normal((16, 3, 224, 224)).astype(np.float32)
    e_img, t_img = em.tensor(img), torch.from_numpy(img.copy())
    r = bench({"ember": lambda: em.pad(e_img, (3, 3, 3, 3), mode="reflect"),
               "torch": lambda: torch.nn.functional.pad(t_img, (3, 3, 3, 3), mode="reflect"),
               "numpy": lambda: np.pad(img, ((0, 0), (0, 0), (3, 3), (3, 3)), mode="reflect")}, settle=0.15)
    rows.append(("pad reflect 3, 16x3x224x224 f32", r, "ms", ("torch", 0.8)))
    m = rng.standard_normal((1024, 1024)).astype(np.float32)
    e_m, t_m = em.tensor(m), torch.from_numpy(m.copy())
    r = bench({"ember": lambda: em.roll(e_m, (5, -7), (0, 1)), "torch": lambda: torch.roll(t_m, (5, -7), (0, 1)),
               "numpy": lambda: np.roll(m, (5, -7), (0, 1))}, inner=5, settle=0.15)
    rows.append(("roll (5, -7), 1024x1024 f32", r, "ms", ("torch", 0.8)))


def main():
    rng = np.random.default_rng(0)
    rows = []

    # 1. per-op overhead: a + b on 4-element f32 tensors (dominated by the Python -> C++ path)
    a4, b4 = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    ea, eb, ta, tb = em.tensor(a4), em.tensor(b4), torch.from_numpy(a4), torch.from_numpy(b4)
    r = bench({"ember": lambda: ea + eb, "torch": lambda: ta + tb, "numpy": lambda: a4 + b4}, inner=5000)
    rows.append(("a + b, 4 f32 (overhead)", r, "us", ("abs", 4e-6)))

    # 2-3. add and exp on 16M f32 elements (memory bandwidth + SIMD math)
    n = 16 * 1024 * 1024
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    ex, ey, tx, ty = em.tensor(x), em.tensor(y), torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    r = bench({"ember": lambda: ex + ey, "torch": lambda: tx + ty, "numpy": lambda: x + y}, settle=0.15)
    rows.append(("add, 16M f32", r, "ms", ("torch", 0.9)))
    r = bench({"ember": lambda: ex.exp(), "torch": lambda: tx.exp(), "numpy": lambda: np.exp(x)}, settle=0.15)
    rows.append(("exp, 16M f32", r, "ms", ("torch", 0.9)))

    # 4. sum over the last dim of 4096 x 4096 f32
    m = rng.random((4096, 4096), dtype=np.float32)
    em_m, t_m = em.tensor(m), torch.from_numpy(m.copy())
    r = bench({"ember": lambda: em_m.sum(-1), "torch": lambda: t_m.sum(-1), "numpy": lambda: m.sum(-1)}, settle=0.15)
    rows.append(("sum(-1), 4096x4096 f32", r, "ms", ("torch", 0.9)))

    # 5-6. row max (values only: torch.amax; a vector max with NaN tracking) and a transposing copy (tiled)
    r = bench({"ember": lambda: em_m.max(-1), "torch": lambda: t_m.amax(-1), "numpy": lambda: m.max(-1)},
              settle=0.15)
    rows.append(("max(-1), 4096x4096 f32", r, "ms", ("torch", 0.9)))
    r = bench({"ember": lambda: em_m.t().contiguous(), "torch": lambda: t_m.t().contiguous(),
               "numpy": lambda: np.ascontiguousarray(m.T)}, settle=0.15)
    rows.append(("t().contiguous(), 4096x4096 f32", r, "ms", ("torch", 0.9)))

    # 7-8. gelu (vectorised erf; numpy has no erf) and Python's % on floats (exact, as numpy's)
    r = bench({"ember": lambda: ex.gelu(), "torch": lambda: torch.nn.functional.gelu(tx)}, settle=0.15)
    rows.append(("gelu, 16M f32", r, "ms", ("torch", 0.9)))
    d = (rng.random(n, dtype=np.float32) * 3 + 0.5)
    ed, td = em.tensor(d), torch.from_numpy(d.copy())
    xs, exs, txs = x * 100, ex * 100, tx * 100
    r = bench({"ember": lambda: exs % ed, "torch": lambda: txs % td, "numpy": lambda: xs % d}, settle=0.15)
    rows.append(("x % y, 16M f32", r, "ms", ("torch", 0.7)))

    # 9. matmul 1024 x 1024 f32 (BLAS)
    p, q = rng.random((1024, 1024), dtype=np.float32), rng.random((1024, 1024), dtype=np.float32)
    ep, eq, tp, tq = em.tensor(p), em.tensor(q), torch.from_numpy(p.copy()), torch.from_numpy(q.copy())
    r = bench({"ember": lambda: ep @ eq, "torch": lambda: tp @ tq, "numpy": lambda: p @ q}, settle=0.15)
    rows.append(("matmul, 1024x1024 f32", r, "ms", ("numpy", 0.8)))

    # 10-13. indexing at model sizes: an embedding lookup (rows of a 50000 x 256 table), its gradient's
    # scatter (index_add), assignment through an index array, and cross-entropy's gather
    table = rng.standard_normal((50000, 256)).astype(np.float32)
    ids = rng.integers(0, 50000, 8192)
    rows_v = rng.standard_normal((8192, 256)).astype(np.float32)
    e_tab, e_ids, e_rows = em.tensor(table), em.tensor(ids), em.tensor(rows_v)
    t_tab, t_ids, t_rows = torch.from_numpy(table.copy()), torch.from_numpy(ids), torch.from_numpy(rows_v)
    n_tab = table.copy()
    r = bench({"ember": lambda: e_tab[e_ids], "torch": lambda: t_tab[t_ids], "numpy": lambda: table[ids]}, settle=0.15)
    rows.append(("t[ids], 8192 of 50000x256 f32", r, "ms", ("torch", 0.9)))
    r = bench({"ember": lambda: e_tab.index_add(e_ids, e_rows, 0), "torch": lambda: t_tab.index_add(0, t_ids, t_rows),
               "numpy": lambda: np.add.at(n_tab.copy(), ids, rows_v)}, settle=0.15)
    rows.append(("index_add, 8192 rows into 50000x256", r, "ms", ("torch", 0.9)))
    uniq = rng.permutation(50000)[:8192]
    e_u, t_u = em.tensor(uniq), torch.from_numpy(uniq)

    def n_put():
        n_tab[uniq] = rows_v

    def e_put():
        e_tab[e_u] = e_rows

    def t_put():
        t_tab[t_u] = t_rows

    r = bench({"ember": e_put, "torch": t_put, "numpy": n_put}, settle=0.15)
    rows.append(("t[ids] = rows, 8192 distinct", r, "ms", ("torch", 0.9)))
    cls = rng.integers(0, 256, (8192, 1))
    e_c, t_c = em.tensor(cls), torch.from_numpy(cls)
    r = bench({"ember": lambda: e_rows.gather(e_c, 1), "torch": lambda: t_rows.gather(1, t_c),
               "numpy": lambda: np.take_along_axis(rows_v, cls, 1)}, inner=20)
    rows.append(("gather(1), 8192x256 -> 8192x1", r, "us", ("torch", 0.9)))
    scatter_movement_rows(rng, rows)

    print(f"ember {em.__version__} (isa {em._C.isa()}), torch {torch.__version__}, numpy {np.__version__}; "
          f"{args.threads} threads each; median of {args.reps} interleaved runs\n")
    print("| op | ember | torch | numpy | torch / ember | numpy / ember | target | met |")
    print("|---|---:|---:|---:|---:|---:|---|:-:|")
    for name, r, unit, (kind, goal) in rows:
        scale = 1e6 if unit == "us" else 1e3
        cells = [f"{r[lib] * scale:.3g} {unit}" if lib in r else "-" for lib in ("ember", "torch", "numpy")]
        vt = r["torch"] / r["ember"]
        vn = r["numpy"] / r["ember"] if "numpy" in r else None
        if kind == "abs":
            target, met = f"<= {goal * 1e6:g} us", r["ember"] <= goal
        else:
            ratio = vt if kind == "torch" else vn
            target, met = f">= {goal}x {kind}", ratio >= goal
        vn_cell = f"{vn:.2f}x" if vn is not None else "-"
        print(f"| {name} | {' | '.join(cells)} | {vt:.2f}x | {vn_cell} | {target} | {'yes' if met else 'NO'} |")


if __name__ == "__main__":
    main()
