"""nn layers at model shapes beside torch (CPU, same thread count): norms, pooling, resampling, attention
and a ResNet basic block, forward and forward + backward, as a markdown table; then the activations
beside torch and MLX (where MLX has the op and is installed), in a second table.

    python bench/bench_nn.py [--threads N] [--reps R] [--only SUBSTRING]

Each cell is the median of R calls, the libraries alternating call by call so machine noise hits
both alike. The ratio is torch's time over ember's: above 1 means ember is faster.
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


def _pair(make):
    """(ember leaf list, torch leaf list) of the same float32 data; make() gives numpy arrays."""
    arrays = make()
    return [em.Var(a) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]


def row(name, em_fn, torch_fn, make):
    ev, tv = _pair(make)
    ec, tc = [em.tensor(v.numpy()) for v in ev], [torch.tensor(v.detach().numpy()) for v in tv]

    def em_fwd():
        with em.no_grad():
            em_fn(*ec)

    def torch_fwd():
        with torch.no_grad():
            torch_fn(*tc)

    def em_both():
        em_fn(*ev).sum().backward()

    def torch_both():
        for t in tv:
            t.grad = None
        torch_fn(*tv).sum().backward()

    a, b = median_ms([em_fwd, torch_fwd], args.reps)
    c, d = median_ms([em_both, torch_both], args.reps)
    print(f"| {name} | {a:.2f} ms | {b:.2f} ms | {b / a:.2f}x | {c:.2f} ms | {d:.2f} ms | {d / c:.2f}x |", flush=True)


def main():
    rng = np.random.default_rng(0)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    rm, rv = np.zeros(64, np.float32), np.ones(64, np.float32)
    e_bn2 = em.nn.BatchNorm2d(64)
    t_bn2 = torch.nn.BatchNorm2d(64)
    e_bn1, t_bn1 = em.nn.BatchNorm1d(1024), torch.nn.BatchNorm1d(1024)

    def em_block(x, w1, w2):
        h = em.nn.batch_norm(em.nn.conv2d(x, w1, padding=1), None, None, training=True).relu()
        return (em.nn.batch_norm(em.nn.conv2d(h, w2, padding=1), None, None, training=True) + x).relu()

    def torch_block(x, w1, w2):
        h = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, training=True))
        return F.relu(F.batch_norm(F.conv2d(h, w2, padding=1), None, None, training=True) + x)

    mha_e, mha_t = em.nn.MultiHeadAttention(512, 8), torch.nn.MultiheadAttention(512, 8, batch_first=True)
    mha_e.load_state_dict({k: em.tensor(v.detach().numpy()) for k, v in mha_t.state_dict().items()})
    rows = [
        ("group_norm (N=8, C=128, 32x32, G=32)", lambda x, w, b: em.nn.group_norm(x, 32, w, b),
         lambda x, w, b: F.group_norm(x, 32, w, b), lambda: [f32(8, 128, 32, 32), f32(128), f32(128)]),
        ("group_norm (N=1, C=512, 64x64, G=32, SD VAE)", lambda x, w, b: em.nn.group_norm(x, 32, w, b),
         lambda x, w, b: F.group_norm(x, 32, w, b), lambda: [f32(1, 512, 64, 64), f32(512), f32(512)]),
        ("group_norm (N=1, C=128, 256x256, G=32, SD VAE)", lambda x, w, b: em.nn.group_norm(x, 32, w, b),
         lambda x, w, b: F.group_norm(x, 32, w, b), lambda: [f32(1, 128, 256, 256), f32(128), f32(128)]),
        ("batch_norm train (N=8, C=64, 56x56)", lambda x, w, b: em.nn.batch_norm(x, None, None, w, b, True),
         lambda x, w, b: F.batch_norm(x, None, None, w, b, True), lambda: [f32(8, 64, 56, 56), f32(64), f32(64)]),
        ("batch_norm eval (N=8, C=64, 56x56)",
         lambda x, w, b: em.nn.batch_norm(x, em.tensor(rm), em.tensor(rv), w, b, False),
         lambda x, w, b: F.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b, False),
         lambda: [f32(8, 64, 56, 56), f32(64), f32(64)]),
        ("BatchNorm2d module train (N=8, C=64, 56x56)", lambda x: e_bn2(x), lambda x: t_bn2(x),
         lambda: [f32(8, 64, 56, 56)]),
        ("BatchNorm1d module train (N=512, C=1024, an MLP's)", lambda x: e_bn1(x), lambda x: t_bn1(x),
         lambda: [f32(512, 1024)]),
        ("max_pool2d 3x3 s2 p1 (N=8, C=64, 112x112, ResNet stem)", lambda x: em.nn.max_pool2d(x, 3, 2, 1),
         lambda x: F.max_pool2d(x, 3, 2, 1), lambda: [f32(8, 64, 112, 112)]),
        ("max_pool2d 2x2 (N=8, C=64, 56x56)", lambda x: em.nn.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 2),
         lambda: [f32(8, 64, 56, 56)]),
        ("avg_pool2d 3x3 s2 p1 (N=8, C=64, 56x56)", lambda x: em.nn.avg_pool2d(x, 3, 2, 1),
         lambda x: F.avg_pool2d(x, 3, 2, 1), lambda: [f32(8, 64, 56, 56)]),
        ("adaptive_avg_pool2d -> 1 (N=8, C=512, 7x7)", lambda x: em.nn.adaptive_avg_pool2d(x, 1),
         lambda x: F.adaptive_avg_pool2d(x, 1), lambda: [f32(8, 512, 7, 7)]),
        ("mean((2, 3)) (N=8, C=512, 7x7)", lambda x: x.mean((2, 3)), lambda x: x.mean((2, 3)),
         lambda: [f32(8, 512, 7, 7)]),
        ("max_pool1d k2 (N=4, C=384, L=3000)", lambda x: em.nn.max_pool1d(x, 2), lambda x: F.max_pool1d(x, 2),
         lambda: [f32(4, 384, 3000)]),
        ("interpolate nearest x2 (N=1, C=256, 64x64)", lambda x: em.nn.interpolate(x, scale_factor=2),
         lambda x: F.interpolate(x, scale_factor=2), lambda: [f32(1, 256, 64, 64)]),
        ("interpolate bilinear x2 (N=1, C=256, 64x64)",
         lambda x: em.nn.interpolate(x, scale_factor=2, mode="bilinear"),
         lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), lambda: [f32(1, 256, 64, 64)]),
        ("interpolate nearest x2 (N=1, C=512, 64x64, SD VAE upsampler)",
         lambda x: em.nn.interpolate(x, scale_factor=2.0), lambda x: F.interpolate(x, scale_factor=2.0),
         lambda: [f32(1, 512, 64, 64)]),
        ("interpolate bilinear x2 align_corners (N=1, C=512, 64x64)",
         lambda x: em.nn.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
         lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True), lambda: [f32(1, 512, 64, 64)]),
        ("interpolate linear x2 (N=4, C=256, L=1500)", lambda x: em.nn.interpolate(x, scale_factor=2, mode="linear"),
         lambda x: F.interpolate(x, scale_factor=2, mode="linear"), lambda: [f32(4, 256, 1500)]),
        ("avg_pool1d k2 (N=4, C=384, L=3000)", lambda x: em.nn.avg_pool1d(x, 2), lambda x: F.avg_pool1d(x, 2),
         lambda: [f32(4, 384, 3000)]),
        ("adaptive_avg_pool2d -> 7x7 (N=8, C=512, 14x14)", lambda x: em.nn.adaptive_avg_pool2d(x, 7),
         lambda x: F.adaptive_avg_pool2d(x, 7), lambda: [f32(8, 512, 14, 14)]),
        ("adaptive_avg_pool2d -> 5x5 (N=8, C=256, 13x13)", lambda x: em.nn.adaptive_avg_pool2d(x, 5),
         lambda x: F.adaptive_avg_pool2d(x, 5), lambda: [f32(8, 256, 13, 13)]),
        ("MultiHeadAttention self (B=4, L=256, E=512, H=8)", lambda x: mha_e(x, is_causal=True)[0],
         lambda x: mha_t(x, x, x, need_weights=False, is_causal=True,
                         attn_mask=torch.nn.Transformer.generate_square_subsequent_mask(256))[0],
         lambda: [f32(4, 256, 512)]),
        ("ResNet basic block (conv3x3-BN-ReLU x2 + skip, N=8, C=64, 56x56)", em_block, torch_block,
         lambda: [f32(8, 64, 56, 56), f32(64, 64, 3, 3) * 0.05, f32(64, 64, 3, 3) * 0.05]),
        ("cross_entropy smoothing 0.1 (4096 x 32000)",
         lambda x: em.nn.cross_entropy(x, em.tensor(tgt), label_smoothing=0.1),
         lambda x: F.cross_entropy(x, torch.tensor(tgt), label_smoothing=0.1), lambda: [f32(4096, 32000) * 0.1]),
    ]
    tgt = rng.integers(0, 32000, size=4096)
    print(f"# nn benchmark, {args.threads} threads, torch {torch.__version__}, ember {em._C.isa()} kernels, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print("| case | ember fwd | torch fwd | torch / ember | ember fwd+bwd | torch fwd+bwd | torch / ember |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, ef, tf, make in rows:
        if args.only in name:
            row(name, ef, tf, make)
    activations(rng)


def mlx_pair(mlx_fn, arrays):
    """(forward, forward + backward) calls of an MLX function on copies of ``arrays``; None without MLX."""
    try:
        import mlx.core as mx
    except ImportError:
        return None
    xs = [mx.array(a) for a in arrays]
    grad = mx.grad(lambda *v: mlx_fn(*v).sum(), argnums=list(range(len(xs))))
    return (lambda: mx.eval(mlx_fn(*xs))), (lambda: mx.eval(grad(*xs)))


def act_row(name, em_fn, torch_fn, mlx_fn, make):
    """One activation row: ember, torch and MLX (a dash where MLX lacks the op), fwd and fwd + bwd."""
    arrays = make()
    ev, tv = [em.Var(a) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]
    ec, tc = [em.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]

    def em_fwd():
        with em.no_grad():
            em_fn(*ec)

    def torch_fwd():
        with torch.no_grad():
            torch_fn(*tc)

    def em_both():
        em_fn(*ev).sum().backward()

    def torch_both():
        for t in tv:
            t.grad = None
        torch_fn(*tv).sum().backward()

    m = mlx_pair(mlx_fn, arrays) if mlx_fn is not None else None
    fwd = median_ms([em_fwd, torch_fwd] + ([m[0]] if m else []), args.reps)
    both = median_ms([em_both, torch_both] + ([m[1]] if m else []), args.reps)
    cells = []
    for e, t, *x in (fwd, both):
        cells += [f"{e:.2f} ms", f"{t:.2f} ms", f"{x[0]:.2f} ms" if x else "-", f"{t / e:.2f}x"]
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def activations(rng):
    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 3

    try:
        import mlx.nn as mnn
    except ImportError:
        mnn = None

    def mx_fn(name, **kw):
        f = getattr(mnn, name, None) if mnn is not None else None
        return (lambda x: f(x, **kw)) if f is not None else None

    shape = (4, 1024, 1024)
    rows = [
        ("gelu tanh", lambda x: em.nn.functional.gelu(x, approximate="tanh"),
         lambda x: F.gelu(x, approximate="tanh"), mx_fn("gelu_approx")),
        ("mish", em.nn.mish, F.mish, mx_fn("mish")),
        ("elu", em.nn.elu, F.elu, mx_fn("elu")),
        ("leaky_relu 0.01", em.nn.leaky_relu, F.leaky_relu, mx_fn("leaky_relu")),
        ("softplus", em.nn.softplus, F.softplus, mx_fn("softplus")),
        ("softplus beta=2, threshold=10", lambda x: em.nn.softplus(x, 2.0, 10.0), lambda x: F.softplus(x, 2.0, 10.0),
         None),
        ("hardswish", em.nn.hardswish, F.hardswish, mx_fn("hardswish")),
        ("hardsigmoid", em.nn.hardsigmoid, F.hardsigmoid, None),
    ]
    print(f"\n# activations, float32 {' x '.join(map(str, shape))}, {args.threads} threads")
    print("| case | ember fwd | torch fwd | MLX fwd | torch / ember | ember fwd+bwd | torch fwd+bwd | MLX fwd+bwd "
          "| torch / ember |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, ef, tf, mf in rows:
        name = f"{name} ({' x '.join(map(str, shape))})"
        if args.only in name:
            act_row(name, ef, tf, mf, lambda: [f32(*shape)])


if __name__ == "__main__":
    main()
