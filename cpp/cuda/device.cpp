// CudaDevice: the adapter choice, the GPU layer's queue over the adapter's stream (the pool, ember's translated
// kernels by (source, constants), launches per cuda/kernels.h's contract), em.cuda.Kernel's module cache and
// CUDA's launch limits; the provider of the CUDA DeviceBackend (the GPU layer's).
#include "cuda/device.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "cuda/cuda_storage.h"
#include "error.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_storage.h"
#include "sha256.h"

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

namespace {

// Allocations are handed out in 16-byte multiples (as Metal's) so any kernel's 4-wide access of the tail stays
// inside what the pool gave; the kernels' own extents are the storages', checked by the emulator.
constexpr size_t kAlign = 16;

// The pool's memory limit: the device's memory (the emulator reports none: host memory, effectively unbounded).
size_t memory_limit_of(Adapter& a, int index) {
  const uint64_t total = a.total_memory(index);
  return total ? (size_t)total : SIZE_MAX / 4;
}

}  // namespace

CudaDevice::CudaDevice(Adapter& a, int index)
    : adapter_(&a),
      index_(index),
      pool_([this](size_t n) { return adapter_->alloc(index_, n); }, [this](uint64_t p) { adapter_->free(index_, p); },
            memory_limit_of(a, index), memory_limit_of(a, index), 16384, "cuda") {}

std::string CudaDevice::describe() const {
  return cat_str(device().str(), " (", adapter_->kind(), ", ", adapter_->device_name(index_), ", ",
                 adapter_->arch(index_), ")");
}

void CudaDevice::check_dtype(DType dt, const char* op) const {
  EMBER_CHECK(holds(dt), DType, "[", op, "] ", dtype_name(dt), " is not supported on cuda");
}

std::shared_ptr<gpu::GpuStorage> CudaDevice::new_storage(DType dt, int64_t numel, const char* op) {
  return std::make_shared<CudaStorage>(*this, dt, numel, op);
}

gpu::BufferRef CudaDevice::alloc(size_t bytes) {
  const size_t want = std::max<size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  size_t got = 0;
  const uint64_t p = pool_.alloc(want, &got);
  try {
    return std::make_shared<gpu::Buffer>(this, (void*)(uintptr_t)p, got);
  } catch (...) {
    pool_.free(p, got);
    throw;
  }
}

void CudaDevice::write_bytes(const gpu::Buffer& b, size_t offset, const void* src, size_t n) {
  if (n) adapter_->copy_to_device(index_, dptr(b) + offset, src, n);
}

void CudaDevice::zero_bytes(const gpu::Buffer& b, size_t offset, size_t n) {
  if (!n) return;
  const std::vector<char> z(n, 0);
  adapter_->copy_to_device(index_, dptr(b) + offset, z.data(), n);
}

void CudaDevice::read_bytes(const gpu::Buffer& b, size_t offset, void* dst, size_t n) {
  if (n) adapter_->copy_to_host(index_, dst, dptr(b) + offset, n);
}

MemoryStats CudaDevice::memory_stats() const {
  const auto p = pool_.stats();
  MemoryStats m;
  m.allocated = p.active_bytes;
  m.cached = p.cached_bytes;
  m.peak = p.peak_bytes;
  m.cache_limit = p.cache_limit;
  return m;
}

CudaDevice::PoolCounters CudaDevice::pool_counters() const {
  const auto p = pool_.stats();
  return {p.cached_buffers, p.hits, p.misses, p.memory_limit};
}

const gpu::KernelSource& CudaDevice::add_source(const TranslatedSource& t) {
  const std::string hash = sha256_hex(t.text);
  std::lock_guard<std::mutex> lock(src_mu_);
  Source& s = sources_[hash];
  if (!s.src) {
    s.src = std::make_unique<gpu::KernelSource>(t.text, t.label, hash);
    s.kernels = t.kernels;
  }
  return *s.src;
}

const gpu::KernelSource& CudaDevice::source(const std::string& file) { return file_source(file, false); }

