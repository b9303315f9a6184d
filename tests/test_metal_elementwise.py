"""ember's elementwise Metal kernels (metal/unary.metal, metal/binary.metal) under the MSL emulator against
numpy, torch and ember's CPU backend: every op and dtype, contiguous, scalar-broadcast and strided kernels,
edge values (inf, nan, -0.0, integer extremes)."""
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

import ember as em
from ember import _C_testing as _T

ROOT = Path(__file__).resolve().parents[1]
FLOATS = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
INTS = {"int64": np.int64, "uint32": np.uint32, "uint8": np.uint8}
DTYPES = {**FLOATS, **INTS}
# tolerance of a result computed in float and rounded once to the dtype
RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
FLOAT_EDGES = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 1e-30, 65504.0, -70000.0]


def run(file, name, args, grid, group):
    """Runs kernel `name` of metal/<file> (read from the tree, so no build is needed) under the emulator."""
    src = (ROOT / "metal" / file).read_text()
    _T.metal_emu_run(src, name, args, [grid], [group], label=file)


def u32(v):
    return np.uint32(v).tobytes()


def i64(v):
    return np.int64(v).tobytes()


def fparams(p0=0.0, p1=0.0):
    return np.array([p0, p1], np.float32).tobytes()


# IntUnaryParams (metal/unary.metal): lo_thr, hi_thr, lo_val, hi_val (long), mul, add, mul_bits, add_bits
# (ulong), flags, pad (uint)
LO_ALWAYS, LO_NEVER, HI_ALWAYS, HI_NEVER, AFFINE_EXACT = 1, 2, 4, 8, 16


def iparams(lo_thr=0, hi_thr=0, lo_val=0, hi_val=0, mul=0, add=0, mul_f=0.0, add_f=0.0, flags=0):
    bits = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in (mul_f, add_f)]
    return struct.pack("<4q4Q2I", lo_thr, hi_thr, lo_val, hi_val, mul % 2**64, add % 2**64, *bits, flags, 0)


def assert_close(out, want, dtype):
    if dtype in INTS or want.dtype == np.uint8:
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=RTOL[dtype], atol=1e-6)


