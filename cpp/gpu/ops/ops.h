// The GPU launchers of the core trait: one free function per GpuStorage method (the BackendStorage signature
// with the storage first), defined per op family in cpp/gpu/ops/<family>.cpp, for every GPU backend.
#pragma once
#include <tuple>
#include <vector>

#include "backend.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_storage.h"

namespace ember::gpu::ops {

// A new storage for an op's result on dev (refuses a dtype dev does not hold, naming `op`).
inline GpuStoragePtr new_storage(GpuDevice& dev, DType dt, int64_t numel, const char* op) {
  return dev.new_storage(dt, numel, op);
}

// elementwise.cpp: every UnaryOp (affine / powf / clamp take p0, p1), every BinaryOp with broadcast
// strides (comparisons return bool).
StoragePtr unary(const GpuStorage& s, UnaryOp op, const Layout& l, double p0, double p1);
StoragePtr binary(const GpuStorage& s, BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl);

// copy.cpp: data movement and casts.
StoragePtr where(const GpuStorage& c, const Layout& cl, const BackendStorage& a, const Layout& al,
                 const BackendStorage& b, const Layout& bl);
StoragePtr to_dtype(const GpuStorage& s, const Layout& l, DType dt);
void copy_into(const GpuStorage& s, const Layout& l, BackendStorage& dst, const Layout& dl);
// (s, l) as a dense storage: s itself when l reads it from element 0 in order, else a copy (op names errors).
StoragePtr dense_or_copy(const GpuStorage& s, const Layout& l, const char* op);
void fill(GpuStorage& s, const Layout& l, double value);

// reduce.cpp
StoragePtr reduce(const GpuStorage& s, ReduceOp op, const Layout& l, const std::vector<int64_t>& dims);

// matmul.cpp
StoragePtr matmul(const GpuStorage& s, const Layout& l, const BackendStorage& rhs, const Layout& rl);

// index.cpp
StoragePtr index_select(const GpuStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                        int64_t dim);
StoragePtr gather(const GpuStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim);
void index_add(GpuStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
               const BackendStorage& src, const Layout& sl, int64_t dim);
void scatter_add(GpuStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                 const BackendStorage& src, const Layout& sl, int64_t dim);
void index_copy(GpuStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim);

}  // namespace ember::gpu::ops
