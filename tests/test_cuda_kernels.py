"""ember's own kernels on CUDA: every metal/*.metal file translated to CUDA C++ (cpp/cuda/kernels.h), compiled by
NVRTC for sm_80 and sm_90 and by the CUDA emulator, and translated kernels launched by the contract on the emulator
and compared with numpy (docs/design/cuda-kernels.md)."""
import importlib.metadata as md
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ember as em
from ember import _C
from ember import _C_testing as T

FILES = sorted(T.cuda_kernel_files())
# Every test here drives the translated sources directly (explicit launches on the emulator, NVRTC), whatever the
# device under test: they run once per CI, in the CPU suite.
pytestmark = pytest.mark.cpu_only(reason="checks the translated kernel sources directly, device-independent")


def _has_nvrtc():
    try:
        md.distribution("nvidia-cuda-nvrtc")
        return True
    except md.PackageNotFoundError:
        return False


def _u32(*v):
    return [struct.pack("<I", x) for x in v]


def test_every_metal_file_is_translated():
    assert len(FILES) >= 22 and "unary.metal" in FILES and "softmax.metal" in FILES
    for f in FILES:
        d = T.cuda_translated(f)
        assert d["label"] == f"{f} (CUDA)"
        assert d["kernels"], f
        for name, (buffers, value_size, tgs) in d["kernels"].items():
            params = re.search(r'extern "C" __global__ void ' + re.escape(name) + r"\(([^)]*)\)", d["text"])
            assert params, name
            decl = [p.strip() for p in params.group(1).split(",")]
            assert decl[-9:] == [f"unsigned int em_{w}_{a}" for w in ("grid", "off", "group") for a in "xyz"]
            bound = [b for b in buffers if b != "-"]
            assert len(decl) == len(bound) + len(tgs) + 9, name
            assert len(value_size) == len(buffers)
            for kind, size, p in zip(bound, [s for b, s in zip(buffers, value_size) if b != "-"], decl):
                assert (kind == "p") == p.split()[-2].endswith("*"), (name, p)
                assert (size > 0) == (kind == "v"), (name, p)
        assert T.cuda_translated(f) is not None  # cached: the same answer again


def test_float64_variants_retype_the_float32_kernels():
    # CUDA's float64 (Metal has none): each file's float64 variant is its float32 kernels retyped to double
    # (cpp/cuda/kernels.h), so every float32 kernel has a float64 twin with double-sized float parameters.
    for f in FILES:
        d, v = T.cuda_translated(f), T.cuda_translated(f, True)
        assert v["label"] == f"{f} (CUDA, float64)"
        assert all("float64" in name for name in v["kernels"]), f
        want = {n.replace("float32", "float64") for n in d["kernels"] if "float32" in n}
        assert want <= set(v["kernels"]) | set(d["kernels"]), (f, sorted(want - set(v["kernels"]))[:5])
        body = v["text"][len('#line 1 "msl_cuda.h"\n' + T.cuda_prelude()):]
        assert not re.search(r"\bfloat[234]?\b", body), (f, re.search(r".*\bfloat[234]?\b.*", body).group(0))
    k = T.cuda_translated("unary.metal", True)["kernels"]
    assert k["unary_contig_exp_float64"] == ("ppvv", [0, 0, 4, 16], [])  # UnaryParams of two doubles
    # float32 <-> float64 casts sit in copy.metal's own translation (both types in one kernel)
    c = T.cuda_translated("copy.metal")["kernels"]
    assert "cast_contig_float32_float64" in c and "cast_strided_float64_float32" in c


def test_signatures_follow_the_metal_parameters():
    k = T.cuda_translated("unary.metal")["kernels"]
    assert k["unary_contig_exp_float32"] == ("ppvv", [0, 0, 4, 8], [])  # in, out, uint n, UnaryParams
    assert k["unary_strided_exp_float32"] == ("ppvvvppv", [0, 0, 4, 8, 4, 0, 0, 8], [])
    s = T.cuda_translated("softmax.metal")["kernels"]
    assert s["softmax_fwd_block_float32"] == ("ppv", [0, 0, 320], [])  # SoftmaxArgs: 2 RowLayouts + 2 longs


