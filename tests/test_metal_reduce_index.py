"""The Metal reduction, matmul, index and convolution kernels (metal/{reduce,matmul,index,conv}.metal) under
the MSL emulator, against numpy/torch on random shapes, strides, offsets and dtypes."""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

import ember as em
from ember import _C
from ember import _C_testing as _T

ROOT = Path(__file__).resolve().parents[1]
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int64": np.int64,
      "uint32": np.uint32, "uint8": np.uint8}
FLOATS = ("float32", "float16", "bfloat16")
# a result computed in float and rounded once to the dtype
RTOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.fixture(autouse=True)
def _device_limits(monkeypatch):
    # the kernels at the group sizes named here, up to the device's 1024 (CI's lower per-pipeline limit
    # is for the launchers: test_metal_limits.py)
    monkeypatch.delenv("EMBER_METAL_EMU_MAX_THREADS", raising=False)


def run(file, name, args, grid, group):
    # the file's text from the tree, so a kernel runs before it is embedded in a build
    _T.metal_emu_run((ROOT / "metal" / file).read_text(), name, args, list(grid), list(group), label=file)


def randn(rng, shape, dtype):
    if dtype in FLOATS:
        return (rng.standard_normal(shape) * 3).astype(np.float32).astype(NP[dtype])
    hi = {"int64": 1 << 40, "uint32": 1 << 32, "uint8": 256}[dtype]
    lo = -hi if dtype == "int64" else 0
    return rng.integers(lo, hi, shape, dtype=np.int64 if dtype == "int64" else np.uint64).astype(NP[dtype])


def strided(rng, shape, dtype):
    """A random view of `shape` into a larger flat buffer (steps, a permutation, a flipped dim, an offset):
    (base, view, element strides, element offset)."""
    nd = len(shape)
    perm = rng.permutation(nd)  # the dims in memory order
    steps = [int(rng.integers(1, 3)) for _ in range(nd)]
    mem = [shape[p] * steps[p] + int(rng.integers(0, 2)) for p in perm]
    base = randn(rng, (int(np.prod(mem)) + 3,), dtype)
    view = base[3:].reshape(mem)[tuple(slice(0, shape[p] * steps[p], steps[p]) for p in perm)]
    view = view.transpose(tuple(np.argsort(perm)))
    if nd and rng.integers(0, 2):
        view = np.flip(view, int(rng.integers(0, nd)))
    isz = base.itemsize
    strides = [s // isz for s in view.strides]
    off = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz if view.size else 0
    return base, view, strides, off


# --------------------------------------------------------------------------------------------------------
# reductions

RED_OPS = ("sum", "max", "min", "argmax", "argmin")


def reduce_meta(shape, strides, off, dims):
    kept = [d for d in range(len(shape)) if d not in dims]
    ks, kst = [shape[d] for d in kept], [strides[d] for d in kept]
    rs, rst = [shape[d] for d in dims], [strides[d] for d in dims]
    nred, nout = int(np.prod(rs)), int(np.prod(ks))
    return np.array([len(ks), len(rs), off, nred, nout, *ks, *kst, *rs, *rst], np.int64), nout


def reduce_want(op, view, dims, dtype):
    kept = [d for d in range(view.ndim) if d not in dims]
    v = np.ascontiguousarray(view.transpose(kept + list(dims)))
    rows = v.reshape(int(np.prod([view.shape[d] for d in kept])), int(np.prod([view.shape[d] for d in dims])))
    if op in ("argmax", "argmin"):
        return (np.argmax if op == "argmax" else np.argmin)(rows.astype(np.float64) if dtype in FLOATS else rows,
                                                          axis=1).astype(np.int64)
    if op == "sum":
        if dtype in FLOATS:
            return rows.astype(np.float64).sum(1)
        return rows.astype(np.uint64).sum(1, dtype=np.uint64).astype(NP[dtype])  # wraps like the dtype
    if op == "sum_i64":
        return rows.astype(np.int64).sum(1)
    f = np.max if op == "max" else np.min
    return f(rows.astype(np.float64), axis=1) if dtype in FLOATS else f(rows, axis=1)


def check_reduce(op, dtype, got, want):
    if dtype in FLOATS and op in ("sum", "max", "min"):
        want = want.astype(NP[dtype]).astype(np.float64)
        tol = RTOL[dtype] * (4 if op == "sum" else 1)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 4)
    else:
        np.testing.assert_array_equal(got, want)


