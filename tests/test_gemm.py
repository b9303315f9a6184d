"""ember's packed GEMM (the default float matmul on CPU) against a float64 reference: ragged edges, every
transpose and stride, batch broadcasting, k blocking, thin (decode) shapes, f16/bf16 converted while
packing, bfloat16 on AMX tiles where the CPU has them, every ISA the CPU runs, the OpenBLAS fallback, and the
same bits on any thread count."""
import os
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

import ember as em

pytestmark = pytest.mark.cpu_only("EMBER_MATMUL_GEMM, EMBER_ISA and the thread pool pick CPU kernels")

DT = {"float32": em.float32, "float16": em.float16, "bfloat16": em.bfloat16}
# the inputs are rounded to the dtype first; the product then errs by the float32 FMA chain (k steps) and
# one final rounding to the dtype
OUT_EPS = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def rounded(x, dt):
    return em.tensor(x).to(DT[dt]).to(em.float64).numpy()


def check(got, a, b, dt, k):
    """Normwise against float64 on the dtype-rounded inputs: |got - a b| <= (k u + e_out) (|a| |b|)."""
    want = np.matmul(a, b)
    scale = np.matmul(np.abs(a), np.abs(b)) + 1e-30
    g = got.to(em.float64).numpy()
    assert g.shape == want.shape
    err = np.abs(g - want) / scale
    bound = (k + 2) * 2.0**-24 + OUT_EPS[dt]
    assert err.size == 0 or err.max() <= bound, (err.max(), bound)


def operand(rng, shape, kind, dt):
    """(tensor, float64 values) of `shape` laid out as `kind`: c contiguous, t the last two dims swapped in
    storage, s every other row and every third column of a bigger array, r every other row, p a 3-d operand's
    first two dims swapped in storage, b a stride-0 broadcast batch."""
    if kind == "t":
        x = rng.uniform(-1, 1, shape[:-2] + (shape[-1], shape[-2])).astype(np.float32)
        t, v = em.tensor(x).to(DT[dt]), rounded(x, dt)
        return t.transpose(-1, -2), v.swapaxes(-1, -2)
    if kind == "s":
        x = rng.uniform(-1, 1, shape[:-2] + (2 * shape[-2], 3 * shape[-1])).astype(np.float32)
        t, v = em.tensor(x).to(DT[dt]), rounded(x, dt)
        return t[..., ::2, 1::3], v[..., ::2, 1::3]
    if kind == "r":  # every other row, columns contiguous: float A is read in place by the tile
        x = rng.uniform(-1, 1, shape[:-2] + (2 * shape[-2], shape[-1])).astype(np.float32)
        t, v = em.tensor(x).to(DT[dt]), rounded(x, dt)
        return t[..., ::2, :], v[..., ::2, :]
    if kind == "p":  # (batch, rows, cols) stored as (rows, batch, cols): batches interleaved row by row
        x = rng.uniform(-1, 1, (shape[1], shape[0], shape[2])).astype(np.float32)
        t, v = em.tensor(x).to(DT[dt]), rounded(x, dt)
        return t.transpose(0, 1), v.swapaxes(0, 1)
    if kind == "b":
        x = rng.uniform(-1, 1, (1,) + shape[1:]).astype(np.float32)
        t, v = em.tensor(x).to(DT[dt]), rounded(x, dt)
        return t.broadcast_as(shape), np.broadcast_to(v, shape)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    return em.tensor(x).to(DT[dt]), rounded(x, dt)


@pytest.fixture(params=["amx", "packed", "blas"])
def gemm(request, monkeypatch):
    monkeypatch.setenv("EMBER_MATMUL_GEMM", request.param)  # read per call
    return request.param


# (m, k, n): ragged against every ISA's matmul tile (4x8, 6x16, 14x32) and the convs' AVX-512 8x32, k in one and
# several 256-deep blocks, and against AMX's 16 x 16 tiles, 32 x 32 tile groups and 32-deep k blocks (odd k: a half k pair)
SHAPES = [(1, 1, 1), (3, 5, 7), (8, 33, 32), (13, 40, 95), (37, 256, 49), (50, 257, 33), (70, 600, 65),
          (129, 70, 130), (17, 3, 16), (32, 32, 33), (48, 63, 31)]
