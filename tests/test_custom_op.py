"""Custom ops in Python (docs/custom-ops.md): storage access, CustomOp1/2/3, no-bwd, validation, in-place ops, threads."""
import threading

import ml_dtypes
import numpy as np
import pytest
import torch

import ember as em
from ember import _C

from conftest import FLOATS, VIEWS, assert_close, expect_error, f64, make_view, rand_np, rand_shape

pytestmark = pytest.mark.cpu_only  # CustomOp forwards written as cpu_fwd over CpuStorage.as_numpy (docs/design/testing.md)


# ----------------------------------------------------------------------------- ops used below
class Softplus(em.CustomOp1):
    name = "softplus"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(np.logaddexp(0, storage.as_numpy(layout))), layout.shape

    def bwd(self, arg, res, grad_res):
        return grad_res * em.nn.ops.sigmoid(arg)


class NoBwd(em.CustomOp1):  # no name: defaults to the class name
    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(storage.as_numpy(layout) * 2), layout.shape


class MulOp2(em.CustomOp2):
    """a * b; bwd gives a gradient only to the first input (None for the second)."""

    name = "mul_first"

    def cpu_fwd(self, s1, l1, s2, l2):
        return em.CpuStorage.from_numpy(s1.as_numpy(l1) * s2.as_numpy(l2)), l1.shape

    def bwd(self, a, b, res, g):
        return g * b, None


class Fma(em.CustomOp3):
    name = "fma"

    def cpu_fwd(self, s1, l1, s2, l2, s3, l3):
        a, b, c = s1.as_numpy(l1), s2.as_numpy(l2), s3.as_numpy(l3)
        return em.CpuStorage.from_numpy(a * b + c), a.shape

    def bwd(self, a, b, c, res, g):
        return g * b, g * a, g


class Returns(em.CustomOp1):
    """Returns whatever the test hands it (for the output validation tests)."""

    def __init__(self, fn, out_dtype=None):
        self.fn, self.name = fn, "returns"
        if out_dtype is not None:
            self.out_dtype = out_dtype

    def cpu_fwd(self, s, l):
        return self.fn(s, l)


class AddInto(em.InplaceOp2):
    name = "add_into"

    def cpu_fwd(self, s1, l1, s2, l2):
        dst = s1.as_numpy(l1)
        dst += s2.as_numpy(l2)


class ReverseInto(em.InplaceOp2):
    """dst[i] = src[n - 1 - i], element by element: numpy's own overlap protection cannot help here,
    so an aliased src is only right when ember hands the forward a snapshot."""

    name = "reverse_into"

    def cpu_fwd(self, s1, l1, s2, l2):
        dst, src = s1.as_numpy(l1), s2.as_numpy(l2)
        n = dst.shape[0]
        for i in range(n):
            dst[i] = src[n - 1 - i]


class ShiftAdd(em.InplaceOp2):
    """dst[i] += src[i], element by element in order (a running loop, like a hand-written kernel)."""

    name = "shift_add"

    def cpu_fwd(self, s1, l1, s2, l2):
        dst, src = s1.as_numpy(l1), s2.as_numpy(l2)
        for i in range(dst.shape[0]):
            dst[i] += src[i]


class Scale(em.InplaceOp1):
    name = "scale_"

    def __init__(self, k):
        self.k = k

    def cpu_fwd(self, s, l):
        v = s.as_numpy(l)
        v *= v.dtype.type(self.k)


class Addcmul(em.InplaceOp3):
    name = "addcmul_"

    def cpu_fwd(self, s1, l1, s2, l2, s3, l3):
        dst = s1.as_numpy(l1)
        dst += s2.as_numpy(l2) * s3.as_numpy(l3)


def torch_of(t, grad=False):
    return torch.tensor(f64(t.numpy()), requires_grad=grad)


# ----------------------------------------------------------------------------- storage access
def test_storage_numpy_is_flat_writable_and_keeps_storage_alive():
    t = em.arange(6, dtype=em.float32).reshape(2, 3)
    flat = t._storage.numpy()
    assert flat.shape == (6,) and flat.flags.writeable
    flat[4] = 40.0
    assert t.numpy()[1, 1] == 40.0
    del t
    assert flat[4] == 40.0 and flat.sum() == 0 + 1 + 2 + 3 + 40 + 5  # the view still owns the buffer


