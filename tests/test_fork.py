"""Fork safety: a forked child gets a working pool of the size it asks for, whatever the parent was doing
(idle, resized, or another thread inside a pooled op or the allocator when fork() ran)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
              pytest.mark.cpu_only]  # the CPU thread pool across fork() (docs/design/testing.md)


def run_script(body, timeout=120, prelude=""):
    """Runs `prelude` and `body` in a fresh interpreter (a hang there must fail this test, not hang
    pytest); returns its stdout."""
    code = ("import os, sys, threading\nimport numpy as np\nimport ember as em\n" + textwrap.dedent(prelude)
            + textwrap.dedent(body))
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ, EMBER_NUM_THREADS="2"))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script hung (killed after {timeout} s); output so far: {e.stdout!r} {e.stderr!r}")
    assert out.returncode == 0, out.stdout + out.stderr
    # A hung child dumps its stack to stderr (below): the failure message shows where it was stuck.
    assert "hung" not in out.stdout, out.stdout + out.stderr
    return out.stdout


# A child that cannot finish its op would hang; each waits on a watchdog of its own.
CHILD = """
def child_work(n):
    import faulthandler
    faulthandler.dump_traceback_later(45)  # before wait_child's kill: where a stuck child is stuck
    em.set_num_threads(n)
    x = em.randn(1000, 1000)
    got = x.exp().numpy()
    ok = np.allclose(got, np.exp(x.numpy()), rtol=1e-5) and em.get_num_threads() == n
    ok = ok and np.allclose((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-3, atol=1e-2)
    h = x[:200].to(em.bfloat16)  # bfloat16 runs on AMX tiles where the CPU has them
    hf = h.to(em.float32).numpy()
    return ok and np.allclose((h @ h.t()).to(em.float32).numpy(), hf @ hf.T, rtol=2e-2, atol=0.5)

def wait_child(pid, seconds=60):
    import time
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"
"""


def test_forked_child_gets_a_working_pool():
    out = run_script(prelude=CHILD, body="""
    em.set_num_threads(2)
    em.randn(1000, 1000).exp()
    for n in (2, 3, 1):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if child_work(n) else 3)
        print(n, wait_child(pid))
    print("parent", em.get_num_threads(), bool(np.isfinite(em.randn(1000, 1000).exp().numpy()).all()))
    """)
    assert out.split("\n")[:4] == ["2 0", "3 0", "1 0", "parent 2 True"]


def test_child_without_set_num_threads_keeps_the_parents_size():
    out = run_script(prelude=CHILD, body="""
    em.set_num_threads(3)
    em.randn(1000, 1000).exp()
    pid = os.fork()
    if pid == 0:
        x = em.randn(1000, 1000)
        ok = em.get_num_threads() == 3 and np.allclose(x.exp().numpy(), np.exp(x.numpy()), rtol=1e-5)
        os._exit(0 if ok else 3)
    print(wait_child(pid))
    """)
    assert out.split() == ["0"]


def test_multiprocessing_fork_pool_with_set_num_threads_initializer():
    out = run_script("""
    import multiprocessing as mp

    def init():
        em.set_num_threads(2)

    def work(i):
        em.manual_seed(i)
        x = em.randn(500, 500)
        return float(x.exp().sum().item()), em.get_num_threads()

    em.set_num_threads(2)
    em.randn(1000, 1000).exp()
    ctx = mp.get_context("fork")
    with ctx.Pool(2, initializer=init) as pool:
        res = pool.map_async(work, range(6)).get(timeout=60)
    print(all(n == 2 for _, n in res), len(res))
    """)
    assert out.split() == ["True", "6"]


def test_fork_while_another_thread_is_inside_pooled_ops():
    # The other thread keeps the pool, the allocator and BLAS busy; every fork lands somewhere in
    # there. Each child must still run ops at the size it asks for.
    out = run_script(prelude=CHILD, body="""
    em.set_num_threads(2)
    stop = False

    def busy():
        a = em.randn(512, 512)
        h = a.to(em.bfloat16)
        while not stop:
            (a @ a).exp().sum()
            h @ h
            em.randn(300, 300) + 1.0

    t = threading.Thread(target=busy)
    t.start()
    codes = []
    try:
        for i in range(12):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if child_work(2) else 3)
            codes.append(wait_child(pid))
    finally:
        stop = True
        t.join()
    print(codes)
    """, timeout=240)
    assert out.strip() == str([0] * 12)
