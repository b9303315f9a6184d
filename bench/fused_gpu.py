"""bench_fused.py --device metal|cuda: ember's GPU fused kernels (forward and backward through autograd) and
matmul beside torch on the same GPU (CUDA, or MPS on a Mac) and MLX (Apple GPU). Emulated devices run kernels
as C++ on the CPU, so their timings say nothing about a GPU: the script refuses them unless --allow-emulator
(a smoke run with small shapes, which checks that the script itself works before it meets a GPU)."""
from __future__ import annotations

import time

import numpy as np

import ember as em
from ember.nn import functional as F_em
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


# Each case: (name, shape label, dtype name, forward(lib tensors) -> output, number of inputs that get gradients).
def _cases(small):
    rows, cols = (64, 128) if small else (32768, 128)
    B, H, L, D = (1, 2, 32, 16) if small else (4, 8, 1024, 64)
    N = 64 if small else 4096
    return [
        ("softmax_last_dim", (rows, cols), "x"),
        ("rms_norm", (rows, cols), "xw"),
        ("layer_norm", (rows, cols), "xwb"),
        ("cross_entropy", (rows, 1000 if not small else 50), "xt"),
        ("sdpa", (B, H, L, D), "qkv"),
        ("sdpa causal", (B, H, L, D), "qkv"),
        ("matmul", (N, N), "ab"),
    ]


def _inputs(name, shape, kinds, rng):
    arrs = {}
    for k in kinds:
        if k in "wb":
            arrs[k] = rng.standard_normal(shape[-1]).astype(np.float32)
        elif k == "t":
            arrs[k] = rng.integers(0, shape[-1], size=shape[:-1]).astype(np.int64)
        else:
            arrs[k] = rng.standard_normal(shape).astype(np.float32)
    return arrs


def _ember_fn(name):
    return {"softmax_last_dim": lambda a: ops.softmax_last_dim(a["x"]),
            "rms_norm": lambda a: ops.rms_norm(a["x"], a["w"], 1e-5),
            "layer_norm": lambda a: ops.layer_norm(a["x"], a["w"], a["b"], 1e-5),
            "cross_entropy": lambda a: F_em.cross_entropy(a["x"], a["t"]),
            "sdpa": lambda a: ops.sdpa(a["q"], a["k"], a["v"]),
            "sdpa causal": lambda a: ops.sdpa(a["q"], a["k"], a["v"], causal=True),
            "matmul": lambda a: a["a"] @ a["b"]}[name]


def _torch_fn(name):
    import torch
    F = torch.nn.functional
    return {"softmax_last_dim": lambda a: torch.softmax(a["x"], -1),
            "rms_norm": lambda a: F.rms_norm(a["x"], (a["x"].shape[-1],), a["w"], 1e-5),
            "layer_norm": lambda a: F.layer_norm(a["x"], (a["x"].shape[-1],), a["w"], a["b"], 1e-5),
            "cross_entropy": lambda a: F.cross_entropy(a["x"], a["t"]),
            "sdpa": lambda a: F.scaled_dot_product_attention(a["q"], a["k"], a["v"]),
            "sdpa causal": lambda a: F.scaled_dot_product_attention(a["q"], a["k"], a["v"], is_causal=True),
            "matmul": lambda a: a["a"] @ a["b"]}[name]


def _ember_pair(name, arrs, dev):
    """(forward, forward + backward) closures on ember tensors on dev; the backward seeds ones."""
    ts = {k: em.tensor(v, device=dev) for k, v in arrs.items()}
    var = {k: em.Var(v, device=dev) if k != "t" else ts[k] for k, v in arrs.items()}
    f = _ember_fn(name)

    def fwd():
        with em.no_grad():
            f(ts)

    def bwd():
        f(var).sum().backward()

    return fwd, bwd


def _torch_pair(name, arrs, device):
    import torch
    ts = {k: torch.from_numpy(v).to(device) for k, v in arrs.items()}
    var = {k: (v.clone().requires_grad_() if v.is_floating_point() else v) for k, v in ts.items()}
    f = _torch_fn(name)

    def fwd():
        with torch.no_grad():
            f(ts)

    def bwd():
        f(var).sum().backward()

    return fwd, bwd


