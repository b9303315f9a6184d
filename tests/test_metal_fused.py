"""ember's fused Metal kernels (metal/softmax.metal, norm.metal, act.metal, sdpa.metal) run under the MSL
emulator against ember's CPU fused ops in float64: every kernel x dtype x (contiguous, strided), forward
and backward. The kernel files are read from the tree, so these tests need no rebuild."""
import math
import os
import pathlib

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# (rtol, atol) of a kernel computing in float against a float64 reference, after rounding to the dtype
TOL = {"float32": (2e-5, 2e-6), "float16": (3e-3, 2e-3), "bfloat16": (2e-2, 1.5e-2)}
ROW_DIMS = 8  # kRowDims of the kernels' RowLayout
LAYOUTS = ["contiguous", "strided"]


def source(name):
    return (ROOT / "metal" / name).read_text()


def run(file, name, args, grid, group, tg_mem=()):
    _T.metal_emu_run(source(file), name, args, list(grid), list(group), threadgroup_memory=list(tg_mem),
                      label=file)


def cdiv(a, b):
    return -(-a // b)


def i64s(*vals):
    return np.array(vals, np.int64).tobytes()


class Strided:
    """A numpy view of `shape` into a larger base array (offset, steps, a reversed and a transposed dim
    when strided), and what a kernel needs to read it: the base buffer, the offset and strides."""

    def __init__(self, rng, shape, dt, layout, scale=1.0, lo=None):
        vals = rng.standard_normal(shape) * scale
        if lo is not None:
            vals = np.abs(vals) + lo
        if layout == "contiguous":
            self.base = np.ascontiguousarray(vals.astype(dt))
            self.view = self.base
        else:
            nd = len(shape)
            perm = list(range(nd))
            if nd >= 2:  # the last dim becomes non-contiguous: the kernels' strided read path
                perm[-1], perm[-2] = perm[-2], perm[-1]
            tshape = [shape[p] for p in perm]
            big = np.zeros([2 * s + 3 for s in tshape], dt)
            sl = tuple(slice(3, 3 + 2 * s, 2) for s in tshape)
            inner = big[sl][..., ::-1] if nd else big[sl]  # a negative stride too
            inner[...] = vals.transpose(perm)[..., ::-1].astype(dt) if nd else vals.astype(dt)
            inv = np.argsort(perm)
            self.base = big
            self.view = inner.transpose(inv)
        isz = self.base.itemsize
        self.strides = [s // isz for s in self.view.strides]
        self.offset = (self.view.__array_interface__["data"][0] - self.base.__array_interface__["data"][0]) // isz
        self.f64 = np.ascontiguousarray(self.view).astype(np.float64)

    def row_layout(self):
        outer = self.view.shape[:-1]
        assert len(outer) <= ROW_DIMS
        shape = list(outer) + [1] * (ROW_DIMS - len(outer))
        stride = self.strides[:-1] + [0] * (ROW_DIMS - len(outer))
        return [self.offset, self.strides[-1], len(outer)] + shape + stride


def check(got, want, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol * scale)


def ref(fn, *arrays):
    """fn over float64 CPU tensors (ember's CPU fused ops) -> numpy."""
    return fn(*[em.tensor(a, device=em.cpu) for a in arrays]).numpy()


def ref_grads(fn, grad_out, *arrays):
    """The gradients of sum(fn(*arrays) * grad_out) with respect to each array, on CPU in float64."""
    vs = [em.Var(em.tensor(a, device=em.cpu)) for a in arrays]
    loss = (fn(*vs) * em.tensor(grad_out, device=em.cpu)).sum()
    gs = loss.backward()
    return [gs[v].numpy() for v in vs]


# ----------------------------------------------------------------------------- softmax
SOFTMAX_SHAPES = [(1, 1), (3, 7), (2, 3, 100), (3, 256), (5, 1000), (2, 9000), (1, 20000)]


# The emulator's per-pipeline thread limit (CI's Metal run lowers it): the host sizes groups from it.
LIMIT = int(os.environ.get("EMBER_METAL_EMU_MAX_THREADS") or 1024)


def softmax_launch(n):
    """(kernel kind, threads per group) as the host chooses them: a simdgroup per row for short rows,
    the block kernel while the row fits a threadgroup's registers, else the looped one."""
    if n <= 8 * 32:
        return "simd", min(256, LIMIT)
    if n <= 8 * LIMIT:
        return "block", min(LIMIT, max(32, cdiv(cdiv(n, 8), 32) * 32))
    return "looped", LIMIT


def softmax_grid(kind, tpg, rows):
    """The simd kernel's groups hold tpg / 32 rows; the others one row each."""
    return (tpg, cdiv(rows, tpg // 32) if kind == "simd" else rows, 1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
def test_softmax_forward(shape, log, dtype, layout, rng):
    x = Strided(rng, shape, DTYPES[dtype], layout, scale=3.0)
    n, rows = shape[-1], math.prod(shape[:-1])
    out = np.zeros(rows * n, DTYPES[dtype])
    kind, tpg = softmax_launch(n)
    args = i64s(*x.row_layout(), *x.row_layout(), n, rows)
    pre = "log_softmax" if log else "softmax"
    run("softmax.metal", f"{pre}_fwd_{kind}_{dtype}", [x.base, out, args], softmax_grid(kind, tpg, rows), (tpg, 1, 1))
    fn = em.nn.ops.log_softmax if log else em.nn.ops.softmax
    check(out.reshape(shape), ref(fn, x.f64), dtype)


@pytest.mark.parametrize("kind,n,group", [("block", 300, 64), ("looped", 300, 64), ("simd", 200, 64),
                                          ("block", 200, 32), ("simd", 9, 256)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_kernels_agree_on_the_rows_they_all_take(kind, n, group, log, rng):
    # a row length each of them handles, under other group sizes than the host's (rows past the grid idle)
    x = Strided(rng, (11, n), np.float32, "strided", scale=4.0)
    out = np.zeros(11 * n, np.float32)
    args = i64s(*x.row_layout(), *x.row_layout(), n, 11)
    pre = "log_softmax" if log else "softmax"
    run("softmax.metal", f"{pre}_fwd_{kind}_float32", [x.base, out, args], softmax_grid(kind, group, 11), (group, 1, 1))
    fn = em.nn.ops.log_softmax if log else em.nn.ops.softmax
    check(out.reshape(11, n), ref(fn, x.f64), "float32")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 100), (3, 600), (2, 9000)])
def test_softmax_backward(shape, log, dtype, layout, rng):
    dt = DTYPES[dtype]
    fn = em.nn.ops.log_softmax if log else em.nn.ops.softmax
    x = rng.standard_normal(shape) * 2
    yv = ref(fn, x)
    y = Strided(rng, shape, dt, layout)
    y.view[...] = yv.astype(dt)  # the forward's output, as the backward gets it
    y.f64 = np.ascontiguousarray(y.view).astype(np.float64)
    g = Strided(rng, shape, dt, layout)
    n, rows = shape[-1], math.prod(shape[:-1])
    out = np.zeros(rows * n, dt)
    kind, tpg = softmax_launch(n)
    args = i64s(*y.row_layout(), *g.row_layout(), n, rows)
    pre = "log_softmax" if log else "softmax"
    run("softmax.metal", f"{pre}_bwd_{kind}_{dtype}", [y.base, g.base, out, args], softmax_grid(kind, tpg, rows),
        (tpg, 1, 1))
    # the backward formula on the rounded y, in float64
    if log:
        want = g.f64 - np.exp(y.f64) * g.f64.sum(-1, keepdims=True)
    else:
        want = y.f64 * (g.f64 - (g.f64 * y.f64).sum(-1, keepdims=True))
    check(out.reshape(shape), want, dtype, scale=4.0)
    # and the formula is the CPU op's gradient
    if dtype == "float32" and layout == "contiguous":
        (gx,) = ref_grads(fn, g.f64, x)
        np.testing.assert_allclose(out.reshape(shape), gx, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- rms_norm / layer_norm
NORM_SHAPES = [(1, 1), (4, 33), (2, 3, 64), (3, 1500)]


def norm_args(x, g, n, rows, w=None, b=None, chunk=1, nchunks=1, eps=1e-5, has_w=1, has_b=1, has_mean=1):
    """The bytes of a NormArgs (see metal/norm.metal)."""
    wl = [w.offset, w.strides[0]] if w is not None else [0, 0]
    bl = [b.offset, b.strides[0]] if b is not None else [0, 0]
    return (i64s(*x.row_layout(), *(g or x).row_layout(), n, rows, *wl, *bl, chunk, nchunks)
            + np.float32(eps).tobytes() + np.array([has_w, has_b, has_mean], np.uint32).tobytes())


def row_group(n):
    """Threads per row as the host picks them: enough for 4 elements each, in whole simdgroups."""
    return min(LIMIT, max(32, cdiv(cdiv(n, 4), 32) * 32))


def norm_param(rng, n, dt, layout, seed_shift=0.0):
    p = Strided(rng, (n,), dt, layout)
    p.view[...] = (p.f64 * 0.5 + 1.0 + seed_shift).astype(dt)
    p.f64 = np.ascontiguousarray(p.view).astype(np.float64)
    return p


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm_forward(shape, dtype, layout, rng):
    dt = DTYPES[dtype]
    n, rows = shape[-1], math.prod(shape[:-1])
    x = Strided(rng, shape, dt, layout, scale=2.0)
    w = norm_param(rng, n, dt, layout)
    y = np.zeros(rows * n, dt)
    rstd = np.zeros(rows, np.float32)
    tpg = row_group(n)
    run("norm.metal", f"rms_norm_fwd_{dtype}", [x.base, w.base, y, rstd, norm_args(x, None, n, rows, w, eps=1e-4)],
        (tpg, rows, 1), (tpg, 1, 1))
    check(y.reshape(shape), ref(lambda a, b: em.nn.ops.rms_norm(a, b, 1e-4), x.f64, w.f64), dtype)
    want_rstd = 1 / np.sqrt((x.f64 ** 2).mean(-1) + 1e-4)
    np.testing.assert_allclose(rstd, want_rstd.reshape(-1), rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward(shape, dtype, layout, affine, rng):
    dt = DTYPES[dtype]
    n, rows = shape[-1], math.prod(shape[:-1])
    x = Strided(rng, shape, dt, layout, scale=2.0)
    x.view[...] = (x.f64 + 3.0).astype(dt)  # rows far from zero: the variance needs the centred pass
    x.f64 = np.ascontiguousarray(x.view).astype(np.float64)
    w = norm_param(rng, n, dt, layout)
    b = norm_param(rng, n, dt, layout, seed_shift=-1.0)
    y = np.zeros(rows * n, dt)
    mean = np.zeros(rows, np.float32)
    rstd = np.zeros(rows, np.float32)
    tpg = row_group(n)
    args = norm_args(x, None, n, rows, w, b, has_w=int(affine), has_b=int(affine))
    wb, bb = (w.base, b.base) if affine else (x.base, x.base)  # unread placeholders without weight/bias
    run("norm.metal", f"layer_norm_fwd_{dtype}", [x.base, wb, bb, y, mean, rstd, args], (tpg, rows, 1), (tpg, 1, 1))
    if affine:
        want = ref(lambda a, p, q: em.nn.ops.layer_norm(a, p, q, 1e-5), x.f64, w.f64, b.f64)
    else:
        want = ref(lambda a: em.nn.ops.layer_norm(a, None, None, 1e-5), x.f64)
    check(y.reshape(shape), want, dtype)
    np.testing.assert_allclose(mean, x.f64.mean(-1).reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, (1 / np.sqrt(x.f64.var(-1) + 1e-5)).reshape(-1), rtol=1e-4)


def norm_params_grads(dtype, x, g, n, rows, mean, rstd, has_b, has_mean):
    """Runs the two dw/db passes (chunks of 3 rows) and returns (dw, db)."""
    dt = DTYPES[dtype]
    chunk = 3
    nchunks = max(1, cdiv(rows, chunk))
    pw = np.zeros(nchunks * n, np.float32)
    pb = np.zeros(nchunks * n, np.float32)
    args = norm_args(x, g, n, rows, chunk=chunk, nchunks=nchunks, has_b=has_b, has_mean=has_mean)
    run("norm.metal", f"norm_bwd_params_part_{dtype}", [x.base, mean, rstd, g.base, pw, pb, args],
        (n, nchunks, 1), (32, 1, 1))
    dw, db = np.zeros(n, dt), np.zeros(n, dt)
    run("norm.metal", f"norm_bwd_params_sum_{dtype}", [pw, pb, dw, db, args], (n, 1, 1), (64, 1, 1))
    return dw, db


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm_backward(shape, dtype, layout, rng):
    dt = DTYPES[dtype]
    n, rows = shape[-1], math.prod(shape[:-1])
    x = Strided(rng, shape, dt, layout)
    w = norm_param(rng, n, dt, layout)
    g = Strided(rng, shape, dt, layout)
    rstd = (1 / np.sqrt((x.f64 ** 2).mean(-1) + 1e-5)).astype(np.float32).reshape(-1)
    dx = np.zeros(rows * n, dt)
    tpg = row_group(n)
    run("norm.metal", f"rms_norm_bwd_dx_{dtype}", [x.base, w.base, rstd, g.base, dx, norm_args(x, g, n, rows, w)],
        (tpg, rows, 1), (tpg, 1, 1))
    dw, _ = norm_params_grads(dtype, x, g, n, rows, rstd, rstd, has_b=0, has_mean=0)
    want_dx, want_dw = ref_grads(lambda a, b: em.nn.ops.rms_norm(a, b, 1e-5), g.f64, x.f64, w.f64)
    check(dx.reshape(shape), want_dx, dtype, scale=4.0)
    check(dw, want_dw, dtype, scale=2.0 * math.sqrt(rows))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward(shape, dtype, layout, affine, rng):
    dt = DTYPES[dtype]
    n, rows = shape[-1], math.prod(shape[:-1])
    x = Strided(rng, shape, dt, layout)
    w = norm_param(rng, n, dt, layout)
    g = Strided(rng, shape, dt, layout)
    mean = x.f64.mean(-1).astype(np.float32).reshape(-1)
    rstd = (1 / np.sqrt(x.f64.var(-1) + 1e-5)).astype(np.float32).reshape(-1)
    dx = np.zeros(rows * n, dt)
    tpg = row_group(n)
    args = norm_args(x, g, n, rows, w, has_w=int(affine))
    run("norm.metal", f"layer_norm_bwd_dx_{dtype}", [x.base, w.base if affine else x.base, mean, rstd, g.base, dx,
        args], (tpg, rows, 1), (tpg, 1, 1))
    dw, db = norm_params_grads(dtype, x, g, n, rows, mean, rstd, has_b=1, has_mean=1)
    b0 = np.zeros(n)
    if affine:
        want_dx, want_dw, want_db = ref_grads(lambda a, p, q: em.nn.ops.layer_norm(a, p, q, 1e-5), g.f64, x.f64,
                                              w.f64, b0)
    else:
        (want_dx,) = ref_grads(lambda a: em.nn.ops.layer_norm(a, None, None, 1e-5), g.f64, x.f64)
        _, want_dw, want_db = ref_grads(lambda a, p, q: em.nn.ops.layer_norm(a, p, q, 1e-5), g.f64, x.f64,
                                        np.ones(n), b0)
    check(dx.reshape(shape), want_dx, dtype, scale=4.0)
    check(dw, want_dw, dtype, scale=2.0 * math.sqrt(rows))
    check(db, want_db, dtype, scale=2.0 * math.sqrt(rows))


# ----------------------------------------------------------------------------- activations' backward
ACT_FWD = {"sigmoid": em.nn.ops.sigmoid, "silu": em.nn.ops.silu, "gelu": em.nn.ops.gelu}
ACT_DIMS = 8  # kActDims


def act_args(a, g, n, dense):
    if dense:
        return i64s(n, 0, a.offset, g.offset, *([0] * 3 * ACT_DIMS))
    pad = [0] * (ACT_DIMS - a.view.ndim)
    return i64s(n, a.view.ndim, a.offset, g.offset, *a.view.shape, *[1] * len(pad), *a.strides, *pad, *g.strides,
                *pad)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", list(ACT_FWD))
@pytest.mark.parametrize("shape", [(1,), (7, 5), (2, 3, 41)])
def test_act_backward(shape, kind, dtype, layout, rng):
    dt = DTYPES[dtype]
    fwd = ACT_FWD[kind]
    x = rng.standard_normal(shape) * 3
    a = Strided(rng, shape, dt, layout)
    if kind == "sigmoid":  # the backward reads the forward's output
        a.view[...] = ref(fwd, x).astype(dt)
    else:
        a.view[...] = x.astype(dt)
    a.f64 = np.ascontiguousarray(a.view).astype(np.float64)
    g = Strided(rng, shape, dt, layout)
    n = math.prod(shape)
    dx = np.zeros(n, dt)
    dense = layout == "contiguous"
    grid = cdiv(n, 4) if dense else n
    run("act.metal", f"{kind}_bwd_{dtype}", [a.base, g.base, dx, act_args(a, g, n, dense)], (grid, 1, 1), (64, 1, 1))
    if kind == "sigmoid":
        want = g.f64 * a.f64 * (1 - a.f64)
    else:
        (want,) = ref_grads(fwd, g.f64, a.f64)
    check(dx.reshape(shape), want, dtype, scale=2.0)


def test_act_backward_dense_with_offsets(rng):
    # the dense path reads from the two offsets (views starting inside their buffers)
    a = rng.standard_normal(103).astype(np.float32)
    g = rng.standard_normal(110).astype(np.float32)
    dx = np.zeros(100, np.float32)
    args = i64s(100, 0, 3, 10, *([0] * 3 * ACT_DIMS))
    run("act.metal", "silu_bwd_float32", [a, g, dx, args], (25, 1, 1), (32, 1, 1))
    (want,) = ref_grads(em.nn.ops.silu, g[10:].astype(np.float64), a[3:].astype(np.float64))
    check(dx, want, "float32")


# ----------------------------------------------------------------------------- sdpa
K_TILE, K_TILE_ROWS = 2048, 64  # kTile, kMaxTileRows of sdpa.metal
MASK_NAMES = {"keep": "uint8", "add32": "float32", "add16": "float16", "addbf": "bfloat16"}
MASK_NP = {"keep": np.uint8, "add32": np.float32, "add16": np.float16, "addbf": ml_dtypes.bfloat16}


class Attn:
    """q, k, v (and an optional mask broadcast over heads) laid out for the kernels, with the float64
    copies the CPU reference gets."""

    def __init__(self, rng, dtype, layout, B, H, Hkv, Lq, Lk, D, Dv, causal=False, mask=None, scale=None, softcap=0.0):
        dt = DTYPES[dtype]
        self.dtype, self.B, self.H, self.Hkv, self.Lq, self.Lk, self.D, self.Dv = dtype, B, H, Hkv, Lq, Lk, D, Dv
        self.q = Strided(rng, (B, H, Lq, D), dt, layout)
        self.k = Strided(rng, (B, Hkv, Lk, D), dt, layout)
        self.v = Strided(rng, (B, Hkv, Lk, Dv), dt, layout)
        self.causal, self.softcap = causal, softcap
        self.scale = 1 / math.sqrt(D) if scale is None else scale
        self.mask_kind = mask
        if mask is None:
            self.mask = None
        else:
            shape = (B, 1, Lq, Lk)  # broadcast over heads: stride 0
            if mask == "keep":
                m = (rng.random(shape) > 0.3).astype(np.uint8)
                m[0, 0, 0, :] = 0  # a fully masked row: zeros out, zero gradients
                self.mask = m
            else:
                self.mask = (rng.standard_normal(shape) * 2).astype(MASK_NP[mask])

    def args(self, tile, o=None, g=None):
        q, k, v = self.q, self.k, self.v
        m = self.mask
        if m is None:
            m_off, sm, kind = 0, [0, 0, 0, 0], 0
        else:
            sm = [0 if m.shape[d] == 1 else m.strides[d] // m.itemsize for d in range(4)]
            m_off, kind = 0, 1 if self.mask_kind == "keep" else 2
        o_off, so = (o.offset, o.strides) if o is not None else (0, [0] * 4)
        g_off, sg = (g.offset, g.strides) if g is not None else (0, [0] * 4)
        longs = [self.B, self.H, self.Hkv, self.Lq, self.Lk, self.D, self.Dv, q.offset, k.offset, v.offset, m_off,
                 o_off, g_off, *q.strides, *k.strides, *v.strides, *sm, *so, *sg, tile]
        return (i64s(*longs) + np.float32(self.scale).tobytes()
                + np.array([int(self.causal), kind, 0], np.uint32).tobytes()
                + np.float32(self.softcap).tobytes() + np.zeros(1, np.uint32).tobytes())

    def mask_buf(self):
        return self.mask if self.mask is not None else np.zeros(1, np.uint8)

    def suffix(self):
        return f"{self.dtype}_{MASK_NAMES[self.mask_kind] if self.mask is not None else 'uint8'}"

    def fn(self):
        mask = None if self.mask is None else em.tensor(self.mask.astype(np.float64) if self.mask.dtype != np.uint8
                                                        else self.mask, device=em.cpu)
        cap = self.softcap or None
        return lambda q, k, v: em.nn.ops.sdpa(q, k, v, scale=self.scale, causal=self.causal, mask=mask, softcap=cap)

    def tile(self):
        return min(K_TILE_ROWS, K_TILE // max(self.D, self.Dv))

    def forward(self, kernel="fwd", nsg=4):
        BH = self.B * self.H
        out = np.zeros(BH * self.Lq * self.Dv, DTYPES[self.dtype])
        lse = np.zeros(BH * self.Lq, np.float32)
        bufs = [self.q.base, self.k.base, self.v.base, self.mask_buf(), out, lse, self.args(self.tile())]
        if kernel == "fwd":
            run("sdpa.metal", f"sdpa_fwd_{self.suffix()}", bufs, (32 * nsg, cdiv(self.Lq, nsg), BH), (32 * nsg, 1, 1))
        else:
            nsg = min(8, K_TILE // max(self.Dv, 1))
            run("sdpa.metal", f"sdpa_decode_{self.suffix()}", bufs, (32 * nsg, self.Lq, BH), (32 * nsg, 1, 1))
        return out.reshape(self.B, self.H, self.Lq, self.Dv), lse.reshape(self.B, self.H, self.Lq)

    def backward(self, o, lse, g, nsg=4):
        BH, dt = self.B * self.H, DTYPES[self.dtype]
        args = self.args(self.tile(), o, g)
        di = np.zeros(BH * self.Lq, np.float32)
        run("sdpa.metal", f"sdpa_bwd_prep_{self.dtype}", [o.base, g.base, di, args], (32, self.Lq, BH), (32, 1, 1))
        dq = np.zeros(BH * self.Lq * self.D, dt)
        common = [self.q.base, self.k.base, self.v.base, self.mask_buf(), g.base, lse, di]
        run("sdpa.metal", f"sdpa_bwd_dq_{self.suffix()}", [*common, dq, args], (32 * nsg, cdiv(self.Lq, nsg), BH),
            (32 * nsg, 1, 1))
        dk = np.zeros(self.B * self.Hkv * self.Lk * self.D, dt)
        dv = np.zeros(self.B * self.Hkv * self.Lk * self.Dv, dt)
        run("sdpa.metal", f"sdpa_bwd_dkv_{self.suffix()}", [*common, dk, dv, args],
            (32 * nsg, cdiv(self.Lk, nsg), self.B * self.Hkv), (32 * nsg, 1, 1))
        return (dq.reshape(self.B, self.H, self.Lq, self.D), dk.reshape(self.B, self.Hkv, self.Lk, self.D),
                dv.reshape(self.B, self.Hkv, self.Lk, self.Dv))


# (B, H, Hkv, Lq, Lk, D, Dv)
SDPA_SHAPES = {
    "small": (1, 2, 2, 5, 7, 8, 8),
    "gqa": (2, 4, 2, 33, 20, 64, 32),
    "d256": (1, 1, 1, 9, 70, 256, 256),
    "decode": (1, 3, 1, 1, 75, 40, 24),
}


def sdpa_ref_lse(at):
    """logsumexp of the masked, scaled scores in float64 (-inf for a fully masked row)."""
    q, k = at.q.f64, np.repeat(at.k.f64, at.H // at.Hkv, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * at.scale
    if at.softcap:
        s = at.softcap * np.tanh(s / at.softcap)
    if at.causal:
        s = np.where(np.tril(np.ones((at.Lq, at.Lk), bool), k=at.Lk - at.Lq), s, -np.inf)  # bottom-right
    if at.mask is not None:
        s = np.where(at.mask != 0, s, -np.inf) if at.mask_kind == "keep" else s + at.mask.astype(np.float64)
    mx = s.max(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.log(np.exp(s - np.where(np.isfinite(mx), mx, 0)).sum(-1, keepdims=True))
                + np.where(np.isfinite(mx), mx, 0))[..., 0]


def check_sdpa_forward(at, kernel):
    out, lse = at.forward(kernel)
    fn = at.fn()
    check(out, ref(fn, at.q.f64, at.k.f64, at.v.f64), at.dtype, scale=2.0)
    want = sdpa_ref_lse(at)
    np.testing.assert_allclose(lse, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", ["fwd", "decode"])
@pytest.mark.parametrize("shape", list(SDPA_SHAPES))
def test_sdpa_forward(shape, kernel, dtype, layout, rng):
    check_sdpa_forward(Attn(rng, dtype, layout, *SDPA_SHAPES[shape]), kernel)


@pytest.mark.parametrize("kernel", ["fwd", "decode"])
@pytest.mark.parametrize("mask", [None, "keep", "add32", "add16", "addbf"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", ["small", "gqa"])
def test_sdpa_forward_masks_and_causal(shape, causal, mask, kernel, rng):
    at = Attn(rng, "float32", "strided", *SDPA_SHAPES[shape], causal=causal, mask=mask)
    check_sdpa_forward(at, kernel)


def sdpa_backward_case(at, rng):
    out, lse = at.forward()
    dt = DTYPES[at.dtype]
    layout = "contiguous" if at.q.view.flags.c_contiguous else "strided"
    o = Strided(rng, out.shape, dt, layout)
    o.view[...] = out
    g = Strided(rng, out.shape, dt, layout)
    dq, dk, dv = at.backward(o, lse.reshape(-1).copy(), g)
    want = ref_grads(at.fn(), g.f64, at.q.f64, at.k.f64, at.v.f64)
    for got, w in zip((dq, dk, dv), want):
        check(got, w, at.dtype, scale=4.0 * math.sqrt(max(at.Lq, at.Lk)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", list(SDPA_SHAPES))
def test_sdpa_backward(shape, dtype, layout, rng):
    sdpa_backward_case(Attn(rng, dtype, layout, *SDPA_SHAPES[shape]), rng)


@pytest.mark.parametrize("mask", [None, "keep", "add32", "add16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", ["small", "gqa"])
def test_sdpa_backward_masks_and_causal(shape, causal, mask, rng):
    sdpa_backward_case(Attn(rng, "float32", "strided", *SDPA_SHAPES[shape], causal=causal, mask=mask), rng)


@pytest.mark.parametrize("mask", [None, "keep", "add32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", ["small", "gqa", "decode"])
def test_sdpa_softcap_kernels(shape, causal, mask, rng):
    # Gemma 2's soft-capping in every kernel (forward, decode, dQ, dK/dV); scale 1 puts most scores past
    # the cap's knee (|s| ~ c), where tanh bends
    at = Attn(rng, "float32", "strided", *SDPA_SHAPES[shape], causal=causal, mask=mask, scale=1.0, softcap=2.5)
    check_sdpa_forward(at, "fwd")
    check_sdpa_forward(at, "decode")
    sdpa_backward_case(at, rng)


def test_sdpa_forward_query_longer_than_keys_causal(rng):
    # Lq > Lk with causal (bottom-right): the first Lq - Lk rows see no key (0, lse -inf), the last sees
    # every key; tiles of 8 keys at D = 256
    at = Attn(rng, "float32", "contiguous", 1, 2, 1, 40, 12, 256, 64, causal=True)
    check_sdpa_forward(at, "fwd")
    sdpa_backward_case(at, rng)
