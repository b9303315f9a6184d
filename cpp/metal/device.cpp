// MetalDevice: device selection, the pool, pipelines, and the shared encoder's dispatch / commit / wait.
#include "metal/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "metal/embedded.h"
#include "metal/emu/compiler.h"
#include "metal/metal_storage.h"

namespace ember::metal {

namespace {

bool emulate_requested() {
  const char* e = std::getenv("EMBER_METAL");
  if (!e) return false;
  std::string v(e);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
  size_t b = v.find_first_not_of(" \t");
  v = b == std::string::npos ? "" : v.substr(b);
  for (char& c : v) c = (char)std::tolower((unsigned char)c);
  return v == "emulate";
}

// Buffers are handed out in 16-byte multiples so that any kernel's 4-wide (or float4) access of the
// tail stays inside the buffer the pool gave.
constexpr size_t kAlign = 16;

}  // namespace

const char* MetalDevice::backend_kind() {
  if (emulate_requested()) return "emulator";
#if defined(EMBER_HAS_METAL_CPP)
  try {
    apple_adapter();
    return "apple";
  } catch (const Error&) {
    return nullptr;
  }
#else
  return nullptr;
#endif
}

MetalDevice* MetalDevice::get(int index, std::string* why) {
  auto none = [&](const std::string& s) -> MetalDevice* {
    if (why) *why = s;
    return nullptr;
  };
  if (index != 0) return none("ember drives one Metal device, metal:0");
  // EMBER_METAL is read at every call, so availability follows the environment; each device is
  // created once and lives for the process (storages on it may outlive any caller).
  if (emulate_requested()) {
    static MetalDevice* emu = new MetalDevice(emulator_adapter(), 0);
    return emu;
  }
#if defined(EMBER_HAS_METAL_CPP)
  static std::once_flag once;
  static MetalDevice* apple = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    try {
      apple = new MetalDevice(apple_adapter(), 0);
    } catch (const Error& e) {
      reason = e.what();
    }
  });
  return apple ? apple : none(reason);
#else
  return none("this build has no Metal backend (set EMBER_METAL=emulate for the MSL emulator)");
#endif
}

MetalDevice::MetalDevice(Adapter& adapter, int index)
    : adapter_(adapter),
      index_(index),
      // Limits as MLX's: the pool may hold 1.5x the recommended working set; the cache as much.
      pool_([this](size_t n) { return adapter_.new_buffer(n); }, [this](BufferHandle h) { adapter_.release(h); },
            adapter.recommended_working_set_size() / 2 * 3, adapter.recommended_working_set_size() / 2 * 3, 16384, "metal"),
      policy_(policy::CommitPolicy::from_env()) {}

MetalDevice::~MetalDevice() {
  try {
    synchronize();
  } catch (...) {
  }
  pipelines_.clear([this](PipelineHandle p) { adapter_.release(p); });
  libraries_.clear([this](LibraryHandle l) { adapter_.release(l); });
}

std::string MetalDevice::describe() const {
  return cat_str(device().str(), " (", adapter_.kind(), ", ", adapter_.device_name(), ")");
}

void MetalDevice::check_dtype(DType dt, const char* op) const {
  EMBER_CHECK(holds(dt), DType, "[", op, "] float64 is not supported on metal (Metal has no 64-bit float)");
}

std::shared_ptr<gpu::GpuStorage> MetalDevice::new_storage(DType dt, int64_t numel, const char* op) {
  return std::make_shared<MetalStorage>(*this, dt, numel, op);
}

void MetalDevice::write_bytes(const Buffer& b, size_t offset, const void* src, size_t n) {
  if (n) std::memcpy(static_cast<char*>(contents(b)) + offset, src, n);
}
void MetalDevice::zero_bytes(const Buffer& b, size_t offset, size_t n) {
  if (n) std::memset(static_cast<char*>(contents(b)) + offset, 0, n);
}
void MetalDevice::read_bytes(const Buffer& b, size_t offset, void* dst, size_t n) {
  if (n) std::memcpy(dst, static_cast<const char*>(contents(b)) + offset, n);
}

BufferRef MetalDevice::alloc(size_t bytes) {
  const size_t want = std::max<size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  size_t got = 0;
  BufferHandle h = pool_.alloc(want, &got);
  try {
    return std::make_shared<Buffer>(this, h.p, got);
  } catch (...) {
    pool_.free(h, got);
    throw;
  }
}

const KernelSource& MetalDevice::source(const std::string& file) {
  std::lock_guard<std::mutex> lock(src_mu_);
  auto& slot = sources_[file];
  if (!slot) {
    const char* text = embedded_source(file.c_str());
    if (!text) {
      sources_.erase(file);
      throw Error(ErrorKind::Value, "[metal] no embedded kernel source '" + file + "'");
    }
    slot = std::make_unique<KernelSource>(text, file, emu::digest(text));
  }
  return *slot;
}

