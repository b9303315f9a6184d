"""The MSL emulator's stricter modes: asynchronous commit with shuffled dispatch and command-buffer order,
bounds checked against a storage's logical end, read-only inputs, em.metal.Kernel outputs as versioned
writes, grids near 2^32, function constants checked by one parser, and GPU-math mode."""
import math
import re

import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

PIPE = """
#include <metal_stdlib>
using namespace metal;
kernel void produce(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f; }
kernel void consume(device const float* y [[buffer(0)]], device float* z [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) { z[i] = y[i] * 2.0f; }
kernel void fill7(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 7.0f; }
"""
N = 64


@pytest.fixture
def metal(monkeypatch):
    monkeypatch.setenv("EMBER_METAL", "emulate")
    return em.Device("metal")


def pipeline_steps(between):
    """produce then consume, with `between` (a list of steps) in the middle."""
    return ([("dispatch", "produce", [0, 1], [N], [32])] + between +
            [("dispatch", "consume", [1, 2], [N], [32])])


def run_pipeline(between, monkeypatch, seed):
    monkeypatch.setenv("EMBER_METAL_EMU_SEED", str(seed))
    x = np.arange(N, dtype=np.float32)
    y, z = np.zeros(N, np.float32), np.zeros(N, np.float32)
    _T.metal_emu_sequence(PIPE, [x, y, z], pipeline_steps(between))
    return z, (x + 1) * 2


def test_commit_is_asynchronous_a_host_read_before_the_wait_sees_old_data():
    y = np.zeros(N, np.float32)
    reads = _T.metal_emu_sequence(PIPE, [y], [("dispatch", "fill7", [0], [N], [32]), ("commit",), ("read", 0)])
    assert np.frombuffer(reads[0], np.float32)[:N].tolist() == [0.0] * N  # committed, not yet run
    assert y.tolist() == [7.0] * N  # after the wait


@pytest.mark.parametrize("between,always_right", [
    ([], False),                                               # no barrier: the consumer may run first
    ([("barrier",)], True),
    ([("commit",)], False),                                    # another command buffer, no fence
    ([("update_fence", 0), ("commit",), ("wait_fence", 0)], True),
])
def test_missing_barrier_or_fence_shows_in_some_seeded_order(between, always_right, monkeypatch):
    results = [run_pipeline(between, monkeypatch, seed) for seed in range(16)]
    right = [np.array_equal(z, want) for z, want in results]
    if always_right:
        assert all(right)
    else:
        assert not all(right) and any(right)
        # the seed reproduces the order
        bad = right.index(False)
        z, want = run_pipeline(between, monkeypatch, bad)
        assert not np.array_equal(z, want)


def test_inorder_mode_runs_at_commit(monkeypatch):
    monkeypatch.setenv("EMBER_METAL_EMU_ORDER", "inorder")
    for seed in range(4):
        z, want = run_pipeline([], monkeypatch, seed)
        np.testing.assert_array_equal(z, want)


def test_backend_ops_pass_under_many_orders(metal, monkeypatch, rng):
    # a chain of 60 dispatches spans two command buffers (a commit every 40): the hazard tracker's
    # barriers and the fence between the buffers keep every seeded order right
    a = rng.standard_normal((33, 17)).astype(np.float32)
    for seed in range(3):
        monkeypatch.setenv("EMBER_METAL_EMU_SEED", str(seed))
        t, want = em.tensor(a, device=metal), a.copy()
        for _ in range(30):
            t, want = t * 0.5 + 1, want * np.float32(0.5) + np.float32(1)
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)


PAST_END = """
#include <metal_stdlib>
using namespace metal;
kernel void past_end(device float* y [[buffer(0)]], constant uint& at [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { y[at] = 1.0f; }
kernel void read_past_end(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                          constant uint& at [[buffer(2)]], uint i [[thread_position_in_grid]]) { y[0] = x[at]; }
"""


