// GpuBackend: allocation from the device's pool, host copies through GpuDevice's host access, arange written
// by the host, rand / randn on metal/random.metal (the CPU's counter-based generator), synchronize and
// the pool's memory controls.
#include "gpu/gpu_backend.h"

#include <map>
#include <mutex>
#include <vector>

#include "gpu/gpu_storage.h"
#include "gpu/launch.h"

namespace ember::gpu {
namespace {

// The mantissa width (with the implicit bit) of a float dtype: the bits each uniform carries.
uint32_t mantissa_bits(DType dt) {
  return dt == DType::F16 ? 11 : dt == DType::BF16 ? 8 : dt == DType::F64 ? 53 : 24;
}

class GpuBackend final : public DeviceBackend {
 public:
  explicit GpuBackend(GpuDevice& dev) : dev_(dev) {}
  Device device() const override { return dev_.device(); }
  std::string describe() const override { return dev_.describe(); }
  bool supports(DType dt) const override { return dev_.holds(dt); }

  StoragePtr alloc(DType dt, int64_t numel, bool zeroed) override {
    auto s = dev_.new_storage(dt, numel, "alloc");
    // A buffer fresh from the pool is referenced by no encoded work that has not finished or is not
    // ordered before this write (GpuDevice::write_bytes).
    if (zeroed && s->nbytes()) s->zero(s->nbytes());
    return s;
  }
  StoragePtr from_host(DType dt, int64_t numel, const void* src) override {
    auto s = dev_.new_storage(dt, numel, "to_device");
    if (s->nbytes()) s->write(src, s->nbytes());
    return s;
  }
  void to_host(const BackendStorage& s, void* dst) override {
    const GpuStorage& g = as_gpu(s);
    dev_.synchronize();
    if (g.nbytes()) g.read(dst, g.nbytes());
  }
  StoragePtr arange(DType dt, double start, double step, int64_t n) override {
    // Computed by the host with the CPU's own conversions, so every value is the CPU's bit for bit (a
    // float kernel would round start + step * i differently).
    auto s = dev_.new_storage(dt, n, "arange");
    if (n == 0) return s;
    std::vector<char> host(s->nbytes());
    EMBER_DISPATCH(dt, {
      T* o = reinterpret_cast<T*>(host.data());
      for (int64_t i = 0; i < n; ++i) o[i] = convert<T, double>(start + step * (double)i);
    });
    s->write(host.data(), host.size());
    return s;
  }
  StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) override {
    const uint32_t count = checked_u32(n, "rand");
    dev_.check_dtype(dt, "rand");
    const char* t = type_suffix(dt, "rand");
    auto s = dev_.new_storage(dt, n, "rand");
    const RngDraw draw = rng_reserve((uint64_t)n + 1);  // as many as the CPU reserves
    // scale > 0 exactly when hi > lo: then results stay strictly below hi, as on the CPU.
    // (in double for the float64 kernels, whose float parameters are double)
    const float flo = (float)lo, scale = (float)(hi - lo), fhi = (float)hi;
    const DType ft = compute_dtype(dt);
    Launch(dev_, "random.metal", std::string("rand_uniform_") + t)
        .output(*s)
        .scalar(draw.seed)
        .scalar(draw.counter)
        .scalar_of(ft, flo, lo)
        .scalar_of(ft, scale, hi - lo)
        .scalar_of(ft, fhi, hi)
        .scalar(mantissa_bits(dt))
        .scalar(count)
        .dispatch_1d(count);
    return s;
  }
  StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) override {
    const uint32_t count = checked_u32(n, "randn");
    dev_.check_dtype(dt, "randn");
    const char* t = type_suffix(dt, "randn");
    auto s = dev_.new_storage(dt, n, "randn");
    const RngDraw draw = rng_reserve((uint64_t)n + 1);
    Launch(dev_, "random.metal", std::string("rand_normal_") + t)
        .output(*s)
        .scalar(draw.seed)
        .scalar(draw.counter)
        .scalar_of(compute_dtype(dt), (float)mean, mean)
        .scalar_of(compute_dtype(dt), (float)std, std)
        .scalar(count)
        .dispatch_1d(count);
    return s;
  }
  void synchronize() override { dev_.synchronize(); }
  MemoryStats memory_stats() const override { return dev_.memory_stats(); }
  void reset_peak_memory() override { dev_.reset_peak_memory(); }
  void empty_cache() override { dev_.empty_cache(); }
  void set_cache_limit(size_t bytes) override { dev_.set_cache_limit(bytes); }

 private:
  GpuDevice& dev_;
};

}  // namespace

DeviceBackend* backend_of(GpuDevice& dev) {
  // One backend per device object (an emulated and a real device may both exist when the environment
  // changes during a run); leaked like the devices.
  static std::mutex mu;
  static std::map<GpuDevice*, GpuBackend*> backends;
  std::lock_guard<std::mutex> lock(mu);
  GpuBackend*& b = backends[&dev];
  if (!b) b = new GpuBackend(dev);
  return b;
}

}  // namespace ember::gpu
