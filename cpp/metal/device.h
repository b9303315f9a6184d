// MetalDevice: one per Metal device over an Adapter - the queue's shared command buffer and encoder with
// the commit policy, hazard barriers, the buffer pool, the pipeline cache, synchronize().
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend.h"
#include "metal/adapter.h"
#include "metal/policy/buffer_pool.h"
#include "metal/policy/commit_policy.h"
#include "metal/policy/hazard_tracker.h"
#include "metal/policy/pipeline_cache.h"

namespace ember::metal {

class MetalDevice;

// One buffer from the device's pool. Storages and the command buffers that use it share ownership, so
// it returns to the pool only when no storage holds it and no encoded work can still touch it.
struct PooledBuffer {
  MetalDevice* dev;
  BufferHandle handle;
  size_t size;  // bytes (the pool's bucket, at least what was asked for)
  PooledBuffer(MetalDevice* d, BufferHandle h, size_t n) : dev(d), handle(h), size(n) {}
  ~PooledBuffer();
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
};
using BufferRef = std::shared_ptr<PooledBuffer>;

// MSL source text with its digest (the pipeline cache's key) and the name messages use.
struct KernelSource {
  std::string text, label, hash;
  KernelSource(std::string text, std::string label);
};

// One dispatch as Launch assembles it: what is bound at each [[buffer(n)]], and the grid.
struct DispatchDesc {
  struct Arg {
    enum class Kind : uint8_t { Unbound, Buffer, Bytes } kind = Kind::Unbound;
    BufferRef buffer;  // Kind::Buffer
    size_t offset = 0;  // bytes into the buffer
    size_t length = 0;  // bytes the kernel may touch from `offset` (to the storage's logical end)
    bool read = false, write = false;
    std::string bytes;  // Kind::Bytes: the value, copied at encoding (set_bytes)
  };
  PipelineHandle pipeline;
  std::string function;  // for messages
  std::vector<Arg> args;  // index = [[buffer(n)]]
  std::vector<std::pair<uint32_t, size_t>> threadgroup_memory;  // (index, bytes)
  Dim3 grid, group;
};

struct DeviceStats {
  size_t active_bytes, cached_bytes, peak_bytes, cache_limit, memory_limit, cached_buffers;
  uint64_t pool_hits, pool_misses, dispatches, barriers, fence_waits, commits, pipelines, pipeline_compiles;
};

class MetalDevice {
 public:
  // The Metal device `index`, created at first use: the MSL emulator when EMBER_METAL=emulate, else
  // metal-cpp's default device on an Apple build. nullptr when there is none (no backend, an empty
  // device list, or an index other than 0); `why` (if given) then says which.
  static MetalDevice* get(int index, std::string* why = nullptr);
  // "emulator", "apple" or nullptr: what get(0) runs on, without creating the device.
  static const char* backend_kind();

  explicit MetalDevice(Adapter& adapter, int index);
  ~MetalDevice();
  MetalDevice(const MetalDevice&) = delete;
  MetalDevice& operator=(const MetalDevice&) = delete;

  Adapter& adapter() { return adapter_; }
  Device device() const { return Device{DeviceKind::Metal, index_}; }
  std::string describe() const;  // "metal:0 (emulator, ember MSL emulator (CPU))"

  // A buffer of at least `bytes` (16-byte multiples, never empty) from the pool; throws Error (Memory)
  // past the memory limit. Its contents are unspecified (a reused buffer keeps old data).
  BufferRef alloc(size_t bytes);
  void* contents(const PooledBuffer& b) { return adapter_.contents(b.handle); }

  // The text of an embedded kernel file ("copy.metal"), loaded and hashed once. Throws when unknown.
  const KernelSource& source(const std::string& file);
  // The pipeline of `function` in `src` with `constants`, compiled at the first request (cached by
  // the source's hash, the function and the constants). Throws the compiler's log on an error.
  PipelineHandle pipeline(const KernelSource& src, const std::string& function,
                          const std::vector<FunctionConstant>& constants);

  // Encodes one dispatch into the shared encoder: a memory barrier first when it reads or writes what
  // an earlier dispatch since the last barrier wrote (or writes what one read), and a wait on the fence
  // of each command buffer still in flight that did so (Metal tracks none of ember's buffers); commits
  // the command buffer when the commit policy says so. Thread-safe.
  void encode(DispatchDesc&& d);
  // Commits the open command buffer, if it holds work (the GPU starts on it).
  void flush();
  // Commits, then waits for every command buffer. A kernel that failed since the last synchronize
  // (an out-of-bounds access under the emulator, a GPU fault) raises its error here, once.
  void synchronize();

  void empty_cache();
  void set_cache_limit(size_t bytes);
  void set_memory_limit(size_t bytes);
  void reset_peak_memory();
  DeviceStats stats() const;

 private:
  friend struct PooledBuffer;
  void release_buffer(BufferHandle h, size_t size) { pool_.free(h, size); }
  void commit_locked();
  void wait_locked(size_t keep_in_flight);

  // A fence lives while the command buffer that updates it, or any that waits on it, is in flight.
  struct Fence {
    Adapter& adapter;
    FenceHandle handle;
    Fence(Adapter& a, FenceHandle h) : adapter(a), handle(h) {}
    ~Fence() { adapter.release(handle); }
    Fence(const Fence&) = delete;
    Fence& operator=(const Fence&) = delete;
  };
  using FenceRef = std::shared_ptr<Fence>;
  struct InFlight {
    std::unique_ptr<CommandBuffer> cb;
    std::vector<BufferRef> keep;  // every buffer its dispatches bound: alive until it completes
    std::vector<FenceRef> fences;  // its own and those it waits on
    uint64_t id;
  };

  Adapter& adapter_;
  int index_;
  policy::BufferPool<BufferHandle> pool_;
  policy::PipelineCache<PipelineHandle> pipelines_;

  mutable std::mutex mu_;  // encoding, committing, waiting
  policy::CommitPolicy policy_;
  policy::HazardTracker<void*> hazards_;
  std::unique_ptr<CommandBuffer> cb_;  // the open command buffer (nullptr: none yet)
  std::vector<BufferRef> keep_;
  std::unordered_set<void*> kept_;
  FenceRef fence_;                         // the open command buffer's, updated at its commit
  std::vector<FenceRef> waits_;            // the fences it waits on
  std::map<uint64_t, FenceRef> pending_;   // in-flight command buffer id -> its fence
  uint64_t next_id_ = 1, dispatches_ = 0, commits_ = 0, fence_waits_ = 0;
  std::deque<InFlight> in_flight_;
  std::unique_ptr<Error> error_;  // the first device error since the last synchronize

  std::mutex src_mu_;
  std::map<std::string, std::unique_ptr<KernelSource>> sources_;
};

// Registers the Metal DeviceBackend's provider with the device registry (cpp/device.h); _C's module
// init calls it. Defined in metal_backend.cpp.
void register_backend();

}  // namespace ember::metal