def test_write_one_past_a_pooled_storages_end_is_caught(metal):
    k = em.metal.Kernel(PAST_END, "past_end")
    y = em.MetalStorage.empty(10, em.float32)  # the pool hands out at least 48 bytes: slack after 40
    k(outputs=[y], scalars=[np.uint32(9)], grid_threads=1, threads_per_threadgroup=1)
    assert y.numpy()[9] == 1.0
    k(outputs=[y], scalars=[np.uint32(10)], grid_threads=1, threads_per_threadgroup=1)
    with pytest.raises(em.IndexOutOfRange, match=r"^\[metal\] kernel 'past_end'.*buffer\(0\) at byte offset 40 "
                                                 r"\(4 bytes; the buffer has 40\)"):
        y.numpy()
    # a view's storage: the extent is the storage's end, seen from the bound offset
    x = em.MetalStorage.empty(3, em.float32)
    r = em.metal.Kernel(PAST_END, "read_past_end")
    r(inputs=[x], outputs=[y], scalars=[np.uint32(3)], grid_threads=1, threads_per_threadgroup=1)
    with pytest.raises(em.IndexOutOfRange, match=r"kernel 'read_past_end'.*buffer\(0\) at byte offset 12"):
        y.numpy()


WRITE_INPUT = """
#include <metal_stdlib>
using namespace metal;
kernel void cast_away_const(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                            uint i [[thread_position_in_grid]]) {
  y[i] = x[i];
  ((device float*)x)[i] = -1.0f;
}
kernel void cast_away_constant(constant float* x [[buffer(0)]], device float* y [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
  y[i] = x[i];
  if (i == 3) ((device float*)x)[i] = 0.0f;
}
"""


@pytest.mark.parametrize("fn,offset", [("cast_away_const", 0), ("cast_away_constant", 12)])
def test_a_write_through_an_input_binding_is_caught_and_undone(fn, offset, metal, rng):
    a = rng.standard_normal(8).astype(np.float32) + 5
    xs = em.tensor(a, device=metal)._storage
    y = em.MetalStorage.empty(8, em.float32)
    em.metal.Kernel(WRITE_INPUT, fn)(inputs=[xs], outputs=[y], grid_threads=8, threads_per_threadgroup=8)
    with pytest.raises(em.EmberError, match=rf"^\[metal\] kernel '{fn}'.*wrote to buffer\(0\) at byte offset "
                                            rf"{offset}, which is bound as an input \(read-only\)"):
        y.numpy()
    np.testing.assert_array_equal(xs.numpy(), a)  # the input is as it was


class Overwrite(em.CustomOp1):
    name = "overwrite_own_input"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(storage.as_numpy(layout).copy()), layout.shape

    def metal_fwd(self, storage, layout):
        out = em.MetalStorage.empty(layout.numel(), storage.dtype, storage.device)
        em.metal.Kernel(WRITE_INPUT, "cast_away_const")(inputs=[storage], outputs=[out], grid_threads=layout.numel(),
                                                        threads_per_threadgroup=1)
        return out, layout.shape


def test_a_metal_fwd_that_overwrites_its_input_is_caught(metal):
    x = em.tensor(np.arange(4, dtype=np.float32), device=metal)
    y = x.apply_op1(Overwrite())
    with pytest.raises(em.EmberError, match=r"kernel 'cast_away_const'.*bound as an input"):
        y.numpy()
    assert x.numpy().tolist() == [0, 1, 2, 3]


def test_the_same_storage_as_input_and_output_is_not_a_false_alarm(metal):
    src = """
#include <metal_stdlib>
using namespace metal;
kernel void add_into(device const float* b [[buffer(0)]], device float* a [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { a[i] += b[i]; }
"""
    t = em.tensor(np.arange(6, dtype=np.float32), device=metal)
    em.metal.Kernel(src, "add_into")(inputs=[t._storage], outputs=[t._storage], grid_threads=6,
                                     threads_per_threadgroup=2)
    assert t.numpy().tolist() == [0, 2, 4, 6, 8, 10]