THIN = [(m, k, n) for m in (1, 2, 3, 5, 8, 11, 16) for k, n in ((7, 5), (64, 100), (300, 77))]


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_gemm_shapes_transposes_strides(dt, gemm, rng):
    for m, k, n in SHAPES + THIN[::2]:
        for ka, kb in (("c", "c"), ("t", "c"), ("c", "t"), ("t", "t"), ("s", "c"), ("c", "s"), ("s", "t"),
                       ("r", "c"), ("r", "t")):
            ta, a = operand(rng, (m, k), ka, dt)
            tb, b = operand(rng, (k, n), kb, dt)
            out = ta @ tb
            assert out.dtype is DT[dt]
            check(out, a, b, dt, k)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_gemm_thin_shapes(dt, gemm, rng):
    # decode-sized products: B read in place (rows or, transposed, dot products along k; halves converted in
    # registers), A gathered
    for m, k, n in THIN:
        for ka, kb in (("c", "c"), ("c", "t"), ("t", "c"), ("s", "t"), ("c", "s")):
            ta, a = operand(rng, (m, k), ka, dt)
            tb, b = operand(rng, (k, n), kb, dt)
            check(ta @ tb, a, b, dt, k)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_gemm_batches_and_broadcasting(dt, gemm, rng):
    cases = [((4, 9, 20), "c", (4, 20, 17), "c"),   # batch by batch
             ((4, 9, 20), "t", (20, 17), "c"),      # B shared: batches stacked into one product
             ((3, 5, 20), "c", (1, 20, 17), "t"),   # B broadcast by a size-1 dim
             ((9, 20), "c", (4, 20, 17), "t"),      # A shared by every batch
             ((4, 9, 20), "b", (4, 20, 17), "s"),   # A a stride-0 broadcast
             ((2, 3, 3, 40), "c", (3, 40, 70), "c"),  # thin batches, B not shared
             ((2, 3, 3, 40), "s", (40, 70), "t"),   # thin rows of several batches over a shared B^T
             ((2, 1, 33, 300), "c", (1, 3, 300, 40), "b"),
             ((5, 21, 70), "c", (70, 45), "t"),     # B shared, A's batches stacked evenly: rows read in place
             ((3, 26, 300), "r", (300, 40), "c"),   # the same with A's rows 2 k apart
             ((4, 19, 50), "p", (50, 33), "c"),     # B shared, A's batches interleaved: rows not evenly apart
             ((4, 19, 50), "p", (4, 50, 33), "t")]
    for sa, ka, sb, kb in cases:
        ta, a = operand(rng, sa, ka, dt)
        tb, b = operand(rng, sb, kb, dt)
        check(ta @ tb, a, b, dt, sa[-1])


def test_gemm_zero_sizes_and_vectors(gemm, rng):
    for sa, sb in (((0, 5), (5, 3)), ((4, 0), (0, 3)), ((4, 5), (5, 0)), ((6,), (6, 40)), ((3, 40, 6), (6,))):
        a = rng.uniform(-1, 1, sa).astype(np.float32)
        b = rng.uniform(-1, 1, sb).astype(np.float32)
        got = (em.tensor(a) @ em.tensor(b)).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


SAME_BITS_SCRIPT = r"""
import sys
import numpy as np
import ember as em
rng = np.random.default_rng(3)
outs = []
for n in (1, 2, 3):
    em.set_num_threads(n)
    res = []
    for (m, k, nn, tb) in ((300, 600, 200, False), (1000, 64, 96, True), (40, 300, 1200, False), (7, 500, 900, True),
                           (16, 100, 3000, False), (200, 2100, 300, True)):
        r = np.random.default_rng(m)
        a = em.tensor(r.standard_normal((m, k)).astype(np.float32))
        b = r.standard_normal((nn, k) if tb else (k, nn)).astype(np.float32)
        b = em.tensor(b).t() if tb else em.tensor(b)
        res.append((a @ b).numpy())
        res.append((a.to(em.bfloat16) @ b.to(em.bfloat16)).to(em.float32).numpy())
    outs.append(res)
print(all(np.array_equal(x, y) for o in outs[1:] for x, y in zip(outs[0], o)))
"""


