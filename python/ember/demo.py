"""The main-job demo: train a character-level transformer with a user-written custom op (SwiGLU).

Run ``python -m ember.demo`` (``--quick`` or ``--steps N`` for a short smoke run). It trains on the
corpus shipped in ``ember/data``, prints the loss as it falls and a generated sample, round-trips a
safetensors checkpoint, gradchecks the custom op, and ends with the line
``final loss X (unigram baseline Y)``.
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import ember as em
from ember import nn

# ----------------------------------------------------------------------------- the custom op


# The Metal forward, in MSL through em.metal.Kernel: both operands read through their layouts (one shape,
# two sets of strides), computed in float, one instantiation per float dtype.
SWIGLU_MSL = """
#include <metal_stdlib>
using namespace metal;
template <typename T>
kernel void swiglu(device const T* gate [[buffer(0)]], device const T* up [[buffer(1)]], device T* out [[buffer(2)]],
                   constant uint& n [[buffer(3)]], constant uint& ndim [[buffer(4)]],
                   constant long* shape [[buffer(5)]], constant long* sg [[buffer(6)]],
                   constant long* su [[buffer(7)]], constant long* offs [[buffer(8)]],
                   uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  long rem = i, ig = offs[0], iu = offs[1];
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const long k = rem % shape[d];
    ig += k * sg[d];
    iu += k * su[d];
    rem /= shape[d];
  }
  const float g = float(gate[ig]);
  out[i] = T(g / (1.0f + exp(-g)) * float(up[iu]));
}
template [[host_name("swiglu_float32")]] [[kernel]] decltype(swiglu<float>) swiglu<float>;
template [[host_name("swiglu_float16")]] [[kernel]] decltype(swiglu<half>) swiglu<half>;
template [[host_name("swiglu_bfloat16")]] [[kernel]] decltype(swiglu<bfloat>) swiglu<bfloat>;
"""
_SWIGLU_KERNELS = {dt: em.metal.Kernel(SWIGLU_MSL, f"swiglu_{dt}") for dt in ("float32", "float16", "bfloat16")}

# The CUDA forward, in CUDA C++ through em.cuda.Kernel: the same indexing, the layouts in a small int64 table
# (the shape, then each operand's strides and start offset); float32 (the demo trains in it).
SWIGLU_CUDA = """
__global__ void swiglu_float32(const float* gate, const float* up, const long long* view, float* out, int ndim,
                               long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long rem = i, ig = view[2 * ndim], iu = view[3 * ndim + 1];
  for (int d = ndim - 1; d >= 0; --d) {
    const long long k = rem % view[d];
    ig += k * view[ndim + d];
    iu += k * view[2 * ndim + 1 + d];
    rem /= view[d];
  }
  const float g = gate[ig];
  out[i] = g / (1.0f + expf(-g)) * up[iu];
}
"""
_SWIGLU_CUDA = em.cuda.Kernel(SWIGLU_CUDA, "swiglu_float32")


class SwiGLU(em.CustomOp2):
    """silu(gate) * up, written the way a user would: numpy forward on CPU, an MSL forward on Metal, a CUDA
    C++ forward on CUDA, Tensor-op backward."""

    name = "swiglu"

    def cpu_fwd(self, s_gate, l_gate, s_up, l_up):
        if tuple(l_gate.shape) != tuple(l_up.shape):
            raise em.ShapeError(f"[swiglu] gate {tuple(l_gate.shape)} and up {tuple(l_up.shape)} differ")
        gate, up = s_gate.as_numpy(l_gate), s_up.as_numpy(l_up)  # zero-copy strided, read-only views
        if gate.dtype != up.dtype or gate.dtype.kind != "f" and "bfloat16" not in str(gate.dtype):
            raise em.DTypeError(f"[swiglu] expected two float inputs of one dtype, got {gate.dtype}, {up.dtype}")
        # f16/bf16 compute in f32 (numpy has no fast half math); sigmoid via tanh never overflows.
        work = np.float64 if gate.dtype == np.float64 else np.float32
        g = gate.astype(work, copy=False)
        out = g * (0.5 + 0.5 * np.tanh(0.5 * g)) * up.astype(work, copy=False)
        return em.CpuStorage.from_numpy(np.ascontiguousarray(out.astype(gate.dtype, copy=False))), l_gate.shape

    def metal_fwd(self, s_gate, l_gate, s_up, l_up):
        if tuple(l_gate.shape) != tuple(l_up.shape):
            raise em.ShapeError(f"[swiglu] gate {tuple(l_gate.shape)} and up {tuple(l_up.shape)} differ")
        kernel = _SWIGLU_KERNELS.get(s_gate.dtype.name)
        if kernel is None or s_up.dtype != s_gate.dtype:
            raise em.DTypeError(f"[swiglu] expected two float inputs of one dtype, got {s_gate.dtype.name}, "
                                f"{s_up.dtype.name}")
        n = l_gate.numel()
        out = em.MetalStorage.empty(n, s_gate.dtype, s_gate.device)
        shape = list(l_gate.shape) or [1]
        scalars = [np.uint32(n), np.uint32(len(shape)), np.array(shape, np.int64),
                   np.array(list(l_gate.stride) or [0], np.int64), np.array(list(l_up.stride) or [0], np.int64),
                   np.array([l_gate.start_offset, l_up.start_offset], np.int64)]
        kernel(inputs=[s_gate, s_up], outputs=[out], scalars=scalars, grid_threads=(n, 1, 1),
               threads_per_threadgroup=(256, 1, 1))
        return out, l_gate.shape

    def cuda_fwd(self, s_gate, l_gate, s_up, l_up):
        if tuple(l_gate.shape) != tuple(l_up.shape):
            raise em.ShapeError(f"[swiglu] gate {tuple(l_gate.shape)} and up {tuple(l_up.shape)} differ")
        if s_gate.dtype != em.float32 or s_up.dtype != em.float32:
            raise em.DTypeError(f"[swiglu] the CUDA kernel takes two float32 inputs, got {s_gate.dtype.name}, "
                                f"{s_up.dtype.name}")
        n = l_gate.numel()
        out = em.CudaStorage.empty(n, em.float32, s_gate.device)
        shape = list(l_gate.shape) or [1]
        strides = [list(l.stride) or [0] for l in (l_gate, l_up)]
        table = shape + strides[0] + [l_gate.start_offset] + strides[1] + [l_up.start_offset]
        view = em.tensor(np.array(table, np.int64), device=s_gate.device).storage
        _SWIGLU_CUDA(inputs=[s_gate, s_up, view], outputs=[out], scalars=[np.int32(len(shape)), np.int64(n)],
                     grid=max(1, (n + 255) // 256), block=256)
        return out, l_gate.shape

    def bwd(self, gate, up, res, grad_res):
        s = nn.ops.sigmoid(gate)
        d_silu = s * (gate * (1.0 - s) + 1.0)  # d/dg [g * sigmoid(g)]
        return grad_res * up * d_silu, grad_res * gate * s


_SWIGLU = SwiGLU()


def swiglu(gate, up):
    return gate.apply_op2(up, _SWIGLU)


# ----------------------------------------------------------------------------- the model


class CharTransformer(nn.Module):
    """Token + position embeddings, pre-norm transformer blocks with SwiGLU MLPs, tied-free head."""

    def __init__(self, vocab, dim=64, n_layers=2, n_heads=4, ctx=64, device=None):
        super().__init__()
        self.ctx = ctx
        self.tok = nn.Embedding(vocab, dim, device=device)
        self.pos = nn.Embedding(ctx, dim, device=device)
        with em.no_grad():  # small embeddings (like GPT-2's 0.02 scale) keep early training stable
            self.tok.weight.set(self.tok.weight * 0.1)
            self.pos.weight.set(self.pos.weight * 0.1)
        self.blocks = nn.ModuleList(
            nn.TransformerBlock(dim, n_heads, mlp=nn.GatedMLP(dim, 2 * dim, activation=swiglu, device=device),
                                device=device)
            for _ in range(n_layers))
        self.norm = nn.RmsNorm(dim, device=device)
        self.head = nn.Linear(dim, vocab, bias=False, device=device)

    def forward(self, ids):
        t = ids.shape[-1]
        x = self.tok(ids) + self.pos(em.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ----------------------------------------------------------------------------- data


def load_corpus() -> str:
    return (Path(__file__).resolve().parent / "data" / "corpus.txt").read_text(encoding="utf-8")


class CharData:
    """The corpus as integer ids, split 90/10 into train and validation."""

    def __init__(self, text, ctx, seed):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        ids = np.array([self.index[c] for c in text], dtype=np.int64)
        cut = int(len(ids) * 0.9)
        self.train, self.val = ids[:cut], ids[cut:]
        self.ctx = ctx
        self.rng = np.random.default_rng(seed)

    def batch(self, size, split="train"):
        data = self.train if split == "train" else self.val
        starts = self.rng.integers(0, len(data) - self.ctx - 1, size)
        rows = starts[:, None] + np.arange(self.ctx + 1)[None, :]
        window = data[rows]
        return window[:, :-1], window[:, 1:]

    def eval_set(self, n):
        """n fixed, evenly spaced validation windows (the same every call)."""
        starts = np.linspace(0, len(self.val) - self.ctx - 1, n).astype(np.int64)
        window = self.val[starts[:, None] + np.arange(self.ctx + 1)[None, :]]
        return window[:, :-1], window[:, 1:]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def unigram_baseline(targets: np.ndarray, vocab: int) -> float:
    """Cross-entropy of the best unigram model of ``targets``: the entropy of their frequencies."""
    p = np.bincount(targets.reshape(-1), minlength=vocab) / targets.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


# ----------------------------------------------------------------------------- steps


def evaluate(model, xs, ys, device) -> float:
    with em.no_grad():
        logits = model(em.tensor(xs, device=device))
        return nn.cross_entropy(logits, em.tensor(ys, device=device)).item()


def sample(model, data, prompt, n, device, temperature=0.8, seed=0, top_k=10) -> str:
    """Continues ``prompt`` by ``n`` characters, top-k sampling on ``device``: each next character is drawn
    by ``em.multinomial`` among the ``top_k`` most likely ones (``em.topk`` of the last position's logits,
    weighted by their softmax at ``temperature``). Seeds ember's global generator with ``seed`` first, so
    a seed gives the same text on every run."""
    em.manual_seed(seed)
    ids = [data.index[c] for c in prompt]
    with em.no_grad():
        for _ in range(n):
            ctx = em.tensor([ids[-model.ctx:]], dtype=em.int64, device=device)
            logits = model(ctx)[0, -1] / temperature
            vals, idx = em.topk(logits, min(top_k, logits.shape[0]))
            weights = (vals - vals[0]).exp()  # unnormalised softmax: vals[0] is the largest
            ids.append(int(idx.index_select(em.multinomial(weights, 1), 0).item()))
    return data.decode(ids)


def check_checkpoint(model, config, xs, device) -> str:
    """Saves a safetensors checkpoint, loads it into a fresh model, demands identical logits."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "char_transformer.safetensors")
        em.save_safetensors(model.state_dict(), path)
        size = os.path.getsize(path)
        em.manual_seed(12345)  # a different init, so equality proves the load
        fresh = CharTransformer(**config, device=device)
        fresh.load_state_dict(em.load_safetensors(path, device=device))
    with em.no_grad():
        a = model(em.tensor(xs, device=device)).numpy()
        b = fresh(em.tensor(xs, device=device)).numpy()
    if not np.array_equal(a, b):
        raise SystemExit(f"checkpoint check FAILED: max logit difference {np.abs(a - b).max()}")
    return f"{len(model.state_dict())} tensors, {size / 1024:.0f} KiB"


