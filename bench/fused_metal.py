"""bench_fused.py --device metal: ember's Metal fused kernels beside MLX (mx.fast on the GPU) and torch
(MPS), on a Mac with an Apple GPU. Under the MSL emulator it refuses: emulated kernels run as C++ on
the CPU, so their timings say nothing about a GPU."""
from __future__ import annotations

import time

import numpy as np

import ember as em
from ember.nn import ops


def _best_ms(fn, sync, reps):
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def _ember_cases(x_np, w_np, b_np, q_np, dev):
    x = em.tensor(x_np, device=dev)
    w = em.tensor(w_np, device=dev)
    b = em.tensor(b_np, device=dev)
    q = em.tensor(q_np, device=dev)
    return {"softmax_last_dim": lambda: ops.softmax_last_dim(x),
            "rms_norm": lambda: ops.rms_norm(x, w, 1e-5),
            "layer_norm": lambda: ops.layer_norm(x, w, b, 1e-5),
            "sdpa causal": lambda: ops.sdpa(q, q, q, causal=True)}


def _mlx_cases(x_np, w_np, b_np, q_np):
    try:
        import mlx.core as mx
    except ImportError:
        return None, None
    mx.set_default_device(mx.gpu)
    x, w, b, q = (mx.array(a) for a in (x_np, w_np, b_np, q_np))
    scale = 1.0 / np.sqrt(q_np.shape[-1])
    cases = {"softmax_last_dim": lambda: mx.eval(mx.softmax(x, axis=-1)),
             "rms_norm": lambda: mx.eval(mx.fast.rms_norm(x, w, 1e-5)),
             "layer_norm": lambda: mx.eval(mx.fast.layer_norm(x, w, b, 1e-5)),
             "sdpa causal": lambda: mx.eval(mx.fast.scaled_dot_product_attention(q, q, q, scale=scale, mask="causal"))}
    return cases, (lambda: None)


def _torch_cases(x_np, w_np, b_np, q_np):
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.backends.mps.is_available():
        return None, None
    x, w, b, q = (torch.from_numpy(a).to("mps") for a in (x_np, w_np, b_np, q_np))
    F = torch.nn.functional
    cases = {"softmax_last_dim": lambda: torch.softmax(x, -1),
             "rms_norm": lambda: F.rms_norm(x, (x.shape[-1],), w, 1e-5),
             "layer_norm": lambda: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
             "sdpa causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)}
    return cases, torch.mps.synchronize


def run(reps=20):
    """Times the forward of each fused op on Metal and prints ms and ratios (above 1: ember faster).

    Args:
        reps: timed calls per op (the best counts).

    Raises:
        SystemExit: when this process has no Apple GPU (no Metal, or only the emulator).
    """
    backend = em.metal.backend()
    if backend != "apple":
        raise SystemExit("bench_fused --device metal needs an Apple GPU (em.metal.backend() is "
                         f"{backend!r}): the MSL emulator runs kernels as C++ on the CPU, so its timings "
                         "say nothing about a GPU. No Metal numbers exist yet.")
    dev = em.Device("metal", 0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32768, 128)).astype(np.float32)
    w, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    q = rng.standard_normal((4, 8, 1024, 64)).astype(np.float32)
    mine = _ember_cases(x, w, b, q, dev)
    mlx, mlx_sync = _mlx_cases(x, w, b, q)
    tch, tch_sync = _torch_cases(x, w, b, q)
    print(f"{'op':<18}{'ember':>9}{'mlx':>9}{'torch':>9} | {'vs mlx':>7}{'vs torch':>9}  (ms, forward, float32)")
    for op, fn in mine.items():
        e = _best_ms(fn, em.metal.synchronize, reps)
        m = _best_ms(mlx[op], mlx_sync, reps) if mlx else None
        t = _best_ms(tch[op], tch_sync, reps) if tch else None
        cols = "".join(f"{v:9.3f}" if v is not None else f"{'-':>9}" for v in (e, m, t))
        ratios = "".join(f"{v / e:{wd}.2f}x" if v is not None else f"{'-':>{wd + 1}}" for v, wd in ((m, 6), (t, 8)))
        print(f"{op:<18}{cols} | {ratios}", flush=True)
