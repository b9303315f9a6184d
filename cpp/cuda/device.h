// CudaDevice: one CUDA device as ember's host code sees it, above the adapter (emulator or driver):
// allocation with the memory stats, the module cache of em.cuda.Kernel, launches with CUDA's limits checked.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "cuda/adapter.h"
#include "../device.h"  // the device registry (a quoted "device.h" here would be this file)

namespace ember::cuda {

class CudaDevice {
 public:
  // cuda:index, or nullptr with the reason in *why. EMBER_CUDA=emulate selects the emulator (any
  // machine); otherwise the driver adapter when a GPU answers.
  static CudaDevice* get(int index, std::string* why);
  static const char* backend_kind();  // "nvidia", "emulator" or nullptr
  static int count();

  Adapter& adapter() const { return *adapter_; }
  Device device() const { return {DeviceKind::Cuda, index_}; }
  int ordinal() const { return index_; }
  std::string describe() const;

  uint64_t alloc(size_t bytes);  // throws Error (Memory) naming the device
  void free(uint64_t dptr, size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void synchronize() { adapter_->synchronize(index_); }

  // The module compiled from `source` with `options` on this device (once per (source hash, options,
  // arch)); `compiled` tells whether this call built it.
  ModuleHandle module(const std::string& source, const std::string& source_hash, const std::string& label,
                      const std::vector<std::string>& options, bool* compiled);
  // Checks CUDA's launch limits, then launches.
  void launch(ModuleHandle m, const std::string& function, Dim3 grid, Dim3 block, uint32_t shared_mem,
              const std::vector<LaunchArg>& args);

 private:
  CudaDevice(Adapter& a, int index) : adapter_(&a), index_(index) {}
  Adapter* adapter_;
  int index_;
  std::atomic<size_t> allocated_{0}, peak_{0};
  std::mutex mu_;
  std::map<std::string, ModuleHandle> modules_;
};

// Registers the CUDA DeviceBackend provider (idempotent); the extension calls it at import.
void register_backend();

}  // namespace ember::cuda
