"""Sums of many short rows (mean((2, 3)) of a feature map) and global average pooling against numpy and
torch: row lengths around the short-row limit, rows with gaps between them, planes split across
threads and images, NaN and inf, every float dtype, and the gradients."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nn_check import compare

import ember as em

from conftest import FLOATS, TOL, npdt


def _close(got, want, dt, scale=20):
    rtol, atol = TOL[dt.name]
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=rtol * scale, atol=atol * scale * 10)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [1, 7, 49, 255, 256, 257])
def test_sum_of_short_rows_matches_numpy(dt, n, rng, device):
    a = rng.uniform(-3, 3, size=(3, 70, n)).astype(npdt(dt))
    x = em.tensor(a, device=device)
    ref = a.astype(np.float64)
    _close(x.sum(-1), ref.sum(-1), dt)
    _close(x.sum(-1, keepdim=True), ref.sum(-1, keepdims=True), dt)
    _close(x.mean(-1), ref.mean(-1), dt)
    # rows with a gap between them (a narrowed last dim) and rows in a permuted order
    wide = rng.uniform(-3, 3, size=(70, 2, n + 5)).astype(npdt(dt))
    w = em.tensor(wide, device=device)
    _close(w[:, :, 2:n + 2].sum(-1), wide[:, :, 2:n + 2].astype(np.float64).sum(-1), dt)
    _close(x.transpose(0, 1).sum(-1), ref.transpose(1, 0, 2).sum(-1), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_mean_over_the_spatial_dims_matches_torch(dt, rng, device):
    a = rng.uniform(-3, 3, size=(8, 96, 7, 7)).astype(npdt(dt))
    x = em.tensor(a, device=device)
    want = torch.tensor(a.astype(np.float64))
    _close(x.mean((2, 3)), want.mean((2, 3)).numpy(), dt)
    _close(x.sum((2, 3), keepdim=True), want.sum((2, 3), keepdim=True).numpy(), dt)
    _close(x[:, 1::2].mean((-1, -2)), want[:, 1::2].mean((-1, -2)).numpy(), dt)


def test_short_rows_propagate_nan_and_inf(device):
    a = np.ones((80, 49), np.float32)
    a[3, 10], a[7, 48], a[9, 0], a[9, 1] = np.nan, np.inf, np.inf, -np.inf
    a[11, 5] = -np.inf
    got = em.tensor(a, device=device).sum(-1).numpy()
    with np.errstate(invalid="ignore"):  # inf - inf
        want = a.astype(np.float64).sum(-1).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "offset", "stepped", "transposed"])
def test_global_average_pooling_matches_torch(dt, kind, rng, device):
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, 1), lambda x: F.adaptive_avg_pool2d(x, 1), [(3, 70, 5, 7)], dt,
            kind, rng, device)
    compare(lambda x: em.nn.avg_pool2d(x, (5, 7)), lambda x: F.avg_pool2d(x, (5, 7)), [(2, 33, 5, 7)], dt, kind,
            rng, device)
    compare(lambda x: em.nn.avg_pool2d(x, (5, 7), divisor_override=3), lambda x: F.avg_pool2d(x, (5, 7),
            divisor_override=3), [(2, 33, 5, 7)], dt, kind, rng, device)
    compare(lambda x: em.nn.adaptive_avg_pool1d(x, 1), lambda x: F.adaptive_avg_pool1d(x, 1), [(4, 40, 9)], dt,
            kind, rng, device)


def test_global_average_pooling_across_threads_and_images(rng, device):
    # more planes than one thread's block, so blocks start inside an image; planes with a gap between them
    a = rng.standard_normal((4, 1400, 5, 7)).astype(np.float32)
    x = em.tensor(a, device=device)
    want = a.astype(np.float64).mean((2, 3), keepdims=True)
    _close(em.nn.adaptive_avg_pool2d(x, 1), want, em.float32)
    _close(em.nn.adaptive_avg_pool2d(x[:, ::3], 1), want[:, ::3], em.float32)
    a[1, 2, 3, 4], a[2, 5, 0, 0] = np.nan, np.inf
    got = em.nn.adaptive_avg_pool2d(em.tensor(a, device=device), 1).numpy()
    assert np.isnan(got[1, 2, 0, 0]) and got[2, 5, 0, 0] == np.inf
    assert np.isfinite(np.delete(got.reshape(-1), [1 * 1400 + 2, 2 * 1400 + 5])).all()
