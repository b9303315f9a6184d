"""The public memory API: em.memory_stats, em.empty_cache, em.set_cache_limit, EMBER_CACHE_LIMIT, and the
cache trimmed when the system refuses an allocation."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember as em

MiB = 2**20
KEYS = {"allocated_bytes", "cached_bytes", "peak_allocated_bytes", "cache_limit_bytes"}


def cpu_stats():
    """The CPU allocator's counters: the cache limit and EMBER_CACHE_LIMIT are the CPU's (None is the CPU)."""
    return em.memory_stats(em.cpu)


@pytest.fixture
def restore_limit():
    limit = cpu_stats()["cache_limit_bytes"]
    yield
    em.set_cache_limit(limit)


def test_stats_shape_and_totals():
    st = em.memory_stats()
    assert set(st) == KEYS | {"devices"}
    # one entry per available device (the emulated Metal and CUDA devices count when EMBER_METAL /
    # EMBER_CUDA=emulate)
    assert set(st["devices"]) == {"cpu"} | ({"metal:0"} if em.metal_is_available() else set()) | \
        {f"cuda:{i}" for i in range(em.cuda.device_count())}
    assert all(set(d) == KEYS for d in st["devices"].values())
    for k in KEYS:  # the totals are the sums over devices
        assert st[k] == sum(d[k] for d in st["devices"].values())
        assert isinstance(st[k], int) and st[k] >= 0


def test_allocated_and_peak_follow_tensors():
    gc.collect()
    em.reset_peak_memory_stats()
    base = em.memory_stats()
    assert base["peak_allocated_bytes"] == base["allocated_bytes"]
    t = em.zeros(3 * MiB // 4)  # 3 MiB of float32: a 64 KiB-step size class of exactly 3 MiB
    mid = em.memory_stats()
    assert mid["allocated_bytes"] - base["allocated_bytes"] == 3 * MiB
    del t
    after = em.memory_stats()
    assert after["allocated_bytes"] == base["allocated_bytes"]
    assert after["peak_allocated_bytes"] >= base["allocated_bytes"] + 3 * MiB
    em.reset_peak_memory_stats()
    assert em.memory_stats()["peak_allocated_bytes"] == after["allocated_bytes"]


def test_borrowed_memory_is_not_counted():
    arr = np.ones(MiB, dtype=np.float32)
    before = em.memory_stats()["allocated_bytes"]
    t = em.from_dlpack(arr)
    assert em.memory_stats()["allocated_bytes"] == before
    del t


def test_empty_cache_keeps_live_tensors(restore_limit):
    em.set_cache_limit(2**31)
    keep = em.arange(1000.0, device=em.cpu)
    for _ in range(3):
        em.zeros(2 * MiB, device=em.cpu)  # freed at once: into the cache
    assert cpu_stats()["cached_bytes"] >= 8 * MiB
    em.empty_cache()
    assert cpu_stats()["cached_bytes"] == 0
    assert keep.sum().item() == 499500.0


def test_set_cache_limit_trims_and_caps(restore_limit):
    em.set_cache_limit(2**31)
    ts = [em.zeros(MiB, device=em.cpu) for _ in range(6)]  # 4 MiB each
    del ts
    assert cpu_stats()["cached_bytes"] >= 24 * MiB
    em.set_cache_limit(10 * MiB)
    st = cpu_stats()
    assert st["cache_limit_bytes"] == 10 * MiB and st["cached_bytes"] <= 10 * MiB
    ts = [em.zeros(MiB, device=em.cpu) for _ in range(6)]
    del ts
    assert cpu_stats()["cached_bytes"] <= 10 * MiB
    em.set_cache_limit(0)  # no caching at all
    assert cpu_stats()["cached_bytes"] == 0
    em.zeros(MiB, device=em.cpu)
    assert cpu_stats()["cached_bytes"] == 0


@pytest.mark.parametrize("bad, cls", [(-1, em.EmberValueError), (2**64, em.EmberValueError),
                                      ("1G", em.DTypeError), (1.5, em.DTypeError), (True, em.DTypeError)])
def test_set_cache_limit_refuses_bad_values(bad, cls):
    with pytest.raises(cls, match=r"^\[set_cache_limit\] "):
        em.set_cache_limit(bad)


def run_env(value):
    code = "import ember as em; print(em.memory_stats(em.cpu)['cache_limit_bytes'])"
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, EMBER_CACHE_LIMIT=value))
    assert out.returncode == 0, out.stderr
    return int(out.stdout), out.stderr


@pytest.mark.parametrize("value, want", [("1048576", MiB), ("64M", 64 * MiB), ("2GiB", 2**31), ("0", 0),
                                         (" 3k ", 3 * 1024), ("1t", 2**40)])
def test_env_cache_limit(value, want):
    assert run_env(value)[0] == want


@pytest.mark.parametrize("value", ["lots", "-5", "1.5G", "9" * 40])
def test_env_cache_limit_unreadable_keeps_the_default(value):
    limit, err = run_env(value)
    assert limit == 2**31 and "[EMBER_CACHE_LIMIT] cannot read" in err


@pytest.mark.skipif(bool(os.environ.get("EMBER_SANITIZED")),
                    reason="RLIMIT_AS cannot bound a sanitized process (its shadow memory is address space)")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_cache_is_trimmed_when_the_system_refuses_memory():
    # 384 MiB of freed blocks sit in the cache; the address space is then capped 100 MiB above what the
    # process uses, and a 300 MiB tensor (another size class) only fits once the cache is given back.
    code = textwrap.dedent("""
    import resource
    import ember as em
    em.set_cache_limit(2**31)
    ts = [em.zeros(16 * 2**20) for _ in range(6)]
    del ts
    cached = em.memory_stats()["cached_bytes"]
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 100 * 2**20, resource.RLIM_INFINITY))
    t = em.ones(75 * 2**20)
    print(cached, em.memory_stats()["cached_bytes"], t[-1].item())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, EMBER_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    before, after, last = out.stdout.split()
    assert int(before) >= 384 * MiB and int(after) < int(before) and float(last) == 1.0
