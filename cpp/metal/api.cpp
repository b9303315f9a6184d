// The Metal backend's public surface (api.h) over MetalDevice, MetalStorage and Launch, including the one
// dispatcher of user kernels.
#include "metal/api.h"

#include <mutex>
#include <set>

#include "gpu/launch.h"
#include "metal/device.h"
#include "metal/emu/compiler.h"
#include "metal/metal_storage.h"

namespace ember::metal {

using gpu::Launch;

namespace {

MetalDevice& device_at(int index, const char* op) {
  std::string why;
  MetalDevice* d = MetalDevice::get(index, &why);
  EMBER_CHECK(d != nullptr, Device, "[", op, "] device metal:", index, " is not available (", why, ")");
  return *d;
}

}  // namespace

const char* backend_kind() { return MetalDevice::backend_kind(); }
std::string describe(int index) { return device_at(index, "metal").describe(); }
void synchronize(int index) { device_at(index, "synchronize").synchronize(); }
void empty_cache(int index) { device_at(index, "empty_cache").empty_cache(); }
void set_cache_limit(size_t bytes, int index) { device_at(index, "set_cache_limit").set_cache_limit(bytes); }
void set_memory_limit(size_t bytes, int index) { device_at(index, "set_memory_limit").set_memory_limit(bytes); }
void reset_peak_memory(int index) { device_at(index, "reset_peak_memory").reset_peak_memory(); }

std::vector<std::pair<std::string, uint64_t>> stats(int index) {
  const DeviceStats s = device_at(index, "memory_stats").stats();
  return {{"allocated_bytes", s.active_bytes},
          {"cached_bytes", s.cached_bytes},
          {"peak_allocated_bytes", s.peak_bytes},
          {"cache_limit_bytes", s.cache_limit},
          {"memory_limit_bytes", s.memory_limit},
          {"cached_buffers", s.cached_buffers},
          {"pool_hits", s.pool_hits},
          {"pool_misses", s.pool_misses},
          {"dispatches", s.dispatches},
          {"barriers", s.barriers},
          {"fence_waits", s.fence_waits},
          {"commits", s.commits},
          {"pipelines", s.pipelines},
          {"pipeline_compiles", s.pipeline_compiles},
          {"library_compiles", s.library_compiles}};
}

StoragePtr empty(int index, DType dt, int64_t n) { return new_metal(device_at(index, "empty"), dt, n, "empty"); }

// ---------------------------------------------------------------------------------------------- user kernels
namespace {

// What user_kernel_cache_info() reports per device. The device's pipeline cache keeps every pipeline for
// the life of the process, so the first dispatch of a key is its one compile.
struct Counts {
  std::set<std::string> keys;
  uint64_t compiles = 0, hits = 0;
};
std::mutex g_mu;
std::map<int, Counts> g_counts;

const char* type_name(FunctionConstant::Type t) {
  switch (t) {
    case FunctionConstant::Type::Bool: return "bool";
    case FunctionConstant::Type::Int: return "int";
    case FunctionConstant::Type::UInt: return "uint";
    case FunctionConstant::Type::Float: return "float";
  }
  return "?";
}

}  // namespace

std::shared_ptr<UserKernel> new_user_kernel(const std::string& source, const std::string& name,
                                            const std::string& label, std::vector<FunctionConstant> constants) {
  auto k = std::make_shared<UserKernel>();
  k->source = std::make_shared<const KernelSource>(source, label, emu::digest(source));
  k->name = name;
  k->constants = std::move(constants);
  k->key = k->source->hash + "\n" + name + "\n";
  for (const auto& c : k->constants) k->key += cat_str(c.index, ":", type_name(c.type), ":", c.value, ";");
  return k;
}

const std::string& source_hash(const UserKernel& k) { return k.source->hash; }

void dispatch_user_kernel(const UserKernel& k, const std::vector<KernelArg>& args, const std::array<uint32_t, 3>& grid,
                          const std::array<uint32_t, 3>& group, const char* who) {
  EMBER_CHECK(args.size() <= 31, Value, "[", who, "] ", k.name, ": more than 31 buffer bindings");
  const KernelArg* first = nullptr;
  for (const KernelArg& a : args) {
    if (a.role == KernelArg::Role::Bytes || a.role == KernelArg::Role::Skip) continue;
    EMBER_CHECK(a.storage != nullptr, Type, "[", who, "] ", a.what, " is None");
    EMBER_CHECK(a.storage->device().kind == DeviceKind::Metal, Device, "[", who, "] ", a.what, " is a storage on ",
                a.storage->device().str(), ", expected a MetalStorage");
    if (!first) first = &a;
  }
  EMBER_CHECK(first != nullptr, Value, "[", who, "] ", k.name,
              ": give at least one input or output storage (it names the device)");
  MetalDevice& dev = as_metal(*first->storage).metal_device();
  for (const KernelArg& a : args)
    if (a.storage && a.role != KernelArg::Role::Bytes && a.role != KernelArg::Role::Skip)
      EMBER_CHECK(&as_metal(*a.storage).metal_device() == &dev, Device, "[", who, "] ", a.what, " is on ",
                  a.storage->device().str(), ", another device than the first storage's");
  const uint64_t threads = (uint64_t)group[0] * group[1] * group[2];
  const uint32_t device_limit = dev.adapter().max_threads_per_threadgroup();
  EMBER_CHECK(threads >= 1 && threads <= device_limit, Value, "[", who, "] ", k.name, ": threads_per_threadgroup (",
              group[0], ", ", group[1], ", ", group[2], ") holds ", threads, " threads; this device allows 1 to ",
              device_limit);
  Launch launch(dev, *k.source, k.name);
  for (const auto& c : k.constants) {
    switch (c.type) {
      case FunctionConstant::Type::Bool: launch.constant(c.index, c.value != 0); break;
      case FunctionConstant::Type::Int: launch.constant(c.index, (int32_t)c.value); break;
      case FunctionConstant::Type::UInt: launch.constant(c.index, (uint32_t)c.value); break;
      case FunctionConstant::Type::Float: launch.constant(c.index, (float)c.value); break;
    }
  }
  // The pipeline may allow fewer threads than the device (register use): its own limit decides.
  const uint32_t limit = launch.max_threads();
  EMBER_CHECK(threads <= limit, Value, "[", who, "] ", k.name, ": threads_per_threadgroup (", group[0], ", ", group[1],
              ", ", group[2], ") holds ", threads, " threads; this kernel's pipeline allows at most ", limit);
  for (const KernelArg& a : args) {
    switch (a.role) {
      case KernelArg::Role::In: launch.input(as_metal(*a.storage)); break;
      case KernelArg::Role::Out: launch.output(as_metal(*a.storage)); break;
      case KernelArg::Role::InOut: launch.inout(as_metal(*a.storage)); break;
      case KernelArg::Role::Bytes: launch.bytes(a.bytes.data(), a.bytes.size()); break;
      case KernelArg::Role::Skip: launch.skip(); break;
    }
  }
  bump_written(args);
  launch.dispatch({grid[0], grid[1], grid[2]}, {group[0], group[1], group[2]});
  bump_written(args);
  // Counted once the dispatch is encoded: a compile error leaves nothing cached.
  std::lock_guard<std::mutex> lock(g_mu);
  Counts& c = g_counts[dev.device().index];
  if (c.keys.insert(k.key).second) ++c.compiles;
  else ++c.hits;
}

std::map<int, std::pair<uint64_t, uint64_t>> user_kernel_cache_info() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::map<int, std::pair<uint64_t, uint64_t>> out;
  for (const auto& [index, c] : g_counts) out[index] = {c.compiles, c.hits};
  return out;
}

}  // namespace ember::metal