@pytest.mark.parametrize("kind", VIEWS)
@pytest.mark.parametrize("dt", [em.float32, em.bfloat16, em.int64, em.uint8])
def test_as_numpy_is_a_readonly_zero_copy_view_through_the_layout(rng, kind, dt):
    t, ref = make_view(rng, rand_shape(rng, 3, 2, 5), dt, kind)
    a = t._storage.as_numpy(t._layout)
    assert a.dtype == (np.dtype(ml_dtypes.bfloat16) if dt is em.bfloat16 else np.dtype(dt.name))
    np.testing.assert_array_equal(f64(a), f64(ref))
    assert np.shares_memory(a, t._storage.numpy())
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[(0,) * a.ndim] = 1
    assert t._storage.as_numpy(t._layout, writable=True).flags.writeable


def test_as_numpy_rejects_a_layout_outside_the_storage():
    s = em.CpuStorage.empty(4, em.float32)
    expect_error(lambda: s.as_numpy(em.Layout([3], [2], 0)), "as_numpy", em.IndexOutOfRange)


@pytest.mark.parametrize("np_dt, em_dt", [
    (np.float32, em.float32), (np.float16, em.float16), (np.float64, em.float64), (np.int64, em.int64),
    (np.uint32, em.uint32), (np.uint8, em.uint8), (ml_dtypes.bfloat16, em.bfloat16),
    (np.int32, em.int32), (np.bool_, em.bool), (np.int16, em.int64)])
def test_from_numpy_copies_into_aligned_memory(rng, np_dt, em_dt):
    arr = (rng.standard_normal((3, 5)) * 10).astype(np_dt)[:, ::2]  # non-contiguous source
    s = em.CpuStorage.from_numpy(arr)
    assert isinstance(s, em.CpuStorage) and s.dtype is em_dt and s.device == em.cpu
    assert s.numel == arr.size and s.data_ptr % 64 == 0
    want = f64(arr.reshape(-1))
    np.testing.assert_array_equal(f64(s.numpy()), want)
    arr[...] = 0  # a copy: the storage keeps the old values
    np.testing.assert_array_equal(f64(s.numpy()), want)


