"""The packed GEMM's register tiles at their edges, under every ISA the CPU runs (EMBER_ISA): row counts around
the matmul's panel heights (AVX-512 14, AVX2 6, base 4) and the convs' (8), columns around the 32 / 16 / 8-wide
panels, k across the 256- and 512-deep k blocks, A read in place, packed from A^T and from strided views (up front, or
by the block that alone reads them), B or A^T packed by the tiles that first read them (wide or tall products),
against a float64 reference, and the same bits on 1 and 3 threads."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cpu_only("EMBER_ISA, EMBER_MATMUL_GEMM and the thread pool pick CPU kernels")

SCRIPT = r"""
import json, sys
import numpy as np
import ember as em
rng = np.random.default_rng(5)
bad = []

def view(x, kind):
    # (tensor, float64 array) of the values x laid out as kind: c contiguous, t stored transposed,
    # s every other row and column of a bigger array
    if kind == "t":
        return em.tensor(np.ascontiguousarray(x.T)).t(), x.astype(np.float64)
    if kind == "s":
        big = np.zeros((2 * x.shape[0], 2 * x.shape[1]), np.float32)
        big[::2, 1::2] = x
        return em.tensor(big)[::2, 1::2], x.astype(np.float64)
    return em.tensor(x), x.astype(np.float64)

def check(name, got, a, b, k):
    want = a @ b
    scale = np.abs(a) @ np.abs(b) + 1e-30
    err = float((np.abs(got.astype(np.float64) - want) / scale).max()) if want.size else 0.0
    if not got.shape == want.shape or err > (k + 2) * 2.0**-24:
        bad.append([name, list(got.shape), err])

cases = []
for m in (1, 3, 5, 6, 7, 13, 14, 15, 17, 27, 28, 29, 41, 127, 129, 143):
    for n in (31, 32, 33, 100):
        cases.append((m, 37 if m < 40 else 300, n))
# one, two and three k blocks, ragged (256 deep; the AVX-512 matmul's 512)
for k in (1, 2, 255, 256, 257, 511, 512, 513, 700, 1023, 1025, 1537):
    cases.append((45, k, 70))
    cases.append((29, k, 64))
# several row blocks (~128 rows) by several k blocks by several column panels: the k blocks run outside the row
# blocks, and the tiles fetch the next A panel and B micro-panel ahead (row and column ends, k block changes)
cases += [(300, 700, 130), (143, 513, 97), (257, 520, 64)]
for m, k, n in cases:
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    y = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    for ka, kb in (("c", "c"), ("t", "c"), ("s", "c"), ("c", "t"), ("t", "t")):
        ta, a = view(x, ka)
        tb, b = view(y, kb)
        check(f"{m}x{k}x{n} {ka}{kb}", (ta @ tb).numpy(), a, b, k)
# wide products (one row block, B's columns split): each block's row-major float B read in place and packed by
# its first row panel's tiles; ragged last column panel, ragged rows, several k blocks, A in place / A^T / strided
for m, k, n in ((30, 600, 700), (17, 257, 1001), (143, 513, 999), (20, 1030, 2050), (60, 40, 4100)):
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    y = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    for ka in ("c", "t", "s"):
        ta, a = view(x, ka)
        check(f"wide {m}x{k}x{n} {ka}c", (ta @ em.tensor(y)).numpy(), a, y.astype(np.float64), k)
    # B a row-major view with a longer row stride, and batched B (one per batch, A's batches too)
    yb = rng.uniform(-1, 1, (k, n + 40)).astype(np.float32)
    check(f"wide {m}x{k}x{n} B[:, :n]", (em.tensor(x) @ em.tensor(yb)[:, :n]).numpy(), x.astype(np.float64),
          yb[:, :n].astype(np.float64), k)
    xb = rng.uniform(-1, 1, (2, m, k)).astype(np.float32)
    y2 = rng.uniform(-1, 1, (2, k, n)).astype(np.float32)
    got = (em.tensor(xb) @ em.tensor(y2)).numpy()
    for g in range(2):
        check(f"wide batched {m}x{k}x{n} [{g}]", got[g], xb[g].astype(np.float64), y2[g].astype(np.float64), k)
