// CudaStorage: a GPU storage (gpu/gpu_storage.h: the whole trait, on the launchers shared with Metal) over a
// buffer of a CudaDevice's pool; its device address is what em.cuda.Kernel and DLPack see.
#pragma once
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
