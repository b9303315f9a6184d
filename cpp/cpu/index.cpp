// Indexing kernels on CPU: index_select, gather, their adjoints index_add, scatter_add, and index_copy (t[ids] = v).
// Every index is bounds-checked before any write, so bad input raises instead of corrupting memory.
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/nditer.h"

namespace ember::cpu {
namespace {

// Reads the indices (any integer dtype, any layout) into int64, checking 0 <= i < limit
// (negative indices count from the end, as in torch).
std::vector<int64_t> read_ids(const CpuStorage& ids, const Layout& il, int64_t limit, const char* op) {
  std::vector<int64_t> v;
  v.reserve(il.numel());
  EMBER_DISPATCH(ids.dtype(), {
    const T* p = ids.data<T>();
    for_each_block(il, [&](int64_t off, int64_t len, int64_t st) {
      for (int64_t k = 0; k < len; ++k) {
        int64_t i = (int64_t)load(p[off + k * st]);
        if (i < 0) i += limit;
        EMBER_CHECK(i >= 0 && i < limit, Index, "[", op, "] index ", (int64_t)load(p[off + k * st]),
                    " out of range for a dim of size ", limit);
        v.push_back(i);
      }
    });
  });
  return v;
}

}  // namespace

StoragePtr CpuStorage::index_select(const Layout& l, const BackendStorage& ids_, const Layout& il,
                                    int64_t dim) const {
  auto ids = read_ids(as_cpu(ids_), il, l.shape()[dim], "index_select");
  Shape os = l.shape();
  os[dim] = (int64_t)ids.size();
  auto out = new_cpu(dtype_, shape_numel(os));
  Layout ol = Layout::contiguous(os);
  for (size_t j = 0; j < ids.size(); ++j)
    copy_into(l.narrow(dim, ids[j], 1), *out, ol.narrow(dim, (int64_t)j, 1));
  return out;
}

StoragePtr CpuStorage::gather(const Layout& l, const BackendStorage& ids_, const Layout& il, int64_t dim) const {
  auto ids = read_ids(as_cpu(ids_), il, l.shape()[dim], "gather");
  auto out = new_cpu(dtype_, il.numel());
  // Walk the index tensor's shape; the source position uses l's strides with dim replaced by ids[k].
  Layout src = Layout(il.shape(), l.stride(), l.offset());
  Shape zst = l.stride();
  zst[dim] = 0;
  Layout src0 = Layout(il.shape(), zst, l.offset());
  Layout lin = Layout::contiguous(il.shape());
  const int64_t dstride = l.stride()[dim];
  EMBER_DISPATCH(dtype_, {
    const T* in = data<T>();
    T* o = out->data<T>();
    nd_for_each<2>(il.shape(), {&src0, &lin}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = off[1] + i * st[1];
        o[k] = in[off[0] + i * st[0] + ids[k] * dstride];
      }
    });
  });
  (void)src;
  return out;
}

void CpuStorage::index_add(const Layout& l, const BackendStorage& ids_, const Layout& il, const BackendStorage& src_,
                           const Layout& sl, int64_t dim) {
  auto ids = read_ids(as_cpu(ids_), il, l.shape()[dim], "index_add");
  const auto& src = as_cpu(src_);
  // Serial over the index list (repeated indices accumulate), parallel inside each slice.
  EMBER_DISPATCH(dtype_, {
    T* o = data<T>();
    const T* s = src.data<T>();
    for (size_t j = 0; j < ids.size(); ++j) {
      Layout dl = l.narrow(dim, ids[j], 1), ssl = sl.narrow(dim, (int64_t)j, 1);
      nd_for_each<2>(dl.shape(), {&dl, &ssl}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          T& d = o[off[0] + i * st[0]];
          d = store<T>(load(d) + load(s[off[1] + i * st[1]]));
        }
      });
    }
  });
  bump_version();
}

void CpuStorage::index_copy(const Layout& l, const BackendStorage& ids_, const Layout& il, const BackendStorage& src_,
                            const Layout& sl, int64_t dim) {
  // Every index is read and checked before the first write: a bad one leaves the tensor untouched.
  auto ids = read_ids(as_cpu(ids_), il, l.shape()[dim], "setitem");
  // Serial over the index list, so a repeated index keeps its last slice (as numpy and torch on CPU);
  // each slice is one strided copy (contiguous runs become memcpy, large ones use the pool).
  for (size_t j = 0; j < ids.size(); ++j)
    src_.copy_into(sl.narrow(dim, (int64_t)j, 1), *this, l.narrow(dim, ids[j], 1));
  bump_version();
}

void CpuStorage::scatter_add(const Layout& l, const BackendStorage& ids_, const Layout& il,
                             const BackendStorage& src_, const Layout& sl, int64_t dim) {
  auto ids = read_ids(as_cpu(ids_), il, l.shape()[dim], "scatter_add");
  const auto& src = as_cpu(src_);
  Shape zst = l.stride();
  zst[dim] = 0;
  Layout dst0 = Layout(il.shape(), zst, l.offset());
  Layout lin = Layout::contiguous(il.shape());
  const int64_t dstride = l.stride()[dim];
  // Serial: different index positions may hit the same destination.
  EMBER_DISPATCH(dtype_, {
    T* o = data<T>();
    const T* s = src.data<T>();
    std::vector<int64_t> soffs;
    soffs.reserve(sl.numel());
    for_each_block(sl, [&](int64_t off, int64_t len, int64_t st) {
      for (int64_t k = 0; k < len; ++k) soffs.push_back(off + k * st);
    });
    int64_t k = 0;
    for_each_block(dst0, [&](int64_t off, int64_t len, int64_t st) {
      for (int64_t i = 0; i < len; ++i, ++k) {
        T& d = o[off + i * st + ids[k] * dstride];
        d = store<T>(load(d) + load(s[soffs[k]]));
      }
    });
  });
  bump_version();
}

}  // namespace ember::cpu
