// CpuStorage: a host buffer (from the caching allocator, or borrowed with a keep-alive) + the CPU backend.
#pragma once
#include <functional>
#include <memory>

#include "backend.h"

namespace ember::cpu {

class CpuStorage final : public BackendStorage {
 public:
  // New buffer from the caching allocator.
  CpuStorage(DType dtype, int64_t numel, bool zeroed);
  // Borrowed memory (DLPack, numpy): `release` runs when the storage dies.
  CpuStorage(DType dtype, int64_t numel, void* data, std::function<void()> release);
  ~CpuStorage() override;
  CpuStorage(const CpuStorage&) = delete;
  CpuStorage& operator=(const CpuStorage&) = delete;

  void* raw() const { return data_; }
  template <typename T> T* data() const { return static_cast<T*>(data_); }
  size_t nbytes() const { return (size_t)numel_ * itemsize(dtype_); }

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
  // cpu/batch_norm.cpp
  std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_fwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage* b,
                                                                const Layout* lb, BackendStorage* rm, const Layout* lrm,
                                                                BackendStorage* rv, const Layout* lrv, bool training,
                                                                double momentum, double eps) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_bwd(const Layout& l, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg, bool training) const override;
  // Fused kernels (cpu/fused.cpp).
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
  // cpu/fused.cpp
  StoragePtr rope(const Layout& l, const RopeArgs& a) const override;
  void optim_step(const OptimArgs& a) override;
  // cpu/rnn_cell.cpp
  std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_fwd(RnnCell kind, const Layout& l, const BackendStorage& hg,
                                                              const Layout& lhg, const BackendStorage* b,
                                                              const Layout* lb, const BackendStorage* s,
                                                              const Layout* ls) const override;
  std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_bwd(RnnCell kind, const Layout& l, const BackendStorage& ws,
                                                              const Layout& lws, const BackendStorage* s,
                                                              const Layout* ls, const BackendStorage* dc,
                                                              const Layout* ldc) const override;

 private:
  void* data_ = nullptr;
  std::function<void()> release_;  // empty when the buffer came from the allocator
};

using CpuStoragePtr = std::shared_ptr<CpuStorage>;
inline const CpuStorage& as_cpu(const BackendStorage& s) { return static_cast<const CpuStorage&>(s); }
inline CpuStorage& as_cpu(BackendStorage& s) { return static_cast<CpuStorage&>(s); }
inline CpuStoragePtr new_cpu(DType dt, int64_t n, bool zeroed = false) {
  return std::make_shared<CpuStorage>(dt, n, zeroed);
}

}  // namespace ember::cpu
