"""Reductions, matmul, the index family and convolution through the public API on every available device
(the Metal emulator with EMBER_METAL=emulate): each family x dtype x layout against numpy, and on Metal
bit for bit against the CPU where the CPU's result is exact (integers, indices, data movement, sums the
kernels add in the CPU's order)."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import TOL, VIEWS, expect_error, f64, make_view, npdt

METAL_DTYPES = [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8]


def on_cpu(device):
    return em.Device(device).type == "cpu"


def dtypes_of(device):
    return METAL_DTYPES + ([em.float64] if on_cpu(device) else [])


def same_as_cpu(t, want):
    """t (on any device) equals the CPU's result of the same op bit for bit."""
    got, want = t.numpy(), want.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.ascontiguousarray(got).reshape(-1).view(np.uint8),
                                  np.ascontiguousarray(want).reshape(-1).view(np.uint8))


def close(t, ref, dt, scale=1.0):
    got = t.numpy()
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    if dt.is_float:
        r, a = TOL[dt.name]
        np.testing.assert_allclose(f64(got), f64(ref), rtol=r * scale, atol=a * scale, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, np.asarray(ref))


def cpu_copy(t):
    return em.tensor(t.numpy(), device="cpu")


# ------------------------------------------------------------------------------------------ reductions

DIMS = [None, 0, -1, (0, 2), (1,), (0, 1, 2)]


@pytest.mark.parametrize("kind", VIEWS)
def test_reductions_every_dtype_and_layout(device, kind, rng):
    for dt in dtypes_of(device):
        x, ref = make_view(rng, (4, 5, 6), dt, kind, device=device)
        xc = cpu_copy(x)
        for dim in DIMS:
            axis = dim if not isinstance(dim, tuple) else tuple(dim)
            for op in ("sum", "max", "min"):
                got = getattr(x, op)(dim)
                if op == "sum":
                    want = f64(ref).sum(axis=axis) if dt.is_float else ref.astype(np.int64).sum(axis=axis)
                    if not dt.is_float:  # integer sums are int64 (torch's rule) and exact
                        np.testing.assert_array_equal(got.numpy(), want)
                        same_as_cpu(got, xc.sum(dim))
                        continue
                    close(got, want, dt, scale=4)
                else:
                    want = getattr(np, op)(ref, axis=axis)
                    np.testing.assert_array_equal(f64(got.numpy()), f64(want))  # picks an element: exact
            if dim is None or isinstance(dim, int):
                for op in ("argmax", "argmin"):
                    got = getattr(x, op)(dim)
                    flat = ref.reshape(-1) if dim is None else ref
                    want = getattr(np, op)(f64(flat) if dt.is_float else flat, axis=None if dim is None else dim)
                    np.testing.assert_array_equal(got.numpy(), want)
                    same_as_cpu(got, getattr(xc, op)(dim))


@pytest.mark.parametrize("dt", [em.float32, em.float16, em.int64, em.uint8])
def test_reductions_long_rows_columns_and_nan(device, dt, rng):
    # one long row (two passes on Metal), a tall column reduction, NaN and ties for arg*
    x = rng.standard_normal(70001).astype(np.float32) * 4
    x = x.astype(npdt(dt)) if dt.is_float else (np.abs(x) * 10).astype(npdt(dt))
    t = em.tensor(x, device=device)
    if dt.is_float:
        close(t.sum(), f64(x).sum(), dt, scale=50)
    else:
        assert t.sum().item() == int(x.astype(np.int64).sum())
    assert t.argmax().item() == int(np.argmax(x)) and t.argmin().item() == int(np.argmin(x))
    assert t.max().item() == x.max() and t.min().item() == x.min()
    c = rng.standard_normal((900, 37)).astype(npdt(dt)) if dt.is_float else rng.integers(0, 50, (900, 37)).astype(
        npdt(dt))
    tc = em.tensor(c, device=device)
    if dt.is_float:
        close(tc.sum(0), f64(c).sum(0), dt, scale=20)
    else:
        np.testing.assert_array_equal(tc.sum(0).numpy(), c.astype(np.int64).sum(0))
    np.testing.assert_array_equal(tc.argmax(0).numpy(), np.argmax(c, 0))
    np.testing.assert_array_equal(f64(tc.max(0).numpy()), f64(c.max(0)))
    if dt.is_float:
        c[5, 3] = c[400, 3] = np.nan
        tc = em.tensor(c, device=device)
        assert np.isnan(tc.max(0).numpy()[3]) and tc.argmax(0).numpy()[3] == 5 and tc.argmin(0).numpy()[3] == 5


def test_reduce_over_an_empty_dim_and_of_an_empty_tensor(device):
    x = em.zeros((3, 0, 2), device=device)
    np.testing.assert_array_equal(x.sum(1).numpy(), np.zeros((3, 2), np.float32))
    assert x.sum(0).shape == (0, 2)
    expect_error(lambda: x.max(1), "max")


# ------------------------------------------------------------------------------------------ matmul

