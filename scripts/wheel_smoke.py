"""Smoke test of an installed ember wheel (no compiler needed): a fused op and a custom op with its
gradient, on the CPU and, where the wheel has a Metal device, on Metal."""
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
    print("wheel smoke test ok: isa", em._C.isa(), "| metal", em.metal_is_available())


if __name__ == "__main__":
    main()
