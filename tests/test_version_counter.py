"""Writes the version counter must see: through CpuStorage.numpy(), writable as_numpy views (also inside a
custom op) and DLPack exports of saved tensors (read-only); and no false alarm from read-only access."""
import numpy as np
import pytest

import ember as em

# Every case writes or exports host memory (writable numpy views of CpuStorage, cpu_fwd custom ops, DLPack).
pytestmark = pytest.mark.cpu_only


def square_sum():
    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    return x, (x * x).sum()


def raises_modified(y):
    with pytest.raises(em.InplaceModifiedError, match=r"^\[backward\] an input of mul was modified"):
        y.backward()


def test_write_through_storage_numpy_after_the_op():
    x, y = square_sum()
    x.storage.numpy()[:] = 0
    raises_modified(y)


def test_write_through_a_view_opened_before_the_op():
    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    view = x.storage.numpy()
    y = (x * x).sum()
    view[:] = 0
    raises_modified(y)  # the view is still open


def test_view_opened_before_and_closed_before_backward():
    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    view = x.storage.numpy()
    y = (x * x).sum()
    view[1:] = 0
    del view
    raises_modified(y)


def test_slice_of_a_view_keeps_it_open():
    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    part = x.storage.numpy()[1:]  # the view itself is gone, its slice is not
    y = (x * x).sum()
    part[:] = 0
    raises_modified(y)


def test_writable_as_numpy_counts():
    x, y = square_sum()
    x.storage.as_numpy(x.layout, writable=True)[:] = 0
    raises_modified(y)


class ZeroInput(em.CustomOp1):
    """A misbehaving forward: it zeroes its input through a writable view."""

    name = "zero_input"

    def __init__(self, how):
        self.how = how

    def cpu_fwd(self, storage, layout):
        out = storage.as_numpy(layout).copy()
        if self.how == "numpy":
            storage.numpy()[:] = 0
        else:
            storage.as_numpy(layout, writable=True)[:] = 0
        return em.CpuStorage.from_numpy(out), layout.shape


@pytest.mark.parametrize("how", ["numpy", "as_numpy"])
def test_custom_op_writing_its_input(how):
    x, y = square_sum()
    x.apply_op1(ZeroInput(how))
    raises_modified(y)


def test_read_only_access_raises_nothing():
    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    before = x.storage.numpy()  # opened and closed before the op: a write then is seen by the op itself
    del before
    y = (x * x).sum()
    x.numpy()
    x.storage.as_numpy(x.layout)
    np.asarray(x)
    x.tolist()
    assert y.backward()[x].tolist() == [2.0, 4.0, 6.0]


def test_custom_op_writing_its_own_output_is_fine():
    class Double(em.CustomOp1):
        name = "double_out"

        def cpu_fwd(self, storage, layout):
            out = em.CpuStorage.empty(layout.numel(), storage.dtype)
            out.numpy()[:] = 2 * storage.as_numpy(layout).reshape(-1)
            return out, layout.shape

        def bwd(self, arg, res, grad_res):
            return grad_res * 2

    x = em.Var(em.tensor([1.0, 2.0, 3.0]))
    y = (x.apply_op1(Double()) * x).sum()
    assert y.backward()[x].tolist() == [4.0, 8.0, 12.0]


def test_read_only_view_cannot_be_made_writable():
    x, _ = square_sum()
    v = x.storage.as_numpy(x.layout)
    with pytest.raises(ValueError):
        v.flags.writeable = True


def test_dlpack_export_of_a_saved_tensor_is_read_only():
    x, y = square_sum()
    a = np.from_dlpack(x)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 5
    assert y.backward()[x].tolist() == [2.0, 4.0, 6.0]


def test_dlpack_export_of_an_unsaved_tensor_stays_writable():
    t = em.tensor([1.0, 2.0, 3.0])
    a = np.from_dlpack(t)
    assert a.flags.writeable
    a[0] = 5
    assert t.tolist() == [5.0, 2.0, 3.0]  # zero-copy both ways


def test_dlpack_copy_export_of_a_saved_tensor_is_writable():
    x, _ = square_sum()
    cap = x.__dlpack__(max_version=(1, 0), copy=True)
    a = np.from_dlpack(type("P", (), {"__dlpack__": lambda s, **k: cap,
                                      "__dlpack_device__": lambda s: (1, 0)})())
    a[0] = 9  # a copy: x is untouched
    assert x.tolist() == [1.0, 2.0, 3.0]
