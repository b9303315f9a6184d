"""Example: the softplus CustomOp1 of the custom-op tutorial — a numpy forward, a backward in Tensor ops, check_op."""
import numpy as np

import ember as em


class Softplus(em.CustomOp1):
    name = "softplus"

    def cpu_fwd(self, storage: em.CpuStorage, layout: em.Layout):
        x = storage.as_numpy(layout)  # zero-copy strided view, read-only
        return em.CpuStorage.from_numpy(np.logaddexp(0, x)), layout.shape

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
    print("softplus: ok")


if __name__ == "__main__":
    main()
