"""Example: em.profiler over a training step of a small transformer with a custom op, and the same
step with em.checkpoint (TransformerBlock(checkpoint=True)): same gradients, less memory held."""
import json
import os
import tempfile

import numpy as np

import ember as em


class Swish(em.CustomOp1):
    """x * sigmoid(x) through the fused sigmoid; its backward comes from the reference."""

    name = "swish"

    def cpu_fwd(self, storage, layout):
        x = storage.as_numpy(layout)
        return em.CpuStorage.from_numpy(np.ascontiguousarray(x / (1 + np.exp(-x)))), layout.shape

    def reference(self, x):
        return x * em.nn.ops.sigmoid(x)


def model(checkpoint):
    em.manual_seed(0)
    return [em.nn.TransformerBlock(32, 4, checkpoint=checkpoint) for _ in range(3)]


def step(blocks, x):
    h = x
    for b in blocks:
        h = b(h).apply_op1(Swish())
    loss = (h * h).mean()
    held = em.memory_stats("cpu")["allocated_bytes"]
    return loss.backward(), held


if __name__ == "__main__":
    x = em.Var(np.random.default_rng(0).standard_normal((2, 16, 32)).astype(np.float32))
    plain, ckpt = model(False), model(True)
    with em.profiler.profile(record_shapes=True) as prof:
        grads, held = step(plain, x)
    print(prof.table(sort_by="self_time", row_limit=10))
    names = {r["name"] for r in prof.key_averages()}
    assert {"swish", "swish_bwd", "rms_norm", "rms_norm_bwd", "sdpa", "matmul"} <= names
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)                    # open it in https://ui.perfetto.dev
    assert json.load(open(path))["traceEvents"]
    grads_c, held_c = step(ckpt, x)
    print(f"bytes held after the forward: {held} without checkpointing, {held_c} with")
    assert held_c < held
    for a, b in zip(plain, ckpt):
        for p, q in zip(a.parameters(), b.parameters()):
            assert np.allclose(grads[p].numpy(), grads_c[q].numpy(), rtol=1e-4, atol=1e-6)
    print("ok")
