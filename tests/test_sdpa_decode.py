"""The CPU decode kernel with fewer than 6 query rows per kv head (one pass over each value row of up
to 8 vectors): values vs a float64 torch reference for wide value rows, ragged tails, masks, causal,
soft-capping, strided and packed K/V, every float dtype."""
import numpy as np
import pytest
import torch

import ember as em
from ember.nn import ops

TOL = {"float64": (1e-10, 1e-12), "float32": (3e-5, 3e-6), "float16": (2e-2, 4e-3), "bfloat16": (6e-2, 2e-2)}
DTYPES = [em.float64, em.float32, em.float16, em.bfloat16]  # the CPU kernel: every float dtype


def reference(q, k, v, causal, mask=None, softcap=0.0):
    """float64 softmax(q kᵀ / sqrt(D)) v by hand; causal aligned bottom-right; bool mask keeps True;
    fully masked rows give 0."""
    tq, tk, tv = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (q, k, v))
    rep = tq.shape[1] // tk.shape[1]
    tk, tv = tk.repeat_interleave(rep, 1), tv.repeat_interleave(rep, 1)
    s = tq @ tk.transpose(-1, -2) / np.sqrt(tq.shape[-1])
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    lq, lk = s.shape[-2:]
    keep = torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        keep = keep.tril(diagonal=lk - lq)
    if mask is not None:
        keep = keep & torch.from_numpy(mask)
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), 0.0)
    return (p @ tv).numpy()


def close(a, ref, dt):
    rtol, atol = TOL[dt.name]
    np.testing.assert_allclose(np.asarray(a.numpy()).astype(np.float64), ref,
                               rtol=rtol, atol=2 * atol + 2 * rtol * np.abs(ref).max())


# Dv 128 / 136 / 264: one or more 8-vector passes plus 4- and 1-vector tails at every vector width;
# key counts off the 64-key blocks; 1..5 query rows per kv head (grouped heads too).
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("B,H,Hkv,Lq,Lk,D,Dv", [(1, 3, 3, 1, 1000, 64, 128), (2, 4, 2, 2, 129, 32, 136),
                                                (1, 2, 1, 1, 63, 16, 264), (1, 5, 1, 1, 300, 128, 128),
                                                (1, 2, 2, 3, 2, 8, 136)])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_wide_value_rows(dt, B, H, Hkv, Lq, Lk, D, Dv, causal, rng):
    q, k, v = (rng.standard_normal(s) for s in ((B, H, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, Dv)))
    eq, ek, ev = (em.tensor(a, dtype=dt, device="cpu") for a in (q, k, v))
    y = ops.sdpa(eq, ek, ev, causal=causal)
    close(y, reference(*(t.numpy() for t in (eq, ek, ev)), causal), dt)


@pytest.mark.parametrize("dt", [em.float32, em.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["mask", "softcap", "strided_v", "nonfinite"])
def test_decode_wide_value_rows_masks_softcap_strides(dt, case, rng):
    B, H, Lq, Lk, D, Dv = 2, 2, 1, 517, 32, 144
    q, k = rng.standard_normal((B, H, Lq, D)), rng.standard_normal((B, H, Lk, D))
    v = rng.standard_normal((B, H, Lk, Dv))
    eq, ek = em.tensor(q, dtype=dt, device="cpu"), em.tensor(k, dtype=dt, device="cpu")
    ev = em.tensor(v, dtype=dt, device="cpu")
    kw, mask, softcap = {}, None, 0.0
    if case == "mask":
        mask = rng.random((B, H, Lq, Lk)) > 0.3
        mask[1, 0, 0] = False  # a fully masked row gives 0
        kw["mask"] = em.tensor(mask.astype(np.uint8), device="cpu")
    elif case == "softcap":
        softcap = 2.5
        kw["softcap"] = softcap
    elif case == "strided_v":  # value rows packed per block (last dim strided)
        ev = em.tensor(np.ascontiguousarray(np.swapaxes(v, -1, -2)), dtype=dt, device="cpu").transpose(-1, -2)
    else:  # a -inf key is skipped; huge scores stay finite
        k[0, 1, 7] = 0.0
        k[0, 1, 7, 0] = -np.inf if q[0, 1, 0, 0] > 0 else np.inf
        v[1, 0, 3] *= 1e30
        eq, ek, ev = (em.tensor(a, dtype=dt, device="cpu") for a in (q, k, v))
    y = ops.sdpa(eq, ek, ev, **kw)
    want = reference(q, k, v, False, mask, softcap)
    close(y, want, dt)
    if case == "mask":
        assert np.all(y.numpy()[1, 0, 0] == 0)
