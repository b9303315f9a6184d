// Indexing kernels on CPU: index_select, gather, their adjoints index_add, scatter_add, index_copy (t[ids] = v)
// and scatter_reduce (scatter, sum, prod, mean, amax, amin).
// Every index is bounds-checked before any write, so bad input raises instead of corrupting memory.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/nditer.h"
#include "families/scatter.h"
#include "lines.h"
#include "registry.h"

namespace ember::cpu {
namespace {

// The indices (any integer dtype, any layout) as int64 values in [0, limit), in the index tensor's
// row-major order; negative indices count from the end, as in torch. A contiguous int64 index tensor
// with every entry already in range is used where it lies (one threaded check, no copy: an embedding
// lookup's 16 MB of indices used to be converted and zero-filled first); anything else is converted
// into an owned array. A bad index raises before any kernel writes.
class Ids {
 public:
  Ids(const CpuStorage& ids, const Layout& il, int64_t limit, const char* op) : n_(il.numel()) {
    if (ids.dtype() == DType::I64 && il.is_contiguous()) {
      const int64_t* p = ids.data<int64_t>() + il.offset();
      if (in_range(p, n_, limit)) {
        p_ = p;
        return;
      }
    }
    own_.reset(new int64_t[(size_t)std::max<int64_t>(n_, 1)]);  // no zero fill: every entry is written
    int64_t* out = own_.get();
    bool bad = false;
    EMBER_DISPATCH(ids.dtype(), {
      const T* p = ids.data<T>();
      for_each_block(il, [&](int64_t off, int64_t len, int64_t st) {
        for (int64_t k = 0; k < len; ++k) {
          int64_t i = (int64_t)load(p[off + k * st]);
          i += i < 0 ? limit : 0;
          bad |= (uint64_t)i >= (uint64_t)limit;
          *out++ = i;
        }
      });
    });
    p_ = own_.get();
    if (bad)  // the message names the index as the user wrote it
      for (int64_t k = 0; k < n_; ++k)
        EMBER_CHECK((uint64_t)p_[k] < (uint64_t)limit, Index, "[", op, "] index ", p_[k] < 0 ? p_[k] - limit : p_[k],
                    " out of range for a dim of size ", limit);
  }
  const int64_t* data() const { return p_; }
  int64_t size() const { return n_; }
  int64_t operator[](int64_t k) const { return p_[k]; }

 private:
  // Is every p[k] in [0, limit)? Threaded over large arrays; a branch-free pass the compiler vectorises.
  static bool in_range(const int64_t* p, int64_t n, int64_t limit) {
    std::atomic<bool> ok{true};
    parallel_for(n, int64_t(1) << 16, [&](int64_t b, int64_t e) {
      bool bad = false;
      for (int64_t k = b; k < e; ++k) bad |= (uint64_t)p[k] >= (uint64_t)limit;
      if (bad) ok.store(false);
    });
    return ok.load();
  }

