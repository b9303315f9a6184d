"""Static checks of the Metal code (tools/metal_check): every .metal file type-checks under clang with Metal's
address spaces kept apart and passes the MSL lint; the metal-cpp adapter type-checks against the real
metal-cpp headers (PyPI's macOS mlx-metal wheel, fetched at check time); a fixture proves each check fires."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import _C_testing as _T

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "metal_check"))
import adapter_check  # noqa: E402
import msl_check  # noqa: E402

FIXTURES = ROOT / "tools" / "metal_check" / "fixtures"
KERNELS = sorted((ROOT / "metal").glob("*.metal"))


def test_there_are_kernels_to_check():
    assert {p.name for p in KERNELS} >= {"unary.metal", "binary.metal", "reduce.metal"}


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.name)
def test_every_metal_file_passes_the_static_checks(path):
    assert msl_check.check(path) == []


def test_address_spaces_are_kept_apart():
    problems = msl_check.compile_check(FIXTURES / "wrong_address_space.metal")
    assert problems == ["wrong_address_space.metal:12: no matching function for call to 'store'",
                        "wrong_address_space.metal:13: no matching function for call to 'store'"]
    # the emulator's checked device pointers catch the threadgroup one, but constant and device memory
    # are one kind of pointer there: only the static check sees line 13
    src = (FIXTURES / "wrong_address_space.metal").read_text()
    with pytest.raises(em.EmberError) as e:
        _T.metal_emu_run(src, "wrong_space", [np.zeros(64, np.float32)], [64], [64], label="wrong_space.metal")
    assert "wrong_space.metal:12:" in str(e.value) and "wrong_space.metal:13:" not in str(e.value)


def test_template_instantiations_are_type_checked():
    assert msl_check.compile_check(FIXTURES / "template_error.metal") == [
        "template_error.metal:7: member reference base type 'device float' is not a structure or union"]


def test_lint_rejects_what_msl_forbids():
    problems = msl_check.lint(FIXTURES / "forbidden.metal")
    assert problems == [
        "forbidden.metal:6: double (Metal has no 64-bit float) is not allowed in MSL",
        "forbidden.metal:7: new/delete (no dynamic allocation) is not allowed in MSL",
        "forbidden.metal:8: new/delete (no dynamic allocation) is not allowed in MSL",
        "forbidden.metal:9: exceptions is not allowed in MSL",
        "forbidden.metal:10: the C++ standard library is not allowed in MSL",
        "forbidden.metal:5: unknown attribute [[bufer]]",
    ]


def test_lint_ignores_comments_and_strings():
    src = '#include <metal_stdlib>\n// a double in a comment, std::max, new and throw\nconstant char* s = "double";\n'
    assert msl_check.lint("ok.metal", src) == []
    assert msl_check.lint("inc.metal", "#include <cmath>\n") == ["inc.metal:1: #include <cmath> (only Metal's own headers)"]


def test_position_attributes_of_one_kernel_share_one_width():
    assert msl_check.lint(FIXTURES / "position_widths.metal") == [
        "position_widths.metal:5: the thread-position inputs of one kernel must all be scalars or vectors of one width "
        "(uint2 [[threadgroup_position_in_grid]], uint [[threads_per_threadgroup]])",
        "position_widths.metal:9: the thread-position inputs of one kernel must all be scalars or vectors of one width "
        "(uint3 [[threadgroup_position_in_grid]], uint2 [[thread_position_in_threadgroup]])",
    ]


def test_math_and_simd_functions_exist_only_for_msl_types():
    assert msl_check.compile_check(FIXTURES / "bfloat_math.metal") == [
        "bfloat_math.metal:5: call to deleted function 'exp'",
        "bfloat_math.metal:6: call to deleted function 'simd_sum'",
    ]


def test_narrowing_and_warnings_are_errors():
    assert msl_check.compile_check(FIXTURES / "narrowing.metal") == [
        "narrowing.metal:6: implicit conversion loses floating-point precision: 'const float' to 'half' (aka '_Float16')",
        "narrowing.metal:7: implicit conversion loses floating-point precision: 'const float' to 'bfloat' (aka '__bf16')",
        "narrowing.metal:9: unused variable 'unused'",
    ]


def test_the_language_is_cxx14():
    assert msl_check.compile_check(FIXTURES / "cxx17.metal") == ["cxx17.metal:6: constexpr if is a C++17 extension"]


def test_threadgroup_variables_only_in_a_kernel_and_uninitialised():
    assert msl_check.lint(FIXTURES / "threadgroup_decl.metal") == [
        "threadgroup_decl.metal:4: a threadgroup variable at program scope (declare it in the kernel)",
        "threadgroup_decl.metal:7: a threadgroup variable cannot have an initialiser",
        "threadgroup_decl.metal:8: a threadgroup variable cannot have an initialiser",
    ]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.metal")), ids=lambda p: p.name)
def test_every_negative_fixture_fails_the_check(path):
    assert msl_check.check(path) != []


def test_recursion_is_found_in_the_call_graph():
    assert msl_check.compile_check(FIXTURES / "recursion.metal") == [
        "recursion.metal: recursion (fact -> fact) is not allowed in MSL",
        "recursion.metal: recursion (pong -> ping -> pong) is not allowed in MSL",
    ]


@pytest.fixture(scope="module")
def metal_cpp():
    # fetched from PyPI on first use and cached; a failure to fetch fails these tests, never skips them
    return adapter_check.metal_cpp_headers()


def test_metal_cpp_adapter_type_checks_against_the_real_headers(metal_cpp):
    files = sorted((ROOT / "cpp" / "metal" / "apple").glob("*.cpp"))
    assert files
    for f in files:
        assert adapter_check.check(f, metal_cpp) == []


def test_adapter_check_catches_misspelled_metal_cpp_calls(metal_cpp):
    assert adapter_check.check(FIXTURES / "misspelled_metal_cpp.cpp", metal_cpp) == [
        "misspelled_metal_cpp.cpp:7: no member named 'BarrierScopeBufers' in namespace 'MTL'",
        "misspelled_metal_cpp.cpp:8: too few arguments to function call, expected 2, have 1",
        "misspelled_metal_cpp.cpp:9: no member named 'dispatchThreadgroupz' in 'MTL::ComputeCommandEncoder'",
    ]


def test_private_implementation_in_exactly_one_file_and_no_metal_cpp_outside_apple():
    impl, includes = [], []
    for f in list((ROOT / "cpp").rglob("*.[ch]*")) + list((ROOT / "python" / "src").rglob("*.[ch]*")):
        text = f.read_text()
        if re.search(r"#define\s+(NS|MTL|CA)_PRIVATE_IMPLEMENTATION", text):
            impl.append(f.relative_to(ROOT).as_posix())
        if re.search(r"#include\s*<(Metal|Foundation|QuartzCore)/", text) and "cpp/metal/apple/" not in f.as_posix():
            includes.append(f.relative_to(ROOT).as_posix())
    assert impl == ["cpp/metal/apple/apple_adapter.cpp"] and includes == []
