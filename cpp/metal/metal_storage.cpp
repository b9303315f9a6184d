// MetalStorage: buffer ownership and the trait's methods, each forwarding to its family's launcher.
#include "metal/metal_storage.h"

#include <climits>

#include "metal/ops/ops.h"

namespace ember::metal {

void check_metal_dtype(DType dt, const char* op) {
  EMBER_CHECK(dt != DType::F64, DType, "[", op, "] float64 is not supported on metal (Metal has no 64-bit float)");
}

namespace {
size_t checked_bytes(DType dt, int64_t numel, const char* op) {
  check_metal_dtype(dt, op);
  EMBER_CHECK(numel >= 0 && numel <= INT64_MAX / (int64_t)itemsize(dt), Value, "[", op, "] cannot allocate ", numel,
              " elements of ", dtype_name(dt));
  return (size_t)numel * itemsize(dt);
}

// A buffer from dev's pool; running out of memory is reported as the op's error, as on the CPU.
BufferRef pooled(MetalDevice& dev, size_t bytes, const char* op) {
  try {
    return dev.alloc(bytes);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Memory) throw;
    std::string m = e.what();
    if (m.rfind("[metal] ", 0) == 0) m = m.substr(8);
    throw Error(ErrorKind::Memory, cat_str("[", op, "] ", m, " (", dev.device().str(), ")"));
  }
}
}  // namespace

MetalStorage::MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, const char* op)
    : MetalStorageView(dtype, dev.device(), numel), dev_(&dev), buf_(pooled(dev, checked_bytes(dtype, numel, op), op)) {}

MetalStorage::MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, BufferRef buffer, size_t byte_offset)
    : MetalStorageView(dtype, dev.device(), numel), dev_(&dev), buf_(std::move(buffer)), offset_(byte_offset) {
  EMBER_CHECK(byte_offset + checked_bytes(dtype, numel, "alloc") <= buf_->size, Index, "[alloc] ", numel,
              " elements of ", dtype_name(dtype), " at byte ", byte_offset, " do not fit a buffer of ", buf_->size,
              " bytes");
}

bool MetalStorage::same_buffer(const BackendStorage& other) const {
  if (other.device() != device()) return false;
  const auto& o = as_metal(other);
  if (o.buf_ != buf_) return false;
  // Overlapping byte ranges of one buffer count as the same buffer.
  return offset_ < o.offset_ + o.nbytes() && o.offset_ < offset_ + nbytes() && nbytes() > 0 && o.nbytes() > 0;
}

StoragePtr MetalStorage::unary(UnaryOp op, const Layout& l, double p0, double p1) const {
  return ops::unary(*this, op, l, p0, p1);
}
StoragePtr MetalStorage::binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  return ops::binary(*this, op, l, rhs, rl);
}
StoragePtr MetalStorage::where(const Layout& cl, const BackendStorage& a, const Layout& al, const BackendStorage& b,
                               const Layout& bl) const {
  return ops::where(*this, cl, a, al, b, bl);
}
StoragePtr MetalStorage::to_dtype(const Layout& l, DType dt) const { return ops::to_dtype(*this, l, dt); }
StoragePtr MetalStorage::reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const {
  return ops::reduce(*this, op, l, dims);
}
StoragePtr MetalStorage::matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  return ops::matmul(*this, l, rhs, rl);
}
void MetalStorage::copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const {
  ops::copy_into(*this, l, dst, dl);
}
void MetalStorage::fill(const Layout& l, double value) { ops::fill(*this, l, value); }
StoragePtr MetalStorage::index_select(const Layout& l, const BackendStorage& ids, const Layout& il,
                                      int64_t dim) const {
  return ops::index_select(*this, l, ids, il, dim);
}
StoragePtr MetalStorage::gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const {
  return ops::gather(*this, l, ids, il, dim);
}
void MetalStorage::index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                             const Layout& sl, int64_t dim) {
  ops::index_add(*this, l, ids, il, src, sl, dim);
}
void MetalStorage::scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il,
                               const BackendStorage& src, const Layout& sl, int64_t dim) {
  ops::scatter_add(*this, l, ids, il, src, sl, dim);
}
void MetalStorage::index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                              const Layout& sl, int64_t dim) {
  ops::index_copy(*this, l, ids, il, src, sl, dim);
}
std::tuple<StoragePtr, StoragePtr, StoragePtr> MetalStorage::batch_norm_fwd(
    const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage* b, const Layout* lb,
    BackendStorage* rm, const Layout* lrm, BackendStorage* rv, const Layout* lrv, bool training, double momentum,
    double eps) const {
  return ops::batch_norm_fwd(*this, l, w, lw, b, lb, rm, lrm, rv, lrv, training, momentum, eps);
}
std::tuple<StoragePtr, StoragePtr, StoragePtr> MetalStorage::batch_norm_bwd(
    const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage& mean,
    const BackendStorage& rstd, const BackendStorage& g, const Layout& lg, bool training) const {
  return ops::batch_norm_bwd(*this, l, w, lw, mean, rstd, g, lg, training);
}