  const int64_t* p_ = nullptr;
  int64_t n_ = 0;
  std::unique_ptr<int64_t[]> own_;
};

// A layout seen as [outer, dim, inner] with one contiguous inner run: element (o, i, k) sits at
// off + o*so + i*sd + k. as_blocks fails when the dims after `dim` are not one dense run or the dims
// before it do not collapse into one stride; the kernels then take their general strided path.
struct Blocks {
  int64_t outer = 1, so = 0, sd = 0, inner = 1, off = 0;
  int64_t at(int64_t o, int64_t i) const { return off + o * so + i * sd; }
};
bool as_blocks(const Layout& l, int64_t dim, Blocks& b) {
  const Shape& sh = l.shape();
  const Shape& st = l.stride();
  b = Blocks{};
  b.off = l.offset();
  b.sd = st[dim];
  for (int64_t i = l.ndim() - 1; i > dim; --i) {
    if (sh[i] == 1) continue;
    if (st[i] != b.inner) return false;
    b.inner *= sh[i];
  }
  for (int64_t i = dim - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;
    if (b.outer == 1) b.so = st[i];
    else if (st[i] != b.so * b.outer) return false;
    b.outer *= sh[i];
  }
  return true;
}

// Rows of `bytes` bytes per parallel chunk: about 64 KB of copying, so small selections stay inline.
int64_t row_grain(int64_t bytes) { return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(bytes, 1)); }

// Copies one element of isz bytes (a constant-size copy per case: no memcpy call per element).
inline void copy_elem(char* d, const char* s, size_t isz) {
  switch (isz) {
    case 1: std::memcpy(d, s, 1); break;
    case 2: std::memcpy(d, s, 2); break;
    case 4: std::memcpy(d, s, 4); break;
    default: std::memcpy(d, s, 8); break;
  }
}

// Copies rows (o, ids[j]) of src into rows (o, j) of dst, or the reverse when `scatter`: one memcpy per
// inner run. Rows are independent unless `scatter` has repeated indices, which the caller serialises.
void copy_rows(const char* src, const Blocks& sb, char* dst, const Blocks& db, const Ids& ids, size_t isz,
               bool scatter, bool parallel) {
  const int64_t k = ids.size(), rows = sb.outer * k;
  if (rows == 0) return;
  const size_t rb = (size_t)sb.inner * isz;
  auto body = [&](int64_t r0, int64_t r1) {
    int64_t o = r0 / k, j = r0 % k;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t si = scatter ? sb.at(o, j) : sb.at(o, ids[j]), di = scatter ? db.at(o, ids[j]) : db.at(o, j);
      if (rb == isz) copy_elem(dst + di * isz, src + si * isz, isz);
      else std::memcpy(dst + di * isz, src + si * isz, rb);
      if (++j == k) j = 0, ++o;
    }
  };
  if (rb == isz && !scatter) {  // single elements (a selection along the last dim): one typed loop per outer row
    auto pick = [&](auto tag) {
      using E = decltype(tag);
      const E* s = reinterpret_cast<const E*>(src);
      E* d = reinterpret_cast<E*>(dst);
      parallel_for(sb.outer, std::max<int64_t>(1, row_grain(k * (int64_t)isz)), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const E* srow = s + sb.at(o, 0);
          E* drow = d + db.at(o, 0);
          for (int64_t j = 0; j < k; ++j) drow[j * db.sd] = srow[ids[j] * sb.sd];
        }
      });
    };
    switch (isz) {
      case 1: pick(uint8_t{}); return;
      case 2: pick(uint16_t{}); return;
      case 4: pick(uint32_t{}); return;
      default: pick(uint64_t{}); return;
    }
  }
  if (parallel) parallel_for(rows, row_grain((int64_t)rb), body);
  else body(0, rows);
}

// True when no index appears twice (then rows written through ids may be written in any order): a
// bitmap over the dim when it is not much longer than the list, else a sorted copy.
bool all_distinct(const Ids& ids, int64_t limit) {
  const int64_t n = ids.size();
  if (limit <= 64 * n) {
    std::vector<uint8_t> seen((size_t)limit, 0);
    for (int64_t k = 0; k < n; ++k) {
      if (seen[(size_t)ids[k]]) return false;
      seen[(size_t)ids[k]] = 1;
    }
    return true;
  }
  std::vector<int64_t> s(ids.data(), ids.data() + n);
  std::sort(s.begin(), s.end());
  return std::adjacent_find(s.begin(), s.end()) == s.end();
}

