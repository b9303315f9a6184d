"""The conv kernels' fast paths against torch: Winograd F(2x2, 3x3) for stride-1 3x3 windows in float32
(forward and input gradient; tile remainders, tiny images, channel counts off the vector width,
padding 0 / 1 / 2 / "same", groups, strided inputs, bias, halves through f32), its accuracy against
float64 beside torch's own float32 error, and the stride-2 row gather / scatter of the tiled path."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS

# Shapes at or above Winograd's channel threshold (16 in and out per group), with odd output sizes
# (a last tile half outside), several blocks of tile rows per image, and one image of exactly 4x4.
WINO_CASES = {
    "odd sizes, bias": ((2, 16, 7, 9), (24, 16, 3, 3), dict(padding=1)),
    "channels off the vector width": ((1, 17, 11, 6), (19, 17, 3, 3), dict(padding=1)),
    "no padding": ((2, 16, 8, 7), (16, 16, 3, 3), dict()),
    "padding 2": ((1, 16, 5, 6), (18, 16, 3, 3), dict(padding=2)),
    "asymmetric padding": ((1, 16, 9, 5), (16, 16, 3, 3), dict(padding=(0, 2))),
    "same": ((1, 20, 6, 13), (18, 20, 3, 3), dict(padding="same")),
    "groups": ((2, 32, 10, 11), (32, 16, 3, 3), dict(padding=1, groups=2)),
    "many tile-row blocks": ((1, 16, 41, 37), (16, 16, 3, 3), dict(padding=1)),
    "4x4 output": ((3, 16, 4, 4), (16, 16, 3, 3), dict(padding=1)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(WINO_CASES))
def test_conv2d_winograd_shapes_match_torch(name, kind, rng, device):
    xs, ws, kw = WINO_CASES[name]
    compare(lambda x, w, b: em.nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw),
            [xs, ws, (ws[0],)], em.float32, kind, rng, device, lo=-1, hi=1)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=0), dict(padding=2)], ids=str)
def test_conv_transpose2d_stride1_3x3_matches_torch(kw, rng, device):
    # conv_transpose's forward is conv2d's input gradient: the Winograd adjoint (flipped, transposed kernel)
    compare(lambda x, w, b: em.nn.conv_transpose2d(x, w, b, **kw),
            lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
            [(2, 16, 9, 7), (16, 20, 3, 3), (20,)], em.float32, "offset", rng, device, lo=-1, hi=1)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_conv2d_winograd_every_float_dtype(dt, rng, device):
    # halves run in f32 (Winograd included) and round once: within a few of their ulps of float64
    compare(lambda x, w: em.nn.conv2d(x, w, padding=1), lambda x, w: F.conv2d(x, w, padding=1),
            [(2, 16, 9, 10), (16, 16, 3, 3)], dt, "stepped", rng, device, lo=-1, hi=1, scale=(40, 400))


@pytest.mark.cpu_only("Winograd is the CPU kernel's algorithm; Metal's conv sums directly")
@pytest.mark.parametrize("shape", [(4, 64, 28, 28), (2, 128, 14, 14)], ids=str)
def test_conv2d_winograd_float32_error_within_torchs(shape, rng):
    # Winograd's transforms add rounding: its float32 error against float64 stays within torch's own
    # float32 error (oneDNN's direct conv) times a small factor, forward and input gradient alike.
    n, c, h, w_ = shape
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    gy = rng.standard_normal(shape).astype(np.float32)
    x64, w64, gy64 = (torch.tensor(a, dtype=torch.float64) for a in (x, w, gy))
    x64.requires_grad_(True)
    ref = F.conv2d(x64, w64, padding=1)
    (ref * gy64).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = F.conv2d(xt, torch.tensor(w), padding=1)
    (yt * torch.tensor(gy)).sum().backward()
    xv = em.Var(x)
    ye = em.nn.conv2d(xv, em.tensor(w), padding=1)
    ge = (ye * em.tensor(gy)).sum().backward()[xv]
    for got, tch, want in ((ye.numpy(), yt.detach().numpy(), ref.detach().numpy()),
                           (ge.numpy(), xt.grad.numpy(), x64.grad.numpy())):
        err, torch_err = np.abs(got - want).max(), np.abs(tch - want).max()
        assert err <= 3 * torch_err + 1e-6, (err, torch_err)


# The tiled im2col path's stride-2 rows (gathered / scattered with a constant step), at widths that end
# mid-vector, in float32 and float64, forward and both gradients.
@pytest.mark.parametrize("dt", [em.float32, em.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", [((2, 5, 13, 19), (6, 5, 3, 3), dict(stride=2, padding=1)),
                                  ((1, 3, 7, 34), (4, 3, 4, 2), dict(stride=(1, 2), padding=(1, 0)))], ids=str)
def test_conv2d_stride2_rows_match_torch(case, dt, rng, device):
    xs, ws, kw = case
    compare(lambda x, w: em.nn.conv2d(x, w, **kw), lambda x, w: F.conv2d(x, w, **kw), [xs, ws], dt, "stepped", rng,
            device, lo=-1, hi=1)


def test_conv_transpose2d_stride2_rows_match_torch(rng, device):
    kw = dict(stride=2, padding=1)
    compare(lambda x, w: em.nn.conv_transpose2d(x, w, **kw), lambda x, w: F.conv_transpose2d(x, w, **kw),
            [(2, 6, 9, 15), (6, 5, 4, 4)], em.float64, "transposed", rng, device, lo=-1, hi=1)