def test_from_numpy_with_dtype_and_bf16_bits(rng):
    x = rng.standard_normal(7).astype(np.float32)
    s = em.CpuStorage.from_numpy(x, dtype=em.float16)
    assert s.dtype is em.float16
    np.testing.assert_array_equal(s.numpy(), x.astype(np.float16))
    bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    s = em.CpuStorage.from_numpy(bits.view(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(s.numpy().view(np.uint16), bits)
    expect_error(lambda: em.CpuStorage.from_numpy(np.array(["a"])), "from_numpy", em.DTypeError)
    big_endian = x.astype(">f4")
    s = em.CpuStorage.from_numpy(big_endian)
    assert s.dtype is em.float32
    np.testing.assert_array_equal(s.numpy(), x)


@pytest.mark.parametrize("dt", [em.float32, em.bfloat16, em.int64, em.uint8, "float64", np.uint32])
def test_empty(dt):
    s = em.CpuStorage.empty(10, dt)
    want = dt if isinstance(dt, em.DType) else {"float64": em.float64}.get(dt, em.uint32)
    assert s.numel == 10 and s.dtype is want and s.device == em.cpu and s.numpy().shape == (10,)
    assert em.CpuStorage.empty(0, em.float32).numel == 0
    expect_error(lambda: em.CpuStorage.empty(-1, em.float32), "empty")


def test_storage_properties_on_tensors(device):
    t = em.zeros(2, 3, dtype=em.uint32)
    assert t._storage.dtype is em.uint32 and t._storage.device == device
    assert em.MetalStorage is not None
    if not em.metal_is_available():  # no Metal backend: a Metal buffer cannot be made
        with pytest.raises(em.DeviceError, match=r"^\[empty\] device metal:0 is not available"):
            em.MetalStorage.empty(4, em.float32)


# ----------------------------------------------------------------------------- CustomOp1/2/3
@pytest.mark.parametrize("kind", VIEWS)
@pytest.mark.parametrize("dt", FLOATS)
def test_softplus_forward_on_every_view_and_float_dtype(rng, kind, dt):
    t, ref = make_view(rng, rand_shape(rng, 3, 1, 6), dt, kind)
    y = t.apply_op1(Softplus())
    assert y.dtype is dt and y.shape == t.shape and y.layout.is_contiguous()
    assert_close(y, np.logaddexp(0, f64(ref)))
    assert not y._storage.same_buffer(t._storage)


def test_an_op_reads_a_transposed_input_through_its_layout(rng):
    seen = []

    class Rows(em.CustomOp1):
        """Row sums, computed by walking the layout's strides by hand over the flat buffer."""

        def cpu_fwd(self, s, l):
            seen.append((s, l))
            flat, (r, c), (sr, sc) = s.numpy(), l.shape, l.stride
            out = [sum(flat[l.start_offset + i * sr + j * sc] for j in range(c)) for i in range(r)]
            return em.CpuStorage.from_numpy(np.array(out, dtype=flat.dtype)), (r,)

    base = em.tensor(rng.standard_normal((4, 3)))
    t = base.t()[1:, :]  # transposed and offset: (2, 4) with strides (1, 3), offset 1
    y = t.apply_op1(Rows())
    s, l = seen[0]
    assert s is t._storage and l.stride == (1, 3) and l.start_offset == 1
    np.testing.assert_allclose(y.numpy(), base.numpy().T[1:].sum(1))


def test_inputs_are_read_only_in_a_custom_op():
    class Writes(em.CustomOp1):
        def cpu_fwd(self, s, l):
            s.as_numpy(l)[...] = 0
            return em.CpuStorage.empty(l.numel(), em.float32), l.shape

    t = em.ones(3)
    with pytest.raises(ValueError, match="read-only"):
        t.apply_op1(Writes())
    assert t.numpy().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset"])
def test_softplus_backward_and_second_order_vs_torch(rng, kind):
    t, ref = make_view(rng, (3, 4), em.float64, kind)
    v = em.Var(t)
    y = v.apply_op1(Softplus())
    assert y.op is not None and y.op.name == "softplus"
    g = (y * y).sum().backward(create_graph=True)[v]
    x = torch.tensor(f64(ref), requires_grad=True)
    (gt,) = torch.autograd.grad((torch.nn.functional.softplus(x) ** 2).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), gt.detach().numpy(), rtol=1e-12)
    g2 = g.sum().backward()[v]  # bwd is built of Tensor ops, so it records its own graph
    (g2t,) = torch.autograd.grad(gt.sum(), x)
    np.testing.assert_allclose(g2.numpy(), g2t.numpy(), rtol=1e-10)


def test_missing_bwd_raises_backward_not_supported():
    v = em.Var([1.0, 2.0])
    y = v.apply_op1(NoBwd())
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    e = expect_error(lambda: y.sum().backward(), "NoBwd", em.BackwardNotSupported)
    assert e.op == "NoBwd" and "bwd" in str(e)
    assert NoBwd.name == "NoBwd" and not NoBwd._has_bwd and Softplus._has_bwd


def test_no_bwd_variant_raises_only_when_backward_needs_it():
    v = em.Var([0.5, -1.0, 2.0])
    y = v.apply_op1_no_bwd(Softplus())
    assert y.op is not None  # recorded, so that backward can refuse loudly
    np.testing.assert_allclose(y.numpy(), np.logaddexp(0, [0.5, -1.0, 2.0]), rtol=1e-6)
    e = expect_error(lambda: (y * 2).sum().backward(), "softplus", em.BackwardNotSupported)
    assert e.op == "softplus" and "apply_op1" in str(e) and "detach" in str(e)
    # behind detach() the same result is a constant: the gradient flows to v through the other path
    g = (y.detach() * v).sum().backward()
    np.testing.assert_allclose(g[v].numpy(), y.numpy())
    # in inference (no variable behind it) nothing is recorded at all
    assert em.tensor([1.0]).apply_op1_no_bwd(Softplus()).op is None
    with em.no_grad():
        assert v.apply_op1_no_bwd(Softplus()).op is None


def test_no_bwd_variants_of_op2_op3_name_their_recording_variant(rng):
    a, b, c = (em.Var(rng.standard_normal(4)) for _ in range(3))
    y2 = a.apply_op2_no_bwd(b, MulOp2())
    y3 = a.apply_op3_no_bwd(b, c, Fma())
    np.testing.assert_allclose(y2.numpy(), a.numpy() * b.numpy())
    np.testing.assert_allclose(y3.numpy(), a.numpy() * b.numpy() + c.numpy())
    assert "apply_op2" in str(expect_error(lambda: y2.sum().backward(), "mul_first", em.BackwardNotSupported))
    assert "apply_op3" in str(expect_error(lambda: y3.sum().backward(), "fma", em.BackwardNotSupported))


def test_bwd_returning_none_for_an_intermediate_input(rng):
    v, w = em.Var(rng.standard_normal((2, 3))), em.Var(rng.standard_normal((2, 3)))
    a, b = v * 2.0, w.exp()  # both inputs are intermediate results, not variables
    y = a.apply_op2(b, MulOp2())
    g = (y * 3.0).sum().backward()
    np.testing.assert_allclose(g[v].numpy(), 6.0 * np.exp(w.numpy()), rtol=1e-6)
    assert g.get(w) is None  # None means "no gradient": safe, never a crash


@pytest.mark.parametrize("kinds", [("contiguous", "transposed", "offset"), ("stepped", "broadcast", "narrowed")])
def test_op3_forward_and_backward_vs_torch(rng, kinds):
    shape = (3, 4)
    views = [make_view(rng, shape, em.float64, k) for k in kinds]
    vs = [em.Var(t) for t, _ in views]
    y = vs[0].apply_op3(vs[1], vs[2], Fma())
    ts = [torch.tensor(f64(r), requires_grad=True) for _, r in views]
    yt = ts[0] * ts[1] + ts[2]
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy())
    w = rng.standard_normal(shape)
    g = (y * em.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    for v, t in zip(vs, ts):
        np.testing.assert_allclose(g[v].numpy(), t.grad.numpy(), rtol=1e-12)
    # the views themselves (not copies) reach the forward
    seen = []

    class Spy(Fma):
        def cpu_fwd(self, *args):
            seen.append(args)
            return super().cpu_fwd(*args)

    ins = [t for t, _ in views]
    ins[0].apply_op3(ins[1], ins[2], Spy())
    assert all(seen[0][2 * i] is t._storage and seen[0][2 * i + 1] == t._layout for i, t in enumerate(ins))


def test_default_device_forwards_name_the_op():
    for meth, dev in (("metal_fwd", "metal"), ("cuda_fwd", "cuda")):
        e = expect_error(lambda m=meth: getattr(Softplus(), m)(None, None), "softplus", em.UnsupportedOp)
        assert f"no {dev} implementation for softplus" in str(e)


def test_forward_is_chosen_by_the_storage_device_kind():
    from ember import custom_op

    class FakeStorage:  # only what dispatch reads: the device kind of a non-CPU storage
        def __init__(self, kind):
            self.device_kind = kind

    op = Softplus()
    assert custom_op._fwd(op, em.ones(1)._storage) == op.cpu_fwd
    assert custom_op._fwd(op, FakeStorage(1)) == op.metal_fwd
    assert custom_op._fwd(op, FakeStorage(2)) == op.cuda_fwd
    expect_error(lambda: custom_op._fwd(op, FakeStorage(7)), "softplus", em.DeviceError)


def test_apply_rejects_wrong_op_kinds_and_operands():
    t = em.ones(3)
    expect_error(lambda: t.apply_op1(MulOp2()), "apply_op1")
    expect_error(lambda: t.apply_op2(t, Softplus()), "apply_op2")
    expect_error(lambda: t.apply_op3(t, t, MulOp2()), "apply_op3")
    expect_error(lambda: t.inplace_op1(Softplus()), "inplace_op1")
    expect_error(lambda: t.apply_op2([1.0, 2.0, 3.0], MulOp2()), "mul_first")


# ----------------------------------------------------------------------------- output validation
def test_forward_returning_a_wrong_size_storage():
    op = Returns(lambda s, l: (em.CpuStorage.empty(l.numel() + 1, em.float32), l.shape))
    e = expect_error(lambda: em.ones(2, 3).apply_op1(op), "returns", em.ShapeError)
    assert "7 elements" in str(e) and "(2, 3)" in str(e)


@pytest.mark.parametrize("bad, cls", [
    (lambda s, l: (em.CpuStorage.from_numpy(np.zeros(l.numel())), l.shape), em.DTypeError),  # float64 leak
    (lambda s, l: (s, l.shape), em.EmberError),  # the input's own storage
    (lambda s, l: (_C.CpuStorage._borrow(s.data_ptr + 4, l.numel() - 1, 0, s), (l.numel() - 1,)), em.EmberError),
    (lambda s, l: em.CpuStorage.empty(l.numel(), em.float32), em.EmberError),  # not a (storage, shape) pair
    (lambda s, l: (np.zeros(l.numel(), np.float32), l.shape), em.EmberError),  # not a storage
    (lambda s, l: (em.CpuStorage.empty(4, em.float32), (-2, -2)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(4, em.float32), "ab"), em.ShapeError),
])
def test_forward_output_is_validated(bad, cls):
    expect_error(lambda: em.ones(4).apply_op1(Returns(bad)), "returns", cls)


def test_output_dtype_can_be_declared():
    argmax = Returns(lambda s, l: (em.CpuStorage.from_numpy(np.argmax(s.as_numpy(l), -1)), l.shape[:-1]),
                     out_dtype=em.int64)
    t = em.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 1.0]])
    y = t.apply_op1(argmax)
    assert y.dtype is em.int64 and y.tolist() == [1, 0]
    by_fn = Returns(lambda s, l: (em.CpuStorage.from_numpy(s.as_numpy(l) > 0), l.shape), out_dtype=lambda d: em.bool)
    assert t.apply_op1(by_fn).dtype is em.bool
    lies = Returns(lambda s, l: (em.CpuStorage.from_numpy(s.as_numpy(l) > 0), l.shape), out_dtype=em.int64)
    e = expect_error(lambda: t.apply_op1(lies), "returns", em.DTypeError)
    assert "bool" in str(e) and "int64" in str(e)


