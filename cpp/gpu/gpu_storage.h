// GpuStorage: a range of a pooled GPU buffer (MetalStorage and CudaStorage derive from it) and the backend
// trait on it: every method forwards to its family's launcher in gpu/ops/, the same for every GPU.
#pragma once
#include <memory>
#include <vector>

#include "backend.h"

namespace ember::gpu {

class GpuDevice;
struct Buffer;

class GpuStorage : public BackendStorage {
 public:
  // `numel` elements of dtype at `byte_offset` of `buffer` (which must hold them), on dev.
  GpuStorage(GpuDevice& dev, DType dtype, int64_t numel, std::shared_ptr<Buffer> buffer, size_t byte_offset);
  GpuStorage(const GpuStorage&) = delete;
  GpuStorage& operator=(const GpuStorage&) = delete;

  GpuDevice& gpu_device() const { return *dev_; }
  const std::shared_ptr<Buffer>& buffer() const { return buf_; }
  size_t byte_offset() const { return offset_; }  // where the storage starts in its pooled buffer
  size_t nbytes() const { return (size_t)numel() * itemsize(dtype()); }

  // Host access in the device's order (GpuDevice::write_bytes / read_bytes), `offset` bytes into the storage:
  // write and zero only before encoded work uses the storage; read after gpu_device().synchronize().
  void write(const void* src, size_t n, size_t offset = 0) const;
  void zero(size_t n, size_t offset = 0) const;
  void read(void* dst, size_t n, size_t offset = 0) const;

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
  GpuDevice* dev_;
  std::shared_ptr<Buffer> buf_;
  size_t offset_ = 0;
};

using GpuStoragePtr = std::shared_ptr<GpuStorage>;
// The storage.cpp entry points have checked that every operand is on this storage's device, and every
// storage on a GPU device is a GpuStorage.
inline const GpuStorage& as_gpu(const BackendStorage& s) { return static_cast<const GpuStorage&>(s); }
inline GpuStorage& as_gpu(BackendStorage& s) { return static_cast<GpuStorage&>(s); }

// Registers the launchers of every registry family (gpu/register_kernels.cpp) for `kind`, a device kind whose
// storages are all GpuStorages; each GPU backend calls it at import.
void register_kernels(DeviceKind kind);

}  // namespace ember::gpu
