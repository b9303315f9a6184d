"""Impossible sizes are refused before anything is allocated, and ops take no memory beyond their result:
each case runs in a child process whose peak resident memory (ru_maxrss) is measured, under an address
space limit a few GiB above its start, so a regression fails here rather than taking the machine's memory."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import TEST_DEVICE

MiB = 2**20

CHILD = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    import ember as em
    dev = em.Device(sys.argv[1])

    def vm_size():  # None off Linux: no address-space limit there, the peak is still measured
        try:
            with open("/proc/self/status") as f:
                return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
        except OSError:
            return None

    def peak():  # ru_maxrss is in KiB on Linux, in bytes on macOS
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

    {setup}
    if vm_size() is not None:
        resource.setrlimit(resource.RLIMIT_AS, (vm_size() + 3 * 2**30, resource.RLIM_INFINITY))
    before = peak()
    try:
        out = {action}
        outcome = "ok"
    except em.EmberError as e:
        outcome = str(e)
    except MemoryError as e:  # a bare one (std::bad_alloc, numpy): the bug this file guards against
        outcome = "bare MemoryError: " + str(e)
    print(json.dumps({{"grew": peak() - before, "outcome": outcome, "check": {check}}}))
""")


def run_child(setup, action, check="None"):
    """Runs action after setup in a fresh process on the device under test: (bytes its peak RSS grew,
    "ok" or the EmberError's message, the value of check)."""
    code = CHILD.format(setup=setup, action=action, check=check)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code, str(TEST_DEVICE)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return res["grew"], res["outcome"], res["check"]


@pytest.mark.parametrize("setup,action,op", [
    # the kernel's source tables (2**31 rows) were built before the 8 TiB result was refused
    ("x = em.zeros(1024, 1, 2, 2, device=dev)", "em.nn.functional.interpolate(x, size=(2**31, 1))", "interpolate"),
    ("x = em.zeros(1, 1, 2, 2, device=dev)", "em.nn.functional.interpolate(x, size=(2**40, 1))", "interpolate"),
    # 2**30 + 4 int64 source rows (8 GiB of numpy index arrays) were built first
    ("x = em.zeros(1024, 4, device=dev)", "em.pad(x, (2**30, 0), mode='replicate')", "pad"),
    ("x = em.zeros(1024, 4, device=dev)", "em.pad(x, (0, 2**30), mode='constant')", "pad"),
    ("x = em.zeros(4, 1024, device=dev)", "em.pad(x, (2**30, 2**30, 0, 0), mode='circular')", "pad"),
    ("pass", "em.randint(0, 10, (2**45,), dtype=em.uint8, device=dev)", "randint"),
])
def test_impossible_sizes_are_refused_before_allocating(setup, action, op):
    grew, outcome, _ = run_child(setup, action)
    assert outcome.startswith(f"[{op}]"), outcome
    assert grew < 64 * MiB, grew


def test_reducing_a_broadcast_view_reads_it_in_place():
    # 2**31 stride-0 elements: a contiguous copy (or a list of their offsets) would take 8-16 GiB
    setup = "x = em.broadcast_to(em.full((1,), 1.5, device=dev), (2**31,))"
    action = "(x.sum().item(), x.max().item(), x.min().item(), x.mean().item())"
    grew, outcome, check = run_child(setup, action, check="out")
    assert outcome == "ok" and check == [1.5 * 2**31, 1.5, 1.5, 1.5]
    assert grew < 64 * MiB, grew
    setup = "x = em.tensor(np.arange(6, dtype=np.int32).reshape(1, 6), device=dev).broadcast_as((2**29, 6))"
    action = "(x.sum(0).numpy().tolist(), x.sum().item())"
    grew, outcome, check = run_child(setup, action, check="out")
    assert outcome == "ok" and check == [[2**29 * k for k in range(6)], 15 * 2**29]
    assert grew < 64 * MiB, grew


def test_randint_peaks_near_its_result():
    # 2**27 uint8 values are 128 MiB; drawn through float64 they peaked at 2.26 GB
    grew, outcome, check = run_child("pass", "em.randint(0, 10, (2**27,), dtype=em.uint8, device=dev)",
                                     check="int(out.max().item())")
    assert outcome == "ok" and check == 9
    assert grew < 3 * 128 * MiB, grew
