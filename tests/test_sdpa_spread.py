"""CPU sdpa with extreme score spreads (a row's scores span ~250 in base 2, so softmax weights fall through
float32's subnormal range and to 0): forward (tiled, fused-tile and both decode paths) and backward
against a float64 reference, keys in every order (the row max first, last, or anywhere)."""
import numpy as np
import pytest
import torch

import ember as em
from ember.nn import ops

RTOL, ATOL = 3e-5, 3e-6  # float32, as the other sdpa kernel tests

# (B, H, Hkv, Lq, Lk, D): the tiled forward with whole 64-key tiles and a ragged one; the decode path
# with the rows in vector lanes (8 rows per kv head) and with rows of their own (2 rows per kv head).
SHAPES = [(1, 2, 2, 40, 300, 64), (1, 8, 1, 1, 300, 64), (1, 2, 2, 2, 300, 32)]


def spread_inputs(shape, order, rng):
    """q, k, v with exact float32 scores t_j + r_i u_j (t_j in [-173, 0] natural units: down to ~-250 in
    base 2, multiples of 1/8) and value column 0 equal to min(e^-t_j, 2^100): every key whose weight is
    above ~2^-100 adds about the same amount to output column 0, so a weight lost above float32's
    normal range shows, while those below 2^-126 add under 2^-26."""
    B, H, Hkv, Lq, Lk, D = shape
    t = -np.round(rng.uniform(0, 173, (B, Hkv, Lk)) * 8) / 8
    t[..., rng.integers(Lk)] = 0.0
    if order == "ascending":  # the max last: every tile raises it, by up to ~250 (alpha underflows)
        t = np.sort(t, -1)
    elif order == "descending":  # the max first: later tiles' weights are all tiny
        t = -np.sort(-t, -1)
    u = np.round(rng.uniform(-2, 2, (B, Hkv, Lk)) * 8) / 8
    k = np.zeros((B, Hkv, Lk, D))
    k[..., 0], k[..., 1] = t, u
    q = np.zeros((B, H, Lq, D))
    q[..., 0] = 1.0
    q[..., 1] = rng.integers(-1, 2, (B, H, Lq))
    v = rng.standard_normal((B, Hkv, Lk, D))
    v[..., 0] = np.exp(np.minimum(-t, 100 * np.log(2)))
    return q, k, v


def reference(q, k, v, g):
    """float64 softmax(q kᵀ) v (scale 1) and its gradients."""
    rep = q.shape[1] // k.shape[1]
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    s = tq @ tk.repeat_interleave(rep, 1).transpose(-1, -2)
    y = torch.softmax(s, -1) @ tv.repeat_interleave(rep, 1)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


def close(got, want, what):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), what
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=2 * ATOL + 2 * RTOL * np.abs(want).max(), err_msg=what)


@pytest.mark.parametrize("shape", SHAPES, ids=["tiled", "decode_lanes", "decode_rows"])
@pytest.mark.parametrize("order", ["shuffled", "ascending", "descending"])
def test_sdpa_extreme_spread_matches_float64(shape, order, rng):
    q, k, v = spread_inputs(shape, order, rng)
    g = rng.standard_normal(q.shape)
    qv, kv, vv = (em.Var(em.tensor(a, dtype=em.float32, device="cpu")) for a in (q, k, v))
    y = ops.sdpa(qv, kv, vv, scale=1.0)
    grads = (y * em.tensor(g, dtype=em.float32, device="cpu")).sum().backward()
    # the reference sees the inputs as float32 rounded them (t, u, q are exact; v's column 0 is not)
    want = reference(*(t.numpy().astype(np.float64) for t in (qv, kv, vv)), g)
    close(y.numpy(), want[0], "out")
    # the forward alone must keep the keys near the max: column 0 counts the keys above ~2^-100
    assert np.abs(want[0][..., 0]).min() > 10
    for t, w, name in zip((qv, kv, vv), want[1:], ("dq", "dk", "dv")):
        close(grads[t].numpy(), w, name)
