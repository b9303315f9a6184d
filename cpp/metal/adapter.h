// The narrow adapter interface: the final device calls of ember's Metal backend (buffers, pipelines from
// source, a compute encoder, commit/wait). Everything above it (MetalStorage, launchers, policy/) is one
// code path; below it sit metal-cpp (cpp/metal/apple/, Apple only) and the MSL emulator (cpp/metal/emu/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/types.h"

namespace ember::metal {

// Opaque handles; each adapter knows what they point to (an MTL object, or an emulator record).
struct BufferHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
  bool operator==(const BufferHandle& o) const { return p == o.p; }
  bool operator!=(const BufferHandle& o) const { return p != o.p; }
};
// A compiled source (MTLLibrary); its pipelines are made from it, one compile per source.
struct LibraryHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};
struct PipelineHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};

// A fence orders work across encoders on buffers Metal does not track (ember's are untracked): one
// encoder updates it after its work, a later one waits for it before its own.
struct FenceHandle {
  void* p = nullptr;
  explicit operator bool() const { return p != nullptr; }
};

using gpu::Dim3;
using gpu::FunctionConstant;

// One compute encoder of a command buffer: bindings persist from dispatch to dispatch, as in Metal.
class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual void set_pipeline(PipelineHandle pipeline) = 0;
  virtual void set_buffer(BufferHandle buffer, size_t offset, uint32_t index) = 0;
  // After set_buffer: the kernel may touch `length` bytes from the bound offset (the storage's logical
  // end, not the pooled buffer's), and only reads them when `read_only`. The emulator checks both;
  // Metal has no such notion, so the default ignores it.
  virtual void set_buffer_extent(uint32_t index, size_t length, bool read_only) {
    (void)index, (void)length, (void)read_only;
  }
  virtual void set_bytes(const void* data, size_t length, uint32_t index) = 0;  // copied now
  virtual void set_threadgroup_memory(size_t length, uint32_t index) = 0;
  // grid in threads (dispatchThreads: edge threadgroups may be partial), threads per threadgroup.
  virtual void dispatch_threads(Dim3 grid, Dim3 threads_per_threadgroup) = 0;
  virtual void memory_barrier() = 0;  // buffers written before it are visible to dispatches after it
  // Signals `fence` once every dispatch encoded so far has run (Metal: updateFence, at the end).
  virtual void update_fence(FenceHandle fence) = 0;
  // Dispatches encoded after this wait until `fence` is signalled (Metal: waitForFence).
  virtual void wait_for_fence(FenceHandle fence) = 0;
  virtual void end_encoding() = 0;
};

class CommandBuffer {
 public:
  virtual ~CommandBuffer() = default;
  virtual Encoder& compute_encoder() = 0;  // the one open encoder (created on first use)
  virtual void commit() = 0;
  // Blocks until the work has run; throws ember::Error with the device's message if it failed.
  virtual void wait() = 0;
};

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual const char* kind() const = 0;  // "apple" or "emulator"
  virtual std::string device_name() const = 0;
  virtual uint64_t recommended_working_set_size() const = 0;
  virtual uint32_t max_threads_per_threadgroup() const = 0;  // the device's; a pipeline may allow fewer
  virtual uint64_t max_threadgroup_memory() const = 0;       // bytes of threadgroup memory per group

  // Shared (CPU-visible) buffers. new_buffer throws ember::Error (Memory) when the device refuses.
  virtual BufferHandle new_buffer(size_t length) = 0;
  virtual BufferHandle new_buffer(const void* data, size_t length) = 0;
  virtual void release(BufferHandle buffer) = 0;
  virtual void* contents(BufferHandle buffer) = 0;
  virtual size_t length(BufferHandle buffer) = 0;

  // Compiles `source` (MSL 3.1) into a library. Throws ember::Error carrying the compiler's log on a
  // compile error. Uncached: MetalDevice keeps one library per source (by its hash).
  virtual LibraryHandle new_library(const std::string& source, const std::string& label) = 0;
  virtual void release(LibraryHandle library) = 0;
  // The pipeline of `function` in `library` with `constants`; throws naming the function when it is
  // absent. Uncached: policy::PipelineCache sits above this call.
  virtual PipelineHandle new_pipeline(LibraryHandle library, const std::string& function,
                                      const std::vector<FunctionConstant>& constants) = 0;
  virtual void release(PipelineHandle pipeline) = 0;
  // The most threads one threadgroup of this pipeline may have (maxTotalThreadsPerThreadgroup: it can be
  // below the device's limit, through register use or shader validation), and its SIMD width.
  virtual uint32_t max_threads(PipelineHandle pipeline) const = 0;
  virtual uint32_t execution_width(PipelineHandle pipeline) const = 0;

  virtual FenceHandle new_fence() = 0;
  virtual void release(FenceHandle fence) = 0;

  virtual std::unique_ptr<CommandBuffer> new_command_buffer() = 0;
};

// The emulator (any OS): runs kernels as C++ (cpp/metal/emu/).
Adapter& emulator_adapter();

#if defined(EMBER_HAS_METAL_CPP)
// metal-cpp on the default device (cpp/metal/apple/); throws ember::Error (Device) without one.
Adapter& apple_adapter();
#endif

}  // namespace ember::metal
