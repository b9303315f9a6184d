// CudaDevice (adapter choice, memory stats, module cache, launch limits) and the CUDA DeviceBackend with its
// provider. Host copies, arange and the random fills go through the host until ember's own CUDA kernels
// exist: the values are the CPU backend's, bit for bit.
#include "cuda/device.h"

#include <cstdlib>
#include <cstring>

#include "cpu/cpu_backend.h"
#include "cuda/cuda_storage.h"
#include "error.h"

namespace ember::cuda {
namespace {

struct Choice {
  Adapter* adapter = nullptr;
  std::string why;
};

// Read at every call, as EMBER_METAL is: EMBER_CUDA=emulate (the emulator), unset (the driver, when one
// answers; probed once), anything else names no device.
Choice choice() {
  Choice r;
  const char* e = std::getenv("EMBER_CUDA");
  if (e && std::strcmp(e, "emulate") == 0) {
    r.adapter = &emulator_adapter();
  } else if (e && *e && std::strcmp(e, "0") != 0 && std::strcmp(e, "off") != 0) {
    r.why = cat_str("EMBER_CUDA=", e, " is not understood: set EMBER_CUDA=emulate for the emulator, or leave it "
                    "unset for a GPU");
  } else if (e && *e) {
    r.why = "EMBER_CUDA turns CUDA off";
  } else {
    static const Choice driver = [] {
      Choice d;
      d.adapter = nvidia_adapter(&d.why);
      if (!d.adapter) d.why += "; set EMBER_CUDA=emulate to use the CUDA emulator";
      return d;
    }();
    r = driver;
  }
  return r;
}

}  // namespace

const char* CudaDevice::backend_kind() {
  const Choice c = choice();
  return c.adapter ? c.adapter->kind() : nullptr;
}

int CudaDevice::count() {
  const Choice c = choice();
  return c.adapter ? c.adapter->device_count() : 0;
}

CudaDevice* CudaDevice::get(int index, std::string* why) {
  const Choice c = choice();
  if (!c.adapter) {
    if (why) *why = c.why;
    return nullptr;
  }
  static std::mutex mu;
  // Per adapter: a storage keeps its device (and adapter) even if EMBER_CUDA changes later.
  static std::map<std::pair<Adapter*, int>, CudaDevice*> devices;  // leaked: storages may outlive statics
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = devices.find({c.adapter, index}); it != devices.end()) return it->second;
  if (index < 0 || index >= c.adapter->device_count()) {
    if (why) *why = cat_str("this machine has ", c.adapter->device_count(), " CUDA device(s)");
    return nullptr;
  }
  return devices[{c.adapter, index}] = new CudaDevice(*c.adapter, index);
}

std::string CudaDevice::describe() const {
  return cat_str(device().str(), " (", adapter_->kind(), ", ", adapter_->device_name(index_), ", ",
                 adapter_->arch(index_), ")");
}

uint64_t CudaDevice::alloc(size_t bytes) {
  const uint64_t p = adapter_->alloc(index_, bytes);
  const size_t now = allocated_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
  return p;
}

void CudaDevice::free(uint64_t dptr, size_t bytes) {
  adapter_->free(index_, dptr);
  allocated_.fetch_sub(bytes);
}

MemoryStats CudaDevice::stats() const {
  MemoryStats s;
  s.allocated = allocated_.load();
  s.peak = peak_.load();
  return s;  // no caching allocator yet: nothing cached, no cache limit
}

void CudaDevice::reset_peak() { peak_.store(allocated_.load()); }

ModuleHandle CudaDevice::module(const std::string& source, const std::string& source_hash, const std::string& label,
                                const std::vector<std::string>& options, bool* compiled) {
  std::string key = source_hash + '\n' + adapter_->arch(index_);
  for (const std::string& o : options) key += '\n' + o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = modules_.find(key); it != modules_.end()) {
      *compiled = false;
      return it->second;
    }
  }
  // Compiled without the lock (seconds under the emulator); two threads may both compile a new key once.
  const ModuleHandle m = adapter_->load_module(index_, source, label, options);
  std::lock_guard<std::mutex> lock(mu_);
  *compiled = modules_.emplace(key, m).second;
  return m;
}

