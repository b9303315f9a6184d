"""sdpa's Gemma 2 logit soft-capping (softcap=c): values and q/k/v gradients vs a float64 torch reference by hand."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck, has_f64

import ember as em
from ember import _C
from ember.nn import ops

from conftest import FLOATS, TEST_DEVICE

TDT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
# (rtol, atol) against the float64 reference, as in test_fused.py
TOL = {"float64": (1e-10, 1e-12), "float32": (3e-5, 3e-6), "float16": (2e-2, 2e-3), "bfloat16": (6e-2, 1e-2)}
DTYPES = [d for d in (em.float64, em.float32, em.float16, em.bfloat16) if d in FLOATS]


def check(a, ref, dt, scale=1.0, what=""):
    rtol, atol = TOL[dt.name]
    ref = ref.detach().double().numpy()
    got = np.asarray(a.numpy()).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * scale + rtol * scale * np.abs(ref).max(),
                               err_msg=what)


def leaf(arr, dt, device, layout="contiguous"):
    """(ember Var base, its view; torch float64 leaf of the dtype-rounded values, its view)."""
    if layout == "strided":  # heads interleaved in memory: (B, L, H, D) viewed as (B, H, L, D)
        arr = np.ascontiguousarray(np.swapaxes(arr, 1, 2))
    eb = em.Var(em.tensor(arr, dtype=dt, device=device))
    tb = torch.tensor(arr).to(TDT[dt.name]).double().requires_grad_()
    if layout == "strided":
        return eb, eb.transpose(1, 2), tb, tb.transpose(1, 2)
    return eb, eb, tb, tb


def reference(q, k, v, scale, softcap, causal=False, mask=None):
    """Gemma 2's eager attention (Hugging Face): scores * scale, then softcap * tanh(scores / softcap),
    then the mask, then the softmax; grouped k/v heads repeated; a fully masked row gives 0."""
    if q.ndim == 4 and k.shape[1] != q.shape[1]:
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = s / softcap
        s = torch.tanh(s)
        s = s * softcap
    if causal:  # bottom-right, as a KV-cache step
        lq, lk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    live = torch.isfinite(s.amax(-1, keepdim=True))
    p = torch.where(live, torch.softmax(torch.where(live, s, 0.0), -1), 0.0)
    return p @ v


# name: (B, H, Hkv, Lq, Lk, D, Dv, causal, mask, layout)
CASES = {
    "plain": (2, 2, 2, 67, 90, 32, 32, False, None, "contiguous"),
    "gqa_causal": (2, 4, 2, 33, 33, 16, 8, True, None, "contiguous"),
    "bool_mask_strided": (1, 3, 3, 40, 50, 16, 7, False, "bool", "strided"),
    "additive_mask_causal": (2, 2, 1, 20, 70, 24, 24, True, "additive", "contiguous"),
    "kv_cache_decode": (1, 4, 1, 1, 300, 64, 64, True, None, "contiguous"),
    "decode_gqa_mask": (2, 8, 2, 3, 200, 32, 32, True, "bool", "strided"),
    "long_cache": (1, 2, 2, 1, 1100, 16, 16, False, "additive", "contiguous"),
}


def make_mask(kind, B, H, Lq, Lk, dt, device, rng):
    if kind is None:
        return None, None
    if kind == "bool":
        m = rng.random((B, 1, Lq, Lk)) > 0.35
        m[..., 0] = True  # every query keeps a key
        return em.tensor(m, device=device), torch.tensor(m)
    m = rng.standard_normal((1, H, 1, Lk))
    me = em.tensor(m, dtype=dt, device=device)
    return me, torch.tensor(np.asarray(me.numpy(), dtype=np.float64))


# float64 on a GPU (CUDA) runs the float32 kernels retyped to double: there, the cases of each kernel path
# (forward tiles with GQA and causal, the decode kernel, a strided mask) rather than all; the CPU keeps every one.
GPU_F64_CASES = ("gqa_causal", "kv_cache_decode", "bool_mask_strided")
CASE_DT = [(case, dt) for case in CASES for dt in DTYPES
           if dt is not em.float64 or TEST_DEVICE.type == "cpu" or case in GPU_F64_CASES]


@pytest.mark.parametrize("case,dt", CASE_DT, ids=lambda v: v.name if isinstance(v, em.DType) else str(v))
@pytest.mark.parametrize("softcap,scale", [(1.5, 1.0), (50.0, None)], ids=["cap1.5", "gemma50"])
def test_softcap_matches_torch(case, dt, softcap, scale, device):
    B, H, Hkv, Lq, Lk, D, Dv, causal, mask_kind, layout = CASES[case]
    rng = np.random.default_rng(len(case) * 7 + len(dt.name))
    (qb, q, tqb, tq), (kb, k, tkb, tk), (vb, v, tvb, tv) = (
        leaf(rng.standard_normal(s), dt, device, layout)
        for s in ((B, H, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, Dv)))
    me, mt = make_mask(mask_kind, B, H, Lq, Lk, dt, device, rng)
    sc = 1.0 / np.sqrt(D) if scale is None else scale
    y = ops.sdpa(q, k, v, scale=scale, causal=causal, mask=me, softcap=softcap)
    assert y.op.name == "sdpa"  # the fused kernels, not the composite
    yt = reference(tq, tk, tv, sc, softcap, causal, mt)
    check(y, yt, dt, 2, "output")
    # the composite reference agrees too
    check(ops.sdpa_slow(q, k, v, scale=scale, causal=causal, mask=me, softcap=softcap), yt, dt, 2, "sdpa_slow")
    g = rng.standard_normal(yt.shape)
    ge = em.tensor(g, dtype=dt, device=device)
    gs = (y * ge).sum().backward()
    tg = torch.autograd.grad(yt, (tqb, tkb, tvb), torch.tensor(np.asarray(ge.numpy(), dtype=np.float64)))
    sz = 6 * np.sqrt(max(Lq, Lk) / 64)
    for name, e, t in zip("qkv", (qb, kb, vb), tg):
        check(gs[e], t, dt, sz, f"d{name}")


def test_softcap_changes_the_result_and_a_huge_cap_does_not(device):
    rng = np.random.default_rng(3)
    dt = em.float64 if has_f64(device) else em.float32
    q, k, v = (em.tensor(rng.standard_normal((1, 2, 9, 8)) * 3, dtype=dt, device=device) for _ in range(3))
    plain = ops.sdpa(q, k, v).numpy()
    assert not np.allclose(ops.sdpa(q, k, v, softcap=1.0).numpy(), plain, atol=1e-3)
    np.testing.assert_allclose(ops.sdpa(q, k, v, softcap=None).numpy(), plain, rtol=0, atol=0)
    # c tanh(s / c) = s to within s^3 / (3 c^2); the rest is rounding (the kernels scale Q by scale / c)
    np.testing.assert_allclose(ops.sdpa(q, k, v, softcap=1e6).numpy(), plain, rtol=1e-5,
                               atol=TOL[dt.name][0] * np.abs(plain).max())


@pytest.mark.parametrize("case", ["gqa_causal_mask", "decode", "3d"])
def test_softcap_gradcheck(case, device):
    """q, k and v's gradients vs float64 finite differences (on a device without float64: vs the CPU's
    float64 values and gradients)."""
    rng = np.random.default_rng(9)
    dt = em.float64 if has_f64(device) else em.float32
    if case == "3d":
        shapes, causal, m = ((2, 5, 4), (2, 7, 4), (2, 7, 3)), False, None
    elif case == "decode":
        shapes, causal, m = ((1, 4, 1, 8), (1, 2, 40, 8), (1, 2, 40, 5)), True, None
    else:
        shapes, causal = ((1, 4, 6, 4), (1, 2, 6, 4), (1, 2, 6, 3)), True
        m = rng.standard_normal((6, 6))  # an array: sdpa puts it on the query's device, in its dtype
    ins = [em.tensor(rng.standard_normal(s) * 2, dtype=dt, device=device) for s in shapes]

    def f(q, k, v):
        return ops.sdpa(q, k, v, scale=0.9, causal=causal, mask=m, softcap=1.7)

    assert gradcheck(f, ins)


def test_softcap_second_order_and_mask_gradient(device):
    """create_graph=True goes through the composite, with the cap; a float mask that needs a gradient
    takes the composite too, and both match torch."""
    rng = np.random.default_rng(12)
    dt = em.float64 if has_f64(device) else em.float32
    (qb, q, tqb, tq), (kb, k, tkb, tk), (vb, v, tvb, tv) = (
        leaf(rng.standard_normal(s) * 2, dt, device) for s in ((2, 4, 7, 8), (2, 2, 9, 8), (2, 2, 9, 5)))
    c = 2.0
    gq = (ops.sdpa(qb, kb, vb, causal=True, softcap=c) ** 2).sum().backward(create_graph=True)[qb]
    gk2 = (gq * gq).sum().backward()[kb]
    (tgq,) = torch.autograd.grad((reference(tqb, tkb, tvb, 8 ** -0.5, c, True) ** 2).sum(), tqb, create_graph=True)
    (tgk2,) = torch.autograd.grad((tgq * tgq).sum(), tkb)
    check(gq, tgq, dt, 6, "first order")
    check(gk2, tgk2, dt, 6, "second order")
    mb, m, tmb, tm = leaf(rng.standard_normal((1, 4, 7, 9)), dt, device)
    y = ops.sdpa(q, k, v, mask=m, softcap=c)
    yt = reference(tq, tk, tv, 8 ** -0.5, c, mask=tm)
    check(y, yt, dt, 2)
    gs = (y * y).sum().backward()
    tg = torch.autograd.grad((yt * yt).sum(), (tqb, tkb, tvb, tmb))
    for name, e, t in zip(("q", "k", "v", "mask"), (qb, kb, vb, mb), tg):
        check(gs[e], t, dt, 6, f"d{name}")


def test_softcap_nan_and_fully_masked_rows(device):
    rng = np.random.default_rng(4)
    dt = em.float64 if has_f64(device) else em.float32
    qa = rng.standard_normal((1, 1, 4, 8))
    qa[0, 0, 2, 3] = np.nan
    q, k, v = (em.Var(em.tensor(a, dtype=dt, device=device))
               for a in (qa, rng.standard_normal((1, 1, 6, 8)), rng.standard_normal((1, 1, 6, 8))))
    keep = np.ones((4, 6), bool)
    keep[1] = False  # query 1 sees no key: 0, and zero gradients
    y = ops.sdpa(q, k, v, mask=em.tensor(keep, device=device), softcap=5.0)
    out = y.numpy()
    assert np.isnan(out[0, 0, 2]).all() and np.isfinite(out[0, 0, [0, 1, 3]]).all()
    np.testing.assert_array_equal(out[0, 0, 1], 0)
    gq = y.sum().backward()[q].numpy()
    np.testing.assert_array_equal(gq[0, 0, 1], 0)
    assert np.isfinite(gq[0, 0, [0, 3]]).all()


@pytest.mark.parametrize("bad,err", [
    (0.0, em.EmberValueError), (-1.0, em.EmberValueError), (float("nan"), em.EmberValueError),
    (float("inf"), em.EmberValueError), (float("-inf"), em.EmberValueError), (0, em.EmberValueError),
    ("50", em.EmberTypeError), (True, em.EmberTypeError), ([50.0], em.EmberTypeError)])
def test_softcap_errors(bad, err, device):
    q = em.zeros(1, 2, 3, 4, device=device)
    with pytest.raises(err, match=r"^\[sdpa\] softcap"):
        ops.sdpa(q, q, q, softcap=bad)
    with pytest.raises(err, match=r"^\[sdpa\] softcap"):
        ops.sdpa_slow(q, q, q, softcap=bad)
    assert issubclass(err, em.EmberError)


def test_softcap_is_keyword_only_and_checked_by_the_kernels_entry(device):
    q = em.zeros(1, 2, 3, 4, device=device)
    with pytest.raises(TypeError):
        ops.sdpa(q, q, q, None, False, None, 50.0)
    s, lay = q._storage, q._layout
    for bad in (-1.0, float("nan"), float("inf")):  # the C++ entry point refuses what Python would
        with pytest.raises(em.EmberValueError, match=r"^\[sdpa\] softcap must be positive and finite"):
            _C.fused.sdpa_fwd(s, lay, s, lay, s, lay, None, None, None, False, bad)
    out, lse = _C.fused.sdpa_fwd(s, lay, s, lay, s, lay, None, None, None, False, 0.0)  # 0: off
    with pytest.raises(em.EmberValueError, match=r"^\[sdpa\] softcap"):
        _C.fused.sdpa_bwd(s, lay, s, lay, s, lay, out, lay, lse, s, lay, None, None, None, False, -2.0)
