// Sort along one dim on CPU: each independent line is copied into (key, index) pairs, ordered with
// std::sort under a total order (NaN largest, ties by index, so the result is also stable), and written out.
#include <algorithm>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"

namespace ember::cpu {
namespace {

template <typename K> inline bool isnan_key(K v) { return v != v; }

template <typename K> struct Pair {
  K key;
  int64_t idx;
};

// a comes before b: ascending puts NaN last, descending puts NaN first (torch's rule); equal keys
// (NaN == NaN here) keep index order.
template <typename K> struct Before {
  bool desc;
  bool operator()(const Pair<K>& a, const Pair<K>& b) const {
    const bool an = isnan_key(a.key), bn = isnan_key(b.key);
    if (an != bn) return desc ? an : bn;
    if (!an && a.key != b.key) return desc ? a.key > b.key : a.key < b.key;
    return a.idx < b.idx;
  }
};

// The storage offsets of line r: the input's (over the non-sorted dims of l) and the contiguous output's.
struct Lines {
  Shape shape, in_stride, out_stride;
  int64_t in_offset(int64_t r, int64_t base) const {
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      base += (r % shape[d]) * in_stride[d];
      r /= shape[d];
    }
    return base;
  }
  int64_t out_offset(int64_t r) const {
    int64_t o = 0;
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      o += (r % shape[d]) * out_stride[d];
      r /= shape[d];
    }
    return o;
  }
};
Lines lines_of(const Layout& l, int64_t dim) {
  Lines ls;
  const Shape cs = contiguous_strides(l.shape());
  for (int64_t i = 0; i < l.ndim(); ++i) {
    if (i == dim) continue;
    ls.shape.push_back(l.shape()[i]);
    ls.in_stride.push_back(l.stride()[i]);
    ls.out_stride.push_back(cs[i]);
  }
  return ls;
}

template <typename T>
void sort_lines(const T* in, const Layout& l, int64_t dim, bool desc, T* vals, int64_t* ids) {
  using K = typename Acc<T>::type;
  const Lines ls = lines_of(l, dim);
  const int64_t n = l.shape()[dim], is = l.stride()[dim], os = contiguous_strides(l.shape())[dim];
  const int64_t nlines = n == 0 ? 0 : l.numel() / n;
  parallel_for(nlines, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<Pair<K>> buf((size_t)n);
    for (int64_t r = b; r < e; ++r) {
      const T* src = in + ls.in_offset(r, l.offset());
      if (is == 1) {  // contiguous line: no stride multiply in the load loop
        for (int64_t k = 0; k < n; ++k) buf[k] = {load<T>(src[k]), k};
      } else {
        for (int64_t k = 0; k < n; ++k) buf[k] = {load<T>(src[k * is]), k};
      }
      std::sort(buf.begin(), buf.end(), Before<K>{desc});
      const int64_t o = ls.out_offset(r);
      for (int64_t k = 0; k < n; ++k) {
        vals[o + k * os] = store<T>(buf[k].key);
        ids[o + k * os] = buf[k].idx;
      }
    }
  });
}

}  // namespace

std::tuple<StoragePtr, StoragePtr> CpuStorage::sort(const Layout& l, int64_t dim, bool descending,
                                                    bool stable) const {
  (void)stable;  // the order is total (ties by index), so every sort here is stable
  auto vals = new_cpu(dtype_, l.numel());
  auto ids = new_cpu(DType::I64, l.numel());
  EMBER_DISPATCH(dtype_, sort_lines<T>(data<T>(), l, dim, descending, vals->data<T>(), ids->data<int64_t>()));
  return {vals, ids};
}

}  // namespace ember::cpu
