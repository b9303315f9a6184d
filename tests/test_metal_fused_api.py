"""The fused ops on Metal tensors (the emulated device) through the public API, against the same ops on CPU:
em.nn.ops softmax / log_softmax / rms_norm / layer_norm / sdpa forward, their fused backwards (with
non-uniform upstream gradients), the activations' fused backward, strided inputs, the launchers' choices
(block / looped rows, tiled / decode attention, rows past the kernels' dims) and the [op] errors."""
import math

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import _C
from ember.nn.ops import _out  # wraps a kernel's storage as a tensor, as the ops' bwd do

DTYPES = {"float32": (em.float32, np.float32), "float16": (em.float16, np.float16),
          "bfloat16": (em.bfloat16, ml_dtypes.bfloat16)}
# Metal against CPU, both computing in float and rounding once to the dtype
TOL = {"float32": (3e-5, 3e-6), "float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2)}


@pytest.fixture
def metal(monkeypatch):
    # availability follows the environment at every call, so the emulated device is on for this test only
    monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()
    return em.Device("metal")


def close(got, want, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=rtol,
                               atol=atol * scale)


class Arg:
    """An op's argument: the tensor the op reads (`use`) and, for variables, the leaf whose gradient
    backward stores (`leaf`: the use itself, or the Var a strided use is a view of)."""

    def __init__(self, use, leaf):
        self.use, self.leaf = use, leaf


def pair(rng, shape, dtype, metal, layout="contiguous", scale=1.0, var=False):
    """The same values as a CPU and a Metal tensor (as Args when var); "strided" gives both a transposed
    view (its last dim is not contiguous) of a buffer shaped with the last two dims swapped."""
    dt, npdt = DTYPES[dtype]
    strided = layout == "strided" and len(shape) >= 2
    base = (rng.standard_normal(shape[:-2] + (shape[-1], shape[-2]) if strided else shape) * scale).astype(npdt)
    out = []
    for dev in (em.cpu, metal):
        leaf = em.Var(em.tensor(base, device=dev)) if var else em.tensor(base, device=dev)
        use = leaf.transpose(-1, -2) if strided else leaf
        out.append(Arg(use, leaf) if var else use)
    return out


def grads_through_head(fn, args, head_w, transpose_head=False):
    """Gradients (of each Arg's leaf) of rms_norm(fn(*uses), head_w) seeded with ones: a non-uniform
    upstream gradient made of fused kernels only. With transpose_head the head reads fn's result through
    a transposed view, so the gradient reaching fn's backward is strided."""
    y = fn(*[a.use for a in args])
    if transpose_head:
        y = y.transpose(-1, -2)
    gs = em.nn.ops.rms_norm(y, head_w, 1e-5).backward()
    return [gs[a.leaf] for a in args]


# ----------------------------------------------------------------------------- softmax
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(3, 7), (2, 4, 96), (3, 600), (2, 9000)])  # simd, block, looped rows
def test_softmax_forward_and_backward(shape, log, dtype, layout, metal, rng):
    fn = em.nn.ops.log_softmax if log else em.nn.ops.softmax
    xc, xm = pair(rng, shape, dtype, metal, layout, scale=3.0, var=True)
    yc, ym = fn(xc.use), fn(xm.use)
    assert ym.device == metal and ym.dtype == xm.use.dtype
    close(ym, yc, dtype)
    n_head = shape[-2] if len(shape) >= 2 else shape[-1]
    wc, wm = pair(rng, (n_head,), dtype, metal)
    (gc,) = grads_through_head(fn, [xc], wc, transpose_head=True)
    (gm,) = grads_through_head(fn, [xm], wm, transpose_head=True)
    assert gm.device == metal
    close(gm, gc, dtype, scale=8.0)


def test_softmax_over_a_leading_dim(metal, rng):
    # dim=0 runs the last-dim kernel over a transposed view
    xc, xm = pair(rng, (37, 5), "float32", metal)
    close(em.nn.ops.softmax(xm, 0), em.nn.ops.softmax(xc, 0), "float32")
    close(em.nn.ops.log_softmax(xm, 0), em.nn.ops.log_softmax(xc, 0), "float32")


def test_rows_past_the_kernels_outer_dims_are_read_through_a_copy(metal, rng):
    # ten outer dims that no merge can shrink (reversed order): the launchers copy the rows dense first
    shape = (2,) * 10 + (6,)
    base = rng.standard_normal(shape).astype(np.float32)
    perm = tuple(reversed(range(10))) + (10,)
    xc = em.tensor(base, device=em.cpu).permute(*perm)
    xm = em.tensor(base, device=metal).permute(*perm)
    close(em.nn.ops.softmax(xm), em.nn.ops.softmax(xc), "float32")
    wc, wm = pair(rng, (6,), "float32", metal)
    close(em.nn.ops.rms_norm(xm, wm), em.nn.ops.rms_norm(xc, wc), "float32")


