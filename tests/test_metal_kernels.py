"""ember's own Metal kernels are embedded in the library: every metal/*.metal file and the emulator's
shim are there by name. The kernels themselves are tested by family: test_metal_elementwise.py,
test_metal_reduce_index.py, test_metal_copy.py, test_metal_fused.py."""
import pathlib

from ember import _C_testing as _T

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_kernel_sources_are_embedded():
    names = _T.metal_sources()
    for f in ("msl_cpu.h", "msl_abi.h"):
        assert f in names
    shipped = sorted(p.name for p in (ROOT / "metal").glob("*.metal"))
    assert shipped and set(shipped) <= set(names)
    for f in shipped:
        assert _T.metal_source(f) == (ROOT / "metal" / f).read_text()
    assert _T.metal_source("absent.metal") is None