def strided_view(base, shape, rng):
    """A view of base with the given shape: every other element, the last dim reversed, dims permuted; its
    strides and offset in elements."""
    view = base[tuple(slice(1, 1 + 2 * s, 2) for s in shape)][..., ::-1]
    view = view.transpose(tuple(rng.permutation(view.ndim)))
    isz = base.itemsize
    strides = np.array([s // isz for s in view.strides], np.int64)
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz
    return view, strides, offset


# --- unary ---------------------------------------------------------------------------------------------
def _t(f):
    return lambda x: f(torch.from_numpy(x)).numpy()


UNARY_FLOAT = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqrt": np.sqrt,
    "sqr": np.square, "abs": np.abs, "neg": np.negative, "recip": np.reciprocal,
    "relu": lambda x: np.where(x < 0, 0, x), "gelu": _t(torch.nn.functional.gelu),
    "silu": lambda x: x / (1 + np.exp(-x)), "erf": _t(torch.special.erf), "ceil": np.ceil, "floor": np.floor,
    "round": np.rint, "sign": np.sign, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "log1p": np.log1p,
    "expm1": np.expm1, "rsqrt": lambda x: 1 / np.sqrt(x), "log2": np.log2, "log10": np.log10, "tan": np.tan,
    "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "trunc": np.trunc,
}
POSITIVE = {"log", "sqrt", "log2", "log10", "rsqrt"}


def float_inputs(rng, op, dt, shape, edges=True):
    x = rng.standard_normal(shape) * 3
    if op in POSITIVE:
        x = np.abs(x) + 0.05
    elif op == "log1p":
        x = np.abs(x) - 0.9
    elif op in ("asin", "acos"):
        x = np.tanh(x)
    elif op in ("round", "trunc", "ceil", "floor"):
        x = np.round(x * 2) / 2  # exact halves: ties go to even
    elif op in ("expm1", "log1p", "tan"):
        x.flat[::3] *= 1e-4  # near 0, where the corrections matter
    with np.errstate(over="ignore"):  # -70000 is -inf in float16
        x = x.astype(dt)
        if edges and x.size >= len(FLOAT_EDGES):
            x.flat[: len(FLOAT_EDGES)] = np.array(FLOAT_EDGES).astype(dt)
    return x


def unary_float_want(op, x, dt, p0=0.0, p1=0.0):
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "affine":
            r = x64 * np.float32(p0) + np.float32(p1)
        elif op == "powf":  # ** 0.5 is sqrt, as on the CPU: (-inf) ** 0.5 is NaN, (-0) ** 0.5 is -0
            r = np.sqrt(x64) if p0 == 0.5 else np.power(x64, np.float64(np.float32(p0)))
        elif op == "clamp":
            r = np.minimum(np.maximum(x64, np.float32(p0)), np.float32(p1))
        else:
            r = UNARY_FLOAT[op](x64)
        return r.astype(dt)


@pytest.mark.parametrize("dtype", list(FLOATS))
@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_float_contiguous_and_strided(op, dtype, rng):
    dt = FLOATS[dtype]
    n = int(rng.integers(1, 3000))
    x = float_inputs(rng, op, dt, (n,))
    out = np.zeros(n, dt)
    run("unary.metal", f"unary_contig_{op}_{dtype}", [x, out, u32(n), fparams()], -(-n // 4), 64)
    want = unary_float_want(op, x, dt)
    assert_close(out, want, dtype)
    if op not in ("neg", "abs", "sign"):  # the sign of a zero result as numpy (these follow the CPU, below)
        zero = (want == 0) & (out == 0)
        np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(want[zero]))

    shape = tuple(int(s) for s in rng.integers(1, 6, size=int(rng.integers(1, 5))))
    base = float_inputs(rng, op, dt, [2 * s + 1 for s in shape])
    view, strides, offset = strided_view(base, shape, rng)
    m = view.size
    out = np.zeros(m, dt)
    run("unary.metal", f"unary_strided_{op}_{dtype}",
        [base, out, u32(m), fparams(), u32(view.ndim), np.array(view.shape, np.uint32), strides, i64(offset)], m, 32)
    assert_close(out, unary_float_want(op, np.ascontiguousarray(view), dt).reshape(-1), dtype)


def test_unary_float_edge_values_match_the_cpu_functors():
    # the CPU's expressions: 0 - x and compares with 0, so signed zeros come out as the CPU gives them
    x = np.array([-0.0, 0.0, np.nan, -np.inf, np.inf, -1.5], np.float32)
    for op, want in [("neg", [0.0, 0.0, np.nan, np.inf, -np.inf, 1.5]), ("abs", [-0.0, 0.0, np.nan, np.inf, np.inf, 1.5]),
                     ("relu", [-0.0, 0.0, np.nan, 0.0, np.inf, 0.0]), ("sign", [-0.0, 0.0, np.nan, -1.0, 1.0, -1.0])]:
        out = np.zeros_like(x)
        run("unary.metal", f"unary_contig_{op}_float32", [x, out, u32(6), fparams()], 2, 32)
        cpu = getattr(em.tensor(x, device="cpu"), op)().numpy()
        np.testing.assert_array_equal(np.signbit(out), np.signbit(cpu))
        np.testing.assert_array_equal(out, np.array(want, np.float32))



def test_unary_erf_and_gelu_within_a_few_ulp_also_far_left():
    # the CPU's bounds (test_elementwise.py): erf within 3 ulp; gelu = x * Phi(x) within 8 ulp out to
    # x = -13, where 0.5 * x * (1 + erf(x / sqrt(2))) has lost every digit
    import math

    xs = np.concatenate([np.linspace(-13, 13, 40001), np.linspace(-2, 2, 40001), -np.geomspace(1e-30, 13, 2001)])
    xs = xs.astype(np.float32)
    xd = xs.astype(np.float64)
    for op, ref, bound in (("erf", [math.erf(v) for v in xd], 3),
                           ("gelu", [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xd], 8)):
        ref = np.array(ref)
        out = np.zeros_like(xs)
        run("unary.metal", f"unary_contig_{op}_float32", [xs, out, u32(xs.size), fparams()], -(-xs.size // 4), 256)
        ulp = np.abs(out.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        assert ulp.max() <= bound, (op, ulp.max(), xs[np.argmax(ulp)])


@pytest.mark.parametrize("dtype", list(FLOATS))
@pytest.mark.parametrize("op,p0,p1", [
    ("affine", 2.0, 1.0), ("affine", -0.5, 3.25), ("affine", 0.0, -7.0), ("powf", 2.0, 0.0), ("powf", 0.5, 0.0),
    ("powf", 3.0, 0.0), ("powf", -1.5, 0.0), ("powf", 0.0, 0.0), ("clamp", -1.0, 2.0), ("clamp", 1.0, -1.0),
    ("clamp", -np.inf, 0.5), ("clamp", -2.0, np.inf)])
def test_unary_parametrised_float(op, p0, p1, dtype, rng):
    dt = FLOATS[dtype]
    n = int(rng.integers(20, 2000))
    x = float_inputs(rng, op, dt, (n,))
    if op == "powf" and p0 not in (2.0, 3.0, 0.0, 0.5):
        x = np.abs(x)
    out = np.zeros(n, dt)
    run("unary.metal", f"unary_contig_{op}_{dtype}", [x, out, u32(n), fparams(p0, p1)], -(-n // 4), 64)
    assert_close(out, unary_float_want(op, x, dt, p0, p1), dtype)
    # the CPU is the specification, also at the edge values
    cpu = em.tensor(x, device="cpu")
    cpu = (cpu.affine(p0, p1) if op == "affine" else cpu.powf(p0) if op == "powf" else cpu.clamp(p0, p1)).numpy()
    assert_close(out, cpu, dtype)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(cpu))


def int_inputs(rng, dt, shape):
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=object)
    if info.min < 0:
        edges = np.concatenate([edges, np.array([-1, -2], dtype=object)])
    k = min(x.size, edges.size)
    x.flat[:k] = edges[:k].astype(dt)
    x.flat[k : 2 * k] = rng.integers(-5 if info.min < 0 else 0, 6, size=min(k, max(0, x.size - k)))
    return x


UNARY_INT = {
    "sqr": lambda x: x * x, "abs": np.abs, "neg": np.negative, "relu": lambda x: np.where(x < 0, 0, x).astype(x.dtype),
    "sign": np.sign, "ceil": lambda x: x, "floor": lambda x: x, "round": lambda x: x, "trunc": lambda x: x,
}


@pytest.mark.parametrize("dtype", list(INTS))
@pytest.mark.parametrize("op", list(UNARY_INT))
def test_unary_int_contiguous_and_strided(op, dtype, rng):
    if op == "neg" and dtype != "int64":
        with pytest.raises(em.EmberError, match="unary_contig_neg_" + dtype):  # refused, as on the CPU
            run("unary.metal", f"unary_contig_neg_{dtype}", [np.zeros(1, INTS[dtype])] * 2 + [u32(1), iparams()], 1, 1)
        return
    dt = INTS[dtype]
    n = int(rng.integers(10, 3000))
    x = int_inputs(rng, dt, (n,))
    out = np.zeros(n, dt)
    run("unary.metal", f"unary_contig_{op}_{dtype}", [x, out, u32(n), iparams()], -(-n // 4), 64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, UNARY_INT[op](x))
    np.testing.assert_array_equal(out, getattr(em.tensor(x, device="cpu"), op)().numpy())

    shape = (3, 4, 5)
    base = int_inputs(rng, dt, (7, 9, 11))
    view, strides, offset = strided_view(base, shape, rng)
    out = np.zeros(view.size, dt)
    run("unary.metal", f"unary_strided_{op}_{dtype}",
        [base, out, u32(view.size), iparams(), u32(3), np.array(view.shape, np.uint32), strides,
         i64(offset)], view.size, 32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, UNARY_INT[op](np.ascontiguousarray(view)).reshape(-1))


@pytest.mark.parametrize("dtype", list(INTS))
@pytest.mark.parametrize("lo,hi,flags", [(0, 10, 0), (-3, 2**40, 0), (5, 0, 0), (0, 0, LO_NEVER | HI_NEVER),
                                         (0, 7, LO_ALWAYS), (3, 0, HI_ALWAYS), (-2**63, 2**63 - 1, 0)])
def test_unary_int_clamp_thresholds(lo, hi, flags, dtype, rng):
    # the kernel's contract: x < lo_thr (or always / never) gives lo_val, else x > hi_thr gives hi_val
    dt = INTS[dtype]
    info = np.iinfo(dt)
    x = int_inputs(rng, dt, (500,))
    lo_val, hi_val = int(np.clip(lo, info.min, info.max)), int(np.clip(hi, info.min, info.max))
    out = np.zeros_like(x)
    run("unary.metal", f"unary_contig_clamp_{dtype}",
        [x, out, u32(x.size), iparams(lo_thr=lo, hi_thr=hi, lo_val=lo_val, hi_val=hi_val, flags=flags)], 125, 64)
    xo = x.astype(object)
    lt = np.full(x.shape, True) if flags & LO_ALWAYS else np.full(x.shape, False) if flags & LO_NEVER else xo < lo
    gt = np.full(x.shape, True) if flags & HI_ALWAYS else np.full(x.shape, False) if flags & HI_NEVER else xo > hi
    want = np.where(lt, lo_val, np.where(gt, hi_val, xo)).astype(dt)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", list(INTS))
def test_unary_int_affine_exact_parameters_wrap(dtype, rng):
    dt = INTS[dtype]
    x = int_inputs(rng, dt, (999,))
    for mul, add in [(3, -7), (-1, 0), (2**40 + 1, 2**62), (0, 5), (-(2**62), -1)]:
        out = np.zeros_like(x)
        run("unary.metal", f"unary_contig_affine_{dtype}",
            [x, out, u32(x.size), iparams(mul=mul, add=add, flags=AFFINE_EXACT)], 250, 64)
        want = ((x.astype(np.uint64) * np.uint64(mul % 2**64)) + np.uint64(add % 2**64)).astype(dt)
        np.testing.assert_array_equal(out, want)
        if abs(mul) < 9.2e18 and abs(add) < 9.2e18:
            np.testing.assert_array_equal(out, em.tensor(x, device="cpu").affine(float(mul), float(add)).numpy())


def cpu_double_to_int(d, dt):
    """The CPU's double -> integer conversion (cpp/dtype.h convert): truncation, 0 for NaN and outside
    (-9.3e18, 1.8e19), [9.2e18, 1.8e19) through uint64, below -2^63 INT64_MIN as x86 gives it."""
    out = []
    for v in d:
        if not np.isfinite(v) or v <= -9.3e18 or v >= 1.8e19:
            out.append(0)
        elif v < -(2.0**63):
            out.append(-(2**63))
        else:
            out.append(int(v))
    return (np.array(out, dtype=object) % 2**64).astype(np.uint64).astype(dt)


@pytest.mark.parametrize("dtype", list(INTS))
def test_unary_int_affine_fractional_parameters_follow_the_cpu_double(dtype, rng):
    # x * p0 + p1 in (software) double, each step rounded, then truncated: exactly as the CPU
    dt = INTS[dtype]
    x = int_inputs(rng, dt, (2000,))
    params = [(0.5, 0.0), (0.1, 0.0), (-0.3, 2.5), (1.0 / 3.0, -1e-3), (2.5e-10, 1e18), (1e-320, 0.999),
              (3.7, -9.2e18), (1.5, 1e19), (np.inf, 0.0), (np.nan, 1.0), (-np.inf, np.inf), (0.9999999999999999, 0.0),
              (1e300, 0.0), (-1.0000000000000002, 0.5), (float(rng.standard_normal()), float(rng.standard_normal() * 1e6))]
    for p0, p1 in params:
        out = np.zeros_like(x)
        run("unary.metal", f"unary_contig_affine_{dtype}", [x, out, u32(x.size), iparams(mul_f=p0, add_f=p1)], 500, 64)
        with np.errstate(all="ignore"):
            d = x.astype(np.float64) * np.float64(p0) + np.float64(p1)
        np.testing.assert_array_equal(out, cpu_double_to_int(d, dt), err_msg=f"affine({p0}, {p1})")
        np.testing.assert_array_equal(out, em.tensor(x, device="cpu").affine(p0, p1).numpy(), err_msg=f"affine({p0}, {p1})")


def test_unary_strided_negative_strides_and_offsets_stay_in_bounds():
    # a view reading the buffer backwards from its last element, and a bad offset the emulator catches
    base = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    run("unary.metal", "unary_strided_neg_float32",
        [base, out, u32(12), fparams(), u32(2), np.array([3, 4], np.uint32), np.array([-4, -1], np.int64), i64(11)], 12, 8)
    np.testing.assert_array_equal(out, -base[::-1])
    with pytest.raises(em.IndexOutOfRange, match="unary_strided_neg_float32"):
        run("unary.metal", "unary_strided_neg_float32",
            [base, out, u32(12), fparams(), u32(2), np.array([3, 4], np.uint32), np.array([4, 1], np.int64), i64(1)], 12, 8)


# --- binary --------------------------------------------------------------------------------------------
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "pow": np.power, "floor_divide": np.floor_divide, "remainder": np.remainder,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}
CMP = {"eq", "ne", "lt", "le", "gt", "ge"}
INT_DIV_NUMPY = {"floor_divide", "remainder"}  # numpy's integer // and % are the CPU's (x // 0 = 0)


def binary_inputs(rng, op, dtype, sa, sb):
    dt = DTYPES[dtype]
    if dtype in INTS:
        a, b = int_inputs(rng, dt, sa), int_inputs(rng, dt, sb)
        if op in ("div", "floor_divide", "remainder") and b.size > 4:
            b.flat[::4] = rng.integers(1, 9, size=b.flat[::4].size)  # small divisors (and zeros, -1 from edges)
    else:
        a, b = rng.standard_normal(sa) * 4, rng.standard_normal(sb) * 4
        if op == "pow":
            a, b = np.abs(a) + 0.1, b / 4
            a.flat[::5] = -np.round(a.flat[::5])  # negative bases with integer exponents
            b.flat[::5] = np.round(b.flat[::5])
        with np.errstate(over="ignore"):
            a, b = a.astype(dt), b.astype(dt)
            edges = np.array(FLOAT_EDGES).astype(dt)
        k = edges.size
        if a.size >= k * k and b.size >= k * k:  # every pair of edge values
            a.flat[: k * k], b.flat[: k * k] = np.repeat(edges, k), np.tile(edges, k)
        elif a.size >= k:
            a.flat[:k] = edges
    if op in ("eq", "ne", "le", "ge") and a.size == b.size:
        b.flat[::3] = a.flat[::3]
    return a, b


def binary_want(op, dtype, a, b):
    dt = DTYPES[dtype]
    with np.errstate(all="ignore"):
        if op in CMP:
            return BINARY[op](a, b).astype(np.uint8)
        if dtype in INTS:
            if op in INT_DIV_NUMPY or op in ("add", "sub", "mul", "maximum", "minimum"):
                return BINARY[op](a, b).astype(dt)
            # div: truncation toward 0, x / 0 = 0, INT64_MIN / -1 wraps (the CPU's int_safe_div)
            ao, bo = np.broadcast_arrays(a.astype(object), b.astype(object))
            q = [0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(ao.flat, bo.flat)]
            return (np.array(q, dtype=object).reshape(ao.shape) % 2**64).astype(np.uint64).astype(dt)
        if op in ("floor_divide", "remainder"):  # numpy's float algorithm is the CPU's, run in float32
            return BINARY[op](a.astype(np.float32), b.astype(np.float32)).astype(dt)
        if op in ("pow",):
            return BINARY[op](a.astype(np.float64), b.astype(np.float64)).astype(dt)
        return BINARY[op](a.astype(np.float32), b.astype(np.float32)).astype(dt)


def binary_check(op, dtype, out, want):
    if op == "pow":
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=2 * RTOL[dtype], atol=1e-6)
    elif op in CMP or dtype in INTS:
        np.testing.assert_array_equal(out, want)
    else:  # one float op rounded once: exact (NaN where numpy has NaN), the sign of zeros too
        np.testing.assert_array_equal(out.astype(np.float64), want.astype(np.float64))
        np.testing.assert_array_equal(np.signbit(out), np.signbit(want))


def cpu_binary(op, a, b):
    """The same op on ember's CPU kernels (the specification; below the ops' true-division promotion and
    their refusal of an integer x // 0)."""
    from ember.tensor_type import BINARY as codes
    from ember.tensor_type import _broadcast_shape

    ta, tb = em.tensor(a, device="cpu"), em.tensor(b, device="cpu")
    s = em._C.binary(codes[op], ta._storage, ta._layout, tb._storage, tb._layout)
    return np.array(s.numpy()).reshape(_broadcast_shape(ta.shape, tb.shape))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_dense_and_scalar_kernels(op, dtype, rng):
    if op == "pow" and dtype in INTS:
        with pytest.raises(em.EmberError, match="binary_contig_pow_" + dtype):  # floats only, as on the CPU
            run("binary.metal", f"binary_contig_pow_{dtype}", [np.zeros(1, DTYPES[dtype])] * 3 + [u32(1)], 1, 1)
        return
    n = int(rng.integers(150, 2500))
    a, b = binary_inputs(rng, op, dtype, (n,), (n,))
    want = binary_want(op, dtype, a, b)
    out = np.zeros(n, want.dtype)
    run("binary.metal", f"binary_contig_{op}_{dtype}", [a, b, out, u32(n)], -(-n // 4), 256)
    binary_check(op, dtype, out, want)
    # one operand a single element, on either side
    for kind, sa, sb in (("rhs", (n,), (1,)), ("lhs", (1,), (n,))):
        for k in range(3):
            x, y = binary_inputs(rng, op, dtype, sa, sb)
            if k < 2 and dtype in FLOATS:
                (y if kind == "rhs" else x).flat[0] = [np.nan, -0.0][k]
            want = binary_want(op, dtype, x, y)
            out = np.zeros(n, want.dtype)
            run("binary.metal", f"binary_scalar_{kind}_{op}_{dtype}", [x, y, out, u32(n)], -(-n // 4), 64)
            binary_check(op, dtype, out, want)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcast_strided_kernel(op, dtype, rng):
    if op == "pow" and dtype in INTS:
        return  # no such kernel (test_binary_dense_and_scalar_kernels checks the refusal)
    for sa, sb in [((3, 1, 5), (4, 5)), ((1,), (6, 7)), ((2, 3, 4), (2, 3, 4)), ((5, 1), (1, 9)), ((2, 1, 3, 1), (4, 1, 6))]:
        shape = np.broadcast_shapes(sa, sb)
        a = binary_inputs(rng, op, dtype, sa, sb)[0]
        # b read through a view: every other element of a bigger buffer, reversed, with an offset
        bbig = binary_inputs(rng, op, dtype, [2 * s + 1 for s in sb], (1,))[0]
        bv = bbig[tuple(slice(1, 1 + 2 * s, 2) for s in sb)][..., ::-1]
        av, bb = np.broadcast_to(a, shape), np.broadcast_to(bv, shape)
        want = binary_want(op, dtype, np.ascontiguousarray(av), np.ascontiguousarray(bb)).reshape(-1)
        isz = a.itemsize
        offs = np.array([0, (bb.__array_interface__["data"][0] - bbig.__array_interface__["data"][0]) // isz], np.int64)
        out = np.zeros(want.size, want.dtype)
        args = [a, bbig, out, u32(out.size), u32(len(shape)), np.array(shape, np.uint32),
                np.array([s // isz for s in av.strides], np.int64), np.array([s // isz for s in bb.strides], np.int64),
                offs]
        run("binary.metal", f"binary_strided_{op}_{dtype}", args, out.size, 64)
        binary_check(op, dtype, out, want)


@pytest.mark.parametrize("dtype", list(INTS))
def test_binary_integer_division_edges_match_the_cpu(dtype):
    # x / 0, x // 0, x % 0 are 0; INT64_MIN / -1 and // -1 wrap; % takes the divisor's sign
    dt = DTYPES[dtype]
    info = np.iinfo(dt)
    vals = np.array(sorted({info.min, info.max, 0, 1, 7, info.max - 3} | ({-1, -7, -8} if info.min < 0 else set())),
                    dtype=object)
    a = np.repeat(vals, vals.size).astype(dt)
    b = np.tile(vals, vals.size).astype(dt)
    for op in ("div", "floor_divide", "remainder"):
        out = np.zeros_like(a)
        run("binary.metal", f"binary_contig_{op}_{dtype}", [a, b, out, u32(a.size)], -(-a.size // 4), 32)
        np.testing.assert_array_equal(out, binary_want(op, dtype, a, b), err_msg=op)
        np.testing.assert_array_equal(out, cpu_binary(op, a, b), err_msg=op)


# --- the launchers, through the public API on the emulated device -----------------------------------------
# Each op runs on the same view of the same data on the CPU and on Metal: contiguous, at an offset
# (narrow), strided (transposed and stepped), broadcast (stride 0), and for binary ops a one-element
# operand on either side.
METAL = em.Device("metal", 0)


@pytest.fixture
def metal(monkeypatch):
    # the emulator unless a real Metal device runs the suite (scripts/metal_smoke.sh on a Mac)
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()
    return METAL
UNARY_INT_OPS = {"sqr", "abs", "neg", "relu", "sign", "ceil", "floor", "round", "trunc"}
VIEW_KINDS = ["contiguous", "offset", "strided", "broadcast"]


def on(x, device):
    return em.tensor(x, device=device)


def view_of(t, kind):
    if kind == "offset":
        return t.narrow(0, 1, t.shape[0] - 1).narrow(1, 2, t.shape[1] - 2)
    if kind == "strided":
        return t.t()[1:, ::2]
    if kind == "broadcast":
        return t[1:2].broadcast_as(t.shape)
    return t


def api_inputs(rng, dtype, op, shape=(6, 9)):
    if dtype in INTS:
        return int_inputs(rng, INTS[dtype], shape)
    return float_inputs(rng, op, FLOATS[dtype], shape)


def same_result(cpu_fn, metal_fn, dtype, zero_sign=True):
    """Both sides' results agree (floats within the dtype's tolerance and in the sign of zeros, integers
    exactly), or both raise the same error."""
    try:
        want = cpu_fn()
    except em.EmberError as e:
        with pytest.raises(type(e)) as got:
            metal_fn()
        assert str(got.value) == str(e)
        return
    got = metal_fn()
    assert got.device == METAL and got.dtype == want.dtype and got.shape == want.shape
    g, w = got.numpy(), want.numpy()
    assert_close(g, w, dtype if want.dtype.is_float else "int64")
    if want.dtype.is_float and zero_sign:
        zero = (g == 0) & (w == 0)
        np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]))


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_api_unary_matches_the_cpu(op, dtype, kind, rng, metal):
    x = api_inputs(rng, dtype, op)
    # the CPU's tanh(-0) is +0; Metal's is -0, as numpy's
    same_result(lambda: getattr(view_of(on(x, "cpu"), kind), op)(),
                lambda: getattr(view_of(on(x, METAL), kind), op)(), dtype, zero_sign=op != "tanh")


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op,args", [
    ("affine", (2.0, -1.0)), ("affine", (0.5, 0.25)), ("affine", (-3.0, 1e19)), ("powf", (2.0,)), ("powf", (0.5,)),
    ("powf", (-1.25,)), ("clamp", (-1.0, 2.0)), ("clamp", (3, -3)), ("clamp", (None, 5)), ("clamp", (-(2**70), 2**70))])
def test_api_parametrised_unary_matches_the_cpu(op, args, dtype, kind, rng, metal):
    x = api_inputs(rng, dtype, op)
    same_result(lambda: getattr(view_of(on(x, "cpu"), kind), op)(*args),
                lambda: getattr(view_of(on(x, METAL), kind), op)(*args), dtype)


def api_binary(op):
    """The public spelling of each op; integer `/` promotes to float in Python, so integer div is called
    as the backend op."""
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b if a.dtype.is_float else a._binary(b, "div"),
           "maximum": em.maximum, "minimum": em.minimum, "pow": lambda a, b: a ** b,
           "floor_divide": lambda a, b: a // b, "remainder": lambda a, b: a % b}
    return ops.get(op) or (lambda a, b: getattr(a, op)(b))


BINARY_KINDS = ["contiguous", "offset", "strided", "broadcast", "scalar_rhs", "scalar_lhs", "scalar_size1"]


def binary_operands(t_a, t_b, kind):
    if kind == "broadcast":
        return t_a[:, :1], t_b[:1]  # (6, 1) op (1, 9): both stride 0 somewhere
    if kind == "scalar_rhs":
        return t_a, t_b[2:3, 4:5]
    if kind == "scalar_lhs":
        return t_a[2:3, 4:5].reshape(1), t_b
    if kind == "scalar_size1":  # (1, 9) op (1, 1): a size-1 dim keeps its stride, still one element
        return t_a[3:4], t_b[2:3, 4:5]
    return view_of(t_a, kind), view_of(t_b, kind)


@pytest.mark.parametrize("kind", BINARY_KINDS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(BINARY))
def test_api_binary_matches_the_cpu(op, dtype, kind, rng, metal):
    a, b = binary_inputs(rng, op, dtype, (6, 9), (6, 9))
    fn = api_binary(op)
    same_result(lambda: fn(*binary_operands(on(a, "cpu"), on(b, "cpu"), kind)),
                lambda: fn(*binary_operands(on(a, METAL), on(b, METAL), kind)), dtype)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 255, 1023, 1025, 70001])
def test_api_sizes_across_threadgroups(n, rng, metal):
    # grids of ceil(n / 4) threads (dense) or n threads (strided) in groups of 256, partial at the edge
    a, b = rng.standard_normal((2, n)).astype(np.float32)
    ta, tb = on(a, metal), on(b, metal)
    np.testing.assert_array_equal(ta.neg().numpy(), -a)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal((ta - 1.5).numpy(), a - np.float32(1.5))
    a2 = rng.standard_normal((n, 3)).astype(np.float32)
    t2 = on(a2, metal)
    np.testing.assert_array_equal(t2.t().sqr().numpy(), np.square(a2.T))
    np.testing.assert_array_equal(em.maximum(t2.t(), t2.t()[:1]).numpy(), np.maximum(a2.T, a2.T[:1]))
    assert ta.exp().shape == (n,) and t2.t().lt(t2.t()).dtype == em.bool


def test_api_zero_dim_tensors(metal):
    x = on(np.float32(-2.5), metal)
    assert x.abs().shape == () and x.abs().item() == 2.5
    assert (x * x).item() == 6.25 and (x // on(np.float32(2.0), metal)).item() == -2.0


def test_api_more_elements_than_32_bit_indices_is_an_error(metal):
    # a broadcast view holds 2^32 + 2^16 elements without the memory: refused before any allocation
    big = on(np.ones(1, np.float32), metal).broadcast_as((65536, 65537))
    with pytest.raises(em.UnsupportedOp, match=r"^\[exp\] 4295032832 elements: Metal kernels index with 32 bits"):
        big.exp()
    with pytest.raises(em.UnsupportedOp, match=r"^\[add\] 4295032832 elements"):
        big + big



def shaped_view(rng, shape, dtype, device, op="add"):
    """(tensor, numpy array) of the given shape with random strides and offset: the data lies in a larger
    buffer with its dims permuted, some dims stepped by 2 from 1, and size-1 dims sometimes broadcast."""
    nd = len(shape)
    perm = [int(p) for p in rng.permutation(nd)]
    step = [bool(rng.random() < 0.4) for _ in range(nd)]
    big = tuple(shape[p] * 2 + 1 if step[p] else shape[p] for p in perm)
    base = binary_inputs(rng, op, dtype, big, (1,))[0]
    idx = tuple(slice(1, None, 2) if step[p] else slice(None) for p in perm)
    inv = tuple(int(i) for i in np.argsort(perm))
    t, x = on(base, device)[idx].permute(*inv), base[idx].transpose(inv)
    if nd and rng.random() < 0.3:  # one dim a stride-0 broadcast of its first slice
        d = int(rng.integers(0, nd))
        sl = (slice(None),) * d + (slice(0, 1),)
        t, x = t[sl].broadcast_as(shape), np.broadcast_to(x[sl], shape)
    assert t.shape == x.shape == tuple(shape)
    return t, x


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_api_random_views_and_broadcasts(dtype, rng, metal):
    ops = ["add", "mul", "maximum", "lt", "floor_divide"] + (["pow", "div"] if dtype in FLOATS else ["sub", "div"])
    for case in range(16):
        shape = tuple(int(s) for s in rng.integers(1, 7, size=int(rng.integers(0, 5))))
        # b: a trailing part of the shape, each dim kept or 1 (numpy broadcasting)
        bshape = tuple(s if rng.random() < 0.7 else 1 for s in shape[int(rng.integers(0, len(shape) + 1)):])
        ta, xa = shaped_view(rng, shape, dtype, metal)
        tb, xb = shaped_view(rng, bshape, dtype, metal)
        if case % 2:
            ta, xa, tb, xb = tb, xb, ta, xa
        for op in ops:
            if op == "floor_divide" and dtype in INTS and (np.asarray(xb) == 0).any():  # raises, as in torch
                for x, y in ((ta, tb), (on(np.ascontiguousarray(xa), "cpu"), on(np.ascontiguousarray(xb), "cpu"))):
                    with pytest.raises(em.EmberValueError, match=r"^\[floor_divide\] integer division by zero"):
                        api_binary(op)(x, y)
                continue
            got = api_binary(op)(ta, tb)
            want = api_binary(op)(on(np.ascontiguousarray(xa), "cpu"), on(np.ascontiguousarray(xb), "cpu"))
            assert_close(got.numpy(), want.numpy(), dtype if want.dtype.is_float else "int64")
        unary = "abs" if dtype in INTS else ["exp", "tanh", "sign", "rsqrt"][case % 4]
        assert_close(getattr(ta, unary)().numpy(), getattr(on(np.ascontiguousarray(xa), "cpu"), unary)().numpy(),
                     dtype)
