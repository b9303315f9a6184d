"""Issue 33's side doors stay shut: the tests' hooks live in ember._C_testing (installed, never imported by
ember), the user's extension reaches Metal only through cpp/metal/api.h, and em.memory_stats and
em.metal.memory_stats share their names."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import _C
from ember import _C_testing as _T

ROOT = Path(__file__).resolve().parents[1]
PYDIR = str(Path(em.__file__).resolve().parents[1])
HOOKS = ["metal_emu_run", "metal_emu_sequence", "metal_emu_stats", "metal_emu_cache_dir", "metal_emu_fibers",
         "metal_rewrite", "metal_source", "metal_sources", "metal_policy", "metal_apple_built",
         "metal_apple_available", "cpu_kernel_cache_dir"]


def test_the_hooks_are_in_the_testing_module_only():
    for name in HOOKS:
        assert hasattr(_T, name), name
        assert not hasattr(_C, name) and not hasattr(_C, "_" + name), name
    assert not hasattr(_C, "_metal_dispatch")  # user kernels have one dispatcher: em.metal.Kernel's


def test_ember_never_imports_the_testing_module():
    code = "import sys, ember as em; em.ones(2).numpy(); print('ember._C_testing' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=PYDIR)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def _sources(target):
    """The .cpp files CMake compiles into `target` (python/src/CMakeLists.txt)."""
    text = (ROOT / "python" / "src" / "CMakeLists.txt").read_text()
    body = re.search(r"pybind11_add_module\(" + target + r"\s(.*?)\)", text, re.S).group(1)
    return [ROOT / "python" / "src" / f for f in body.split()]


def test_the_user_extension_includes_no_metal_internals():
    files = _sources("_C") + [ROOT / "python" / "src" / "common.h"]
    assert len(files) > 5
    for f in files:
        for inc in re.findall(r'#include "(metal/[^"]+)"', f.read_text()):
            assert inc == "metal/api.h", f"{f.name} includes {inc}: bindings reach Metal through metal/api.h"
    # the public surface itself includes no internals either
    api = (ROOT / "cpp" / "metal" / "api.h").read_text()
    assert set(re.findall(r'#include "(metal/[^"]+)"', api)) <= {"metal/function_constant.h"}


def test_memory_stats_names_are_the_same_on_every_device(device):
    t = em.ones(1000, device=device)  # something allocated, so the counts are not all zero
    one = em.memory_stats(device)
    assert set(one) == {"allocated_bytes", "cached_bytes", "peak_allocated_bytes", "cache_limit_bytes"}
    assert one["allocated_bytes"] >= t.numel() * 4
    assert set(em.memory_stats()["devices"][str(device)]) == set(one)
    if device.type == "metal":
        metal = em.metal.memory_stats(device)
        assert {k: metal[k] for k in one} == one  # the same four counts, under the same names
        assert not {"allocated", "cached", "peak", "cache_limit", "memory_limit"} & set(metal)


@pytest.mark.parametrize("consts,kind,match", [
    ({0: "1"}, em.EmberTypeError, r"^\[metal\.Kernel\] function constant 0: '1' must be an index >= 0 and a bool"),
    ({-1: 1}, em.EmberTypeError, r"^\[metal\.Kernel\] function constant -1: 1 must be an index >= 0"),
    ({0: np.int32(1)}, em.EmberTypeError, r"must be an index >= 0 and a bool, int or float"),
    ({70000: 1}, em.EmberValueError, r"^\[metal\] a function constant's index must be an int in \[0, 65535\]"),
    ({0: 2**31}, em.EmberValueError, r"^\[metal\] function constant 0 of type int: 2147483648 is outside"),
])
def test_kernel_constants_go_through_the_one_parser(consts, kind, match):
    # nothing compiles when a Kernel is made: no Metal device is needed to reach the parser
    with pytest.raises(kind, match=match):
        em.metal.Kernel("kernel void k() {}", "k", {"constants": consts})
    with pytest.raises(em.EmberValueError, match=r"^\[metal\] function constant 0 of type int: 2147483648"):
        _T.metal_emu_run("kernel void k() {}", "k", [], [1], [1], constants=[(0, "int", 2**31)])


def test_kernel_constants_of_each_type_are_accepted():
    k = em.metal.Kernel("kernel void k() {}", "k", {"constants": {2: 1.5, 0: True, 1: -3}})
    assert repr(k).startswith("em.metal.Kernel('k', source ")