# ----------------------------------------------------------------------------- norms
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(4, 33), (3, 5, 64), (2, 1500)])
def test_rms_norm_forward_and_backward(shape, dtype, layout, metal, rng):
    xc, xm = pair(rng, shape, dtype, metal, layout, var=True)
    wc, wm = pair(rng, (shape[-1],), dtype, metal, var=True)
    close(em.nn.ops.rms_norm(xm.use, wm.use, 1e-4), em.nn.ops.rms_norm(xc.use, wc.use, 1e-4), dtype)
    hc, hm = pair(rng, (shape[-1],), dtype, metal)
    fn = lambda x, w: em.nn.ops.rms_norm(x, w, 1e-4)  # noqa: E731
    for got, want in zip(grads_through_head(fn, [xm, wm], hm), grads_through_head(fn, [xc, wc], hc)):
        close(got, want, dtype, scale=8.0 * math.sqrt(math.prod(shape[:-1])))


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(4, 33), (3, 5, 64), (2, 1500)])
def test_layer_norm_forward_and_backward(shape, dtype, layout, metal, rng):
    xc, xm = pair(rng, shape, dtype, metal, layout, var=True)
    wc, wm = pair(rng, (shape[-1],), dtype, metal, var=True)
    bc, bm = pair(rng, (shape[-1],), dtype, metal, var=True)
    fn = lambda x, w, b: em.nn.ops.layer_norm(x, w, b, 1e-5)  # noqa: E731
    close(fn(xm.use, wm.use, bm.use), fn(xc.use, wc.use, bc.use), dtype)
    hc, hm = pair(rng, (shape[-1],), dtype, metal)
    for got, want in zip(grads_through_head(fn, [xm, wm, bm], hm), grads_through_head(fn, [xc, wc, bc], hc)):
        close(got, want, dtype, scale=8.0 * math.sqrt(math.prod(shape[:-1])))


def test_layer_norm_without_weight_or_bias(metal, rng):
    xc, xm = pair(rng, (6, 40), "float32", metal)
    close(em.nn.ops.layer_norm(xm, None, None), em.nn.ops.layer_norm(xc, None, None), "float32")
    # the kernel alone, without weight: dw and db are None
    _, mean, rstd = _C.fused.layer_norm_fwd(xm._storage, xm._layout, None, None, None, None, 1e-5)
    dx, dw, db = _C.fused.layer_norm_bwd(xm._storage, xm._layout, None, None, mean, rstd, xm._storage, xm._layout)
    assert dw is None and db is None and dx.device_kind == 1


def test_norm_parameter_gradients_are_deterministic(metal, rng):
    # dw is summed in a fixed order (per-chunk partials, then the chunks in order): the same bits every run
    xm = pair(rng, (300, 64), "float32", metal, var=True)[1]
    wm = pair(rng, (64,), "float32", metal, var=True)[1]
    hm = em.tensor(rng.standard_normal(64).astype(np.float32), device=metal)
    fn = lambda x, w: em.nn.ops.rms_norm(x, w)  # noqa: E731
    runs = [grads_through_head(fn, [xm, wm], hm)[1].numpy() for _ in range(3)]
    assert runs[0].tobytes() == runs[1].tobytes() == runs[2].tobytes()


# ----------------------------------------------------------------------------- activations' backward
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", ["sigmoid", "silu", "gelu"])
def test_activation_backward_kernels(kind, dtype, layout, metal, rng):
    # the call the activations' bwd makes (their forward is the unary kernel family)
    ac, am = pair(rng, (5, 37), dtype, metal, layout, scale=2.0)
    gc, gm = pair(rng, (5, 37), dtype, metal, layout)
    fn = getattr(_C.fused, kind + "_bwd")
    out = [fn(a._storage, a._layout, g._storage, g._layout) for a, g in ((ac, gc), (am, gm))]
    assert out[1].device_kind == 1
    close(_out(out[1], (5, 37), am), _out(out[0], (5, 37), ac), dtype, scale=2.0)


def test_activation_backward_views_with_offsets(metal, rng):
    # dense views starting inside their buffers take the contiguous path at their offsets
    base = rng.standard_normal(130).astype(np.float32)
    ac, am = (em.tensor(base, device=d)[3:103] for d in (em.cpu, metal))
    gc, gm = (em.tensor(base[::-1].copy(), device=d)[20:120] for d in (em.cpu, metal))
    res = [_out(_C.fused.gelu_bwd(a._storage, a._layout, g._storage, g._layout), (100,), a)
           for a, g in ((ac, gc), (am, gm))]
    close(res[1], res[0], "float32")


