"""interpolate / Upsample against torch: nearest, nearest-exact, linear and bilinear (align_corners both
ways), by size and by scale factor (with and without recompute_scale_factor), up and down, values and
gradients on strided inputs in every float dtype, finite differences, and bad arguments."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS, WIDE, WIDE_NP, expect_error

CASES_2D = [
    dict(scale_factor=2, mode="nearest"),
    dict(size=(7, 3), mode="nearest"),
    dict(scale_factor=(1.7, 0.6), mode="nearest"),
    dict(size=(9, 13), mode="nearest-exact"),
    dict(scale_factor=2, mode="bilinear", align_corners=False),
    dict(scale_factor=2, mode="bilinear", align_corners=True),
    dict(size=(3, 11), mode="bilinear", align_corners=False),
    dict(size=(1, 8), mode="bilinear", align_corners=True),
    dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True),
    dict(scale_factor=0.5, mode="bilinear"),
]
CASES_1D = [
    dict(scale_factor=3, mode="nearest"),
    dict(size=5, mode="nearest"),
    dict(size=17, mode="linear", align_corners=True),
    dict(scale_factor=2.5, mode="linear"),
    dict(size=4, mode="linear"),
]


@pytest.mark.parametrize("kw", CASES_2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_interpolate_2d_matches_torch(kw, kind, rng, device):
    compare(lambda x: em.nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), [(2, 3, 5, 6)], em.float64,
            kind, rng, device)


@pytest.mark.parametrize("kw", CASES_1D, ids=str)
def test_interpolate_1d_matches_torch(kw, rng, device):
    compare(lambda x: em.nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), [(2, 3, 7)], em.float64,
            "transposed", rng, device)


def test_interpolate_single_pixel_input(rng):
    for kw in (dict(size=(4, 3), mode="bilinear"), dict(size=(4, 3), mode="bilinear", align_corners=True),
               dict(scale_factor=3, mode="nearest")):
        compare(lambda x, kw=kw: em.nn.interpolate(x, **kw), lambda x, kw=kw: F.interpolate(x, **kw), [(1, 2, 1, 1)],
                em.float64, "contiguous", rng)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_interpolate_every_dtype(dt, rng, device):
    compare(lambda x: em.nn.interpolate(x, scale_factor=2, mode="bilinear"),
            lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [(2, 2, 4, 5)], dt, "offset", rng, device)
    compare(lambda x: em.nn.interpolate(x, size=(6, 3)), lambda x: F.interpolate(x, size=(6, 3)), [(2, 2, 4, 5)], dt,
            "stepped", rng, device)


def test_interpolate_gradcheck(rng):
    x = em.tensor(rng.standard_normal((1, 2, 3, 4)).astype(WIDE_NP))
    for kw in (dict(scale_factor=2, mode="bilinear"), dict(size=(5, 2), mode="bilinear", align_corners=True),
               dict(size=(5, 7), mode="nearest")):
        assert gradcheck(lambda t, kw=kw: em.nn.interpolate(t, **kw), [x])
    assert gradcheck(lambda t: em.nn.interpolate(t.reshape(2, 3, 4), size=9, mode="linear"), [x])


def test_upsample_module(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    for kw in (dict(scale_factor=2), dict(size=(5, 7), mode="bilinear", align_corners=True)):
        got = em.nn.Upsample(**kw)(em.tensor(x)).numpy()
        np.testing.assert_allclose(got, torch.nn.Upsample(**kw)(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    assert "bilinear" in repr(em.nn.Upsample(scale_factor=2, mode="bilinear"))


def test_interpolate_errors():
    x = em.randn(2, 3, 4, 4)
    expect_error(lambda: em.nn.interpolate(x), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, size=4, scale_factor=2), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, size=4, mode="bicubic"), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, size=4, align_corners=True), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, size=4, mode="linear"), "interpolate", em.ShapeError)
    expect_error(lambda: em.nn.interpolate(x.reshape(2, 3, 16), size=4, mode="bilinear"), "interpolate", em.ShapeError)
    expect_error(lambda: em.nn.interpolate(x, size=(4, 4, 4)), "interpolate", em.EmberTypeError)
    expect_error(lambda: em.nn.interpolate(x, size=0), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, scale_factor=-1.0), "interpolate", em.EmberValueError)
    expect_error(lambda: em.nn.interpolate(x, scale_factor=0.1), "interpolate", em.ShapeError)
    expect_error(lambda: em.nn.interpolate(x, scale_factor="2"), "interpolate", em.EmberTypeError)
    expect_error(lambda: em.nn.interpolate(em.ones(2, 3, 4, dtype="int64"), size=2), "interpolate", em.DTypeError)
    expect_error(lambda: em.nn.interpolate(x.numpy(), size=2), "interpolate", em.EmberTypeError)
    expect_error(lambda: em.nn.Upsample(scale_factor=2, mode="area"), "Upsample", em.EmberValueError)


@pytest.mark.parametrize("kw", [
    dict(scale_factor=2.05, mode="nearest"),  # out == 2 * in: torch shifts (dst >> 1), not floor(dst / 2.05)
    dict(scale_factor=1.3, mode="nearest"),  # out == in: torch copies, whatever the factor
    dict(scale_factor=1.3, mode="nearest-exact"),  # ... but nearest-exact does not
    dict(scale_factor=1.3, mode="bilinear"),
    dict(scale_factor=(1.99, 2.05), mode="bilinear", align_corners=True),
    dict(scale_factor=(0.3, 0.5), mode="bilinear"),
    dict(scale_factor=0.45, mode="nearest", recompute_scale_factor=True),
    dict(size=(1, 1), mode="bilinear", align_corners=True),
    dict(size=(23, 2), mode="nearest-exact"),
], ids=str)
def test_interpolate_torch_special_cases(kw, rng, device):
    compare(lambda x: em.nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), [(2, 3, 10, 3)], em.float64,
            "stepped", rng, device)


def _check_random_case(mode, kw, shape, rng, device):
    compare(lambda x: em.nn.interpolate(x, mode=mode, **kw), lambda x: F.interpolate(x, mode=mode, **kw), [shape],
            em.float64, "transposed", rng, device)


def test_interpolate_random_sizes_match_torch(rng, device):
    for i in range(18):
        mode = ("nearest", "nearest-exact", "bilinear")[i % 3]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *(int(v) for v in rng.integers(1, 12, 2)))
        if i % 2:
            kw = dict(scale_factor=tuple(float(v) for v in rng.choice([0.5, 0.7, 1.0, 1.3, 1.99, 2.0, 2.5, 3.0], 2)))
            if rng.integers(0, 2):
                kw["recompute_scale_factor"] = True
        else:
            kw = dict(size=tuple(int(v) for v in rng.integers(1, 25, 2)))
        if mode == "bilinear":
            kw["align_corners"] = bool(rng.integers(0, 2))
        try:
            F.interpolate(torch.zeros(shape), mode=mode, **kw)
        except (RuntimeError, ValueError):  # no output at all for a tiny input: refused by both
            continue
        _check_random_case(mode, kw, shape, rng, device)


def test_sd_vae_upsampler_shape_matches_torch(rng, device):
    # The bench's SD-VAE upsampler (nearest x2 before a conv), shrunk, on a channels-last input.
    compare(lambda x: em.nn.interpolate(x, scale_factor=2.0, mode="nearest"),
            lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), [(1, 24, 16, 17)], em.float32, "transposed",
            rng, device)
    compare(lambda x: em.nn.interpolate(x, scale_factor=2, mode="bilinear"),
            lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [(1, 24, 16, 17)], em.float32, "offset",
            rng, device)


@pytest.mark.parametrize("kw", [dict(scale_factor=2, mode="nearest"), dict(size=(5, 7), mode="bilinear"),
                                dict(size=(4, 9), mode="bilinear", align_corners=True)], ids=str)
def test_interpolate_second_order_matches_torch(kw, rng, device):
    x = rng.standard_normal((2, 2, 3, 4)).astype(WIDE_NP)
    v = em.Var(em.tensor(x, device=device))
    y = em.nn.interpolate(v, **kw)
    c = rng.standard_normal(y.shape).astype(WIDE_NP)
    # the square makes the first gradient depend on x, so the second backward runs the backward's backward
    gx = (y * y * em.tensor(c, device=device)).sum().backward(create_graph=True)[v]
    d = rng.standard_normal(x.shape).astype(WIDE_NP)
    g2 = (gx * em.tensor(d, device=device)).sum().backward()[v]
    tx = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad((F.interpolate(tx, **kw) ** 2 * torch.tensor(c)).sum(), tx, create_graph=True)
    (tg2,) = torch.autograd.grad((tgx * torch.tensor(d)).sum(), tx)
    tol = dict(rtol=1e-5, atol=1e-5) if WIDE is em.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy(), **tol)
    np.testing.assert_allclose(g2.numpy(), tg2.numpy(), **tol)


def test_upsample_kernel_entry_points_refuse_bad_input(device):
    # The kernels' own checks (cpp/storage.cpp), behind interpolate's.
    x = em.randn(2, 3, 4, 5, device=device)
    C = em._C

    def run(mode=0, t=x, geom=(2, 3, 4, 5, 8, 10), sf=(0.0, 0.0)):
        return C.upsample(mode, t._storage, t._layout, geom, sf[0], sf[1], False)

    expect_error(lambda: run(mode=5), "interpolate", em.EmberValueError)
    expect_error(lambda: run(geom=(2, 3, 4, 6, 8, 10)), "interpolate", em.ShapeError)
    expect_error(lambda: run(geom=(2, 3, 4, 5, 0, 10)), "interpolate", em.ShapeError)
    expect_error(lambda: run(sf=(-2.0, 1.0)), "interpolate", em.EmberValueError)
    expect_error(lambda: run(sf=(float("nan"), 1.0)), "interpolate", em.EmberValueError)
    expect_error(lambda: run(t=em.ones(2, 3, 4, 5, dtype="int64", device=device)), "interpolate", em.DTypeError)
    g = em.ones(2, 3, 8, 9, device=device)
    expect_error(lambda: C.upsample_bwd(2, g._storage, g._layout, (2, 3, 4, 5, 8, 10), 0.0, 0.0, True),
                 "interpolate", em.ShapeError)
    s, layout = run()
    assert layout.shape == (2, 3, 8, 10)
