"""Fused ops vs torch (same threads), MLX (CPU), a numpy composite and the copy limit, in one run.

Prints one row per (op, shape, dtype, direction) with milliseconds (best of N) and ratios; a ratio
above 1 means ember is faster. `copy%` is the fraction of the memory limit the forward reaches (the
time to copy the input's bytes into a preallocated buffer divided by ember's time).

ember, torch and the copy are timed in rounds (best_ms_rounds): each round gives each of them in turn
a pause, a warm-up and three timed calls, and the best call over the rounds counts. So all three sample
the same stretch of time on a shared machine, whose speed drifts by up to ~40% over seconds to minutes
(timed one after the other, a row's ratio moved with that drift: the same sdpa forward gave 0.75x and
1.19x in two runs of one hour). Nine rounds by default: with five, one fast stretch that fell on one
library's turn and not on the other's could decide a row (one run's torch sdpa forward took 19.4 ms
once and 24-27 ms in every other run). MLX and the numpy composite, 10-100x slower, are timed after
them.

The generation rows (sdpa decode and the KV-cache step) stream K and V once per call; their `copy`
column is the read floor instead: a plain read of the same K and V bytes (the faster of numpy sums of
equal slices on as many threads as ember and torch get and ember's own sum), timed in the same rounds
after the same cache flush, so `copy%` says how close the row is to the machine's read bandwidth.

Every timed call starts with cold caches (a buffer twice the last-level cache is rewritten before it,
outside the timing), for every library alike: the copy is then the memory limit it stands for. Called
back to back, an 8 MB copy keeps its 16 MB in this machine's 32 MB L3 and runs at L3 speed (0.47 ms
for the bf16 32768x128 copy, against ~1.0 ms from memory), which a compute-bound kernel cannot match.
Usage: python bench/bench_fused.py [--rounds N] [--reps N] [--quick] [--device cpu|metal|cuda [--allow-emulator]]
"""
from __future__ import annotations

import argparse
import functools
import platform
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from timing import settle_and_warm

import ember as em
from ember import backprop
from ember.nn import ops
from ember.softmax import softmax_last_dim

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
try:
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
except (ImportError, RuntimeError, ValueError):  # pragma: no cover  (mlx missing or no CPU backend)
    mx = None

SHAPES = [(4096, 4096), (32768, 128), (64, 65536), (32, 65536)]


def _llc_bytes():
    """The last-level cache's size (Linux sysfs), or 32 MiB when it cannot be read."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            v = f.read().strip().upper()
        return int(v[:-1]) << (20 if v.endswith("M") else 10) if v[-1] in "KM" else int(v)
    except (OSError, ValueError, IndexError):
        return 32 << 20


_FLUSH = np.zeros(2 * _llc_bytes() // 8)


def flush_caches():
    """Rewrites a buffer twice the last-level cache, so the next call finds its data in memory."""
    np.add(_FLUSH, 1.0, out=_FLUSH)


def best_ms_rounds(fns, reps, burst=3, pause=0.2):
    """Best time in ms of each of fns, measured in `reps` rounds; in a round each fn in turn gets a pause
    (the spinning workers of the library timed before it settle), ~30 ms of warm-up calls (a VM's core
    comes back to speed, allocators fill) and `burst` timed calls, each after flush_caches()."""
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for k, fn in enumerate(fns):
            settle_and_warm(fn, pause)
            for _ in range(burst):
                flush_caches()
                t0 = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t0)
    return [b * 1e3 for b in best]


def best_ms(fn, reps):
    """Best of `reps` calls of fn in ms, after settle_and_warm (for the slow MLX and numpy rows)."""
    settle_and_warm(fn, 0.3)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


# ----------------------------------------------------------------------------- per-library runners
def ember_case(op, x_np, dt, w_np, b_np, g_np):
    """(fwd, bwd, kernel_bwd) closures: ember's fused op, its backward through autograd (x, weight and
    bias variables, as torch's row), and the fused backward kernel called directly."""
    edt = {"float32": em.float32, "bfloat16": em.bfloat16}[dt]
    x, w, b, g = (em.tensor(a).to_dtype(edt) for a in (x_np, w_np, b_np, g_np))
    if op == "softmax_last_dim":
        mk = lambda: ops._Softmax()
        run = lambda o: x.apply_op1(o)
        back = lambda o, y: o.bwd(x, y, g)
    elif op == "rms_norm":
        mk = lambda: ops._RmsNorm(1e-5)
        run = lambda o: x.apply_op2(w, o)
        back = lambda o, y: o.bwd(x, w, y, g)
    else:
        mk = lambda: ops._LayerNorm(1e-5)
        run = lambda o: x.apply_op3(w, b, o)
        back = lambda o, y: o.bwd(x, w, b, y, g)
    o = mk()
    y = run(o)

    def fwd():
        run(mk())

    # backward through autograd, as torch's row: every input a variable, the walk seeded with g
    xv, wv, bv = (em.Var(t) for t in (x, w, b))
    yv = {"softmax_last_dim": lambda: softmax_last_dim(xv), "rms_norm": lambda: ops.rms_norm(xv, wv, 1e-5),
          "layer_norm": lambda: ops.layer_norm(xv, wv, bv, 1e-5)}[op]()

    def bwd():
        backprop.backward(yv, seed=g)

    def kernel_bwd():  # the fused kernel alone (no variables: no weight/bias sums)
        with em.no_grad():
            back(o, y)

    return fwd, bwd, kernel_bwd


