"""em.cpu.Kernel: C++ kernels from Python — strided inputs, the thread pool, scalars, the disk cache, signature checks, compile errors with the user's line numbers."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

from conftest import expect_error

pytestmark = pytest.mark.cpu_only  # CPU kernels run on CPU storages

SOFTPLUS = r"""
#include <cmath>
void softplus(const ember::Args& a) {
  const ember::Tensor& x = a.input(0);
  float* y = a.output(0).ptr<float>();
  const float beta = (float)a.f(0);
  a.parallel_for(x.numel, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = beta * x.at<float>(i);   // any strides and offset
      y[i] = (std::fmax(v, 0.0f) + std::log1p(std::exp(-std::fabs(v)))) / beta;
    }
  });
}
"""


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    # read once per process, at the first kernel: a test run started earlier may already have one
    old = os.environ.get("EMBER_CPU_KERNEL_CACHE")
    os.environ["EMBER_CPU_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kc"))
    yield
    if old is None:
        os.environ.pop("EMBER_CPU_KERNEL_CACHE", None)
    else:
        os.environ["EMBER_CPU_KERNEL_CACHE"] = old


def _k():
    return em.cpu.Kernel(SOFTPLUS, "softplus", inputs=["float32"], outputs=["float32"], scalars=["float"])


def _ref(x, beta):
    return np.logaddexp(0, beta * x.astype(np.float64)) / beta


@pytest.mark.parametrize("view", ["contiguous", "transposed", "strided_offset"])
def test_strided_inputs_and_the_pool(view):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 400)).astype(np.float32) * 4
    x = em.tensor(base)
    if view == "transposed":
        x, base = x.t(), base.T
    elif view == "strided_offset":
        x, base = x[3:, 1::3], base[3:, 1::3]
    out = em.CpuStorage.empty(x.numel(), em.float32)
    _k()(inputs=[(x._storage, x._layout)], outputs=[out], scalars=[1.5])
    got = out.numpy().reshape(base.shape)
    np.testing.assert_allclose(got, _ref(base, 1.5), rtol=1e-5, atol=1e-6)


def test_in_a_custom_op_and_check_op():
    k = _k()

    class Softplus(em.CustomOp1):
        name = "softplus_cpp"

        def cpu_fwd(self, storage, layout):
            if storage.dtype != em.float32:
                raise em.DTypeError(f"[{self.name}] float32 only")
            out = em.CpuStorage.empty(layout.numel(), em.float32)
            k(inputs=[(storage, layout)], outputs=[out], scalars=[1.0])
            return out, layout.shape

        def reference(self, x):
            return (x.exp() + 1.0).log()

    rep = em.testing.check_op(Softplus(), em.randn(5, 7))
    assert {"forward", "strided", "backward (float32)", "reference forward"} <= set(rep.passed) or \
        {"forward", "strided", "reference forward"} <= set(rep.passed)


def test_cached_on_disk_and_reloaded_in_a_new_process():
    src = SOFTPLUS + f"\n// {os.getpid()} {time.time_ns()}\n"  # a source no earlier run compiled
    k = em.cpu.Kernel(src, "softplus", inputs=["float32"], outputs=["float32"], scalars=["float"]).compile()
    assert k.cache_source == "built"
    assert em.cpu.Kernel(src, "softplus", inputs=1, outputs=1, scalars=["float"]).compile().cache_source == "memory"
    cache_dir = _T.cpu_kernel_cache_dir()
    assert os.listdir(cache_dir) and (os.stat(cache_dir).st_mode & 0o077) == 0  # only the user can write it
    code = ("import sys, ember as em; src = sys.stdin.read(); "
            "k = em.cpu.Kernel(src, 'softplus', scalars=['float']).compile(); print(k.cache_source)")
    env = dict(os.environ, EMBER_CPU_KERNEL_CACHE=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], input=src, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.stdout.strip() == "disk", out.stderr


def test_signature_checked_before_the_call():
    k = _k()
    x = em.randn(10)
    out = em.CpuStorage.empty(10, em.float32)
    expect_error(lambda: k(inputs=[], outputs=[out], scalars=[1.0]), "softplus", em.EmberValueError)
    expect_error(lambda: k(inputs=[x], outputs=[out], scalars=[]), "softplus", em.EmberValueError)
    expect_error(lambda: k(inputs=[x], outputs=[out], scalars=["a"]), "softplus", em.EmberTypeError)
    expect_error(lambda: k(inputs=[x.to_dtype("float64")], outputs=[out], scalars=[1.0]), "softplus", em.DTypeError)
    expect_error(lambda: k(inputs=[np.ones(3)], outputs=[out], scalars=[1.0]), "softplus", em.EmberTypeError)
    short = em.CpuStorage.empty(3, em.float32)
    expect_error(lambda: k(inputs=[(x._storage, em.Layout([20], [1], 0))], outputs=[out], scalars=[1.0]),
                 "cpu.Kernel", em.EmberValueError)
    expect_error(lambda: k(inputs=[x], outputs=[(short, em.Layout([10], [1], 0))], scalars=[1.0]),
                 "cpu.Kernel", em.EmberValueError)
    expect_error(lambda: em.cpu.Kernel(SOFTPLUS, "no such"), "cpu.Kernel", em.EmberValueError)
    expect_error(lambda: em.cpu.Kernel(SOFTPLUS, "f", scalars=["double"]), "cpu.Kernel", em.EmberValueError)


def test_compile_error_carries_the_log_with_the_users_line_numbers():
    src = "void broken(const ember::Args& a) {\n  int x = 1;\n  this_is_not_declared(x);\n}\n"
    with pytest.raises(em.EmberError) as ei:
        em.cpu.Kernel(src, "broken", inputs=0, outputs=0).compile()
    msg = str(ei.value)
    assert msg.startswith("[cpu.Kernel]") and "this_is_not_declared" in msg and "kernel.cpp:3:" in msg


def test_kernel_exceptions_become_errors_and_outputs_are_marked_written():
    src = r"""
void check(const ember::Args& a) {
  a.parallel_for(1 << 16, 1024, [&](int64_t b, int64_t e) { if (b >= 4096) ember::fail("negative input"); });
}"""
    k = em.cpu.Kernel(src, "check", inputs=0, outputs=1)
    t = em.zeros(4)
    v = t._storage.version
    expect_error(lambda: k(outputs=[t]), "check", em.EmberValueError)
    assert t._storage.version > v


def test_no_compiler_names_the_package(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(em.EmberError) as ei:
        em.cpu.Kernel(SOFTPLUS + "\n// no compiler", "softplus").compile()
    assert "apt-get install g++" in str(ei.value)
