"""The small-LM training step, ember beside torch: forward, backward and AdamW, interleaved step by step.

    python bench/bench_train.py [--threads 2] [--reps 9] [--cpu-time] [--profile]

The model (issue 37's): token + position embeddings, 4 pre-norm blocks (LayerNorm, causal self-attention of
4 heads with one qkv projection, LayerNorm, a GELU MLP of width 1024), a final LayerNorm and a linear head;
dim 256, context 128, batch 8, vocabulary 256. Both libraries start from the same weights and see the same
batch. Each cell is the median of R steps, the libraries taking turns step by step (timing.py).
--profile prints ember's matmul calls of one step by shape and layout, the step's time split, and the
other ops by self time.
"""
import argparse
import collections
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=9)
ap.add_argument("--cpu-time", action="store_true",
                help="time by the calling thread's CPU time (1 thread only): steady on a loaded machine")
ap.add_argument("--profile", action="store_true", help="also profile one ember step (matmuls by shape)")
args = ap.parse_args()
if args.cpu_time and args.threads != 1:
    sys.exit("--cpu-time times the calling thread only: use it with --threads 1")
for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "EMBER_NUM_THREADS"):
    os.environ[v] = str(args.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_ms  # noqa: E402

import ember as em  # noqa: E402
from ember import nn  # noqa: E402

VOCAB, DIM, HIDDEN, LAYERS, HEADS, CTX, BATCH = 256, 256, 1024, 4, 4, 128, 8


class EmLM(nn.Module):
    """ember's model: nn.TransformerBlock with LayerNorm and a GELU MLP."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(CTX, DIM)
        self.blocks = nn.ModuleList(
            nn.TransformerBlock(DIM, HEADS, mlp=nn.MLP(DIM, HIDDEN, "gelu"), norm="layer") for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(em.arange(ids.shape[-1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


class TAttn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = torch.nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, DIM))


class TMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(DIM, HIDDEN)
        self.proj = torch.nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class TBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = torch.nn.LayerNorm(DIM), TAttn(), torch.nn.LayerNorm(DIM), TMLP()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(VOCAB, DIM), torch.nn.Embedding(CTX, DIM)
        self.blocks = torch.nn.ModuleList(TBlock() for _ in range(LAYERS))
        self.norm, self.head = torch.nn.LayerNorm(DIM), torch.nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[-1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def main():
    em.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    em.manual_seed(0)
    em_model, t_model = EmLM(), TLM()
    ep = dict(em_model.named_parameters())
    with torch.no_grad():
        for name, p in t_model.named_parameters():
            p.copy_(torch.from_numpy(ep[name].numpy()))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (BATCH, CTX + 1))
    ex, ey = em.tensor(ids[:, :-1]), em.tensor(ids[:, 1:])
    tx, ty = torch.from_numpy(ids[:, :-1]), torch.from_numpy(ids[:, 1:])
    e_opt = em.optim.AdamW(em_model.parameters(), lr=1e-3, weight_decay=0.01)
    t_opt = torch.optim.AdamW(t_model.parameters(), lr=1e-3, weight_decay=0.01)

    def em_step():
        loss = nn.cross_entropy(em_model(ex).reshape(-1, VOCAB), ey.reshape(-1))
        e_opt.backward_step(loss)
        return loss

    def t_step():
        t_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(t_model(tx).reshape(-1, VOCAB), ty.reshape(-1))
        loss.backward()
        t_opt.step()
        return loss

    l0e, l0t = float(em_step().item()), float(t_step().item())
    clock = "calling thread's CPU time" if args.cpu_time else "wall time"
    print(f"# small-LM training step, {args.threads} thread(s), {clock}, ember {em._C.isa()}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; first losses ember {l0e:.4f} torch {l0t:.4f}")
    ms = median_ms([em_step, t_step], args.reps, 0.05, time.thread_time if args.cpu_time else time.perf_counter)
    print(f"step ms: ember {ms[0]:.1f}, torch {ms[1]:.1f}; torch/ember {ms[1] / ms[0]:.2f}x")
    if args.profile:
        profile(em_step)


def profile(step):
    """One ember step with every matmul timed by shape and layout (the layout: which operand is a
    transposed view), beside the whole step's time."""
    calls = collections.defaultdict(lambda: [0, 0.0])
    clock = time.thread_time if args.cpu_time else time.perf_counter
    orig = em._C.matmul

    def lay(layout):
        s = layout.stride
        return "T" if len(s) >= 2 and s[-2] == 1 and s[-1] != 1 else "N"

    def timed(sa, la, sb, lb):
        t0 = clock()
        out = orig(sa, la, sb, lb)
        dt = clock() - t0
        key = f"{la.shape}{lay(la)} @ {lb.shape}{lay(lb)}"
        calls[key][0] += 1
        calls[key][1] += dt
        return out

    step()
    em._C.matmul = timed  # every matmul, forward and backward, goes through this one entry
    try:
        t0 = clock()
        step()
        total = clock() - t0
    finally:
        em._C.matmul = orig
    mm = sum(v[1] for v in calls.values())
    print(f"\nember step {total * 1e3:.1f} ms, {sum(v[0] for v in calls.values())} matmul calls "
          f"{mm * 1e3:.1f} ms ({100 * mm / total:.0f}%)")
    for key, (n, t) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
        print(f"  {n:3d} x {key}: {t * 1e3:.1f} ms")
    prof_time = em.profiler.time
    # the profiler reads time.perf_counter: hand it the clock this run uses (thread CPU time with --cpu-time)
    em.profiler.time = type("Clock", (), {"perf_counter": staticmethod(clock)})
    try:
        with em.profiler.profile() as prof:  # the rest of the step, op by op
            step()
    finally:
        em.profiler.time = prof_time
    rows = [r for r in prof.key_averages() if r["name"] != "matmul"]
    print(f"\nthe other ops of one step by self time (em.profiler, {'CPU time' if args.cpu_time else 'wall clock'}):")
    for r in sorted(rows, key=lambda r: -r["self_time"])[:12]:
        name = r["name"] if r["forward_op"] is None else f"{r['name']} (of {r['forward_op']})"
        print(f"  {r['calls']:3d} x {name}: {r['self_time'] * 1e3:.1f} ms")


main()