def test_shape_may_be_a_list_and_numpy_ints():
    op = Returns(lambda s, l: (em.CpuStorage.from_numpy(s.as_numpy(l).reshape(-1)), [np.int64(l.numel())]))
    y = em.ones(2, 2).apply_op1(op)
    assert y.shape == (4,) and isinstance(y.shape[0], int)


# ----------------------------------------------------------------------------- in place
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "narrowed", "stepped", "offset"])
@pytest.mark.parametrize("dt", [em.float32, em.bfloat16, em.int64])
def test_inplace_op1_writes_through_the_view(rng, kind, dt):
    base = em.tensor(rand_np(rng, (6, 5), dt))
    want = base.numpy()
    views = {"contiguous": lambda t: t, "transposed": lambda t: t.t(), "narrowed": lambda t: t.narrow(1, 1, 3),
             "stepped": lambda t: t[::2, 1::2], "offset": lambda t: t[2]}
    ref_views = {"contiguous": lambda a: a, "transposed": lambda a: a.T, "narrowed": lambda a: a[:, 1:4],
                 "stepped": lambda a: a[::2, 1::2], "offset": lambda a: a[2]}
    v0 = base._storage.version
    assert views[kind](base).inplace_op1(Scale(3)) is None
    ref_views[kind](want)[...] *= want.dtype.type(3)
    np.testing.assert_array_equal(f64(base.numpy()), f64(want))  # every view of the storage sees it
    assert base._storage.version > v0


