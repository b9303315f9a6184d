// MetalDevice: one per Metal device over an Adapter - the GPU layer's device queue (gpu/gpu_device.h) as a
// shared command buffer and encoder with the commit policy, hazard barriers, the buffer pool, the pipeline
// cache, synchronize().
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
#include "gpu/gpu_device.h"
#include "metal/adapter.h"
#include "gpu/buffer_pool.h"
#include "gpu/pipeline_cache.h"
#include "metal/policy/commit_policy.h"
#include "metal/policy/hazard_tracker.h"

namespace ember::metal {

using gpu::Buffer;
using gpu::BufferRef;
using gpu::DispatchDesc;
using gpu::KernelSource;
class GpuStorage;

struct DeviceStats {
  size_t active_bytes, cached_bytes, peak_bytes, cache_limit, memory_limit, cached_buffers;
  uint64_t pool_hits, pool_misses, dispatches, barriers, fence_waits, commits, pipelines, pipeline_compiles;
  uint64_t library_compiles;  // one per kernel source: its pipelines share the library
};

class MetalDevice final : public gpu::GpuDevice {
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
  Device device() const override { return Device{DeviceKind::Metal, index_}; }
  const char* api_name() const override { return "Metal"; }
  std::string describe() const override;  // "metal:0 (emulator, ember MSL emulator (CPU))"

  // Every dtype but F64: Metal has no 64-bit float ("[op] float64 is not supported on metal", DType).
  bool holds(DType dt) const override { return dt != DType::F64; }
  void check_dtype(DType dt, const char* op) const override;
  // A MetalStorage from the pool.
  std::shared_ptr<gpu::GpuStorage> new_storage(DType dt, int64_t numel, const char* op) override;
  // A buffer of at least `bytes` (16-byte multiples, never empty) from the pool; throws Error (Memory)
  // past the memory limit. Its contents are unspecified (a reused buffer keeps old data).
  BufferRef alloc(size_t bytes) override;
  void* contents(const Buffer& b) { return adapter_.contents(BufferHandle{b.handle}); }
  // Buffers are shared (CPU-visible): host access is a memcpy of their contents.
  void write_bytes(const Buffer& b, size_t offset, const void* src, size_t n) override;
  void zero_bytes(const Buffer& b, size_t offset, size_t n) override;
  void read_bytes(const Buffer& b, size_t offset, void* dst, size_t n) override;

  // The text of an embedded kernel file ("copy.metal"), loaded and hashed once. Throws when unknown.
  const KernelSource& source(const std::string& file) override;
  // The pipeline of `function` in `src` with `constants`, compiled at the first request (cached by
  // the source's hash, the function and the constants). Throws the compiler's log on an error.
  PipelineHandle pipeline(const KernelSource& src, const std::string& function,
                          const std::vector<FunctionConstant>& constants);
  gpu::KernelHandle kernel(const KernelSource& src, const std::string& function,
                           const std::vector<FunctionConstant>& constants) override {
    return gpu::KernelHandle{pipeline(src, function, constants).p};
  }
  // The most threads per threadgroup `pipeline` allows (at most the device's limit).
  uint32_t max_threads(PipelineHandle pipeline) const { return adapter_.max_threads(pipeline); }
  uint32_t max_threads(gpu::KernelHandle k) const override { return adapter_.max_threads(PipelineHandle{k.p}); }

  // Encodes one dispatch into the shared encoder: a memory barrier first when it reads or writes what
  // an earlier dispatch since the last barrier wrote (or writes what one read), and a wait on the fence
  // of each command buffer still in flight that did so (Metal tracks none of ember's buffers); commits
  // the command buffer when the commit policy says so. Thread-safe.
  void encode(DispatchDesc&& d) override;
  // Commits the open command buffer, if it holds work (the GPU starts on it).
  void flush();
  // Commits, then waits for every command buffer. A kernel that failed since the last synchronize
  // (an out-of-bounds access under the emulator, a GPU fault) raises its error here, once.
  void synchronize() override;

  void empty_cache() override;
  void set_cache_limit(size_t bytes) override;
  void set_memory_limit(size_t bytes);
  void reset_peak_memory() override;
  DeviceStats stats() const;
  MemoryStats memory_stats() const override;

 private:
  void release_buffer(void* h, size_t size) override { pool_.free(BufferHandle{h}, size); }
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
  gpu::BufferPool<BufferHandle> pool_;
  gpu::PipelineCache<LibraryHandle> libraries_;  // one per source (keyed by its hash alone)
  gpu::PipelineCache<PipelineHandle> pipelines_;

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
