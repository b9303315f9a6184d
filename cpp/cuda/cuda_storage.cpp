// CudaStorage: a buffer from the device's pool, with the dtype check and out-of-memory reported as the op's.
#include "cuda/cuda_storage.h"

#include <climits>
#include <cstring>

#include "gpu/launch.h"

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

CudaStorage::CudaStorage(CudaDevice& dev, DType dtype, int64_t numel, gpu::BufferRef buffer)
    : gpu::GpuStorage(dev, dtype, numel, std::move(buffer), 0) {}

std::shared_ptr<CudaStorage> CudaStorage::wrap(CudaDevice& dev, DType dtype, int64_t numel, uint64_t dptr,
                                               std::function<void()> release, const char* op) {
  size_t bytes = 0;
  std::shared_ptr<gpu::Buffer> buf;
  try {
    bytes = checked_bytes(dev, dtype, numel, op);
    EMBER_CHECK(numel > 0 && dptr != 0, Value, "[", op, "] cannot wrap ", numel, " elements at device address ", dptr);
    EMBER_CHECK(dptr % itemsize(dtype) == 0, Value, "[", op, "] device address ", dptr, " is not aligned to the ",
                itemsize(dtype), "-byte elements of ", dtype_name(dtype));
    // The buffer is exactly the producer's bytes: the emulator checks every kernel access against them.
    buf = std::make_shared<gpu::Buffer>(&dev, (void*)(uintptr_t)dptr, bytes);
  } catch (...) {
    release();  // refused: the producer's memory is not kept
    throw;
  }
  buf->foreign_release = [&dev, release = std::move(release)] {
    // Work on the stream may still read or write the memory; the producer may reuse it once released.
    try {
      dev.synchronize();
    } catch (...) {  // a kernel's fault was reported or is reported at the next synchronize; release anyway
    }
    release();
  };
  return std::make_shared<CudaStorage>(dev, dtype, numel, std::move(buf));
}

StoragePtr CudaStorage::matmul(const Layout& l, const BackendStorage& rhs_, const Layout& rl) const {
  CudaDevice& dev = cuda_device();
  const CudaStorage& rhs = as_cuda(rhs_);
  if (std::strcmp(dev.adapter().kind(), "nvidia") != 0 || cublas_library().empty())
    return gpu::GpuStorage::matmul(l, rhs, rl);
  const int64_t nd = l.ndim();
  const int64_t m = l.shape()[nd - 2], k = l.shape()[nd - 1], n = rl.shape()[nd - 1];
  const Shape bs(l.shape().begin(), l.shape().end() - 2);
  const int64_t nbatch = shape_numel(bs);
  RowMajorGemm g;
  g.dtype = dtype(), g.m = m, g.n = n, g.k = k, g.batch = nbatch;
  // One batch stride per operand: the batch dims must merge into one in both (broadcast dims as stride 0).
  const Layout ab(bs, Shape(l.stride().begin(), l.stride().end() - 2), 0);
  const Layout bb(bs, Shape(rl.stride().begin(), rl.stride().end() - 2), 0);
  const std::vector<gpu::Strided> B = gpu::collapse(std::vector<const Layout*>{&ab, &bb});
  CublasCall plan;
  const bool one_batch_dim = nbatch <= 1 || B[0].ndim() == 1;
  g.a_row = l.stride()[nd - 2], g.a_col = l.stride()[nd - 1], g.a_batch = nbatch > 1 ? B[0].strides[0] : 0;
  g.b_row = rl.stride()[nd - 2], g.b_col = rl.stride()[nd - 1], g.b_batch = nbatch > 1 ? B[1].strides[0] : 0;
  if (!one_batch_dim || m * n * nbatch == 0 || !cublas_plan(g, &plan)) return gpu::GpuStorage::matmul(l, rhs, rl);
  auto out = std::make_shared<CudaStorage>(dev, dtype(), nbatch * m * n, "matmul");
  const int64_t isz = (int64_t)itemsize(dtype());
  g.a = dptr() + (uint64_t)(l.offset() * isz);
  g.b = rhs.dptr() + (uint64_t)(rl.offset() * isz);
  g.c = out->dptr();
  if (!dev.adapter().gemm(dev.ordinal(), g)) return gpu::GpuStorage::matmul(l, rhs, rl);  // cuBLAS went away
  return out;
}

}  // namespace ember::cuda
