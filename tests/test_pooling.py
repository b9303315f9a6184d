"""Pooling against torch: max_pool1d/2d (with indices), avg_pool1d/2d and adaptive_avg_pool1d/2d — values
and gradients on strided inputs in every float dtype, finite differences in float64, the modules, and
each bad argument."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare

import ember as em
from ember.tensor_type import _wrap

from conftest import FLOATS, WIDE, WIDE_NP, expect_error

MAX2D = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=3, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
]
AVG2D = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
]


@pytest.mark.parametrize("kw", MAX2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_max_pool2d_matches_torch(kw, kind, rng, device):
    compare(lambda x: em.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_pooling_every_dtype(dt, rng, device):
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    compare(lambda x: em.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), [(2, 3, 8, 7)], dt, "transposed",
            rng, device)
    compare(lambda x: em.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), [(2, 3, 8, 7)], dt, "offset",
            rng, device)
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, (3, 4)), lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
            [(2, 3, 8, 7)], dt, "stepped", rng, device)
    compare(lambda x: em.nn.max_pool1d(x, 3, 2, 1), lambda x: F.max_pool1d(x, 3, 2, 1), [(2, 3, 11)], dt,
            "contiguous", rng, device)


def test_max_pool_indices_match_torch(rng):
    for kw in MAX2D:
        x = rng.standard_normal((2, 3, 9, 10)).astype(WIDE_NP)
        v, i = em.nn.max_pool2d(em.tensor(x), **kw, return_indices=True)
        tv, ti = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        assert i.dtype is em.int64
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    x = rng.standard_normal((3, 13)).astype(WIDE_NP)  # unbatched 1-D
    v, i = em.nn.max_pool1d(em.tensor(x), 4, 3, 2, 1, True, True)
    tv, ti = F.max_pool1d(torch.tensor(x), 4, 3, 2, 1, True, True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_max_pool_all_negative_input_never_picks_the_padding(rng):
    # im2col pads with zeros: a window of negatives at the border must still give its own maximum.
    x = -rng.uniform(1, 2, size=(1, 2, 5, 5)).astype(WIDE_NP)
    for t in (em.tensor(x), em.Var(x)):  # the running-maximum path and the unfold + argmax one
        got = em.nn.max_pool2d(t, 3, 2, 1, ceil_mode=True).numpy()
        np.testing.assert_array_equal(got, F.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True).numpy())
        assert (got < 0).all()


@pytest.mark.parametrize("kw", AVG2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_avg_pool2d_matches_torch(kw, kind, rng, device):
    compare(lambda x: em.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device)


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=4, stride=2, padding=2, dilation=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)], ids=str)
def test_1d_pools_match_torch(kw, rng, device):
    compare(lambda x: em.nn.max_pool1d(x, **kw), lambda x: F.max_pool1d(x, **kw), [(2, 4, 15)], em.float64,
            "transposed", rng, device)
    akw = {k: v for k, v in kw.items() if k != "dilation"}
    compare(lambda x: em.nn.avg_pool1d(x, **akw), lambda x: F.avg_pool1d(x, **akw), [(2, 4, 15)], em.float64,
            "stepped", rng, device)
    compare(lambda x: em.nn.avg_pool1d(x, **akw, count_include_pad=False),
            lambda x: F.avg_pool1d(x, **akw, count_include_pad=False), [(4, 15)], em.float64, "offset", rng, device)


@pytest.mark.parametrize("size", [(1, 1), (3, 5), (4, 7), (None, 2), 6, (9, 10)], ids=str)
def test_adaptive_avg_pool2d_matches_torch(size, rng, device):
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, size), lambda x: F.adaptive_avg_pool2d(x, size),
            [(2, 3, 9, 10)], em.float64, "transposed", rng, device)


@pytest.mark.parametrize("size", [1, 4, 5, 13, 20])
def test_adaptive_avg_pool1d_matches_torch(size, rng, device):
    compare(lambda x: em.nn.adaptive_avg_pool1d(x, size), lambda x: F.adaptive_avg_pool1d(x, size), [(2, 3, 13)],
            em.float64, "stepped", rng, device)


def test_pool_gradients_by_finite_differences(rng):
    x = em.tensor(rng.standard_normal((1, 2, 6, 5)).astype(WIDE_NP))
    fns = [
        lambda t: em.nn.max_pool2d(t, 3, 2, 1, ceil_mode=True),
        lambda t: em.nn.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda t: em.nn.adaptive_avg_pool2d(t, (4, 3)),
        lambda t: em.nn.max_pool1d(t.reshape(2, 30), 4, 3, 2, dilation=2),
        lambda t: em.nn.avg_pool1d(t.reshape(2, 30), 4, 3, 2),
        lambda t: em.nn.adaptive_avg_pool1d(t.reshape(2, 30), 7),
    ]
    for fn in fns:
        assert gradcheck(fn, [x])


def test_pool_modules_match_functions(rng):
    x = em.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    pairs = [
        (em.nn.MaxPool2d(3, 2, 1), F.max_pool2d(torch.tensor(x.numpy()), 3, 2, 1)),
        (em.nn.AvgPool2d(2, count_include_pad=False), F.avg_pool2d(torch.tensor(x.numpy()), 2)),
        (em.nn.AdaptiveAvgPool2d((1, 1)), F.adaptive_avg_pool2d(torch.tensor(x.numpy()), 1)),
    ]
    for mod, want in pairs:
        np.testing.assert_allclose(mod(x).numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    x1 = x.reshape(2, 3, 64)
    t1 = torch.tensor(x1.numpy())
    np.testing.assert_allclose(em.nn.MaxPool1d(4)(x1).numpy(), F.max_pool1d(t1, 4).numpy())
    np.testing.assert_allclose(em.nn.AvgPool1d(4, 2, 1)(x1).numpy(), F.avg_pool1d(t1, 4, 2, 1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(em.nn.AdaptiveAvgPool1d(5)(x1).numpy(), F.adaptive_avg_pool1d(t1, 5).numpy(), atol=1e-6,
                               rtol=1e-6)
    v, i = em.nn.MaxPool1d(4, return_indices=True)(x1)
    np.testing.assert_array_equal(i.numpy(), F.max_pool1d(t1, 4, return_indices=True)[1].numpy())


def test_pool_errors():
    x = em.randn(2, 3, 6, 6)
    expect_error(lambda: em.nn.max_pool2d(x, 0), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool2d(x, 2, padding=2), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool2d(x, 7), "max_pool2d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool2d(x, (2, 2, 2)), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x, 2.5), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x.reshape(6, 36), 2), "max_pool2d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool2d(em.ones(2, 3, 4, 4, dtype="int64"), 2), "max_pool2d", em.DTypeError)
    expect_error(lambda: em.nn.max_pool2d(x.numpy(), 2), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x, 2, ceil_mode=2), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool1d(x, 2), "max_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool1d(em.randn(2, 3, 5), 2, stride=0), "max_pool1d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool2d(x, 2, stride=-1), "avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool2d(x, 2, divisor_override=0), "avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool1d(em.randn(2, 3, 5), 6), "avg_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(x, (0, 2)), "adaptive_avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(x, (1, 2, 3)), "adaptive_avg_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.adaptive_avg_pool1d(x, 2), "adaptive_avg_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(em.randn(2, 3, 0, 4), 2), "adaptive_avg_pool2d", em.ShapeError)


@pytest.mark.parametrize("kw", MAX2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_max_pool2d_without_gradient_matches_torch(kw, kind, rng, device):
    # Untracked inputs take the running-maximum-over-taps path instead of unfold + argmax.
    x = -rng.uniform(0.5, 3.0, size=(2, 3, 9, 10)).astype(WIDE_NP)  # all negative: a padding zero must never win
    compare(lambda t: em.nn.max_pool2d(t, **kw), lambda t: F.max_pool2d(t, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device, grads=False)
    with em.no_grad():
        got = em.nn.max_pool2d(em.Var(x), **kw)
    np.testing.assert_array_equal(got.numpy(), F.max_pool2d(torch.tensor(x), **kw).numpy())


def test_max_pool_without_gradient_never_aliases_or_writes_its_input(rng):
    x = em.tensor(rng.standard_normal((1, 2, 5, 5)).astype(WIDE_NP))
    before = x.numpy().copy()
    with em.no_grad():
        y = em.nn.max_pool2d(x, 1)  # one tap: the result must still be a new storage
        z = em.nn.max_pool2d(x, 2, 1, 1)  # partial taps write into the result, never into x
    y.zero_set()
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(z.numpy(), F.max_pool2d(torch.tensor(before), 2, 1, 1).numpy())


def _np_on(a, device):
    return em.tensor(np.asarray(a, dtype=WIDE_NP), device=device)


def test_max_pool_ties_and_nans_pick_torchs_index(rng, device):
    # After a ReLU most windows tie at zero: the index (and so the gradient) must be torch's first maximum
    # in row-major order; a NaN wins its window (the last NaN, as torch's kernel).
    x = np.maximum(rng.standard_normal((2, 3, 11, 12)), 0)
    zeros = np.argwhere(x[0, 1] == 0)[::2]
    x[0, 1][tuple(zeros.T)] = -0.0  # -0.0 ties with 0.0: the first one still wins
    x[0, 0, 2:5, 3] = np.nan
    x[1, 2, 0, :] = np.nan
    x[1, 1, 4, 4:8] = np.inf
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=1, dilation=(2, 1)),
               dict(kernel_size=3, stride=2, ceil_mode=True)):
        v = em.Var(_np_on(x, device))
        got, idx = em.nn.max_pool2d(v, **kw, return_indices=True)
        tx = torch.tensor(x.astype(WIDE_NP), requires_grad=True)
        want, tidx = F.max_pool2d(tx, **kw, return_indices=True)
        np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
        np.testing.assert_array_equal(got.numpy(), want.detach().numpy())  # NaNs in the same places
        w = rng.uniform(0.5, 1.5, size=want.shape)
        g = (got * em.tensor(w.astype(WIDE_NP), device=device)).sum().backward()[v]
        (want * torch.tensor(w.astype(WIDE_NP))).sum().backward()
        np.testing.assert_array_equal(g.numpy(), tx.grad.numpy())


def _check_geometry(k, s, p, d, ceil, shape, out, rng, device):
    compare(lambda x: em.nn.max_pool2d(x, k, s, p, d, ceil), lambda x: F.max_pool2d(x, k, s, p, d, ceil),
            [shape], em.float64, "transposed", rng, device)
    for cip in (True, False):
        compare(lambda x, c=cip: em.nn.avg_pool2d(x, k, s, p, ceil, c), lambda x, c=cip: F.avg_pool2d(x, k, s, p, ceil, c),
                [shape], em.float64, "stepped", rng, device)
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, out), lambda x: F.adaptive_avg_pool2d(x, out), [shape],
            em.float64, "offset", rng, device)


def test_pools_match_torch_on_random_geometries(rng, device):
    checked = 0
    for _ in range(14):
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        d = tuple(int(v) for v in rng.integers(1, 3, 2))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *(int(v) for v in rng.integers(4, 14, 2)))
        ceil = bool(rng.integers(0, 2))
        try:
            F.max_pool2d(torch.zeros(shape), k, s, p, d, ceil)
        except RuntimeError:  # a geometry torch refuses (ember's refusals are tested in test_pool_errors)
            continue
        _check_geometry(k, s, p, d, ceil, shape, tuple(int(v) for v in rng.integers(1, 16, 2)), rng, device)
        checked += 1
    assert checked >= 7


def test_max_pool_ceil_window_overhanging_the_input_as_torch(rng, device):
    # torch accepts a ceil_mode window whose dilated span is longer than the padded input.
    x = rng.standard_normal((1, 2, 6, 7)).astype(WIDE_NP)
    kw = dict(kernel_size=4, stride=3, dilation=2, ceil_mode=True)
    v, i = em.nn.max_pool2d(_np_on(x, device), **kw, return_indices=True)
    tv, ti = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_resnet_stem_shape_matches_torch(rng, device):
    # The bench's stem shape, shrunk: many planes, an odd width, a transposed (channels-last) input.
    compare(lambda x: em.nn.max_pool2d(x, 3, 2, 1), lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 16, 29, 31)],
            em.float32, "transposed", rng, device)
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, 1), lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 16, 7, 7)],
            em.float32, "offset", rng, device)


@pytest.mark.parametrize("which", ["max", "avg", "adaptive"])
def test_pool_second_order_matches_torch(which, rng, device):
    fns = {
        "max": (lambda t: em.nn.max_pool2d(t, 3, 2, 1), lambda t: F.max_pool2d(t, 3, 2, 1)),
        "avg": (lambda t: em.nn.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
                lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False)),
        "adaptive": (lambda t: em.nn.adaptive_avg_pool2d(t, (3, 4)), lambda t: F.adaptive_avg_pool2d(t, (3, 4))),
    }
    ef, tf = fns[which]
    x = rng.standard_normal((2, 3, 7, 8)).astype(WIDE_NP)
    c = rng.standard_normal((2, 3, 7, 8)).astype(WIDE_NP)
    v = em.Var(_np_on(x, device))
    y = ef(v)
    gx = (y * y).sum().backward(create_graph=True)[v]
    g2 = (gx * _np_on(c, device)).sum().backward()[v]
    tx = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad((tf(tx) ** 2).sum(), tx, create_graph=True)
    (tg2,) = torch.autograd.grad((tgx * torch.tensor(c)).sum(), tx)
    tol = dict(rtol=1e-5, atol=1e-5) if WIDE is em.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy(), **tol)
    np.testing.assert_allclose(g2.numpy(), tg2.numpy(), **tol)


def test_pool_kernel_entry_points_refuse_bad_input(device):
    # The kernels' own checks (cpp/storage.cpp), behind the Python ones: bad geometry, dtypes, indices.
    x = em.randn(2, 3, 6, 6, device=device)
    geom = (2, 3, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 3, 3, 0, 1)
    C = em._C

    def run(kind=0, t=x, g=geom):
        return C.pool2d(kind, t._storage, t._layout, g, True)

    expect_error(lambda: run(kind=7), "pool2d", em.EmberValueError)
    expect_error(lambda: run(g=(2, 3, 6, 5) + geom[4:]), "max_pool2d", em.ShapeError)
    expect_error(lambda: run(t=em.ones(2, 3, 6, 6, dtype="int64", device=device)), "max_pool2d", em.DTypeError)
    expect_error(lambda: run(g=geom[:8] + (2, 1) + geom[10:]), "max_pool2d", em.EmberValueError)  # pad > k / 2
    expect_error(lambda: run(g=geom[:4] + (0,) + geom[5:]), "max_pool2d", em.EmberValueError)
    expect_error(lambda: run(g=geom[:12] + (9, 3) + geom[14:]), "max_pool2d", em.ShapeError)  # past the input
    expect_error(lambda: run(kind=1, g=geom[:10] + (2, 1) + geom[12:]), "avg_pool2d", em.EmberValueError)
    expect_error(lambda: run(g=geom[:12] + (0, 3) + geom[14:]), "max_pool2d", em.ShapeError)
    vals, ids, _ = run()
    g = em.ones(2, 3, 3, 3, device=device)
    expect_error(lambda: C.pool2d_bwd(0, g._storage, g._layout, None, None, geom), "max_pool2d", em.EmberValueError)
    f = em.ones(2, 3, 3, 3, device=device)
    expect_error(lambda: C.pool2d_bwd(0, g._storage, g._layout, f._storage, f._layout, geom), "max_pool2d",
                 em.DTypeError)
    i2 = em.zeros(2, 3, 3, 2, dtype="int64", device=device)
    expect_error(lambda: C.pool2d_bwd(0, g._storage, g._layout, i2._storage, i2._layout, geom), "max_pool2d",
                 em.ShapeError)
    g4 = em.ones(2, 3, 3, 4, device=device)
    expect_error(lambda: C.pool2d_bwd(1, g4._storage, g4._layout, None, None, geom), "avg_pool2d", em.ShapeError)
    # indices outside the plane (not from a forward) add nowhere: no write past the buffer
    bad = em.tensor(np.array([-1, 36, 10**12] * 6, np.int64).reshape(2, 3, 3, 1), device=device).broadcast_as(
        (2, 3, 3, 3))
    dx, layout = C.pool2d_bwd(0, g._storage, g._layout, bad._storage, bad._layout, geom)
    assert layout.shape == (2, 3, 6, 6)
    got = _wrap(dx, layout, em.float32, em.Device(device)).numpy()
    np.testing.assert_array_equal(got, np.zeros((2, 3, 6, 6)))  # -1, 36 and 10**12 are all outside the plane
