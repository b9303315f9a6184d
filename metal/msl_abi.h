// The binary contract between the emulators' runtime (cpp/emu/) and a compiled kernel module (MSL or CUDA).
#pragma once
#include <stdint.h>

namespace msl_abi {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kSimdWidth = 32;
constexpr uint32_t kSimdSlotBytes = 64;  // the largest value one lane hands to a simd_* op (a float4x4 row)

// A bound argument as the kernel sees it: device memory at `data`, `size` bytes long.
struct Buffer {
  char* data;
  uint64_t size;
};

// What one thread of a dispatch sees: its positions and ids, and its group's opaque runtime state.
struct Thread {
  uint32_t tpig[3];   // thread_position_in_grid
  uint32_t tpitg[3];  // thread_position_in_threadgroup
  uint32_t tgpig[3];  // threadgroup_position_in_grid
  uint32_t tptg[3];   // threads_per_threadgroup (this group's actual size; edge groups are smaller)
  uint32_t dtptg[3];  // dispatch_threads_per_threadgroup (the size the dispatch asked for)
  uint32_t tpg[3];    // threads_per_grid
  uint32_t tgpg[3];   // threadgroups_per_grid
  uint32_t tiitg;     // thread_index_in_threadgroup
  uint32_t lane;      // thread_index_in_simdgroup
  uint32_t simd_id;   // simdgroup_index_in_threadgroup
  uint32_t simds;     // simdgroups_per_threadgroup
  const Buffer* buffers;
  uint32_t num_buffers;
  void* group;        // the runtime's state of this thread's threadgroup
  // The call site of the barrier this thread waits at, set by a shim that knows it (CUDA's: the source
  // line of its __syncthreads); threads waiting at different sites are reported. 0: unknown (Metal).
  uint32_t sync_site;
};

// Runtime services a kernel module calls; handed to the module once, at load.
struct Api {
  uint32_t version;
  Thread* (*current)();
  void (*barrier)(Thread*);                           // threadgroup_barrier
  char* (*simd_begin)(Thread*);                       // this simdgroup's slots for the next simd op
  uint64_t (*simd_end)(Thread*, uint32_t op);         // waits for the active lanes; returns their mask
  void* (*tg_alloc)(Thread*, uint32_t site, uint64_t size, uint64_t align);  // threadgroup variable
  void* (*tg_param)(Thread*, uint32_t index, uint64_t* size);              // [[threadgroup(n)]]
  // Ends the calling thread's threadgroup with an error (`kind`: FaultKind; `message` is copied) and
  // never returns. Faults cross the module boundary only this way, never as a C++ exception: a module
  // built by the system compiler (libstdc++) may run in an extension built against another C++
  // runtime (a release wheel's static libc++), which could not catch what the module throws.
  void (*fault)(Thread*, uint32_t kind, const char* message);
};
enum FaultKind : uint32_t { kFaultValue = 0, kFaultIndex = 1 };

// One kernel a module defines. `entry` never throws: the module catches whatever its code throws and
// reports it through Api::fault. `buffers` lists each [[buffer(n)]] index the kernel binds, with the
// least size it needs (sizeof(T) for a `constant T&`, 0 for a pointer), ended by index UINT32_MAX.
struct BufferUse {
  uint32_t index;
  uint32_t min_size;
};
struct Kernel {
  const char* name;
  void (*entry)(Thread*);
  const BufferUse* buffers;
  uint32_t uses_sync;  // barriers or simd ops: its threads need fibers
};

// A fault message built without the C++ library (a module must not throw, and its runtime may differ from
// the extension's): both shims use it for Api::fault.
struct Msg {
  char b[256];
  uint32_t n = 0;
  Msg& s(const char* p) {
    while (p && *p && n + 1 < sizeof b) b[n++] = *p++;
    b[n] = 0;
    return *this;
  }
  Msg& u(uint64_t v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10); while ((v /= 10) != 0);
    while (k > 0 && n + 1 < sizeof b) b[n++] = d[--k];
    b[n] = 0;
    return *this;
  }
  Msg& i(int64_t v) { return v < 0 ? s("-").u(0 - (uint64_t)v) : u((uint64_t)v); }
  Msg& x(uint64_t v) {
    s("0x");
    char d[17];
    int k = 0;
    do d[k++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
    while (k > 0 && n + 1 < sizeof b) b[n++] = d[--k];
    b[n] = 0;
    return *this;
  }
};

}  // namespace msl_abi

// A module exports: extern "C" uint32_t msl_module_init(const msl_abi::Api*) (returns kVersion) and
// extern "C" const msl_abi::Kernel* msl_module_kernels(uint32_t* count).
