// The Metal backend's launchers: one free function per MetalStorage method (the BackendStorage
// signature with the storage first), defined per op family in cpp/metal/ops/<family>.cpp.
#pragma once
#include <tuple>
#include <vector>

#include "backend.h"
#include "metal/metal_storage.h"

namespace ember::metal::ops {

// elementwise.cpp: every UnaryOp (affine / powf / clamp take p0, p1), every BinaryOp with broadcast
// strides (comparisons return bool).
StoragePtr unary(const MetalStorage& s, UnaryOp op, const Layout& l, double p0, double p1);
StoragePtr binary(const MetalStorage& s, BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl);

// copy.cpp: data movement and casts.
StoragePtr where(const MetalStorage& c, const Layout& cl, const BackendStorage& a, const Layout& al,
                 const BackendStorage& b, const Layout& bl);
StoragePtr to_dtype(const MetalStorage& s, const Layout& l, DType dt);
void copy_into(const MetalStorage& s, const Layout& l, BackendStorage& dst, const Layout& dl);
// (s, l) as a dense storage: s itself when l reads it from element 0 in order, else a copy (op names errors).
StoragePtr dense_or_copy(const MetalStorage& s, const Layout& l, const char* op);
void fill(MetalStorage& s, const Layout& l, double value);

// reduce.cpp
StoragePtr reduce(const MetalStorage& s, ReduceOp op, const Layout& l, const std::vector<int64_t>& dims);

// matmul.cpp
StoragePtr matmul(const MetalStorage& s, const Layout& l, const BackendStorage& rhs, const Layout& rl);

// index.cpp
StoragePtr index_select(const MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                        int64_t dim);
StoragePtr gather(const MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim);
void index_add(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
               const BackendStorage& src, const Layout& sl, int64_t dim);
void scatter_add(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                 const BackendStorage& src, const Layout& sl, int64_t dim);
void index_copy(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim);

// batch_norm.cpp (metal/batch_norm.metal)
std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_fwd(const MetalStorage& x, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb,
                                                              BackendStorage* rm, const Layout* lrm, BackendStorage* rv,
                                                              const Layout* lrv, bool training, double momentum,
                                                              double eps);
std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_bwd(const MetalStorage& x, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg,
                                                              bool training);

// fused.cpp: the fused kernels (every check is done by the entry points in cpp/fused.cpp).
StoragePtr softmax_fwd(const MetalStorage& s, const Layout& l, bool log);
StoragePtr softmax_bwd(const MetalStorage& s, const Layout& l, const BackendStorage& g, const Layout& lg, bool log);
std::tuple<StoragePtr, StoragePtr> rms_norm_fwd(const MetalStorage& s, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, double eps);
std::tuple<StoragePtr, StoragePtr> rms_norm_bwd(const MetalStorage& s, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, const BackendStorage& rstd,
                                                const BackendStorage& g, const Layout& lg);
std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_fwd(const MetalStorage& s, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb, double eps);
std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_bwd(const MetalStorage& s, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg);
StoragePtr act_bwd(const MetalStorage& s, ActKind kind, const Layout& l, const BackendStorage& g, const Layout& lg,
                   double p0, double p1);
std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const MetalStorage& s, const SdpaArgs& a);
std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const MetalStorage& s, const SdpaArgs& a,
                                                        const BackendStorage& o, const Layout& lo,
                                                        const BackendStorage& lse, const BackendStorage& g,
                                                        const Layout& lg);
StoragePtr rope(const MetalStorage& s, const Layout& l, const RopeArgs& a);

// optim.cpp: one fused optimizer step in place (OptimArgs, backend.h), float32.
void optim_step(MetalStorage& p, const OptimArgs& a);

}  // namespace ember::metal::ops
