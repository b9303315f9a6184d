"""em.tensor and the creation functions land data in the dtype and on the device asked for: Python floats
rounded once to a given dtype, a Tensor (or DLPack object) moved to a given device, and a dtype the device
does not hold refused under the name of the function the user called."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import FLOATS, WIDE, expect_error, npdt

# Values whose float32 rounding lands exactly halfway between two neighbours in the narrower dtypes, so a
# detour through float32 rounds them twice (to even) where one rounding goes up.
DOUBLE_ROUNDING = {"float16": 1 + 2.0**-11 + 2.0**-30, "bfloat16": 1 + 2.0**-8 + 2.0**-30}


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_python_floats_round_once_to_the_given_dtype(dt):
    vals = [0.7, 1 / 3, -1e-8, 2.5e-3, 123.456, DOUBLE_ROUNDING.get(dt.name, 0.1)]
    out = em.tensor(vals, dtype=dt)
    want = np.array(vals, dtype=np.float64).astype(npdt(dt))
    assert out.dtype is dt and out.device == em.get_default_device()
    np.testing.assert_array_equal(out.numpy().view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(em.tensor([[v] for v in vals], dtype=dt.name).numpy().ravel().view(np.uint8),
                                  want.view(np.uint8))  # nested lists and a dtype by name


def test_python_floats_to_an_int_dtype_and_default_dtypes():
    assert em.tensor([1.7, -2.7], dtype=em.int64).tolist() == [1, -2]
    big = 2**53 + 1  # Python ints stay exact
    assert em.tensor([big], dtype=em.int64).tolist() == [big]
    assert em.tensor([0.7]).dtype is em.float32 and em.tensor([1, 2]).dtype is em.int64
    assert em.tensor([0.7]).numpy()[0] == np.float32(0.7)
    if WIDE is em.float64:
        assert em.tensor([0.7], dtype="float64").item() == 0.7
        assert em.tensor(0.1, dtype=em.float64).item() == 0.1  # a bare Python float too
        assert em.tensor([1e39], dtype=em.float64).item() == 1e39  # past float32's range, not inf


def _other_device(device):
    """A device other than ``device`` that holds data here: the CPU for Metal, Metal (when it runs) for the CPU."""
    if device.type != "cpu":
        return em.cpu
    metal = em.Device("metal", 0)
    return metal if em.metal_is_available() else None


def test_tensor_of_a_tensor_goes_to_the_given_device(device, rng):
    a = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    for src_dev, dst_dev in ((em.cpu, device), (device, em.cpu), (device, device)):
        src = em.tensor(a, device=src_dev).t()  # a strided view
        out = em.tensor(src, device=dst_dev)
        assert out.device == dst_dev and out.dtype is em.float32 and out.shape == (4, 3)
        np.testing.assert_array_equal(out.numpy(), a.T)
        assert out.device != src.device or not out.storage.same_buffer(src.storage)  # always a copy
        h = em.tensor(src, dtype=em.float16, device=dst_dev)
        assert h.device == dst_dev and h.dtype is em.float16
        np.testing.assert_array_equal(h.numpy(), a.T.astype(np.float16))
    src = em.tensor(a, device=device)
    assert em.tensor(src).device == device and em.tensor(em.Var(src)).device == device  # None: its own device
    wide = em.tensor(src, dtype=em.float64, device=em.cpu)  # the cast runs where float64 is held
    assert wide.device == em.cpu and wide.dtype is em.float64
    np.testing.assert_array_equal(wide.numpy(), a.astype(np.float64))
    if WIDE is not em.float64:  # a float64 CPU tensor becomes float32 on the device: cast before the move
        narrow = em.tensor(em.tensor(a.astype(np.float64), device=em.cpu), dtype=em.float32, device=device)
        assert narrow.device == device and narrow.dtype is em.float32
        np.testing.assert_array_equal(narrow.numpy(), a)
    other = _other_device(device)
    if other is not None:
        assert em.tensor(src, device=other).device == other


def test_tensor_of_a_dlpack_object_goes_to_the_given_device(device):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    out = em.tensor(t, device=device)
    assert out.device == device and out.dtype is em.float32
    np.testing.assert_array_equal(out.numpy(), t.numpy())
    h = em.tensor(t, dtype=em.bfloat16, device=device)
    assert h.device == device and h.dtype is em.bfloat16
    np.testing.assert_array_equal(h.numpy().astype(np.float32), t.numpy())
    assert em.tensor(t).device == em.cpu  # without a device: where the DLPack data is


def test_dtype_the_device_lacks_is_refused_under_the_users_op(device):
    cpu64 = em.zeros(3, dtype=em.float64, device=em.cpu)
    on_dev = em.zeros(3, device=device)
    calls = {
        "zeros": lambda: em.zeros(3, dtype="float64", device=device),
        "ones": lambda: em.ones(2, 2, dtype=em.float64, device=device),
        "full": lambda: em.full((3,), 1.5, dtype=em.float64, device=device),
        "zeros_like": lambda: em.zeros_like(on_dev, dtype=em.float64),
        "ones_like": lambda: em.ones_like(on_dev, dtype=em.float64),
        "full_like": lambda: em.full_like(on_dev, 2.0, dtype=em.float64),
        "arange": lambda: em.arange(3, dtype=em.float64, device=device),
        "eye": lambda: em.eye(3, dtype=em.float64, device=device),
        "linspace": lambda: em.linspace(0, 1, 5, dtype=em.float64, device=device),
        "rand": lambda: em.rand(3, dtype=em.float64, device=device),
        "randn": lambda: em.randn(3, dtype=em.float64, device=device),
        "tensor": lambda: em.tensor(np.ones(3), device=device),
    }
    more_tensor = [lambda: em.tensor([0.5], dtype="float64", device=device),
                   lambda: em.tensor(cpu64, device=device),
                   lambda: em.tensor(on_dev, dtype=em.float64),
                   lambda: em.tensor(torch.ones(2, dtype=torch.float64), device=device)]
    if WIDE is em.float64:  # the device holds float64: each call makes it there
        for fn in list(calls.values()) + more_tensor:
            out = fn()
            assert out.dtype is em.float64 and out.device == device
        return
    for op, fn in calls.items():
        e = expect_error(fn, op, em.DTypeError)
        assert f"float64 is not supported on {device}" in str(e)
    for fn in more_tensor:
        expect_error(fn, "tensor", em.DTypeError)
    assert em.zeros(3, device=device).dtype is em.float32  # nothing left half-made: the device still works


def test_fill_value_errors_name_full_and_full_like():
    expect_error(lambda: em.full((2,), float("nan"), dtype=em.int64), "full", em.EmberValueError)
    expect_error(lambda: em.full_like(em.zeros(2, dtype=em.int64), float("inf")), "full_like", em.EmberValueError)
