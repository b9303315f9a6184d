"""Shared timing for the benchmarks: libraries interleaved call by call, each warmed to its steady state."""
import statistics
import time


def settle_and_warm(fn, pause, warm_s=0.03):
    """Sleeps `pause` s, then calls fn for ~`warm_s` s (at least twice). torch's (OpenMP) and MLX's workers
    keep spinning after a call and would steal a core from whichever library is timed next; after the
    pause a VM's cores need some milliseconds of work to come back to speed (a memory-bound 0.6 ms op
    timed on its second call after a 20 ms idle read 2-4x slower, for ember and torch alike), and
    allocator caches and lazy init settle too."""
    time.sleep(pause)
    t_end, n = time.perf_counter() + warm_s, 0
    while n < 2 or (n < 1000 and time.perf_counter() < t_end):
        fn()
        n += 1


def median_ms(fns, reps, settle=0.02, clock=time.perf_counter):
    """The median time in ms of each function over `reps` rounds; in each round the functions take turns,
    each settled and warmed (settle_and_warm) and then timed on one call, as an op inside a model's
    loop of back-to-back calls. `settle` may be a list: one pause per function. `clock`: time.thread_time
    times a single-threaded call by its CPU time, which other processes' load does not inflate."""
    times = [[] for _ in fns]
    pauses = settle if isinstance(settle, (list, tuple)) else [settle] * len(fns)
    for _ in range(reps):
        for i, f in enumerate(fns):
            settle_and_warm(f, pauses[i])
            t0 = clock()
            f()
            times[i].append((clock() - t0) * 1e3)
    return [statistics.median(t) for t in times]
