// The narrow adapter interface of ember's CUDA backend: the final device calls (memory, copies, a module
// from CUDA C++ source, a launch, synchronize). Everything above it (CudaDevice, CudaStorage, em.cuda.Kernel)
// is one code path; below it sit the CUDA emulator (emu_adapter.cpp, any machine) and the driver
// (nvidia_adapter.cpp: libcuda.so.1 and NVRTC through dlopen; never yet run on a GPU, see docs/cuda.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cublas.h"

#include "gpu/types.h"

namespace ember::cuda {

using gpu::Dim3;

// One launch argument, in the kernel's parameter order: a device pointer (with its extent, which the
// emulator checks every access against) or a value's bytes.
struct LaunchArg {
  bool pointer = false;
  uint64_t dptr = 0;    // device address (the emulator's: a host address)
  uint64_t extent = 0;  // bytes the pointer may reach
  std::string bytes;    // a value, as the kernel's parameter type lays it out
};

// An event (CUevent, or the emulator's record of one); the adapter knows what it points to.
struct EventHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};

// A compiled module (CUmodule, or an emulator module); the adapter knows what it points to.
struct ModuleHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual const char* kind() const = 0;  // "nvidia" or "emulator"
  virtual int device_count() = 0;
  virtual std::string device_name(int dev) = 0;
  virtual std::string arch(int dev) = 0;  // "sm_90"; the emulator's "emulated"
  virtual uint32_t max_threads_per_block(int dev) = 0;
  virtual uint64_t max_shared_per_block(int dev) = 0;  // static + dynamic, without opt-in
  virtual uint64_t total_memory(int dev) = 0;

  // Device memory; alloc throws Error (Memory) when the device refuses.
  virtual uint64_t alloc(int dev, size_t bytes) = 0;
  virtual void free(int dev, uint64_t dptr) = 0;
  // Copies run in stream order; copy_to_host returns once the data is on the host (it synchronises).
  virtual void copy_to_device(int dev, uint64_t dst, const void* src, size_t n) = 0;
  virtual void copy_to_host(int dev, void* dst, uint64_t src, size_t n) = 0;
  virtual void copy_on_device(int dev, uint64_t dst, uint64_t src, size_t n) = 0;

  // Compiles CUDA C++ `source` (its name in messages: `label`) for `dev` with NVRTC-style `options`
  // (-D / -U only, checked above this call). Throws Error "[cuda] compiling <label> failed:\n<log>"
  // with the user's line numbers. Uncached: CudaDevice keeps one module per key.
  virtual ModuleHandle load_module(int dev, const std::string& source, const std::string& label,
                                   const std::vector<std::string>& options) = 0;
  // Launches `function` of `module` on the device's stream. The emulator runs it before returning and
  // throws its faults; the driver reports a kernel's faults at the next synchronize.
  // The most threads a block of `function` may have (register use can put it below the device's limit).
  virtual uint32_t max_threads(int dev, ModuleHandle module, const std::string& function) {
    (void)module, (void)function;
    return max_threads_per_block(dev);
  }
  virtual void launch(int dev, ModuleHandle module, const std::string& function, Dim3 grid, Dim3 block,
                      uint32_t shared_mem, const std::vector<LaunchArg>& args) = 0;
  virtual void synchronize(int dev) = 0;
  // Cross-stream ordering without a host wait (DLPack export to a consumer's stream): an event recorded on
  // the device's stream after all work launched so far (no timing), `stream` (a CUstream handle of
  // another library) made to wait for it on the device, and the event's release (the driver frees it once
  // it has completed).
  virtual EventHandle record_event(int dev) = 0;
  virtual void stream_wait_event(int dev, uint64_t stream, EventHandle event) = 0;
  virtual void destroy_event(int dev, EventHandle event) = 0;
  // A vendor BLAS product (cuBLAS on the driver) on the device's stream; false where there is none (the
  // emulator, or cuBLAS not installed): the caller then runs ember's own kernel.
  virtual bool gemm(int dev, const RowMajorGemm& g) { return (void)dev, (void)g, false; }
};

// The emulator (any OS): CUDA C++ compiled as C++ against cuda/cuda_emu.h, run on the CPU (cpp/emu/).
Adapter& emulator_adapter();

// The emulator adapter's calls since the process started, for tests (ember._C_testing): events recorded,
// stream waits, events destroyed, synchronizes.
struct EmulatorCounts {
  uint64_t records, waits, destroys, synchronizes;
};
EmulatorCounts emulator_counts();

// The driver through dlopen("libcuda.so.1") and NVRTC; nullptr with the reason in *why when either is
// missing or no device answers.
Adapter* nvidia_adapter(std::string* why);

// NVRTC (dlopen'd from `library`, found by Python in the nvidia-cuda-nvrtc package): PTX for `arch`
// ("sm_90"), and in *lowered the mangled name of each of `kernels`. Throws Error "[cuda] ..." with NVRTC's
// log on a compile error.
std::string nvrtc_ptx(const std::string& library, const std::string& source, const std::string& label,
                      const std::vector<std::string>& options, const std::string& arch,
                      const std::vector<std::string>& kernels = {}, std::vector<std::string>* lowered = nullptr);
// The library Python found (em.cuda sets it at first use of the driver path); "" when none.
void set_nvrtc_library(const std::string& path);
std::string nvrtc_library();
std::string nvrtc_version(const std::string& library);

}  // namespace ember::cuda
