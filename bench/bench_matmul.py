"""Matmul GF/s and percent of the machine's FMA peak: ember (its packed GEMM and its OpenBLAS fallback)
beside torch (MKL) and numpy (OpenBLAS), at 1 and 2 threads, float32 / float16 / bfloat16.

    python bench/bench_matmul.py [--threads 1,2] [--dtypes f32,f16,bf16] [--reps R] [--only SUBSTRING]

The peak is measured here, per ISA, by an FMA-throughput loop (bench/fma_peak.c, built with the system
C compiler) run on as many threads as the row; "% peak" is of the ISA ember runs (EMBER_ISA lowers it).
Each thread count runs in its own process (numpy's OpenBLAS reads its thread count at start). Each cell is
the median of R calls, the libraries taking turns call by call (timing.py), so machine noise hits all alike.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", default="1,2", help="comma-separated thread counts, one process each")
ap.add_argument("--dtypes", default="f32,f16,bf16")
ap.add_argument("--reps", type=int, default=7)
ap.add_argument("--only", default="", help="run the rows whose name contains this")
ap.add_argument("--no-fallback", action="store_true", help="skip ember's OpenBLAS fallback column")
ap.add_argument("--cpu-time", action="store_true",
                help="time by the calling thread's CPU time (1 thread only): steady on a loaded machine")
ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
args = ap.parse_args()

if not args.child:
    for t in args.threads.split(","):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=t, OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, EMBER_NUM_THREADS=t)
        subprocess.run([sys.executable, *sys.argv, "--child", t], env=env, check=True)
    sys.exit(0)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from timing import median_ms  # noqa: E402

import ember as em  # noqa: E402

NT = args.child
if args.cpu_time and NT != 1:
    sys.exit("--cpu-time times the calling thread only: use it with --threads 1")
em.set_num_threads(NT)
torch.set_num_threads(NT)


def fma_peak(threads):
    """GF/s of each ISA's FMA loop on `threads` threads at once (best of several runs): {isa: gflops}."""
    with tempfile.TemporaryDirectory() as d:
        so = os.path.join(d, "fma_peak.so")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, os.path.join(HERE, "fma_peak.c")], check=True)
        lib = ctypes.CDLL(so)
        out = {}
        for isa in ("avx512", "avx2", "base"):
            f = getattr(lib, "fma_" + isa)
            f.restype, f.argtypes = ctypes.c_double, [ctypes.c_long]
            best = 0.0
            for _ in range(15):
                if args.cpu_time:  # one thread, on this one, by its CPU time
                    t0 = time.thread_time()
                    best = max(best, f(3_000_000) / (time.thread_time() - t0) / 1e9)
                    continue
                flops = [0.0] * threads

                def work(i, f=f, flops=flops):
                    flops[i] = f(3_000_000)  # ctypes releases the GIL: the threads run at once

                ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
                t0 = time.perf_counter()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                best = max(best, sum(flops) / (time.perf_counter() - t0) / 1e9)
                time.sleep(0.01)
            out[isa] = best
        return out


def shapes():
    """(name, batch, m, k, n, transpose A, transpose B)."""
    rows = [(f"{s}^3", (), s, s, s, False, False) for s in (256, 512, 1024, 2048, 4096)]
    for m, k, n in ((1024, 256, 768), (1024, 256, 256), (1024, 256, 1024), (1024, 1024, 256), (2048, 2048, 2048)):
        rows.append((f"LM {m}x{k}x{n}", (), m, k, n, False, False))
        rows.append((f"LM dX {m}x{n}x{k} (B^T)", (), m, n, k, False, True))
        rows.append((f"LM dW {k}x{m}x{n} (A^T)", (), k, m, n, True, False))
    for m in (1, 4, 16):
        rows.append((f"decode {m}x1024x1024", (), m, 1024, 1024, False, False))
        rows.append((f"decode {m}x1024x4096 (B^T)", (), m, 1024, 4096, False, True))
    rows.append(("attn 32x(128x64 @ 64x128)", (32,), 128, 64, 128, False, True))
    rows.append(("attn 32x(128x128 @ 128x64)", (32,), 128, 128, 64, False, False))
    return [r for r in rows if args.only in r[0]]