MM_CASES = [  # (a shape, b shape, transpose a's last two dims in storage, same for b)
    ((5, 7), (7, 3), False, False), ((70, 33), (33, 65), True, False), ((2, 3, 8, 9), (9, 4), False, True),
    ((4, 1, 6, 5), (3, 5, 2), True, True), ((9,), (9, 4), False, False), ((3, 6, 4), (4,), False, False),
    ((1, 16), (16, 130), False, True),
]


def operand(rng, shape, dt, transposed, device):
    if len(shape) < 2 or not transposed:
        return make_view(rng, shape, dt, "contiguous", device=device, lo=-2, hi=2)
    base_shape = shape[:-2] + (shape[-1], shape[-2])
    t, ref = make_view(rng, base_shape, dt, "contiguous", device=device, lo=-2, hi=2)
    return t.transpose(-1, -2), np.swapaxes(ref, -1, -2)


@pytest.mark.parametrize("case", range(len(MM_CASES)))
def test_matmul_broadcast_batches_and_transposed_views(device, case, rng):
    sa, sb, ta, tb = MM_CASES[case]
    for dt in dtypes_of(device):
        a, ra = operand(rng, sa, dt, ta, device)
        b, rb = operand(rng, sb, dt, tb, device)
        got = a @ b
        if dt.is_float:
            want = np.matmul(f64(ra), f64(rb))
            close(got, want, dt, scale=4 * max(1, sa[-1] ** 0.5))
        else:
            want = np.matmul(ra.astype(np.uint64), rb.astype(np.uint64)).astype(npdt(dt))  # wraps like the CPU
            np.testing.assert_array_equal(got.numpy(), want)
            same_as_cpu(got, cpu_copy(a) @ cpu_copy(b))


def test_matmul_errors(device):
    a, b = em.zeros((2, 3), device=device), em.zeros((4, 5), device=device)
    expect_error(lambda: a @ b, "matmul")
    expect_error(lambda: a @ em.zeros((3, 2), dtype=em.float16, device=device), "matmul")


# ------------------------------------------------------------------------------------------ indexing

IDX_DTYPES = [em.int64, em.uint32, em.uint8]


def ids_tensor(values, idt, device):
    return em.tensor(np.asarray(values).astype(npdt(idt)), device=device)


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped", "offset"])
def test_index_select_gather_every_dtype(device, kind, rng):
    for dt in dtypes_of(device):
        x, ref = make_view(rng, (5, 6, 4), dt, kind, device=device)
        for dim in range(3):
            for idt in IDX_DTYPES:
                n = ref.shape[dim]
                ids = rng.integers(0, n, 7)
                got = x.index_select(ids_tensor(ids, idt, device), dim)
                np.testing.assert_array_equal(got.numpy(), np.take(ref, ids, axis=dim))
                ishape = list(ref.shape)
                ishape[dim] = 3
                g = rng.integers(0, n, ishape)
                got = x.gather(ids_tensor(g, idt, device), dim)
                np.testing.assert_array_equal(got.numpy(), np.take_along_axis(ref, g, axis=dim))
        neg = x.index_select(ids_tensor([-1, 0, -5], em.int64, device), 0)  # negative: from the end
        np.testing.assert_array_equal(neg.numpy(), ref[[4, 0, 0]])


def add_like_cpu(a, b):
    """a + b as the CPU adds into a destination: floats through float32 with one rounding per add (f64 in
    f64), integers wrapping like the dtype."""
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(over="ignore"):
        if a.dtype.kind == "f" or a.dtype == npdt(em.bfloat16):
            wide = np.float64 if a.dtype == np.float64 else np.float32
            return (a.astype(wide) + b.astype(wide)).astype(a.dtype)
        return a + b


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "narrowed", "offset"])
def test_index_add_scatter_add_match_the_cpu_bit_for_bit(device, kind, rng):
    for dt in dtypes_of(device):
        x, ref = make_view(rng, (6, 5, 4), dt, kind, device=device)
        xc = cpu_copy(x)
        for dim in range(3):
            n = ref.shape[dim]
            ids = rng.integers(0, n, 9)  # repeated indices add up in order
            sshape = list(ref.shape)
            sshape[dim] = 9
            src, sref = make_view(rng, sshape, dt, kind, device=device)
            got = x.index_add(ids_tensor(ids, em.int64, device), src, dim)
            want = np.array(ref)
            for j, i in enumerate(ids):
                sl = (slice(None),) * dim
                want[sl + (i,)] = add_like_cpu(want[sl + (i,)], sref[sl + (j,)])
            np.testing.assert_array_equal(got.numpy(), want)
            same_as_cpu(got, xc.index_add(ids_tensor(ids, em.int64, "cpu"), cpu_copy(src), dim))
            g = rng.integers(0, n, sshape)
            got = x.scatter_add(ids_tensor(g, em.uint32, device), src, dim)
            same_as_cpu(got, xc.scatter_add(ids_tensor(g, em.uint32, "cpu"), cpu_copy(src), dim))
            want = np.array(ref)
            for e in np.ndindex(*sshape):
                at = list(e)
                at[dim] = g[e]
                want[tuple(at)] = add_like_cpu(want[tuple(at)], sref[e])
            np.testing.assert_array_equal(got.numpy(), want)


