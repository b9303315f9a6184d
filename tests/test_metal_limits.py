"""Limits a GPU puts on ember's Metal launches, played by the emulator: a per-pipeline thread limit below the
device's (every launcher sizes its groups from it, a launch above it is refused), a lower threadgroup-memory
limit, one compiled library per kernel source, and which fiber switch the emulator was built with."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

ROOT = Path(__file__).resolve().parents[1]

AXPY = """
#include <metal_stdlib>
using namespace metal;
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i] + y[i];
}
kernel void big_tg(device float* y [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float s[4096];
  s[i] = y[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = s[63 - i];
}
"""


@pytest.fixture
def metal(monkeypatch):
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")
    return em.Device("metal")


def test_emulator_refuses_a_group_over_the_pipeline_limit(monkeypatch):
    monkeypatch.setenv("EMBER_METAL_EMU_MAX_THREADS", "128")
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    with pytest.raises(em.EmberError, match=r"^\[metal\] kernel 'axpy': a threadgroup of 256 threads; this pipeline "
                                            r"allows at most 128 \(maxTotalThreadsPerThreadgroup\)"):
        _T.metal_emu_run(AXPY, "axpy", [x, y], [256], [256])
    _T.metal_emu_run(AXPY, "axpy", [x, y], [256], [128])
    np.testing.assert_array_equal(y, np.full(256, 2, np.float32))
    for bad in ("100", "0", "2048", "lots"):
        monkeypatch.setenv("EMBER_METAL_EMU_MAX_THREADS", bad)
        with pytest.raises(em.EmberError, match=r"EMBER_METAL_EMU_MAX_THREADS=.*a multiple of 32 from 32 to 1024"):
            _T.metal_emu_run(AXPY, "axpy", [x, y], [32], [32])


def test_threadgroup_memory_limit_is_configurable(monkeypatch):
    y = np.arange(64, dtype=np.float32)
    _T.metal_emu_run(AXPY, "big_tg", [y], [64], [64])  # 16 KiB: within Metal's 32
    np.testing.assert_array_equal(y, np.arange(63, -1, -1, dtype=np.float32))
    monkeypatch.setenv("EMBER_METAL_EMU_TG_MEMORY", "8192")
    with pytest.raises(em.EmberError, match=r"kernel 'big_tg'.*threadgroup memory reaches 16384 bytes; Metal allows 8192"):
        _T.metal_emu_run(AXPY, "big_tg", [y], [64], [64])
    with pytest.raises(em.EmberError, match=r"^\[metal\] kernel 'big_tg': threadgroup memory of 12288 bytes; "
                                            r"Metal allows 8192"):
        _T.metal_emu_run(AXPY, "big_tg", [y], [64], [64], threadgroup_memory=[12288])
    monkeypatch.setenv("EMBER_METAL_EMU_TG_MEMORY", "65536")
    with pytest.raises(em.EmberError, match=r"EMBER_METAL_EMU_TG_MEMORY=65536: bytes from 1024 to 32768"):
        _T.metal_emu_run(AXPY, "big_tg", [y], [64], [64])


@pytest.mark.parametrize("dt", [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8, em.int32])
def test_sort_and_topk_keep_a_margin_under_32_kib(metal, monkeypatch, rng, dt):
    # the longest lines sorted in threadgroup memory, with the emulator allowing 24 KiB only
    monkeypatch.setenv("EMBER_METAL_EMU_TG_MEMORY", str(24 * 1024))
    for n in (1000, 2048, 4096):
        x = rng.integers(0, 100, (3, n)).astype(np.float32)
        t = em.tensor(x, device=metal).to(dt)
        vals, idx = em.sort(t, dim=1)
        ref = np.sort(t.to(em.float32).numpy(), axis=1, kind="stable")
        np.testing.assert_array_equal(vals.to(em.float32).numpy(), ref)
        top, _ = em.topk(t, 5, dim=1)
        np.testing.assert_array_equal(top.to(em.float32).numpy(), -np.sort(-ref, axis=1)[:, :5])


def test_one_library_per_source(metal):
    src = AXPY + f"// {os.getpid()} {id(metal)}: a source this session has not compiled\n"
    before = em.metal.memory_stats()
    x = em.MetalStorage.empty(64, em.float32)
    y = em.MetalStorage.empty(64, em.float32)
    em.metal.Kernel(src, "axpy")(inputs=[x], outputs=[y], grid_threads=64, threads_per_threadgroup=64)
    em.metal.Kernel(src, "big_tg")(outputs=[y], grid_threads=64, threads_per_threadgroup=64)
    em.metal.Kernel(src, "axpy")(inputs=[x], outputs=[y], grid_threads=64, threads_per_threadgroup=32)
    after = em.metal.memory_stats()
    assert after["pipeline_compiles"] - before["pipeline_compiles"] == 2
    assert after["library_compiles"] - before["library_compiles"] == 1
    # the embedded softmax.metal: its simd, block and looped kernels in two dtypes share one library
    xs = [em.randn(3, n, device=metal).to(dt) for dt in (em.float32, em.float16) for n in (40, 1500, 20000)]
    for x in xs:
        x.numpy()
    before = em.metal.memory_stats()
    for x in xs:
        em.softmax(x, dim=-1).numpy()
    after = em.metal.memory_stats()
    assert after["library_compiles"] - before["library_compiles"] <= 1


def test_user_kernel_over_its_pipeline_limit_is_refused(metal, monkeypatch):
    monkeypatch.setenv("EMBER_METAL_EMU_MAX_THREADS", "64")
    src = AXPY + f"// limit test {os.getpid()}\n"  # a new pipeline, made under the lower limit
    x = em.MetalStorage.empty(256, em.float32)
    y = em.MetalStorage.empty(256, em.float32)
    with pytest.raises(em.EmberError, match=r"^\[metal.Kernel\] axpy: threads_per_threadgroup \(128, 1, 1\) holds 128 "
                                            r"threads; this kernel's pipeline allows at most 64"):
        em.metal.Kernel(src, "axpy")(inputs=[x], outputs=[y], grid_threads=256, threads_per_threadgroup=128)
    em.metal.Kernel(src, "axpy")(inputs=[x], outputs=[y], grid_threads=256, threads_per_threadgroup=64)


# Ops whose launchers size their groups from the pipeline's limit, run in a fresh process (pipelines are
# made once per process) where every pipeline allows 64 threads; each result against the CPU's.
ADAPT = r"""
import numpy as np, ember as em
rng = np.random.default_rng(0)
def check(f, *arrays, tol=2e-5):
    got = f(*[em.tensor(a, device="metal") for a in arrays]).numpy()
    want = f(*[em.tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
for n in (100, 700, 3000):
    x = rng.standard_normal((4, n)).astype(np.float32)
    check(lambda t: em.softmax(t, dim=-1), x)
    check(lambda t: em.log_softmax(t, dim=-1), x)
    check(lambda t: em.nn.ops.layer_norm(t), x, tol=1e-4)
    check(lambda t: em.nn.ops.rms_norm(t), x, tol=1e-4)
    check(lambda t: t.sum(dim=-1), x, tol=1e-3)
    check(lambda t: t.sum(dim=0), x, tol=1e-3)
    check(lambda t: em.sort(t, dim=-1)[0], x)
    check(lambda t: em.topk(t, 7, dim=-1)[0], x)
q = rng.standard_normal((2, 3, 40, 16)).astype(np.float32)
check(lambda a, b, c: em.nn.ops.sdpa(a, b, c), q, q[:, :, ::-1].copy(), q * 0.5, tol=1e-4)
check(lambda a, b, c: em.nn.ops.sdpa(a, b, c), q[:, :, :2].copy(), q, q * 0.5, tol=1e-4)  # decode
print("adapted")
"""


def test_launchers_adapt_to_a_low_pipeline_limit():
    env = dict(os.environ, EMBER_METAL="emulate", EMBER_METAL_EMU_MAX_THREADS="64",
               PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", ADAPT], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0 and "adapted" in p.stdout, p.stderr[-3000:]


def test_fiber_switch_is_reported():
    assert _T.metal_emu_fibers() in ("asm", "ucontext")
