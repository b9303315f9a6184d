// CudaDevice: one CUDA device as ember's host code sees it, above the adapter (emulator or driver): the GPU
// layer's device queue (gpu/gpu_device.h) over the adapter's one stream - a caching pool of plain device
// allocations, ember's kernels as the translated metal/*.metal sources (cuda/kernels.h) in one module per
// function-constant set, launches per the translation's contract - plus the module cache of em.cuda.Kernel.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "cuda/adapter.h"
#include "cuda/kernels.h"
#include "gpu/buffer_pool.h"
#include "gpu/gpu_device.h"
#include "gpu/pipeline_cache.h"
#include "../device.h"  // the device registry (a quoted "device.h" here would be this file)

namespace ember::cuda {

class CudaDevice final : public gpu::GpuDevice {
 public:
  // cuda:index, or nullptr with the reason in *why. EMBER_CUDA=emulate selects the emulator (any
  // machine); otherwise the driver adapter when a GPU answers.
  static CudaDevice* get(int index, std::string* why);
  static const char* backend_kind();  // "nvidia", "emulator" or nullptr
  static int count();

  Adapter& adapter() const { return *adapter_; }
  Device device() const override { return {DeviceKind::Cuda, index_}; }
  const char* api_name() const override { return "CUDA"; }
  int ordinal() const { return index_; }
  std::string describe() const override;

  // ember's kernels are Metal's, translated: every dtype, F64 through each file's float64 variant (kernels.h).
  bool holds(DType) const override { return true; }
  void check_dtype(DType dt, const char* op) const override;
  std::shared_ptr<gpu::GpuStorage> new_storage(DType dt, int64_t numel, const char* op) override;

  // A device allocation of at least `bytes` from the pool (a plain cuMemAlloc, never managed memory);
  // freed buffers are reused in stream order, so a reuse never overtakes work still using the old data.
  gpu::BufferRef alloc(size_t bytes) override;
  // Copies through the adapter on the device's stream (read_bytes waits for the stream).
  void write_bytes(const gpu::Buffer& b, size_t offset, const void* src, size_t n) override;
  void zero_bytes(const gpu::Buffer& b, size_t offset, size_t n) override;
  void read_bytes(const gpu::Buffer& b, size_t offset, void* dst, size_t n) override;
  static uint64_t dptr(const gpu::Buffer& b) { return (uint64_t)(uintptr_t)b.handle; }

  // The translation of an embedded kernel file (cuda::translated_source), with its kernels' signatures. A
  // ..._float64 kernel that is not in it is looked up in the file's float64 variant (kernel()).
  const gpu::KernelSource& source(const std::string& file) override;
  // Registers a translated-style source (text and per-kernel signatures, as translated_source makes them)
  // for Launch, kept for the process; the same text returns the same source.
  const gpu::KernelSource& add_source(const TranslatedSource& t);
  // The kernel `function` of `src` built with "-DMSL_FC_<i>=<literal>" per constant: one module per
  // (source, constant set), shared by its functions.
  gpu::KernelHandle kernel(const gpu::KernelSource& src, const std::string& function,
                           const std::vector<gpu::FunctionConstant>& constants) override;
  uint32_t max_threads(gpu::KernelHandle k) const override;
  // Launches on the stream now: the contract's arguments (kernels.h) from the dispatch's bindings.
  void encode(gpu::DispatchDesc&& d) override;
  void synchronize() override { adapter_->synchronize(index_); }

  MemoryStats memory_stats() const override;
  void reset_peak_memory() override { pool_.reset_peak(); }
  void empty_cache() override { pool_.empty_cache(); }
  void set_cache_limit(size_t bytes) override { pool_.set_cache_limit(bytes); }
  struct PoolCounters {
    size_t cached_buffers, hits, misses, memory_limit;
  };
  PoolCounters pool_counters() const;

  // The module compiled from `source` with `options` on this device (once per (source hash, options,
  // arch)); `compiled` tells whether this call built it.
  ModuleHandle module(const std::string& source, const std::string& source_hash, const std::string& label,
                      const std::vector<std::string>& options, bool* compiled);
  // Checks CUDA's launch limits, then launches.
  void launch(ModuleHandle m, const std::string& function, Dim3 grid, Dim3 block, uint32_t shared_mem,
              const std::vector<LaunchArg>& args);

 private:
  CudaDevice(Adapter& a, int index);
  void release_buffer(void* handle, size_t size) override { pool_.free(dptr_of(handle), size); }
  static uint64_t dptr_of(void* h) { return (uint64_t)(uintptr_t)h; }

  // One prepared kernel: its module, name and parameters.
  struct Kernel {
    ModuleHandle module;
    std::string function;
    KernelSig sig;
    uint32_t max_threads;
  };

  Adapter* adapter_;
  int index_;
  gpu::BufferPool<uint64_t> pool_;
  std::mutex mu_;
  std::map<std::string, ModuleHandle> modules_;
  std::mutex src_mu_;
  // By source hash: the source and its kernels' signatures (translated files and add_source's).
  struct Source {
    std::unique_ptr<gpu::KernelSource> src;
    std::map<std::string, KernelSig> kernels;
    std::string file;  // the embedded kernel file it translates ("" for add_source's)
  };
  const gpu::KernelSource& file_source(const std::string& file, bool f64);
  std::map<std::string, Source> sources_;
  std::map<std::pair<std::string, bool>, const gpu::KernelSource*> files_;  // by (file, float64 variant)
  gpu::PipelineCache<Kernel*> kernels_;  // owned by kernel_store_
  std::mutex store_mu_;
  std::vector<std::unique_ptr<Kernel>> kernel_store_;
};

// Registers the CUDA DeviceBackend provider and the GPU layer's launchers for DeviceKind::Cuda (idempotent);
// the extension calls it at import.
void register_backend();

}  // namespace ember::cuda
