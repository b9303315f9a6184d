// Layout: shape + stride (in elements) + start offset, the view rules, and strided block iteration.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error.h"

namespace ember {

using Shape = std::vector<int64_t>;
// The most dims a tensor may have (numpy's limit): past it, per-dim work in autograd and the kernels'
// index arithmetic grows without bound for no real use.
constexpr int64_t kMaxRank = 64;

int64_t shape_numel(const Shape& s);
// Element count of a shape from outside (Python, a file, a custom op): throws "[op] ..." on a
// negative dim, more than kMaxRank dims, or when the count (zero dims counted as 1) does not fit an int64.
int64_t checked_numel(const Shape& s, const char* op);
Shape contiguous_strides(const Shape& s);
// Normalises a possibly negative dim into [0, ndim); throws "[op] dim d out of range ..." otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);
// numpy broadcasting of two shapes; throws "[op] shapes ... cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

class Layout {
 public:
  Layout() = default;
  Layout(Shape shape, Shape stride, int64_t offset)
      : shape_(std::move(shape)), stride_(std::move(stride)), offset_(offset) {}
  static Layout contiguous(const Shape& shape, int64_t offset = 0) {
    return Layout(shape, contiguous_strides(shape), offset);
  }

  const Shape& shape() const { return shape_; }
  const Shape& stride() const { return stride_; }
  int64_t offset() const { return offset_; }
  int64_t ndim() const { return (int64_t)shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t dim(int64_t i) const { return shape_[i]; }

  bool is_contiguous() const;
  // (start, end) element range when the layout is row-major contiguous, else nullopt.
  std::optional<std::pair<int64_t, int64_t>> contiguous_offsets() const;
  // Smallest and one-past-largest element offsets touched (for bounds checks); (offset, offset) if empty.
  std::pair<int64_t, int64_t> extent() const;
  // Whether this layout and another over the same buffer reach a common element offset (exact: views that
  // interleave without touching, such as heads side by side in a packed projection, do not share).
  bool shares_element_with(const Layout& other) const;

  // Views: each returns a new layout over the same storage, never touching data.
  Layout transpose(int64_t d0, int64_t d1) const;
  Layout permute(const std::vector<int64_t>& dims) const;
  Layout narrow(int64_t dim, int64_t start, int64_t len) const;
  Layout slice(int64_t dim, int64_t start, int64_t stop, int64_t step) const;  // python-style bounds
  Layout select(int64_t dim, int64_t index) const;                             // removes dim
  Layout broadcast_as(const Shape& shape) const;
  Layout squeeze(int64_t dim) const;
  Layout unsqueeze(int64_t dim) const;
  // A view with the new shape when the strides allow it, else nullopt (the caller copies).
  std::optional<Layout> reshape(const Shape& shape) const;

  std::string repr() const;

 private:
  Shape shape_, stride_;
  int64_t offset_ = 0;
};

// Resolves one -1 in a requested shape against numel; throws "[reshape] ..." on mismatch.
Shape resolve_reshape(const Shape& req, int64_t numel);

// Calls f(offset, len, stride) for each innermost run of the layout, in row-major order:
// the elements are offset + k*stride, k < len. Adjacent dims are merged first, so a contiguous
// layout is one call.
template <typename F> void for_each_block(const Layout& l, F&& f);

}  // namespace ember

#include "layout_iter.h"