// out[k] = src[k with dim replaced by ids[k]], walking the index tensor's shape. With `checked` the
// indices are raw int64 values read where they lie: each is bounds-checked as it is used (an index out
// of [0, limit) reads element 0 instead and clears `ok`), so a large gather reads its indices once.
template <bool checked>
bool gather_into(const CpuStorage& s, const Layout& l, const int64_t* id, const Layout& il, int64_t dim,
                 CpuStorage& out) {
  Shape zst = l.stride();
  zst[dim] = 0;
  const Layout src0 = Layout(il.shape(), zst, l.offset());
  const Layout lin = Layout::contiguous(il.shape());
  const int64_t dstride = l.stride()[dim];
  const uint64_t limit = (uint64_t)l.shape()[dim];
  std::atomic<bool> ok{true};
  EMBER_DISPATCH(s.dtype(), {
    const T* in = s.data<T>();
    T* o = out.data<T>();
    nd_for_each<2>(il.shape(), {&src0, &lin}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
      const T* src = in + off[0];
      T* d = o + off[1];
      const int64_t* ik = id + off[1];
      bool bad = false;
      auto pos = [&](int64_t j) {
        if constexpr (checked) {
          bad |= (uint64_t)j >= limit;
          return (uint64_t)j < limit ? j : 0;  // a select, not a branch: the loop stays tight
        } else {
          return j;
        }
      };
      if (st[1] == 1 && st[0] == 1)
        for (int64_t i = 0; i < n; ++i) d[i] = src[i + pos(ik[i]) * dstride];
      else if (st[1] == 1 && st[0] == 0)  // along the innermost dim (cross-entropy's pick)
        for (int64_t i = 0; i < n; ++i) d[i] = src[pos(ik[i]) * dstride];
      else
        for (int64_t i = 0; i < n; ++i) d[i * st[1]] = src[i * st[0] + pos(ik[i * st[1]]) * dstride];
      if (bad) ok.store(false, std::memory_order_relaxed);
    });
  });
  return ok.load();
}


// ---- scatter_reduce. A: the arithmetic type (float for halves). Integers wrap, as torch's do.
template <typename A> EMBER_INLINE A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) return (A)((std::make_unsigned_t<A>)a + (std::make_unsigned_t<A>)b);
  else return a + b;
}
template <typename A> EMBER_INLINE A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) return (A)((uint64_t)a * (uint64_t)b);
  else return a * b;
}
// amax/amin propagate NaN, as torch's do: a NaN from src is taken, a NaN already there stays.
template <ScatterOp op, typename A> EMBER_INLINE A combine(A a, A b) {
  if constexpr (op == ScatterOp::Set) return b;
  else if constexpr (op == ScatterOp::Sum || op == ScatterOp::Mean) return wrap_add(a, b);
  else if constexpr (op == ScatterOp::Prod) return wrap_mul(a, b);
  else if constexpr (op == ScatterOp::Max) return (b != b || a < b) ? b : a;
  else return (b != b || b < a) ? b : a;
}
// The start of a position that only src's elements reach (include_self=False).
template <ScatterOp op, typename A> constexpr A identity() {
  if constexpr (op == ScatterOp::Prod) return A(1);
  else if constexpr (op == ScatterOp::Max)
    return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
  else if constexpr (op == ScatterOp::Min)
    return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
  else return A(0);
}
// mean's division: floor division for integers (torch's rounding), one rounding for floats.
template <typename A> EMBER_INLINE A mean_div(A sum, uint32_t n) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
    const A q = sum / (A)n;
    return (q * (A)n != sum && sum < 0) ? q - 1 : q;
  } else {
    return sum / (A)n;
  }
}

// The lines along dim: column c (the index position with dim left out) reads ids[ib + i*inner] and
// src[sb + i*ss], and writes out[ob + id*os], for i in 0..k in order. Columns never share an output
// element, so threads split them; each walks its line in index order (bit-identical on any thread count).

