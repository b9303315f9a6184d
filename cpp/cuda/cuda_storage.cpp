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

StoragePtr CudaStorage::softmax_fwd(const Layout& l, bool log) const {
  unsupported(log ? "log_softmax" : "softmax");
}

StoragePtr CudaStorage::softmax_bwd(const Layout& l, const BackendStorage& g, const Layout& lg, bool log) const {
  unsupported(log ? "log_softmax" : "softmax");
}

std::tuple<StoragePtr, StoragePtr> CudaStorage::rms_norm_fwd(const Layout& l, const BackendStorage* w, const Layout* lw, double eps) const {
  unsupported("rms_norm_fwd");
}

std::tuple<StoragePtr, StoragePtr> CudaStorage::rms_norm_bwd(const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage& rstd, const BackendStorage& g, const Layout& lg) const {
  unsupported("rms_norm_bwd");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::layer_norm_fwd(const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage* b, const Layout* lb, double eps) const {
  unsupported("layer_norm_fwd");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::layer_norm_bwd(const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage& mean, const BackendStorage& rstd, const BackendStorage& g, const Layout& lg) const {
  unsupported("layer_norm_bwd");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::batch_norm_fwd(const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage* b, const Layout* lb, BackendStorage* rm, const Layout* lrm, BackendStorage* rv, const Layout* lrv, bool training, double momentum, double eps) const {
  unsupported("batch_norm_fwd");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::batch_norm_bwd(const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage& mean, const BackendStorage& rstd, const BackendStorage& g, const Layout& lg, bool training) const {
  unsupported("batch_norm_bwd");
}

StoragePtr CudaStorage::act_bwd(ActKind kind, const Layout& l, const BackendStorage& g, const Layout& lg, double p0, double p1) const {
  unsupported(act_name(kind));
}

std::tuple<StoragePtr, StoragePtr> CudaStorage::sdpa_fwd(const SdpaArgs& a) const {
  unsupported("scaled_dot_product_attention");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::sdpa_bwd(const SdpaArgs& a, const BackendStorage& o, const Layout& lo, const BackendStorage& lse, const BackendStorage& g, const Layout& lg) const {
  unsupported("scaled_dot_product_attention");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::rnn_cell_fwd(RnnCell kind, const Layout& l, const BackendStorage& hg, const Layout& lhg, const BackendStorage* b, const Layout* lb, const BackendStorage* s, const Layout* ls) const {
  unsupported(rnn_cell_name(kind));
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> CudaStorage::rnn_cell_bwd(RnnCell kind, const Layout& l, const BackendStorage& ws, const Layout& lws, const BackendStorage* s, const Layout* ls, const BackendStorage* dc, const Layout* ldc) const {
  unsupported(rnn_cell_name(kind));
}

StoragePtr CudaStorage::rope(const Layout& l, const RopeArgs& a) const {
  unsupported("rope");
}

void CudaStorage::optim_step(const OptimArgs& a) {
  unsupported("optim_step");
}

#undef unsupported

}  // namespace ember::cuda
