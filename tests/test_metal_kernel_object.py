"""em.metal.Kernel on the emulated Metal device: bindings (inputs, outputs, scalars by value), the pipeline cache
key (source hash, name, options; one compile per key), hazard order between dispatches, compile errors with
the compiler's log, bad arguments refused before encoding, and use from CustomOp / InplaceOp metal_fwd."""
import numpy as np
import pytest

import ember as em

SCALE = """
#include <metal_stdlib>
using namespace metal;
kernel void scale_f32(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      constant uint& n [[buffer(2)]], constant float& a [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  y[i] = a * x[i];
}
"""


@pytest.fixture
def metal(monkeypatch):
    monkeypatch.setenv("EMBER_METAL", "emulate")
    return em.Device("metal")


def storage_of(arr, metal):
    return em.tensor(arr, device=metal)._storage


def stats():
    return em.metal.memory_stats()


def test_kernel_binds_inputs_outputs_then_scalars(metal, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    xs = storage_of(x, metal)
    out = em.MetalStorage.empty(1000, em.float32)
    k = em.metal.Kernel(SCALE, "scale_f32")
    k(inputs=[xs], outputs=[out], scalars=[np.uint32(1000), np.float32(2.5)], grid_threads=(1000,),
      threads_per_threadgroup=(128,))
    np.testing.assert_array_equal(out.numpy(), x * np.float32(2.5))


def test_small_arrays_go_by_value(metal):
    src = """
#include <metal_stdlib>
using namespace metal;
kernel void poly(device float* y [[buffer(0)]], constant float* c [[buffer(1)]], constant uint& n [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  const float t = float(i);
  y[i] = c[0] + c[1] * t + c[2] * t * t;
}
"""
    out = em.MetalStorage.empty(50, em.float32)
    em.metal.Kernel(src, "poly")(outputs=[out], scalars=[np.array([1, -2, 0.5], np.float32), np.uint32(50)],
                                 grid_threads=50, threads_per_threadgroup=32)
    t = np.arange(50, dtype=np.float32)
    np.testing.assert_allclose(out.numpy(), 1 - 2 * t + 0.5 * t * t)


def test_cache_key_is_the_source_not_the_name(metal):
    # two kernels named alike with different bodies never share a pipeline; the same source compiles once
    body = """
#include <metal_stdlib>
using namespace metal;
kernel void fill_k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = %s; }
"""
    a, b = em.metal.Kernel(body % "7.0f", "fill_k"), em.metal.Kernel(body % "-3.0f", "fill_k")
    ya, yb = em.MetalStorage.empty(8, em.float32), em.MetalStorage.empty(8, em.float32)
    before, dev_before = em.metal.cache_info().get("metal:0", {"compiles": 0, "hits": 0}), stats()
    a(outputs=[ya], grid_threads=8, threads_per_threadgroup=8)
    b(outputs=[yb], grid_threads=8, threads_per_threadgroup=8)
    assert ya.numpy().tolist() == [7.0] * 8 and yb.numpy().tolist() == [-3.0] * 8
    again = em.metal.Kernel(body % "7.0f", "fill_k")  # a new object, the same key
    for k in (a, again, a):
        k(outputs=[yb], grid_threads=8, threads_per_threadgroup=8)
    after = em.metal.cache_info()["metal:0"]
    assert after["compiles"] - before["compiles"] == 2
    assert after["hits"] - before["hits"] == 3
    assert stats()["pipeline_compiles"] - dev_before["pipeline_compiles"] == 2  # the device compiled 2 too
    assert yb.numpy().tolist() == [7.0] * 8


def test_function_constants_are_part_of_the_key(metal):
    src = """
#include <metal_stdlib>
using namespace metal;
constant float kValue [[function_constant(0)]];
kernel void const_k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = kValue; }
"""
    y1, y2 = em.MetalStorage.empty(4, em.float32), em.MetalStorage.empty(4, em.float32)
    em.metal.Kernel(src, "const_k", {"constants": {0: 1.5}})(outputs=[y1], grid_threads=4, threads_per_threadgroup=4)
    em.metal.Kernel(src, "const_k", {"constants": {0: -4.0}})(outputs=[y2], grid_threads=4, threads_per_threadgroup=4)
    assert y1.numpy().tolist() == [1.5] * 4 and y2.numpy().tolist() == [-4.0] * 4


def test_a_kernel_reads_what_the_previous_one_wrote(metal, rng):
    # no synchronize between the two dispatches: the hazard tracker puts a barrier between them
    x = rng.standard_normal(256).astype(np.float32)
    xs = storage_of(x, metal)
    mid, out = em.MetalStorage.empty(256, em.float32), em.MetalStorage.empty(256, em.float32)
    k = em.metal.Kernel(SCALE, "scale_f32")
    n = np.uint32(256)
    before = stats()["barriers"]
    k(inputs=[xs], outputs=[mid], scalars=[n, np.float32(3)], grid_threads=256, threads_per_threadgroup=64)
    k(inputs=[mid], outputs=[out], scalars=[n, np.float32(-2)], grid_threads=256, threads_per_threadgroup=64)
    assert stats()["barriers"] > before
    np.testing.assert_array_equal(out.numpy(), x * np.float32(3) * np.float32(-2))


def test_compile_error_carries_the_log(metal):
    bad = "kernel void broken(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = nope; }"
    k = em.metal.Kernel(bad, "broken")
    with pytest.raises(em.EmberError, match=r"(?s)broken\.metal.*nope"):
        k(outputs=[em.MetalStorage.empty(4, em.float32)], grid_threads=4, threads_per_threadgroup=4)


def test_bad_arguments_are_refused_before_encoding(metal):
    k = em.metal.Kernel(SCALE, "scale_f32")
    out = em.MetalStorage.empty(16, em.float32)
    before = stats()["dispatches"]
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] inputs\[0\] is a CpuStorage"):
        k(inputs=[em.CpuStorage.empty(16, em.float32)], outputs=[out], grid_threads=16, threads_per_threadgroup=16)
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] inputs\[0\] must be a MetalStorage, got ndarray"):
        k(inputs=[np.zeros(16, np.float32)], outputs=[out], grid_threads=16, threads_per_threadgroup=16)
    with pytest.raises(em.EmberValueError, match=r"^\[metal\.Kernel\] scale_f32: threads_per_threadgroup .* 1025"):
        k(inputs=[out], outputs=[out], scalars=[np.uint32(16), np.float32(1)], grid_threads=2048,
          threads_per_threadgroup=1025)
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] scalars\[0\] must be a numpy scalar"):
        k(inputs=[out], outputs=[out], scalars=[16], grid_threads=16, threads_per_threadgroup=16)
    with pytest.raises(em.EmberValueError, match=r"^\[metal\.Kernel\] scalars\[0\] holds 8000 bytes"):
        k(inputs=[out], outputs=[out], scalars=[np.zeros(2000, np.float32)], grid_threads=16,
          threads_per_threadgroup=16)
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] grid_threads must be 1 to 3 ints"):
        k(inputs=[out], outputs=[out], grid_threads=(1, 2, 3, 4), threads_per_threadgroup=16)
    with pytest.raises(em.EmberValueError, match=r"^\[metal\.Kernel\] .*give at least one input or output"):
        k(grid_threads=16, threads_per_threadgroup=16)
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] options"):
        em.metal.Kernel(SCALE, "scale_f32", {"fast_math": True})
    assert stats()["dispatches"] == before