def test_kernel_outputs_bump_versions_so_a_saved_tensor_overwritten_raises(metal):
    x = em.Var(em.tensor(np.arange(1, 5, dtype=np.float32), device=metal))
    y = (x * x).sum()  # saves x for backward
    v0 = x._storage.version
    em.metal.Kernel(PIPE, "fill7")(outputs=[x._storage], grid_threads=4, threads_per_threadgroup=4)
    assert x._storage.version > v0
    with pytest.raises(em.InplaceModifiedError):
        y.backward()


FIRST_THREAD = """
#include <metal_stdlib>
using namespace metal;
kernel void every_thread(device uint* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = i; }
"""


def test_a_grid_near_2_pow_32_runs_threads(metal):
    # (2^32 - 1 + 255) / 256 wrapped to 0 threadgroups in 32 bits: nothing ran and nothing failed. Now the
    # groups run, and thread 1 writes past the one-element buffer. (256 threads: CI's per-pipeline limit.)
    y = em.MetalStorage.empty(1, em.uint32)
    em.metal.Kernel(FIRST_THREAD, "every_thread")(outputs=[y], grid_threads=2**32 - 1, threads_per_threadgroup=256)
    with pytest.raises(em.IndexOutOfRange, match=r"kernel 'every_thread'.*buffer\(0\) at byte offset (\d+)") as e:
        y.numpy()  # (which group faults first depends on the pool's split of the groups)
    assert int(re.search(r"byte offset (\d+)", str(e.value)).group(1)) >= 4
    with pytest.raises(em.EmberValueError, match=r"grid_threads"):
        em.metal.Kernel(FIRST_THREAD, "every_thread")(outputs=[y], grid_threads=2**32, threads_per_threadgroup=1)


def test_a_grid_of_more_threadgroups_than_can_be_counted_is_refused():
    y = np.zeros(1, np.uint32)
    with pytest.raises(em.EmberError, match=r"^\[metal\] kernel 'every_thread'.*more than 2\^63 threadgroups"):
        _T.metal_emu_run(FIRST_THREAD, "every_thread", [y], [2**32 - 1] * 3, [1, 1, 1])


CONST = """
#include <metal_stdlib>
using namespace metal;
constant int k_int [[function_constant(0)]];
constant float k_float [[function_constant(1)]];
kernel void consts(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[0] = float(k_int);
  y[1] = k_float;
}
"""


@pytest.mark.parametrize("value", [-2**31, 2**31 - 1, 12345])
def test_int_constants_at_the_edges_of_int32(value, metal):
    y = em.MetalStorage.empty(2, em.float32)
    em.metal.Kernel(CONST, "consts", {"constants": {0: value, 1: 0.5}})(outputs=[y], grid_threads=1,
                                                                       threads_per_threadgroup=1)
    assert y.numpy().tolist() == [float(np.float32(value)), 0.5]


@pytest.mark.parametrize("consts,match", [
    ({0: 2**31, 1: 0.5}, r"function constant 0 of type int: 2147483648 is outside its range"),
    ({0: -2**31 - 1, 1: 0.5}, r"function constant 0 of type int: -2147483649 is outside"),
    ({0: 10**30, 1: 0.5}, r"function constant 0 of type int: 10+ is outside"),
    ({0: 1, 1: math.nan}, r"function constant 1 of type float: nan is not a finite float"),
    ({0: 1, 1: math.inf}, r"function constant 1 of type float: inf is not a finite float"),
    ({0: 1, 1: 1e39}, r"function constant 1 of type float: 1e\+39 is not a finite float"),
])
def test_bad_function_constants_are_refused_clearly(consts, match, metal):
    with pytest.raises(em.EmberValueError, match=r"^\[metal\] " + match):
        em.metal.Kernel(CONST, "consts", {"constants": consts})


@pytest.mark.parametrize("const,match", [
    ((0, "int", 2**31), "outside its range"),
    ((0, "int", 2.5), "is not an integer"),
    ((0, "uint", -1), "outside its range"),
    ((0, "uint", 2**32), "outside its range"),
    ((0, "bool", 2), "outside its range"),
    ((1, "float", float("-inf")), "not a finite float"),
    ((0, "short", 1), "type must be bool, int, uint or float"),
])
def test_the_emulator_hook_uses_the_same_parser(const, match):
    y = np.zeros(2, np.float32)
    with pytest.raises(em.EmberValueError, match=r"^\[metal\] .*" + re.escape(match)):
        _T.metal_emu_run(CONST, "consts", [y], [1], [1], constants=[const, (1, "float", 0.5)])


