"""Example: a small conv net (Conv2d, BatchNorm2d, MaxPool2d, GroupNorm, AdaptiveAvgPool2d, Linear) trained
end to end on noisy 8x8 digit glyphs generated here, with AdamW and a label-smoothed cross_entropy.

    python examples/convnet.py [--quick] [--epochs N] [--device cpu|metal]
"""
import argparse
import time

import numpy as np

import ember as em
from ember import nn

# 5x7 bitmaps of the digits 0-9 (one string of 7 rows of 5 pixels per digit).
FONT = [
    "01110 10001 10011 10101 11001 10001 01110", "00100 01100 00100 00100 00100 00100 01110",
    "01110 10001 00001 00010 00100 01000 11111", "11111 00010 00100 00010 00001 10001 01110",
    "00010 00110 01010 10010 11111 00010 00010", "11111 10000 11110 00001 00001 10001 01110",
    "00110 01000 10000 11110 10001 10001 01110", "11111 00001 00010 00100 01000 01000 01000",
    "01110 10001 10001 01110 10001 10001 01110", "01110 10001 10001 01111 00001 00010 01100",
]
GLYPHS = np.array([[[int(c) for c in row] for row in f.split()] for f in FONT], dtype=np.float32)  # (10, 7, 5)


def make_digits(n, rng):
    """n noisy 8x8 images (N, 1, 8, 8) of random digits, each shifted by up to a pixel, and their labels."""
    labels = rng.integers(0, 10, size=n)
    images = np.zeros((n, 8, 8), dtype=np.float32)
    dy, dx = rng.integers(0, 2, size=n), rng.integers(0, 4, size=n)
    rows = dy[:, None, None] + np.arange(7)[None, :, None]
    cols = dx[:, None, None] + np.arange(5)[None, None, :]
    images[np.arange(n)[:, None, None], rows, cols] = GLYPHS[labels]
    images = images * rng.uniform(0.6, 1.0, size=(n, 1, 1)) + rng.normal(0.0, 0.35, size=images.shape)
    return images[:, None].astype(np.float32), labels


class ConvNet(nn.Module):
    """Two conv blocks, global-ish pooling and a linear classifier."""

    def __init__(self, device):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, device=device), nn.BatchNorm2d(16, device=device), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, device=device), nn.GroupNorm(4, 32, device=device), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Linear(32 * 4, 10, device=device)

    def forward(self, x):
        h = self.features(x)
        return self.head(h.reshape(h.shape[0], -1))


def accuracy(model, x, y):
    model.eval()
    with em.no_grad():
        pred = model(x).argmax(-1).numpy()
    model.train()
    return float((pred == y).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short run (the test suite's)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    args, _ = ap.parse_known_args()
    device = em.Device(args.device)
    rng = np.random.default_rng(0)
    em.manual_seed(0)
    n_train, epochs = (2048, 3) if args.quick else (4096, 8)
    epochs = args.epochs or epochs
    xtr, ytr = make_digits(n_train, rng)
    xte, yte = make_digits(512, rng)
    x_test = em.tensor(xte, device=device)

    model = ConvNet(device)
    opt = em.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
    batch = 32
    print(f"convnet: {model.num_parameters()} parameters, {n_train} training digits, device {device}")
    print(f"accuracy before training: {accuracy(model, x_test, yte):.3f}")
    losses = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        order = rng.permutation(n_train)
        total = 0.0
        for i in range(0, n_train, batch):
            idx = order[i : i + batch]
            xb, yb = em.tensor(xtr[idx], device=device), em.tensor(ytr[idx], device=device)
            loss = nn.cross_entropy(model(xb), yb, label_smoothing=0.05)
            opt.backward_step(loss)
            total += loss.item() * len(idx)
        losses.append(total / n_train)
        acc = accuracy(model, x_test, yte)
        print(f"epoch {epoch + 1}: loss {losses[-1]:.4f}, test accuracy {acc:.3f} ({time.perf_counter() - t0:.2f} s)")
    assert losses[-1] < losses[0] * 0.7, losses
    assert acc > (0.8 if args.quick else 0.9), acc
    print("convnet: ok")


if __name__ == "__main__":
    main()
