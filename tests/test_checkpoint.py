"""em.checkpoint: same values and gradients as without it (random ops, custom and fused ops, captured parameters, create_graph), less memory."""
import numpy as np

import ember as em
from ember.tensor_type import _wrap


class Scale3(em.CustomOp):
    name = "scale3_ckpt"

    def cpu_fwd(self, inputs):
        (s, l), = inputs
        x = _wrap(s, l, s.dtype, s.device)
        with em.no_grad():
            return [((x * 3.0).copy()._storage, l.shape), ((x * x).copy()._storage, l.shape)]

    metal_fwd = cuda_fwd = cpu_fwd

    def reference(self, x):
        return x * 3.0, x * x


def _pair(device, dtype="float32"):
    rng = np.random.default_rng(0)
    w = em.Var(rng.standard_normal((6, 6)) * 0.5, dtype=dtype, device=device)

    def f(x, scale=1.0):
        h = (x @ w).tanh() * scale
        keep = em.rand(*h.shape, device=device).lt(0.5).to_dtype(h.dtype)  # dropout-like
        a, b = em.apply_op(Scale3(), h * keep)
        return em.nn.ops.rms_norm(a + b), b

    x = em.Var(rng.standard_normal((3, 6)), dtype=dtype, device=device)
    return f, x, w


def test_same_values_and_gradients_with_random_custom_and_fused_ops(device):
    f, x, w = _pair(device)
    em.manual_seed(7)
    y, b = f(x, scale=2.0)
    g = ((y * y).sum() + b.sum()).backward()
    em.manual_seed(7)
    y2, b2 = em.checkpoint(f, x, scale=2.0)
    assert y2._op is not None and y2._op.name == "checkpoint"
    g2 = ((y2 * y2).sum() + b2.sum()).backward()
    np.testing.assert_array_equal(y.numpy(), y2.numpy())
    for t in (x, w):  # w is captured by f, not passed: it still gets its gradient
        np.testing.assert_allclose(g2[t].numpy(), g[t].numpy(), rtol=1e-5, atol=1e-6)
    assert em.rand(1, device=device).shape == (1,)  # the generator moved on as usual


def test_create_graph_through_checkpoint():
    f, x, w = _pair("cpu", "float64")
    em.manual_seed(3)
    y, _ = f(x)
    gx = (y * y).sum().backward(create_graph=True)[x]
    h = (gx * gx).sum().backward()
    em.manual_seed(3)
    y2, _ = em.checkpoint(f, x)
    gx2 = (y2 * y2).sum().backward(create_graph=True)[x]
    h2 = (gx2 * gx2).sum().backward()
    np.testing.assert_allclose(gx2.numpy(), gx.numpy(), rtol=1e-10)
    for t in (x, w):
        np.testing.assert_allclose(h2[t].numpy(), h[t].numpy(), rtol=1e-8, atol=1e-12)


def test_outside_grad_mode_and_errors():
    x = em.Var(np.ones(3), device="cpu")
    with em.no_grad():
        assert em.checkpoint(lambda t: t * 2.0, x)._op is None
    y = em.checkpoint(lambda t: t, x)  # an output that is its input: still a new, recorded result
    assert y is not x and y.sum().backward()[x].numpy().tolist() == [1.0, 1.0, 1.0]
    try:
        em.checkpoint(lambda t: 5, x)
    except em.EmberTypeError as e:
        assert str(e).startswith("[checkpoint]")
    else:
        raise AssertionError("no error")


def test_transformer_blocks_checkpointed_match_and_use_less_memory():
    em.manual_seed(0)
    plain = [em.nn.TransformerBlock(32, 4, device="cpu") for _ in range(4)]
    ckpt = [em.nn.TransformerBlock(32, 4, device="cpu", checkpoint=True) for _ in range(4)]
    for a, b in zip(plain, ckpt):
        for p, q in zip(a.parameters(), b.parameters()):
            q.set(p)
    x = em.Var(np.random.default_rng(1).standard_normal((2, 16, 32)), dtype="float32", device="cpu")

    def step(blocks):
        h = x
        for blk in blocks:
            h = blk(h)
        loss = (h * h).mean()
        peak_fwd = em.memory_stats("cpu")["allocated_bytes"]
        return loss.backward(), peak_fwd

    (g1, held1), (g2, held2) = step(plain), step(ckpt)
    assert held2 < held1  # what the graph holds after the forward
    for a, b in zip(plain, ckpt):
        for p, q in zip(a.parameters(), b.parameters()):
            np.testing.assert_allclose(g2[q].numpy(), g1[p].numpy(), rtol=1e-4, atol=1e-6)