def test_setitem_with_index_tensor_last_repeat_wins(device, rng):
    for dt in dtypes_of(device):
        x, ref = make_view(rng, (7, 3), dt, "contiguous", device=device)
        v, vref = make_view(rng, (4, 3), dt, "contiguous", device=device)
        ids = np.array([5, 1, 5, 0])
        x[ids_tensor(ids, em.int64, device)] = v
        want = ref.copy()
        for j, i in enumerate(ids):
            want[i] = vref[j]  # in order: row 5 keeps the third value row
        np.testing.assert_array_equal(x.numpy(), want)


def test_bad_indices_raise_before_any_write(device):
    x = em.tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3), device=device)
    before = x.numpy().copy()
    bad = em.tensor(np.array([1, 7, 2]), device=device)
    e = expect_error(lambda: x.index_select(bad, 0), "index_select", em.IndexOutOfRange)
    assert "index 7 out of range for a dim of size 4" in str(e)
    expect_error(lambda: x.gather(em.tensor(np.array([[0, 0, -9]]), device=device), 0), "gather", em.IndexOutOfRange)
    expect_error(lambda: x.index_add(bad, em.ones((3, 3), device=device), 0), "index_add", em.IndexOutOfRange)

    def assign():
        x[bad] = em.ones((3, 3), device=device)

    expect_error(assign, "setitem", em.IndexOutOfRange)
    np.testing.assert_array_equal(x.numpy(), before)  # nothing was written
    if not on_cpu(device):  # indices and operands must live on the tensor's device
        expect_error(lambda: x.index_select(em.tensor(np.array([0]), device="cpu"), 0), "index_select", em.DeviceError)
        expect_error(lambda: x @ em.ones((3, 2), device="cpu"), "matmul", em.DeviceError)
        np.testing.assert_array_equal(x.numpy(), before)


def test_large_index_select_walks_the_whole_output(device, rng):
    # more elements than the launchers' grid: every thread takes several
    x = rng.standard_normal((1300, 1000)).astype(np.float32)
    ids = rng.integers(0, 1300, 1300)
    got = em.tensor(x, device=device).index_select(em.tensor(ids, device=device), 0)
    np.testing.assert_array_equal(got.numpy(), x[ids])


# ------------------------------------------------------------------------------------------ convolution


@pytest.mark.parametrize("dt", [em.float32, em.float16, em.bfloat16])
def test_conv2d_unfold_fold(device, dt, rng):
    x, xr = make_view(rng, (2, 3, 9, 8), dt, "transposed", device=device)
    w, wr = make_view(rng, (4, 3, 3, 2), dt, "contiguous", device=device)
    b, br = make_view(rng, (4,), dt, "contiguous", device=device)
    got = em.nn.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2))
    want = torch.nn.functional.conv2d(torch.from_numpy(f64(xr)), torch.from_numpy(f64(wr)), torch.from_numpy(f64(br)),
                                      stride=(2, 1), padding=1, dilation=(1, 2)).numpy()
    close(got, want, dt, scale=8)
    cols = em.nn.unfold(x, (3, 2), padding=(1, 0), stride=2)
    same_as_cpu(cols, em.nn.unfold(cpu_copy(x), (3, 2), padding=(1, 0), stride=2))
    back = em.nn.fold(cols, (9, 8), (3, 2), padding=(1, 0), stride=2)
    same_as_cpu(back, em.nn.fold(cpu_copy(cols), (9, 8), (3, 2), padding=(1, 0), stride=2))


# ------------------------------------------------------------------------------------------ autograd


def test_gradients_match_the_cpu(device, rng):
    # the backward rules of these ops are built from the same family (matmul, index_add, gather, fold)
    a0, b0 = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    x0 = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    ids0 = np.array([2, 0, 2, 1])
    gids0 = rng.integers(0, 3, (2, 3, 4))

    def grads(dev):
        a, b, x = em.Var(a0, device=dev), em.Var(b0, device=dev), em.Var(x0, device=dev)
        ids, gids = em.tensor(ids0, device=dev), em.tensor(gids0, device=dev)
        out = [(a @ b).sum().backward(), a.index_select(ids, 1).sum().backward(), a.gather(gids, 1).sum().backward(),
               em.nn.unfold(x, (2, 3), padding=1, stride=(1, 2)).sum().backward()]
        return [g[a].numpy() for g in out[:3]] + [out[0][b].numpy(), out[3][x].numpy()]

    for got, want in zip(grads(device), grads("cpu")):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want = grads("cpu")
    np.testing.assert_array_equal(want[1], np.stack([np.full((2, 4), c, np.float32) for c in (1, 1, 2)], 1))
