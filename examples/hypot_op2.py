"""Example: a CustomOp2, hypot(a, b) = sqrt(a² + b²), with both gradients."""
import numpy as np

import ember as em


class Hypot(em.CustomOp2):
    name = "hypot"

    def cpu_fwd(self, s1, l1, s2, l2):
        a, b = s1.as_numpy(l1), s2.as_numpy(l2)
        if a.shape != b.shape:
            raise em.ShapeError(f"[hypot] shape mismatch {a.shape} vs {b.shape}")
        return em.CpuStorage.from_numpy(np.hypot(a, b)), a.shape

    def bwd(self, a, b, res, grad_res):
        # d/da = a / h, d/db = b / h; one Tensor (or None) per input
        g = grad_res / res
        return g * a, g * b


def main():
    a = em.Var([[3.0, 5.0], [8.0, 1.0]])
    b = em.Var([[4.0, 12.0], [6.0, 1.0]])
    h = a.apply_op2(b, Hypot())
    assert np.allclose(h.numpy(), [[5.0, 13.0], [10.0, np.sqrt(2.0)]])

    grads = h.sum().backward()
    assert np.allclose(grads[a].numpy(), a.numpy() / h.numpy())
    assert np.allclose(grads[b].numpy(), b.numpy() / h.numpy())

    print(em.testing.check_op(Hypot(), em.randn(4, 3), em.randn(4, 3)))
    print("hypot: ok")


if __name__ == "__main__":
    main()
