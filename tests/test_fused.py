"""em.nn.ops fused ops vs torch: values and the gradient of every tensor input, layouts, dtypes, errors."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck, has_f64

import ember as em
from ember.nn import ops

from conftest import DEFAULT_DEVICE, FLOATS, TEST_DEVICE

TDT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
# (rtol, atol) against a float64 torch reference
TOL = {"float64": (1e-10, 1e-12), "float32": (3e-5, 3e-6), "float16": (2e-2, 2e-3), "bfloat16": (6e-2, 1e-2)}
DTYPES = [d for d in (em.float64, em.float32, em.float16, em.bfloat16) if d in FLOATS]
WIDE = em.float64 if has_f64(TEST_DEVICE) else em.float32  # the widest float the device under test holds


def as_np(t):
    return np.asarray(t.numpy()).astype(np.float64)


def check(a, ref, dt, scale=1.0):
    rtol, atol = TOL[dt.name]
    ref = ref.detach().double().numpy()
    np.testing.assert_allclose(as_np(a), ref, rtol=rtol, atol=atol * scale + rtol * scale * np.abs(ref).max())


def pair(arr, dt, layout="contiguous"):
    """(ember Var base, view; torch leaf base, view) of the same values, laid out as asked."""
    arr = np.asarray(arr, dtype=np.float64)
    if layout == "transposed":  # last dim strided
        base = np.ascontiguousarray(np.swapaxes(arr, -1, -2)) if arr.ndim > 1 else arr
        view = (lambda b: b.transpose(-1, -2)) if arr.ndim > 1 else (lambda b: b)
    elif layout == "offset":  # start offset and padded row stride
        base = np.pad(arr, [(1, 1)] * (arr.ndim - 1) + [(2, 3)])
        view = lambda b: b[(slice(1, -1),) * (arr.ndim - 1) + (slice(2, -3),)]
    else:
        base, view = arr, (lambda b: b)
    eb = em.Var(em.tensor(base, dtype=dt))
    tb = torch.tensor(base).to(TDT[dt.name]).double().requires_grad_()
    return eb, view(eb), tb, view(tb)


def grads(y_em, y_t, ems, ts, seed=0):
    g = np.random.default_rng(seed).standard_normal(y_t.shape)
    ge = em.tensor(g, dtype=y_em.dtype)
    gs = (y_em * ge).sum().backward()
    tg = torch.autograd.grad(y_t, ts, torch.tensor(as_np(ge)), allow_unused=True)
    return [gs.get(e) for e in ems], tg


COLS = [1, 3, 17, 1000]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", COLS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax_family(dt, n, layout, kind):
    rng = np.random.default_rng(n)
    eb, ex, tb, tx = pair(rng.standard_normal((4, n)) * 3, dt, layout)
    if kind == "softmax":
        ye, yt = ops.softmax_last_dim(ex), torch.softmax(tx, -1)
    else:
        ye, yt = ops.log_softmax(ex, -1), torch.log_softmax(tx, -1)
    check(ye, yt, dt)
    (ge,), (gt,) = grads(ye, yt, [eb], [tb])
    check(ge, gt, dt, 2)


@pytest.mark.parametrize("dim", [0, 1, -3])
def test_softmax_other_dims(dim):
    x = np.random.default_rng(1).standard_normal((3, 5, 7))
    eb, ex, tb, tx = pair(x, WIDE)
    ye, yt = ops.softmax(ex, dim), torch.softmax(tx, dim)
    check(ye, yt, WIDE)
    check(ops.softmax_slow(ex, dim), yt, WIDE)
    (ge,), (gt,) = grads(ye, yt, [eb], [tb])
    check(ge, gt, WIDE)
    check(ops.log_softmax(ex, dim), torch.log_softmax(tx, dim), WIDE)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", COLS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
def test_rms_norm(dt, n, layout):
    rng = np.random.default_rng(n + 1)
    eb, ex, tb, tx = pair(rng.standard_normal((2, 3, n)), dt, layout)
    ew, _, tw, _ = pair(rng.standard_normal(n), dt)
    ye, yt = ops.rms_norm(ex, ew, 1e-5), torch.nn.functional.rms_norm(tx, (n,), tw, 1e-5)
    check(ye, yt, dt)
    if dt == WIDE:
        check(ops.rms_norm_slow(ex, ew, 1e-5), yt, dt)
    (gx, gw), (tgx, tgw) = grads(ye, yt, [eb, ew], [tb, tw])
    check(gx, tgx, dt, 4)
    check(gw, tgw, dt, 4)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", COLS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
def test_layer_norm(dt, n, layout):
    rng = np.random.default_rng(n + 2)
    eb, ex, tb, tx = pair(rng.standard_normal((5, n)) + 1.5, dt, layout)
    ew, _, tw, _ = pair(rng.standard_normal(n), dt)
    ebias, _, tbias, _ = pair(rng.standard_normal(n), dt)
    ye = ops.layer_norm(ex, ew, ebias, 1e-5)
    yt = torch.nn.functional.layer_norm(tx, (n,), tw, tbias, 1e-5)
    check(ye, yt, dt, 2)
    if dt == WIDE:
        check(ops.layer_norm_slow(ex, ew, ebias, 1e-5), yt, dt)
    ges, tgs = grads(ye, yt, [eb, ew, ebias], [tb, tw, tbias])
    for a, b in zip(ges, tgs):
        check(a, b, dt, 4)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "rms_norm", "layer_norm"])
def test_million_column_rows(op):
    rng = np.random.default_rng(3)
    n = 1_000_003
    eb, ex, tb, tx = pair(rng.standard_normal((2, n)) * 2 + (300.0 if op == "layer_norm" else 0.0), em.float32)
    ew, _, tw, _ = pair(rng.random(n) + 0.5, em.float32)
    if op == "softmax":
        ye, yt = ops.softmax_last_dim(ex), torch.softmax(tx, -1)
        ins, tins = [eb], [tb]
    elif op == "log_softmax":
        ye, yt = ops.log_softmax(ex, -1), torch.log_softmax(tx, -1)
        ins, tins = [eb], [tb]
    elif op == "rms_norm":
        ye, yt = ops.rms_norm(ex, ew, 1e-6), torch.nn.functional.rms_norm(tx, (n,), tw, 1e-6)
        ins, tins = [eb, ew], [tb, tw]
    else:
        ye, yt = ops.layer_norm(ex, ew, None, 1e-6), torch.nn.functional.layer_norm(tx, (n,), tw, None, 1e-6)
        ins, tins = [eb, ew], [tb, tw]
    check(ye, yt, em.float32, 10)
    ges, tgs = grads(ye, yt, ins, tins)
    for a, b in zip(ges, tgs):
        check(a, b, em.float32, 30)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["sigmoid", "silu", "gelu"])
def test_activations(dt, kind):
    eb, ex, tb, tx = pair(np.random.default_rng(4).standard_normal((6, 33)) * 4, dt, "transposed")
    fe = getattr(ops, kind)
    ft = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[kind]
    ye, yt = fe(ex), ft(tx)
    check(ye, yt, dt, 2)
    (ge,), (gt,) = grads(ye, yt, [eb], [tb])
    check(ge, gt, dt, 2)


def sdpa_pair(B, H, Lq, Lk, D, dt, seed=0, layout="contiguous"):
    rng = np.random.default_rng(seed)
    out = []
    for L in (Lq, Lk, Lk):
        x = rng.standard_normal((B, L, H, D)) if layout == "bhld_from_blhd" else rng.standard_normal((B, H, L, D))
        eb, _, tb, _ = pair(x, dt)
        if layout == "bhld_from_blhd":  # heads interleaved in memory: strided batch/head/row dims
            out.append((eb, eb.transpose(1, 2), tb, tb.transpose(1, 2)))
        else:
            out.append((eb, eb, tb, tb))
    return out


# float64 on a GPU (CUDA) runs the float32 kernels retyped to double: one head dim there (CI runs the emulated
# CUDA suite twice, and these are its slowest cases); the CPU's own float64 path keeps every one.
SDPA_DT_D = [(dt, D) for D in (32, 64, 128) for dt in DTYPES
             if dt is not em.float64 or DEFAULT_DEVICE.type == "cpu" or D == 32]


@pytest.mark.parametrize("dt,D", SDPA_DT_D, ids=lambda v: v.name if isinstance(v, em.DType) else str(v))
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa(dt, D, causal):
    (qb, q, tqb, tq), (kb, k, tkb, tk), (vb, v, tvb, tv) = sdpa_pair(2, 2, 67, 67 if causal else 90, D, dt, D)
    ye = ops.sdpa(q, k, v, causal=causal)
    yt = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    check(ye, yt, dt, 2)
    ges, tgs = grads(ye, yt, [qb, kb, vb], [tqb, tkb, tvb])
    for a, b in zip(ges, tgs):
        check(a, b, dt, 6)


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_sdpa_masked_strided(mask_kind):
    dt = em.float32
    (qb, q, tqb, tq), (kb, k, tkb, tk), (vb, v, tvb, tv) = sdpa_pair(2, 3, 40, 50, 16, dt, 7, "bhld_from_blhd")
    rng = np.random.default_rng(8)
    if mask_kind == "bool":
        m = rng.random((40, 50)) > 0.4
        m[:, 0] = True  # no fully masked row (torch would give NaN there)
        me, mt = em.tensor(m.astype(np.uint8)), torch.tensor(m)
    else:
        m = rng.standard_normal((3, 1, 50))
        me, mt = em.tensor(m, dtype=dt), torch.tensor(m)
    ye = ops.sdpa(q, k, v, scale=0.2, mask=me)
    yt = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mt, scale=0.2)
    check(ye, yt, dt, 2)
    check(ops.sdpa_slow(q, k, v, scale=0.2, mask=me), yt, dt, 2)
    ges, tgs = grads(ye, yt, [qb, kb, vb], [tqb, tkb, tvb])
    for a, b in zip(ges, tgs):
        check(a, b, dt, 6)



@pytest.mark.parametrize("Hkv", [1, 2])
def test_sdpa_grouped_query_heads(Hkv):
    """k/v with fewer heads than q: the op, its fused backward, the composite reference and the
    second-order (create_graph) path all match torch's enable_gqa."""
    dt, rng = WIDE, np.random.default_rng(11)
    (qb, q, tqb, tq) = sdpa_pair(2, 4, 9, 9, 8, dt, 3)[0]
    kb, _, tkb, _ = pair(rng.standard_normal((2, Hkv, 13, 8)), dt)
    vb, _, tvb, _ = pair(rng.standard_normal((2, Hkv, 13, 5)), dt)
    ye = ops.sdpa(q, kb, vb, causal=True)
    keep = torch.ones(9, 13, dtype=torch.bool).tril(diagonal=13 - 9)  # bottom-right causal (a KV-cache step)
    yt = torch.nn.functional.scaled_dot_product_attention(tq, tkb, tvb, attn_mask=keep, enable_gqa=True)
    check(ye, yt, dt, 2)
    check(ops.sdpa_slow(q, kb, vb, causal=True), yt, dt, 2)
    ges, tgs = grads(ye, yt, [qb, kb, vb], [tqb, tkb, tvb])
    for a, b in zip(ges, tgs):
        assert a.shape == tuple(b.shape)
        check(a, b, dt, 6)
    # second order through the composite backward: d/dk of sum((d loss/dq)^2)
    gq = (ops.sdpa(qb, kb, vb, causal=True) ** 2).sum().backward(create_graph=True)[qb]
    gk2 = (gq * gq).sum().backward()[kb]
    tq2, tk2, tv2 = (t.detach().clone().requires_grad_() for t in (tqb, tkb, tvb))
    (tgq,) = torch.autograd.grad((torch.nn.functional.scaled_dot_product_attention(
        tq2, tk2, tv2, attn_mask=keep, enable_gqa=True) ** 2).sum(), tq2, create_graph=True)
    (tgk2,) = torch.autograd.grad((tgq * tgq).sum(), tk2)
    check(gk2, tgk2, dt, 6)
    with pytest.raises(em.ShapeError, match=r"^\[sdpa\] incompatible shapes"):
        ops.sdpa(q, em.zeros(2, 3, 13, 8, dtype=dt), em.zeros(2, 3, 13, 5, dtype=dt))