def test_unknown_file_and_untranslatable_kernels_are_clear_errors():
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] no kernel file 'nope\.metal' \(ember's are: .*unary\.metal"):
        T.cuda_translated("nope.metal")
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] k\.metal: kernel 'f': parameter 'i' has no binding"):
        T.cuda_rewrite("kernel void f(device float* x [[buffer(0)]], uint i) { x[i] = 1.0f; }", "k.metal")
    with pytest.raises(em.EmberValueError, match=r"unsupported attribute \[\[stage_in\]\]"):
        T.cuda_rewrite("kernel void f(device float* x [[buffer(0)]], float v [[stage_in]]) { x[0] = v; }", "k.metal")
    with pytest.raises(em.EmberValueError, match=r"the size of by-value parameter 'a' \(Unknown\) is not known"):
        T.cuda_rewrite("kernel void f(device float* x [[buffer(0)]], constant Unknown& a [[buffer(1)]]) {}", "k.metal")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_every_file(arch):
    if not _has_nvrtc():
        with pytest.raises(em.EmberValueError, match=r"pip install nvidia-cuda-nvrtc"):
            em.cuda.nvrtc_library()
        return

    def compile_one(job):  # NVRTC runs without the GIL: the files compile side by side, one per core
        f, f64 = job
        d = T.cuda_translated(f, f64)
        opts = ["-default-device", "--std=c++17"]
        return f, d, _C._cuda_nvrtc_ptx(em.cuda.nvrtc_library(), d["text"], d["label"], opts, arch)

    jobs = [(f, f64) for f in FILES for f64 in (False, True)]  # each file and its float64 variant
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        done = list(pool.map(compile_one, jobs))
    assert [f for f, _, _ in done] == [f for f, _ in jobs]
    for f, d, ptx in done:
        assert f".target {arch}" in ptx, f
        entries = set(re.findall(r"\.entry (\w+)\(", ptx))
        assert set(d["kernels"]) <= entries, (f, sorted(set(d["kernels"]) - entries)[:5])


def test_nvrtc_reports_metal_lines():
    if not _has_nvrtc():
        return
    d = T.cuda_translated("unary.metal")
    bad = d["text"].replace("static float f(float x, constant UnaryParams& p)",
                            "static float f(float x, constant UnaryParams& p)", 1)
    # a use of an undefined name on a line the line markers attribute to unary.metal
    bad = bad.replace("EMBER_FUNARY(", "EMBER_FUNARY(", 1).replace("return x < 0.0f ? -r : r;", "return nope;", 1)
    with pytest.raises(em.EmberValueError, match=r"(?s)unary\.metal\(\d+\).*nope"):
        _C._cuda_nvrtc_ptx(em.cuda.nvrtc_library(), bad, d["label"], ["-default-device"], "sm_90")


@pytest.mark.parametrize("f64", [False, True], ids=["", "float64"])
@pytest.mark.parametrize("f", FILES)
def test_emulator_compiles_every_file(f, f64):
    d = T.cuda_translated(f, f64)
    T.cuda_emu_compile(d["text"], d["label"])


