// CudaStorage: a buffer from the device's pool, with the dtype check and out-of-memory reported as the op's.
#include "cuda/cuda_storage.h"

#include <climits>

namespace ember::cuda {
namespace {

size_t checked_bytes(const CudaDevice& dev, DType dt, int64_t numel, const char* op) {
  dev.check_dtype(dt, op);
  EMBER_CHECK(numel >= 0 && numel <= INT64_MAX / (int64_t)itemsize(dt), Value, "[", op, "] cannot allocate ", numel,
              " elements of ", dtype_name(dt));
  return (size_t)numel * itemsize(dt);
}

gpu::BufferRef pooled(CudaDevice& dev, size_t bytes, const char* op) {
  try {
    return dev.alloc(bytes);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Memory) throw;
    std::string m = e.what();
    if (m.rfind("[cuda] ", 0) == 0) m = m.substr(7);
    throw Error(ErrorKind::Memory, cat_str("[", op, "] ", m, " (", dev.device().str(), ")"));
  }
}

}  // namespace

CudaStorage::CudaStorage(CudaDevice& dev, DType dtype, int64_t numel, const char* op)
    : gpu::GpuStorage(dev, dtype, numel, pooled(dev, checked_bytes(dev, dtype, numel, op), op), 0) {}

}  // namespace ember::cuda
