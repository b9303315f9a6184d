// Inline strided iteration over a Layout (for_each_block), kept out of layout.h for readability.
#pragma once
#include <vector>

namespace ember {

// Merges dims i and i+1 when stride[i] == shape[i+1]*stride[i+1]; drops size-1 dims.
inline void coalesce(Shape& shape, Shape& stride) {
  Shape sh, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!sh.empty() && st.back() == shape[i] * stride[i]) {
      sh.back() *= shape[i];
      st.back() = stride[i];
    } else {
      sh.push_back(shape[i]);
      st.push_back(stride[i]);
    }
  }
  shape.swap(sh);
  stride.swap(st);
}

template <typename F> void for_each_block(const Layout& l, F&& f) {
  if (l.numel() == 0) return;
  Shape sh = l.shape(), st = l.stride();
  coalesce(sh, st);
  if (sh.empty()) { f(l.offset(), (int64_t)1, (int64_t)1); return; }
  const int64_t nd = (int64_t)sh.size();
  const int64_t inner = sh[nd - 1], inner_st = st[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t off = l.offset();
  while (true) {
    f(off, inner, inner_st);
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < sh[d]) { off += st[d]; break; }
      off -= st[d] * (sh[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace ember
