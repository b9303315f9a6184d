"""Example: the softplus CustomOp1 of the custom-op tutorial — a numpy forward, a Metal forward written in MSL
with em.metal.Kernel, a backward in Tensor ops, check_op."""
import numpy as np

import ember as em

# The Metal forward reads its input through the layout (any strides and offset), as cpu_fwd does.
SOFTPLUS_MSL = """
#include <metal_stdlib>
using namespace metal;
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
  y[i] = max(v, 0.0f) + log(1.0f + exp(-fabs(v)));  // log(1 + e^v) without overflow
}
"""
SOFTPLUS_KERNEL = em.metal.Kernel(SOFTPLUS_MSL, "softplus_f32")  # compiled at its first call, once per device


class Softplus(em.CustomOp1):
    name = "softplus"

    def cpu_fwd(self, storage: em.CpuStorage, layout: em.Layout):
        x = storage.as_numpy(layout)  # zero-copy strided view, read-only
        return em.CpuStorage.from_numpy(np.logaddexp(0, x)), layout.shape

    def metal_fwd(self, storage: em.MetalStorage, layout: em.Layout):
        if storage.dtype != em.float32:
            raise em.DTypeError(f"[softplus] the Metal kernel takes float32, got {storage.dtype.name}")
        n = layout.numel()
        out = em.MetalStorage.empty(n, storage.dtype, storage.device)  # from the device's pool
        scalars = [np.uint32(n), np.uint32(max(len(layout.shape), 1)), np.array(layout.shape or (1,), np.int64),
                   np.array(layout.stride or (0,), np.int64), np.int64(layout.start_offset)]
        SOFTPLUS_KERNEL(inputs=[storage], outputs=[out], scalars=scalars, grid_threads=(n, 1, 1),
                        threads_per_threadgroup=(256, 1, 1))
        return out, layout.shape

    def bwd(self, arg, res, grad_res):  # ordinary Tensor ops, so create_graph=True works too
        return grad_res * em.nn.ops.sigmoid(arg)


def main():
    x = em.Var(np.linspace(-3, 3, 12).reshape(3, 4))
    y = x.t().apply_op1(Softplus())  # a transposed view goes in as is: the layout says how to read it
    assert np.allclose(y.numpy(), np.logaddexp(0, x.numpy().T))

    grads = y.sum().backward()
    assert np.allclose(grads[x].numpy(), 1 / (1 + np.exp(-x.numpy())))

    report = em.testing.check_op(Softplus(), em.randn(5, 3))
    print(report)

    if em.metal_is_available():  # on a Mac, or anywhere with EMBER_METAL=emulate
        xm = em.tensor(x.numpy().astype(np.float32), device=em.Device("metal"))
        ym = xm.t().apply_op1(Softplus())
        assert np.allclose(ym.numpy(), np.logaddexp(0, x.numpy().T), atol=1e-6)
        print("softplus on metal: ok")
    print("softplus: ok")


if __name__ == "__main__":
    main()
