#!/usr/bin/env bash
# CI: builds ember with the emulator's portable fiber switch forced (EMBER_METAL_EMU_UCONTEXT: ucontext, the
# path arm64 macOS compiles; Linux otherwise takes the x86-64 assembly switch) in its own build dir, -O1 and
# no sanitizer, then runs the emulator's own tests with it. Usage: tools/metal_ucontext.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=build/ucontext
python=${PYTHON:-python}
exec 9>/tmp/ember_build.lock
flock 9
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$bdir/build.ninja" ]; then
  cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DEMBER_METAL_EMU_UCONTEXT=ON "${launcher[@]}" -DPython_EXECUTABLE="$(command -v "$python")" \
    -Dpybind11_DIR="$("$python" -m pybind11 --cmakedir)" >/dev/null
fi
ninja -C "$bdir" -j2
flock -u 9
pkg="$bdir/pkg"
rm -rf "$pkg"
mkdir -p "$pkg"
cp -r python/ember "$pkg/ember"
rm -f "$pkg"/ember/_C*.so "$pkg"/ember/.tmp.*
cp "$bdir"/python/src/_C*.so "$pkg/ember/"
kind=$(PYTHONPATH="$pkg" "$python" -c "from ember import _C_testing; print(_C_testing.metal_emu_fibers())")
[ "$kind" = ucontext ] || { echo "metal_ucontext: the build switches fibers with '$kind', not ucontext" >&2; exit 1; }
# The emulator's tests, and the fused kernels (barriers and simd ops in every group) on the emulated device.
PYTHONPATH="$pkg" EMBER_METAL=emulate EMBER_METAL_CACHE="$PWD/$bdir/msl-cache" "$python" -m pytest -q -p no:cacheprovider \
  "${@:-tests/test_metal_emulator.py}"
PYTHONPATH="$pkg" EMBER_METAL=emulate EMBER_TEST_DEVICE=metal EMBER_METAL_CACHE="$PWD/$bdir/msl-cache" \
  "$python" -m pytest -q -p no:cacheprovider tests/test_metal_fused.py