void CudaDevice::launch(ModuleHandle m, const std::string& function, Dim3 grid, Dim3 block, uint32_t shared_mem,
                        const std::vector<LaunchArg>& args) {
  const std::string kn = cat_str("[cuda] kernel '", function, "': ");
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  const uint32_t most = adapter_->max_threads_per_block(index_);
  EMBER_CHECK(block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
                  threads <= most,
              Value, kn, "block (", block.x, ", ", block.y, ", ", block.z, ") is not a CUDA block: each of x, y at most "
              "1024, z at most 64, at least 1, and at most ", most, " threads in all (it has ", threads, ")");
  EMBER_CHECK(grid.x <= 0x7fffffffu && grid.y <= 65535 && grid.z <= 65535, Value, kn, "grid (", grid.x, ", ", grid.y,
              ", ", grid.z, ") exceeds CUDA's limits (x < 2^31, y and z at most 65535)");
  const uint64_t smem = adapter_->max_shared_per_block(index_);
  EMBER_CHECK(shared_mem <= smem, Value, kn, "shared_mem=", shared_mem, " bytes of dynamic shared memory; a block may "
              "have ", smem, " in all");
  if ((uint64_t)grid.x * grid.y * grid.z == 0) return;  // an empty grid launches nothing (CUDA refuses it)
  adapter_->launch(index_, m, function, grid, block, shared_mem, args);
}

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(CudaDevice& dev) : dev_(dev) {}
  Device device() const override { return dev_.device(); }
  std::string describe() const override { return dev_.describe(); }
  bool supports(DType) const override { return true; }
  StoragePtr alloc(DType dt, int64_t numel, bool zeroed) override {
    auto s = std::make_shared<CudaStorage>(dev_, dt, numel);
    if (zeroed && s->nbytes()) {
      std::vector<char> z(s->nbytes(), 0);
      dev_.adapter().copy_to_device(dev_.ordinal(), s->dptr(), z.data(), z.size());
    }
    return s;
  }
  StoragePtr from_host(DType dt, int64_t numel, const void* src) override {
    auto s = std::make_shared<CudaStorage>(dev_, dt, numel);
    dev_.adapter().copy_to_device(dev_.ordinal(), s->dptr(), src, s->nbytes());
    return s;
  }
  void to_host(const BackendStorage& s, void* dst) override {
    const CudaStorage& c = as_cuda(s);
    dev_.adapter().copy_to_host(dev_.ordinal(), dst, c.dptr(), c.nbytes());
  }
  // Computed by the CPU backend and uploaded: the values (and the generator's draws) are the CPU's.
  StoragePtr arange(DType dt, double start, double step, int64_t n) override {
    return upload(*cpu::backend().arange(dt, start, step, n));
  }
  StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) override {
    return upload(*cpu::backend().rand_uniform(dt, n, lo, hi));
  }
  StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) override {
    return upload(*cpu::backend().rand_normal(dt, n, mean, std));
  }
  void synchronize() override { dev_.synchronize(); }
  MemoryStats memory_stats() const override { return dev_.stats(); }
  void reset_peak_memory() override { dev_.reset_peak(); }
  void empty_cache() override {}            // nothing is cached: frees go straight to the device
  void set_cache_limit(size_t) override {}  // likewise

 private:
  StoragePtr upload(const BackendStorage& host) {
    std::vector<char> buf((size_t)host.numel() * itemsize(host.dtype()));
    cpu::backend().to_host(host, buf.data());
    return from_host(host.dtype(), host.numel(), buf.data());
  }
  CudaDevice& dev_;
};

DeviceBackend* provide(int index) {
  CudaDevice* d = CudaDevice::get(index, nullptr);
  if (!d) return nullptr;
  static std::mutex mu;
  static std::map<CudaDevice*, CudaBackend*> backends;
  std::lock_guard<std::mutex> lock(mu);
  auto& b = backends[d];
  if (!b) b = new CudaBackend(*d);
  return b;
}

}  // namespace

void register_backend() { set_backend_provider(DeviceKind::Cuda, &provide); }

}  // namespace ember::cuda
