// MetalStorage: a Metal buffer from the device's pool (handle + byte offset) and the backend trait on it;
// every op forwards to its family's launcher in cpp/metal/ops/.
#pragma once
#include <memory>

#include "backend.h"
#include "metal/api.h"
#include "metal/device.h"

namespace ember::metal {

// Throws "[op] float64 is not supported on metal" (DType) for F64: Metal has no 64-bit float.
void check_metal_dtype(DType dt, const char* op);

class MetalStorage final : public MetalStorageView {
 public:
  // `numel` elements of `dtype` in a buffer from dev's pool (contents unspecified). Throws for F64.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, const char* op = "alloc");
  // A storage over part of an existing buffer, from `byte_offset` on.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, BufferRef buffer, size_t byte_offset);
  MetalStorage(const MetalStorage&) = delete;
  MetalStorage& operator=(const MetalStorage&) = delete;

  MetalDevice& metal_device() const { return *dev_; }
  const BufferRef& buffer() const { return buf_; }
  size_t byte_offset() const override { return offset_; }
  // The CPU view of the (shared) buffer at this storage's offset. Only valid to read after
  // metal_device().synchronize(), and to write when no encoded work uses the buffer.
  void* host_ptr() const { return static_cast<char*>(dev_->contents(*buf_)) + offset_; }

  bool same_buffer(const BackendStorage& other) const override;
  StoragePtr unary(UnaryOp op, const Layout& l, double p0, double p1) const override;
  StoragePtr binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const override;
  StoragePtr where(const Layout& cl, const BackendStorage& a, const Layout& al, const BackendStorage& b,
                   const Layout& bl) const override;
  StoragePtr to_dtype(const Layout& l, DType dt) const override;
  StoragePtr reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const override;
  StoragePtr matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const override;
  void copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const override;
  void fill(const Layout& l, double value) override;
  StoragePtr index_select(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const override;
  StoragePtr gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const override;
  void index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                 const Layout& sl, int64_t dim) override;
  void scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                   const Layout& sl, int64_t dim) override;
  void index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                  const Layout& sl, int64_t dim) override;

 private:
  MetalDevice* dev_;
  BufferRef buf_;
  size_t offset_ = 0;
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
