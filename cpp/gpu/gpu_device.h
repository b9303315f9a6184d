// GpuDevice: the device queue the GPU launch layer (Launch, the launchers in gpu/ops/) runs on, implemented by
// MetalDevice and CudaDevice: pooled buffers, which dtypes it holds, kernel sources by file, kernels prepared
// with their function constants, one encoded dispatch at a time, synchronize.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "device.h"  // MemoryStats (cpp/device.h: gpu/ has no device.h of its own)
#include "gpu/types.h"

namespace ember::gpu {

class GpuDevice;
class GpuStorage;

// One buffer from a device's pool. Storages and the work that binds it share ownership, so it returns to the
// pool only when no storage holds it and no encoded work can still touch it.
struct Buffer {
  GpuDevice* dev;
  void* handle;  // the device's: an MTL::Buffer (or emulator record), a CUDA device address
  size_t size;   // bytes (the pool's bucket, at least what was asked for)
  // Set for memory the device did not allocate (a DLPack import): run instead of returning it to the pool.
  std::function<void()> foreign_release;
  Buffer(GpuDevice* d, void* h, size_t n) : dev(d), handle(h), size(n) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};
using BufferRef = std::shared_ptr<Buffer>;

// Kernel source text with its digest (the kernel cache's key) and the name messages use.
struct KernelSource {
  std::string text, label, hash;
  KernelSource(std::string t, std::string l, std::string h)
      : text(std::move(t)), label(std::move(l)), hash(std::move(h)) {}
};

// A kernel prepared for dispatch (a Metal pipeline, a CUDA function of a module); the device knows what.
struct KernelHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};

// One dispatch as Launch assembles it: what is bound at each [[buffer(n)]], and the grid.
struct DispatchDesc {
  struct Arg {
    enum class Kind : uint8_t { Unbound, Buffer, Bytes } kind = Kind::Unbound;
    BufferRef buffer;   // Kind::Buffer
    size_t offset = 0;  // bytes into the buffer
    size_t length = 0;  // bytes the kernel may touch from `offset` (to the storage's logical end)
    bool read = false, write = false;
    std::string bytes;  // Kind::Bytes: the value, copied at encoding
  };
  KernelHandle kernel;
  std::string function;   // for messages
  std::vector<Arg> args;  // index = [[buffer(n)]]
  std::vector<std::pair<uint32_t, size_t>> threadgroup_memory;  // (index, bytes)
  Dim3 grid, group;       // grid in threads; threads per group
};

class GpuDevice {
 public:
  virtual ~GpuDevice() = default;
  virtual Device device() const = 0;
  // "Metal", "CUDA": the API's name in messages.
  virtual const char* api_name() const = 0;
  virtual std::string describe() const = 0;  // "metal:0 (emulator, ember MSL emulator (CPU))"

  // Whether the device's kernels hold dt; check_dtype throws "[op] <dtype> is not supported on <kind>"
  // (DType) when they do not.
  virtual bool holds(DType dt) const = 0;
  virtual void check_dtype(DType dt, const char* op) const = 0;
  // A storage of `numel` elements of dt from the pool (contents unspecified); refuses a dtype the device
  // does not hold and reports running out of memory as op's error.
  virtual std::shared_ptr<GpuStorage> new_storage(DType dt, int64_t numel, const char* op) = 0;
  // A buffer of at least `bytes` from the pool; throws Error (Memory) past the memory limit.
  virtual BufferRef alloc(size_t bytes) = 0;

  // Host access to a buffer, in the device's order: write_bytes before any encoded work uses the range (a
  // fresh buffer); read_bytes after synchronize() (it may synchronise itself).
  virtual void write_bytes(const Buffer& b, size_t offset, const void* src, size_t n) = 0;
  virtual void zero_bytes(const Buffer& b, size_t offset, size_t n) = 0;
  virtual void read_bytes(const Buffer& b, size_t offset, void* dst, size_t n) = 0;

  // The text of an embedded kernel file ("copy.metal") as this device compiles it, loaded once.
  virtual const KernelSource& source(const std::string& file) = 0;
  // `function` of `src` with `constants` (sorted by index), compiled at the first request and cached.
  virtual KernelHandle kernel(const KernelSource& src, const std::string& function,
                              const std::vector<FunctionConstant>& constants) = 0;
  // The most threads one group of `k` may have (at most the device's limit), a multiple of 32.
  virtual uint32_t max_threads(KernelHandle k) const = 0;
  // Encodes one dispatch; the device orders it after earlier work on the buffers it binds. Thread-safe.
  virtual void encode(DispatchDesc&& d) = 0;
  // Waits for all encoded work; a kernel's fault since the last synchronize raises here, once.
  virtual void synchronize() = 0;

  // The pool's bytes in use, cached, the peak and the cache limit (em.memory_stats), and its controls.
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  virtual void empty_cache() = 0;
  virtual void set_cache_limit(size_t bytes) = 0;

 protected:
  friend struct Buffer;
  virtual void release_buffer(void* handle, size_t size) = 0;  // back to the pool
};

inline Buffer::~Buffer() {
  if (foreign_release) foreign_release();
  else dev->release_buffer(handle, size);
}

}  // namespace ember::gpu
