"""A user kernel's faults under the MSL emulator become a `[metal]` error, never a dead or wedged process:
integer division by zero, an endless loop (the watchdog, Ctrl-C), a stack overflow, accesses out of threadgroup
memory and out of reference parameters, a C++ exception in kernel code; and no fault crosses into ember as a C++
exception. Each case runs in a fresh subprocess with a timeout, and the process must run another kernel correctly
afterwards."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ember as em

PYDIR = str(Path(em.__file__).resolve().parents[1])

PRELUDE = textwrap.dedent("""
    import signal, sys
    # before ember chains its SIGINT hook onto Python's (a parent started in the background passes SIGINT
    # ignored; setting it after the import would replace ember's hook)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np, ember as em
    from ember import _C_testing as _T
    HEAD = '#include <metal_stdlib>\\nusing namespace metal;\\n'
    def run(src, args, n, group=None, fn='k'):
        _T.metal_emu_run(HEAD + src, fn, args, [n], [group or n])
    def expect_error(src, args, n, pattern, group=None, kind=em.EmberError):
        import re
        try:
            run(src, args, n, group)
        except kind as e:
            assert str(e).startswith("[metal] kernel 'k'"), str(e)
            assert re.search(pattern, str(e)), str(e)
        else:
            raise AssertionError('no error')
    def still_works():
        x = np.arange(64, dtype=np.float32)
        run('kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) '
            '{ threadgroup float s[64]; s[i] = x[i]; threadgroup_barrier(mem_flags::mem_threadgroup); '
            'x[i] = s[63 - i] + 1.0f; }', [x], 64)
        assert x.tolist() == [64.0 - i for i in range(64)], x