@pytest.mark.parametrize("path", ["packed", "amx"])
def test_gemm_same_bits_on_any_thread_count(path):
    # K is never split and each C element is one FMA (or TDPBF16PS) chain in k order: the pool size changes nothing
    r = subprocess.run([sys.executable, "-c", SAME_BITS_SCRIPT], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, EMBER_MATMUL_GEMM=path, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True"]


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def test_amx_picked_where_the_cpu_has_it():
    # AMX-BF16 and AVX-512 (Linux grants tile state on request): the bf16 matmul runs on tiles; EMBER_ISA below
    # avx512 turns them off with the rest of the AVX-512 code
    flags = cpu_flags()
    release = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2]) if sys.platform == "linux" else ()
    # Linux grants tile state to a process on request since 5.16
    want = release >= (5, 16) and {"amx_bf16", "amx_tile", "avx512f", "avx512bw"} <= flags
    assert em._C.has_amx() == (want and em._C.isa() == "avx512")
    env = dict(os.environ, EMBER_ISA="avx2", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", "import ember as em; print(em._C.has_amx())"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr


@pytest.mark.parametrize("path", ["amx", "packed"])
def test_bf16_deep_k_and_batches(path, monkeypatch, rng):
    # k past several L2 row blocks of AMX panels, odd and ragged; batches of A against one B and against their own
    monkeypatch.setenv("EMBER_MATMUL_GEMM", path)
    for sa, ka, sb, kb in (((70, 4101), "c", (4101, 40), "t"), ((3, 40, 999), "t", (999, 50), "c"),
                           ((2, 33, 130), "s", (2, 130, 47), "s"), ((5, 20, 64), "c", (5, 64, 100), "b")):
        ta, a = operand(rng, sa, ka, "bfloat16")
        tb, b = operand(rng, sb, kb, "bfloat16")
        check(ta @ tb, a, b, "bfloat16", sa[-1])


ISA_SCRIPT = r"""
import sys
import numpy as np
import ember as em
rng = np.random.default_rng(11)
out = {"isa": em._C.isa()}
cases = [(1, 300, 77, "c"), (5, 300, 77, "t"), (16, 40, 130, "c"), (37, 600, 49, "c"), (50, 257, 95, "t"),
         (129, 70, 130, "t")]
for i, (m, k, n, kb) in enumerate(cases):
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, k) if kb == "t" else (k, n)).astype(np.float32)
    eb = em.tensor(b).t() if kb == "t" else em.tensor(b)
    out[f"a{i}"], out[f"b{i}"] = a, (b.T if kb == "t" else b)
    out[f"c{i}"] = (em.tensor(a) @ eb).numpy()
    out[f"h{i}"] = (em.tensor(a).to(em.bfloat16) @ eb.to(em.bfloat16)).to(em.float32).numpy()
# each ISA's rounding of the half results (per block, vectorised) against the scalar cast, bit for bit
xy = np.concatenate([np.array([[1024, 0.5], [1025, 0.5], [65504, 16], [np.inf, -np.inf], [1, 2.0**-8]], np.float32),
                     rng.standard_normal((40, 2)).astype(np.float32) * 300])
for dt in (em.float16, em.bfloat16):
    h = em.tensor(xy).to(dt)
    s = h.to(em.float32).numpy().sum(axis=1, keepdims=True)
    want = em.tensor(np.repeat(s, 37, axis=1)).to(dt).to(em.float32).numpy()
    got = (h @ em.ones((2, 37), dtype=dt)).to(em.float32).numpy()
    out[f"round_{dt}"] = np.array_equal(got, want, equal_nan=True)
np.savez(sys.argv[1], **out)
"""


def test_gemm_every_isa(tmp_path):
    # each SIMD level's register tile and packing (base 4x8, AVX2 6x16, AVX-512 14x32) the CPU can run
    seen = set()
    for isa in ("base", "avx2", "avx512"):
        path = tmp_path / f"{isa}.npz"
        env = dict(os.environ, EMBER_ISA=isa, EMBER_MATMUL_GEMM="packed", PYTHONPATH=os.pathsep.join(sys.path))
        r = subprocess.run([sys.executable, "-c", ISA_SCRIPT, str(path)], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        got = np.load(path)
        if str(got["isa"]) in seen:
            continue  # the CPU lacks this level: EMBER_ISA fell back to one already checked
        seen.add(str(got["isa"]))
        for i in range(6):
            a, b = got[f"a{i}"].astype(np.float64), got[f"b{i}"].astype(np.float64)
            check(em.tensor(got[f"c{i}"]), a, b, "float32", a.shape[1])
            ah, bh = rounded(got[f"a{i}"], "bfloat16"), rounded(got[f"b{i}"], "bfloat16")
            check(em.tensor(got[f"h{i}"]), ah, bh, "bfloat16", a.shape[1])
        assert got["round_ember.float16"] and got["round_ember.bfloat16"], isa
    assert "base" in seen


def test_bogus_matmul_gemm_env_warns():
    env = dict(os.environ, EMBER_MATMUL_GEMM="fast", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and "[EMBER_MATMUL_GEMM] unknown value 'fast'" in r.stderr
    for ok in ("amx", "packed", "blas"):
        env["EMBER_MATMUL_GEMM"] = ok
        r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", ["amx", "packed"])
def test_half_result_rounding(dt, path, monkeypatch, rng):
    # C = x + y (k = 2 against ones) is exact in float; its rounding to the half type, done per block by the
    # vector kernels, must match the scalar cast bit for bit: ties to even, overflow to inf, NaN, random values
    monkeypatch.setenv("EMBER_MATMUL_GEMM", path)
    if dt == "float16":
        special = [(1024, 0.5), (1025, 0.5), (65504, 32), (65504, 16), (-65504, -16), (np.inf, -np.inf),
                   (np.inf, 1), (3, 2.0**-10), (-1, 2.0**-11), (0.0, -0.0)]
    else:
        special = [(1, 2.0**-8), (1, 3 * 2.0**-8), (-1, -(2.0**-8)), (3.3e38, 3.3e38), (np.inf, -np.inf),
                   (-np.inf, 5), (1.5, 2.0**-9), (0.0, -0.0)]
    xy = np.array(special + [tuple(v) for v in rng.standard_normal((30, 2))], dtype=np.float32)
    a = em.tensor(xy).to(DT[dt])  # the special values are exact in the type
    a32 = a.to(em.float32).numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        want = em.tensor(np.repeat((a32[:, :1] + a32[:, 1:]), 37, axis=1)).to(DT[dt])
    got = a @ em.ones((2, 37), dtype=DT[dt])
    np.testing.assert_array_equal(got.to(em.float32).numpy(), want.to(em.float32).numpy())
    assert np.array_equal(np.signbit(got.to(em.float32).numpy()), np.signbit(want.to(em.float32).numpy()))
