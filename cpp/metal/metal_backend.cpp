// The Metal DeviceBackend: allocation from the pool, host copies through the shared buffers' contents,
// arange and the random fills (metal/random.metal), synchronize and memory stats; its provider.
#include <cstring>
#include <map>
#include <mutex>

#include "../device.h"  // the device registry (a quoted "device.h" here would find metal/device.h)
#include "gpu/gpu_storage.h"
#include "gpu/launch.h"
#include "metal/device.h"
#include "metal/metal_storage.h"

namespace ember::metal {
namespace {

using gpu::checked_u32;
using gpu::Launch;
using gpu::type_suffix;

// The mantissa width (with the implicit bit) of a float dtype: the bits each uniform carries.
uint32_t mantissa_bits(DType dt) { return dt == DType::F16 ? 11 : dt == DType::BF16 ? 8 : 24; }

class MetalBackend final : public DeviceBackend {
 public:
  explicit MetalBackend(MetalDevice& dev) : dev_(dev) {}
  Device device() const override { return dev_.device(); }
  std::string describe() const override { return dev_.describe(); }
  bool supports(DType dt) const override { return dt != DType::F64; }

  StoragePtr alloc(DType dt, int64_t numel, bool zeroed) override {
    auto s = new_metal(dev_, dt, numel, "alloc");
    // A buffer fresh from the pool is referenced by no encoded work (in-flight command buffers hold
    // theirs until they complete), so the CPU may write its shared memory directly.
    if (zeroed && s->nbytes()) std::memset(s->host_ptr(), 0, s->nbytes());
    return s;
  }
  StoragePtr from_host(DType dt, int64_t numel, const void* src) override {
    auto s = new_metal(dev_, dt, numel, "to_device");
    if (s->nbytes()) std::memcpy(s->host_ptr(), src, s->nbytes());
    return s;
  }
  void to_host(const BackendStorage& s, void* dst) override {
    const MetalStorage& m = as_metal(s);
    dev_.synchronize();
    if (m.nbytes()) std::memcpy(dst, m.host_ptr(), m.nbytes());
  }
  StoragePtr arange(DType dt, double start, double step, int64_t n) override {
    // Written by the CPU into the fresh shared buffer with the CPU's own conversions, so every value
    // is the CPU's bit for bit (a float kernel would round start + step * i differently).
    auto s = new_metal(dev_, dt, n, "arange");
    EMBER_DISPATCH(dt, {
      T* o = static_cast<T*>(s->host_ptr());
      for (int64_t i = 0; i < n; ++i) o[i] = convert<T, double>(start + step * (double)i);
    });
    return s;
  }
  StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) override {
    const uint32_t count = checked_u32(n, "rand");
    const char* t = type_suffix(dt, "rand");
    auto s = new_metal(dev_, dt, n, "rand");
    const RngDraw draw = rng_reserve((uint64_t)n + 1);  // as many as the CPU reserves
    // scale > 0 exactly when hi > lo: then results stay strictly below hi, as on the CPU.
    const float flo = (float)lo, scale = (float)(hi - lo), fhi = (float)hi;
    Launch(dev_, "random.metal", std::string("rand_uniform_") + t)
        .output(*s)
        .scalar(draw.seed)
        .scalar(draw.counter)
        .scalar(flo)
        .scalar(scale)
        .scalar(fhi)
        .scalar(mantissa_bits(dt))
        .scalar(count)
        .dispatch_1d(count);
    return s;
  }
  StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) override {
    const uint32_t count = checked_u32(n, "randn");
    const char* t = type_suffix(dt, "randn");
    auto s = new_metal(dev_, dt, n, "randn");
    const RngDraw draw = rng_reserve((uint64_t)n + 1);
    Launch(dev_, "random.metal", std::string("rand_normal_") + t)
        .output(*s)
        .scalar(draw.seed)
        .scalar(draw.counter)
        .scalar((float)mean)
        .scalar((float)std)
        .scalar(count)
        .dispatch_1d(count);
    return s;
  }
  void synchronize() override { dev_.synchronize(); }
  MemoryStats memory_stats() const override {
    const DeviceStats st = dev_.stats();
    MemoryStats m;
    m.allocated = st.active_bytes;
    m.cached = st.cached_bytes;
    m.peak = st.peak_bytes;
    m.cache_limit = st.cache_limit;
    return m;
  }
  void reset_peak_memory() override { dev_.reset_peak_memory(); }
  void empty_cache() override { dev_.empty_cache(); }
  void set_cache_limit(size_t bytes) override { dev_.set_cache_limit(bytes); }

 private:
  MetalDevice& dev_;
};

DeviceBackend* provider(int index) {
  MetalDevice* dev = MetalDevice::get(index);
  if (!dev) return nullptr;
  // One backend per device object (the emulator's and Apple's may both exist when EMBER_METAL changes
  // during a run); leaked like the devices.
  static std::mutex mu;
  static std::map<MetalDevice*, MetalBackend*> backends;
  std::lock_guard<std::mutex> lock(mu);
  MetalBackend*& b = backends[dev];
  if (!b) b = new MetalBackend(*dev);
  return b;
}

}  // namespace

void register_backend() {
  set_backend_provider(DeviceKind::Metal, &provider);
  gpu::register_kernels(DeviceKind::Metal);
}

}  // namespace ember::metal
