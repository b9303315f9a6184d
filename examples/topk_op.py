"""Example: an em.CustomOp with two outputs — the top-k values of each row (differentiable) and their
indices (int64, non-differentiable) — a numpy forward, a bwd that scatters the gradient back, check_op."""
import numpy as np

import ember as em


class TopK(em.CustomOp):
    name = "topk_rows"
    out_dtypes = (None, "int64")     # values: the input's dtype; indices: int64
    non_differentiable = (1,)        # no gradient flows from the indices

    def __init__(self, k):
        self.k = k

    def cpu_fwd(self, inputs):
        (s, l), = inputs                             # one (storage, layout) pair per input
        if not s.dtype.is_float:                     # check_op tries every dtype: refuse clearly
            raise em.DTypeError(f"[{self.name}] expected a float tensor, got {s.dtype.name}")
        x = s.as_numpy(l)                            # zero-copy, read-only, any strides
        idx = np.argsort(-x, axis=-1, kind="stable")[..., :self.k]
        vals = np.take_along_axis(x, idx, -1)
        shape = x.shape[:-1] + (self.k,)
        return [(em.CpuStorage.from_numpy(np.ascontiguousarray(vals)), shape),   # one (storage, shape)
                (em.CpuStorage.from_numpy(idx.astype(np.int64)), shape)]          # per output

    def bwd(self, inputs, outputs, grads):
        (x,), (_, idx), (g_vals, _) = inputs, outputs, grads   # grads[1] is always None here
        if g_vals is None:
            return [None]
        return [em.zeros_like(x).scatter_add(idx, g_vals, -1)]  # one gradient (or None) per input


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((3, 6))
    x = em.Var(xn)
    vals, idx = em.apply_op(TopK(2), x)               # several outputs: a tuple
    want = np.sort(xn, -1)[:, ::-1][:, :2]
    assert np.allclose(vals.numpy(), want) and idx.dtype == em.int64
    g = (vals * em.tensor([[1.0, 10.0]])).sum().backward()[x]
    expect = np.zeros_like(xn)
    np.put_along_axis(expect, idx.numpy(), np.array([[1.0, 10.0]]).repeat(3, 0), -1)
    assert np.allclose(g.numpy(), expect)
    report = em.testing.check_op(TopK(3), em.randn(4, 7, dtype="float64"))
    print(report)
    print("ok")