# the LM step's dW (A^T, 256x1024x1024) on one thread: a row block of a ragged last panel that just fits the
# ~1 ms block size limit, so one block per column range, B packed by its tiles
nt0 = em.get_num_threads()
em.set_num_threads(1)
x = rng.uniform(-1, 1, (256, 1024)).astype(np.float32)
y = rng.uniform(-1, 1, (1024, 1024)).astype(np.float32)
ta, a = view(x, "t")
check("1 thread 256x1024x1024 tc", (ta @ em.tensor(y)).numpy(), a, y.astype(np.float64), 1024)
em.set_num_threads(nt0)
# tall products from A^T (one column block, A's rows split): each block's A^T rows read in place and packed by
# its first column panel's tiles; ragged last row panel, n below one panel, several k blocks, batched
for m, k, n in ((300, 600, 64), (143, 1030, 33), (1000, 300, 40), (45, 257, 20), (160, 513, 150)):
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    y = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    for kb in ("c", "t"):
        ta, a = view(x, "t")
        tb, b = view(y, kb)
        check(f"tall {m}x{k}x{n} t{kb}", (ta @ tb).numpy(), a, b, k)
    xb = rng.uniform(-1, 1, (2, k, m)).astype(np.float32)
    y2 = rng.uniform(-1, 1, (2, k, n)).astype(np.float32)
    got = (em.tensor(xb).transpose(1, 2) @ em.tensor(y2)).numpy()
    for g in range(2):
        check(f"tall batched {m}x{k}x{n} [{g}]", got[g], xb[g].T.astype(np.float64), y2[g].astype(np.float64), k)
# batches stacked into one product against a shared B: ragged panels cross the batch boundaries
x = rng.uniform(-1, 1, (3, 19, 260)).astype(np.float32)
y = rng.uniform(-1, 1, (260, 47)).astype(np.float32)
check("3x19x260 @ 260x47", (em.tensor(x) @ em.tensor(y)).numpy(), x.astype(np.float64), y.astype(np.float64), 260)
# A's rows 4 KiB apart and many columns: A packed by 16 x 16 transposes (AVX-512), not read in place
x = rng.uniform(-1, 1, (45, 1024)).astype(np.float32)
y = rng.uniform(-1, 1, (1024, 530)).astype(np.float32)
check("45x1024x530", (em.tensor(x) @ em.tensor(y)).numpy(), x.astype(np.float64), y.astype(np.float64), 1024)
# halves converted while packing: k around the 16-step transposes, A's rows and B^T's rows read along k
for dt, ulp in ((em.float16, 2.0**-11), (em.bfloat16, 2.0**-8)):
    for k in (15, 16, 17, 33, 64):
        x = em.tensor(rng.uniform(-1, 1, (29, k)).astype(np.float32)).to(dt)
        y = em.tensor(rng.uniform(-1, 1, (45, k)).astype(np.float32)).to(dt)
        a, b = x.to(em.float32).numpy().astype(np.float64), y.to(em.float32).numpy().astype(np.float64).T
        want = a @ b
        got = (x @ y.t()).to(em.float32).numpy().astype(np.float64)
        err = float((np.abs(got - want) / (np.abs(a) @ np.abs(b) + 1e-30)).max())
        if err > (k + 2) * 2.0**-24 + ulp:
            bad.append([f"{dt} 29x{k}x45 ct", [29, 45], err])
# the same bits on any thread count, ragged shapes big enough to split into several blocks (of whole panels
# spread evenly, so the blocks' edges move with the thread count)
outs = []
for nt in (1, 2, 3):
    em.set_num_threads(nt)
    r = np.random.default_rng(9)
    res = []
    for m, k, n, t in ((299, 520, 203, False), (299, 520, 203, True), (143, 300, 700, True), (1000, 70, 33, False),
                       (1024, 40, 100, True), (50, 40, 2000, False), (30, 600, 1100, True), (45, 300, 3000, False),
                       (256, 1024, 1024, True)):
        a = r.standard_normal((k, m) if t else (m, k)).astype(np.float32)
        b = em.tensor(r.standard_normal((k, n)).astype(np.float32))
        res.append(((em.tensor(a).t() if t else em.tensor(a)) @ b).numpy())
    outs.append(res)
same = all(np.array_equal(p, q) for o in outs[1:] for p, q in zip(outs[0], o))
print(json.dumps({"isa": em._C.isa(), "bad": bad[:10], "nbad": len(bad), "same": same}))
"""


@pytest.mark.parametrize("isa", ["base", "avx2", "avx512"])
def test_tile_edges_every_isa(isa):
    env = dict(os.environ, EMBER_ISA=isa, EMBER_MATMUL_GEMM="packed", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # a CPU without the level falls back to a lower one, which is then checked again: still a valid run
    assert got["nbad"] == 0, (got["isa"], got["bad"])
    assert got["same"], got["isa"]
