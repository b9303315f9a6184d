// CudaStorage: allocation, and the trait's methods. copy_into / fill / to_dtype are staged through the host
// (a download, the CPU backend's own kernel, an upload), correct on any adapter; every other family raises
// Unsupported in the kernel registry's words until ember's own CUDA kernels (issue #34) exist.
#include "cuda/cuda_storage.h"

#include <vector>

#include "cpu/cpu_backend.h"
#include "error.h"

namespace ember::cuda {
namespace {

[[noreturn]] void unsupported_on(const char* op, Device d) {
  throw Error(ErrorKind::Unsupported, cat_str("[", op, "] is not implemented on device ", d.str()));
}

// A host copy of the whole storage, as a CpuStorage.
StoragePtr download(const CudaStorage& s) {
  std::vector<char> buf(s.nbytes());
  s.cuda_device().adapter().copy_to_host(s.cuda_device().ordinal(), buf.data(), s.dptr(), buf.size());
  return cpu::backend().from_host(s.dtype(), s.numel(), buf.data());
}

void upload(const BackendStorage& host, const CudaStorage& dst) {
  std::vector<char> buf((size_t)host.numel() * itemsize(host.dtype()));
  cpu::backend().to_host(host, buf.data());
  dst.cuda_device().adapter().copy_to_device(dst.cuda_device().ordinal(), dst.dptr(), buf.data(), buf.size());
}

}  // namespace

#define unsupported(op) unsupported_on(op, device_)

CudaStorage::CudaStorage(CudaDevice& dev, DType dtype, int64_t numel) : BackendStorage(dtype, dev.device(), numel) {
  buf_ = std::make_shared<Buffer>(&dev, nbytes());
}

bool CudaStorage::same_buffer(const BackendStorage& other) const {
  return other.device() == device_ && as_cuda(other).buf_ == buf_;
}

void CudaStorage::copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const {
  CudaStorage& d = as_cuda(dst);
  const auto a = l.contiguous_offsets(), b = dl.contiguous_offsets();
  const size_t isz = itemsize(dtype_);
  if (a && b) {  // both dense: one device-to-device copy
    cuda_device().adapter().copy_on_device(cuda_device().ordinal(), d.dptr() + (uint64_t)b->first * isz,
                                           dptr() + (uint64_t)a->first * isz, (size_t)(a->second - a->first) * isz);
    return;
  }
  StoragePtr src = download(*this), out = same_buffer(dst) ? src : download(d);
  src->copy_into(l, *out, dl);
  upload(*out, d);
}

void CudaStorage::fill(const Layout& l, double value) {
  StoragePtr host = download(*this);
  host->fill(l, value);
  upload(*host, *this);
}

StoragePtr CudaStorage::to_dtype(const Layout& l, DType dt) const {
  StoragePtr host = download(*this)->to_dtype(l, dt);
  auto out = std::make_shared<CudaStorage>(cuda_device(), dt, host->numel());
  upload(*host, *out);
  return out;
}

StoragePtr CudaStorage::unary(UnaryOp op, const Layout& l, double p0, double p1) const {
  unsupported(op_name(op));
}

StoragePtr CudaStorage::binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  unsupported(op_name(op));
}

StoragePtr CudaStorage::where(const Layout& cl, const BackendStorage& a, const Layout& al, const BackendStorage& b, const Layout& bl) const {
  unsupported("where");
}

StoragePtr CudaStorage::reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const {
  unsupported(op_name(op));
}

StoragePtr CudaStorage::matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  unsupported("matmul");
}

StoragePtr CudaStorage::index_select(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const {
  unsupported("index_select");
}

StoragePtr CudaStorage::gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const {
  unsupported("gather");
}

void CudaStorage::index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) {
  unsupported("index_add");
}

void CudaStorage::scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) {
  unsupported("scatter_add");
}

void CudaStorage::index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim) {
  unsupported("index_copy");
}

#undef unsupported

}  // namespace ember::cuda
