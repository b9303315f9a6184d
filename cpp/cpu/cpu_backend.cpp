// CpuBackend: the CPU's DeviceBackend over the caching allocator, the thread pool and cpu/random.
#include "cpu/cpu_backend.h"
#include "cpu/host_api.h"

#include <cstring>

#include "cpu/allocator.h"
#include "cpu/cpu_storage.h"
#include "cpu/dispatch.h"
#include "cpu/packed_gemm.h"
#include "cpu/parallel.h"
#include "cpu/random.h"

namespace ember::cpu {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  Device device() const override { return Device{DeviceKind::Cpu, 0}; }
  std::string describe() const override {
    return cat_str("cpu (", isa_name(active_isa()), ", ", get_num_threads(), " threads)");
  }
  bool supports(DType) const override { return true; }
  StoragePtr alloc(DType dt, int64_t numel, bool zeroed) override { return new_cpu(dt, numel, zeroed); }
  StoragePtr from_host(DType dt, int64_t numel, const void* src) override {
    auto s = new_cpu(dt, numel);
    if (s->nbytes()) std::memcpy(s->raw(), src, s->nbytes());
    return s;
  }
  void to_host(const BackendStorage& s, void* dst) override {
    const CpuStorage& c = as_cpu(s);
    if (c.nbytes()) std::memcpy(dst, c.raw(), c.nbytes());
  }
  StoragePtr arange(DType dt, double start, double step, int64_t n) override {
    return cpu::arange(dt, start, step, n);
  }
  StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) override {
    return cpu::rand_uniform(dt, n, lo, hi);
  }
  StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) override {
    return cpu::rand_normal(dt, n, mean, std);
  }
  void synchronize() override {}  // every CPU kernel has finished when it returns
  MemoryStats memory_stats() const override { return cpu::memory_stats(); }
  void reset_peak_memory() override { cpu::reset_peak_memory(); }
  void empty_cache() override { cpu::empty_cache(); }
  void set_cache_limit(size_t bytes) override { cpu::set_cache_limit(bytes); }
};

}  // namespace

std::string isa() { return isa_name(active_isa()); }
bool has_amx() { return amx_gemm() != nullptr; }

DeviceBackend& backend() {
  static CpuBackend* b = new CpuBackend;  // leaked: storages freed at exit may still reach it
  return *b;
}

}  // namespace ember::cpu
