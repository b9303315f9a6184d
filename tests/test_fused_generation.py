"""Attention for generation: sdpa with Lq != Lk and the causal mask aligned bottom-right (a KV-cache step),
the single-query decode path (long caches, grouped heads, masks, strides, dtypes), MultiHeadAttention's
KV-cache path on the fused kernel; rms_norm / layer_norm with weight=None and bias=None."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em
from ember.nn import ops

from conftest import FLOATS, WIDE

TDT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float64": (1e-10, 1e-12), "float32": (2e-5, 2e-6), "float16": (2e-2, 4e-3), "bfloat16": (6e-2, 2e-2)}
DTYPES = [d for d in (em.float64, em.float32, em.float16, em.bfloat16) if d in FLOATS]


def close(a, ref, dt, scale=1.0):
    rtol, atol = TOL[dt.name]
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(a.numpy()).astype(np.float64), ref,
                               rtol=rtol, atol=atol * scale + rtol * scale * np.abs(ref).max())


def torch_sdpa(q, k, v, causal, mask=None):
    """float64 torch reference; causal aligned bottom-right (query i sees keys j <= i + Lk - Lq)."""
    tq, tk, tv = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (q, k, v))
    lq, lk = tq.shape[-2], tk.shape[-2]
    m = None if mask is None else torch.from_numpy(np.asarray(mask))
    if causal:
        keep = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        m = keep if m is None else m & keep
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=m, enable_gqa=tk.shape[1] != tq.shape[1])
    return torch.nan_to_num(o, 0.0).numpy()


def qkv(rng, B, H, Hkv, Lq, Lk, D, Dv, dt):
    q = rng.standard_normal((B, H, Lq, D))
    k = rng.standard_normal((B, Hkv, Lk, D))
    v = rng.standard_normal((B, Hkv, Lk, Dv))
    return q, k, v, *(em.tensor(a, dtype=dt) for a in (q, k, v))


# Lq = 1..16 with Hkv == H, or Lq * H / Hkv <= 16: the decode kernel on the CPU; larger: the tiled one.
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("B,H,Hkv,Lq,Lk,D", [(1, 4, 4, 1, 700, 64), (2, 4, 2, 3, 300, 24), (1, 8, 1, 2, 1300, 32),
                                             (2, 2, 2, 16, 90, 17), (1, 2, 1, 40, 90, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_kv_cache_step_matches_torch(dt, B, H, Hkv, Lq, Lk, D, causal, rng):
    q, k, v, eq, ek, ev = qkv(rng, B, H, Hkv, Lq, Lk, D, D + 3, dt)
    y = ops.sdpa(eq, ek, ev, causal=causal)
    close(y, torch_sdpa(eq.numpy().astype(np.float64), ek.numpy().astype(np.float64),
                        ev.numpy().astype(np.float64), causal), dt, 2)
    # the composite reference agrees, bottom-right too
    close(ops.sdpa_slow(eq, ek, ev, causal=causal), y.numpy().astype(np.float64), dt, 4)


@pytest.mark.parametrize("mask_kind", ["keep", "additive"])
def test_sdpa_decode_masks_strides_and_fully_masked(mask_kind, rng):
    dt = WIDE
    B, H, Lq, Lk, D = 2, 3, 2, 333, 20
    # (B, L, H, D) storage seen as (B, H, L, D): strided heads and rows; v with a strided last dim
    q = rng.standard_normal((B, Lq, H, D))
    k = rng.standard_normal((B, Lk, H, D))
    v = rng.standard_normal((B, H, 12, Lk))
    eq, ek, ev = (em.tensor(a, dtype=dt) for a in (q, k, v))
    eq, ek, ev = eq.transpose(1, 2), ek.transpose(1, 2), ev.transpose(-1, -2)
    if mask_kind == "keep":
        m = rng.random((B, 1, Lq, Lk)) > 0.4
        m[1, 0, 1] = False  # a fully masked row gives 0
        em_mask, want_mask = em.tensor(m.astype(np.uint8)), m
    else:
        add = rng.standard_normal((1, H, 1, Lk))
        em_mask, want_mask = em.tensor(add, dtype=dt), None
    y = ops.sdpa(eq, ek, ev, mask=em_mask)
    qn, kn, vn = np.swapaxes(q, 1, 2), np.swapaxes(k, 1, 2), np.swapaxes(v, -1, -2)
    if want_mask is None:
        tq, tk, tv = (torch.from_numpy(a.copy()) for a in (qn, kn, vn))
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(add)).numpy()
    else:
        want = torch_sdpa(qn, kn, vn, False, want_mask)
    close(y, want, dt, 2)
    if mask_kind == "keep":
        assert np.all(y.numpy()[1, :, 1] == 0)


def test_sdpa_decode_gradients_and_lq_longer_than_lk(rng):
    # the fused backward with Lq != Lk, bottom-right causal (through the decode forward's lse)
    _, _, _, eq, ek, ev = qkv(rng, 1, 4, 2, 3, 40, 8, 8, WIDE)
    gradcheck(lambda a, b, c: ops.sdpa(a, b, c, causal=True), [eq, ek, ev])
    # Lq > Lk: the first Lq - Lk queries see no key and give 0; gradients stay finite
    _, _, _, eq, ek, ev = qkv(rng, 1, 2, 2, 7, 4, 8, 8, WIDE)
    y = ops.sdpa(eq, ek, ev, causal=True)
    assert np.all(y.numpy()[:, :, :3] == 0) and not np.all(y.numpy()[:, :, 3:] == 0)
    gradcheck(lambda a, b, c: ops.sdpa(a, b, c, causal=True), [eq, ek, ev])


# 6..16 query rows per kv head (a KV-cache step, or a large head group) with no mask: on the CPU the
# decode kernel holds the rows in vector lanes. Key counts off its 8/6-key tiles and 48-key blocks, and
# caches long enough that few heads split the keys into chunks merged at the end.
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("B,H,Hkv,Lq,Lk,D,Dv", [(1, 6, 1, 1, 49, 16, 32), (2, 8, 2, 2, 333, 32, 40),
                                                (1, 4, 4, 16, 1031, 64, 64), (1, 16, 2, 1, 47, 24, 17),
                                                (1, 2, 1, 6, 5, 8, 8), (1, 12, 1, 1, 2000, 128, 128),
                                                (1, 2, 2, 12, 3, 16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_decode_query_rows_in_lanes(dt, B, H, Hkv, Lq, Lk, D, Dv, causal, rng):
    q, k, v, eq, ek, ev = qkv(rng, B, H, Hkv, Lq, Lk, D, Dv, dt)
    y = ops.sdpa(eq, ek, ev, causal=causal)
    want = torch_sdpa(*(t.numpy().astype(np.float64) for t in (eq, ek, ev)), causal)
    close(y, want, dt, 2)
    if causal and Lq > Lk:  # the first Lq - Lk queries see no key
        assert np.all(y.numpy()[:, :, :Lq - Lk] == 0)


def test_sdpa_decode_lanes_strided_nonfinite_and_any_pool(rng):
    """The lane kernel on strided k/v (packed per block), a NaN query row, a key scoring +inf for some
    rows, a -inf key, and the same bits on 1, 2 and 3 threads."""
    dt = em.float32
    B, H, Hkv, Lq, Lk, D = 1, 8, 1, 2, 700, 32
    q = rng.standard_normal((B, H, Lq, D))
    k = rng.standard_normal((B, Lk, Hkv, D))
    v = rng.standard_normal((B, Hkv, D + 8, Lk))
    q[0, 3, 1, 5] = np.nan
    k[0, 100, 0] = 0.0
    k[0, 100, 0, 0] = np.inf  # +inf for rows with q[..., 0] > 0, -inf for the others
    eq = em.tensor(q, dtype=dt)
    ek = em.tensor(k, dtype=dt).transpose(1, 2)
    ev = em.tensor(v, dtype=dt).transpose(-1, -2)[:, :, :, :D]
    before = em.get_num_threads()
    runs = []
    try:
        for nt in (1, 2, 3):
            em.set_num_threads(nt)
            runs.append(ops.sdpa(eq, ek, ev, causal=True).numpy())
    finally:
        em.set_num_threads(before)
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0], other)
    kn, vn = np.swapaxes(k, 1, 2), np.swapaxes(v, -1, -2)[..., :D]
    tq, tk, tv = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (q, kn, vn))
    keep = torch.ones(Lq, Lk, dtype=torch.bool).tril(diagonal=Lk - Lq)
    with np.errstate(invalid="ignore"):
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=keep).numpy()
    nan_rows = np.isnan(want).any(-1)
    assert nan_rows[0, 3, 1] and not nan_rows.all()
    np.testing.assert_array_equal(np.isnan(runs[0]).any(-1), nan_rows)
    np.testing.assert_allclose(runs[0][~nan_rows], want[~nan_rows], rtol=2e-5, atol=2e-5)


def test_mha_kv_cache_uses_fused_causal(rng):
    """Generation one token at a time through a KVCache equals the full causal pass, and each cached
    step runs the fused sdpa with its own causal flag (no mask built)."""
    dt = WIDE
    mha = em.nn.MultiHeadAttention(16, 4, dtype=dt)
    x = em.tensor(rng.standard_normal((2, 7, 16)), dtype=dt)
    full, _ = mha(x, is_causal=True)
    cache = em.nn.KVCache()
    seen = []
    orig = ops.sdpa

    def spy(q, k, v, scale=None, causal=False, mask=None):
        seen.append((q.shape[2], k.shape[2], causal, mask is None))
        return orig(q, k, v, scale=scale, causal=causal, mask=mask)

    ops.sdpa = spy
    try:
        steps = [mha(x[:, :3], is_causal=True, cache=cache)[0]]
        steps += [mha(x[:, i:i + 1], is_causal=True, cache=cache)[0] for i in range(3, 7)]
    finally:
        ops.sdpa = orig
    got = em.cat(steps, 1)
    np.testing.assert_allclose(got.numpy(), full.numpy(), rtol=1e-5, atol=1e-6)
    assert seen[0] == (3, 3, True, True) and seen[1] == (1, 4, True, True) and seen[-1] == (1, 7, True, True)


# ------------------------------------------------------------------ norms without weight / bias
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_norms_without_weight_match_torch(dt, rng):
    x = rng.standard_normal((5, 3, 33))
    ex = em.tensor(x, dtype=dt).transpose(0, 1)  # strided rows
    tx = torch.from_numpy(em.tensor(x, dtype=dt).numpy().astype(np.float64)).transpose(0, 1)
    w = rng.standard_normal(33)
    b = rng.standard_normal(33)
    ew, eb = em.tensor(w, dtype=dt), em.tensor(b, dtype=dt)
    tw, tb = (torch.from_numpy(ew.numpy().astype(np.float64)), torch.from_numpy(eb.numpy().astype(np.float64)))
    F = torch.nn.functional
    close(ops.rms_norm(ex, None, 1e-5), F.rms_norm(tx, (33,), None, 1e-5).numpy(), dt, 2)
    close(ops.rms_norm(ex), F.rms_norm(tx, (33,), None, 1e-5).numpy(), dt, 2)
    for wt, bt, w_, b_ in ((None, None, None, None), (ew, None, tw, None), (None, eb, None, tb)):
        close(ops.layer_norm(ex, wt, bt), F.layer_norm(tx, (33,), w_, b_, 1e-5).numpy(), dt, 2)


def test_norms_without_weight_gradients_only_for_what_is_given(rng):
    x = em.tensor(rng.standard_normal((4, 6)), dtype=WIDE)
    w = em.tensor(rng.standard_normal(6), dtype=WIDE)
    gradcheck(lambda a: ops.rms_norm(a, None), [x])
    gradcheck(lambda a: ops.layer_norm(a), [x])
    gradcheck(lambda a, c: ops.layer_norm(a, c, None), [x, w])
    gradcheck(lambda a, c: ops.layer_norm(a, None, c), [x, w])
    # the op's inputs are only what was given: no ones/zeros tensor was built, none gets a gradient
    xv, bv = em.Var(x), em.Var(w)
    y = ops.layer_norm(xv, None, bv)
    assert y.op.name == "layer_norm"
    gs = (y * y).sum().backward()
    assert len(gs) == 2 and gs.get(xv) is not None and gs.get(bv) is not None
    y = ops.rms_norm(xv)
    gs = (y * y).sum().backward()
    assert len(gs) == 1
    # second order through the composite backward
    g1 = (ops.rms_norm(xv) ** 3).sum().backward(create_graph=True)[xv]
    assert np.isfinite((g1 * g1).sum().backward()[xv].numpy()).all()


def test_norms_without_weight_bad_input():
    with pytest.raises(em.ShapeError, match=r"^\[rms_norm\]"):
        ops.rms_norm(em.zeros(()))
    with pytest.raises(em.DTypeError, match=r"^\[layer_norm\]"):
        ops.layer_norm(em.zeros(3, 4), None, em.zeros(4, dtype=em.float16 if em.float16 in FLOATS else em.int64))
    with pytest.raises(em.ShapeError, match=r"^\[layer_norm\]"):
        ops.layer_norm(em.zeros(3, 4), None, em.zeros(5))
