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

}  // namespace ember::metal::ops
