// DeviceBackend: one object per device owning what is not a storage method (allocation, host copies,
// arange/random, synchronisation, the memory pool). storage.cpp reaches devices only through it.
#pragma once
#include <cstddef>
#include <string>

#include "backend.h"

namespace ember {

// Bytes a device's allocator holds: handed out and not yet freed, kept in its cache, the most ever
// handed out at once (since start or the last reset), and the cache's cap.
struct MemoryStats {
  size_t allocated = 0, cached = 0, peak = 0, cache_limit = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;   // "cpu (avx512, 2 threads)", "metal:0 (emulator, ...)"
  virtual bool supports(DType dt) const = 0;  // Metal: false for F64
  virtual StoragePtr alloc(DType dt, int64_t numel, bool zeroed) = 0;
  virtual StoragePtr from_host(DType dt, int64_t numel, const void* src) = 0;  // a copy of dense host data
  virtual void to_host(const BackendStorage& s, void* dst) = 0;  // all s.numel() elements; waits for pending writes
  virtual StoragePtr arange(DType dt, double start, double step, int64_t n) = 0;
  // Both draw from the one global generator (seed + counter, shared by every device).
  virtual StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) = 0;
  virtual StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) = 0;
  virtual void synchronize() = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void empty_cache() = 0;
  virtual void set_cache_limit(size_t bytes) = 0;
};

// Backends other than the CPU live in libraries above ember_core and register a provider at load
// time (ember_metal does, from _C's module init); the provider returns nullptr when unavailable.
using BackendProvider = DeviceBackend* (*)(int index);
void set_backend_provider(DeviceKind kind, BackendProvider p);
// Exhaustive switch over DeviceKind (no default): CPU always; others through their provider; throws
// Error(Device) "[op] device metal:0 is not available (...)" when absent.
DeviceBackend& device_backend(Device d, const char* op);
bool device_available(Device d);

// The global generator: reserve(n) returns (seed, first counter) and advances the counter by n.
struct RngDraw {
  uint64_t seed, counter;
};
RngDraw rng_reserve(uint64_t n);
void manual_seed(uint64_t seed);
// An em.Generator: while installed on a thread, that thread's draws come from (seed, counter) instead of
// the global generator; rng_uninstall returns the advanced counter. rng_mix is manual_seed's seed mixing.
void rng_install(uint64_t mixed_seed, uint64_t counter);
uint64_t rng_uninstall();
uint64_t rng_mix(uint64_t seed);
// The generator's (seed, counter) without drawing, and setting both back (em.checkpoint replays a
// recomputation's random draws with them, as torch's preserve_rng_state does).
RngDraw rng_state();
void set_rng_state(uint64_t seed, uint64_t counter);

}  // namespace ember
