"""Example: a backward from a reference — a numpy forward plus reference() in Tensor ops and no bwd;
backward (and create_graph) differentiate the reference; check_op compares the forward with it."""
import numpy as np

import ember as em


class LogCosh(em.CustomOp1):
    """log(cosh(x)), computed stably in numpy; the reference is the same math in Tensor ops."""

    name = "logcosh"

    def cpu_fwd(self, storage, layout):
        x = storage.as_numpy(layout)
        if not storage.dtype.is_float:
            raise em.DTypeError(f"[{self.name}] expected a float tensor, got {storage.dtype.name}")
        a = np.abs(x)
        y = a + np.log1p(np.exp(-2 * a)) - np.log(2.0).astype(x.dtype)
        return em.CpuStorage.from_numpy(y.astype(x.dtype)), layout.shape

    def reference(self, x):            # slow but differentiable: no bwd needed
        return x.cosh().log()


if __name__ == "__main__":
    xn = np.linspace(-2, 2, 9)
    x = em.Var(xn)
    y = x.apply_op1(LogCosh())
    g = y.sum().backward(create_graph=True)[x]       # tanh(x), from the reference
    assert np.allclose(g.numpy(), np.tanh(xn))
    h = g.sum().backward()[x]                         # second order through the reference: 1 - tanh^2
    assert np.allclose(h.numpy(), 1 - np.tanh(xn) ** 2)
    report = em.testing.check_op(LogCosh(), em.randn(3, 4, dtype="float64"))
    assert "reference forward" in report.passed and "backward" in report.passed
    print(report)
    print("ok")
