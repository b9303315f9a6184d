"""ember's own Metal kernels (metal/*.metal, embedded in the library) run under the MSL emulator against numpy:
the embedded sources, row reductions (short and long rows); the elementwise kernels are in
test_metal_elementwise.py."""
import math

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import _C

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# tolerance of a result computed in float and rounded once to the dtype
RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def run(file, name, args, grid, group):
    _C._metal_emu_run(_C._metal_source(file), name, args, [grid], [group], label=file)


def u32(v):
    return np.uint32(v).tobytes()


def test_kernel_sources_are_embedded():
    names = _C._metal_sources()
    for f in ("unary.metal", "binary.metal", "reduce.metal", "msl_cpu.h", "msl_abi.h"):
        assert f in names
    assert "kernel void unary_contig" in _C._metal_source("unary.metal")
    assert _C._metal_source("absent.metal") is None


def reduce_want(op, x):
    if op == "sum":
        return x.astype(np.float64).sum(-1)
    return (np.max if op == "max" else np.min)(x.astype(np.float64), axis=-1)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (37, 5), (9, 100), (3, 1000)])
def test_row_reduce_short_rows_one_simdgroup_each(op, dtype, rows, cols):
    rng = np.random.default_rng(rows * cols)
    dt = DTYPES[dtype]
    x = rng.standard_normal((rows, cols)).astype(np.float32).astype(dt)
    if op != "sum" and rows > 2:
        x[2, cols // 2] = np.nan
    out = np.zeros(rows, dt)
    grid = -(-rows * 32 // 256) * 256  # whole threadgroups of 8 simdgroups; the rows past the end idle
    run("reduce.metal", f"reduce_row_simd_{op}_{dtype}", [x, out, u32(rows), u32(cols)], grid, 256)
    want = reduce_want(op, x)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(dt).astype(np.float64), rtol=RTOL[dtype],
                               atol=1e-5 * math.sqrt(cols))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("rows,cols,group", [(2, 4099, 256), (3, 20000, 1024), (5, 33, 64), (1, 7, 32)])
def test_row_reduce_long_rows_looped(op, dtype, rows, cols, group):
    rng = np.random.default_rng(cols + group)
    dt = DTYPES[dtype]
    x = rng.standard_normal((rows, cols)).astype(np.float32).astype(dt)
    if op != "sum":
        x[0, -1] = np.nan  # in the tail that the 4-wide steps leave
    out = np.zeros(rows, dt)
    run("reduce.metal", f"reduce_row_looped_{op}_{dtype}", [x, out, u32(cols)], rows * group, group)
    want = reduce_want(op, x)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(dt).astype(np.float64), rtol=RTOL[dtype],
                               atol=1e-5 * math.sqrt(cols))


def test_reduce_kernel_out_of_bounds_is_caught():
    # a row count larger than the buffer holds: the emulator stops at the first read past the end
    x = np.ones((4, 64), np.float32)
    out = np.zeros(8, np.float32)
    with pytest.raises(em.IndexOutOfRange, match=r"kernel 'reduce_row_looped_sum_float32'.*buffer\(0\) at byte offset 1024"):
        run("reduce.metal", "reduce_row_looped_sum_float32", [x, out, u32(64)], 8 * 64, 64)