def torch_case(op, x_np, dt, w_np, b_np, g_np):
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dt]
    x, w, b, g = (torch.from_numpy(a).to(tdt) for a in (x_np, w_np, b_np, g_np))
    n = x.shape[-1]
    f = {"softmax_last_dim": lambda x, w, b: torch.softmax(x, -1),
         "rms_norm": lambda x, w, b: torch.nn.functional.rms_norm(x, (n,), w, 1e-5),
         "layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)}[op]
    with torch.no_grad():
        fwd = lambda: f(x, w, b)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    y = f(xr, wr, br)
    ins = [xr] if op == "softmax_last_dim" else [xr, wr] if op == "rms_norm" else [xr, wr, br]

    def tfwd():
        with torch.no_grad():
            fwd()

    return tfwd, lambda: torch.autograd.grad(y, ins, g, retain_graph=True)


def mlx_case(op, x_np, dt, w_np, b_np, g_np):
    mdt = {"float32": mx.float32, "bfloat16": mx.bfloat16}[dt]
    x, w, b, g = (mx.array(a).astype(mdt) for a in (x_np, w_np, b_np, g_np))
    f = {"softmax_last_dim": lambda x, w, b: mx.softmax(x, axis=-1),
         "rms_norm": lambda x, w, b: mx.fast.rms_norm(x, w, 1e-5),
         "layer_norm": lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5)}[op]
    argnums = [0] if op == "softmax_last_dim" else [0, 1] if op == "rms_norm" else [0, 1, 2]

    def fwd():
        mx.eval(f(x, w, b))

    def bwd():
        def fn(*a):
            full = [x, w, b]
            for i, v in zip(argnums, a):
                full[i] = v
            return f(*full)
        _, vjps = mx.vjp(fn, [[x, w, b][i] for i in argnums], [g])
        mx.eval(vjps)

    return fwd, bwd


def numpy_case(op, x, dt, w, b, g):
    """The composite a user would write with numpy (float32 only)."""
    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def rms(x):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w

    def ln(x):
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * w + b

    if op == "softmax_last_dim":
        y = softmax(x)
        return lambda: softmax(x), lambda: y * (g - (g * y).sum(-1, keepdims=True))
    if op == "rms_norm":
        def bwd():
            r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
            xh, gw = x * r, g * w
            return r * (gw - xh * (gw * xh).mean(-1, keepdims=True)), (g * xh).sum(0)
        return lambda: rms(x), bwd

    def bwd():
        xc = x - x.mean(-1, keepdims=True)
        r = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
        xh, gw = xc * r, g * w
        dx = r * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True))
        return dx, (g * xh).sum(0), g.sum(0)
    return lambda: ln(x), bwd