SOFTPLUS = """
#include <metal_stdlib>
using namespace metal;
// y = log(1 + e^x) over a strided view of x (offset, shape and strides by value)
kernel void softplus_f32(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                         constant long* shape [[buffer(4)]], constant long* strides [[buffer(5)]],
                         constant long& offset [[buffer(6)]], uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  long rem = i, at = offset;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    at += (rem % shape[d]) * strides[d];
    rem /= shape[d];
  }
  const float v = x[at];
  y[i] = max(v, 0.0f) + log(1.0f + exp(-fabs(v)));
}
kernel void add_into(device const float* b [[buffer(0)]], device float* a [[buffer(1)]],
                     constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < n) a[i] += b[i];
}
"""
_SOFTPLUS = em.metal.Kernel(SOFTPLUS, "softplus_f32")
_ADD = em.metal.Kernel(SOFTPLUS, "add_into")


def layout_scalars(layout):
    nd = max(len(layout.shape), 1)
    shape = list(layout.shape) or [1]
    stride = list(layout.stride) or [0]
    return [np.uint32(layout.numel()), np.uint32(nd), np.array(shape, np.int64), np.array(stride, np.int64),
            np.int64(layout.start_offset)]


class Softplus(em.CustomOp1):
    name = "softplus_metal_test"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(np.logaddexp(0, storage.as_numpy(layout))), layout.shape

    def metal_fwd(self, storage, layout):
        out = em.MetalStorage.empty(layout.numel(), storage.dtype, storage.device)
        _SOFTPLUS(inputs=[storage], outputs=[out], scalars=layout_scalars(layout),
                  grid_threads=(layout.numel(), 1, 1), threads_per_threadgroup=(64, 1, 1))
        return out, layout.shape

    def bwd(self, arg, res, grad_res):
        return grad_res * em.nn.ops.sigmoid(arg)


