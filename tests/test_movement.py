"""pad (constant, reflect, replicate, circular), roll and meshgrid against torch on the session's device:
values for every dtype and strided/offset inputs, gradients (finite differences), every [op] error."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck

import ember as em

from conftest import ALL, VIEWS, WIDE, expect_error, f64, make_view

MODES = ["constant", "reflect", "replicate", "circular"]


def to_torch(a):
    """a's values as a float64 torch tensor (exact for every dtype's test values; torch's pad modes
    take floats only)."""
    return torch.from_numpy(np.ascontiguousarray(f64(np.asarray(a))))


def same(got, want):
    np.testing.assert_array_equal(f64(got.numpy()), want.numpy())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", VIEWS)
def test_pad_every_dtype_and_view(device, mode, kind, rng):
    pads = [(1, 2), (2, 0, 1, 3), (0, 1, 3, 0, 1, 1)]
    if mode == "constant":
        pads.append((-1, 2, 1, -2))  # negative amounts crop
    for dt in ALL:
        x, ref = make_view(rng, (3, 4, 5), dt, kind, device=device)
        for p in pads:
            got = em.pad(x, p, mode=mode, value=2) if mode == "constant" else em.pad(x, p, mode=mode)
            # torch's non-constant modes pad three dims of a 4-D or 5-D input only: a batch dim then
            r = to_torch(np.array(ref))
            r = r[None] if len(p) == 6 else r
            want = F.pad(r, p, mode=mode, value=2) if mode == "constant" else F.pad(r, p, mode=mode)
            want = want[0] if len(p) == 6 else want
            assert got.dtype == dt and got.shape == tuple(want.shape)
            same(got, want)
    assert em.nn.functional.pad is em.pad


def test_pad_reflect_image_batch_and_any_dim(device, rng):
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    got = em.pad(em.tensor(x, device=device), (3, 3, 2, 4), mode="reflect")
    same(got, F.pad(torch.from_numpy(x), (3, 3, 2, 4), mode="reflect").double())
    # every dim may be padded (torch limits its non-constant modes to the last three)
    got = em.pad(em.tensor(x, device=device), (0, 0, 0, 0, 1, 1, 1, 0), mode="circular")
    want = np.concatenate([x[-1:], x], 0)
    want = np.concatenate([want[:, -1:], want, want[:, :1]], 1)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("mode", MODES)
def test_pad_gradcheck(device, rng, mode):
    x = em.tensor(rng.standard_normal((2, 4, 5)), dtype=WIDE)
    assert gradcheck(lambda a: em.pad(a, (2, 3, 3, 1), mode=mode).sqr(), [x])
    assert gradcheck(lambda a: em.pad(a.t(), (1, 0), mode=mode) * 1.5, [x])
    if mode == "constant":
        assert gradcheck(lambda a: em.pad(a, (-1, 2, 0, -2), mode=mode, value=-3.0).exp(), [x])


def test_pad_errors(device):
    x = em.zeros((2, 3, 4), device=device)
    expect_error(lambda: em.pad(np.zeros(3), (1, 1)), "pad", em.EmberTypeError)
    expect_error(lambda: em.pad(x, 1), "pad", em.EmberTypeError)
    expect_error(lambda: em.pad(x, (1,)), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(x, (1,) * 8), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(x, (1, 1.5)), "pad", em.EmberTypeError)
    expect_error(lambda: em.pad(x, (1, 1), mode="wrap"), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(x, (1, 1), value="a"), "pad", em.EmberTypeError)
    expect_error(lambda: em.pad(x, (4, 0), mode="reflect"), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(x, (0, 5), mode="circular"), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(x, (-3, -2)), "pad", em.EmberValueError)
    expect_error(lambda: em.pad(em.zeros((2, 0), device=device), (1, 1), mode="replicate"), "pad", em.ShapeError)


def test_roll_every_dtype_and_view(device, rng):
    for dt in ALL:
        for kind in VIEWS:
            x, ref = make_view(rng, (4, 5, 6), dt, kind, device=device)
            r = to_torch(np.array(ref))
            for shifts, dims in ((2, 0), (-3, -1), ((1, 7), (1, 2)), ((2, -1), (0, 0)), (13, None), (0, 1)):
                same(em.roll(x, shifts, dims), torch.roll(r, shifts, dims))
            same(x.roll(3), torch.roll(r, 3))
    assert em.roll(em.zeros((0, 3), device=device), 2, 0).shape == (0, 3)


def test_roll_gradcheck(device, rng):
    x = em.tensor(rng.standard_normal((3, 5)), dtype=WIDE)
    assert gradcheck(lambda a: em.roll(a, (2, -1), (0, 1)).sqr(), [x])
    assert gradcheck(lambda a: em.roll(a.t(), 4).exp(), [x])


def test_roll_errors(device):
    x = em.zeros((2, 3), device=device)
    expect_error(lambda: em.roll([1, 2], 1), "roll", em.EmberTypeError)
    expect_error(lambda: em.roll(x, (1, 2)), "roll", em.EmberValueError)
    expect_error(lambda: em.roll(x, (1, 2), 0), "roll", em.EmberValueError)
    expect_error(lambda: em.roll(x, 1, 2), "roll", em.IndexOutOfRange)
    expect_error(lambda: em.roll(x, 1.5, 0), "roll", em.EmberTypeError)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(device, rng, indexing):
    for dt in ALL:
        arrs = [make_view(rng, (n,), dt, "stepped", device=device) for n in (3, 4, 2)]
        for k in (1, 2, 3):
            got = em.meshgrid(*[a for a, _ in arrs[:k]], indexing=indexing)
            want = torch.meshgrid(*[to_torch(np.array(r)) for _, r in arrs[:k]], indexing=indexing)
            assert len(got) == k
            for g, w in zip(got, want):
                assert g.dtype == dt
                same(g, w)
        got = em.meshgrid([arrs[0][0], arrs[1][0]], indexing=indexing)  # one list, as torch takes too
        assert got[0].shape == ((3, 4) if indexing == "ij" else (4, 3))
    scalar = em.meshgrid(em.tensor(2.0, device=device), em.arange(3, dtype=em.float32, device=device))
    assert scalar[0].shape == (1, 3)


def test_meshgrid_gradcheck(device, rng):
    a = em.tensor(rng.standard_normal(3), dtype=WIDE)
    b = em.tensor(rng.standard_normal(4), dtype=WIDE)
    assert gradcheck(lambda p, q: [g * g for g in em.meshgrid(p, q, indexing="xy")][0] +
                     em.meshgrid(p, q, indexing="xy")[1].exp(), [a, b])


def test_meshgrid_errors(device, monkeypatch):
    a = em.zeros(3, device=device)
    expect_error(lambda: em.meshgrid(), "meshgrid", em.EmberValueError)
    expect_error(lambda: em.meshgrid(a, [1, 2]), "meshgrid", em.EmberTypeError)
    expect_error(lambda: em.meshgrid(a, em.zeros((2, 2), device=device)), "meshgrid", em.EmberValueError)
    expect_error(lambda: em.meshgrid(a, a, indexing="ji"), "meshgrid", em.EmberValueError)
    expect_error(lambda: em.meshgrid(a, em.zeros(3, dtype=em.int64, device=device)), "meshgrid", em.DTypeError)
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")  # a second device on any machine
    other = "metal" if device.type == "cpu" else "cpu"
    expect_error(lambda: em.meshgrid(a, em.zeros(3, device=other)), "meshgrid", em.DeviceError)


@pytest.mark.parametrize("mode", ["circular", "replicate", "constant"])
def test_pad_mixed_sign_amounts_match_torch(device, mode, rng):
    # negative amounts crop: circular then wraps within the cropped input (torch), replicate reads torch's
    # clamped source rows. Circular amounts past the cropped size read memory torch never wrote: refused.
    compared = 0
    for _ in range(300):
        shape = (1, 2) + tuple(int(v) for v in rng.integers(1, 7, size=2))
        x = rng.standard_normal(shape).astype(np.float32)
        p = [int(v) for v in rng.integers(-4, 5, size=4)]
        sizes = [shape[3] + p[0] + p[1], shape[2] + p[2] + p[3]]
        cropped = [shape[3] - max(-p[0], 0) - max(-p[1], 0), shape[2] - max(-p[2], 0) - max(-p[3], 0)]
        wraps = all(max(p[2 * i], p[2 * i + 1], 0) <= cropped[i] for i in range(2))
        if min(sizes) < 0 or (mode != "replicate" and min(cropped) < 0) or (mode == "circular" and not wraps):
            with pytest.raises(em.EmberError, match=r"^\[pad\]"):
                em.pad(em.tensor(x, device=device), p, mode=mode)
            continue
        if mode != "constant" and min(sizes) == 0:  # torch refuses an empty result of these modes
            continue
        want = F.pad(torch.from_numpy(x), p, mode=mode).numpy()
        got = em.pad(em.tensor(x, device=device), p, mode=mode)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{mode} {shape} {p}")
        compared += 1
    assert compared > 40


def test_pad_mixed_sign_circular_gradient(device):
    x = em.Var(em.tensor(np.arange(12.0).reshape(1, 3, 4), dtype=WIDE, device=device))
    assert gradcheck(lambda t: em.pad(t, (-1, 3), mode="circular") ** 2, (x,))
    assert gradcheck(lambda t: em.pad(t, (4, -3, -1, 2), mode="replicate") ** 2, (x,))


def test_pad_crop_past_the_dim_and_fill_out_of_range(device):
    x = em.zeros(4, device=device)
    expect_error(lambda: em.pad(x, (-5, 1)), "pad", em.EmberValueError)  # not [narrow]
    expect_error(lambda: em.pad(x, (-3, -2)), "pad", em.EmberValueError)
    assert em.pad(x, (-4, 1), value=2.0).numpy().tolist() == [2.0]  # torch: crop all, then pad
    u = em.zeros(3, dtype=em.uint8, device=device)
    for v in (300, -1, 256, 255.5, float("nan"), float("inf")):  # torch raises for these, never wraps to 44
        expect_error(lambda v=v: em.pad(u, (1, 1), value=v), "pad", em.EmberValueError)
    assert em.pad(u, (1, 0), value=255).numpy().tolist() == [255, 0, 0, 0]
    assert em.pad(u, (1, 0), value=2.7).numpy().tolist() == [2, 0, 0, 0]  # truncated, as torch
    i = em.zeros(2, dtype=em.int32, device=device)
    expect_error(lambda: em.pad(i, (1, 0), value=2**31), "pad", em.EmberValueError)
    assert em.pad(i, (1, 0), value=-(2**31)).numpy()[0] == -(2**31)
    h = em.zeros(2, dtype=em.float16, device=device)
    expect_error(lambda: em.pad(h, (1, 0), value=1e6), "pad", em.EmberValueError)
    assert np.isinf(em.pad(h, (1, 0), value=float("inf")).numpy()[0])
    assert em.pad(em.zeros(2, dtype=em.bool, device=device), (1, 0), value=300).numpy()[0]