def test_sdpa_fully_masked_row_is_zero_not_nan():
    q = em.Var(em.randn(1, 1, 3, 4))
    m = em.tensor(np.array([[1, 1], [0, 0], [1, 0]], dtype=np.uint8))
    y = ops.sdpa(q, q[:, :, :2], q[:, :, :2], mask=m)
    assert np.all(y.numpy()[0, 0, 1] == 0)
    g = y.sum().backward()[q]
    assert np.isfinite(g.numpy()).all()
    # the composite backward (create_graph) gives the same, not the NaN of a softmax over -inf
    g1 = (y * y).sum().backward(create_graph=True)[q]
    np.testing.assert_allclose(g1.numpy(), (y * y).sum().backward()[q].numpy(), rtol=1e-5, atol=1e-6)
    assert np.isfinite((g1 * g1).sum().backward()[q].numpy()).all()


@pytest.mark.parametrize("dt", [d for d in (em.float64, em.float32, em.bfloat16) if d in FLOATS], ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["full", "per_head", "per_key", "strided", "gqa_causal", "from_op"])
def test_sdpa_mask_gradient(dt, case):
    """A float mask that needs a gradient (a learned attention bias) gets the same gradient as in
    torch, summed over its broadcast dims, along with q, k and v's; the fused path never drops it."""
    rng = np.random.default_rng(len(case))
    B, H, Hkv, Lq, Lk, D = 2, 4, (2 if case == "gqa_causal" else 4), 9, 12, 8
    causal = case == "gqa_causal"
    (qb, q, tqb, tq) = sdpa_pair(B, H, Lq, Lq, D, dt, 3)[0]
    kb, k, tkb, tk = pair(rng.standard_normal((B, Hkv, Lk, D)), dt)
    vb, v, tvb, tv = pair(rng.standard_normal((B, Hkv, Lk, 5)), dt)
    shape = {"full": (B, H, Lq, Lk), "per_head": (1, H, Lq, Lk), "per_key": (B, 1, 1, Lk), "strided": (Lq, Lk),
             "gqa_causal": (Lq, Lk), "from_op": (H, 1, Lk)}[case]
    mb, m, tmb, tm = pair(rng.standard_normal(shape), dt, "transposed" if case == "strided" else "contiguous")
    if case == "from_op":  # a mask that is itself computed: the gradient flows on to its inputs
        m, tm = m * 2.0 - 1.0, tm * 2.0 - 1.0
    ye = ops.sdpa(q, k, v, causal=causal, mask=m)
    # torch takes no mask together with is_causal: the causal part goes into its mask instead
    tmc = tm + torch.full((Lq, Lk), float("-inf")).triu(1 + Lk - Lq) if causal else tm  # bottom-right
    yt = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmc, enable_gqa=Hkv != H)
    check(ye, yt, dt, 2)
    ges, tgs = grads(ye, yt, [qb, kb, vb, mb], [tqb, tkb, tvb, tmb])
    for a, b in zip(ges, tgs):
        assert a is not None and a.shape == tuple(b.shape)
        check(a, b, dt, 6)
    # the same mask as a constant takes the fused path, with the same value
    check(ops.sdpa(q, k, v, causal=causal, mask=m.detach()), yt, dt, 2)
    assert ops.sdpa(q, k, v, causal=causal, mask=m.detach()).op.name == "sdpa"