MATH = """
#include <metal_stdlib>
using namespace metal;
kernel void pow2(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) { y[i] = exp2(x[i]); }
kernel void muladd(device const float* a [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
  const float p = a[0], q = a[1], r = a[2];
  y[i] = p * q + r;
}
kernel void narrow(device const float* x [[buffer(0)]], device half* h [[buffer(1)]], device bfloat* b [[buffer(2)]],
                   device float* back [[buffer(3)]], uint i [[thread_position_in_grid]]) {
  h[i] = half(x[i]);
  b[i] = bfloat(x[i]);
  back[2 * i] = float(h[i]);
  back[2 * i + 1] = float(b[i]);
}
"""


def host_has_fma():
    try:
        with open("/proc/cpuinfo") as f:
            return " fma " in f.read().replace("\n", " ")
    except OSError:
        return False


def test_gpu_math_perturbs_transcendentals_within_one_ulp(monkeypatch):
    monkeypatch.delenv("EMBER_METAL_EMU_GPU_MATH", raising=False)  # CI's Metal run sets it
    x = np.arange(-20, 21, dtype=np.float32)
    plain = np.zeros_like(x)
    _T.metal_emu_run(MATH, "pow2", [x, plain], [x.size], [x.size])
    np.testing.assert_array_equal(plain, np.exp2(x))
    monkeypatch.setenv("EMBER_METAL_EMU_GPU_MATH", "1")
    gm = np.zeros_like(x)
    _T.metal_emu_run(MATH, "pow2", [x, gm], [x.size], [x.size])
    exact = np.exp2(x.astype(np.float64))
    ulp = np.spacing(np.abs(gm)).astype(np.float64)
    assert np.all(np.abs(gm - exact) <= ulp)  # the MSL bound: 1 ulp
    assert np.any(gm != np.exp2(x))           # and some powers of two are not exact, as on a GPU


def test_gpu_math_contracts_multiply_add(monkeypatch):
    monkeypatch.delenv("EMBER_METAL_EMU_GPU_MATH", raising=False)
    a = np.array([1 + 2**-12, 1 + 2**-12, -(1 + 2**-11)], np.float32)  # a*b rounds away 2^-24
    y = np.zeros(1, np.float32)
    _T.metal_emu_run(MATH, "muladd", [a, y], [1], [1])
    assert y[0] == 0.0
    monkeypatch.setenv("EMBER_METAL_EMU_GPU_MATH", "1")
    _T.metal_emu_run(MATH, "muladd", [a, y], [1], [1])
    assert y[0] == (2.0**-24 if host_has_fma() else 0.0)


def test_gpu_math_converts_half_and_bfloat_independently_and_correctly(monkeypatch, rng):
    import ml_dtypes

    monkeypatch.setenv("EMBER_METAL_EMU_GPU_MATH", "1")
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    special = np.array([65504, 65519.99, 65520, 1e-8, 2**-24, 2**-25, 3 * 2**-26, 3.4e38, -0.0, np.inf, -np.inf,
                        1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 2**-133, 2**-134, 1e-45], np.float32)
    x = np.concatenate([x[np.isfinite(x)], special]).astype(np.float32)
    h = np.zeros(x.size, np.float16)
    b = np.zeros(x.size, np.uint16)
    back = np.zeros(2 * x.size, np.float32)
    _T.metal_emu_run(MATH, "narrow", [x, h, b, back], [x.size], [256])
    with np.errstate(over="ignore"):  # past half's range numpy rounds to inf, as the kernel must
        want_h = x.astype(np.float16)
    np.testing.assert_array_equal(h.view(np.uint16), want_h.view(np.uint16))
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(back[0::2], want_h.astype(np.float32))
    np.testing.assert_array_equal(back[1::2], x.astype(ml_dtypes.bfloat16).astype(np.float32))
