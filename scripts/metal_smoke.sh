#!/usr/bin/env bash
# The gate for a real Mac (Apple silicon, Xcode with its Metal toolchain): compiles every kernel with Apple's
# compiler, builds ember with the metal-cpp backend, and runs the Metal tests with API and shader
# validation on. Nothing of it can run on Linux. Usage: scripts/metal_smoke.sh   (from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" != "Darwin" ]; then
  echo "metal_smoke.sh needs macOS with a Metal device" >&2
  exit 2
fi
out=build/metal-smoke
mkdir -p "$out"
# The kernels are compiled at run time by the OS (newLibrary), so only this script's first step needs the
# Metal toolchain, which Xcode 26 ships as a separate component.
if ! xcrun -sdk macosx --find metal >/dev/null 2>&1 || ! xcrun -sdk macosx metal --version >/dev/null 2>&1; then
  echo "metal_smoke.sh: the Metal toolchain (xcrun -sdk macosx metal) is missing. Install Xcode (not only the" >&2
  echo "Command Line Tools), then its Metal toolchain component:" >&2
  echo "  xcodebuild -downloadComponent MetalToolchain    (Xcode 26 and later; earlier Xcode includes it)" >&2
  exit 2
fi
xcrun -sdk macosx metal --version
echo "== compiling every kernel with Apple's compiler"
for f in metal/*.metal; do
  xcrun -sdk macosx metal -x metal -std=metal3.1 -Wall -Wextra -Werror -fno-fast-math -Wmetal-addr-spaces \
    -c "$f" -o "$out/$(basename "$f" .metal).air"
done
xcrun -sdk macosx metal "$out"/*.air -o "$out/ember.metallib"
echo "== building ember with the metal-cpp backend"
python -m pip install -v ".[test]" -Ccmake.define.EMBER_METAL=ON
python - <<'PY'
import ember as em
assert em.metal.backend() == "apple", em.metal.backend()
PY
echo "== the Metal tests with API validation and shader validation"
export METAL_DEVICE_WRAPPER_TYPE=1 MTL_SHADER_VALIDATION=1 MTL_DEBUG_LAYER=1
export EMBER_TEST_DEVICE=metal  # the device-parametrised suite runs on the Metal device
python -m pytest tests -q -k "metal"  # test_metal_*.py run on the real device when em.metal.backend() is "apple"
python -m pytest tests -q
echo "PASS: every kernel compiled with xcrun metal; the suite ran on the Metal device"
