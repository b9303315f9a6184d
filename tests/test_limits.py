"""Size checks before any allocation (matmul, cat, index backward), the rank bound of 64, integer
arithmetic that wraps without undefined behaviour, and NaN through the vectorised exp/gelu/sin paths."""
import time

import numpy as np
import pytest

import ember as em

from conftest import FLOATS


def big_broadcast(shape):
    return em.ones(*([1] * len(shape))).broadcast_as(shape)


# The floats the device holds but float16 (float64 only where the device has it).
@pytest.mark.parametrize("dtype", [d for d in FLOATS if d is not em.float16])
def test_matmul_refuses_blas_sizes_before_copying(dtype):
    # Both operands are broadcast (no memory): refusing them must not first materialise 2 x 8 GiB.
    a = em.ones(1, 1, dtype=dtype).broadcast_as((1, 2**31 + 1))
    b = em.ones(1, 1, dtype=dtype).broadcast_as((2**31 + 1, 1))
    em.reset_peak_memory_stats()
    start, t0 = em.memory_stats()["peak_allocated_bytes"], time.perf_counter()
    with pytest.raises(em.UnsupportedOp, match=r"^\[matmul\] a dim of \(1, 2147483649\) @ \(2147483649, 1\)"):
        a @ b
    assert em.memory_stats()["peak_allocated_bytes"] - start < 2**20
    assert time.perf_counter() - t0 < 1.0


def test_matmul_uncountable_batch_refused_before_allocating():
    a = big_broadcast((2**32, 1, 1, 4))
    b = big_broadcast((1, 2**32, 4, 1))  # batch (2**32, 2**32): more elements than an int64 counts
    em.reset_peak_memory_stats()
    start = em.memory_stats()["peak_allocated_bytes"]  # what earlier tests of this process still hold
    with pytest.raises(em.ShapeError, match=r"^\[matmul\]"):
        a @ b
    assert em.memory_stats()["peak_allocated_bytes"] - start < 2**20


def test_matmul_view_with_a_row_stride_past_int32_is_computed():
    # Rows 2**31 elements apart: BLAS cannot take that leading dim, so the operand is read through a
    # compact copy (it used to be refused). np.zeros maps untouched pages: only two are written.
    # CPU BLAS over zero-copy host memory is the point, so the other operand is on the CPU too.
    arr = np.zeros(2**31 + 8, dtype=np.float32)
    arr[:3] = [1, 2, 3]
    arr[2**31 : 2**31 + 3] = [4, 5, 6]
    v = np.lib.stride_tricks.as_strided(arr, (2, 3), (2**31 * 4, 4))
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose((em.from_dlpack(v) @ em.tensor(w, device=em.cpu)).numpy(), np.array(v) @ w)


def test_cat_size_overflow_is_a_clean_error():
    a = big_broadcast((2**62, 1))
    with pytest.raises(em.ShapeError, match=r"^\[cat\]") as e:
        em.cat([a, a, a, a], 0)
    assert "-9223372036854775808" not in str(e.value)


def test_int64_sum_wraps_like_numpy():
    for vals in ([2**62, 2**62], [2**63 - 1, 1], [-(2**63), -1], [2**62] * 7):
        arr = np.array(vals, dtype=np.int64)
        with np.errstate(over="ignore"):
            want = int(arr.sum(dtype=np.int64))
        assert em.tensor(arr).sum().item() == want
        # the column path (kept dims innermost) and the few-long-rows path
        col = np.stack([arr, arr], axis=1)
        np.testing.assert_array_equal(em.tensor(col).sum(0).numpy(), col.sum(0))


def test_int64_add_sub_mul_wrap_like_numpy(rng):
    a = rng.integers(-(2**63), 2**63 - 1, size=1000, dtype=np.int64)
    b = rng.integers(-(2**63), 2**63 - 1, size=1000, dtype=np.int64)
    ta, tb = em.tensor(a), em.tensor(b)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((ta + tb).numpy(), a + b)
        np.testing.assert_array_equal((ta - tb).numpy(), a - b)
        np.testing.assert_array_equal((ta * tb).numpy(), a * b)
        m = a.reshape(10, 100)
        np.testing.assert_array_equal((em.tensor(m) @ em.tensor(m.T)).numpy(), m @ m.T)


@pytest.mark.parametrize("op", ["exp", "gelu", "sin", "cos", "tanh", "erf", "silu", "sigmoid"])
def test_nan_and_huge_inputs_through_vector_math(op):
    # NaNs and huge values once went through an int conversion of NaN and a shift of a negative value
    # (undefined behaviour that UBSan reports in the sanitizer job); the results must be NaN and
    # the values numpy/torch give.
    import torch

    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 3e38, -3e38, 1e30, 0.5, -1e5, 80.0] * 40, dtype=np.float32)
    got = getattr(em.tensor(x), op)().numpy()
    assert np.isnan(got[0::10]).all() and np.isnan(got[1::10]).all()
    fn = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}.get(op) or getattr(torch, op)
    want = fn(torch.from_numpy(x)).numpy()
    finite = np.isfinite(x) & (np.abs(x) < 1e30 if op == "gelu" else True)  # torch's gelu overflows there
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_rank_bound_of_64():
    em.zeros(*([1] * 64))  # numpy's limit is fine
    for make in (lambda: em.zeros(*([1] * 65)), lambda: em.Layout([1] * 65, [1] * 65, 0),
                 lambda: em.Layout.contiguous([1] * 65), lambda: em.zeros(*([1] * 64)).unsqueeze(0),
                 lambda: em.zeros(*([1] * 64)).reshape(*([1] * 65)),
                 lambda: em.zeros(*([1] * 64)).broadcast_as((1,) * 65)):
        with pytest.raises(em.ShapeError, match=r"^\[\w+\] .*at most 64"):
            make()


@pytest.mark.cpu_only
def test_custom_op_endless_shape_iterator_is_refused_fast():
    import itertools

    class Endless(em.CustomOp1):
        name = "endless"

        def cpu_fwd(self, storage, layout):
            return em.CpuStorage.from_numpy(storage.as_numpy(layout).copy()), itertools.repeat(1)

    t0 = time.perf_counter()
    with pytest.raises(em.ShapeError, match=r"^\[endless\] .*more than 64 dims"):
        em.ones(3).apply_op1(Endless())
    assert time.perf_counter() - t0 < 1.0

    class Long(em.CustomOp1):
        name = "long_shape"

        def cpu_fwd(self, storage, layout):
            return em.CpuStorage.from_numpy(np.zeros(1, np.float32)), (1,) * 100

    with pytest.raises(em.ShapeError, match=r"^\[long_shape\] .*more than 64 dims"):
        em.ones(3).apply_op1(Long())


def test_index_backward_checks_before_allocating():
    from ember import _C

    src = em.ones(2, 3)
    ids = em.tensor(np.array([0, 1], dtype=np.float32))  # float indices: refused
    em.reset_peak_memory_stats()
    start = em.memory_stats()["peak_allocated_bytes"]
    with pytest.raises(em.DTypeError, match=r"^\[index_add\] indices must be"):
        _C.index_add_zeros([2**33, 3], ids._storage, ids._layout, src._storage, src._layout, 0)
    assert em.memory_stats()["peak_allocated_bytes"] - start < 2**20
