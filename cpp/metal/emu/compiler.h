// The emulator's kernel compiler: MSL source -> rewritten C++ -> shared object (system compiler), cached
// on disk (kernel_cache.h) by a hash of (source, shim, options, compiler) and loaded with dlopen.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/module.h"
#include "emu/runtime.h"
#include "msl_abi.h"

namespace ember::metal::emu {

// The runtime (fibers, barriers, simd ops, faults) is shared with the CUDA emulator: cpp/emu/.
using namespace ember::emu;

struct CompileOptions {
  // Function constants: [[function_constant(index)]] -> a C++ literal of the declared type.
  std::vector<std::pair<uint32_t, std::string>> constants;
  bool tsan = false;  // instrument the kernel for ThreadSanitizer (the TSan job's runner sets it)
  // GPU-math mode (EMBER_METAL_EMU_GPU_MATH=1): transcendentals anywhere within the MSL spec's bounds,
  // a*b+c may contract to an FMA, half/bfloat converted by code independent of ember's (msl_cpu.h).
  bool gpu_math = false;
  std::string key() const;
};

// Compiles (or finds in the caches) `source`. `label` names it in messages ("unary.metal"). A
// compile error throws ember::Error "[metal] compiling <label> failed:\n<the compiler's log>".
std::shared_ptr<const Module> load_module(const std::string& source, const std::string& label,
                                          const CompileOptions& options);

struct CompileStats {
  uint64_t compiles = 0;     // modules built by the compiler in this process
  uint64_t disk_hits = 0;    // modules loaded from the on-disk cache
  uint64_t memory_hits = 0;  // modules found already loaded
};
CompileStats compile_stats();

// $EMBER_METAL_CACHE, else $XDG_CACHE_HOME/ember/msl-emu, else ~/.cache/ember/msl-emu, when it is safe
// (kcache::Cache::dir()); else this process's private directory.
std::string cache_dir();

// 128-bit FNV-1a style digest, as 32 hex digits (cache keys; not cryptographic).
std::string digest(const std::string& data);

}  // namespace ember::metal::emu