# ----------------------------------------------------------------------------- sdpa
def attn_inputs(rng, dtype, metal, B, H, Hkv, Lq, Lk, D, Dv, layout="contiguous"):
    q = pair(rng, (B, H, Lq, D), dtype, metal, layout, var=True)
    k = pair(rng, (B, Hkv, Lk, D), dtype, metal, layout, var=True)
    v = pair(rng, (B, Hkv, Lk, Dv), dtype, metal, layout, var=True)
    return [t[0] for t in (q, k, v)], [t[1] for t in (q, k, v)]


def make_mask(rng, kind, B, Lq, Lk, metal):
    if kind is None:
        return None, None
    shape = (B, 1, Lq, Lk)
    if kind == "keep":
        m = (rng.random(shape) > 0.3).astype(np.uint8)
        m[0, 0, 0, :] = 0  # a fully masked row
    else:
        m = (rng.standard_normal(shape) * 2).astype(np.float32 if kind == "add32" else np.float16)
    return em.tensor(m, device=em.cpu), em.tensor(m, device=metal)


SDPA = {  # (B, H, Hkv, Lq, Lk, D, Dv)
    "tiled": (1, 2, 2, 13, 21, 16, 16),
    "gqa": (2, 4, 2, 33, 20, 64, 32),
    "decode": (1, 4, 2, 1, 70, 40, 24),
    "d256": (1, 1, 1, 6, 9, 256, 256),
}


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", list(SDPA))
def test_sdpa_forward_and_backward(shape, dtype, layout, metal, rng):
    (qc, kc, vc), (qm, km, vm) = attn_inputs(rng, dtype, metal, *SDPA[shape], layout=layout)
    oc, om = em.nn.ops.sdpa(qc.use, kc.use, vc.use), em.nn.ops.sdpa(qm.use, km.use, vm.use)
    assert om.device == metal and om.shape == oc.shape
    close(om, oc, dtype, scale=2.0)
    hc, hm = pair(rng, (SDPA[shape][-1],), dtype, metal)
    for got, want in zip(grads_through_head(em.nn.ops.sdpa, [qm, km, vm], hm),
                         grads_through_head(em.nn.ops.sdpa, [qc, kc, vc], hc)):
        close(got, want, dtype, scale=16.0)


