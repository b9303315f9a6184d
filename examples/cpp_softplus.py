"""Example: a C++ CPU custom op with em.cpu.Kernel — the softplus of examples/softplus.py with a C++ forward
(strided input, ember's thread pool) compiled at first use and cached on disk, a reference for its backward, check_op."""
import numpy as np

import ember as em

SOURCE = r"""
#include <cmath>
void softplus(const ember::Args& a) {
  const ember::Tensor& x = a.input(0);          // any strides and offset: x.at<float>(i) follows them
  float* y = a.output(0).ptr<float>();          // a new, dense output
  a.parallel_for(x.numel, 1 << 14, [&](int64_t begin, int64_t end) {   // ember's thread pool
    if (x.contiguous()) {
      const float* p = x.ptr<float>();
      for (int64_t i = begin; i < end; ++i) y[i] = std::fmax(p[i], 0.f) + std::log1p(std::exp(-std::fabs(p[i])));
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const float v = x.at<float>(i);
        y[i] = std::fmax(v, 0.f) + std::log1p(std::exp(-std::fabs(v)));
      }
    }
  });
}
"""
KERNEL = em.cpu.Kernel(SOURCE, "softplus", inputs=["float32"], outputs=["float32"])  # compiled at first call


class CppSoftplus(em.CustomOp1):
    name = "softplus_cpp"

    def cpu_fwd(self, storage, layout):
        if storage.dtype != em.float32:
            raise em.DTypeError(f"[{self.name}] the C++ kernel takes float32, got {storage.dtype.name}")
        out = em.CpuStorage.empty(layout.numel(), em.float32)
        KERNEL(inputs=[(storage, layout)], outputs=[out])   # checked against the declared signature
        return out, layout.shape

    def reference(self, x):                                 # the backward differentiates it
        return (x.exp() + 1.0).log()


if __name__ == "__main__":
    xn = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32) * 3
    x = em.Var(xn)
    y = x.t().apply_op1(CppSoftplus())                      # a transposed view goes in as it is
    assert np.allclose(y.numpy(), np.logaddexp(0, xn.T), rtol=1e-5, atol=1e-6)
    g = y.sum().backward()[x]
    assert np.allclose(g.numpy(), 1 / (1 + np.exp(-xn)), rtol=1e-4, atol=1e-6)
    print(em.testing.check_op(CppSoftplus(), em.randn(6, 5)))
    print(f"kernel loaded from: {KERNEL.cache_source}")
    print("ok")
