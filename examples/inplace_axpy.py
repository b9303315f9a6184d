"""Example: InplaceOps — scale a view in place, and y += alpha * x, also when x is y itself."""
import numpy as np

import ember as em


class Scale(em.InplaceOp1):
    name = "scale_"

    def __init__(self, factor):
        self.factor = factor

    def cpu_fwd(self, storage, layout):
        view = storage.as_numpy(layout)  # writable: this is the operand being mutated
        view *= view.dtype.type(self.factor)


class Axpy(em.InplaceOp2):
    name = "axpy_"

    def __init__(self, alpha):
        self.alpha = alpha

    def cpu_fwd(self, s1, l1, s2, l2):
        y, x = s1.as_numpy(l1), s2.as_numpy(l2)  # x is read-only
        y += y.dtype.type(self.alpha) * x


def main():
    t = em.arange(12, dtype=em.float32).reshape(3, 4)
    t[:, 1:3].inplace_op1(Scale(10.0))  # only the view changes; every view of the storage sees it
    expect = np.arange(12, dtype=np.float32).reshape(3, 4)
    expect[:, 1:3] *= 10
    assert np.array_equal(t.numpy(), expect)

    y = em.ones(4)
    y.inplace_op2(em.arange(4, dtype=em.float32), Axpy(2.0))
    assert np.array_equal(y.numpy(), [1.0, 3.0, 5.0, 7.0])

    y.inplace_op2(y, Axpy(1.0))  # the operand is read as it was before the write: y doubles
    assert np.array_equal(y.numpy(), [2.0, 6.0, 10.0, 14.0])

    print(em.testing.check_op(Axpy(0.5), em.randn(3, 4), em.randn(3, 4)))
    print("inplace: ok")


if __name__ == "__main__":
    main()
