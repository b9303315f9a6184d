"""Fine-tune a Llama with a custom op in its MLP: python examples/finetune_llama.py [DIR] [--steps N].

Each layer's feed-forward runs the demo's SwiGLU custom op (a numpy forward on the CPU, an MSL kernel on
Metal, a tensor-op backward) instead of silu(gate) * up; the parameter names stay the checkpoint's, so
the result saves as a checkpoint transformers reads. Without DIR a tiny random model learns a short text.
"""
import argparse

import numpy as np

import ember as em
from ember import nn
from ember.demo import swiglu

TEXT = b"ember fuses kernels and differentiates custom ops. " * 8


class SwiGLUMLP(nn.Module):
    """Llama's MLP with the gate and up branches joined by the SwiGLU custom op; same parameters."""

    def __init__(self, mlp):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x):
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("checkpoint", nargs="?", help="a Hugging Face Llama checkpoint directory")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--quick", action="store_true", help="a few steps only")
    args = ap.parse_args()
    em.manual_seed(0)
    if args.checkpoint:
        model = em.models.Llama.from_pretrained(args.checkpoint, dtype="float32")
    else:
        model = em.models.Llama(dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                     tie_word_embeddings=True))
    names = [n for n, _ in model.named_parameters()]
    for layer in model.model.layers:
        layer.mlp = SwiGLUMLP(layer.mlp)
    assert [n for n, _ in model.named_parameters()] == names  # the checkpoint's names are kept
    model.train()
    data = np.frombuffer(TEXT, dtype=np.uint8).astype(np.int64) % model.config["vocab_size"]
    opt = em.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    steps = 25 if args.quick else args.steps
    rng = np.random.default_rng(0)
    ctx = 32
    losses = []
    for step in range(steps):
        starts = rng.integers(0, len(data) - ctx - 1, 8)
        batch = np.stack([data[s:s + ctx + 1] for s in starts])
        logits = model(batch[:, :-1])
        loss = nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), em.tensor(batch[:, 1:].reshape(-1)))
        opt.backward_step(loss)
        losses.append(loss.item())
        if step % 25 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.3f}")
    assert losses[-1] < 0.8 * losses[0], "the loss did not fall"
    if not args.checkpoint:
        model.eval()
        prompt = data[:8]
        out = model.generate(prompt, 24).numpy()
        print(bytes(int(t) for t in out[8:]).decode("latin-1"))
    print("ok")


if __name__ == "__main__":
    main()
