// sort's and topk's kernel families: every line along one dim ordered, or its first k (see registry.h).
#pragma once
#include <cstdint>
#include <tuple>

#include "../backend.h"

namespace ember {

// Sorts every line of x (through l) along `dim` (0 <= dim < ndim, checked by the seam in storage.cpp):
// returns (values, int64 indices into the line), contiguous of l's shape. NaN sorts as the largest value;
// equal keys keep index order when `stable` (backends may always do so).
struct Sort {
  static constexpr const char* kName = "sort";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l, int64_t dim,
                                                    bool descending, bool stable);
};

// The first k elements of every line along `dim` in sort's order (largest first when `largest`; NaN is
// the largest value; equal keys in index order), selected without sorting the whole line: returns
// (values, int64 indices), contiguous of l's shape with dim of size k (0 <= k <= n, checked by the seam).
struct Topk {
  static constexpr const char* kName = "topk";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l, int64_t dim,
                                                    int64_t k, bool largest);
};

}  // namespace ember