StoragePtr MetalStorage::softmax_fwd(const Layout& l, bool log) const { return ops::softmax_fwd(*this, l, log); }
StoragePtr MetalStorage::softmax_bwd(const Layout& l, const BackendStorage& g, const Layout& lg, bool log) const {
  return ops::softmax_bwd(*this, l, g, lg, log);
}
std::tuple<StoragePtr, StoragePtr> MetalStorage::rms_norm_fwd(const Layout& l, const BackendStorage* w,
                                                              const Layout* lw, double eps) const {
  return ops::rms_norm_fwd(*this, l, w, lw, eps);
}
std::tuple<StoragePtr, StoragePtr> MetalStorage::rms_norm_bwd(const Layout& l, const BackendStorage* w,
                                                              const Layout* lw, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg) const {
  return ops::rms_norm_bwd(*this, l, w, lw, rstd, g, lg);
}
std::tuple<StoragePtr, StoragePtr, StoragePtr> MetalStorage::layer_norm_fwd(const Layout& l, const BackendStorage* w,
                                                                            const Layout* lw, const BackendStorage* b,
                                                                            const Layout* lb, double eps) const {
  return ops::layer_norm_fwd(*this, l, w, lw, b, lb, eps);
}
std::tuple<StoragePtr, StoragePtr, StoragePtr> MetalStorage::layer_norm_bwd(
    const Layout& l, const BackendStorage* w, const Layout* lw, const BackendStorage& mean,
    const BackendStorage& rstd, const BackendStorage& g, const Layout& lg) const {
  return ops::layer_norm_bwd(*this, l, w, lw, mean, rstd, g, lg);
}
StoragePtr MetalStorage::act_bwd(ActKind kind, const Layout& l, const BackendStorage& g, const Layout& lg,
                                 double p0, double p1) const {
  return ops::act_bwd(*this, kind, l, g, lg, p0, p1);
}
std::tuple<StoragePtr, StoragePtr> MetalStorage::sdpa_fwd(const SdpaArgs& a) const { return ops::sdpa_fwd(*this, a); }
std::tuple<StoragePtr, StoragePtr, StoragePtr> MetalStorage::sdpa_bwd(const SdpaArgs& a, const BackendStorage& o,
                                                                      const Layout& lo, const BackendStorage& lse,
                                                                      const BackendStorage& g,
                                                                      const Layout& lg) const {
  return ops::sdpa_bwd(*this, a, o, lo, lse, g, lg);
}
StoragePtr MetalStorage::rope(const Layout& l, const RopeArgs& a) const { return ops::rope(*this, l, a); }
void MetalStorage::optim_step(const OptimArgs& a) { ops::optim_step(*this, a); }

}  // namespace ember::metal