def test_inplace_writable_only_for_the_mutated_operand():
    seen = {}

    class Probe(em.InplaceOp2):
        def cpu_fwd(self, s1, l1, s2, l2):
            seen["dst"] = s1.as_numpy(l1).flags.writeable
            seen["src"] = s2.as_numpy(l2).flags.writeable

    a, b = em.zeros(3), em.ones(3)
    a.inplace_op2(b, Probe())
    assert seen == {"dst": True, "src": False}
    assert not a._storage.as_numpy(a._layout).flags.writeable  # back to read-only after the op


def test_aliased_inplace_op_doubles_promptly():
    a = em.arange(5, dtype=em.float32)
    done = threading.Event()

    def run():
        a.inplace_op2(a, AddInto())
        done.set()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert done.wait(5.0), "a.inplace_op2(a, add_into) did not finish: deadlock?"
    assert a.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    a.inplace_op2(a, ReverseInto())  # reads the snapshot, so a true reversal
    assert a.tolist() == [8.0, 6.0, 4.0, 2.0, 0.0]


def test_overlapping_views_read_the_values_before_the_write(rng):
    x = rng.standard_normal(8)
    want = x.copy()
    want[1:] = x[1:] + x[:-1]
    for op in (AddInto(), ShiftAdd()):
        a = em.tensor(x)
        a[1:].inplace_op2(a[:-1], op)  # a[1:] += a[:-1] with copy semantics
        np.testing.assert_allclose(a.numpy(), want)
    c = em.tensor(x.reshape(2, 4))
    c.inplace_op3(c.t().t(), c, Addcmul())  # both readers alias the target
    np.testing.assert_allclose(c.numpy(), x.reshape(2, 4) + x.reshape(2, 4) ** 2)


