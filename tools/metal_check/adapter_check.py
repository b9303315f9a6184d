"""Type-checks the metal-cpp adapter (cpp/metal/apple/) on Linux with libclang against the real metal-cpp
headers, taken from PyPI's macOS mlx-metal wheel at check time (never committed), plus our stubs/.

Usage: python tools/metal_check/adapter_check.py [file.cpp ...]   (default: cpp/metal/apple/*.cpp)
Fails loudly, never skips, when the wheel cannot be fetched.
"""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUBS = Path(__file__).resolve().parent / "stubs"
MLX_METAL = "mlx-metal==0.32.4"  # pinned: its headers decide what the check accepts


def cache_dir():
    d = os.environ.get("EMBER_METAL_CPP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ember", "mlx-metal")
    return Path(d)


def metal_cpp_headers():
    """The metal-cpp include directory, downloading and unpacking the wheel on first use."""
    cache = cache_dir()
    hdr = cache / MLX_METAL.replace("==", "-") / "metal_cpp"
    if (hdr / "Metal" / "Metal.hpp").exists():
        return hdr
    cache.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
                        "macosx_15_0_arm64", "--python-version", "3.11", MLX_METAL, "-d", str(cache)],
                       capture_output=True, text=True, timeout=900)
    wheels = sorted(cache.glob("mlx_metal-" + MLX_METAL.split("==")[1] + "-*.whl"))
    if p.returncode != 0 or not wheels:
        raise RuntimeError(f"cannot fetch {MLX_METAL} (the metal-cpp headers) with pip:\n{p.stdout}\n{p.stderr}")
    prefix = "mlx/include/metal_cpp/"
    with zipfile.ZipFile(wheels[-1]) as z:
        for n in z.namelist():
            if n.startswith(prefix) and not n.endswith("/"):
                out = hdr / n[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(n))
    if not (hdr / "Metal" / "Metal.hpp").exists():
        raise RuntimeError(f"{wheels[-1].name} has no metal_cpp headers")
    return hdr


def check(path, headers=None):
    """libclang errors in one adapter translation unit, as "file:line: message"."""
    import clang.cindex as ci

    headers = headers or metal_cpp_headers()
    gcc_inc = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True).stdout.strip()
    args = ["-x", "c++", "-std=c++17", "-fblocks", f"-I{headers}", f"-I{STUBS}", f"-I{ROOT / 'cpp'}",
            "-isystem", gcc_inc, "-DEMBER_HAS_METAL_CPP=1"]
    tu = ci.Index.create().parse(str(path), args=args)
    return [f"{Path(d.location.file.name).name if d.location.file else Path(path).name}:{d.location.line}: {d.spelling}"
            for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]


def main(argv):
    files = [Path(a) for a in argv] or sorted((ROOT / "cpp" / "metal" / "apple").glob("*.cpp"))
    bad = 0
    for f in files:
        problems = check(f)
        for p in problems:
            print(p)
        bad += bool(problems)
        print(f"{f.name}: {'FAIL' if problems else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