const gpu::KernelSource& CudaDevice::file_source(const std::string& file, bool f64) {
  {
    std::lock_guard<std::mutex> lock(src_mu_);
    if (auto it = files_.find({file, f64}); it != files_.end()) return *it->second;
  }
  const gpu::KernelSource& s = add_source(translated_source(file, f64));  // cached by the translator, per process
  std::lock_guard<std::mutex> lock(src_mu_);
  sources_[s.hash].file = file;
  files_[{file, f64}] = &s;
  return s;
}

gpu::KernelHandle CudaDevice::kernel(const gpu::KernelSource& src, const std::string& function,
                                     const std::vector<gpu::FunctionConstant>& constants) {
  std::vector<std::string> options;
  std::string key;
  for (const auto& c : constants) {
    options.push_back(cat_str("-DMSL_FC_", c.index, "=", gpu::constant_literal(c)));
    key += options.back() + ';';
  }
  // A float64 kernel of an embedded file lives in the file's float64 variant (translated on first use).
  std::string variant_of;
  if (function.find("float64") != std::string::npos) {
    std::lock_guard<std::mutex> lock(src_mu_);
    auto it = sources_.find(src.hash);
    if (it != sources_.end() && !it->second.file.empty() && !it->second.kernels.count(function) &&
        files_.count({it->second.file, false}) && &src == files_.at({it->second.file, false}))
      variant_of = it->second.file;
  }
  if (!variant_of.empty()) return kernel(file_source(variant_of, true), function, constants);
  Kernel* k = kernels_.get({src.hash, function, key}, [&] {
    KernelSig sig;
    {
      std::lock_guard<std::mutex> lock(src_mu_);
      auto it = sources_.find(src.hash);
      EMBER_CHECK(it != sources_.end(), Value, "[cuda] ", src.label, " is not a source this device translated");
      auto kt = it->second.kernels.find(function);
      if (kt == it->second.kernels.end()) {
        std::string have;
        for (const auto& [name, _] : it->second.kernels) have += (have.empty() ? "" : ", ") + name;
        throw Error(ErrorKind::Value, cat_str("[cuda] ", src.label, " defines no kernel '", function,
                                              "' (it defines: ", have.empty() ? "none" : have, ")"));
      }
      sig = kt->second;
    }
    bool compiled = false;
    auto made = std::make_unique<Kernel>();
    made->module = module(src.text, src.hash, src.label, options, &compiled);
    made->function = function;
    made->sig = std::move(sig);
    // Whole warps, as Metal's pipelines report theirs: launchers size groups in simdgroups.
    made->max_threads =
        std::max<uint32_t>(32, std::min<uint32_t>(adapter_->max_threads(index_, made->module, function), 1024) / 32 * 32);
    std::lock_guard<std::mutex> lock(store_mu_);
    kernel_store_.push_back(std::move(made));
    return kernel_store_.back().get();
  });
  return gpu::KernelHandle{k};
}

uint32_t CudaDevice::max_threads(gpu::KernelHandle k) const { return static_cast<const Kernel*>(k.p)->max_threads; }

