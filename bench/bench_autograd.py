"""Autograd overhead: ember beside torch (CPU) and MLX (when installed) in one run on the 60-layer `a = a + a` chain and a
small MLP (64x256 input, tanh hidden layer, 10 outputs), forward + backward.

Run: PYTHONPATH=python python bench/bench_autograd.py [--hidden 256 32] [--reps 200] [--threads N]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import ember as em


def best_of(fn, reps):
    """Median of per-call times after a warm-up (the median resists scheduler noise)."""
    for _ in range(max(3, reps // 10)):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def chain_ember():
    a0 = em.Var([1.0])

    def run():
        a = a0
        for _ in range(60):
            a = a + a
        return a.backward()[a0]

    return run


def chain_torch(torch):
    a0 = torch.tensor([1.0], requires_grad=True)

    def run():
        a = a0
        for _ in range(60):
            a = a + a
        a.backward(torch.ones_like(a))
        g = a0.grad
        a0.grad = None
        return g

    return run


def mlp_data(hidden, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w1 = (rng.standard_normal((256, hidden)) / 16).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((hidden, 10)) / np.sqrt(hidden)).astype(np.float32)
    b2 = np.zeros(10, np.float32)
    return x, w1, b1, w2, b2


def mlp_ember(data):
    x = em.tensor(data[0])
    w1, b1, w2, b2 = (em.Var(a) for a in data[1:])

    def run():
        h = (x @ w1 + b1).tanh()
        loss = (h @ w2 + b2).sqr().mean()
        gs = loss.backward()
        return gs[w1], gs[b1], gs[w2], gs[b2]

    return run


def mlp_torch(torch, data):
    x = torch.from_numpy(data[0])
    params = [torch.from_numpy(a).requires_grad_() for a in data[1:]]
    w1, b1, w2, b2 = params

    def run():
        h = torch.tanh(x @ w1 + b1)
        loss = (h @ w2 + b2).square().mean()
        gs = torch.autograd.grad(loss, params)
        return gs

    return run


def chain_mlx(mx):
    def f(a):
        for _ in range(60):
            a = a + a
        return a.sum()

    grad = mx.grad(f)
    a0 = mx.array([1.0])
    return lambda: mx.eval(grad(a0))


def mlp_mlx(mx, data):
    x = mx.array(data[0])
    params = [mx.array(a) for a in data[1:]]

    def loss(w1, b1, w2, b2):
        h = mx.tanh(x @ w1 + b1)
        return mx.mean(mx.square(h @ w2 + b2))

    grad = mx.grad(loss, argnums=(0, 1, 2, 3))
    return lambda: mx.eval(grad(*params))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 32],
                    help="hidden sizes; the small one shows per-node overhead, not BLAS")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        em.set_num_threads(args.threads)
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    try:
        import mlx.core as mx
    except ImportError:
        mx = None

    rows = [("chain a=a+a x60", best_of(chain_ember(), args.reps),
             best_of(chain_torch(torch), args.reps) if torch else None,
             best_of(chain_mlx(mx), args.reps) if mx else None)]
    for hidden in args.hidden:
        data = mlp_data(hidden)
        e_run = mlp_ember(data)
        if torch is not None:  # same numbers before timing anything
            for a, b in zip(e_run(), mlp_torch(torch, data)()):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
        rows.append((f"MLP 64x256-{hidden}(tanh)-10 fwd+bwd", best_of(e_run, args.reps),
                     best_of(mlp_torch(torch, data), args.reps) if torch else None,
                     best_of(mlp_mlx(mx, data), args.reps) if mx else None))

    def us(t):
        return f"{t * 1e6:8.1f}us" if t else "       n/a"

    print(f"{'case':40s} {'ember':>10s} {'torch':>10s} {'mlx':>10s} {'ember/torch':>12s}")
    for name, te, tt, tm in rows:
        ratio = f"{te / tt:11.2f}x" if tt else "         n/a"
        print(f"{name:40s} {us(te)} {us(tt)} {us(tm)} {ratio}")


if __name__ == "__main__":
    main()