template <ScatterOp op, typename T>
void scatter_kernel(T* out, const Layout& ol, const Ids& ids, const T* src, const Layout& sl, const Layout& il,
                    int64_t dim, bool include_self) {
  using A = typename Acc<T>::type;
  const Shape& ish = il.shape();
  const int64_t nd = (int64_t)ish.size(), k = ish[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < nd; ++d) inner *= ish[d];
  const int64_t cols = k ? il.numel() / k : 0;
  if (cols == 0) return;
  const int64_t os = ol.stride()[dim], ss = sl.stride()[dim];
  bool dense = sl.is_contiguous();
  for (int64_t d = 0; d < nd && dense; ++d) dense = d == dim || ish[d] == ol.shape()[d];
  const int64_t D = ol.shape()[dim];
  std::vector<uint32_t> cnt(op == ScatterOp::Mean ? (size_t)ol.numel() : 0, 0u);
  T* o = out + ol.offset();
  const T* sp = src + sl.offset();
  // base offsets (out, src) of column c in the general layout: line c of the indices' shape
  const Lines cl = lines_along(ish, dim, ol.stride(), sl.stride());
  // A run of `len` adjacent columns starting at c0 whose out/src bases step by 1 (dense) or a single
  // column (general): three passes over its lines, each in index order.
  auto run = [&](int64_t c0, int64_t len, int64_t ob, int64_t sb, int64_t ostep, int64_t sstep) {
    const int64_t ib = (c0 / inner) * k * inner + c0 % inner;
    if (!include_self && op != ScatterOp::Set)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t q = 0; q < len; ++q) o[ob + q * ostep + ids[ib + i * inner + q] * os] = store<T>(identity<op, A>());
    for (int64_t i = 0; i < k; ++i) {
      const int64_t* id = ids.data() + ib + i * inner;
      const T* x = sp + sb + i * ss;
      for (int64_t q = 0; q < len; ++q) {
        const int64_t p = ob + q * ostep + id[q] * os;
        o[p] = store<T>(combine<op, A>(load(o[p]), load(x[q * sstep])));
        if constexpr (op == ScatterOp::Mean) ++cnt[(size_t)p];
      }
    }
    if constexpr (op == ScatterOp::Mean)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t q = 0; q < len; ++q) {
          const int64_t p = ob + q * ostep + ids[ib + i * inner + q] * os;
          if (cnt[(size_t)p]) {  // once per element: the count is cleared after the division
            o[p] = store<T>(mean_div<A>(load(o[p]), cnt[(size_t)p] + (include_self ? 1u : 0u)));
            cnt[(size_t)p] = 0;
          }
        }
  };
  parallel_for(cols, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)), [&](int64_t c0, int64_t c1) {
    if (dense) {
      for (int64_t c = c0; c < c1;) {
        const int64_t oo = c / inner, i0 = c % inner, len = std::min(inner - i0, c1 - c);
        run(c, len, oo * D * inner + i0, oo * k * inner + i0, 1, 1);
        c += len;
      }
      return;
    }
    for (int64_t c = c0; c < c1; ++c) {
      int64_t ob = 0, sb = 0;
      cl.offsets(c, ob, sb);
      run(c, 1, ob, sb, 0, 0);
    }
  });
}

template <ScatterOp op>
void scatter_dispatch(CpuStorage& out, const Layout& ol, const Ids& ids, const CpuStorage& src, const Layout& sl,
                      const Layout& il, int64_t dim, bool include_self) {
  EMBER_DISPATCH_BOOL_AS_U8(out.dtype(), {
    scatter_kernel<op, T>(out.data<T>(), ol, ids, src.data<T>(), sl, il, dim, include_self);
  });
}
}  // namespace

StoragePtr CpuStorage::index_select(const Layout& l, const BackendStorage& ids_, const Layout& il,
                                    int64_t dim) const {
  const Ids ids(as_cpu(ids_), il, l.shape()[dim], "index_select");
  Shape os = l.shape();
  os[dim] = ids.size();
  auto out = new_cpu(dtype_, shape_numel(os));
  Layout ol = Layout::contiguous(os);
  Blocks sb, ob;
  if (as_blocks(l, dim, sb) && as_blocks(ol, dim, ob)) {  // the common case: whole rows, one memcpy each
    copy_rows(static_cast<const char*>(raw()), sb, static_cast<char*>(out->raw()), ob, ids, itemsize(dtype_),
              false, true);
    return out;
  }
  for (int64_t j = 0; j < ids.size(); ++j)
    copy_into(l.narrow(dim, ids[j], 1), *out, ol.narrow(dim, (int64_t)j, 1));
  return out;
}