void CudaDevice::encode(gpu::DispatchDesc&& d) {
  const Kernel& k = *static_cast<const Kernel*>(d.kernel.p);
  const std::string kn = cat_str("[cuda] ", d.function, ": ");
  std::vector<LaunchArg> args;
  // Bytes bound to a pointer parameter live in device memory for the launch. They go back to the pool when
  // this returns: the launch is on the stream, and any later use of that memory is ordered after it.
  std::vector<gpu::BufferRef> uploads;
  const std::string& bufs = k.sig.buffers;
  for (size_t n = 0; n < bufs.size(); ++n) {
    if (bufs[n] == '-') continue;
    const gpu::DispatchDesc::Arg* a = n < d.args.size() ? &d.args[n] : nullptr;
    const auto kind = a ? a->kind : gpu::DispatchDesc::Arg::Kind::Unbound;
    LaunchArg la;
    if (bufs[n] == 'v') {
      const uint32_t want = n < k.sig.value_size.size() ? k.sig.value_size[n] : 0;
      EMBER_CHECK(kind == gpu::DispatchDesc::Arg::Kind::Bytes, Value, kn, "buffer(", n, ") is a value parameter of ",
                  want, " bytes; the launcher bound ", kind == gpu::DispatchDesc::Arg::Kind::Buffer ? "a storage" : "nothing");
      EMBER_CHECK(a->bytes.size() == want, Value, kn, "buffer(", n, ") takes ", want, " bytes by value; the launcher "
                  "bound ", a->bytes.size());
      la.bytes = a->bytes;
    } else if (kind == gpu::DispatchDesc::Arg::Kind::Buffer) {
      la.pointer = true;
      la.dptr = dptr(*a->buffer) + a->offset;
      la.extent = a->length;
    } else if (kind == gpu::DispatchDesc::Arg::Kind::Bytes) {
      gpu::BufferRef up = alloc(a->bytes.size());
      write_bytes(*up, 0, a->bytes.data(), a->bytes.size());
      la.pointer = true;
      la.dptr = dptr(*up);
      la.extent = a->bytes.size();
      uploads.push_back(std::move(up));
    } else {
      la.pointer = true;  // unbound: a null pointer the kernel must not touch (the emulator checks it)
    }
    args.push_back(std::move(la));
  }
  // Threadgroup memory: one offset per [[threadgroup(i)]] parameter, each 16-byte aligned, in one block.
  uint64_t shared = 0;
  for (uint32_t index : k.sig.threadgroup) {
    size_t bytes = 0;
    for (const auto& [i, n] : d.threadgroup_memory)
      if (i == index) bytes = n;
    shared = (shared + 15) / 16 * 16;
    LaunchArg la;
    const uint32_t off = (uint32_t)shared;
    la.bytes.assign(reinterpret_cast<const char*>(&off), sizeof off);
    args.push_back(std::move(la));
    shared += bytes;
  }
  EMBER_CHECK(shared <= UINT32_MAX, Value, kn, shared, " bytes of threadgroup memory");
  auto push_u32 = [&](uint32_t v) {
    LaunchArg la;
    la.bytes.assign(reinterpret_cast<const char*>(&v), sizeof v);
    args.push_back(std::move(la));
  };
  for (uint32_t g : {d.grid.x, d.grid.y, d.grid.z}) push_u32(g);
  const size_t off_at = args.size();
  for (int i = 0; i < 3; ++i) push_u32(0);  // em_off_*, set per launch below
  for (uint32_t s : {d.group.x, d.group.y, d.group.z}) push_u32(s);
  // Metal's partial edge groups: per axis the whole groups, then (when the grid is not a multiple of the group)
  // one edge group of the rest; one launch per combination, so an edge group is a block of its real size.
  struct Part {
    uint32_t first, count, size;
  };
  auto parts = [](uint32_t grid, uint32_t group) {
    std::vector<Part> p;
    if (grid / group) p.push_back({0, grid / group, group});
    if (grid % group) p.push_back({grid / group, 1, grid % group});
    return p;
  };
  EMBER_CHECK(d.group.x && d.group.y && d.group.z, Value, kn, "a threadgroup of zero threads");
  for (const Part& px : parts(d.grid.x, d.group.x))
    for (const Part& py : parts(d.grid.y, d.group.y))
      for (const Part& pz : parts(d.grid.z, d.group.z)) {
        const uint32_t off[3] = {px.first, py.first, pz.first};
        for (int i = 0; i < 3; ++i) args[off_at + i].bytes.assign(reinterpret_cast<const char*>(&off[i]), 4);
        launch(k.module, k.function, {px.count, py.count, pz.count}, {px.size, py.size, pz.size}, (uint32_t)shared,
               args);
      }
}

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

DeviceBackend* provide(int index) {
  CudaDevice* d = CudaDevice::get(index, nullptr);
  return d ? gpu::backend_of(*d) : nullptr;
}

}  // namespace

void register_backend() {
  set_backend_provider(DeviceKind::Cuda, &provide);
  gpu::register_kernels(DeviceKind::Cuda);
}

}  // namespace ember::cuda
