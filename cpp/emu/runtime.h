// The emulators' execution engine, shared by the MSL and the CUDA emulator: runs one dispatch of a compiled
// kernel (groups on ember's thread pool, a group's threads as fibers with real barriers, 32-wide simdgroups
// or warps). Kernel modules of both dialects speak metal/msl_abi.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "msl_abi.h"

namespace ember::emu {

constexpr uint32_t kMaxThreadsPerGroup = 1024;
constexpr uint64_t kMaxThreadgroupMemory = 32768;
// The threadgroup memory a group may use: kMaxThreadgroupMemory, or less through
// EMBER_METAL_EMU_TG_MEMORY (bytes, 1024..32768), read at each dispatch.
uint64_t threadgroup_memory_limit();

// The words a dialect's messages use; everything else about a launch is the same in both.
struct Dialect {
  const char* tag;      // messages start "[tag] "
  const char* api;      // "Metal allows ..."
  const char* group;    // "threadgroup" / "block"
  const char* member;   // "of the group's N threads" / "of the block's"
  const char* memory;   // "threadgroup" / "shared" memory
  const char* barrier;  // "threadgroup_barrier" / "__syncthreads"
  const char* simd;     // "simdgroup" / "warp"
  const char* simd_ops; // "simd_* operations" / "warp intrinsics"
};
extern const Dialect kMetalDialect, kCudaDialect;

struct Launch {
  const msl_abi::Kernel* kernel = nullptr;
  const Dialect* dialect = &kMetalDialect;
  uint64_t group_memory_limit = 0;         // bytes of group memory; 0: threadgroup_memory_limit()
  uint32_t max_group_threads = kMaxThreadsPerGroup;
  std::string label;                       // the source's name, for messages
  std::vector<msl_abi::Buffer> buffers;    // indexed by [[buffer(n)]]; data == nullptr: not bound
  std::vector<uint64_t> threadgroup_mem;   // bytes per [[threadgroup(n)]]
  uint32_t grid[3] = {1, 1, 1};            // in threads, as dispatchThreads
  uint32_t group[3] = {1, 1, 1};           // threads per threadgroup
};

// Runs the launch to completion. Throws ember::Error naming the kernel: a bad launch (Value), an
// out-of-bounds access (Index: the buffer index and byte offset), a barrier some threads never reach.
void run_launch(const Launch& launch);

const msl_abi::Api* runtime_api();

// How a group's threads switch: "asm" (the x86-64 Linux context switch) or "ucontext" (everywhere else,
// and on Linux when built with EMBER_METAL_EMU_UCONTEXT).
const char* fiber_kind();

}  // namespace ember::emu