def operands(rng, batch, m, k, n, ta, tb):
    """The same values as numpy float32 arrays, laid out so that ta / tb make transposed views."""
    a = rng.standard_normal((*batch, k, m) if ta else (*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((*batch, n, k) if tb else (*batch, k, n)).astype(np.float32)
    return a, b


def tview(x, t, lib):
    if not t:
        return x
    return x.swapaxes(-1, -2) if lib == "np" else x.transpose(-1, -2)


def main():
    peak = fma_peak(NT)
    isa = em._C.isa()
    clock = "calling thread's CPU time" if args.cpu_time else "wall time"
    print(f"\n# matmul, {NT} thread(s), {clock}, ember {isa} kernels (AMX for bf16: {em._C.has_amx()}), "
          f"torch {torch.__version__} (MKL), numpy {np.__version__} (OpenBLAS), "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print("measured FMA peak, GF/s: " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items()) + f"; % of {isa}'s")
    rng = np.random.default_rng(0)
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    edt = {"f32": em.float32, "f16": em.float16, "bf16": em.bfloat16}
    for dt in args.dtypes.split(","):
        fb = not args.no_fallback
        print(f"\n## {dt}, {NT} thread(s)\n")
        head = "| shape | ember GF/s | % peak |" + (" ember blas |" if fb else "") + " torch |"
        head += " numpy |" if dt == "f32" else ""
        head += " ember/torch |" + (" ember/numpy |" if dt == "f32" else "")
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for name, batch, m, k, n, ta, tb in shapes():
            a, b = operands(rng, batch, m, k, n, ta, tb)
            ea = tview(em.tensor(a).to(edt[dt]), ta, "em")
            eb = tview(em.tensor(b).to(edt[dt]), tb, "em")
            xa = tview(torch.from_numpy(a).to(tdt[dt]), ta, "t")
            xb = tview(torch.from_numpy(b).to(tdt[dt]), tb, "t")
            na, nb = tview(a, ta, "np"), tview(b, tb, "np")

            def ember(ea=ea, eb=eb):
                ea @ eb

            def ember_blas(ea=ea, eb=eb):
                os.environ["EMBER_MATMUL_GEMM"] = "blas"  # read per call
                ea @ eb
                os.environ.pop("EMBER_MATMUL_GEMM", None)

            fns = [ember] + ([ember_blas] if fb else []) + [lambda xa=xa, xb=xb: xa @ xb]
            if dt == "f32":
                fns.append(lambda na=na, nb=nb: na @ nb)
            flops = 2.0 * m * n * k * (int(np.prod(batch)) if batch else 1)
            reps = args.reps if flops < 2e10 else max(3, args.reps // 2)
            # numpy's OpenBLAS workers spin ~0.1 s after a call (2^28 cycles) and took a core from whichever
            # library came next (ember, which read half its speed): that one waits them out
            settle = [0.15 if dt == "f32" and NT > 1 else 0.02] + [0.02] * (len(fns) - 1)
            ms = median_ms(fns, reps, settle, time.thread_time if args.cpu_time else time.perf_counter)
            gf = [flops / t / 1e6 for t in ms]
            row = f"| {name} | {gf[0]:.0f} | {100 * gf[0] / peak[isa]:.0f}% |"
            row += "".join(f" {g:.0f} |" for g in gf[1:])
            ti = 2 if fb else 1
            row += f" {gf[0] / gf[ti]:.2f}x |"
            if dt == "f32":
                row += f" {gf[0] / gf[ti + 1]:.2f}x |"
            print(row, flush=True)


main()
