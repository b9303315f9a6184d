// GpuStorage: the buffer range, host access through the device, and the trait's methods, each forwarding to
// its family's launcher.
#include "gpu/gpu_storage.h"

#include "gpu/gpu_device.h"
#include "gpu/ops/ops.h"

namespace ember::gpu {

GpuStorage::GpuStorage(GpuDevice& dev, DType dtype, int64_t numel, std::shared_ptr<Buffer> buffer,
                       size_t byte_offset)
    : BackendStorage(dtype, dev.device(), numel), dev_(&dev), buf_(std::move(buffer)), offset_(byte_offset) {
  EMBER_CHECK(numel >= 0 && numel <= (int64_t)((buf_->size - std::min(byte_offset, buf_->size)) / itemsize(dtype)) &&
                  byte_offset <= buf_->size,
              Index, "[alloc] ", numel, " elements of ", dtype_name(dtype), " at byte ", byte_offset,
              " do not fit a buffer of ", buf_->size, " bytes");
}

void GpuStorage::write(const void* src, size_t n, size_t offset) const {
  EMBER_CHECK(offset + n <= nbytes(), Index, "[gpu] a host write past the storage's end");
  dev_->write_bytes(*buf_, offset_ + offset, src, n);
}
void GpuStorage::zero(size_t n, size_t offset) const {
  EMBER_CHECK(offset + n <= nbytes(), Index, "[gpu] a host write past the storage's end");
  dev_->zero_bytes(*buf_, offset_ + offset, n);
}
void GpuStorage::read(void* dst, size_t n, size_t offset) const {
  EMBER_CHECK(offset + n <= nbytes(), Index, "[gpu] a host read past the storage's end");
  dev_->read_bytes(*buf_, offset_ + offset, dst, n);
}

bool GpuStorage::same_buffer(const BackendStorage& other) const {
  if (other.device() != device()) return false;
  const auto& o = as_gpu(other);
  if (o.buf_ != buf_) {
    // Memory a producer lent (only CUDA has it, and its handles are device addresses) may overlap another
    // import of it or ember's own buffer: compare addresses.
    if (!buf_->foreign_release && !o.buf_->foreign_release) return false;
    const uintptr_t a = (uintptr_t)buf_->handle + offset_, b = (uintptr_t)o.buf_->handle + o.offset_;
    return a < b + o.nbytes() && b < a + nbytes() && nbytes() > 0 && o.nbytes() > 0;
  }
  // Overlapping byte ranges of one buffer count as the same buffer.
  return offset_ < o.offset_ + o.nbytes() && o.offset_ < offset_ + nbytes() && nbytes() > 0 && o.nbytes() > 0;
}

StoragePtr GpuStorage::unary(UnaryOp op, const Layout& l, double p0, double p1) const {
  return ops::unary(*this, op, l, p0, p1);
}
StoragePtr GpuStorage::binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  return ops::binary(*this, op, l, rhs, rl);
}
StoragePtr GpuStorage::where(const Layout& cl, const BackendStorage& a, const Layout& al, const BackendStorage& b,
                             const Layout& bl) const {
  return ops::where(*this, cl, a, al, b, bl);
}
StoragePtr GpuStorage::to_dtype(const Layout& l, DType dt) const { return ops::to_dtype(*this, l, dt); }
StoragePtr GpuStorage::reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const {
  return ops::reduce(*this, op, l, dims);
}
StoragePtr GpuStorage::matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const {
  return ops::matmul(*this, l, rhs, rl);
}
void GpuStorage::copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const {
  ops::copy_into(*this, l, dst, dl);
}
void GpuStorage::fill(const Layout& l, double value) { ops::fill(*this, l, value); }
StoragePtr GpuStorage::index_select(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const {
  return ops::index_select(*this, l, ids, il, dim);
}
StoragePtr GpuStorage::gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const {
  return ops::gather(*this, l, ids, il, dim);
}
void GpuStorage::index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                           const Layout& sl, int64_t dim) {
  ops::index_add(*this, l, ids, il, src, sl, dim);
}
void GpuStorage::scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                             const Layout& sl, int64_t dim) {
  ops::scatter_add(*this, l, ids, il, src, sl, dim);
}
void GpuStorage::index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                            const Layout& sl, int64_t dim) {
  ops::index_copy(*this, l, ids, il, src, sl, dim);
}

}  // namespace ember::gpu