def _mlx_pair(name, arrs):
    """MLX on the Apple GPU: (forward, forward + backward by mx.grad) closures, or None without MLX."""
    try:
        import mlx.core as mx
    except ImportError:
        return None
    mx.set_default_device(mx.gpu)
    ts = {k: mx.array(v) for k, v in arrs.items()}
    D = arrs[next(iter(arrs))].shape[-1]
    f = {"softmax_last_dim": lambda a: mx.softmax(a["x"], axis=-1),
         "rms_norm": lambda a: mx.fast.rms_norm(a["x"], a["w"], 1e-5),
         "layer_norm": lambda a: mx.fast.layer_norm(a["x"], a["w"], a["b"], 1e-5),
         "cross_entropy": lambda a: mx.mean(mx.logsumexp(a["x"], axis=-1)
                                            - mx.take_along_axis(a["x"], a["t"][..., None], axis=-1)[..., 0]),
         "sdpa": lambda a: mx.fast.scaled_dot_product_attention(a["q"], a["k"], a["v"], scale=D ** -0.5),
         "sdpa causal": lambda a: mx.fast.scaled_dot_product_attention(a["q"], a["k"], a["v"], scale=D ** -0.5,
                                                                       mask="causal"),
         "matmul": lambda a: a["a"] @ a["b"]}[name]
    floats = [k for k in ts if k != "t"]

    def loss(*xs):
        return mx.sum(f({**ts, **dict(zip(floats, xs))}))

    grad = mx.grad(loss, argnums=tuple(range(len(floats))))
    return (lambda: mx.eval(f(ts)), lambda: mx.eval(grad(*[ts[k] for k in floats])))


def _torch_device(kind):
    try:
        import torch
    except ImportError:
        return None, None
    if kind == "cuda" and torch.cuda.is_available():
        return "cuda", torch.cuda.synchronize
    if kind == "metal" and torch.backends.mps.is_available():
        return "mps", torch.mps.synchronize
    return None, None


def run(kind, reps=20, allow_emulator=False):
    """Times each fused op (forward, and forward + backward through autograd) and matmul on the GPU `kind`
    ("metal" or "cuda") beside torch on the same GPU, and prints ms and ratios (above 1: ember faster).

    Args:
        kind: "metal" or "cuda".
        reps: timed calls per case (the best counts).
        allow_emulator: run on an emulated device with small shapes (a check of this script, not a benchmark).

    Raises:
        SystemExit: when the device is emulated (without allow_emulator) or absent.
    """
    mod = em.cuda if kind == "cuda" else em.metal
    real = "nvidia" if kind == "cuda" else "apple"
    backend = mod.backend()
    if backend != real and not (allow_emulator and backend == "emulator"):
        raise SystemExit(f"bench_fused --device {kind} needs a real GPU (em.{kind}.backend() is {backend!r}): an "
                         "emulator runs kernels as C++ on the CPU, so its timings say nothing about a GPU.")
    small = backend != real
    dev = em.Device(kind, 0)
    tdev, tsync = _torch_device(kind)
    rng = np.random.default_rng(0)
    print(f"# {mod.describe()}; torch on {tdev or '-'}; float32; ms, best of {reps}"
          + ("; EMULATED, small shapes: not a benchmark" if small else ""))
    with_mlx = kind == "metal" and not small
    print(f"{'op':<18}{'shape':<18}{'dir':<9}{'ember':>9}{'torch':>9} | {'vs torch':>8}"
          + (f"{'mlx':>9}{'vs mlx':>8}" if with_mlx else ""))
    for name, shape, kinds in _cases(small):
        arrs = _inputs(name, shape, kinds, rng)
        mine = _ember_pair(name, arrs, dev)
        theirs = _torch_pair(name, arrs, tdev) if tdev else (None, None)
        mlx = (_mlx_pair(name, arrs) if with_mlx else None) or (None, None)
        for i, d in enumerate(("fwd", "fwd+bwd")):
            e = _best_ms(mine[i], mod.synchronize, reps)
            t = _best_ms(theirs[i], tsync, reps) if theirs[i] else None
            m = _best_ms(mlx[i], lambda: None, reps) if mlx[i] else None
            line = f"{name:<18}{'x'.join(map(str, shape)):<18}{d:<9}{e:9.3f}" + _cols(t, e)
            print(line + (_cols(m, e) if with_mlx else ""), flush=True)


def _cols(theirs, ember_ms):
    """A library's ms and its ratio to ember's (above 1: ember faster), or dashes without it."""
    if theirs is None:
        return f"{'-':>9} | {'-':>8}"
    return f"{theirs:9.3f} | {theirs / ember_ms:7.2f}x"
