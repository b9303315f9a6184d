#!/usr/bin/env bash
# Fast developer loop: incremental CMake/Ninja build of ember._C, copied next to the sources so that
# `PYTHONPATH=python pytest` runs against it. Serialised with flock so parallel callers never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>/tmp/ember_build.lock
flock 9
if [ ! -f build/dev/build.ninja ]; then
  cmake -S . -B build/dev -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" >/dev/null
fi
ninja -C build/dev -j2 "$@"
# Replace atomically (copy, then rename) so running processes keep the old file mapped.
for f in build/dev/_C*.so; do
  cp "$f" "python/ember/.tmp.$(basename "$f")" && mv "python/ember/.tmp.$(basename "$f")" "python/ember/$(basename "$f")"
done