class AddInto(em.InplaceOp2):
    name = "add_into_metal_test"

    def cpu_fwd(self, s1, l1, s2, l2):
        s1.as_numpy(l1)[...] += s2.as_numpy(l2)

    def metal_fwd(self, s1, l1, s2, l2):
        assert l1.is_contiguous() and l2.is_contiguous() and l1.start_offset == 0 and l2.start_offset == 0
        _ADD(inputs=[s2], outputs=[s1], scalars=[np.uint32(l1.numel())], grid_threads=l1.numel(),
             threads_per_threadgroup=32)


def test_custom_op_metal_fwd_with_a_kernel(metal, rng):
    base = rng.standard_normal((6, 9)).astype(np.float32) * 3
    xm = em.tensor(base, device=metal).t()[1:, ::2]  # a strided view with an offset
    xc = em.tensor(base, device=em.cpu).t()[1:, ::2]
    ym = xm.apply_op1(Softplus())
    assert ym.device == metal
    np.testing.assert_allclose(ym.numpy(), xc.apply_op1(Softplus()).numpy(), rtol=1e-6, atol=1e-6)


def test_inplace_op_metal_fwd_writes_the_operand_and_survives_self_aliasing(metal, rng):
    a = rng.standard_normal(40).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    am, bm = em.tensor(a, device=metal), em.tensor(b, device=metal)
    v0 = am._storage.version
    am.inplace_op2(bm, AddInto())
    np.testing.assert_array_equal(am.numpy(), a + b)
    assert am._storage.version > v0
    am.inplace_op2(am, AddInto())  # the operand read as it was before the write: doubles
    np.testing.assert_array_equal(am.numpy(), 2 * (a + b))


@pytest.mark.parametrize("example,says", [("softplus", "softplus on metal: ok"), ("metal_fused_op", "relu2 on metal: ok")])
def test_examples_run_their_metal_kernels(example, says, metal, capsys):
    import pathlib
    import runpy

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / f"{example}.py"
    prev = em.get_default_device()
    em.set_default_device(em.cpu)  # the examples' CPU part makes float64 data; their Metal part names the device
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        em.set_default_device(prev)
    assert says in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_demo_swiglu_metal_fwd(dtype, metal, rng):
    from ember.demo import swiglu

    dt = getattr(em, dtype)
    g = rng.standard_normal((5, 8)).astype(np.float32) * 3
    u = rng.standard_normal((8, 5)).astype(np.float32)
    gc, uc = em.tensor(g, device=em.cpu).to_dtype(dt), em.tensor(u, device=em.cpu).to_dtype(dt).t()  # strided
    gm, um = em.tensor(g, device=metal).to_dtype(dt), em.tensor(u, device=metal).to_dtype(dt).t()
    ym = swiglu(gm, um)
    assert ym.device == metal and ym.dtype == dt
    tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    np.testing.assert_allclose(ym.numpy().astype(np.float64), swiglu(gc, uc).numpy().astype(np.float64),
                               rtol=tol, atol=tol)
    with pytest.raises(em.ShapeError, match=r"^\[swiglu\]"):
        swiglu(gm, gm[:, :4])