def launch_reduce(kernel, op, dtype, base, meta, nout, group):
    odt = np.int64 if op.startswith("arg") or op == "sum_i64" else NP[dtype]
    out = np.zeros(max(nout, 1), odt)
    name = f"reduce_{kernel}_{op}_{dtype}"
    if kernel == "rows":
        run("reduce.metal", name, [base, out, meta], (group[0], nout), group)
    else:
        run("reduce.metal", name, [base, out, meta], (nout, group[1]), group)
    return out[:nout]


CASES = [((7, 300), (1,)), ((5, 6, 7), (0, 2)), ((4, 1000), (0,)), ((3, 4, 5, 6), (1, 2, 3)), ((9,), (0,)),
         ((2, 3, 70), (0, 1, 2)), ((33, 5), (1,)), ((6, 0, 4), (1,))]
GROUPS = {"rows": [(32, 8), (256, 1), (64, 2)], "cols": [(32, 8), (16, 1), (8, 32)]}


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("op", RED_OPS)
@pytest.mark.parametrize("kernel", ["rows", "cols"])
def test_reduce_kernels_any_dims_strided(kernel, op, dtype):
    rng = np.random.default_rng(abs(hash((kernel, op, dtype))) % 2**32)
    for ci, (shape, dims) in enumerate(CASES):
        if 0 in shape and op != "sum":
            continue  # only a sum may reduce an empty dim (the entry point refuses the others)
        base, view, strides, off = strided(rng, shape, dtype)
        if dtype in FLOATS and op != "sum" and view.size > 4:
            flat = base.reshape(-1)
            flat[rng.integers(0, flat.size, 2)] = np.nan  # NaN wins, the first one for arg*
        if dtype not in FLOATS and op.startswith("arg") and view.size:
            base[rng.integers(0, base.size, base.size // 2)] = base[0]  # many ties: the first index wins
        meta, nout = reduce_meta(shape, strides, off, dims)
        group = GROUPS[kernel][ci % 3]
        got = launch_reduce(kernel, op, dtype, base, meta, nout, group)
        check_reduce(op, dtype, got, reduce_want(op, view, dims, dtype))


VSTATE = {"float32": np.float32, "float16": np.float32, "bfloat16": np.float32, "int64": np.int64,
          "uint32": np.uint32, "uint8": np.uint8}  # the accumulator of max/min/arg partial states


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("op", RED_OPS)
def test_reduce_in_parts_for_few_long_rows(op, dtype):
    rng = np.random.default_rng(abs(hash(("parts", op, dtype))) % 2**32)
    for (shape, dims), parts, tx in [(((3, 5000), (1,)), 7, 256), (((2, 30, 40), (1, 2)), 5, 32),
                                     (((1, 100), (1,)), 100, 64), (((9, 70), (0, 1)), 3, 1024)]:
        base, view, strides, off = strided(rng, shape, dtype)
        if dtype in FLOATS and op != "sum":
            base[rng.integers(0, base.size, 2)] = np.nan
        meta, nout = reduce_meta(shape, strides, off, dims)
        meta = np.append(meta, parts)
        sdt = (np.float32 if dtype in FLOATS else np.uint64) if op == "sum" else VSTATE[dtype]
        pv = np.zeros(nout * parts, sdt)
        pi = np.zeros(nout * parts, np.int64)
        run("reduce.metal", f"reduce_parts_{op}_{dtype}", [base, pv, pi, meta], (tx, nout * parts), (tx, 1))
        odt = np.int64 if op.startswith("arg") else NP[dtype]
        out = np.zeros(nout, odt)
        run("reduce.metal", f"reduce_finish_{op}_{dtype}", [pv, pi, out, np.array([parts, nout], np.int64)],
            (32, nout), (32, 1))
        check_reduce(op, dtype, out, reduce_want(op, view, dims, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_reduce_rows_contiguous_fast_path_and_ties(dtype):
    rng = np.random.default_rng(3)
    for rows, cols, group in [(3, 4099, (256, 1)), (40, 37, (32, 8)), (2, 20000, (1024, 1)), (5, 1, (32, 4))]:
        x = randn(rng, (rows, cols), dtype)
        x[:, cols // 3] = x.max() if cols > 1 else x[:, 0]  # ties of the maximum: the first index wins
        x[0, -1] = np.inf
        x[-1, 0] = -np.inf
        meta, nout = reduce_meta((rows, cols), [cols, 1], 0, (1,))
        for op in RED_OPS:
            got = launch_reduce("rows", op, dtype, x.reshape(-1), meta, nout, group)
            with np.errstate(invalid="ignore"):
                check_reduce(op, dtype, got, reduce_want(op, x, (1,), dtype))


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
@pytest.mark.parametrize("kernel", ["rows", "cols"])
def test_reduce_sum_i64_of_unsigned_does_not_wrap(kernel, dtype):
    rng = np.random.default_rng(5)
    base, view, strides, off = strided(rng, (40, 300), dtype)
    base[:] = np.iinfo(NP[dtype]).max  # a uint8 sum of 300 of them wraps; the int64 one does not
    meta, nout = reduce_meta((40, 300), strides, off, (1,))
    got = launch_reduce(kernel, "sum_i64", dtype, base, meta, nout, (32, 8))
    np.testing.assert_array_equal(got, view.astype(np.int64).sum(1))
    got = launch_reduce(kernel, "sum", dtype, base, meta, nout, (32, 8))
    np.testing.assert_array_equal(got, view.astype(np.uint64).sum(1).astype(NP[dtype]))


def test_reduce_int64_sum_wraps_like_int64():
    x = np.full((2, 4), 2**62, np.int64)
    meta, nout = reduce_meta((2, 4), [4, 1], 0, (1,))
    got = launch_reduce("rows", "sum", "int64", x.reshape(-1), meta, nout, (32, 8))
    np.testing.assert_array_equal(got, np.zeros(2, np.int64))  # 4 * 2**62 wraps to 0, as numpy's int64 sum


def test_reduce_kernel_out_of_bounds_is_caught():
    # a reduced count larger than the buffer holds: the emulator stops at the first read past the end
    x = np.ones(64, np.float32)
    meta, _ = reduce_meta((1, 64), [64, 1], 0, (1,))
    meta[3] = 65
    with pytest.raises(em.IndexOutOfRange, match=r"kernel 'reduce_rows_sum_float32'.*buffer\(0\) at byte offset 256"):
        launch_reduce("rows", "sum", "float32", x, meta, 1, (32, 1))


# --------------------------------------------------------------------------------------------------------
# matmul


def operand(rng, batch, rows, cols, dtype, transposed, bcast):
    """A (batch..., rows, cols) operand: optionally stored transposed, with broadcast (stride 0) batch dims
    where `bcast` says, at an offset into a larger buffer. Returns (base, view, strides, offset)."""
    real = [1 if b else s for s, b in zip(batch, bcast)]
    mat = (cols, rows) if transposed else (rows, cols)
    base = randn(rng, (int(np.prod(real)) * rows * cols + 5,), dtype)
    if dtype not in FLOATS:
        base = (base % 7).astype(NP[dtype]) if dtype != "int64" else base % 1000 - 500
    v = base[5:].reshape(*real, *mat)
    if transposed:
        v = np.swapaxes(v, -1, -2)
    v = np.broadcast_to(v, (*batch, rows, cols))
    isz = base.itemsize
    strides = [s // isz for s in v.strides]
    off = (v.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz if v.size else 5
    return base, v, strides, off


def matmul_run(rng, dtype, batch, m, n, k, ta=False, tb=False, ba=None, bb=None, kernel="tiled"):
    ba = ba or [False] * len(batch)
    bb = bb or [False] * len(batch)
    abase, av, ast, aoff = operand(rng, batch, m, k, dtype, ta, ba)
    bbase, bv, bst, boff = operand(rng, batch, k, n, dtype, tb, bb)
    nb = len(batch)
    meta = np.array([nb, m, n, k, aoff, boff, ast[-2], ast[-1], bst[-2], bst[-1], *batch, *ast[:nb], *bst[:nb]],
                    np.int64)
    nbatch = int(np.prod(batch))
    out = np.zeros(max(nbatch * m * n, 1), NP[dtype])
    if kernel == "tiled":
        grid, group = (-(-n // 64) * 16, -(-m // 64) * 16, nbatch), (16, 16, 1)
    else:
        grid, group = (32, nbatch * m * n), (32, min(8, nbatch * m * n))
    run("matmul.metal", f"matmul_{kernel}_{dtype}", [abase, bbase, out, meta], grid, group)
    got = out[: nbatch * m * n].reshape(*batch, m, n)
    if dtype in FLOATS:
        want = np.matmul(av.astype(np.float64), bv.astype(np.float64))
        scale = np.matmul(np.abs(av.astype(np.float64)), np.abs(bv.astype(np.float64)))
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= RTOL[dtype] * 2 * scale + 1e-6), (dtype, batch, m, n, k, float((err - scale).max()))
    else:
        want = np.matmul(av.astype(np.uint64), bv.astype(np.uint64)).astype(NP[dtype])  # wraps like the CPU
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", list(NP))
def test_matmul_tiled_shapes_and_transposes(dtype):
    rng = np.random.default_rng(abs(hash(("mm", dtype))) % 2**32)
    for m, n, k in [(1, 1, 1), (64, 64, 16), (65, 63, 17), (5, 130, 70), (100, 3, 1), (7, 9, 0), (1, 200, 33)]:
        for ta, tb in [(False, False), (True, False), (False, True), (True, True)]:
            matmul_run(rng, dtype, [], m, n, k, ta, tb)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8"])
def test_matmul_tiled_broadcast_batches(dtype):
    rng = np.random.default_rng(11)
    matmul_run(rng, dtype, [3], 20, 30, 40)
    matmul_run(rng, dtype, [2, 3], 17, 5, 66, ta=True, bb=[True, False])
    matmul_run(rng, dtype, [4, 2], 70, 8, 9, tb=True, ba=[False, True], bb=[True, True])
    matmul_run(rng, dtype, [5], 3, 3, 3, ba=[True])


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_dot_matrix_vector(dtype):
    rng = np.random.default_rng(abs(hash(("dot", dtype))) % 2**32)
    # x @ W^T at batch 1 (B's columns contiguous in k), W @ x, k shorter than a simdgroup, broadcast batches
    matmul_run(rng, dtype, [], 1, 70, 300, tb=True, kernel="dot")
    matmul_run(rng, dtype, [], 45, 1, 129, kernel="dot")
    matmul_run(rng, dtype, [], 1, 5, 7, tb=True, kernel="dot")
    matmul_run(rng, dtype, [3, 2], 1, 9, 40, tb=True, bb=[True, False], kernel="dot")
    matmul_run(rng, dtype, [2], 1, 3, 0, tb=True, kernel="dot")


def test_matmul_int_products_wrap():
    a = np.full((1, 3), 200, np.uint8)
    b = np.full((3, 1), 3, np.uint8)
    meta = np.array([0, 1, 1, 3, 0, 0, 3, 1, 1, 1], np.int64)
    out = np.zeros(1, np.uint8)
    run("matmul.metal", "matmul_tiled_uint8", [a.reshape(-1), b.reshape(-1), out, meta], (16, 16, 1), (16, 16, 1))
    assert out[0] == (200 * 3 * 3) % 256


# --------------------------------------------------------------------------------------------------------
# indexing

IDS = {"int64": np.int64, "uint32": np.uint32, "uint8": np.uint8}


def u32max():
    return np.array([0xFFFFFFFF], np.uint32)


def prepare(ids_base, shape, strides, off, limit, idt):
    n = int(np.prod(shape))
    out = np.zeros(max(n, 1), np.int64)
    bad = u32max()
    meta = np.array([n, len(shape), off, limit, *shape, *strides], np.int64)
    run("index.metal", f"index_prepare_{idt}", [ids_base, out, bad, meta], (max(n, 1),), (64,))
    return out[:n], int(bad[0])


@pytest.mark.parametrize("idt", list(IDS))
def test_index_prepare_normalises_and_finds_the_first_bad_index(idt):
    rng = np.random.default_rng(abs(hash(("prep", idt))) % 2**32)
    for shape, limit in [((50,), 7), ((3, 40), 200), ((2, 3, 5), 1), ((0,), 3)]:
        lo = -limit if idt == "int64" else 0
        base, view, strides, off = strided(rng, shape, "int64")
        base[:] = rng.integers(lo, limit, base.size)
        ids_base = base.astype(IDS[idt])
        got, bad = prepare(ids_base, shape, strides, off, limit, idt)
        want = view.reshape(-1) % limit if view.size else np.zeros(0, np.int64)
        np.testing.assert_array_equal(got, want)
        assert bad == 0xFFFFFFFF
        if view.size > 3:  # two bad entries: the first position (in row-major order) is reported, raw value kept
            flat_pos = [1, view.size - 1]
            for p in flat_pos:
                view[np.unravel_index(p, shape)] = limit + 3
            got, bad = prepare(base.astype(IDS[idt]), shape, strides, off, limit, idt)
            assert bad == 1 and got[1] == limit + 3
    if idt == "int64":
        got, bad = prepare(np.array([-4, 2], np.int64), (2,), [1], 0, 3, idt)  # -4 is before the start
        assert bad == 0 and got[0] == -4


def move_kernel(dtype):
    return {1: "1", 2: "2", 4: "4", 8: "8"}[np.dtype(NP[dtype]).itemsize]


def as_bits(a):
    """Bit patterns (NaN payloads compare equal) of a float array, the array itself otherwise."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


@pytest.mark.parametrize("dtype", list(NP))
def test_index_select_and_gather_strided(dtype):
    rng = np.random.default_rng(abs(hash(("sel", dtype))) % 2**32)
    for shape, dim in [((6, 5), 0), ((4, 7, 3), 1), ((3, 4, 9), 2), ((11,), 0), ((2, 3, 4, 5), 3)]:
        base, view, strides, off = strided(rng, shape, dtype)
        nd = len(shape)
        # index_select
        ids = rng.integers(0, shape[dim], int(rng.integers(1, 9)))
        oshape = list(shape)
        oshape[dim] = ids.size
        out = np.zeros(int(np.prod(oshape)), NP[dtype])
        meta = np.array([nd, dim, off, ids.size, out.size, *shape, *strides], np.int64)
        run("index.metal", f"index_select_{move_kernel(dtype)}", [base, out, ids.astype(np.int64), meta], (64,), (32,))
        np.testing.assert_array_equal(as_bits(out), as_bits(np.ascontiguousarray(np.take(view, ids, axis=dim)).reshape(-1)))
        # gather: the index tensor may be smaller than the input outside dim
        ishape = [int(rng.integers(1, s + 1)) if d != dim else int(rng.integers(1, 6)) for d, s in enumerate(shape)]
        gids = rng.integers(0, shape[dim], ishape)
        out = np.zeros(gids.size, NP[dtype])
        meta = np.array([nd, dim, off, gids.size, *ishape, *strides], np.int64)
        run("index.metal", f"gather_{move_kernel(dtype)}", [base, out, gids.reshape(-1).astype(np.int64), meta],
            (min(gids.size, 48),), (16,))
        coords = list(np.indices(ishape))
        coords[dim] = gids
        np.testing.assert_array_equal(as_bits(out), as_bits(np.ascontiguousarray(view[tuple(coords)]).reshape(-1)))


def add_like_cpu(a, b, dtype):
    if dtype in FLOATS:  # through float, one rounding per add
        return (a.astype(np.float32) + b.astype(np.float32)).astype(NP[dtype])
    with np.errstate(over="ignore"):
        return a + b  # numpy wraps like the dtype


@pytest.mark.parametrize("dtype", list(NP))
def test_index_add_and_index_copy_strided_repeated_indices(dtype):
    rng = np.random.default_rng(abs(hash(("add", dtype))) % 2**32)
    for shape, dim in [((6, 5), 0), ((4, 7, 3), 1), ((3, 4, 9), 2), ((13,), 0), ((2, 3, 4, 5), 2)]:
        nd = len(shape)
        ids = rng.integers(0, shape[dim], int(rng.integers(1, 12)))  # repeats: added in order / last wins
        sshape = list(shape)
        sshape[dim] = ids.size
        sbase, sview, sst, soff = strided(rng, sshape, dtype)
        lines = int(np.prod(shape)) // shape[dim]
        for kernel in ("index_add", "index_copy"):
            base, view, strides, off = strided(rng, shape, dtype)
            want = view.copy()
            for j, i in enumerate(ids):
                at = (slice(None),) * dim + (i,)
                src = sview[(slice(None),) * dim + (j,)]
                want[at] = add_like_cpu(want[at], src, dtype) if kernel == "index_add" else src
            meta = np.array([nd, dim, off, soff, ids.size, lines, *shape, *strides, *sst], np.int64)
            ids64 = ids.astype(np.int64)
            if kernel == "index_add":
                run("index.metal", f"index_add_{dtype}", [base, sbase, ids64, meta], (min(lines, 40),), (8,))
            else:
                win = np.zeros(shape[dim], np.uint32)
                run("index.metal", "index_last", [ids64, win, np.array([ids.size], np.int64)], (ids.size,), (32,))
                run("index.metal", f"index_copy_{move_kernel(dtype)}", [base, sbase, ids64, win, meta],
                    (min(lines * ids.size, 100),), (32,))
            np.testing.assert_array_equal(as_bits(np.ascontiguousarray(view)), as_bits(np.ascontiguousarray(want)))


@pytest.mark.parametrize("dtype", list(NP))
def test_scatter_add_strided_in_index_order(dtype):
    rng = np.random.default_rng(abs(hash(("scatter", dtype))) % 2**32)
    for shape, dim in [((6, 5), 0), ((4, 7, 3), 1), ((3, 4, 9), 2), ((13,), 0), ((2, 3, 4, 5), 1)]:
        nd = len(shape)
        ishape = [int(rng.integers(1, s + 1)) if d != dim else int(rng.integers(1, 9)) for d, s in enumerate(shape)]
        ids = rng.integers(0, shape[dim], ishape)
        sbase, sview, sst, soff = strided(rng, ishape, dtype)
        base, view, strides, off = strided(rng, shape, dtype)
        want = view.copy()
        for e in np.ndindex(*ishape):
            t = list(e)
            t[dim] = ids[e]
            t = tuple(t)
            want[t] = add_like_cpu(want[t], sview[e], dtype)
        lines = int(np.prod(ishape)) // ishape[dim]
        meta = np.array([nd, dim, off, soff, lines, *ishape, *strides, *sst], np.int64)
        run("index.metal", f"scatter_add_{dtype}", [base, sbase, ids.reshape(-1).astype(np.int64), meta],
            (min(lines, 24),), (8,))
        np.testing.assert_array_equal(as_bits(np.ascontiguousarray(view)), as_bits(np.ascontiguousarray(want)))


def test_index_add_of_half_rounds_per_add_like_the_cpu():
    # 1 + 2**-11 is not a float16: adding it 4 times one by one stays at 1 (ties to even), as on the CPU
    dst = np.ones(1, np.float16)
    src = np.full(4, 2.0**-11, np.float16)
    meta = np.array([1, 0, 0, 0, 4, 1, 1, 1, 1], np.int64)
    run("index.metal", "index_add_float16", [dst, src, np.zeros(4, np.int64), meta], (1,), (1,))
    cpu = em.ones(1, dtype=em.float16, device="cpu").index_add(em.tensor([0, 0, 0, 0], device="cpu"),
                                                               em.tensor(src, device="cpu"), 0)
    assert dst[0] == np.float16(1.0) == cpu.numpy()[0]


# --------------------------------------------------------------------------------------------------------
# im2col / col2im


def cpu_conv(fn, arr, geom):
    """The CPU kernel's result (the semantics to match), through the binding on a CPU tensor."""
    t = em.tensor(arr, device="cpu")
    s, layout = getattr(_C, fn)(t.storage, t.layout, geom)
    return np.array(s.as_numpy(layout))


CONV_GEOMS = [  # (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw)
    (2, 3, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1), (1, 2, 9, 11, 2, 3, 2, 3, 0, 1, 1, 2), (3, 1, 5, 5, 5, 1, 1, 2, 2, 0, 1, 1),
    (1, 4, 1, 13, 1, 4, 1, 2, 0, 3, 1, 1), (2, 2, 8, 8, 3, 2, 3, 1, 2, 2, 2, 3),
]


def geom_of(n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw):
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@pytest.mark.parametrize("dtype", list(NP))
def test_im2col_strided_and_col2im_match_the_cpu(dtype):
    rng = np.random.default_rng(abs(hash(("conv", dtype))) % 2**32)
    for spec in CONV_GEOMS:
        g = geom_of(*spec)
        n, c, h, w, kh, kw = g[:6]
        oh, ow = g[12], g[13]
        base, view, strides, off = strided(rng, (n, c, h, w), dtype)
        meta = np.array([*g, off, *strides], np.int64)
        rows, pos = n * c * kh * kw, oh * ow
        col = np.zeros(rows * pos, NP[dtype])
        run("conv.metal", f"im2col_{move_kernel(dtype)}", [base, col, meta], (pos, rows), (8, 4))
        want = cpu_conv("im2col", np.ascontiguousarray(view), g).reshape(-1)
        np.testing.assert_array_equal(as_bits(col), as_bits(want))
        if dtype == "float32":  # and torch's unfold, independently of ember's CPU kernel
            tw = torch.nn.functional.unfold(torch.from_numpy(np.ascontiguousarray(view)), (kh, kw),
                                            dilation=(g[10], g[11]), padding=(g[8], g[9]), stride=(g[6], g[7]))
            np.testing.assert_array_equal(col, tw.numpy().reshape(-1))
        cols = randn(rng, (n, c * kh * kw, pos), dtype)
        out = np.zeros(n * c * h * w, NP[dtype])
        run("conv.metal", f"col2im_{dtype}", [cols.reshape(-1), out, np.array([*g, 0, 0, 0, 0, 0], np.int64)],
            (h * w, n * c), (16, 2))
        np.testing.assert_array_equal(as_bits(out), as_bits(cpu_conv("col2im", cols, g).reshape(-1)))


def test_emulator_shares_a_threadgroup_array_sized_by_an_expression():
    # matmul.metal's tiles once were `threadgroup A as[BK * BM]`: the emulator's rewriter took the `*` for a
    # pointer declaration and gave every thread its own array (wrong sums, no error)
    src = """
#include <metal_stdlib>
using namespace metal;
constant constexpr int N = 8;
kernel void share(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float s[N * 4];
  s[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = s[(tid + 1) % 32];
}
"""
    out = np.zeros(32, np.float32)
    _T.metal_emu_run(src, "share", [out], [32], [32], label="share.metal")
    np.testing.assert_array_equal(out, (np.arange(32) + 1) % 32)