def test_sdpa_mask_gradient_fully_masked_rows_and_errors():
    rng = np.random.default_rng(5)
    def var(a):
        return em.Var(em.tensor(a, dtype=WIDE, device=TEST_DEVICE))

    q, k, v = (var(rng.standard_normal((1, 2, 4, 3))) for _ in range(3))
    bias = rng.standard_normal((4, 4))
    bias[1] = -np.inf  # query 1 sees no key: its output is 0 (as in the fused path) and nothing is NaN
    mb = var(bias)
    y = ops.sdpa(q, k, v, mask=mb)
    np.testing.assert_array_equal(y.numpy()[:, :, 1], 0)
    rtol, atol = TOL[WIDE.name]
    np.testing.assert_allclose(y.numpy(), ops.sdpa(q, k, v, mask=mb.detach()).numpy(), rtol=rtol, atol=atol)
    gs = (y * y).sum().backward()
    for t in (q, k, v, mb):
        assert np.isfinite(gs[t].numpy()).all()
    np.testing.assert_array_equal(gs[mb].numpy()[1], 0)
    # float64 finite differences on the finite part of the mask (q, k, v held constant)
    mf = var(rng.standard_normal((1, 4, 4)))
    assert gradcheck(lambda m, q, k, v: ops.sdpa(q, k, v, mask=m), (mf,), consts=(q.detach(), k.detach(), v.detach()))
    # bad inputs give the fused path's errors, word for word
    for args, kw in [((q, k, v), {"mask": var(np.zeros((5, 4)))}),
                     ((q, k, v), {"mask": var(np.zeros((1, 1, 1, 4, 4)))}),
                     ((q, var(np.zeros((1, 2, 4, 2))), v), {"mask": var(np.zeros((4, 4)))}),
                     ((q, k.to_dtype(em.float16), v), {"mask": var(np.zeros((4, 4)))})]:
        with pytest.raises(em.EmberError) as want:
            ops.sdpa(*args, mask=kw["mask"].detach())
        with pytest.raises(type(want.value), match=r"^\[sdpa\] ") as got:
            ops.sdpa(*args, **kw)
        assert str(got.value) == str(want.value)