def _dispatch(text, label, name, args, grid, group, shared=0):
    """A dispatch as CudaDevice makes it (kernels.h): per axis the whole groups, then an edge group of the grid's
    rest as a launch of its own with the smaller block; one launch per combination."""
    axes = [[(0, g // s, s)] * (g // s > 0) + [(g // s, 1, g % s)] * (g % s > 0) for g, s in zip(grid, group)]
    for px in axes[0]:
        for py in axes[1]:
            for pz in axes[2]:
                tail = _u32(*grid) + _u32(px[0], py[0], pz[0]) + _u32(*group)
                T.cuda_emu_launch(text, label, name, list(args) + tail, [px[1], py[1], pz[1]], [px[2], py[2], pz[2]],
                                  shared)


def _launch(f, name, args, grid, block, shared=0):
    d = T.cuda_translated(f)
    _dispatch(d["text"], d["label"], name, args, grid, block, shared)


@pytest.mark.parametrize("n", [1, 7, 1000, 4099])
def test_unary_contig_exp_runs_on_the_emulator(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    # 4 elements per thread; 64-thread groups: the last group is an edge group (a smaller block of its own)
    _launch("unary.metal", "unary_contig_exp_float32", [x, y, *_u32(n), struct.pack("<ff", 0, 0)],
            ((n + 3) // 4, 1, 1), (64, 1, 1))
    np.testing.assert_allclose(y, np.exp(x), rtol=2e-6)


def test_float64_kernels_run_in_double_on_the_emulator():
    # the float64 variants compute in double: results a float computation could not give
    rng = np.random.default_rng(5)
    n = 1001
    x = rng.standard_normal(n) * 3
    y = np.full(n, np.nan)
    d = T.cuda_translated("unary.metal", True)
    _dispatch(d["text"], d["label"], "unary_contig_erf_float64", [x, y, *_u32(n), struct.pack("<dd", 0, 0)],
              ((n + 3) // 4, 1, 1), (64, 1, 1))
    from math import erf
    np.testing.assert_allclose(y, [erf(v) for v in x], rtol=1e-14, atol=1e-300)
    _dispatch(d["text"], d["label"], "unary_contig_affine_float64",
              [x, y, *_u32(n), struct.pack("<dd", 1 + 2.0 ** -40, 1e-13)], ((n + 3) // 4, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(y, x * (1 + 2.0 ** -40) + 1e-13)
    rows = 3
    xs = rng.standard_normal((rows, 300)) * 4
    ys = np.zeros_like(xs)
    args = _row_layout(0, 1, [rows], [300]) + _row_layout(0, 1, [rows], [300]) + struct.pack("<qq", 300, rows)
    s = T.cuda_translated("softmax.metal", True)
    _dispatch(s["text"], s["label"], "softmax_fwd_block_float64", [xs, ys, args], (64, rows, 1), (64, 1, 1))
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(ys, e / e.sum(1, keepdims=True), rtol=1e-13, atol=1e-300)


def test_unary_strided_affine_half_runs_on_the_emulator():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((5, 9)).astype(np.float16)
    view = base.T[1:, ::2]  # shape (8, 3), strides in elements (1, 18), offset 2 * 9 ... as numpy has it
    shape = np.array(view.shape, np.uint32)
    strides = np.array([s // 2 for s in view.strides], np.int64)
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 2
    n = view.size
    out = np.zeros(n, np.float16)
    _launch("unary.metal", "unary_strided_affine_float16",
            [base.reshape(-1).copy(), out, *_u32(n), struct.pack("<ff", 1.5, -0.25), *_u32(2), shape, strides,
             struct.pack("<q", offset)], (n, 1, 1), (32, 1, 1))
    want = (view.astype(np.float32) * 1.5 - 0.25).astype(np.float16).reshape(-1)
    np.testing.assert_array_equal(out, want)


def test_binary_strided_add_broadcast_runs_on_the_emulator():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    n = a.size
    out = np.zeros(n, np.float32)
    shape = np.array([4, 6], np.uint32)
    _launch("binary.metal", "binary_strided_add_float32",
            [a.reshape(-1).copy(), b, out, *_u32(n), *_u32(2), shape, np.array([6, 1], np.int64),
             np.array([0, 1], np.int64), np.array([0, 0], np.int64)], (n, 1, 1), (16, 1, 1))
    np.testing.assert_array_equal(out.reshape(4, 6), a + b)


def _row_layout(offset, cstride, shape, stride):
    nd = len(shape)
    return struct.pack("<3q8q8q", offset, cstride, nd, *(list(shape) + [0] * (8 - nd)),
                       *(list(stride) + [0] * (8 - nd)))


@pytest.mark.parametrize("kind,n,threads", [("block", 300, 64), ("simd", 70, 64), ("looped", 5000, 128)])
def test_softmax_rows_with_simd_ops_and_threadgroup_memory(kind, n, threads):
    rng = np.random.default_rng(n)
    rows = 5
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    y = np.zeros((rows, n), np.float32)
    args = _row_layout(0, 1, [rows], [n]) + _row_layout(0, 1, [rows], [n]) + struct.pack("<qq", n, rows)
    if kind == "simd":  # one simdgroup per row: threads // 32 rows per group
        nsg = threads // 32
        grid = (threads, (rows + nsg - 1) // nsg, 1)
    else:  # one group per row
        grid = (threads, rows, 1)
    _launch("softmax.metal", f"softmax_fwd_{kind}_float32", [x, y, args], grid, (threads, 1, 1))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


SIMD_MSL = r"""
kernel void simd_ops(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                     device atomic_float* total [[buffer(2)]], device atomic_uint* count [[buffer(3)]],
                     constant uint& n [[buffer(5)]], uint gid [[thread_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const float v = x[gid];
  device float* o = out + gid * 7;
  o[0] = simd_sum(v);
  o[1] = simd_prefix_inclusive_sum(v);
  o[2] = simd_max(v);
  o[3] = simd_broadcast(v, 1);
  o[4] = simd_shuffle_xor(v, 1);
  const half h = half(v) * half(3);
  const float2 f2 = float2(v, 1.0) + float2(0.5);
  o[5] = float(h) + f2.y;
  o[6] = float(lane);
  atomic_fetch_add_explicit(total, v, memory_order_relaxed);
  atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
}
kernel void reverse_in_group(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                             threadgroup float* scratch [[threadgroup(0)]], threadgroup float* other [[threadgroup(1)]],
                             uint gid [[thread_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                             uint2 tptg [[threads_per_threadgroup]]) {
  scratch[tid] = x[gid] * 2.0;
  other[tid] = 1.0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = scratch[tptg.x - 1 - tid] + other[tid];
}
"""


def _msl(src):
    return T.cuda_prelude() + "\n" + T.cuda_rewrite(src, "simd.metal")


@pytest.mark.parametrize("n,block", [(64, 64), (100, 64), (40, 48)])
def test_simd_ops_and_atomics_in_partial_groups(n, block):
    # 100 / 64: the second group has 36 threads (a full warp and one of 4 lanes); 40 / 48: one group whose
    # second warp has 8 lanes. MSL's simd ops act on the lanes that exist.
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros((n, 7), np.float32)
    total = np.zeros(1, np.float32)
    count = np.zeros(1, np.uint32)
    _dispatch(_msl(SIMD_MSL), "simd.metal (CUDA)", "simd_ops", [x, out, total, count, *_u32(n)], (n, 1, 1),
              (block, 1, 1))
    for i in range(n):
        g0 = i // block * block
        w0 = g0 + (i - g0) // 32 * 32
        warp = x[w0:min(w0 + 32, g0 + block, n)]
        lane = i - w0
        np.testing.assert_allclose(out[i, 0], warp.sum(dtype=np.float64), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[i, 1], warp[:lane + 1].sum(dtype=np.float64), rtol=1e-5, atol=1e-6)
        assert out[i, 2] == warp.max()
        assert out[i, 3] == warp[1]
        if (lane ^ 1) < len(warp):
            assert out[i, 4] == warp[lane ^ 1]
        assert out[i, 5] == np.float32(np.float16(np.float16(x[i]) * np.float16(3))) + np.float32(1.5)
        assert out[i, 6] == lane
    np.testing.assert_allclose(total[0], x.sum(dtype=np.float64), rtol=1e-5, atol=1e-5)
    assert count[0] == n


def test_threadgroup_parameters_are_offsets_in_dynamic_shared_memory():
    n, block = 96, 32
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    _dispatch(_msl(SIMD_MSL), "simd.metal (CUDA)", "reverse_in_group", [x, out, *_u32(0, 128)], (n, 1, 1),
              (block, 1, 1), 256)
    np.testing.assert_array_equal(out, (x.reshape(3, 32)[:, ::-1] * 2 + 1).reshape(-1))
    # a barrier kernel over a grid that is no multiple of its group: the edge group (8 threads) is a block of its
    # own, so its barrier sees all of it and threads_per_threadgroup is 8, as Metal's partial group
    out[:] = -1
    _dispatch(_msl(SIMD_MSL), "simd.metal (CUDA)", "reverse_in_group", [x, out, *_u32(0, 128)], (72, 1, 1),
              (block, 1, 1), 256)
    want = np.concatenate([x[:64].reshape(2, 32)[:, ::-1].reshape(-1), x[64:72][::-1]]) * 2 + 1
    np.testing.assert_array_equal(out[:72], want)
    assert np.all(out[72:] == -1)