StoragePtr CpuStorage::gather(const Layout& l, const BackendStorage& ids_, const Layout& il, int64_t dim) const {
  const auto& ic = as_cpu(ids_);
  auto out = new_cpu(dtype_, il.numel());
  // Large dense int64 indices are checked inside the gather (one pass over them instead of two). Small
  // ones take the up-front check, which measured faster there.
  // Negative or bad indices then redo the gather through Ids, which converts the negative ones and
  // names a bad one in its error; nothing but the fresh output was written.
  constexpr int64_t kCheckInKernel = int64_t(1) << 16;
  // (A dim of size 0 has no element 0 to read in place of a bad index: Ids refuses every index there.)
  if (ic.dtype() == DType::I64 && il.is_contiguous() && il.numel() >= kCheckInKernel && l.shape()[dim] > 0 &&
      gather_into<true>(*this, l, ic.data<int64_t>() + il.offset(), il, dim, *out))
    return out;
  const Ids ids(ic, il, l.shape()[dim], "gather");
  gather_into<false>(*this, l, ids.data(), il, dim, *out);
  return out;
}

void CpuStorage::index_add(const Layout& l, const BackendStorage& ids_, const Layout& il, const BackendStorage& src_,
                           const Layout& sl, int64_t dim) {
  const Ids ids(as_cpu(ids_), il, l.shape()[dim], "index_add");
  const auto& src = as_cpu(src_);
  Blocks db, sb;
  if (as_blocks(l, dim, db) && as_blocks(sl, dim, sb)) {
    // Threads split the (outer, inner) columns; each adds the rows in index order, so repeated indices
    // accumulate in the same order on any thread count (bit-identical results).
    const int64_t k = ids.size(), cols = db.outer * db.inner;
    EMBER_DISPATCH(dtype_, {
      T* o = data<T>();
      const T* s = src.data<T>();
      parallel_for(cols, std::max<int64_t>(64, kGrain / std::max<int64_t>(k, 1)), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1;) {  // one run of inner columns within an outer block at a time
          const int64_t oo = c / db.inner, i0 = c % db.inner, len = std::min(db.inner - i0, c1 - c);
          for (int64_t j = 0; j < k; ++j) {
            T* d = o + db.at(oo, ids[j]) + i0;
            const T* x = s + sb.at(oo, j) + i0;
            for (int64_t i = 0; i < len; ++i) d[i] = store<T>(load(d[i]) + load(x[i]));
          }
          c += len;
        }
      });
    });
    return;
  }
  // General strided layouts: serial over the index list (repeated indices accumulate), parallel inside
  // each slice.
  EMBER_DISPATCH(dtype_, {
    T* o = data<T>();
    const T* s = src.data<T>();
    for (int64_t j = 0; j < ids.size(); ++j) {
      Layout dl = l.narrow(dim, ids[j], 1), ssl = sl.narrow(dim, (int64_t)j, 1);
      nd_for_each<2>(dl.shape(), {&dl, &ssl}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          T& d = o[off[0] + i * st[0]];
          d = store<T>(load(d) + load(s[off[1] + i * st[1]]));
        }
      });
    }
  });
}

void CpuStorage::scatter_add(const Layout& l, const BackendStorage& ids_, const Layout& il,
                             const BackendStorage& src_, const Layout& sl, int64_t dim) {
  const Ids ids(as_cpu(ids_), il, l.shape()[dim], "scatter_add");
  const auto& src = as_cpu(src_);
  // Two index positions can only meet when they differ along dim alone, so the lines along dim are
  // independent: threads split them, and each line adds its elements in index order, as a serial walk
  // would (the same sums, bit for bit, on any thread count).
  bool dense = il.is_contiguous() && sl.is_contiguous() && l.is_contiguous();
  for (int64_t d = 0; d < l.ndim() && dense; ++d) dense = d == dim || il.shape()[d] == l.shape()[d];
  if (dense) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= il.shape()[d];
    for (int64_t d = dim + 1; d < il.ndim(); ++d) inner *= il.shape()[d];
    const int64_t ki = il.shape()[dim], D = l.shape()[dim], cols = outer * inner;
    EMBER_DISPATCH(dtype_, {
      T* o = data<T>() + l.offset();
      const T* s = src.data<T>() + sl.offset();
      parallel_for(cols, std::max<int64_t>(1, kGrain / std::max<int64_t>(ki, 1)), [&](int64_t c0, int64_t c1) {
        if (inner == 1) {  // along the innermost dim: each line is a row of ids and of src
          for (int64_t c = c0; c < c1; ++c) {
            T* dst = o + c * D;
            const int64_t* id = ids.data() + c * ki;
            const T* sr = s + c * ki;
            for (int64_t i = 0; i < ki; ++i) dst[id[i]] = store<T>(load(dst[id[i]]) + load(sr[i]));
          }
          return;
        }
        for (int64_t c = c0; c < c1;) {
          const int64_t oo = c / inner, i0 = c % inner, len = std::min(inner - i0, c1 - c);
          T* dst = o + oo * D * inner + i0;
          for (int64_t i = 0; i < ki; ++i) {
            const int64_t base = (oo * ki + i) * inner + i0;
            const int64_t* id = ids.data() + base;
            for (int64_t q = 0; q < len; ++q) {
              T& d = dst[id[q] * inner + q];
              d = store<T>(load(d) + load(s[base + q]));
            }
          }
          c += len;
        }
      });
    });
    return;
  }
  Shape zst = l.stride();
  zst[dim] = 0;
  Layout dst0 = Layout(il.shape(), zst, l.offset());
  const int64_t dstride = l.stride()[dim];
  // General layouts: serial, since different index positions may hit the same destination.
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
}

