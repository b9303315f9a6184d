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

from conftest import FLOATS, WIDE_NP, expect_error

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
