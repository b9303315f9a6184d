// Lines along one dim: a layout split into its 1-D lines over the other dims, shared by every backend.
#pragma once
#include <cstdint>
#include <vector>

#include "layout.h"

namespace ember {

// The lines of `shape` along `dim`, read through two operands' strides (a: usually the input, b: the
// output). Line r is numbered row-major over the dims other than dim; `offsets` adds its element offset
// in each operand (the line itself steps by a_step / b_step, `n` elements).
struct Lines {
  Shape shape, a_stride, b_stride;  // the dims other than dim
  int64_t n = 0, a_step = 0, b_step = 0;
  int64_t count = 0;  // lines in all (0 when the line or any other dim is empty)

  void offsets(int64_t r, int64_t& a, int64_t& b) const {
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      const int64_t q = r % shape[d];
      a += q * a_stride[d];
      b += q * b_stride[d];
      r /= shape[d];
    }
  }
  // Appends shape, a_stride and b_stride to a kernel's metadata, each as {1} when there are no other
  // dims (a Metal kernel's arrays have at least one entry); returns the rank written.
  int64_t rank_for_meta() const { return shape.empty() ? 1 : (int64_t)shape.size(); }
  void append_meta(std::vector<int64_t>& meta) const {
    if (shape.empty()) {
      meta.insert(meta.end(), {1, 1, 1});
      return;
    }
    meta.insert(meta.end(), shape.begin(), shape.end());
    meta.insert(meta.end(), a_stride.begin(), a_stride.end());
    meta.insert(meta.end(), b_stride.begin(), b_stride.end());
  }
};

inline Lines lines_along(const Shape& shape, int64_t dim, const Shape& a_stride, const Shape& b_stride) {
  Lines ls;
  for (int64_t i = 0; i < (int64_t)shape.size(); ++i) {
    if (i == dim) continue;
    ls.shape.push_back(shape[i]);
    ls.a_stride.push_back(a_stride[i]);
    ls.b_stride.push_back(b_stride[i]);
  }
  ls.n = shape[dim];
  ls.a_step = a_stride[dim];
  ls.b_step = b_stride[dim];
  ls.count = ls.n == 0 ? 0 : shape_numel(shape) / ls.n;
  return ls;
}

// The usual case: input l (offset not included) into a new contiguous output of l's shape with dim of
// size `out_n` (k for topk, n for sort and scan). Lines, n and a_step are the input's; b_step the output's.
inline Lines lines_along(const Layout& l, int64_t dim, int64_t out_n) {
  Shape os = l.shape();
  os[dim] = out_n;
  return lines_along(l.shape(), dim, l.stride(), contiguous_strides(os));
}
inline Lines lines_along(const Layout& l, int64_t dim) { return lines_along(l, dim, l.shape()[dim]); }

}  // namespace ember