""")


def _python(code, timeout=120, **env):
    e = dict(os.environ, PYTHONPATH=PYDIR, **{k: str(v) for k, v in env.items()})
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=e, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


DIV = """
kernel void k(device int* x [[buffer(0)]], device const int* d [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  %s
  x[i] = x[i] %s d[i];
}
"""


@pytest.mark.parametrize("op", ["/", "%"])
@pytest.mark.parametrize("barrier", [False, True])
def test_integer_division_by_zero_and_int_min_by_minus_one_are_errors(op, barrier):
    bar = "threadgroup_barrier(mem_flags::mem_none);" if barrier else ""
    src = DIV % (bar, op)
    _python(f"""
        import faulthandler
        faulthandler.enable()  # a handler installed before ember's: the kernel's fault must not reach it
        src = {src!r}
        for num, den in ((7, 0), (-2**31, -1)):
            x = np.full(64, 5, np.int32); x[17] = num
            d = np.full(64, 2, np.int32); d[17] = den
            expect_error(src, [x, d], 64, r"thread \\(17, 0, 0\\).*integer division or remainder by zero", group=32)
        x = np.arange(64, dtype=np.int32); d = np.full(64, 3, np.int32)
        run(src, [x, d], 64, group=32)  # the same pipeline, now without the fault
        assert x.tolist() == [(i // 3 if {op!r} == '/' else i % 3) for i in range(64)]
        still_works()
    """)


LOOP = """
kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  %s
  while (x[0] >= 0.0f) { x[i + 1] += 1.0f; }
}
"""


@pytest.mark.parametrize("barrier", [False, True])
def test_an_endless_kernel_is_stopped_by_the_watchdog(barrier):
    src = LOOP % ("threadgroup_barrier(mem_flags::mem_none);" if barrier else "")
    _python(f"""
        x = np.zeros(65, np.float32)
        expect_error({src!r}, [x], 64, r"ran for more than 1 s .*EMBER_METAL_EMU_WATCHDOG")
        still_works()
    """, timeout=90, EMBER_METAL_EMU_WATCHDOG=1)


def test_back_to_back_short_launches_are_never_taken_for_a_timeout():
    # The watchdog reads the clock, then each worker's launch start: a launch that begins in between starts
    # after that reading, and must count as just begun, not as one 2^64 ns old. Many launches on both workers
    # for a few seconds met that window within the first second or two before it was handled.
    _python("""
        import time
        a = em.tensor(np.arange(144, dtype=np.float32).reshape(12, 12) / 100, device='metal')
        want = a.numpy() @ a.numpy()
        n, end = 0, time.time() + 6
        while time.time() < end:
            np.testing.assert_allclose((a @ a).numpy(), want, rtol=1e-5)
            n += 1
        assert n > 100, n  # the loop ran (a sanitizer build makes about 700 launches here)
    """, EMBER_METAL="emulate")


def test_ctrl_c_stops_an_endless_kernel():
    code = PRELUDE + textwrap.dedent(f"""
        x = np.zeros(65, np.float32)
        print('running', flush=True)
        try:
            run({LOOP % ""!r}, [x], 64)
        except KeyboardInterrupt:
            print('interrupted', flush=True)
        still_works()
        print('ok', flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=PYDIR, EMBER_METAL_EMU_WATCHDOG="0")
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "running"
        import time
        time.sleep(3)  # long enough to compile and be inside the loop; earlier is fine too
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert out.split() == ["interrupted", "ok"], (out, err)


@pytest.mark.parametrize("case", ["array", "recursion"])
@pytest.mark.parametrize("barrier", [False, True])
def test_a_stack_overflow_in_a_kernel_is_an_error(case, barrier):
    bar = "threadgroup_barrier(mem_flags::mem_none);" if barrier else ""
    if case == "array":  # 64 MiB per thread: past a fiber's stack and past a thread's own (8 MiB usually)
        body = "volatile float a[1 << 24]; a[i] = x[i]; a[(i * 7919) & ((1 << 24) - 1)] = 1.0f; x[i] = a[i];"
        pre = ""
    else:
        body = "x[i] = deep(x[i], 1u << 30);"
        pre = ("float deep(float v, uint n) { volatile float pad[16]; pad[n & 15] = v; "
               "return n == 0 ? v : deep(v + 1.0f, n - 1) + pad[(n + 3) & 15]; }\n")
    src = pre + ("kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {"
                 + bar + body + "}")
    _python(f"""
        x = np.zeros(64, np.float32)
        expect_error({src!r}, [x], 64, r"overflowed its thread's stack", group=32)
        still_works()
    """)


TG = """
kernel void k(device float* x [[buffer(0)]], constant int& off [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  threadgroup float s[32];
  threadgroup float t[4][8];
  s[i] = x[i];
  t[i / 8][i % 8] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (i == 5) { BODY }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = s[31 - i] + t[(31 - i) / 8][(31 - i) % 8];
}
"""


@pytest.mark.parametrize("access,pattern,fine", [
    ("s[i + off] = 1.0f;", r"index 1005 \(it has 32 elements\)", 0),
    ("x[0] = s[off - 2000];", r"index -1000 \(it has 32 elements\)", 2005),
    ("t[1][off] = 1.0f;", r"index 1000 \(it has 8 elements\)", 0),
    ("t[off][0] = 1.0f;", r"index 1000 \(it has 4 elements\)", 0),
])
def test_threadgroup_accesses_past_an_array_are_errors(access, pattern, fine):
    _python(f"""
        src = {TG.replace('BODY', access)!r}
        x = np.arange(32, dtype=np.float32)
        expect_error(src, [x, np.int32(1000).tobytes()], 32, "thread \\\\(5, 0, 0\\\\).*out-of-bounds access to a "
                     "threadgroup array at " + {pattern!r}, kind=IndexError)
        x = np.arange(32, dtype=np.float32)
        run(src, [x, np.int32({fine}).tobytes()], 32)  # the same access in bounds
        still_works()
    """)


TG_PTR = """
kernel void k(device float* x [[buffer(0)]], constant int& off [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  threadgroup float s[32];
  threadgroup float* p = s;
  s[i] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (i == 5) p[off] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = s[31 - i];
}
"""


@pytest.mark.parametrize("off,pattern", [
    (40, r"wrote past the end of a threadgroup variable \(into the guard bytes"),
    (50000, r"thread \(5, 0, 0\).*accessed the invalid address"),
    (-50000, r"thread \(5, 0, 0\).*accessed the invalid address"),
])
def test_threadgroup_pointer_writes_outside_the_variables_are_errors(off, pattern):
    # Not checked per access (docs/design/metal-emulator.md): just past a variable the guard bytes catch it at
    # the group's end; far away, the pages around the group's threadgroup memory fault at once.
    _python(f"""
        src = {TG_PTR!r}
        x = np.arange(32, dtype=np.float32)
        expect_error(src, [x, np.int32({off}).tobytes()], 32, {pattern!r}, kind=IndexError)
        x = np.arange(32, dtype=np.float32)
        run(src, [x, np.int32(7).tobytes()], 32)  # in bounds
        assert x.tolist() == [31.0 - i if i != 24 else 1.0 for i in range(32)], x
        still_works()
    """)


REF = """
kernel void k(device float& acc [[buffer(0)]], device atomic_uint& count [[buffer(1)]],
              constant int& off [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
  if (i == 3) { acc += 2.0f; acc = acc * 3.0f; (&acc)[off] += 1.0f; }
}
"""


def test_indexing_through_the_address_of_a_device_reference_is_bounds_checked():
    _python(f"""
        src = {REF!r}
        acc = np.ones(1, np.float32); count = np.zeros(1, np.uint32)
        run(src, [acc, count, np.int32(0).tobytes()], 8)
        assert acc.tolist() == [10.0] and count.tolist() == [8], (acc, count)
        acc = np.ones(1, np.float32)
        expect_error(src, [acc, count, np.int32(1000).tobytes()], 8,
                     r"thread \\(3, 0, 0\\).*out-of-bounds access to buffer\\(0\\) at byte offset 4000",
                     kind=IndexError)
        expect_error(src, [acc, count, np.int32(-4).tobytes()], 8, r"at byte offset -16", kind=IndexError)
        still_works()
    """)


REFS = """
struct P { float a; float b; int c; };
kernel void k(device float4& v [[buffer(0)]], device P& s [[buffer(1)]], constant P& c [[buffer(2)]],
              constant int& off [[buffer(3)]], constant int& which [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  if (i != 3) return;
  if (which == 0) (&v)[off] = float4(1.0f, 2.0f, 3.0f, 4.0f);
  if (which == 1) (&s)[off].b = 7.0f;
  if (which == 2) (&s.b)[off] = 9.0f;
  if (which == 3) v.w = (&c)[off].b;
  if (which == 4) (&v.y)[off] = 5.0f;
}
"""


def test_indexing_through_struct_and_vector_references_is_bounds_checked():
    # (&x)[i] and (&x.member)[i] of `device float4&`, `device P&` and `constant P&` parameters.
    _python(f"""
        src = {REFS!r}
        def call(off, which):
            v = np.zeros(4, np.float32); s = np.zeros(3, np.float32); c = np.array([1, 2.5, 0], np.float32)
            run(src, [v, s, c, np.int32(off).tobytes(), np.int32(which).tobytes()], 8)
            return v.tolist(), s.tolist()
        assert call(0, 0) == ([1, 2, 3, 4], [0, 0, 0])
        assert call(0, 1) == ([0, 0, 0, 0], [0, 7, 0])
        assert call(0, 2) == ([0, 0, 0, 0], [0, 9, 0])
        assert call(0, 3) == ([0, 0, 0, 2.5], [0, 0, 0])
        assert call(0, 4) == ([0, 5, 0, 0], [0, 0, 0])
        # (buffer, byte offset, bytes accessed) for off = 1000 and off = -3
        where = {{0: (0, 16 * 1000, 16, -48), 1: (1, 12 * 1000, 12, -36), 2: (1, 4 + 4 * 1000, 4, -8),
                  3: (2, 12 * 1000, 12, -36), 4: (0, 4 + 4 * 1000, 4, -8)}}
        for which, (buf, far, n, before) in where.items():
            for off, at in ((1000, far), (-3, before)):
                try:
                    call(off, which)
                except IndexError as e:
                    m = str(e)
                    assert m.startswith("[metal] kernel 'k'") and "thread (3, 0, 0)" in m, m
                    assert f"out-of-bounds access to buffer({{buf}}) at byte offset {{at}} ({{n}} bytes;" in m, m
                else:
                    raise AssertionError(f"no error for which={{which}} off={{off}}")
        still_works()
    """)


THROWS = """
struct Boom : std::exception { const char* what() const noexcept override { return "boom"; } };
kernel void k(device float* x [[buffer(0)]], constant int& how [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  %s
  if (i == 3 && how == 1) throw Boom();
  if (i == 3 && how == 2) throw 42;
  x[i] += 1.0f;
}
"""


@pytest.mark.parametrize("barrier", [False, True])
def test_an_exception_in_kernel_code_is_caught_inside_its_module(barrier):
    # Under the emulator kernel source is C++: what it throws is caught by the module's own entry and
    # reported through the runtime (msl_abi.h), never thrown into the extension.
    src = THROWS % ("threadgroup_barrier(mem_flags::mem_none);" if barrier else "")
    _python(f"""
        src = {src!r}
        x = np.zeros(8, np.float32)
        expect_error(src, [x, np.int32(1).tobytes()], 8, r"thread \\(3, 0, 0\\): the kernel threw a C\\+\\+ "
                     r"exception: boom$")
        expect_error(src, [x, np.int32(2).tobytes()], 8, r"thread \\(3, 0, 0\\): the kernel threw a C\\+\\+ exception$")
        x = np.zeros(8, np.float32)
        run(src, [x, np.int32(0).tobytes()], 8)
        assert x.tolist() == [1.0] * 8, x
        still_works()
    """)


FAULTS = """
struct P { float a; float b; };
kernel void k(device float* x [[buffer(0)]], device P& s [[buffer(1)]], device float& acc [[buffer(2)]],
              constant int& off [[buffer(3)]], uint i [[thread_position_in_grid]]) {
  threadgroup float t[8];
  t[i] = x[i + off];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = t[(7 - i + off) % 8] + (&s)[off].a + (&acc)[off];
}
"""


def test_kernel_modules_report_faults_without_cpp_exceptions(tmp_path):
    # A release wheel's extension (static libc++) cannot catch what a module built against the system's
    # libstdc++ throws: the checks' faults must not throw at all. The module that holds every checked
    # access (device pointer, threadgroup array, scalar and struct references) imports no __cxa_throw.
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _python(f"""
        src = {FAULTS!r}
        x = np.arange(8, dtype=np.float32); s = np.array([0.5, 0], np.float32); acc = np.ones(1, np.float32)
        run(src, [x, s, acc, np.int32(0).tobytes()], 8)
        assert x.tolist() == [7 - i + 1.5 for i in range(8)], x
        expect_error(src, [x, s, acc, np.int32(1).tobytes()], 8, r"out-of-bounds access to buffer\\(0\\) at byte "
                     r"offset 32 ", kind=IndexError)
    """, EMBER_METAL_CACHE=cache)
    modules = list(cache.rglob("*.so"))
    assert len(modules) == 1, modules
    data = modules[0].read_bytes()
    assert b"msl_module_init" in data
    for sym in (b"__cxa_throw", b"__cxa_rethrow", b"_Unwind_RaiseException"):
        assert sym not in data, sym