# ----------------------------------------------------------------------------- sdpa
@functools.lru_cache(maxsize=None)
def _read_pool(n):
    return ThreadPoolExecutor(n)


def read_floor(arrays):
    """Two plain reads of `arrays` on as many threads as ember and torch use: numpy sums of equal slices
    of each (numpy releases the GIL in them) and ember's sum of each. The faster one is the memory floor
    of a row that streams them once (numpy's pairwise float sums alone ran 1.5-2x slower than ember's
    AVX-512 decode here, so they measured the sum, not the memory)."""
    nt = em.get_num_threads()
    pool = _read_pool(nt)
    flat = [a.reshape(-1) for a in arrays]
    parts = [f[i * f.size // nt:(i + 1) * f.size // nt] for f in flat for i in range(nt)]
    tensors = [em.tensor(a) for a in arrays]
    return lambda: list(pool.map(np.sum, parts)), lambda: [t.sum() for t in tensors]


def sdpa_row(causal, arrays, rounds, reps, fwd_only=False):
    """ember / torch / MLX times (fwd, bwd) of one attention configuration (bwd None when fwd_only).
    causal with Lq < Lk is aligned bottom-right (a KV-cache step): torch gets that mask explicitly.
    A forward-only (generation) row also times read_floor of K and V in the same rounds: res["floor"]."""
    D = arrays[0].shape[-1]
    scale = 1 / np.sqrt(D)
    q, k, v, g = (em.tensor(a) for a in arrays)
    op = ops._Sdpa(scale, causal, None)
    y = q.apply_op3(k, v, op)

    def ebwd():
        with em.no_grad():
            op.bwd(q, k, v, y, g)

    efwd = lambda: q.apply_op3(k, v, ops._Sdpa(scale, causal, None))
    res = {}
    lq, lk = arrays[0].shape[-2], arrays[1].shape[-2]
    floor = read_floor(arrays[1:3]) if fwd_only else ()
    if torch is None:
        ef, *fl = best_ms_rounds((efwd, *floor), rounds)
        res["ember"] = ef, None if fwd_only else best_ms_rounds((ebwd,), rounds)[0]
    else:
        tq, tk, tv, tg = (torch.from_numpy(a) for a in arrays)
        F = torch.nn.functional.scaled_dot_product_attention
        kw = {"is_causal": causal} if lq == lk or not causal else {
            "attn_mask": torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)}

        def tf():
            with torch.no_grad():
                F(tq, tk, tv, **kw)

        ef, tfm, *fl = best_ms_rounds((efwd, tf, *floor), rounds)
        eb = tbm = None
        if not fwd_only:
            qr, kr, vr = (t.clone().requires_grad_() for t in (tq, tk, tv))
            ty = F(qr, kr, vr, **kw)
            tb = lambda: torch.autograd.grad(ty, (qr, kr, vr), tg, retain_graph=True)
            eb, tbm = best_ms_rounds((ebwd, tb), rounds)
        res["ember"], res["torch"] = (ef, eb), (tfm, tbm)
    if fl:
        res["floor"] = min(fl)
    if mx is not None:
        mq, mk_, mv, mg = (mx.array(a) for a in arrays)
        mask = "causal" if causal else None

        def sd(a, b, c):
            return mx.fast.scaled_dot_product_attention(a, b, c, scale=scale, mask=mask)

        res["mlx"] = (best_ms(lambda: mx.eval(sd(mq, mk_, mv)), reps),
                      None if fwd_only else best_ms(lambda: mx.eval(mx.vjp(sd, [mq, mk_, mv], [mg])[1]), reps))
    return res


def sdpa_rows(rounds, reps):
    B, H, L, D = 4, 8, 512, 64
    rng = np.random.default_rng(0)
    arrays = tuple(rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(4))
    rows = [(f"sdpa{' causal' if causal else ''}", f"{B}x{H}x{L}x{D}", "float32",
             sdpa_row(causal, arrays, rounds, reps), None) for causal in (False, True)]
    # generation: a single-query decode step and a 16-query KV-cache step over a 4096-key cache
    B, H, Lk, D = 1, 32, 4096, 128
    kv = tuple(rng.standard_normal((B, H, Lk, D)).astype(np.float32) for _ in range(2))
    for lq, name in ((1, "sdpa decode"), (16, "sdpa kv-step causal")):
        q, g = (rng.standard_normal((B, H, lq, D)).astype(np.float32) for _ in range(2))
        res = sdpa_row(lq > 1, (q, *kv, g), rounds, reps, fwd_only=True)
        rows.append((name, f"{B}x{H}x{lq}x{Lk}x{D}", "float32", res, res.pop("floor")))
    return rows


# ----------------------------------------------------------------------------- rope
def rope_rows(rounds, reps):
    """Fused rope (fwd, and its fused bwd) beside torch's composite (Llama's rotate_half with the cos/sin
    tables precomputed outside the timing, as models cache them) and mlx.fast.rope."""
    B, H, L, D = 1, 32, 4096, 128
    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(2))
    ex, eg = em.tensor(x), em.tensor(g)
    op = ops._Rope(D, False, 10000.0, 1.0, 0, None, None)
    y = ex.apply_op1(op)

    def ebwd():
        with em.no_grad():
            op.bwd(ex, y, eg)

    efwd = lambda: ex.apply_op1(ops._Rope(D, False, 10000.0, 1.0, 0, None, None))
    res = {}
    if torch is None:
        res["ember"] = best_ms_rounds((efwd,), rounds)[0], best_ms_rounds((ebwd,), rounds)[0]
    else:
        inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
        ang = torch.outer(torch.arange(L, dtype=torch.float32), inv)
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

        def trope(t):
            return t * cos + torch.cat([-t[..., D // 2:], t[..., :D // 2]], -1) * sin

        tx, tg = torch.from_numpy(x), torch.from_numpy(g)

        def tf():
            with torch.no_grad():
                trope(tx)

        xr = tx.clone().requires_grad_()
        ty = trope(xr)
        tb = lambda: torch.autograd.grad(ty, (xr,), tg, retain_graph=True)
        (ef, tfm), (eb, tbm) = best_ms_rounds((efwd, tf), rounds), best_ms_rounds((ebwd, tb), rounds)
        res["ember"], res["torch"] = (ef, eb), (tfm, tbm)
    if mx is not None:
        mxx, mg = mx.array(x), mx.array(g)

        def mr(a):
            return mx.fast.rope(a, D, traditional=False, base=10000.0, scale=1.0, offset=0)

        res["mlx"] = (best_ms(lambda: mx.eval(mr(mxx)), reps), best_ms(lambda: mx.eval(mx.vjp(mr, [mxx], [mg])[1]), reps))
    return [("rope", f"{B}x{H}x{L}x{D}", "float32", res, None)]


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds of ember, torch and the copy")
    ap.add_argument("--reps", type=int, default=5, help="best of N calls for MLX (numpy: N // 3, at least 2)")
    ap.add_argument("--quick", action="store_true", help="only the 32768x128 shape, sdpa and rope")
    ap.add_argument("--only", choices=["attention"], help="attention: only the sdpa and rope rows")
    ap.add_argument("--device", default="cpu", choices=["cpu", "metal", "cuda"],
                    help="metal / cuda: ember's GPU kernels beside torch on the same GPU (bench/fused_gpu.py)")
    ap.add_argument("--allow-emulator", action="store_true",
                    help="with --device metal|cuda: run on an emulated device with small shapes (checks the script)")
    args = ap.parse_args()
    if args.device != "cpu":
        import fused_gpu  # bench/fused_gpu.py, next to this script

        fused_gpu.run(args.device, allow_emulator=args.allow_emulator)
        return
    nt = em.get_num_threads()
    if torch is not None:
        torch.set_num_threads(nt)
    print(f"# ember fused ops, {platform.machine()} {platform.processor() or ''}, {nt} threads "
          f"(torch {torch.__version__ if torch else '-'} with {nt}; mlx {mx.__version__ if mx else '-'} CPU, "
          f"its own threads), {time.strftime('%Y-%m-%d %H:%M')}")
    rng = np.random.default_rng(0)
    rows = []
    shapes = [] if args.only else [(32768, 128)] if args.quick else SHAPES
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal(shape[1]).astype(np.float32)
        b = rng.standard_normal(shape[1]).astype(np.float32)
        for dt in ("float32", "bfloat16"):
            # the copy limit: the input's bytes copied into a preallocated buffer
            src = x if dt == "float32" else x.view(np.uint16)[:, ::2].copy()
            copy = functools.partial(np.copyto, np.empty_like(src), src)
            for op in ("softmax_last_dim", "rms_norm", "layer_norm"):
                efwd, ebwd, _ = ember_case(op, x, dt, w, b, g)
                if torch is not None:
                    tfwd, tbwd = torch_case(op, x, dt, w, b, g)
                    fwd_ms, copy_ms, tf_ms = best_ms_rounds((efwd, copy, tfwd), args.rounds)
                    bwd_ms, tb_ms = best_ms_rounds((ebwd, tbwd), args.rounds)
                    res = {"ember": [fwd_ms, bwd_ms], "torch": [tf_ms, tb_ms]}
                else:
                    fwd_ms, copy_ms = best_ms_rounds((efwd, copy), args.rounds)
                    res = {"ember": [fwd_ms, best_ms_rounds((ebwd,), args.rounds)[0]]}
                if mx is not None:
                    res["mlx"] = [best_ms(f, args.reps) for f in mlx_case(op, x, dt, w, b, g)]
                if dt == "float32":
                    res["numpy"] = [best_ms(f, max(2, args.reps // 3)) for f in numpy_case(op, x, dt, w, b, g)]
                rows.append((op, f"{shape[0]}x{shape[1]}", dt, res, copy_ms))
                print_row(rows[-1], header=len(rows) == 1)
    for r in sdpa_rows(args.rounds, max(3, args.reps - 1)) + rope_rows(args.rounds, max(3, args.reps - 1)):
        rows.append(r)
        print_row(r, header=False)
    worst = min((res["torch"][i] / res["ember"][i] for _, _, _, res, _ in rows if "torch" in res for i in (0, 1)
                 if res["ember"][i] is not None), default=None)
    print(f"# worst ember/torch speed ratio over all rows: {worst:.2f}x" if worst is not None
          else "# no torch rows (torch is not installed)")
    print("# copy on the sdpa decode / kv-step rows: the read floor, a plain read of their K and V (the "
          f"faster of numpy's and ember's sums, {nt} threads) after the same cache flush")


def print_row(row, header):
    op, shape, dt, res, copy_ms = row
    if header:
        print(f"{'op':<20}{'shape':<17}{'dtype':<9}{'dir':<4}{'ember':>8}{'torch':>8}{'mlx':>8}{'numpy':>8}"
              f"{'copy':>7} | {'vs torch':>8}{'vs mlx':>8}{'vs numpy':>9}{'copy%':>7}")
    for i, d in enumerate(("fwd", "bwd")):
        e = res["ember"][i]
        if e is None:  # a forward-only row (generation)
            continue
        cols = [res.get(k, (None, None))[i] for k in ("torch", "mlx", "numpy")]
        ms = "".join(f"{c:8.2f}" if c is not None else f"{'-':>8}" for c in [e] + cols)
        cp = f"{copy_ms:7.2f}" if copy_ms is not None and d == "fwd" else f"{'':7}"
        ratios = "".join(f"{c / e:{w}.2f}x" if c is not None else f"{'-':>{w + 1}}"
                         for c, w in zip(cols, (7, 7, 8)))
        pct = f"{100 * copy_ms / e:6.0f}%" if copy_ms is not None and d == "fwd" else ""
        print(f"{op:<20}{shape:<17}{dt:<9}{d:<4}{ms}{cp} | {ratios}{pct}", flush=True)


if __name__ == "__main__":
    main()
