// CudaStorage: device memory of a CUDA device (the emulator's: host memory) and the backend trait on it.
// Host <-> device copies, copy_into, fill and to_dtype work (staged through the host until ember's own
// CUDA kernels exist); every other op raises Unsupported "[op] is not implemented on device cuda:N".
#pragma once
#include <memory>

#include "backend.h"
#include "cuda/device.h"

namespace ember::cuda {

// One device allocation, freed when the last storage over it dies.
struct Buffer {
  CudaDevice* dev;
  uint64_t dptr;
  size_t bytes;
  Buffer(CudaDevice* d, size_t n) : dev(d), dptr(d->alloc(n)), bytes(n) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { dev->free(dptr, bytes); }
};

class CudaStorage final : public BackendStorage {
 public:
  // `numel` elements of `dtype` in a new allocation on dev (contents unspecified).
  CudaStorage(CudaDevice& dev, DType dtype, int64_t numel);
  CudaStorage(const CudaStorage&) = delete;
  CudaStorage& operator=(const CudaStorage&) = delete;

  CudaDevice& cuda_device() const { return *buf_->dev; }
  uint64_t dptr() const { return buf_->dptr; }  // the device address of element 0
  size_t nbytes() const { return (size_t)numel_ * itemsize(dtype_); }

  bool same_buffer(const BackendStorage& other) const override;
  StoragePtr unary(UnaryOp op, const Layout& l, double p0, double p1) const override;
  StoragePtr binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const override;
  StoragePtr where(const Layout& cl, const BackendStorage& a, const Layout& al, const BackendStorage& b, const Layout& bl) const override;
  StoragePtr to_dtype(const Layout& l, DType dt) const override;
  StoragePtr reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const override;
  StoragePtr matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const override;
  void copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const override;
  void fill(const Layout& l, double value) override;
  StoragePtr index_select(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const override;
  StoragePtr gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const override;
  void index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) override;
  void scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) override;
  void index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) override;

 private:
  std::shared_ptr<Buffer> buf_;
};

// The storage.cpp entry points have checked that every operand is on this storage's device.
inline const CudaStorage& as_cuda(const BackendStorage& s) { return static_cast<const CudaStorage&>(s); }
inline CudaStorage& as_cuda(BackendStorage& s) { return static_cast<CudaStorage&>(s); }

}  // namespace ember::cuda
