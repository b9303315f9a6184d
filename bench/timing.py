"""Shared timing for the nn and conv benchmarks: libraries interleaved call by call, each call timed alone."""
import statistics
import time

# torch's OpenMP workers (and ember's pool) spin for a while after a parallel region and would steal a
# core from the next library's call; so each turn idles first, then runs one untimed call (as a model's
# previous op would) and times the next, back to back as in a model.
SETTLE_S = 0.02


def median_ms(fns, reps, settle=SETTLE_S):
    """The median time in ms of each function over `reps` rounds, the functions taking turns in each round."""
    for f in fns:  # warm-up: allocator caches, BLAS buffers, torch's lazy init
        f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            time.sleep(settle)
            f()
            t0 = time.perf_counter()
            f()
            times[i].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]
