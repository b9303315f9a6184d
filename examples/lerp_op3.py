"""Example: a CustomOp3, lerp(a, b, w) = a + w * (b - a), differentiable in all three inputs."""
import numpy as np

import ember as em


class Lerp(em.CustomOp3):
    name = "lerp"

    def cpu_fwd(self, s1, l1, s2, l2, s3, l3):
        a, b, w = s1.as_numpy(l1), s2.as_numpy(l2), s3.as_numpy(l3)
        if not a.shape == b.shape == w.shape:
            raise em.ShapeError(f"[lerp] shapes differ: {a.shape}, {b.shape}, {w.shape}")
        if a.dtype == np.bool_:  # numpy has no bool subtraction: refuse with an ember error, as check_op asks
            raise em.DTypeError("[lerp] bool inputs are not supported")
        return em.CpuStorage.from_numpy(a + w * (b - a)), a.shape

    def bwd(self, a, b, w, res, grad_res):
        return grad_res * (1.0 - w), grad_res * w, grad_res * (b - a)


def main():
    a, b = em.Var([0.0, 1.0, 2.0]), em.Var([10.0, 11.0, 12.0])
    w = em.Var([0.0, 0.5, 1.0])
    out = a.apply_op3(b, w, Lerp())
    assert np.allclose(out.numpy(), [0.0, 6.0, 12.0])

    g = out.sum().backward()
    assert np.allclose(g[a].numpy(), [1.0, 0.5, 0.0])
    assert np.allclose(g[b].numpy(), [0.0, 0.5, 1.0])
    assert np.allclose(g[w].numpy(), [10.0, 10.0, 10.0])

    print(em.testing.check_op(Lerp(), em.randn(2, 5), em.randn(2, 5), em.rand(2, 5)))
    print("lerp: ok")


if __name__ == "__main__":
    main()