def test_second_order():
    rng = np.random.default_rng(9)
    eb, ex, tb, tx = pair(rng.standard_normal((3, 6)), WIDE)
    ew, _, tw, _ = pair(rng.standard_normal(6), WIDE)
    for fe, ft in [
        (lambda x: ops.rms_norm(x, ew, 1e-5), lambda x: torch.nn.functional.rms_norm(x, (6,), tw, 1e-5)),
        (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
        (lambda x: ops.layer_norm(x, ew, None, 1e-5), lambda x: torch.nn.functional.layer_norm(x, (6,), tw)),
        (lambda x: ops.silu(x), torch.nn.functional.silu),
    ]:
        g1 = (fe(ex).sqr().sum()).backward(create_graph=True)[eb]
        g2 = (g1 * g1).sum().backward()[eb]
        (t1,) = torch.autograd.grad(ft(tx).square().sum(), tb, create_graph=True)
        (t2,) = torch.autograd.grad((t1 * t1).sum(), tb)
        check(g2, t2, WIDE)


def test_layers_use_fused_ops():
    x = em.randn(2, 8)
    assert em.nn.RmsNorm(8)(x).op.name == "rms_norm"
    assert em.nn.LayerNorm(8)(x).op.name == "layer_norm"


def test_errors():
    x = em.randn(4, 8)
    with pytest.raises(em.EmberError, match=r"^\[rms_norm\] expected weight of shape \(8,\), got \(7,\)"):
        ops.rms_norm(x, em.ones(7), 1e-5)
    with pytest.raises(em.EmberError, match=r"^\[rms_norm\] "):
        ops.rms_norm(x, em.ones(8, dtype=em.float16), 1e-5)
    with pytest.raises(em.EmberError, match=r"^\[layer_norm\] "):
        ops.layer_norm(x, em.ones(8), em.zeros(3), 1e-5)
    with pytest.raises(em.EmberError, match=r"^\[softmax\] "):
        ops.softmax(em.arange(6).reshape(2, 3), -1)
    with pytest.raises(em.EmberError, match=r"^\[softmax\] "):
        ops.softmax(x, 2)
    with pytest.raises(em.EmberError, match=r"^\[sdpa\] "):
        ops.sdpa(em.randn(1, 2, 3, 4), em.randn(1, 2, 3, 5), em.randn(1, 2, 3, 4))
    with pytest.raises(em.EmberError, match=r"^\[sdpa\] "):
        ops.sdpa(em.randn(1, 2, 3, 4), em.randn(1, 2, 3, 4), em.randn(1, 2, 3, 4), mask=em.randn(5, 3))
    with pytest.raises(em.EmberError, match=r"^\[sdpa\] "):
        ops.sdpa(em.randn(3, 4), em.randn(3, 4), em.randn(3, 4))


def _sdpa_math(q, k, v, **kw):
    """torch's reference attention (its math backend: NaN in, NaN out; the flash one drops a NaN query)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


def _same_nans(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaN pattern of {what}")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5, err_msg=what)


@pytest.mark.parametrize("lq,lk", [(5, 7), (1, 300)])  # the tiled forward and the decode (split-key) path
def test_sdpa_nan_propagates_as_torch(lq, lk):
    rng = np.random.default_rng(7)
    base = [rng.standard_normal((1, 2, n, 4)).astype(np.float32) for n in (lq, lk, lk)]

    def case(q, k, v, mask=None, scale=None, causal=False):
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        ref = _sdpa_math(tq, tk, tv, attn_mask=None if mask is None else torch.tensor(mask), scale=scale,
                         is_causal=causal)
        (ref * ref).sum().backward()
        eq, ek, ev = (em.Var(em.tensor(a, device=TEST_DEVICE)) for a in (q, k, v))
        out = ops.sdpa(eq, ek, ev, scale=scale, causal=causal,
                       mask=None if mask is None else em.tensor(mask, device=TEST_DEVICE))
        gs = (out * out).sum().backward()
        _same_nans(out.numpy(), ref.detach().numpy(), "output")
        for name, e, t in (("dq", eq, tq), ("dk", ek, tk), ("dv", ev, tv)):
            _same_nans(gs[e].numpy(), t.grad.numpy(), name)

    q, k, v = base
    k2 = k.copy()
    k2[0, 0, lk // 2, 1] = np.nan  # a NaN key: every output of its head is NaN
    case(q, k2, v)
    q2 = q.copy()
    q2[0, 1, lq - 1, 0] = np.nan  # a NaN query row: its output and its gradient are NaN
    case(q2, k, v)
    m = np.zeros((lq, lk), np.float32)
    m[lq // 2, lk - 1] = np.nan  # a NaN in the mask: that query's row is NaN
    case(q, k, v, mask=m)
    case(q, k, v, mask=np.full((lq, lk), np.nan, np.float32))  # all NaN: never "fully masked" (0)
    dead = np.zeros((lq, lk), np.float32)
    dead[0] = -np.inf  # a fully masked row still gives 0, as in torch
    case(q, k, v, mask=dead)
    for scale in (float("inf"), -float("inf"), float("nan")):  # torch splits the scale between q and k
        case(q, k, v, scale=scale)
        if lq == lk or lq == 1:
            case(q, k, v, scale=scale, causal=lq == lk)


# A frozen norm (constant weight and/or bias) gets no parameter gradient, and the kernel skips their sums; the
# input's gradient is the same either way.
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("frozen", ["w", "b", "wb"])
@pytest.mark.parametrize("n", [3, 1000])
def test_layer_norm_frozen_params(dt, frozen, n):
    rng = np.random.default_rng(n + 7)
    eb, ex, tb, tx = pair(rng.standard_normal((6, n)) + 0.5, dt, "offset")
    ew, _, tw, _ = pair(rng.standard_normal(n), dt)
    ebias, _, tbias, _ = pair(rng.standard_normal(n), dt)
    if "w" in frozen:
        ew, tw = em.tensor(ew.detach()), tw.detach()
    if "b" in frozen:
        ebias, tbias = em.tensor(ebias.detach()), tbias.detach()
    ye = ops.layer_norm(ex, ew, ebias, 1e-5)
    yt = torch.nn.functional.layer_norm(tx, (n,), tw, tbias, 1e-5)
    learn = [(e, t) for e, t, name in ((eb, tb, "x"), (ew, tw, "w"), (ebias, tbias, "b")) if name not in frozen]
    ges, tgs = grads(ye, yt, [e for e, _ in learn], [t for _, t in learn])
    for a, b in zip(ges, tgs):
        check(a, b, dt, 4)
    g = em.tensor(np.ones((6, n)), dtype=dt)
    store = (ye * g).sum().backward()
    assert store.get(ew) is None or "w" not in frozen
    assert store.get(ebias) is None or "b" not in frozen


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_rms_norm_frozen_weight(dt):
    rng = np.random.default_rng(11)
    eb, ex, tb, tx = pair(rng.standard_normal((4, 33)), dt, "transposed")
    _, _, tw, _ = pair(rng.standard_normal(33), dt)
    ew = em.tensor(tw.detach().numpy(), dtype=dt)
    ye, yt = ops.rms_norm(ex, ew, 1e-5), torch.nn.functional.rms_norm(tx, (33,), tw.detach(), 1e-5)
    (gx,), (tgx,) = grads(ye, yt, [eb], [tb])
    check(gx, tgx, dt, 4)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norm_bwd_kernel_without_param_grads(op):
    """want_params=False: no dw/db storages, and dx bit-identical to the one computed beside them."""
    rng = np.random.default_rng(5)
    x = em.tensor(rng.standard_normal((9, 130)), dtype=WIDE)
    w = em.tensor(rng.standard_normal(130), dtype=WIDE)
    g = em.tensor(rng.standard_normal((9, 130)), dtype=WIDE)
    F = em._C.fused
    if op == "rms_norm":
        _, rstd = F.rms_norm_fwd(x._storage, x._layout, w._storage, w._layout, 1e-5)
        full = F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, rstd, g._storage, g._layout)
        lean = F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, rstd, g._storage, g._layout, False)
    else:
        _, mean, rstd = F.layer_norm_fwd(x._storage, x._layout, w._storage, w._layout, None, None, 1e-5)
        args = (x._storage, x._layout, w._storage, w._layout, mean, rstd, g._storage, g._layout)
        full, lean = F.layer_norm_bwd(*args), F.layer_norm_bwd(*args, want_params=False)
    assert all(s is not None for s in full) and all(s is None for s in lean[1:])
    np.testing.assert_array_equal(_dense(lean[0], x), _dense(full[0], x))


def _dense(storage, like):
    """A kernel's dense result storage as a numpy array shaped like `like`."""
    from ember.kernel_result import dense_like
    return as_np(dense_like(storage, like.shape, like))
