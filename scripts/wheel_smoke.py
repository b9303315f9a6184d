"""Smoke test of an installed ember wheel (no compiler needed): a fused op and a custom op with its
gradient, on the CPU and, where the wheel has a Metal device, on Metal. Under the MSL emulator
(EMBER_METAL=emulate, a compiler in EMBER_METAL_CXX) also a user kernel whose out-of-bounds write must
raise the [metal] error: its module (the system's libstdc++) reports the fault through the C ABI, which
the wheel's static libc++ could not have caught as an exception."""
import os

import numpy as np

import ember as em


class Square(em.CustomOp1):
    """x * x with a numpy forward and a tensor-op backward."""

    name = "square"

    def cpu_fwd(self, storage, layout):
        a = storage.as_numpy(layout)
        return em.CpuStorage.from_numpy(np.ascontiguousarray(a * a)), layout.shape

    def bwd(self, arg, res, grad_res):
        return grad_res * arg * 2.0


OOB = """
#include <metal_stdlib>
using namespace metal;
kernel void oob(device float* y [[buffer(0)]], constant uint& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  y[i * n] = 1.0f;
}
"""


def emulated_fault():
    """An emulated kernel's out-of-bounds write is an IndexOutOfRange, and the process goes on."""
    k = em.metal.Kernel(OOB, "oob")
    out = em.MetalStorage.empty(4, em.float32)
    k(outputs=[out], scalars=[np.uint32(1)], grid_threads=4, threads_per_threadgroup=4)
    assert out.numpy().tolist() == [1.0] * 4, "emulated kernel"
    try:
        k(outputs=[out], scalars=[np.uint32(1000)], grid_threads=4, threads_per_threadgroup=4)
        em.metal.synchronize()
    except em.IndexOutOfRange as e:
        assert str(e).startswith("[metal] kernel 'oob'") and "out-of-bounds access to buffer(0)" in str(e), str(e)
    else:
        raise AssertionError("an out-of-bounds write in an emulated kernel raised nothing")
    out2 = em.MetalStorage.empty(4, em.float32)
    k(outputs=[out2], scalars=[np.uint32(1)], grid_threads=4, threads_per_threadgroup=4)
    assert out2.numpy().tolist() == [1.0] * 4, "emulated kernel after a fault"


def main():
    x = em.randn(4, 16)
    y = em.nn.ops.rms_norm(x, em.ones(16), 1e-5)
    ref = x.numpy() / np.sqrt((x.numpy() ** 2).mean(-1, keepdims=True) + 1e-5)
    assert np.allclose(y.numpy(), ref, atol=1e-5), "fused rms_norm disagrees with numpy"
    v = em.Var(np.arange(6.0).reshape(2, 3))
    g = v.apply_op1(Square()).sum().backward()
    assert np.allclose(g[v].numpy(), 2 * np.arange(6.0).reshape(2, 3)), "custom op gradient"
    if em.metal_is_available():
        m = em.randn(4, 16, device="metal")
        assert np.allclose(em.nn.ops.softmax(m, -1).numpy().sum(-1), 1.0, atol=1e-5), "Metal softmax"
    # the tests' hooks ship beside _C (CI runs the suite against the installed wheel)
    from ember import _C_testing
    assert "axpy" in _C_testing.metal_rewrite(OOB.replace("oob", "axpy"), "smoke.metal"), "testing module"
    if os.environ.get("EMBER_METAL") == "emulate":
        emulated_fault()
    print("wheel smoke test ok: isa", em._C.isa(), "| metal", em.metal_is_available())


if __name__ == "__main__":
    main()
