"""ops.sdpa_qkv (attention of a packed (B, L, 3E) projection, as nn.CausalSelfAttention runs it) and the
sdpa kernels' strided destinations (_C.fused.sdpa_fwd out=, sdpa_bwd dq=/dk=/dv=) against torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import ember as em
from ember import _C
from ember.errors import EmberError
from ember.nn import ops

from conftest import TEST_DEVICE

F = _C.fused
TOL = {"float64": (1e-11, 1e-12), "float32": (2e-5, 2e-6)}


def ref(a, heads, causal, g):
    """torch's attention on the (B, H, L, D) views of the packed projection, and its gradient."""
    t = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    b, n, e3 = a.shape
    q, k, v = t.reshape(b, n, 3, heads, e3 // 3 // heads).permute(2, 0, 3, 1, 4)
    y = tF.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(b, n, e3 // 3)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), t.grad.numpy()


def close(got, want, dt, what):
    rtol, atol = TOL[dt]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol + rtol * np.abs(want).max(),
                               err_msg=what)


# (B, L, H, D): the decode forward (H * L <= 16 rows), split-key backward (B * H < 32), whole-head items
SHAPES = [(2, 5, 2, 8), (1, 130, 2, 16), (3, 70, 4, 16), (8, 64, 4, 32), (2, 33, 3, 7)]


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("view", ["dense", "offset", "strided"])
def test_sdpa_qkv_matches_torch(dt, shape, causal, view):
    b, n, h, d = shape
    e3 = 3 * h * d
    rng = np.random.default_rng(hash((shape, causal, view)) % 2**32)
    a = rng.standard_normal((b, n, e3))
    g = rng.standard_normal((b, n, e3 // 3))
    if view == "dense":
        x = em.Var(em.tensor(a, dtype=dt, device="cpu"))
        xv = x
    elif view == "offset":  # a narrow of a wider projection: row stride 3E + 5, nonzero offset
        wide = np.concatenate([rng.standard_normal((b, n, 2)), a, rng.standard_normal((b, n, 3))], 2)
        x = em.Var(em.tensor(wide, dtype=dt, device="cpu"))
        xv = x.narrow(2, 2, e3)
    else:  # (L, B, 3E) memory seen as (B, L, 3E)
        x = em.Var(em.tensor(np.ascontiguousarray(a.transpose(1, 0, 2)), dtype=dt, device="cpu"))
        xv = x.transpose(0, 1)
    y = ops.sdpa_qkv(xv, h, causal=causal)
    grads = (y * em.tensor(g, dtype=dt, device="cpu")).sum().backward()
    want_y, want_g = ref(np.asarray(xv.numpy(), np.float64), h, causal, g)
    assert y.shape == (b, n, e3 // 3)
    close(y.numpy(), want_y, dt, "output")
    gx = grads[x].numpy()
    if view == "offset":
        assert np.all(gx[..., :2] == 0) and np.all(gx[..., 2 + e3:] == 0)
        gx = gx[..., 2:2 + e3]
    elif view == "strided":
        gx = gx.transpose(1, 0, 2)
    close(gx, want_g, dt, "gradient")


def test_sdpa_qkv_same_as_views():
    """Bit for bit the values sdpa gives on the views (the same kernels, only the destinations differ)."""
    rng = np.random.default_rng(3)
    b, n, h, d = 4, 96, 4, 32
    x = em.Var(em.tensor(rng.standard_normal((b, n, 3 * h * d)), dtype="float32", device="cpu"))
    g = em.tensor(rng.standard_normal((b, n, h * d)), dtype="float32", device="cpu")
    y = ops.sdpa_qkv(x, h)
    q, k, v = x.reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
    y2 = ops.sdpa(q, k, v, causal=True).transpose(1, 2).reshape(b, n, h * d)
    assert np.array_equal(y.numpy(), y2.numpy())
    assert np.array_equal((y * g).sum().backward()[x].numpy(), (y2 * g).sum().backward()[x].numpy())


def test_sdpa_qkv_second_order():
    """create_graph differentiates the composite: the gradient of a gradient matches torch's."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 9, 3 * 2 * 4))
    x = em.Var(em.tensor(a, dtype="float64", device="cpu"))
    y = ops.sdpa_qkv(x, 2)
    gx = (y * y).sum().backward(create_graph=True)[x]
    gg = (gx * gx).sum().backward()[x].numpy()
    t = torch.tensor(a, requires_grad=True)
    q, k, v = t.reshape(2, 9, 3, 2, 4).permute(2, 0, 3, 1, 4)
    s = (q @ k.transpose(-1, -2)) / 2.0 + torch.full((9, 9), float("-inf"), dtype=torch.float64).triu(1)
    ty = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(2, 9, 8)  # by hand: torch's fused one has no 2nd order
    (tg,) = torch.autograd.grad((ty * ty).sum(), t, create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(gg, tgg.numpy(), rtol=1e-9, atol=1e-10)


def test_sdpa_qkv_device():
    """On the device under test (the emulated Metal / CUDA run sdpa on the views) it matches torch."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 20, 3 * 2 * 8))
    g = rng.standard_normal((2, 20, 16))
    x = em.Var(em.tensor(a, dtype="float32", device=TEST_DEVICE))
    y = ops.sdpa_qkv(x, 2)
    gx = (y * em.tensor(g, dtype="float32", device=TEST_DEVICE)).sum().backward()[x]
    want_y, want_g = ref(a.astype(np.float32).astype(np.float64), 2, True, g)
    close(y.numpy(), want_y, "float32", "output")
    close(gx.numpy(), want_g, "float32", "gradient")


def test_sdpa_qkv_errors():
    x = em.randn(2, 5, 12, device="cpu")
    with pytest.raises(EmberError, match=r"^\[sdpa\]"):
        ops.sdpa_qkv(x, 5)  # E = 4 not divisible by 5 heads
    with pytest.raises(EmberError, match=r"^\[sdpa\]"):
        ops.sdpa_qkv(em.randn(2, 12, device="cpu"), 2)
    with pytest.raises(EmberError, match=r"^\[sdpa\]"):
        ops.sdpa_qkv(em.zeros(2, 5, 12, dtype="int32", device="cpu"), 2)


def test_destination_checks():
    """The kernels' destinations: shape, dtype, unit last stride and bounds are checked ([sdpa] errors)."""
    q = em.randn(2, 3, 10, 8, device="cpu")
    s, l = q._storage, q._layout
    out, lse = F.sdpa_fwd(s, l, s, l, s, l)
    g = em.randn(2, 3, 10, 8, device="cpu")
    dest = em.zeros(2, 3, 10, 8, device="cpu")
    bad = [
        em.zeros(2, 3, 10, 7, device="cpu"),  # shape
        em.zeros(2, 3, 10, 8, dtype="float64", device="cpu"),  # dtype
        em.zeros(2, 3, 8, 10, device="cpu").transpose(2, 3),  # last stride not 1
    ]
    for d in bad:
        with pytest.raises(EmberError, match=r"^\[sdpa\]"):
            F.sdpa_fwd(s, l, s, l, s, l, out=d._storage, lout=d._layout)
        with pytest.raises(EmberError, match=r"^\[sdpa_bwd\]"):
            F.sdpa_bwd(s, l, s, l, s, l, out, l, lse, g._storage, g._layout, dq=d._storage, ldq=d._layout)
    small = em.zeros(10, device="cpu")
    with pytest.raises(EmberError, match=r"^\[sdpa"):
        F.sdpa_fwd(s, l, s, l, s, l, out=small._storage, lout=dest._layout)  # out of bounds
    with pytest.raises(EmberError, match=r"^\[sdpa"):
        F.sdpa_fwd(s, l, s, l, s, l, out=dest._storage)  # no layout
    # a valid strided destination gets exactly the dense result
    big = em.zeros(2, 10, 3, 9, device="cpu")
    view = big.narrow(3, 1, 8).transpose(1, 2)
    o2, _ = F.sdpa_fwd(s, l, s, l, s, l, out=view._storage, lout=view._layout)
    assert o2 is None
    dense = np.asarray(out.as_numpy(l))
    assert np.array_equal(view.numpy(), dense)
    assert np.all(big.numpy()[..., 0] == 0)


def test_destinations_must_not_overlap():
    """A destination that shares an element with an operand (read while it is written) or with another
    destination is refused with an [sdpa] error and left as it was; views of one buffer that interleave
    without sharing an element (sdpa_qkv's layout) are accepted and give the dense result."""
    rng = np.random.default_rng(3)
    buf = em.tensor(rng.standard_normal((2, 10, 4, 3, 8)).astype(np.float32), device="cpu")  # q, k, v, out parts
    s = buf._storage
    parts = [buf[:, :, i].transpose(1, 2) for i in range(4)]  # (B, H, L, D) views, interleaved in buf
    (q, lq), (k, lk), (v, lv), (o, lo) = ((t._storage, t._layout) for t in parts)
    dense, lse = F.sdpa_fwd(q, lq, k, lk, v, lv)
    shifted = _C.Layout(list(lv.shape), list(lv.stride), lv.start_offset + 4)  # half in v, half beyond
    before = buf.numpy().copy()
    for lout, what in ((lq, "query"), (lk, "key"), (lv, "value"), (shifted, "value")):
        with pytest.raises(EmberError, match=r"^\[sdpa\] out destination overlaps " + what + r" \(destinations must"):
            F.sdpa_fwd(q, lq, k, lk, v, lv, out=s, lout=lout)
    m = em.zeros(2, 3, 10, 10, device="cpu")  # an additive mask whose first 8 columns are the destination
    with pytest.raises(EmberError, match=r"^\[sdpa\] out destination overlaps mask"):
        F.sdpa_fwd(q, lq, k, lk, v, lv, m._storage, m._layout, out=m._storage, lout=m[:, :, :, :8]._layout)
    assert np.array_equal(buf.numpy(), before)  # nothing written
    assert F.sdpa_fwd(q, lq, k, lk, v, lv, out=s, lout=lo)[0] is None  # the free quarter of the same buffer
    assert np.array_equal(parts[3].numpy(), np.asarray(dense.as_numpy(_C.Layout.contiguous([2, 3, 10, 8]))))
    assert np.array_equal(buf.numpy()[:, :, :3], before[:, :, :3])
    # q and out in one buffer, their blocks alternating with no common period: exact, either way
    flat = em.tensor(rng.standard_normal(1200).astype(np.float32), device="cpu")
    lq2 = _C.Layout([2, 3, 10, 8], [480, 80, 8, 1], 0)  # elements [0, 240) and [480, 720)
    kv = em.tensor(rng.standard_normal((2, 3, 10, 8)).astype(np.float32), device="cpu")
    args = (flat._storage, lq2, kv._storage, kv._layout, kv._storage, kv._layout)
    with pytest.raises(EmberError, match=r"^\[sdpa\] out destination overlaps query"):
        F.sdpa_fwd(*args, out=flat._storage, lout=_C.Layout([2, 3, 10, 8], [720, 80, 8, 1], 200))
    F.sdpa_fwd(*args, out=flat._storage, lout=_C.Layout([2, 3, 10, 8], [720, 80, 8, 1], 240))  # [240, 480), [960, 1200)
    want = np.asarray(F.sdpa_fwd(*args)[0].as_numpy(_C.Layout.contiguous([2, 3, 10, 8])))
    got = flat.numpy()
    assert np.array_equal(np.stack([got[240:480], got[960:1200]]).reshape(2, 3, 10, 8), want)

    # two storages over one borrowed buffer: their offsets are not comparable, so any overlap of the
    # memory is refused
    a = np.zeros(488, np.float32)
    b1, b2 = (em.from_dlpack(a[i:i + 480]).reshape(2, 3, 10, 8) for i in (0, 8))
    assert b1._storage is not b2._storage
    x = em.tensor(rng.standard_normal((2, 3, 10, 8)).astype(np.float32), device="cpu")
    with pytest.raises(EmberError, match=r"^\[sdpa\] out destination overlaps query"):
        F.sdpa_fwd(b2._storage, b2._layout, x._storage, x._layout, x._storage, x._layout, out=b1._storage,
                   lout=b1._layout)

    # the backward: dq, dk, dv against every operand (o, grad and lse too) and against each other
    g = em.tensor(rng.standard_normal((2, 3, 10, 8)).astype(np.float32), device="cpu")
    out = em.tensor(np.asarray(dense.as_numpy(_C.Layout.contiguous([2, 3, 10, 8]))), device="cpu")
    common = (q, lq, k, lk, v, lv, out._storage, out._layout, lse, g._storage, g._layout)
    d = em.zeros(2, 3, 10, 8, device="cpu")
    d2 = em.zeros(2, 3, 10, 8, device="cpu")
    for kw, what in (
        ({"dq": s, "ldq": lk}, "dq destination overlaps key"),
        ({"dk": s, "ldk": lo}, None),  # a free part of the operands' buffer: accepted
        ({"dv": out._storage, "ldv": out._layout}, "dv destination overlaps out"),
        ({"dq": g._storage, "ldq": _C.Layout([2, 3, 10, 8], [240, 8, 24, 1], 0)}, "dq destination overlaps grad"),
        ({"dq": d._storage, "ldq": d._layout, "dk": d._storage, "ldk": d._layout}, "dq destination overlaps dk"),
        ({"dk": d._storage, "ldk": d._layout, "dv": d._storage, "ldv": d._layout}, "dk destination overlaps dv"),
        ({"dq": d._storage, "ldq": d._layout, "dv": d2._storage, "ldv": d2._layout}, None),
    ):
        if what is None:
            F.sdpa_bwd(*common, **kw)
            continue
        with pytest.raises(EmberError, match=r"^\[sdpa_bwd\] " + what):
            F.sdpa_bwd(*common, **kw)
    # lse passed in a storage a destination also views: its first B*H*Lq values are read
    lse_np = np.asarray(lse.as_numpy(_C.Layout.contiguous([60])))
    both = em.tensor(np.concatenate([lse_np, np.zeros(480, np.float32)]), device="cpu")
    tail = both[60:].reshape(2, 3, 10, 8)
    F.sdpa_bwd(*common[:8], both._storage, *common[9:], dq=both._storage, ldq=tail._layout)  # disjoint: accepted
    over = both[40:520].reshape(2, 3, 10, 8)
    with pytest.raises(EmberError, match=r"^\[sdpa_bwd\] dq destination overlaps lse"):
        F.sdpa_bwd(*common[:8], both._storage, *common[9:], dq=both._storage, ldq=over._layout)


def test_causal_self_attention_layer():
    """nn.CausalSelfAttention (on sdpa_qkv) against torch's same computation, gradients included."""
    rng = np.random.default_rng(6)
    em.manual_seed(0)
    f64 = "float64" if TEST_DEVICE.type != "metal" else "float32"  # Metal has no float64
    m = em.nn.CausalSelfAttention(32, 4, dtype=f64, device=TEST_DEVICE)
    a = rng.standard_normal((3, 17, 32))
    x = em.Var(em.tensor(a, dtype=f64, device=TEST_DEVICE))
    y = m(x)
    grads = (y * y).sum().backward()
    f8 = lambda v: torch.tensor(np.asarray(v, dtype=f64).astype(np.float64), requires_grad=True)  # noqa: E731
    t, wq, wp = f8(a), f8(m.qkv.weight.numpy()), f8(m.proj.weight.numpy())
    q, k, v = (t @ wq.T).reshape(3, 17, 3, 4, 8).permute(2, 0, 3, 1, 4)
    ty = tF.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(3, 17, 32) @ wp.T
    (ty * ty).sum().backward()
    rtol = 1e-9 if f64 == "float64" else 2e-4
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol * 1e-2)
    for p, tp in ((x, t), (m.qkv.weight, wq), (m.proj.weight, wp)):
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=rtol, atol=rtol * np.abs(tp.grad.numpy()).max())


def test_destination_off_cpu(cuda):
    # the device under test when it is a GPU, else the (emulated) CUDA device: never skipped
    q = em.randn(1, 2, 4, 8, device=TEST_DEVICE if TEST_DEVICE.type != "cpu" else cuda)
    s, l = q._storage, q._layout
    with pytest.raises(EmberError, match=r"^\[sdpa\] out destinations are supported on the CPU only"):
        F.sdpa_fwd(s, l, s, l, s, l, out=s, lout=l)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("form", ["batch_first", "seq_first", "unbatched"])
def test_multihead_self_attention_packed(causal, form):
    """MultiHeadAttention's self-attention without masks (the packed path on the CPU) gives what the
    attention-matrix path (need_weights) gives, values and gradients, and torch's."""
    rng = np.random.default_rng(7)
    em.manual_seed(1)
    f64 = "float64" if TEST_DEVICE.type != "metal" else "float32"  # Metal has no float64
    tight = 1.0 if f64 == "float64" else 1e6
    m = em.nn.MultiHeadAttention(24, 3, batch_first=form != "seq_first", dtype=f64, device=TEST_DEVICE)
    m.in_proj_bias.set(em.tensor(rng.standard_normal(72), dtype=f64, device=TEST_DEVICE))
    shape = {"batch_first": (2, 11, 24), "seq_first": (11, 2, 24), "unbatched": (11, 24)}[form]
    x = em.Var(em.tensor(rng.standard_normal(shape), dtype=f64, device=TEST_DEVICE))
    y, w = m(x, is_causal=causal)
    assert w is None
    y2, _ = m(x, is_causal=causal, need_weights=True)
    np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-11 * tight, atol=1e-12 * tight)
    params = [x, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight]
    g1, g2 = (y * y).sum().backward(), (y2 * y2).sum().backward()
    for p in params:
        np.testing.assert_allclose(g1[p].numpy(), g2[p].numpy(), rtol=1e-10 * tight, atol=1e-11 * tight)
    tm = torch.nn.MultiheadAttention(24, 3, batch_first=form != "seq_first", dtype=torch.float64)
    with torch.no_grad():
        tm.in_proj_weight.copy_(torch.tensor(np.float64(1) * m.in_proj_weight.numpy()))
        tm.in_proj_bias.copy_(torch.tensor(np.float64(1) * m.in_proj_bias.numpy()))
        tm.out_proj.weight.copy_(torch.tensor(np.float64(1) * m.out_proj.weight.numpy()))
        tm.out_proj.bias.copy_(torch.tensor(np.float64(1) * m.out_proj.bias.numpy()))
    tx = torch.tensor(np.asarray(x.numpy(), np.float64))
    n = shape[0] if form == "seq_first" else shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    ty, _ = tm(tx, tx, tx, attn_mask=mask, need_weights=False)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10 * tight, atol=1e-12 * tight)
