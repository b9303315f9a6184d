"""The Metal device layer's policy classes (cpp/metal/policy/; the pool and the cache in cpp/gpu/), plain C++ over integer handles through
ember._C_testing.metal_policy: buffer pool, hazard tracker, pipeline cache, commit policy."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember as em
from ember import _C_testing as _T

P = _T.metal_policy
PAGE = 16384


@pytest.mark.parametrize("n,want", [(0, 16), (1, 16), (17, 32), (1000, 1024), (4096, 4096), (16383, 16384),
                                    (16385, 32768), (100000, 7 * PAGE)])
def test_bucket_sizes(n, want):
    assert P.bucket_size(n, PAGE) == want


def test_pool_reuses_within_the_window_only():
    pool = P.BufferPool(memory_limit=1 << 30, cache_limit=1 << 30)
    a, size = pool.alloc(1000)
    assert size == 1024
    pool.free(a, size)
    assert pool.alloc(600) == (a, 1024)  # 1024 serves a 1024 bucket
    pool.free(a, 1024)
    b, sb = pool.alloc(300)  # bucket 512: a cached 1024 is twice as large, outside the window
    assert b != a and sb == 512
    big, sbig = pool.alloc(5 * PAGE)
    pool.free(big, sbig)
    assert pool.alloc(4 * PAGE)[0] == big  # within two pages of the request
    s = pool.stats()
    assert s["hits"] == 2 and s["misses"] == 3 and s["active_bytes"] == 512 + 5 * PAGE


def test_pool_peak_resets_to_what_is_in_use_and_reports_its_limits():
    pool = P.BufferPool(memory_limit=1 << 30, cache_limit=1 << 20)
    a, sa = pool.alloc(3 * PAGE)
    b, sb = pool.alloc(PAGE)
    pool.free(a, sa)
    s = pool.stats()
    assert s["peak_bytes"] == 4 * PAGE and s["active_bytes"] == PAGE
    pool.reset_peak()
    assert pool.stats()["peak_bytes"] == PAGE
    pool.alloc(1000)  # a 1024-byte bucket: the cached 3-page buffer is outside its reuse window
    assert pool.stats()["peak_bytes"] == PAGE + 1024
    assert s["memory_limit"] == 1 << 30 and s["cache_limit"] == 1 << 20


def test_pool_releases_least_recently_freed_first_at_the_cache_limit():
    pool = P.BufferPool(memory_limit=1 << 30, cache_limit=3 * PAGE)
    bufs = [pool.alloc(PAGE)[0] for _ in range(4)]
    for b in bufs:
        pool.free(b, PAGE)
    assert pool.released == [bufs[0]]
    assert pool.stats()["cached_bytes"] == 3 * PAGE
    pool.set_cache_limit(PAGE)
    assert pool.released == bufs[:3]
    pool.empty_cache()
    assert pool.released == bufs and pool.stats()["cached_buffers"] == 0


def test_pool_memory_limit_releases_cache_then_raises():
    pool = P.BufferPool(memory_limit=4 * PAGE, cache_limit=1 << 30)
    x, _ = pool.alloc(2 * PAGE)
    c1, _ = pool.alloc(PAGE)
    c2, _ = pool.alloc(PAGE)
    pool.free(c1, PAGE)
    pool.free(c2, PAGE)
    y, _ = pool.alloc(2 * PAGE)  # no cached buffer fits; releasing both makes room
    assert sorted(pool.released) == sorted([c1, c2]) and y not in (x, c1, c2)
    with pytest.raises(em.OutOfMemory, match=r"^\[metal\] out of memory: 16 bytes requested, 65536 in use, limit 65536$"):
        pool.alloc(1)
    assert pool.stats()["active_bytes"] == 4 * PAGE  # the failed request changed nothing
    pool.set_memory_limit(8 * PAGE)
    pool.alloc(1)


def test_pool_request_past_the_limit_keeps_the_cache():
    pool = P.BufferPool(memory_limit=4 * PAGE, cache_limit=1 << 30)
    c, _ = pool.alloc(PAGE)
    pool.free(c, PAGE)
    with pytest.raises(em.OutOfMemory, match=r"^\[metal\] out of memory"):
        pool.alloc(8 * PAGE)  # cannot fit even with an empty cache: nothing is released for it
    assert pool.released == [] and pool.stats()["cached_bytes"] == PAGE


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5 * PAGE)), min_size=1, max_size=60))
def test_pool_never_hands_out_a_live_or_released_buffer(ops):
    limit = 12 * PAGE
    pool = P.BufferPool(memory_limit=limit, cache_limit=6 * PAGE)
    live = {}
    for is_alloc, n in ops:
        if is_alloc or not live:
            try:
                b, size = pool.alloc(n)
            except em.OutOfMemory:
                assert sum(live.values()) + P.bucket_size(n, PAGE) > limit
                continue
            assert b not in live and b not in pool.released and size >= n
            live[b] = size
        else:
            b = next(iter(live))
            pool.free(b, live.pop(b))
        s = pool.stats()
        assert s["active_bytes"] == sum(live.values())
        assert s["active_bytes"] + s["cached_bytes"] <= limit and s["cached_bytes"] <= 6 * PAGE


@pytest.mark.parametrize("first,second,barrier", [
    (([1], [2]), ([3], [4]), False),    # independent dispatches
    (([1], [2]), ([2], [5]), True),     # read after write
    (([1], [2]), ([3], [1]), True),     # write after read
    (([1], [2]), ([3], [2]), True),     # write after write
    (([1], [2]), ([1], [3]), False),    # two reads of one buffer
    (([], [7]), ([], []), False),
])
def test_hazards(first, second, barrier):
    h = P.HazardTracker()
    assert h.dispatch(*first) is False
    assert h.dispatch(*second) is barrier
    assert h.barriers == int(barrier)


def test_a_barrier_orders_everything_before_it():
    h = P.HazardTracker()
    h.dispatch([1], [2])
    assert h.dispatch([2], [3]) is True  # RAW on 2: barrier
    assert h.dispatch([4], [5]) is False  # 1 -> 2 is behind the barrier now
    assert h.dispatch([1], [6]) is False
    assert h.dispatch([5], [7]) is True


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 5), max_size=3), st.sets(st.integers(0, 5), max_size=2)),
                min_size=1, max_size=25))
def test_hazards_match_the_definition(dispatches):
    h = P.HazardTracker()
    reads, writes = set(), set()
    for r, w in dispatches:
        want = bool(r & writes or w & writes or w & reads)
        assert h.dispatch(sorted(r), sorted(w)) is want
        if want:
            reads, writes = set(), set()
        reads |= r
        writes |= w


def test_fences_across_encoders_until_completed():
    h = P.HazardTracker()
    h.dispatch([1], [2])
    h.end_encoder(10)
    h.dispatch([2], [3])  # a new encoder: no barrier inside it, a fence on encoder 10 instead
    h.end_encoder(11)
    assert h.fences_for([2]) == {10} and h.fences_for([3, 2]) == {10, 11} and h.fences_for([1]) == set()
    h.completed(10)
    assert h.fences_for([2]) == set() and h.pending_outputs == 1


def test_fences_for_writes_cover_war_and_waw_across_encoders():
    h = P.HazardTracker()
    h.dispatch([1], [2])
    h.end_encoder(10)
    h.dispatch([1, 2], [])
    h.end_encoder(11)
    h.dispatch([4], [5])
    h.end_encoder(12)
    assert h.fences_for([], [1]) == {10, 11}  # WAR: both encoders that read 1 are pending
    assert h.fences_for([], [2]) == {10, 11}  # WAW on 10's output, WAR on 11's read
    assert h.fences_for([3], [6]) == set()    # nothing pending touches 3 or 6
    assert h.fences_for([5], []) == {12}      # RAW
    h.completed(10)
    assert h.fences_for([], [1]) == {11} and h.fences_for([], [2]) == {11}
    h.completed(11)
    assert h.fences_for([], [1, 2]) == set()


def test_pipeline_cache_keys_on_source_hash_function_and_constants():
    c = P.PipelineCache()
    a = c.get("kernel void k() {}", "k")
    assert c.get("kernel void k() {}", "k") == a  # same source, same name: one compile
    assert c.get("kernel void k() { }", "k") != a  # same name, another source: never the same pipeline
    assert c.get("kernel void k() {}", "k", "0=1") != a
    assert c.get("kernel void k() {}", "k2") != a
    assert (c.compiles, c.hits, c.size) == (4, 1, 4)


def test_pipeline_cache_compiles_once_under_threads():
    c = P.PipelineCache()
    fns = [f"f{i}" for i in range(6)]
    got = c.stress(8, "source", fns)
    assert all(g == got[0] for g in got) and len(set(got[0])) == 6
    assert c.compiles == 6 and c.hits == 8 * 6 - 6


def test_pipeline_cache_propagates_compile_errors_and_retries():
    c = P.PipelineCache()
    for _ in range(2):
        with pytest.raises(em.EmberError, match=r"^\[metal\] compile error in bad"):
            c.get("src", "bad")
    assert c.compiles == 0
    assert c.get("src", "good") == c.get("src", "good")


def test_commit_policy_by_ops_and_megabytes(monkeypatch):
    p = P.CommitPolicy(3, 1000)
    assert [p.dispatch(10), p.dispatch(10), p.dispatch(10)] == [False, False, True]
    p.committed()
    assert (p.ops, p.bytes) == (0, 0)
    m = P.CommitPolicy(1000, 1)
    assert m.dispatch(600_000) is False and m.dispatch(600_000) is True
    monkeypatch.setenv("EMBER_METAL_MAX_OPS_PER_BUFFER", "2")
    e = P.CommitPolicy.from_env()
    assert [e.dispatch(0), e.dispatch(0)] == [False, True]
