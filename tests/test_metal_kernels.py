"""ember's own Metal kernels (metal/*.metal, embedded in the library) run under the MSL emulator against numpy:
elementwise unary and binary (contiguous and strided / broadcast); the reductions are in
test_metal_reduce_index.py."""

import ml_dtypes
import numpy as np
import pytest
import torch

from ember import _C

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# tolerance of a result computed in float and rounded once to the dtype
RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def run(file, name, args, grid, group):
    _C._metal_emu_run(_C._metal_source(file), name, args, [grid], [group], label=file)


def u32(v):
    return np.uint32(v).tobytes()


def i64(v):
    return np.int64(v).tobytes()


def test_kernel_sources_are_embedded():
    names = _C._metal_sources()
    for f in ("unary.metal", "binary.metal", "reduce.metal", "msl_cpu.h", "msl_abi.h"):
        assert f in names
    assert "kernel void unary_contig" in _C._metal_source("unary.metal")
    assert _C._metal_source("absent.metal") is None


UNARY_REF = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqrt": np.sqrt,
    "sqr": np.square, "abs": np.abs, "neg": np.negative, "recip": np.reciprocal,
    "relu": lambda x: np.maximum(x, 0), "gelu": lambda x: torch.nn.functional.gelu(torch.from_numpy(x)).numpy(),
    "silu": lambda x: x / (1 + np.exp(-x)), "erf": lambda x: torch.special.erf(torch.from_numpy(x)).numpy(),
    "ceil": np.ceil, "floor": np.floor, "round": np.rint, "sign": np.sign, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


def unary_inputs(rng, op, dt, shape):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    if op in ("log", "sqrt"):
        x = np.abs(x) + 0.05
    if op == "round":
        x = np.round(x * 2) / 2  # exact halves: ties go to even
    return x.astype(dt)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(UNARY_REF))
def test_unary_contiguous(op, dtype):
    rng = np.random.default_rng(abs(hash((op, dtype))) % 2**32)
    n = int(rng.integers(1, 3000))
    dt = DTYPES[dtype]
    x = unary_inputs(rng, op, dt, (n,))
    out = np.zeros(n, dt)
    run("unary.metal", f"unary_contig_{op}_{dtype}", [x, out, u32(n)], -(-n // 4), 64)
    with np.errstate(over="ignore"):  # exp past the f16 range is inf on both sides
        want = UNARY_REF[op](x.astype(np.float64)).astype(dt)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=RTOL[dtype], atol=1e-6)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["exp", "gelu", "neg", "round", "erf"])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (4, 1, 6), (2, 3, 4, 5)])
def test_unary_strided(op, dtype, shape):
    rng = np.random.default_rng(len(shape) * 7 + len(op))
    dt = DTYPES[dtype]
    base = unary_inputs(rng, op, dt, [s * 2 + 1 for s in shape])
    view = base[tuple(slice(1, 1 + 2 * s, 2) for s in shape)][..., ::-1]  # a negative stride too
    view = view.transpose(tuple(reversed(range(view.ndim))))
    isz = base.itemsize
    strides = np.array([s // isz for s in view.strides], np.int64)
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz
    n = view.size
    out = np.zeros(n, dt)
    shp = np.array(view.shape, np.int64)
    run("unary.metal", f"unary_strided_{op}_{dtype}",
        [base, out, u32(n), u32(view.ndim), shp, strides, i64(offset)], n, 32)
    with np.errstate(over="ignore"):
        want = UNARY_REF[op](np.ascontiguousarray(view).astype(np.float64)).astype(dt).reshape(-1)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=RTOL[dtype], atol=1e-6)


BINARY_REF = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "pow": np.power, "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
EXACT = {"add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"}


def binary_inputs(rng, op, dt, sa, sb):
    a = (rng.standard_normal(sa) * 4).astype(np.float32)
    b = (rng.standard_normal(sb) * 4).astype(np.float32)
    if op == "pow":
        a = np.abs(a) + 0.1
        b = b / 4
    if op in ("eq", "ne", "le", "ge"):
        b.flat[: b.size // 2] = a.flat[: b.size // 2] if a.size >= b.size // 2 else b.flat[: b.size // 2]
    if op in ("maximum", "minimum") and a.size > 2:
        a.flat[1] = np.nan  # NaN propagates
    return a.astype(dt), b.astype(dt)


def binary_want(op, a, b, dt):
    with np.errstate(all="ignore"):
        if op in EXACT:  # numpy computes halves in float and rounds once, as the kernel does
            r = BINARY_REF[op](a, b)
        else:
            r = BINARY_REF[op](a.astype(np.float64), b.astype(np.float64))
    return r.astype(np.uint8) if r.dtype == bool else r.astype(dt)


def check_binary(op, dtype, out, want):
    if op in EXACT:
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=RTOL[dtype] * 2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(BINARY_REF))
def test_binary_contiguous(op, dtype):
    rng = np.random.default_rng(abs(hash((op, dtype, 1))) % 2**32)
    n = int(rng.integers(1, 2500))
    dt = DTYPES[dtype]
    a, b = binary_inputs(rng, op, dt, (n,), (n,))
    want = binary_want(op, a, b, dt)
    out = np.zeros(n, want.dtype)
    run("binary.metal", f"binary_contig_{op}_{dtype}", [a, b, out, u32(n)], -(-n // 4), 256)
    check_binary(op, dtype, out, want)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["add", "div", "maximum", "lt", "pow"])
@pytest.mark.parametrize("sa,sb", [((3, 1, 5), (4, 5)), ((1,), (6, 7)), ((2, 3, 4), (2, 3, 4)), ((5, 1), (1, 9))])
def test_binary_broadcast_strides(op, dtype, sa, sb):
    rng = np.random.default_rng(len(sa) * 31 + len(sb))
    dt = DTYPES[dtype]
    a, b = binary_inputs(rng, op, dt, sa, sb)
    b = np.ascontiguousarray(np.flip(np.ascontiguousarray(b), -1))[..., ::-1]  # a view with negative strides
    shape = np.broadcast_shapes(a.shape, b.shape)
    av, bv = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    want = binary_want(op, np.ascontiguousarray(av), np.ascontiguousarray(bv), dt).reshape(-1)
    bbase = b.base if b.base is not None else b
    isz = a.itemsize
    offs = np.array([0, (bv.__array_interface__["data"][0] - bbase.__array_interface__["data"][0]) // isz], np.int64)
    out = np.zeros(want.size, want.dtype)
    args = [a, np.ascontiguousarray(bbase), out, u32(out.size), u32(len(shape)), np.array(shape, np.int64),
            np.array([s // isz for s in av.strides], np.int64), np.array([s // isz for s in bv.strides], np.int64),
            offs]
    run("binary.metal", f"binary_strided_{op}_{dtype}", args, out.size, 64)
    check_binary(op, dtype, out, want)