void CpuStorage::index_copy(const Layout& l, const BackendStorage& ids_, const Layout& il, const BackendStorage& src_,
                            const Layout& sl, int64_t dim) {
  // Every index is read and checked before the first write: a bad one leaves the tensor untouched.
  const int64_t limit = l.shape()[dim];
  const Ids ids(as_cpu(ids_), il, limit, "setitem");
  Blocks db, sb;
  if (as_blocks(l, dim, db) && as_blocks(sl, dim, sb)) {
    // A repeated index keeps its last row (as numpy and torch on CPU): then the rows go in index order
    // on one thread; distinct indices may be written by any thread.
    const size_t isz = itemsize(dtype_);
    const bool big = (int64_t)ids.size() * db.outer * db.inner * (int64_t)isz >= (int64_t(1) << 16);
    copy_rows(static_cast<const char*>(as_cpu(src_).raw()), sb, static_cast<char*>(raw()), db, ids, isz, true,
              big && all_distinct(ids, limit));
  } else {
    for (int64_t j = 0; j < ids.size(); ++j)
      src_.copy_into(sl.narrow(dim, (int64_t)j, 1), *this, l.narrow(dim, ids[j], 1));
  }
}

namespace {

void scatter_reduce(BackendStorage& out, ScatterOp op, const Layout& l, const BackendStorage& ids_, const Layout& il,
                    const BackendStorage& src_, const Layout& sl, int64_t dim, bool include_self) {
  CpuStorage& self = as_cpu(out);
  const DType dt = self.dtype();
  const Ids ids(as_cpu(ids_), il, l.shape()[dim], op == ScatterOp::Set ? "scatter" : "scatter_reduce");
  const auto& src = as_cpu(src_);
  if (dt == DType::Bool) {  // as torch: sum is or (amax on 0/1 bytes), prod and amin are and, mean refused
    EMBER_CHECK(op != ScatterOp::Mean, DType, "[scatter_reduce] mean not supported for bool");
    if (op == ScatterOp::Sum) op = ScatterOp::Max;
  }
  switch (op) {
    case ScatterOp::Set: scatter_dispatch<ScatterOp::Set>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Sum: scatter_dispatch<ScatterOp::Sum>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Prod: scatter_dispatch<ScatterOp::Prod>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Mean: scatter_dispatch<ScatterOp::Mean>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Max: scatter_dispatch<ScatterOp::Max>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Min: scatter_dispatch<ScatterOp::Min>(self, l, ids, src, sl, il, dim, include_self); return;
    case ScatterOp::Count: break;
  }
  EMBER_CHECK(false, Value, "[scatter_reduce] unknown reduction ", (int)op);
}

}  // namespace

void register_scatter_reduce() { Kernels<ScatterReduce>::set(DeviceKind::Cpu, &scatter_reduce); }

}  // namespace ember::cpu