PipelineHandle MetalDevice::pipeline(const KernelSource& src, const std::string& function,
                                     const std::vector<FunctionConstant>& constants) {
  std::string key;
  for (const auto& c : constants) key += cat_str(c.index, ":", (int)c.type, ":", c.value, ";");
  return pipelines_.get({src.hash, function, key}, [&] {
    const LibraryHandle lib = libraries_.get({src.hash, "", ""}, [&] { return adapter_.new_library(src.text, src.label); });
    return adapter_.new_pipeline(lib, function, constants);
  });
}

void MetalDevice::encode(DispatchDesc&& d) {
  std::vector<void*> reads, writes;
  size_t touched = 0;
  for (const auto& a : d.args) {
    if (a.kind != DispatchDesc::Arg::Kind::Buffer) continue;
    if (a.read) reads.push_back(a.buffer->handle);
    if (a.write) writes.push_back(a.buffer->handle);
    touched += a.buffer->size - a.offset;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!cb_) {
    fence_ = std::make_shared<Fence>(adapter_, adapter_.new_fence());
    cb_ = adapter_.new_command_buffer();
  }
  Encoder& enc = cb_->compute_encoder();
  // Across command buffers: wait for those in flight that wrote what this reads, or touched what it
  // writes (each fence once per command buffer).
  for (uint64_t id : hazards_.fences_for(reads, writes)) {
    auto it = pending_.find(id);
    if (it == pending_.end() || std::find(waits_.begin(), waits_.end(), it->second) != waits_.end()) continue;
    enc.wait_for_fence(it->second->handle);
    waits_.push_back(it->second);
    ++fence_waits_;
  }
  if (hazards_.dispatch(reads, writes)) enc.memory_barrier();
  enc.set_pipeline(PipelineHandle{d.kernel.p});
  for (size_t i = 0; i < d.args.size(); ++i) {
    auto& a = d.args[i];
    if (a.kind == DispatchDesc::Arg::Kind::Buffer) {
      enc.set_buffer(BufferHandle{a.buffer->handle}, a.offset, (uint32_t)i);
      enc.set_buffer_extent((uint32_t)i, a.length, a.read && !a.write);
      if (kept_.insert(a.buffer->handle).second) keep_.push_back(std::move(a.buffer));
    } else if (a.kind == DispatchDesc::Arg::Kind::Bytes) {
      enc.set_bytes(a.bytes.data(), a.bytes.size(), (uint32_t)i);
    }
  }
  for (const auto& [index, bytes] : d.threadgroup_memory) enc.set_threadgroup_memory(bytes, index);
  enc.dispatch_threads(d.grid, d.group);
  ++dispatches_;
  if (policy_.dispatch(touched)) commit_locked();
}

void MetalDevice::commit_locked() {
  if (!cb_) return;
  const uint64_t id = next_id_++;
  cb_->compute_encoder().update_fence(fence_->handle);
  cb_->commit();
  hazards_.end_encoder(id);
  policy_.committed();
  ++commits_;
  pending_[id] = fence_;
  waits_.push_back(std::move(fence_));
  in_flight_.push_back({std::move(cb_), std::move(keep_), std::move(waits_), id});
  cb_.reset();
  fence_.reset();
  keep_.clear();
  kept_.clear();
  waits_.clear();
  // A few command buffers in flight keep the GPU busy; more would only hold their buffers longer.
  wait_locked(3);
}

void MetalDevice::wait_locked(size_t keep_in_flight) {
  while (in_flight_.size() > keep_in_flight) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    try {
      f.cb->wait();
    } catch (const Error& e) {
      if (!error_) error_ = std::make_unique<Error>(e);
    }
    hazards_.completed(f.id);
    pending_.erase(f.id);
  }
}

void MetalDevice::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  commit_locked();
}

void MetalDevice::synchronize() {
  std::unique_ptr<Error> err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_locked();
    wait_locked(0);
    err = std::move(error_);
  }
  if (err) throw *err;
}

void MetalDevice::empty_cache() { pool_.empty_cache(); }
void MetalDevice::set_cache_limit(size_t bytes) { pool_.set_cache_limit(bytes); }
void MetalDevice::set_memory_limit(size_t bytes) { pool_.set_memory_limit(bytes); }
void MetalDevice::reset_peak_memory() { pool_.reset_peak(); }

MemoryStats MetalDevice::memory_stats() const {
  const auto p = pool_.stats();
  MemoryStats m;
  m.allocated = p.active_bytes;
  m.cached = p.cached_bytes;
  m.peak = p.peak_bytes;
  m.cache_limit = p.cache_limit;
  return m;
}

DeviceStats MetalDevice::stats() const {
  const auto p = pool_.stats();
  std::lock_guard<std::mutex> lock(mu_);
  return {p.active_bytes, p.cached_bytes, p.peak_bytes, p.cache_limit, p.memory_limit, p.cached_buffers,
          p.hits, p.misses, dispatches_, hazards_.barriers(), fence_waits_, commits_, pipelines_.size(),
          pipelines_.compiles(), libraries_.compiles()};
}

}  // namespace ember::metal
