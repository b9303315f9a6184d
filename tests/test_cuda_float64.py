"""float64 on the cuda device (the emulator here): each op family runs the float32 kernels retyped to double
(cpp/cuda/kernels.h), so results match the CPU's float64 ones to double rounding, and gradients check against
finite differences on cuda itself. Metal still refuses float64 (tests/test_metal_device.py)."""

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn.ops import sdpa
from ember.testing import gradcheck

RT, AT = 1e-12, 1e-13  # double rounding (sums in another order, the math library's last bit)


def _pair(a, cuda):
    return em.tensor(a, device="cpu"), em.tensor(a, device=cuda)


def _close(got, want, rtol=RT, atol=AT):
    assert got.dtype == want.dtype and got.device.type == "cuda", (got.dtype, got.device)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)


def test_float64_is_held_and_moves(cuda, rng):
    assert em._C.device_supports(cuda.kind, cuda.index, em.float64.code)
    x = rng.standard_normal((3, 5)) * 1e10 + rng.standard_normal((3, 5))  # needs double's 53 bits
    c = em.tensor(x, device="cpu").to(cuda)
    assert c.dtype == em.float64 and c.device == cuda
    np.testing.assert_array_equal(c.numpy(), x)
    np.testing.assert_array_equal(c.T.contiguous().numpy(), x.T)
    np.testing.assert_array_equal(em.arange(6, dtype=em.float64, device="cpu").to(cuda).numpy(), np.arange(6.0))
    s = em.CudaStorage.empty(4, "float64", device=cuda)
    assert s.nbytes == 32 and s.dtype == em.float64


@pytest.mark.parametrize("other", ["float32", "float16", "bfloat16", "int64", "int32", "uint32", "uint8", "bool"])
def test_casts_to_and_from_every_dtype(cuda, rng, other):
    x = rng.standard_normal(257) * 300
    x[:4] = [0.0, -0.0, 1e-30, 2.0 ** 40 + 0.5]
    h, d = _pair(x, cuda)
    np.testing.assert_array_equal(d.to(dtype=other).numpy(), h.to(dtype=other).numpy())  # the CPU's rules
    np.testing.assert_array_equal(d[::3].to(dtype=other).numpy(), h[::3].to(dtype=other).numpy())
    back_h = h.to(dtype=other)
    np.testing.assert_array_equal(back_h.to(cuda).to(dtype="float64").numpy(), back_h.to(dtype="float64").numpy())


def test_elementwise_and_reductions(cuda, rng):
    a, b = rng.standard_normal((7, 33)), rng.uniform(0.5, 2.0, (7, 33))
    (ha, da), (hb, db) = _pair(a, cuda), _pair(b, cuda)
    for f in (lambda x, y: x * y + x / y, lambda x, y: (x - y) ** 3, lambda x, y: em.maximum(x, y.T.T),
              lambda x, y: x.exp() + y.log() + x.erf() + x.gelu() + x.tanh() + y.sqrt() + x.sigmoid(),
              lambda x, y: x.T.sin() * 1.000000001, lambda x, y: x.clamp(-0.5, 0.25) + (x * 1e-9).expm1()):
        _close(f(da, db), f(ha, hb))
    for f in (lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.T.mean(0), lambda x: x.max(0)[0],
              lambda x: x.var(1), lambda x: x.sqr().sum().sqrt(), lambda x: x.logsumexp(1), lambda x: x.cumsum(1),
              lambda x: x.cumprod(1), lambda x: x.argmax(1)):
        got, want = f(da), f(ha)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RT, atol=AT)
    big = rng.standard_normal(20000) + 1e8  # float accumulators would lose the small parts
    _close(em.tensor(big, device=cuda).sum(), em.tensor(big, device="cpu").sum(), rtol=1e-14)


def test_matmul_index_cat_sort(cuda, rng):
    a, b = rng.standard_normal((2, 9, 17)), rng.standard_normal((2, 17, 5))
    (ha, da), (hb, db) = _pair(a, cuda), _pair(b, cuda)
    _close(da @ db, ha @ hb)
    _close(da.transpose(1, 2).transpose(1, 2) @ db[:, :, 1:], ha @ hb[:, :, 1:])
    ids = rng.integers(0, 9, 12)
    hi, di = em.tensor(ids, device="cpu"), em.tensor(ids, device=cuda)
    _close(da.index_select(1, di), ha.index_select(1, hi), 0, 0)
    _close(em.cat([da, da * 2], 2), em.cat([ha, ha * 2], 2), 0, 0)
    _close(da[:, ::2].gather(2, em.tensor(np.zeros((2, 5, 3), np.int64), device=cuda)),
           ha[:, ::2].gather(2, em.tensor(np.zeros((2, 5, 3), np.int64), device="cpu")), 0, 0)
    _close(em.zeros((2, 9, 17), dtype=em.float64, device=cuda).index_add(1, di, em.cat([da, da], 1)[:, :12]),
           em.zeros((2, 9, 17), dtype=em.float64, device="cpu").index_add(1, hi, em.cat([ha, ha], 1)[:, :12]))
    v, i = da.sort(2)
    hv, hidx = ha.sort(2)
    _close(v, hv, 0, 0)
    np.testing.assert_array_equal(i.numpy(), hidx.numpy())
    tv, ti = da.topk(4, 2)
    np.testing.assert_array_equal(tv.numpy(), ha.topk(4, 2)[0].numpy())


