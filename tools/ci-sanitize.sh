#!/usr/bin/env bash
# CI: builds ember's extension with a sanitizer in its own build dir and runs tests under it; any
# sanitizer report fails the job. Usage: tools/ci-sanitize.sh asan|tsan [extra pytest args]
#   asan: ASan + UBSan (every object, the per-ISA kernels included) over the whole suite.
#   tsan: TSan over the threaded and concurrency tests, with EMBER_NUM_THREADS=2, then over a set of
#         emulated-Metal tests with the kernels compiled under TSan as well.
# Reports go to files (build/<kind>/reports), not stderr, so pytest's capture cannot hide them; the
# job prints each one and exits 1. Needs gcc's libasan/libubsan/libtsan (Debian: part of gcc).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: tools/ci-sanitize.sh asan|tsan [pytest args]}
shift
case "$kind" in
  asan) sanitizer="address,undefined"; runtime=libasan.so ;;
  tsan) sanitizer="thread"; runtime=libtsan.so ;;
  *) echo "ci-sanitize: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
bdir="build/$kind"
python=${PYTHON:-python}

# --- build (serialised with the other builds of this machine, -j2 like them) ----------------------
exec 9>/tmp/ember_build.lock
flock 9
# -O1 with line tables only: the reports keep their file:line stacks and the build takes a third of
# -O2 -g's time, which on a 2-core CI machine is most of this job.
if [ ! -f "$bdir/build.ninja" ]; then
  cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DEMBER_SANITIZE=ON \
    -DEMBER_SANITIZER="$sanitizer" -DPython_EXECUTABLE="$(command -v "$python")" \
    -Dpybind11_DIR="$("$python" -m pybind11 --cmakedir)" >/dev/null
fi
ninja -C "$bdir" -j2
flock -u 9

# The package with the instrumented extension, apart from the developer's python/ember.
pkg="$bdir/pkg"
rm -rf "$pkg"
mkdir -p "$pkg"
cp -r python/ember "$pkg/ember"
rm -f "$pkg"/ember/_C*.so "$pkg"/ember/.tmp.*
cp "$bdir"/python/src/_C*.so "$pkg/ember/"

reports="$bdir/reports"
rm -rf "$reports"
mkdir -p "$reports"
# Python itself is not instrumented: the runtime must be loaded first, before libpython's allocator,
# and libstdc++ with it, or the runtime cannot find the real __cxa_throw the first time ember throws.
preload="$(gcc -print-file-name="$runtime")"
[ -f "$preload" ] || { echo "ci-sanitize: $runtime not found (gcc -print-file-name)" >&2; exit 2; }
preload="$preload:$(gcc -print-file-name=libstdc++.so)"

status=0
if [ "$kind" = asan ]; then
  # The Metal emulator's fibers tell ASan of each stack switch (cpp/emu/runtime.cpp), so its
  # tests run here too.
  # detect_leaks=0: CPython keeps its objects alive at exit. allocator_may_return_null: the tests of
  # huge allocations expect ember's OutOfMemory, not an ASan abort.
  LD_PRELOAD="$preload" \
  ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$PWD/$reports/asan:handle_segv=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:log_path=$PWD/$reports/ubsan" \
  EMBER_SANITIZED=1 PYTHONPATH="$pkg" \
    "$python" -m pytest -q -p no:cacheprovider "${@:-tests}" || status=$?
else
  tsan_env=(env LD_PRELOAD="$preload" EMBER_NUM_THREADS=2 EMBER_SANITIZED=1 PYTHONPATH="$pkg"
    TSAN_OPTIONS="log_path=$PWD/$reports/tsan:halt_on_error=0:report_signal_unsafe=0:suppressions=$PWD/tools/tsan.supp")
  # The tests that run ember from several threads at once, and the pool itself. Fork tests stay out:
  # TSan does not support a multi-threaded fork.
  "${tsan_env[@]}" "$python" -m pytest -q -p no:cacheprovider tests/test_threads.py tests/test_concurrency.py \
      tests/test_custom_op.py::test_four_threads_apply_custom_ops_at_once \
      tests/test_custom_op.py::test_inplace_target_is_per_thread \
      tests/test_index.py::test_index_add_and_scatter_add_are_bit_identical_on_any_thread_count \
      tests/test_robustness.py::test_set_num_threads_extremes \
      tests/test_robustness.py::test_threads_concurrent_nested_no_crash_no_hang \
      tests/test_robustness.py::test_threads_in_process_share_results "$@" || status=$?
  # The Metal kernels behind the fused ops (softmax, the norms, RoPE, the activation backwards, a small
  # sdpa forward and decode), batch_norm and group_norm, run by the emulated-device tests with the
  # kernels compiled under TSan too (EMBER_METAL_EMU_TSAN): a missing barrier or a racy threadgroup
  # write is reported like a host race. tools/metal_tsan covers the reductions and the must-fail case.
  "${tsan_env[@]}" EMBER_METAL=emulate EMBER_TEST_DEVICE=metal EMBER_METAL_EMU_TSAN=1 \
    EMBER_METAL_CACHE="$PWD/$bdir/msl-cache" \
    "$python" -m pytest -q -p no:cacheprovider tests/test_metal_fused.py tests/test_norm_layers.py \
      -k "(test_metal_fused and (not sdpa or (small and float32))) or batch_norm_training_matches or group_norm_matches" \
      || status=$?
fi

# A report is an error, a UBSan "runtime error", a failed internal check or a TSan warning. ASan's
# "failed to allocate" warnings are not: the huge-allocation tests make them on purpose.
found=0
for f in "$reports"/*; do
  [ -e "$f" ] || continue
  if grep -qE "ERROR: |runtime error|CHECK failed|WARNING: ThreadSanitizer|SUMMARY: " "$f"; then
    found=1
    echo "===== sanitizer report: $f" >&2
    cat "$f" >&2
  else
    echo "ci-sanitize: note, $f: $(sort -u "$f" | head -3 | tr '\n' ' ')" >&2
  fi
done
if [ "$found" = 1 ]; then
  echo "ci-sanitize $kind: sanitizer reports (above)" >&2
  exit 1
fi
exit "$status"
