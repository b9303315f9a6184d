"""The 1-D fast paths of pooling and resampling against torch: max_pool1d in side-by-side windows of 2-4
taps (no gradient: the values-only path), and linear interpolation to twice the length (the fixed-tap
loop), at lengths below and around a vector's width, odd lengths, ceil_mode's partial window, strided
and offset rows, every float dtype, NaN and inf, and the gradients."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS, WIDE_NP

LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 3000]


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_max_pool1d_windows_match_torch(k, kind, rng, device):
    for n in LENGTHS:
        for ceil_mode in (False, True):
            if n < k and not ceil_mode:
                continue
            kw = dict(kernel_size=k, ceil_mode=ceil_mode)
            compare(lambda x, kw=kw: em.nn.max_pool1d(x, **kw), lambda x, kw=kw: F.max_pool1d(x, **kw), [(2, 3, n)], em.float64,
                    kind, rng, device, grads=False)
    compare(lambda x: em.nn.max_pool1d(x, k), lambda x: F.max_pool1d(x, k), [(2, 3, 11)], em.float64, kind, rng,
            device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_max_pool1d_windows_every_dtype(dt, rng, device):
    for k in (2, 3, 4):
        compare(lambda x, k=k: em.nn.max_pool1d(x, k, ceil_mode=True), lambda x, k=k: F.max_pool1d(x, k, ceil_mode=True),
                [(3, 37)], dt, "offset", rng, device, grads=False)


def test_max_pool1d_windows_nan_and_inf_as_torch(device):
    a = np.full((2, 3, 24), -np.inf, np.float32)
    a[0, 0, 1::5] = np.nan
    a[0, 1, 2::3] = np.inf
    a[1, 2, 0::7] = np.nan
    a[1, 0, ::2] = 1.0
    for k in (2, 3, 4):
        with em.no_grad():
            got = em.nn.max_pool1d(em.tensor(a, device=device), k, ceil_mode=True).numpy()
        want = F.max_pool1d(torch.tensor(a), k, ceil_mode=True).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_linear_interpolation_to_twice_the_length_matches_torch(align, kind, rng, device):
    kw = dict(scale_factor=2, mode="linear", align_corners=align)
    for n in LENGTHS[:-1]:
        compare(lambda x: em.nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), [(2, 3, n)], em.float64, kind,
                rng, device)
    if align:  # a long align_corners row's source positions round in float32 on a device without float64
        return
    size = dict(size=6000, mode="linear", align_corners=align)
    compare(lambda x: em.nn.interpolate(x, **size), lambda x: F.interpolate(x, **size), [(1, 2, 3000)], em.float64,
            kind, rng, device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_linear_interpolation_twice_every_dtype(dt, rng, device):
    kw = dict(scale_factor=2, mode="linear")
    compare(lambda x: em.nn.interpolate(x, **kw), lambda x: F.interpolate(x, **kw), [(2, 3, 21)], dt, "stepped", rng,
            device)
    kw2 = dict(scale_factor=2, mode="bilinear")
    compare(lambda x: em.nn.interpolate(x, **kw2), lambda x: F.interpolate(x, **kw2), [(1, 2, 5, 9)], dt, "offset",
            rng, device)


def test_linear_interpolation_twice_keeps_inf_and_nan_where_torch_does(device):
    a = np.arange(2 * 3 * 12, dtype=np.float32).reshape(2, 3, 12)
    a[0, 0, 0], a[0, 1, 11], a[1, 2, 5], a[1, 0, 7] = np.inf, -np.inf, np.nan, np.inf
    with em.no_grad():
        got = em.nn.interpolate(em.tensor(a, device=device), scale_factor=2, mode="linear").numpy()
    want = F.interpolate(torch.tensor(a), scale_factor=2, mode="linear").numpy()
    np.testing.assert_array_equal(got, want)


def test_linear_interpolation_twice_gradcheck(rng):
    from devcheck import gradcheck
    x = em.Var(em.tensor(rng.standard_normal((2, 2, 7)).astype(WIDE_NP)))
    assert gradcheck(lambda t: em.nn.interpolate(t, scale_factor=2, mode="linear"), [x])