def check_custom_op():
    """gradcheck of the SwiGLU custom op (float64 central differences against its bwd), then
    check_op (strided inputs, aliasing, dtypes, devices). Returns check_op's one-line summary."""
    em.manual_seed(7)
    # on the CPU whatever the default device: the float64 central differences need a float64 device
    gate, up = em.randn(4, 6, device=em.cpu) * 3.0, em.randn(4, 6, device=em.cpu)
    em.testing.gradcheck(swiglu, [gate, up])
    return str(em.testing.check_op(SwiGLU(), gate, up)).splitlines()[0]


def train(model, data, device, steps, batch=32, lr=3e-3, time_budget=math.inf, stop_after=None, val=None,
          log=True):
    """Trains ``model`` with AdamW on ``data``'s training batches: the demo's schedule of ``steps`` steps.

    Args:
        model: the model (its parameters on ``device``).
        data: a CharData; its generator draws the batches, so the same seed gives the same batches.
        device: where the batches go.
        steps: the schedule's length: linear warm-up over a tenth of it (at most 50 steps), then cosine
            decay to a tenth of the peak learning rate at its end.
        batch: sequences per step.
        lr: the peak learning rate.
        time_budget: seconds; training stops after the step that passes it, and the schedule's progress
            is the further along of steps and time, so a slow machine still anneals before it stops.
        stop_after: stop after this many steps of the schedule (None: all of them); the steps done are
            the first ones of the full schedule, with its learning rates.
        val: (inputs, targets) to report the validation loss on while logging, or None.
        log: show a progress bar and log the losses ten times in the run.

    Returns:
        tuple: (the training loss of each step done, the number of steps done).
    """
    opt = em.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, min(50, steps // 10))
    log_every = max(1, steps // 10)
    last = steps if stop_after is None else min(steps, stop_after)
    t0, running, losses = time.perf_counter(), None, []
    bar = tqdm(range(1, last + 1), desc="training", unit="step", dynamic_ncols=True, disable=not log)
    for step in bar:
        progress = max(step / steps, (time.perf_counter() - t0) / max(time_budget, 1e-9))
        frac = min(1.0, max(0.0, (progress - warmup / steps) / (1.0 - warmup / steps + 1e-9)))
        opt.lr = lr * (step / warmup if step <= warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        x, y = data.batch(batch)
        loss = nn.cross_entropy(model(em.tensor(x, device=device)), em.tensor(y, device=device))
        opt.backward_step(loss)
        value = loss.item()
        losses.append(value)
        running = value if running is None else 0.9 * running + 0.1 * value
        bar.set_postfix(loss=f"{running:.3f}")
        out_of_time = time.perf_counter() - t0 > time_budget
        if log and (step % log_every == 0 or step == steps or out_of_time):
            shown = f"{evaluate(model, *val, device):.3f}" if val is not None else "-"
            tqdm.write(f"step {step:5d}  train loss {running:.3f}  val loss {shown}")
        if out_of_time:
            if log:
                tqdm.write(f"time budget of {time_budget:.0f}s reached: stopping after {step} steps")
            break
    bar.close()
    return losses, len(losses)


# ----------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ember.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 500, quick: 20)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few steps, short sample")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=150.0,
                    help="stop training early after this many seconds (keeps the demo under 3 minutes)")
    ap.add_argument("--device", choices=("auto", "cpu", "metal", "cuda"), default="auto",
                    help="where to train (auto: CUDA, else Metal when available, else the CPU)")
    args = ap.parse_args(argv)
    steps = args.steps if args.steps is not None else (20 if args.quick else 500)
    if steps < 1:
        ap.error("--steps must be at least 1")

    if args.device == "auto":
        device = (em.Device("cuda", 0) if em.cuda.backend() == "nvidia"
                  else em.Device("metal", 0) if em.metal_is_available() else em.cpu)
    else:
        device = em.cpu if args.device == "cpu" else em.Device(args.device, 0)
    em.manual_seed(args.seed)
    config = {"dim": 64, "n_layers": 2, "n_heads": 4, "ctx": 64}
    data = CharData(load_corpus(), config["ctx"], args.seed)
    config["vocab"] = len(data.chars)
    model = CharTransformer(**config, device=device)
    xs_val, ys_val = data.eval_set(16 if args.quick else 64)
    baseline = unigram_baseline(ys_val, len(data.chars))
    print(f"ember demo: char transformer on {device}, {model.num_parameters():,} parameters, "
          f"corpus {len(data.train) + len(data.val):,} chars ({len(data.chars)} symbols), {steps} steps")
    print(f"initial val loss {evaluate(model, xs_val, ys_val, device):.3f} (unigram baseline {baseline:.3f})")
    t0 = time.perf_counter()

    step = train(model, data, device, steps, batch=args.batch, lr=args.lr, time_budget=args.time_budget,
                 val=(xs_val, ys_val))[1]
    print(f"trained {step} steps in {time.perf_counter() - t0:.1f}s")

    print("sample: " + repr(sample(model, data, "The ", 60 if args.quick else 200, device)))
    print(f"checkpoint: safetensors round trip, {check_checkpoint(model, config, xs_val[:4], device)}, "
          "reloaded logits identical")
    summary = check_custom_op()
    print(f"gradcheck: swiglu custom op backward matches finite differences; {summary}")
    final = evaluate(model, xs_val, ys_val, device)
    print(f"final loss {final:.3f} (unigram baseline {baseline:.3f})")
    return final, baseline


if __name__ == "__main__":
    main()