def test_inplace_op_errors():
    class ReturnsSomething(em.InplaceOp1):
        def cpu_fwd(self, s, l):
            return s

    class Fails(em.InplaceOp1):
        def cpu_fwd(self, s, l):
            s.as_numpy(l)[0] = 9
            raise em.DTypeError("[fails] nope")

    t = em.zeros(3)
    v = t._storage.version
    expect_error(lambda: t.inplace_op1(ReturnsSomething()), "ReturnsSomething")
    expect_error(lambda: em.ones(1).broadcast_as(3).inplace_op1(Scale(2)), "scale_")
    expect_error(lambda: t.inplace_op1(Fails()), "fails", em.DTypeError)
    assert t._storage.version >= v + 2 and t.tolist()[0] == 9  # partial writes still bump the version
    assert not t._storage.as_numpy(t._layout).flags.writeable
    expect_error(lambda: t.inplace_op2(em.ones(3), Scale(2)), "inplace_op2")


def test_inplace_on_a_saved_tensor_makes_backward_raise():
    v = em.Var([1.0, 2.0])
    h = v * 1.0
    y = h * h  # saves h
    h.inplace_op1(Scale(2))
    expect_error(lambda: y.sum().backward(), "backward", em.InplaceModifiedError)
    z = v.exp()
    z.inplace_op1(Scale(2))  # z itself was overwritten: its own gradient would be wrong
    e = expect_error(lambda: z.sum().backward(), "scale_", em.InplaceModifiedError)
    assert "clone" in str(e)
    w = em.Var([1.0, 2.0])  # a variable mutated before use, under no_grad, is fine
    expect_error(lambda: w.inplace_op1(Scale(2)), "scale_", em.UnsupportedOp)  # the rule of w[0] = 5
    with pytest.raises(em.UnsupportedOp, match=r"^\[setitem\]"):
        w[0] = 5.0
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])  # neither wrote anything
    with em.no_grad():
        w.inplace_op1(Scale(2))
    np.testing.assert_allclose((w * w).sum().backward()[w].numpy(), [4.0, 8.0])


# ----------------------------------------------------------------------------- threads
def test_four_threads_apply_custom_ops_at_once(rng):
    xs = [rng.standard_normal((16, 8)) for _ in range(4)]
    errors, barrier = [], threading.Barrier(4)

    def work(x):
        try:
            barrier.wait()
            for _ in range(60):
                v = em.Var(x)
                y = v.t().apply_op1(Softplus()).apply_op2(v.t(), MulOp2())
                g = y.sum().backward()[v].numpy()
                # y = softplus(x) * x; mul_first's bwd feeds only its first input: dy/dx = x * sigmoid(x)
                np.testing.assert_allclose(g, x / (1 + np.exp(-x)), rtol=1e-10)
                a = em.tensor(x)
                a.inplace_op2(a, AddInto())
                np.testing.assert_array_equal(a.numpy(), 2 * x)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ths = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in ths:
        t.start()
    for t in ths:
        t.join(60)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in ths)


def test_inplace_target_is_per_thread():
    """While one thread mutates a storage inside an in-place op, another thread's view of the same
    storage stays read-only (the writable default is thread-local)."""
    inside, release, seen = threading.Event(), threading.Event(), {}

    class Wait(em.InplaceOp1):
        def cpu_fwd(self, s, l):
            inside.set()
            release.wait(5)

    t = em.zeros(4)
    th = threading.Thread(target=lambda: t.inplace_op1(Wait()))
    th.start()
    assert inside.wait(5)
    seen["other"] = t._storage.as_numpy(t._layout).flags.writeable
    release.set()
    th.join(5)
    assert seen["other"] is False


def test_star_import_exports_the_public_api():
    # `from ember import *` must give what a custom-op author subclasses, every error class and the
    # creation functions; every name in __all__ must exist.
    ns = {}
    exec("from ember import *", ns)
    for name in ("CustomOp1", "CustomOp2", "CustomOp3", "InplaceOp1", "InplaceOp2", "InplaceOp3", "Tensor", "Var",
                 "EmberError", "ShapeError", "DTypeError", "OutOfMemory", "tensor", "zeros", "no_grad", "nn"):
        assert name in ns, name
    assert all(hasattr(em, name) for name in em.__all__)
    errors = [getattr(em.errors, n) for n in dir(em.errors) if isinstance(getattr(em.errors, n), type)]
    assert all(c.__name__ in em.__all__ for c in errors if issubclass(c, em.EmberError))
