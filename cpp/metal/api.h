// The Metal backend's public surface: what em.metal and em.metal.Kernel call (device controls, counters,
// user kernels). The bindings of the user's extension reach Metal only through this header and the storage
// seam; the device, the adapter, Launch and the policy classes stay internal.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "gpu/gpu_storage.h"
#include "gpu/types.h"
#include "user_kernel.h"

namespace ember::gpu {
struct KernelSource;  // gpu/gpu_device.h
}  // namespace ember::gpu

namespace ember::metal {

using gpu::FunctionConstant;
using gpu::KernelSource;

// Registers the Metal device with the seam (device_backend) once; called at import.
void register_backend();
// "emulator", "apple" or nullptr: what metal:0 runs on, without creating the device.
const char* backend_kind();
// Each takes the device index and raises DeviceError ("[op] device metal:i is not available (why)").
std::string describe(int index);
void synchronize(int index);
void empty_cache(int index);
void set_cache_limit(size_t bytes, int index);
void set_memory_limit(size_t bytes, int index);
void reset_peak_memory(int index);
// The pool's and the encoder's counters, by name, in a fixed order: em.memory_stats's four names first
// (allocated_bytes, cached_bytes, peak_allocated_bytes, cache_limit_bytes), the same on every device.
std::vector<std::pair<std::string, uint64_t>> stats(int index);
// A new storage of n elements from the device's pool (contents unspecified).
StoragePtr empty(int index, DType dt, int64_t n);

// What the bindings see of a Metal storage (Python's em.MetalStorage): a GPU storage (byte_offset, nbytes);
// the storage class itself (metal_storage.h, MetalStorage) derives from it and stays internal. Every storage
// on a Metal device is one.
class MetalStorageView : public gpu::GpuStorage {
 public:
  using gpu::GpuStorage::GpuStorage;
};

// A user's kernel: its source (hashed once), function and constants. Nothing compiles until a dispatch.
struct UserKernel {
  std::shared_ptr<const KernelSource> source;
  std::string name;
  std::vector<FunctionConstant> constants;
  std::string key;  // source hash, name and constants: what user_kernel_cache_info() counts
};
std::shared_ptr<UserKernel> new_user_kernel(const std::string& source, const std::string& name,
                                            const std::string& label, std::vector<FunctionConstant> constants);
const std::string& source_hash(const UserKernel& k);
// The one dispatcher of user kernels: binds args[i] to [[buffer(i)]] on the first storage's device (its
// pipeline cache, hazard tracker and shared encoder), checks the group against the device's and the
// pipeline's limits, and encodes one dispatch of `grid` threads. Messages start with `[who]`.
void dispatch_user_kernel(const UserKernel& k, const std::vector<KernelArg>& args, const std::array<uint32_t, 3>& grid,
                          const std::array<uint32_t, 3>& group, const char* who);
// Per device index: (distinct (source, function, constants) compiled, dispatches that found theirs compiled).
std::map<int, std::pair<uint64_t, uint64_t>> user_kernel_cache_info();

}  // namespace ember::metal
