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


# The packed float32 GEMM behind the tiled forward and input gradient: weight rows off the register
# tile's height, column tiles ending mid-panel, contractions over several k blocks, groups, dilation,
# bias, 1-D and transposed convs, every strided input kind.
PACKED_CASES = {
    "k blocks, rows off the tile": ("conv2d", [(2, 40, 15, 13), (13, 40, 3, 3), (13,)], dict(stride=2, padding=1)),
    "three k blocks": ("conv2d", [(1, 64, 9, 10), (7, 64, 3, 3)], dict(stride=(2, 1), padding=1)),
    "groups, dilation": ("conv2d", [(1, 12, 20, 17), (18, 6, 3, 3), (18,)],
                         dict(padding=2, dilation=2, groups=2)),
    "1-D, stride 2": ("conv1d", [(2, 24, 301), (50, 24, 5)], dict(stride=2, padding=2)),
    "transposed, stride 2": ("conv_transpose2d", [(2, 33, 9, 7), (33, 10, 4, 4), (10,)], dict(stride=2, padding=1)),
    "transposed 1-D": ("conv_transpose1d", [(1, 70, 40), (70, 9, 3)], dict(stride=3, padding=1)),
}


@pytest.mark.parametrize("gemm", ["packed", "blas"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(PACKED_CASES))
def test_conv_packed_gemm_shapes_match_torch(name, kind, gemm, rng, device, monkeypatch):
    # EMBER_CONV_GEMM is read per call: both CPU paths run whatever the ISA's default (Metal ignores it)
    monkeypatch.setenv("EMBER_CONV_GEMM", gemm)
    fn, shapes, kw = PACKED_CASES[name]
    compare(lambda *a: getattr(em.nn, fn)(*a, **kw), lambda *a: getattr(F, fn)(*a, **kw), shapes, em.float32, kind,
            rng, device, lo=-1, hi=1)


PACKED_ISA_SCRIPT = """
import sys
import numpy as np
import ember as em
rng = np.random.default_rng(5)
x = rng.uniform(-1, 1, (2, 40, 15, 13)).astype(np.float32)
w = rng.uniform(-1, 1, (13, 40, 3, 3)).astype(np.float32)
xv, wv = em.Var(x), em.Var(w)
y = em.nn.conv2d(xv, wv, stride=2, padding=1)
gy = rng.uniform(-1, 1, y.shape).astype(np.float32)
g = (y * em.tensor(gy)).sum().backward()
np.savez(sys.argv[1], y=y.numpy(), gx=g[xv].numpy(), gw=g[wv].numpy(), gy=gy, isa=em._C.isa())
"""


@pytest.mark.cpu_only("the packed GEMM is the CPU kernel; EMBER_ISA picks its register tile")
def test_conv_packed_gemm_every_isa(tmp_path):
    # each SIMD level's register tile (base 4x8, AVX2 6x16, AVX-512 8x32) the CPU can run, against torch
    import os
    import subprocess
    import sys
    seen = set()
    for isa in ("base", "avx2", "avx512"):
        out = tmp_path / f"{isa}.npz"
        env = dict(os.environ, EMBER_ISA=isa, EMBER_CONV_GEMM="packed")
        r = subprocess.run([sys.executable, "-c", PACKED_ISA_SCRIPT, str(out)], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        got = np.load(out)
        if str(got["isa"]) in seen:
            continue  # the CPU lacks this level: EMBER_ISA fell back to one already checked
        seen.add(str(got["isa"]))
        rng = np.random.default_rng(5)
        x = torch.tensor(rng.uniform(-1, 1, (2, 40, 15, 13)), requires_grad=True)
        w = torch.tensor(rng.uniform(-1, 1, (13, 40, 3, 3)), requires_grad=True)
        y = F.conv2d(x, w, stride=2, padding=1)
        (y * torch.tensor(got["gy"].astype(np.float64))).sum().backward()
        for name, want in (("y", y.detach()), ("gx", x.grad), ("gw", w.grad)):
            np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{isa} {name}")
    assert "base" in seen


@pytest.mark.cpu_only("EMBER_CONV_GEMM picks a CPU path")
def test_bogus_conv_gemm_env_warns():
    import os
    import subprocess
    import sys

    env = dict(os.environ, EMBER_CONV_GEMM="fast", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and "[EMBER_CONV_GEMM] unknown value 'fast'" in r.stderr
    for ok in ("packed", "blas"):
        env["EMBER_CONV_GEMM"] = ok
        r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
