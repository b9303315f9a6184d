"""check_op on every available device: the emulated Metal device compared with the CPU, reported per
device, float64 inputs compared in float32 where the device has no float64."""
import importlib.util
import pathlib

import numpy as np
import pytest

import ember as em

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "softplus.py"


def softplus_op():
    spec = importlib.util.spec_from_file_location("softplus_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Softplus()


@pytest.fixture
def metal(monkeypatch):
    monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()


def cpu(a):
    return em.tensor(a, device=em.cpu)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_op_reports_the_emulated_device(metal, dtype):
    x = cpu(np.random.default_rng(0).standard_normal((5, 7)).astype(dtype))
    report = em.testing.check_op(softplus_op(), x)
    assert "devices" in report.passed
    assert report.devices["metal:0"] == "agrees with cpu"
    if em.cuda_is_available():  # EMBER_CUDA=emulate beside: the example has no cuda_fwd
        assert report.devices["cuda:0"] == "not compared: softplus has no cuda_fwd"
    assert set(report.devices) == {"metal:0"} | ({"cuda:0"} if em.cuda_is_available() else set())
    assert "on metal:0: agrees with cpu" in repr(report)


class WrongOnMetal(em.CustomOp1):
    """exp on the CPU, but the metal forward adds one: check_op must name the device that disagrees."""

    name = "wrong_on_metal"

    def cpu_fwd(self, storage, layout):
        out = em.CpuStorage._empty_code(layout.numel(), storage.dtype.code)
        out.numpy()[:] = np.exp(storage.as_numpy(layout)).ravel()
        return out, layout.shape

    def metal_fwd(self, storage, layout):
        t = em.tensor(storage.numpy(), device=em.cpu).reshape(-1)
        return (t.exp() + 1).to_device(storage.device)._storage, layout.shape

    def bwd(self, arg, res, grad_res):
        return grad_res * res


def test_check_op_names_the_device_that_disagrees(metal):
    x = cpu(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    with pytest.raises(em.testing.CheckOpError, match=r"devices: metal:0 disagrees with cpu") as e:
        em.testing.check_op(WrongOnMetal(), x)
    assert e.value.report.devices["metal:0"] != "agrees with cpu"
