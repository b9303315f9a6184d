#!/usr/bin/env bash
# The emulator's ThreadSanitizer job: builds the emulator and a runner with -fsanitize=thread, runs ember's
# reduction kernels (compiled with TSan too) and requires no report, then runs a fixture that lacks its
# barriers and requires TSan to report the race. Usage: tools/metal_tsan/run.sh (from anywhere).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/metal-tsan
mkdir -p "$out"
files="metal/msl_cpu.h|metal/msl_abi.h|cpp/dtype.h"
for k in metal/*.metal; do files="$files|$k"; done
cmake -DROOT="$PWD" "-DFILES=$files" -DOUT="$out/metal_embedded.cpp" -P cmake/embed_sources.cmake
${CXX:-c++} -std=c++17 -O1 -g -fsanitize=thread -Wall -Wextra -Wno-unused-parameter -Icpp -Imetal \
  cpp/msl/rewrite.cpp cpp/msl/rewrite_cuda.cpp cpp/metal/emu/compiler.cpp cpp/emu/runtime.cpp cpp/metal/emu/emu_adapter.cpp \
  cpp/emu/faults.cpp cpp/emu/module.cpp cpp/kernel_cache.cpp cpp/sha256.cpp cpp/cpu/parallel.cpp "$out/metal_embedded.cpp" tools/metal_tsan/runner.cpp -o "$out/runner" -ldl -lpthread
export EMBER_METAL_EMU_TSAN=1 EMBER_NUM_THREADS=2 EMBER_METAL_CACHE="${EMBER_METAL_CACHE:-$PWD/$out/cache}"
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 report_signal_unsafe=0"
echo "== reduction kernels under TSan (must be clean)"
"$out/runner" clean > "$out/clean.log" 2>&1 || { cat "$out/clean.log"; echo "FAIL: the reduction kernels are not TSan-clean"; exit 1; }
cat "$out/clean.log"
if grep -q "WARNING: ThreadSanitizer" "$out/clean.log"; then echo "FAIL: TSan reported on the reduction kernels"; exit 1; fi
echo "== fixture without barriers (TSan must report a race)"
set +e
"$out/runner" race > "$out/race.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 66 ] || ! grep -q "WARNING: ThreadSanitizer: data race" "$out/race.log"; then
  cat "$out/race.log"; echo "FAIL: TSan did not report the missing barrier (exit $rc)"; exit 1
fi
grep -m1 -A3 "WARNING: ThreadSanitizer: data race" "$out/race.log"
echo "== an out-of-bounds write on a fiber (an error, then the next dispatch runs; no report)"
"$out/runner" fault > "$out/fault.log" 2>&1 || { cat "$out/fault.log"; echo "FAIL: the fault fixture"; exit 1; }
cat "$out/fault.log"
if grep -q "ThreadSanitizer" "$out/fault.log"; then echo "FAIL: TSan reported on the fault fixture"; exit 1; fi
echo "PASS: reductions clean, missing barrier reported, fault reported"
