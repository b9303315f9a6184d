// CudaStorage: a GPU storage (gpu/gpu_storage.h: the whole trait, on the launchers shared with Metal) over a
// buffer of a CudaDevice's pool; its device address is what em.cuda.Kernel and DLPack see.
#pragma once
#include <functional>
#include <memory>

#include "backend.h"
#include "cuda/device.h"
#include "gpu/gpu_storage.h"

namespace ember::cuda {

class CudaStorage final : public gpu::GpuStorage {
 public:
  // `numel` elements of `dtype` in a buffer from dev's pool (contents unspecified); refuses a dtype the
  // device's kernels do not hold and reports running out of memory as op's error.
  CudaStorage(CudaDevice& dev, DType dtype, int64_t numel, const char* op = "alloc");
  // Wraps `numel` elements of `dtype` at device address `dptr`, memory ember did not allocate (a DLPack
  // import): no pool, no memory stats. When the last storage and encoded work on it are gone, the device
  // is synchronised (the stream may still use the memory) and `release` runs once (the producer's deleter);
  // it also runs (at once) when wrap refuses.
  static std::shared_ptr<CudaStorage> wrap(CudaDevice& dev, DType dtype, int64_t numel, uint64_t dptr,
                                           std::function<void()> release, const char* op = "from_dlpack");
  CudaStorage(CudaDevice& dev, DType dtype, int64_t numel, gpu::BufferRef buffer);
  bool foreign() const { return static_cast<bool>(buffer()->foreign_release); }

  CudaDevice& cuda_device() const { return static_cast<CudaDevice&>(gpu_device()); }
  uint64_t dptr() const { return CudaDevice::dptr(*buffer()) + byte_offset(); }  // the address of element 0

  // cuBLAS where the adapter has it and the operands' layout fits one strided-batched call; else the shared
  // launcher (ember's own tiled kernel).
  StoragePtr matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const override;
};

// The storage.cpp entry points have checked that every operand is on this storage's device.
inline const CudaStorage& as_cuda(const BackendStorage& s) { return static_cast<const CudaStorage&>(s); }
inline CudaStorage& as_cuda(BackendStorage& s) { return static_cast<CudaStorage&>(s); }

}  // namespace ember::cuda