def test_conv_pool_interpolate(cuda, rng):
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 3))
    (hx, dx), (hw, dw) = _pair(x, cuda), _pair(w, cuda)
    F = nn.functional
    _close(F.conv2d(dx, dw, padding=1, stride=(2, 1)), F.conv2d(hx, hw, padding=1, stride=(2, 1)))
    _close(F.max_pool2d(dx, 2), F.max_pool2d(hx, 2), 0, 0)
    _close(F.avg_pool2d(dx, 3, stride=2), F.avg_pool2d(hx, 3, stride=2))
    _close(F.interpolate(dx, scale_factor=1.7, mode="bilinear"), F.interpolate(hx, scale_factor=1.7, mode="bilinear"))


def test_random_streams(cuda):
    em.manual_seed(11)
    u = em.rand(1000, dtype=em.float64, device=cuda).numpy()
    n = em.randn(1000, dtype=em.float64, device=cuda).numpy()
    em.manual_seed(11)
    np.testing.assert_array_equal(u, em.rand(1000, dtype=em.float64, device="cpu").numpy())  # 53 bits, the CPU's
    np.testing.assert_allclose(n, em.randn(1000, dtype=em.float64, device="cpu").numpy(), rtol=1e-12, atol=1e-12)
    assert len(np.unique(u)) == 1000 and (u * 2.0 ** 53 % 1 == 0).all() and (u * 2.0 ** 24 % 1 != 0).any()


def test_fused_forward_backward(cuda, rng):
    F = nn.functional
    x, w, b = rng.standard_normal((3, 4, 16)), rng.standard_normal(16), rng.standard_normal(16)
    q, k, v = (rng.standard_normal((2, 2, 5, 8)) for _ in range(3))
    t = rng.integers(0, 16, 12)
    fns = {
        "softmax": lambda x: F.softmax(x, -1) * 3,
        "log_softmax": lambda x: F.log_softmax(x.transpose(0, 2), -1),
        "rms_norm": lambda x, w: F.rms_norm(x, w, 1e-6),
        "layer_norm": lambda x, w, b: F.layer_norm(x, w, b, 1e-5),
        "gelu": lambda x: F.gelu(x) + F.silu(x) + F.elu(x),
        "sdpa": lambda q, k, v: sdpa(q, k, v, causal=True),
        "cross_entropy": lambda x: F.cross_entropy(x.reshape(12, 16), em.tensor(t, device=x.device)),
        "group_norm": lambda x: F.group_norm(x.reshape(3, 4, 4, 4), 2),
    }
    args = {"softmax": (x,), "log_softmax": (x,), "rms_norm": (x, w), "layer_norm": (x, w, b), "gelu": (x,),
            "sdpa": (q, k, v), "cross_entropy": (x,), "group_norm": (x,)}
    for name, f in fns.items():
        hv = [em.Var(em.tensor(a, device="cpu")) for a in args[name]]
        dv = [em.Var(em.tensor(a, device=cuda)) for a in args[name]]
        ho, do = f(*hv), f(*dv)
        _close(do, ho, 1e-11, 1e-12)
        hg, dg = ho.sum().backward(), do.sum().backward()
        for h, d in zip(hv, dv):
            np.testing.assert_allclose(dg[d].numpy(), hg[h].numpy(), rtol=1e-10, atol=1e-11, err_msg=name)


def test_gradcheck_on_cuda(cuda, rng):
    # finite differences on cuda itself, in float64: no CPU reference involved
    F = nn.functional
    x = em.tensor(rng.standard_normal((2, 3, 8)), device=cuda)
    w = em.tensor(rng.standard_normal(8), device=cuda)
    q, k = (em.tensor(rng.standard_normal((1, 2, 4, 8)), device=cuda) for _ in range(2))
    assert gradcheck(lambda x, w: F.layer_norm(x, w, None, 1e-5), (x, w))
    assert gradcheck(lambda x: F.log_softmax(x, -1).exp().sum(1), (x,))
    assert gradcheck(lambda q, k: sdpa(q, k, k), (q, k))
    assert gradcheck(lambda x: (x @ x.transpose(1, 2)).tanh().max(-1)[0], (x,))
