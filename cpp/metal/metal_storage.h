// MetalStorage: a GPU storage (gpu/gpu_storage.h: the trait, forwarding to the shared launchers) over a buffer
// of a MetalDevice's pool, with the CPU view of Metal's shared buffers.
#pragma once
#include <memory>

#include "backend.h"
#include "metal/api.h"
#include "metal/device.h"

namespace ember::metal {

class MetalStorage final : public MetalStorageView {
 public:
  // `numel` elements of `dtype` in a buffer from dev's pool (contents unspecified). Throws for F64.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, const char* op = "alloc");
  // A storage over part of an existing buffer, from `byte_offset` on.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, BufferRef buffer, size_t byte_offset);

  MetalDevice& metal_device() const { return static_cast<MetalDevice&>(gpu_device()); }
  // The CPU view of the (shared) buffer at this storage's offset. Only valid to read after
  // metal_device().synchronize(), and to write when no encoded work uses the buffer.
  void* host_ptr() const { return static_cast<char*>(metal_device().contents(*buffer())) + byte_offset(); }
};

using MetalStoragePtr = std::shared_ptr<MetalStorage>;
// The storage.cpp entry points have checked that every operand is on this storage's device.
inline const MetalStorage& as_metal(const BackendStorage& s) { return static_cast<const MetalStorage&>(s); }
inline MetalStorage& as_metal(BackendStorage& s) { return static_cast<MetalStorage&>(s); }
// A new storage for an op's result on dev (refuses F64 naming `op`).
inline MetalStoragePtr new_metal(MetalDevice& dev, DType dt, int64_t numel, const char* op) {
  return std::make_shared<MetalStorage>(dev, dt, numel, op);
}

}  // namespace ember::metal
