"""The MSL emulator: Metal's execution model (bindings, positions, threadgroups, barriers, simdgroups, half,
bfloat, atomics) on plain MSL, its strictness (bounds, limits, a missing barrier) and its compile cache."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

# One source holds most test kernels, so the suite compiles (and caches) a single module for them.
SRC = r"""
#include <metal_stdlib>
using namespace metal;

constant float kScale = 0.5;

kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], constant uint& n [[buffer(3)]],
                 uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  y[gid] = a * x[gid] + y[gid] * kScale;
}

kernel void positions(device uint* out [[buffer(0)]],
                      uint3 tpig [[thread_position_in_grid]], uint3 tpitg [[thread_position_in_threadgroup]],
                      uint3 tgpig [[threadgroup_position_in_grid]], uint3 tptg [[threads_per_threadgroup]],
                      uint3 tpg [[threads_per_grid]], uint3 tgpg [[threadgroups_per_grid]],
                      uint tiitg [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint3 dtptg [[dispatch_threads_per_threadgroup]]) {
  const uint idx = (tpig.z * tpg.y + tpig.y) * tpg.x + tpig.x;
  device uint* o = out + idx * 16;
  uint3 v[5] = {tpitg, tgpig, tptg, tgpg, dtptg};
  for (int k = 0; k < 5; ++k) { o[3 * k] = v[k].x; o[3 * k + 1] = v[k].y; o[3 * k + 2] = v[k].z; }
  o[15] = (tiitg << 16) | (sg << 8) | lane;
}

// Tree reduction through threadgroup memory; the second copy lacks its barriers.
template <typename T>
kernel void tg_sum(device const T* x [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& n [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
                   uint row [[threadgroup_position_in_grid]], uint tpg [[threads_per_threadgroup]]) {
  threadgroup float shared[1024];
  float acc = 0.0f;
  for (uint i = tid; i < n; i += tpg) acc += float(x[row * n + i]);
  shared[tid] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = tpg / 2; s > 0; s >>= 1) {
    if (tid < s) shared[tid] += shared[tid + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) out[row] = shared[0];
}
template [[host_name("tg_sum_f32")]] [[kernel]] void tg_sum<float>(device const float* x [[buffer(0)]],
    device float* out [[buffer(1)]], constant uint& n [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
    uint row [[threadgroup_position_in_grid]], uint tpg [[threads_per_threadgroup]]);

// MLX's way to instantiate: decltype of the specialisation, no parameter list repeated.
template [[host_name("tg_sum_f16")]] [[kernel]] decltype(tg_sum<half>) tg_sum<half>;
#define instantiate_tg_sum(name, T) template [[host_name(name)]] [[kernel]] decltype(tg_sum<T>) tg_sum<T>;
instantiate_tg_sum("tg_sum_bf16", bfloat)

kernel void tg_sum_nobarrier(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                             constant uint& n [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
                             uint row [[threadgroup_position_in_grid]], uint tpg [[threads_per_threadgroup]]) {
  threadgroup float shared[1024];
  float acc = 0.0f;
  for (uint i = tid; i < n; i += tpg) acc += x[row * n + i];
  shared[tid] = acc;
  for (uint s = tpg / 2; s > 0; s >>= 1) {
    if (tid < s) shared[tid] += shared[tid + s];
  }
  if (tid == 0) out[row] = shared[0];
}

kernel void simd_ops(device const float* x [[buffer(0)]], device float* f [[buffer(1)]],
                     device uint* u [[buffer(2)]], constant uint& n [[buffer(3)]],
                     uint gid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  const float v = x[gid];
  f[0 * n + gid] = simd_sum(v);
  f[1 * n + gid] = simd_max(v);
  f[2 * n + gid] = simd_min(v);
  f[3 * n + gid] = simd_prefix_inclusive_sum(v);
  f[4 * n + gid] = simd_prefix_exclusive_sum(v);
  f[5 * n + gid] = simd_shuffle(v, ushort((lane * 7) % 32));
  f[6 * n + gid] = simd_shuffle_down(v, ushort(3));
  f[7 * n + gid] = simd_shuffle_up(v, ushort(5));
  f[8 * n + gid] = simd_shuffle_xor(v, ushort(6));
  f[9 * n + gid] = simd_broadcast(v, ushort(4));
  f[10 * n + gid] = simd_product(1.0f + v * 0.01f);
  u[0 * n + gid] = uint(uint64_t(simd_ballot(v > 0.5f)));
  u[1 * n + gid] = simd_all(v > 0.01f) ? 1u : 0u;
  u[2 * n + gid] = simd_any(v > 0.97f) ? 1u : 0u;
  u[3 * n + gid] = simd_is_first() ? 1u : 0u;
  f[11 * n + gid] = lane < 10 ? simd_sum(v) : -1.0f;  // divergent: only the lanes that call it take part
}

kernel void simd_mixed(device float* x [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = x[lane];
  if (lane < 10) v = simd_sum(v);  // the other lanes go on to simd_max: the emulator cannot order the two
  x[lane] = simd_max(v);
}

kernel void half_ops(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
                     device half* out [[buffer(2)]], device const float* c [[buffer(3)]],
                     device bfloat* bo [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  const half x = a[i], y = b[i];
  out[4 * i + 0] = x * y + x;
  out[4 * i + 1] = x / y - 1.5h;
  out[4 * i + 2] = half(float(x) * float(y));
  out[4 * i + 3] = abs(-x) + y;
  const bfloat p = bfloat(c[i]), q = bfloat(c[i] * 3.0f);
  bo[3 * i + 0] = p;
  bo[3 * i + 1] = p * q + p;
  bo[3 * i + 2] = bfloat(float(p) + float(q));
}

kernel void histogram(device const uint* x [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                      device atomic_float* total [[buffer(2)]], device uint* per_group [[buffer(3)]],
                      constant uint& n [[buffer(4)]], uint i [[thread_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  threadgroup atomic_uint count;
  if (tid == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (i < n) {
    atomic_fetch_add_explicit(&bins[x[i]], 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(total, 1.0f, memory_order_relaxed);
    atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) per_group[g] = atomic_load_explicit(&count, memory_order_relaxed);
}

kernel void big_threadgroup(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float big[9000];
  big[tid] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = big[0];
}

kernel void tg_overrun(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float small[16];
  small[tid] = 1.0f;  // 64 threads, 16 slots
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = small[tid % 16];
}

kernel void tg_overrun_ptr(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float small[16];
  threadgroup float* p = small;  // through a pointer: only the guard band after the variable sees it
  p[tid] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = small[tid % 16];
}

kernel void early_return(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  if (tid == 3) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = 1.0f;
}

constant float kTable[4] = {1.0, 2.0, 3.0, 4.0};
inline float lookup(constant float* table, uint i) { return table[i & 3]; }

kernel void msl_features(device const float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
                         device half4* h [[buffer(2)]], device uint* bits [[buffer(3)]],
                         uint2 pos [[thread_position_in_grid]], uint2 size [[threads_per_grid]]) {
  const uint i = pos.y * size.x + pos.x;
  const float4 v = x[i];
  float4 w = float4(v.zw, v.xy) * 2.0f + metal::precise::exp(float4(0.0f));
  w.x = metal::clamp(w.x, -1.0f, 1.0f);
  w.y = select(w.y, 7.0f, v.y > 0.5f);
  w.z += lookup(kTable, i);
  y[i] = w;
  h[i] = half4(v);
  bits[i] = as_type<uint>(v.x) ^ (v.w < numeric_limits<float>::infinity() ? 0u : 1u);
}

kernel void tg_param(device float* out [[buffer(0)]], threadgroup float* scratch [[threadgroup(0)]],
                     uint tid [[thread_index_in_threadgroup]], uint tpg [[threads_per_threadgroup]]) {
  scratch[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = scratch[tpg - 1 - tid];
}
"""


@pytest.fixture(autouse=True)
def _device_limits(monkeypatch):
    # These tests check Metal's model at the device's own limits (1024 threads, 32 KiB); the lower
    # per-pipeline limits CI's Metal run sets are tested in test_metal_limits.py.
    monkeypatch.delenv("EMBER_METAL_EMU_MAX_THREADS", raising=False)
    monkeypatch.delenv("EMBER_METAL_EMU_TG_MEMORY", raising=False)


def run(name, args, grid, group, **kw):
    _T.metal_emu_run(SRC, name, args, list(grid), list(group), label="test_kernels.metal", **kw)


def u32(v):
    return np.uint32(v).tobytes()


@pytest.mark.parametrize("n,group", [(1, 32), (1000, 64), (4099, 256), (77, 1)])
def test_axpy_binds_buffers_and_bytes(n, group):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = np.float32(1.75) * x + y * np.float32(0.5)
    run("axpy", [x, y, np.float32(1.75).tobytes(), u32(n)], [n], [group])
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("grid,group", [((37, 5, 3), (8, 4, 2)), ((64, 1, 1), (64, 1, 1)), ((5, 9, 1), (4, 4, 1))])
def test_thread_positions_follow_dispatch_threads(grid, group):
    gx, gy, gz = grid
    out = np.zeros((gz, gy, gx, 16), np.uint32)
    run("positions", [out], grid, group)
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    pos = np.stack([x, y, z], -1)
    g = np.array(group)
    tgpig = pos // g
    tpitg = pos % g
    tptg = np.minimum(g, np.array(grid) - tgpig * g)  # edge threadgroups are smaller
    tgpg = np.broadcast_to(-(-np.array(grid) // g), pos.shape)
    np.testing.assert_array_equal(out[..., 0:3], tpitg)
    np.testing.assert_array_equal(out[..., 3:6], tgpig)
    np.testing.assert_array_equal(out[..., 6:9], tptg)
    np.testing.assert_array_equal(out[..., 9:12], tgpg)
    np.testing.assert_array_equal(out[..., 12:15], np.broadcast_to(g, pos.shape))
    tiitg = (tpitg[..., 2] * tptg[..., 1] + tpitg[..., 1]) * tptg[..., 0] + tpitg[..., 0]
    np.testing.assert_array_equal(out[..., 15], (tiitg << 16) | ((tiitg // 32) << 8) | (tiitg % 32))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("rows,cols,group", [(7, 1000, 256), (33, 64, 64), (3, 5000, 1024), (50, 3, 2)])
def test_threadgroup_reduction_with_barriers(rows, cols, group, dtype):
    # f16/bf16 are instantiated the MLX way: `decltype(tg_sum<half>) tg_sum<half>`, one of them by a macro
    dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    x = np.random.default_rng(cols).random((rows, cols), dtype=np.float32).astype(dt)
    out = np.zeros(rows, np.float32)
    run(f"tg_sum_{dtype}", [x, out, u32(cols)], [rows * group], [group])
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1), rtol=1e-5)


def test_missing_barrier_fails_deterministically():
    # the same reduction without its barriers: the varying thread order makes it read stale memory
    rows, cols, group = 64, 256, 64
    x = np.random.default_rng(0).random((rows, cols), dtype=np.float32)
    good, bad, bad2 = (np.zeros(rows, np.float32) for _ in range(3))
    run("tg_sum_f32", [x, good, u32(cols)], [rows * group], [group])
    run("tg_sum_nobarrier", [x, bad, u32(cols)], [rows * group], [group])
    run("tg_sum_nobarrier", [x, bad2, u32(cols)], [rows * group], [group])
    np.testing.assert_allclose(good, x.sum(1, dtype=np.float64), rtol=1e-5)
    wrong = ~np.isclose(bad, x.sum(1), rtol=1e-5)
    assert wrong.sum() > rows // 2, f"only {wrong.sum()} of {rows} rows went wrong without the barriers"
    np.testing.assert_array_equal(bad, bad2)  # the order varies, but the same way on every run


def simd_model(x, group):
    """Expected simd_* results: lanes of a simdgroup are consecutive threads of one threadgroup."""
    n = x.size
    f = np.full((12, n), np.nan, np.float32)
    u = np.zeros((4, n), np.uint32)
    defined = np.ones((12, n), bool)
    for g0 in range(0, n, group):
        for s0 in range(g0, min(n, g0 + group), 32):
            idx = np.arange(s0, min(n, s0 + 32, g0 + group))
            v = x[idx]
            m = len(idx)
            lanes = np.arange(m)
            f[0, idx] = v.sum(dtype=np.float32)
            f[1, idx], f[2, idx] = v.max(), v.min()
            f[3, idx] = np.cumsum(v, dtype=np.float32)
            f[4, idx] = np.concatenate([[0], np.cumsum(v, dtype=np.float32)[:-1]])
            src = (lanes * 7) % 32
            f[5, idx] = np.where(src < m, v[np.minimum(src, m - 1)], np.nan)
            defined[5, idx] = src < m
            down = lanes + 3
            f[6, idx] = np.where(down < 32, v[np.minimum(down, m - 1)], v)
            defined[6, idx] = (down >= 32) | (down < m)
            up = lanes - 5
            f[7, idx] = np.where(up >= 0, v[np.maximum(up, 0)], v)
            xor = lanes ^ 6
            f[8, idx] = v[np.minimum(xor, m - 1)]
            defined[8, idx] = xor < m
            f[9, idx] = v[4] if m > 4 else np.nan
            defined[9, idx] = m > 4
            f[10, idx] = np.prod(np.float32(1) + v * np.float32(0.01), dtype=np.float32)
            f[11, idx] = np.where(lanes < 10, v[: min(m, 10)].sum(dtype=np.float32), -1)
            u[0, idx] = sum(1 << int(i) for i in np.nonzero(v > 0.5)[0])
            u[1, idx] = (v > 0.01).all()
            u[2, idx] = (v > 0.97).any()
            u[3, idx] = lanes == 0
    return f, u, defined


@pytest.mark.parametrize("n,group", [(64, 64), (100, 64), (250, 96), (1000, 1024)])
def test_simdgroup_ops_match_a_32_wide_model(n, group):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    f = np.zeros((12, n), np.float32)
    u = np.zeros((4, n), np.uint32)
    run("simd_ops", [x, f, u, u32(n)], [n], [group])
    want_f, want_u, defined = simd_model(x, group)
    np.testing.assert_allclose(np.where(defined, f, 0), np.where(defined, want_f, 0), rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(u, want_u)


def test_half_and_bfloat_round_once_per_operation():
    rng = np.random.default_rng(5)
    n = 4096
    a = (rng.standard_normal(n) * 4).astype(np.float16)
    b = (rng.standard_normal(n) * 4 + 0.1).astype(np.float16)
    c = (rng.standard_normal(n) * 100).astype(np.float32)
    out = np.zeros((n, 4), np.float16)
    bo = np.zeros((n, 3), ml_dtypes.bfloat16)
    run("half_ops", [a, b, out, c, bo], [n], [128])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[:, 0], a * b + a)
        np.testing.assert_array_equal(out[:, 1], a / b - np.float16(1.5))
        np.testing.assert_array_equal(out[:, 2], (a.astype(np.float32) * b.astype(np.float32)).astype(np.float16))
        np.testing.assert_array_equal(out[:, 3], np.abs(-a) + b)
    p = c.astype(ml_dtypes.bfloat16)
    q = (c * np.float32(3)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bo[:, 0], p)
    np.testing.assert_array_equal(bo[:, 1], p * q + p)
    np.testing.assert_array_equal(bo[:, 2], (p.astype(np.float32) + q.astype(np.float32)).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("n", [1, 1000, 20000])
def test_device_and_threadgroup_atomics(n):
    x = np.random.default_rng(n).integers(0, 17, n).astype(np.uint32)
    bins = np.zeros(17, np.uint32)
    total = np.zeros(1, np.float32)
    groups = -(-n // 128)
    per_group = np.zeros(groups, np.uint32)
    run("histogram", [x, bins, total, per_group, u32(n)], [groups * 128], [128])
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=17))
    assert total[0] == n
    np.testing.assert_array_equal(per_group, np.minimum(128, n - 128 * np.arange(groups)))


def test_vectors_swizzles_and_metal_namespace():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 10, 4)).astype(np.float32)
    x[0, 0, 3] = np.inf
    y = np.zeros_like(x)
    h = np.zeros(x.shape, np.float16)
    bits = np.zeros((6, 10), np.uint32)
    run("msl_features", [x, y, h, bits], [10, 6], [4, 2])
    w = np.concatenate([x[..., 2:], x[..., :2]], -1) * np.float32(2) + np.float32(1)
    w[..., 0] = np.clip(w[..., 0], -1, 1)
    w[..., 1] = np.where(x[..., 1] > 0.5, np.float32(7), w[..., 1])
    w[..., 2] += (np.arange(60) % 4 + 1).astype(np.float32).reshape(6, 10)
    np.testing.assert_array_equal(y, w)
    np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_array_equal(bits, x[..., 0].view(np.uint32) ^ (x[..., 3] == np.inf))


def test_threadgroup_memory_parameter():
    out = np.zeros(64, np.float32)
    run("tg_param", [out], [64], [64], threadgroup_memory=[64 * 4])
    np.testing.assert_array_equal(out, np.arange(63, -1, -1, dtype=np.float32))
    with pytest.raises(em.EmberError, match=r"threadgroup\(0\)"):
        run("tg_param", [out], [64], [64])


def test_out_of_bounds_access_names_kernel_buffer_and_offset():
    x = np.ones(100, np.float32)
    y = np.ones(10, np.float32)
    before = y.copy()
    with pytest.raises(em.IndexOutOfRange, match=r"^\[metal\] kernel 'axpy'.*buffer\(1\) at byte offset (\d+)") as e:
        run("axpy", [x, y, np.float32(1).tobytes(), u32(100)], [100], [32])
    assert int(e.value.args[0].split("byte offset ")[1].split()[0]) >= 40
    np.testing.assert_array_equal(y, before)  # a failed command buffer writes nothing back
    ok = np.ones(100, np.float32)
    run("axpy", [x, ok, np.float32(1).tobytes(), u32(100)], [100], [32])  # and the emulator goes on working
    np.testing.assert_array_equal(ok, np.full(100, 1.5, np.float32))


@pytest.mark.parametrize("case,match", [
    ("threads", r"\[metal\] kernel 'axpy': a threadgroup of 1025 threads; Metal allows at most 1024"),
    ("unbound", r"\[metal\] kernel 'axpy': buffer\(1\) is not bound"),
    ("short", r"\[metal\] kernel 'axpy': buffer\(3\) has 2 bytes; the kernel reads 4"),
    ("tgmem", r"\[metal\] kernel 'big_threadgroup'.*threadgroup memory reaches 36000 bytes; Metal allows 32768"),
    ("tgarray", r"\[metal\] kernel 'tg_overrun'.*thread \((\d+), 0, 0\): out-of-bounds access to a threadgroup array at "
                r"index \1 \(it has 16 elements\)"),
    ("tgptr", r"\[metal\] kernel 'tg_overrun_ptr'.*wrote past the end of a threadgroup variable \(into the guard bytes"),
    ("early", r"\[metal\] kernel 'early_return'.*threadgroup_barrier reached by 63 of the group's 64 threads"),
    ("missing", r"\[metal\] test_kernels.metal defines no kernel 'nope' \(it defines: axpy, positions, tg_sum_f32, tg_sum_f16, tg_sum_bf16"),
    ("grid", r"\[metal\] grid_threads takes 1 to 3 sizes"),
    ("noncontig", r"^\[metal\] argument 1 must be a writable C-contiguous array"),
    ("type", r"^\[metal\] argument 0 must be a numpy array, bytes or None"),
    ("bytes", r"^\[metal\] set_bytes: 5000 bytes; Metal allows 4096"),
    ("diverge", r"\[metal\] kernel 'simd_mixed'.*lanes of simdgroup 0 reached different simd_\* operations"),
])
def test_bad_launches_raise_clear_errors(case, match):
    x, y = np.ones(64, np.float32), np.ones(64, np.float32)
    args = [x, y, np.float32(1).tobytes(), u32(64)]
    with pytest.raises(em.EmberError, match=match):
        if case == "threads":
            run("axpy", args, [2048], [1025])
        elif case == "unbound":
            run("axpy", [x, None, args[2], args[3]], [64], [64])
        elif case == "short":
            run("axpy", [x, y, args[2], b"\0\0"], [64], [64])
        elif case == "tgmem":
            run("big_threadgroup", [y], [64], [64])
        elif case == "tgarray":
            run("tg_overrun", [y], [64], [64])
        elif case == "tgptr":
            run("tg_overrun_ptr", [y], [64], [64])
        elif case == "early":
            run("early_return", [y], [64], [64])
        elif case == "noncontig":
            run("axpy", [x, np.ones(128, np.float32)[::2], args[2], args[3]], [64], [64])
        elif case == "type":
            run("axpy", [[1.0] * 64, y, args[2], args[3]], [64], [64])
        elif case == "bytes":
            run("axpy", [x, y, bytes(5000), args[3]], [64], [64])
        elif case == "diverge":
            run("simd_mixed", [y], [32], [32])
        elif case == "missing":
            run("nope", args, [64], [64])
        else:
            run("axpy", args, [1, 1, 1, 1], [64])


def test_compile_error_carries_the_compilers_log():
    bad = "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* x [[buffer(0)]],\n" \
          "              uint i [[thread_position_in_grid]]) {\n  x[i] = undeclared_name * 2.0f;\n}\n"
    with pytest.raises(em.EmberError) as e:
        _T.metal_emu_run(bad, "k", [np.zeros(4, np.float32)], [4], [4], label="bad.metal")
    msg = str(e.value)
    assert msg.startswith("[metal] compiling bad.metal failed:")
    assert "bad.metal:5" in msg and "undeclared_name" in msg


def test_unbindable_parameter_is_an_error():
    src = "kernel void k(device float* x [[buffer(0)]], uint i) { x[i] = 1.0f; }\n"
    with pytest.raises(em.EmberError, match=r"parameter 'i' has no binding attribute"):
        _T.metal_emu_run(src, "k", [np.zeros(4, np.float32)], [4], [4], label="unbound.metal")


FC_SRC = r"""
#include <metal_stdlib>
using namespace metal;
constant int kMul [[function_constant(0)]];
constant float kAdd [[function_constant(1)]];
kernel void fc(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = x[i] * kMul + kAdd; }
"""


def test_function_constants_specialise_the_pipeline():
    for mul, add in [(3, 0.25), (-2, 1.5)]:
        x = np.arange(8, dtype=np.float32)
        _T.metal_emu_run(FC_SRC, "fc", [x], [8], [8], constants=[(0, "int", mul), (1, "float", add)], label="fc.metal")
        np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32) * mul + np.float32(add))
    with pytest.raises(em.EmberError, match="function constant 1 has no value"):
        _T.metal_emu_run(FC_SRC, "fc", [x], [8], [8], constants=[(0, "int", 1)], label="fc.metal")


def test_disk_cache_is_keyed_by_source_and_reused_across_processes(tmp_path):
    code = (
        "import numpy as np, ember as em\n"
        "from ember import _C_testing as _T\n"
        "src = 'kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += %s; }'\n"
        "x = np.zeros(4, np.float32)\n"
        "_T.metal_emu_run(src, 'k', [x], [4], [4])\n"
        "s = _T.metal_emu_stats()\n"
        "print(x[0], s['compiles'], s['disk_hits'])\n"
    )
    env = dict(os.environ, EMBER_METAL_CACHE=str(tmp_path))

    def once(value):
        p = subprocess.run([sys.executable, "-c", code % value], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    assert once("1.0f") == ["1.0", "1", "0"]  # compiled
    assert once("1.0f") == ["1.0", "0", "1"]  # the same source: loaded from disk
    assert once("2.0f") == ["2.0", "1", "0"]  # another source: never the cached one
    assert len(list(tmp_path.glob("*.so"))) == 2


def test_backend_reports_the_emulator_only_when_asked(monkeypatch):
    monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal.backend() == "emulator"
    monkeypatch.delenv("EMBER_METAL")
    assert em.metal.backend() == ("apple" if _T.metal_apple_available() else None)
    assert _T.metal_apple_built or not _T.metal_apple_available()
    assert em.metal_is_available() is (em.metal.backend() == "apple")  # the emulator does not claim a device yet
