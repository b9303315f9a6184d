"""em.testing.check_op: passes good custom ops, and names each failed check for broken ones."""
import ml_dtypes
import numpy as np
import pytest

import ember as em

from conftest import expect_error


class Softplus(em.CustomOp1):
    name = "softplus"

    def cpu_fwd(self, s, l):
        return em.CpuStorage.from_numpy(np.logaddexp(0, s.as_numpy(l))), l.shape

    def bwd(self, arg, res, g):
        return g * em.nn.ops.sigmoid(arg)


class IgnoresStrides(Softplus):
    """Reads the first numel elements of the buffer as if the input were contiguous."""

    name = "ignores_strides"

    def cpu_fwd(self, s, l):
        x = s.numpy()[: l.numel()].reshape(l.shape)
        return em.CpuStorage.from_numpy(np.logaddexp(0, x)), l.shape


class WrongBwd(Softplus):
    name = "wrong_bwd"

    def bwd(self, arg, res, g):
        return g * em.nn.ops.sigmoid(arg) * 1.01


class ReturnsInput(Softplus):
    name = "returns_input"

    def cpu_fwd(self, s, l):
        return s, (s.numel,)


class MutatesInput(Softplus):
    name = "mutates_input"

    def cpu_fwd(self, s, l):
        s.numpy()[:] = 0  # numpy() is the writable escape hatch: check_op notices
        return super().cpu_fwd(s, l)


class CrashesOnInts(em.CustomOp1):
    """Raises a plain TypeError instead of an EmberError for integer inputs."""

    name = "crashes_on_ints"

    def cpu_fwd(self, s, l):
        x = s.as_numpy(l)
        if x.dtype.kind in "iu":
            raise TypeError("ints not handled")
        return em.CpuStorage.from_numpy(x * 2), l.shape


class Gather(em.CustomOp2):
    """out[i] = x[idx[i]] with an int64 index input; gradient only for x."""

    name = "gather_rows"

    def cpu_fwd(self, s1, l1, s2, l2):
        x, idx = s1.as_numpy(l1), s2.as_numpy(l2)
        if idx.dtype != np.int64:
            raise em.DTypeError(f"[gather_rows] indices must be int64, got {idx.dtype}")
        return em.CpuStorage.from_numpy(x[idx]), (idx.shape[0],) + x.shape[1:]

    def bwd(self, x, idx, res, g):
        return em.zeros_like(x).index_add(idx, g, 0), None


class Axpy(em.InplaceOp2):
    name = "axpy_"

    def cpu_fwd(self, s1, l1, s2, l2):
        y = s1.as_numpy(l1)
        y += s2.as_numpy(l2)


class AxpyIgnoresStrides(em.InplaceOp2):
    name = "axpy_flat"

    def cpu_fwd(self, s1, l1, s2, l2):
        y = s1.numpy()[: l1.numel()]
        y += s2.numpy()[: l2.numel()]


def test_check_op_passes_a_good_op_and_reports_what_it_checked():
    rep = em.testing.check_op(Softplus(), em.randn(4, 3))
    assert {"forward", "aliasing", "strided", "dtypes", "backward"} <= set(rep.passed)
    assert em.float64 in rep.supported_dtypes and em.int64 not in rep.supported_dtypes
    assert "devices" in dict(rep.skipped)  # no metal_fwd (or no Metal): no claim to compare
    assert "softplus" in repr(rep)


def test_check_op_compares_every_device_the_op_has_a_forward_for():
    import pathlib
    import runpy

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "softplus.py"
    op = runpy.run_path(str(path))["Softplus"]()  # cpu_fwd and a metal_fwd kernel
    rep = em.testing.check_op(op, em.randn(4, 3))
    assert ("devices" in rep.passed) == em.metal_is_available(), rep
    assert ("devices" in dict(rep.skipped)) != em.metal_is_available(), rep


def test_check_op_accepts_int_inputs_and_numpy_data():
    idx = em.tensor([2, 0, 2, 1])
    rep = em.testing.check_op(Gather(), em.randn(3, 5), idx)
    assert "backward" in rep.passed
    assert "forward" in em.testing.check_op(Softplus(), np.linspace(-2, 2, 7)).passed


def _failures(op, *inputs):
    with pytest.raises(em.testing.CheckOpError) as ei:
        em.testing.check_op(op, *inputs)
    e = ei.value
    assert isinstance(e, em.EmberError) and str(e).startswith("[check_op]")
    for check, detail in e.failures:
        assert f"{check}: {detail}" in str(e)
    return {check for check, _ in e.failures}, str(e)


def test_check_op_rejects_an_op_that_ignores_strides():
    failed, msg = _failures(IgnoresStrides(), em.randn(3, 4))
    assert failed == {"strided"}, msg
    assert "offset" in msg


def test_check_op_rejects_a_wrong_bwd():
    failed, msg = _failures(WrongBwd(), em.randn(5))
    assert failed == {"backward"}, msg
    assert "finite differences" in msg


def test_check_op_rejects_an_op_returning_its_input_storage():
    failed, msg = _failures(ReturnsInput(), em.randn(6))
    assert "aliasing" in failed and "input 0" in msg


def test_check_op_notices_a_forward_that_mutates_its_input():
    failed, _ = _failures(MutatesInput(), em.randn(6))
    assert "inputs unchanged" in failed


def test_check_op_wants_an_ember_error_for_unsupported_dtypes():
    failed, msg = _failures(CrashesOnInts(), em.randn(4))
    assert failed == {"dtypes"} and "int64 raised TypeError" in msg


def test_check_op_lists_every_failure_at_once():
    class Both(IgnoresStrides):
        name = "both"

        def bwd(self, arg, res, g):
            return g * 0.0

    failed, _ = _failures(Both(), em.randn(2, 3))
    assert failed == {"strided", "backward"}


def test_check_op_on_inplace_ops():
    rep = em.testing.check_op(Axpy(), em.randn(3, 4), em.randn(3, 4))
    assert "strided" in rep.passed and dict(rep.skipped).get("backward")
    failed, _ = _failures(AxpyIgnoresStrides(), em.randn(3, 4), em.randn(3, 4))
    assert "strided" in failed


def test_check_op_bad_arguments():
    expect_error(lambda: em.testing.check_op(Softplus(), em.randn(2), em.randn(2)), "check_op")
    expect_error(lambda: em.testing.check_op(lambda x: x, em.randn(2)), "check_op")


@pytest.mark.cpu_only
def test_bfloat16_reaches_a_numpy_forward_as_ml_dtypes_bfloat16():
    # A numpy forward sees bf16 inputs as ml_dtypes.bfloat16 arrays and may return them as they are,
    # so check_op counts bfloat16 among the dtypes a float op accepts (with raw uint16 bits it could
    # not, and a uint16 result would have come back as int64).
    seen = []

    class Square(em.CustomOp1):
        name = "square"

        def cpu_fwd(self, storage, layout):
            x = storage.as_numpy(layout)
            seen.append(x.dtype)
            return em.CpuStorage.from_numpy(x * x), layout.shape

        def bwd(self, arg, res, grad_res):
            return grad_res * arg * 2.0

    rep = em.testing.check_op(Square(), em.randn(4, 3))
    assert em.bfloat16 in rep.supported_dtypes
    assert np.dtype(ml_dtypes.bfloat16) in seen
    y = em.randn(3, dtype=em.bfloat16).apply_op1(Square())
    assert y.dtype is em.bfloat16 and y.numpy().dtype == np.dtype(ml_dtypes.bfloat16)
