"""A user kernel's faults under the MSL emulator become a `[metal]` error, never a dead or wedged process:
integer division by zero, an endless loop (the watchdog, Ctrl-C), a stack overflow. Each case runs in a fresh
subprocess with a timeout, and the process must run another kernel correctly afterwards."""
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
    import signal, sys, numpy as np, ember as em
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a parent started in the background ignores SIGINT
    HEAD = '#include <metal_stdlib>\\nusing namespace metal;\\n'
    def run(src, args, n, group=None, fn='k'):
        em._C._metal_emu_run(HEAD + src, fn, args, [n], [group or n])
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