@pytest.mark.parametrize("mask", [None, "keep", "add32", "add16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", ["tiled", "decode"])
def test_sdpa_masks_and_causal(shape, causal, mask, metal, rng):
    B, H, Hkv, Lq, Lk, D, Dv = SDPA[shape]
    (qc, kc, vc), (qm, km, vm) = attn_inputs(rng, "float32", metal, *SDPA[shape])
    mc, mm = make_mask(rng, mask, B, Lq, Lk, metal)
    fc = lambda q, k, v: em.nn.ops.sdpa(q, k, v, scale=0.3, causal=causal, mask=mc)  # noqa: E731
    fm = lambda q, k, v: em.nn.ops.sdpa(q, k, v, scale=0.3, causal=causal, mask=mm)  # noqa: E731
    close(fm(qm.use, km.use, vm.use), fc(qc.use, kc.use, vc.use), "float32")
    hc, hm = pair(rng, (Dv,), "float32", metal)
    for got, want in zip(grads_through_head(fm, [qm, km, vm], hm), grads_through_head(fc, [qc, kc, vc], hc)):
        close(got, want, "float32", scale=16.0)


def test_sdpa_three_dim_inputs_and_empty_keys(metal, rng):
    (qc, kc, vc), (qm, km, vm) = attn_inputs(rng, "float32", metal, 1, 1, 1, 5, 9, 8, 8)
    q3c, k3c, v3c = (t.use.reshape(1, t.use.shape[2], t.use.shape[3]) for t in (qc, kc, vc))
    q3m, k3m, v3m = (t.use.reshape(1, t.use.shape[2], t.use.shape[3]) for t in (qm, km, vm))
    close(em.nn.ops.sdpa(q3m, k3m, v3m), em.nn.ops.sdpa(q3c, k3c, v3c), "float32")
    # no keys: nothing attends, the output is zeros
    qe = em.tensor(np.ones((1, 2, 3, 4), np.float32), device=metal)
    ke = em.tensor(np.ones((1, 2, 0, 4), np.float32), device=metal)
    out = em.nn.ops.sdpa(qe, ke, ke)
    assert out.shape == (1, 2, 3, 4) and not out.numpy().any()


# ----------------------------------------------------------------------------- errors
def test_errors_on_metal(metal, rng):
    xm = em.tensor(rng.standard_normal((4, 8)).astype(np.float32), device=metal)
    wc = em.tensor(np.ones(8, np.float32), device=em.cpu)
    with pytest.raises(em.EmberError, match=r"^\[rms_norm\]"):
        em.nn.ops.rms_norm(xm, wc)  # the weight on another device
    q = em.tensor(np.ones((1, 1, 2, 300), np.float32), device=metal)
    with pytest.raises(em.EmberError, match=r"^\[sdpa\] head dims up to 256 on metal"):
        em.nn.ops.sdpa(q, q, q)
    mask = em.tensor(np.ones((2, 2), np.uint8), device=em.cpu)
    with pytest.raises(em.DeviceError, match=r"^\[sdpa\]"):
        em.nn.ops.sdpa(xm.reshape(1, 1, 4, 8), xm.reshape(1, 1, 4, 8), xm.reshape(1, 1, 4, 8), mask=mask)
    # nothing was left half-written: the device still computes
    close(em.nn.ops.softmax(xm), em.nn.ops.softmax(xm.to_device(em.cpu)), "float32")


# ----------------------------------------------------------------------------- the whole path, second order
def second_order(fn, args, G):
    """d/dx of sum(grad_x(sum(fn(x) * G))^2) for each arg: the first gradient keeps its graph (the
    composite backward), the second backward runs through it."""
    y = fn(*[a.use for a in args])
    gs = (y * G).sum().backward(create_graph=True)
    total = None
    for a in args:
        s = (gs[a.leaf] * gs[a.leaf]).sum()
        total = s if total is None else total + s
    h = total.backward()
    return [h.get(a.leaf) for a in args]  # None where the first gradient does not depend on the arg


SECOND_ORDER = {
    "softmax": (lambda x: em.nn.ops.softmax(x), [(4, 9)]),
    "log_softmax": (lambda x: em.nn.ops.log_softmax(x), [(4, 9)]),
    "rms_norm": (lambda x, w: em.nn.ops.rms_norm(x, w), [(4, 9), (9,)]),
    "layer_norm": (lambda x, w, b: em.nn.ops.layer_norm(x, w, b), [(4, 9), (9,), (9,)]),
    "sdpa": (lambda q, k, v: em.nn.ops.sdpa(q, k, v, causal=True), [(1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8)]),
    "silu": (lambda x: em.nn.ops.silu(x), [(4, 9)]),
    "gelu": (lambda x: em.nn.ops.gelu(x), [(4, 9)]),
    "sigmoid": (lambda x: em.nn.ops.sigmoid(x), [(4, 9)]),
}


@pytest.mark.parametrize("op", list(SECOND_ORDER))
def test_second_order_through_the_composite_backward(op, metal, rng):
    fn, shapes = SECOND_ORDER[op]
    args = [pair(rng, s, "float32", metal, "strided", var=True) for s in shapes]
    out_shape = fn(*[a[0].use for a in args]).shape
    Gc, Gm = pair(rng, out_shape, "float32", metal)
    got = second_order(fn, [a[1] for a in args], Gm)
    want = second_order(fn, [a[0] for a in args], Gc)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            assert g.device == metal
            close(g, w, "float32", scale=10.0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", ["sigmoid", "silu", "gelu"])
def test_activations_forward_and_fused_backward(kind, dtype, metal, rng):
    fn = getattr(em.nn.ops, kind)
    xc, xm = pair(rng, (6, 21), dtype, metal, "strided", scale=2.0, var=True)
    Gc, Gm = pair(rng, (6, 21), dtype, metal)
    close(fn(xm.use), fn(xc.use), dtype)
    gm = (fn(xm.use) * Gm).sum().backward()[xm.leaf]
    gc = (fn(xc.use) * Gc).sum().backward()[xc.leaf]
    close(gm, gc, dtype, scale=4.0)


def test_empty_inputs_give_zero_gradients(metal):
    # no rows: dw and db are zeros (the chunk pass has nothing to add); no queries or no keys: zero grads
    x = em.Var(em.tensor(np.ones((0, 5), np.float32), device=metal))
    w = em.Var(em.tensor(np.full(5, 2.0, np.float32), device=metal))
    b = em.Var(em.tensor(np.ones(5, np.float32), device=metal))
    gs = em.nn.ops.layer_norm(x, w, b).sum().backward()
    assert gs[w].numpy().tolist() == [0.0] * 5 and gs[b].numpy().tolist() == [0.0] * 5
    assert em.nn.ops.rms_norm(x, w).sum().backward()[w].numpy().tolist() == [0.0] * 5
    for lq, lk in ((3, 0), (0, 4)):
        q = em.Var(em.tensor(np.ones((1, 2, lq, 4), np.float32), device=metal))
        k = em.Var(em.tensor(np.ones((1, 2, lk, 4), np.float32), device=metal))
        v = em.Var(em.tensor(np.ones((1, 2, lk, 4), np.float32), device=metal))
        gs = (em.nn.ops.sdpa(q, k, v) * 2.0).sum().backward()
        for t in (q, k, v):
            assert gs[t].shape == t.shape and not gs[t].numpy().any()
