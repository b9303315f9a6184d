#!/usr/bin/env bash
# Fast developer loop: incremental CMake/Ninja build of ember._C, copied next to the sources so that
# `PYTHONPATH=python pytest` runs against it. Serialised with flock so parallel callers never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>/tmp/ember_build.lock
flock 9
# ccache (when installed) with paths relative to the tree, so several worktrees share one cache.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f build/dev/build.ninja ]; then
  cmake -S . -B build/dev -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" >/dev/null
fi
ninja -C build/dev -j2 "$@"
# Replace atomically (copy, then rename) so running processes keep the old file mapped.
for f in build/dev/python/src/_C*.so; do
  cp "$f" "python/ember/.tmp.$(basename "$f")" && mv "python/ember/.tmp.$(basename "$f")" "python/ember/$(basename "$f")"
done
# The per-ISA objects must export their register_* functions and nothing else: any other global or
# weak symbol (an out-of-line std:: template member, say) is shared by the linker with baseline code,
# which could then run AVX2/AVX-512 instructions on a CPU without them.
for o in build/dev/cpp/CMakeFiles/ember_isa_*.dir/cpu/*.o; do
  bad=$(nm -C --defined-only "$o" | grep -E ' [A-Z] ' | grep -vE 'ember::cpu::register_(fused|kernels|gemm)_' || true)
  if [ -n "$bad" ]; then
    echo "dev-build: $o defines shared symbols (see cpp/cpu/fused.h, thread_scratch):" >&2
    echo "$bad" >&2
    exit 1
  fi
done
