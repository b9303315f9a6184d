"""Example: a fused op whose forward and backward are both Metal kernels written in MSL from Python
(em.metal.Kernel), with numpy twins for the CPU: squared ReLU, y = max(x, 0)^2, dy/dx = 2 max(x, 0)."""
import numpy as np

import ember as em

MSL = """
#include <metal_stdlib>
using namespace metal;
// The element offset of flat index i in a view (shape, strides, offset).
inline long at(uint i, uint ndim, constant long* shape, constant long* strides, long offset) {
  long rem = i, o = offset;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    o += (rem % shape[d]) * strides[d];
    rem /= shape[d];
  }
  return o;
}
kernel void relu2_fwd(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                      constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                      constant long* shape [[buffer(4)]], constant long* sx [[buffer(5)]],
                      constant long& ox [[buffer(6)]], uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  const float v = max(x[at(i, ndim, shape, sx, ox)], 0.0f);
  y[i] = v * v;
}
// dx = 2 max(x, 0) * g, x and g read through their own strides
kernel void relu2_bwd(device const float* x [[buffer(0)]], device const float* g [[buffer(1)]],
                      device float* dx [[buffer(2)]], constant uint& n [[buffer(3)]], constant uint& ndim [[buffer(4)]],
                      constant long* shape [[buffer(5)]], constant long* sx [[buffer(6)]],
                      constant long* sg [[buffer(7)]], constant long* offs [[buffer(8)]],
                      uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  dx[i] = 2.0f * max(x[at(i, ndim, shape, sx, offs[0])], 0.0f) * g[at(i, ndim, shape, sg, offs[1])];
}
"""
FWD = em.metal.Kernel(MSL, "relu2_fwd")  # one source, two kernels: each compiled at its first call
BWD = em.metal.Kernel(MSL, "relu2_bwd")


def view_args(layout):
    """(ndim, shape, strides) of a layout as kernel scalars; a 0-d view counts as one element."""
    return np.uint32(max(len(layout.shape), 1)), np.array(layout.shape or (1,), np.int64), \
        np.array(layout.stride or (0,), np.int64)


def check_f32(op, storage):
    if storage.dtype != em.float32:
        raise em.DTypeError(f"[{op}] the Metal kernels take float32, got {storage.dtype.name}")


class Relu2Grad(em.CustomOp2):
    """dx = 2 max(x, 0) * g: the backward, itself an op with a CPU and a Metal forward."""

    name = "relu2_grad"

    def cpu_fwd(self, sx, lx, sg, lg):
        x, g = sx.as_numpy(lx), sg.as_numpy(lg)
        return em.CpuStorage.from_numpy(2 * np.maximum(x, 0) * g), lx.shape

    def metal_fwd(self, sx, lx, sg, lg):
        check_f32(self.name, sx)
        check_f32(self.name, sg)
        n = lx.numel()
        out = em.MetalStorage.empty(n, sx.dtype, sx.device)
        ndim, shape, strides_x = view_args(lx)
        strides_g = view_args(lg)[2]
        BWD(inputs=[sx, sg], outputs=[out],
            scalars=[np.uint32(n), ndim, shape, strides_x, strides_g, np.array([lx.start_offset, lg.start_offset], np.int64)],
            grid_threads=(n, 1, 1), threads_per_threadgroup=(256, 1, 1))
        return out, lx.shape


class Relu2(em.CustomOp1):
    name = "relu2"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(np.maximum(storage.as_numpy(layout), 0) ** 2), layout.shape

    def metal_fwd(self, storage, layout):
        check_f32(self.name, storage)
        n = layout.numel()
        out = em.MetalStorage.empty(n, storage.dtype, storage.device)
        FWD(inputs=[storage], outputs=[out], scalars=[np.uint32(n), *view_args(layout), np.int64(layout.start_offset)],
            grid_threads=(n, 1, 1), threads_per_threadgroup=(256, 1, 1))
        return out, layout.shape

    def bwd(self, arg, res, grad_res):
        return arg.apply_op2(grad_res, Relu2Grad())  # one fused kernel on either device


def run(device):
    x = em.Var(em.tensor(np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5), device=device))
    g = em.tensor(np.arange(15, dtype=np.float32).reshape(5, 3), device=device).t()  # a strided gradient
    y = x.apply_op1(Relu2())
    dx = (y * g).sum().backward()[x]
    xn = x.numpy()
    assert np.allclose(y.numpy(), np.maximum(xn, 0) ** 2)
    assert np.allclose(dx.numpy(), 2 * np.maximum(xn, 0) * g.numpy())
    return dx


def main():
    run(em.cpu)
    print("relu2 on cpu: ok")
    if em.metal_is_available():  # on a Mac, or anywhere with EMBER_METAL=emulate
        run(em.Device("metal"))
        print("relu2 on metal: ok")


if __name__ == "__main__":
    main()
