"""Threads: set/get_num_threads, EMBER_NUM_THREADS, bit-identical results across thread counts, and ops
called from several Python threads at once (correct, no deadlock)."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember as em

pytestmark = pytest.mark.cpu_only  # the CPU thread pool (docs/design/testing.md)


@pytest.fixture
def restore_threads():
    n = em.get_num_threads()
    yield
    em.set_num_threads(n)


def test_set_get_num_threads(restore_threads):
    for n in (1, 3, 2):
        em.set_num_threads(n)
        assert em.get_num_threads() == n
    for bad in (0, -1, 1025):  # refused, the pool unchanged
        with pytest.raises(em.EmberValueError, match=r"^\[set_num_threads\] n must be between 1 and 1024"):
            em.set_num_threads(bad)
        assert em.get_num_threads() == 2


def test_env_var_sets_default():
    code = "import ember as em; print(em.get_num_threads())"
    env = dict(os.environ, EMBER_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


@pytest.mark.parametrize("spin", ["0", "50", "junk", "-5"])
def test_spin_env_var_keeps_results(spin):
    # EMBER_SPIN_US only changes how long idle workers spin: any value (bad ones mean the default) gives
    # the same bits, and a pool that sleeps at once still wakes for every call
    code = ("import numpy as np, ember as em; em.set_num_threads(2); x = em.randn(400, 1000); "
            "r = [float((x.exp() + x).sum()) for _ in range(50)]; print(len(set(r)), r[0])")
    outs = []
    for env_spin in (spin, None):
        env = dict(os.environ)
        env.pop("EMBER_SPIN_US", None)
        if env_spin is not None:
            env["EMBER_SPIN_US"] = env_spin
        out = subprocess.run([sys.executable, "-c", "import ember as em; em.manual_seed(1); " + code], check=False,
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        outs.append(out.stdout.split())
    assert outs[0][0] == "1" and outs[0] == outs[1]


def workload(seed):
    """Ops large enough to be split across threads (above the grain), with views and every reduction path."""
    em.manual_seed(seed)
    x = em.randn(300, 1000)
    y = em.rand(1000)
    h = x.to_dtype(em.float16)
    out = {
        "add": x + y, "exp": x.exp(), "strided": x.t().exp(), "cmp": x > y, "where": em.where(x > 0, x, y),
        "sum_rows": x.sum(1), "sum_cols": x.sum(0), "sum_all": x.sum(), "sum_t": x.t().sum((0,)),
        "max_cols": x.max(0), "argmax": x.argmax(1), "argmin_cols": x.argmin(0), "mean": x.mean(1),
        "long_row": x.reshape(-1).sum(), "half": (h * 2).sum(1), "cast": x.to_dtype(em.bfloat16),
        "matmul": x[:64] @ x[:64].t(), "cat": em.cat([x, x], 1), "gather": x.gather(em.zeros(300, 5, dtype=em.int64), 1),
        "index_select": x.index_select(em.arange(0, 1000, 7), 1), "randn": em.randn(100_000), "rand": em.rand(70_000),
        "contig": x.t().contiguous(),
    }
    return {k: v.numpy() for k, v in out.items()}


def test_results_identical_across_thread_counts(restore_threads):
    em.set_num_threads(1)
    ref = workload(11)
    for n in (2, 3, 4):
        em.set_num_threads(n)
        got = workload(11)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k} differs with {n} threads")


def test_concurrent_python_threads(restore_threads):
    em.set_num_threads(2)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    want_sum = a.astype(np.float64).sum(1)
    want_exp = np.exp(a)
    want_mm = a[:128].astype(np.float64) @ a[:, :96].astype(np.float64)
    errors = []

    def work(i):
        try:
            t = em.tensor(a)
            for _ in range(15):
                s = t.sum(1).numpy()
                e = t.exp().numpy()
                assert np.allclose(s, want_sum, rtol=1e-4, atol=1e-3)
                assert np.allclose(e, want_exp, rtol=1e-5)
                assert np.allclose((t[:128] @ t[:, :96]).numpy(), want_mm, rtol=1e-4, atol=1e-3)  # BLAS from many threads
                if i == 0:
                    em.set_num_threads(1 + _ % 3)  # resizing the pool while others compute
        except Exception as ex:  # noqa: BLE001
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "deadlock"
    assert not errors, errors[0]


def test_errors_inside_threaded_kernels_propagate(restore_threads):
    em.set_num_threads(2)
    big = em.zeros(200_000)
    with pytest.raises(em.IndexOutOfRange):
        big.index_select(em.tensor([0, 200_000]), 0)
    assert float(big.sum().item()) == 0.0  # the pool still works afterwards


@pytest.mark.parametrize("nthreads", [2, 3])
def test_back_to_back_pooled_calls_stay_exact(restore_threads, nthreads):
    """Thousands of small pooled calls in a row: workers wake from their spin, own their chunks and steal
    the rest; a worker late for one call must never run a chunk of the next (each result is checked)."""
    from ember.nn import ops

    em.set_num_threads(nthreads)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(3)]
    wants = [np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
             for x in xs]
    ts = [em.tensor(x) for x in xs]
    for i in range(1500):
        k = i % 3  # a different input and body each call: a stale chunk would show in the result
        got = ops.softmax(ts[k], -1).numpy() if i % 2 else ts[k].exp().numpy()
        want = wants[k] if i % 2 else np.exp(xs[k])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)


def test_blas_is_single_threaded_from_the_first_matmul():
    # ember's pool is the only source of threads: BLAS must be set to one thread before its first call,
    # even when a process's first parallel work is a one-tile matmul (which runs inline, without the pool)
    pytest.importorskip("scipy_openblas32")  # the BLAS ember links on Linux (macOS: Accelerate)
    code = ("import ctypes, os, sys, numpy as np, ember as em, scipy_openblas32 as sob\n"
            "a = em.tensor(np.ones((256, 256), np.float32)); (a @ a).numpy()\n"
            "lib = ctypes.CDLL(os.path.join(sob.get_lib_dir(), 'lib' + sob.get_library() + '.so'))\n"
            "print(lib.scipy_openblas_get_num_threads())")
    env = dict(os.environ, EMBER_NUM_THREADS="2", OPENBLAS_NUM_THREADS="4")
    out = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
