// nd_for_each: threaded iteration of N operands that share one shape, as runs along the innermost
// (jointly coalesced) dim. Every strided CPU kernel is a loop body handed to this.
#pragma once
#include <array>
#include <vector>

#include "cpu/parallel.h"
#include "layout.h"

namespace ember::cpu {

template <size_t N> struct NdPlan {
  Shape shape;                       // coalesced, size-1 dims dropped; empty means one element
  std::array<Shape, N> stride;
  std::array<int64_t, N> offset;
};

template <size_t N> NdPlan<N> make_plan(const Shape& shape, const std::array<const Layout*, N>& ls) {
  NdPlan<N> p;
  for (size_t k = 0; k < N; ++k) p.offset[k] = ls[k]->offset();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool merge = !p.shape.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = p.stride[k].back() == shape[i] * ls[k]->stride()[i];
    if (merge) {
      p.shape.back() *= shape[i];
      for (size_t k = 0; k < N; ++k) p.stride[k].back() = ls[k]->stride()[i];
    } else {
      p.shape.push_back(shape[i]);
      for (size_t k = 0; k < N; ++k) p.stride[k].push_back(ls[k]->stride()[i]);
    }
  }
  return p;
}

// f(const std::array<int64_t, N>& offsets, const std::array<int64_t, N>& inner_strides, int64_t len)
// `grain` is in elements.
template <size_t N, typename F>
void nd_for_each(const Shape& shape, const std::array<const Layout*, N>& ls, int64_t grain, F&& f) {
  int64_t total = shape_numel(shape);
  if (total == 0) return;
  const NdPlan<N> p = make_plan<N>(shape, ls);
  if (p.shape.empty()) {
    std::array<int64_t, N> st;
    st.fill(1);
    f(p.offset, st, (int64_t)1);
    return;
  }
  const int64_t nd = (int64_t)p.shape.size();
  const int64_t inner = p.shape[nd - 1];
  std::array<int64_t, N> ist;
  for (size_t k = 0; k < N; ++k) ist[k] = p.stride[k][nd - 1];
  parallel_for(total, grain, [&](int64_t b, int64_t e) {
    // decompose the linear start b into an outer multi-index and an inner position
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = b / inner, pos = b % inner;
    std::array<int64_t, N> off = p.offset;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * p.stride[k][d];
    }
    int64_t at = b;
    while (at < e) {
      int64_t len = std::min(inner - pos, e - at);
      std::array<int64_t, N> o;
      for (size_t k = 0; k < N; ++k) o[k] = off[k] + pos * ist[k];
      f(o, ist, len);
      at += len;
      pos = 0;
      for (int64_t d = nd - 2; d >= 0; --d) {
        if (++idx[d] < p.shape[d]) { for (size_t k = 0; k < N; ++k) off[k] += p.stride[k][d]; break; }
        for (size_t k = 0; k < N; ++k) off[k] -= p.stride[k][d] * (p.shape[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

// Elements per thread chunk below which threading costs more than it saves.
constexpr int64_t kGrain = 1 << 15;

}  // namespace ember::cpu
