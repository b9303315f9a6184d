// MetalStorage: a Metal buffer from the device's pool (handle + byte offset) and the backend trait on it;
// every op forwards to its family's launcher in cpp/metal/ops/.
#pragma once
#include <memory>

#include "backend.h"
#include "metal/api.h"
#include "metal/device.h"

namespace ember::metal {

// Throws "[op] float64 is not supported on metal" (DType) for F64: Metal has no 64-bit float.
void check_metal_dtype(DType dt, const char* op);

class MetalStorage final : public MetalStorageView {
 public:
  // `numel` elements of `dtype` in a buffer from dev's pool (contents unspecified). Throws for F64.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, const char* op = "alloc");
  // A storage over part of an existing buffer, from `byte_offset` on.
  MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, BufferRef buffer, size_t byte_offset);
  MetalStorage(const MetalStorage&) = delete;
  MetalStorage& operator=(const MetalStorage&) = delete;

  MetalDevice& metal_device() const { return *dev_; }
  const BufferRef& buffer() const { return buf_; }
  size_t byte_offset() const override { return offset_; }
  // The CPU view of the (shared) buffer at this storage's offset. Only valid to read after
  // metal_device().synchronize(), and to write when no encoded work uses the buffer.
  void* host_ptr() const { return static_cast<char*>(dev_->contents(*buf_)) + offset_; }

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
  std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_fwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage* b,
                                                                const Layout* lb, BackendStorage* rm, const Layout* lrm,
                                                                BackendStorage* rv, const Layout* lrv, bool training,
                                                                double momentum, double eps) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_bwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg, bool training) const override;
  StoragePtr softmax_fwd(const Layout& l, bool log) const override;
  StoragePtr softmax_bwd(const Layout& l, const BackendStorage& g, const Layout& lg, bool log) const override;
  std::tuple<StoragePtr, StoragePtr> rms_norm_fwd(const Layout& l, const BackendStorage* w, const Layout* lw,
                                                  double eps) const override;
  std::tuple<StoragePtr, StoragePtr> rms_norm_bwd(const Layout& l, const BackendStorage* w, const Layout* lw,
                                                  const BackendStorage& rstd, const BackendStorage& g,
                                                  const Layout& lg) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_fwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage* b,
                                                                const Layout* lb, double eps) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_bwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg) const override;
  StoragePtr act_bwd(ActKind kind, const Layout& l, const BackendStorage& g, const Layout& lg, double p0,
                     double p1) const override;
  std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const SdpaArgs& a) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const SdpaArgs& a, const BackendStorage& o,
                                                          const Layout& lo, const BackendStorage& lse,
                                                          const BackendStorage& g, const Layout& lg) const override;
  StoragePtr rope(const Layout& l, const RopeArgs& a) const override;
  void optim_step(const OptimArgs& a) override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_fwd(RnnCell kind, const Layout& l, const BackendStorage& hg,
                                                              const Layout& lhg, const BackendStorage* b,
                                                              const Layout* lb, const BackendStorage* s,
                                                              const Layout* ls) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_bwd(RnnCell kind, const Layout& l, const BackendStorage& ws,
                                                              const Layout& lws, const BackendStorage* s,
                                                              const Layout* ls, const BackendStorage* dc,
                                                              const Layout* ldc) const override;

 private:
  MetalDevice* dev_;
  BufferRef buf_;
  size_t offset_ = 0;
};

using MetalStoragePtr = std::shared_ptr<MetalStorage>;
// The storage.cpp entry points have checked that every operand is on this storage's device.
inline const MetalStorage& as_metal(const BackendStorage& s) { return static_cast<const MetalStorage&>(s); }
inline MetalStorage& as_metal(BackendStorage& s) { return static_cast<MetalStorage&>(s); }
// A new storage for an op's result on dev (refuses F64 naming `op`).
inline MetalStoragePtr new_metal(MetalDevice& dev, DType dt, int64_t numel, const char* op) {
  return std::make_shared<MetalStorage>(dev, dt, numel, op);
}

}  // namespace ember::metal
