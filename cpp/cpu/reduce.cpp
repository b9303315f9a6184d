// Reductions on CPU (sum, int64 sum of integers, max, min, argmax, argmin) over any set of dims. Three
// shapes of work: rows (reduced dims innermost and contiguous), columns (kept dims innermost and
// contiguous), and everything else, which is first copied so the reduced dims become contiguous rows.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/dispatch.h"
#include "cpu/gemm.h"
#include "cpu/nditer.h"
#include "cpu/row_sums.h"

namespace ember::cpu {
namespace {

struct Split {
  Layout kept, red;  // kept dims (in order) and reduced dims of the input, as separate layouts
};
Split split_dims(const Layout& l, const std::vector<int64_t>& dims) {
  Shape ks, kst, rs, rst;
  for (int64_t i = 0; i < l.ndim(); ++i) {
    bool r = std::binary_search(dims.begin(), dims.end(), i);
    (r ? rs : ks).push_back(l.shape()[i]);
    (r ? rst : kst).push_back(l.stride()[i]);
  }
  return {Layout(ks, kst, l.offset()), Layout(rs, rst, 0)};
}

// Single coalesced run (len, stride) if the layout is one strided line, else nullopt-like (-1).
std::pair<int64_t, int64_t> as_line(const Layout& l) {
  Shape sh = l.shape(), st = l.stride();
  coalesce(sh, st);
  if (sh.empty()) return {1, 1};
  if (sh.size() == 1) return {sh[0], st[0]};
  return {-1, 0};
}

template <typename T> using C_t = typename Acc<T>::type;

// A contiguous copy of the input in (kept..., reduced...) order, so the reduced dims form rows.
struct Rows {
  CpuStoragePtr storage;
  Layout layout;
  std::vector<int64_t> dims;  // the reduced dims, now the trailing ones
};
Rows as_rows(const CpuStorage& s, const Layout& l, const std::vector<int64_t>& dims) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < l.ndim(); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), i)) perm.push_back(i);
  for (auto d : dims) perm.push_back(d);
  Layout pl = l.permute(perm);
  Rows r{new_cpu(s.dtype(), l.numel()), Layout::contiguous(pl.shape()), {}};
  s.copy_into(pl, *r.storage, r.layout);
  for (int64_t i = (int64_t)(l.ndim() - dims.size()); i < l.ndim(); ++i) r.dims.push_back(i);
  return r;
}

template <typename T> inline C_t<T> combine(int kind, C_t<T> a, C_t<T> b) {
  if (kind == 0) return a + b;
  if (kind == 1) return (b > a || b != b) ? b : a;
  return (b < a || b != b) ? b : a;
}

// The storage offset of the r-th kept position (row-major over kept's shape): the start of row r.
int64_t kept_offset(const Layout& kept, int64_t r) {
  int64_t base = kept.offset();
  for (int64_t d = kept.ndim() - 1; d >= 0; --d) {
    base += (r % kept.shape()[d]) * kept.stride()[d];
    r /= kept.shape()[d];
  }
  return base;
}

// The offsets of the reduced positions in row-major order: the rows a column reduction adds up.
std::vector<int64_t> reduced_offsets(const Layout& red) {
  std::vector<int64_t> roffs;
  roffs.reserve(red.numel());
  for_each_block(red, [&](int64_t off, int64_t len, int64_t st) {
    for (int64_t k = 0; k < len; ++k) roffs.push_back(off + k * st);
  });
  return roffs;
}

// Rows reductions thread over whole rows unless there are few and long ones, which split per row.
inline bool few_long_rows(int64_t nout, int64_t nred) { return nout < 4 && nred >= 4 * kGrain; }

// A long row of nred elements reduced in up to 64 parts in parallel: part(lo, hi) for each, the
// partials returned in index order for the caller to combine.
template <typename P, typename F> std::vector<P> row_parts(int64_t nred, F&& part) {
  const int64_t parts = std::min<int64_t>(64, (nred + kGrain - 1) / kGrain);
  std::vector<P> partial(parts);
  parallel_for(parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) partial[q] = part(nred * q / parts, nred * (q + 1) / parts);
  });
  return partial;
}

// Column reductions give each task blocks of at least 1024 columns: each row's block is then a 4 KB run
// for f32 that the prefetcher follows (256-column runs were too short for it).
inline int64_t column_grain(int64_t nred) { return std::max<int64_t>(1024, kGrain / std::max<int64_t>(nred, 1)); }

// Rows of at most this many elements take short_row_sums_dense (cpu/row_sums.h) a block at a time; a
// kernel call per row cost these rows more than their elements. Float lanes stay accurate there.
constexpr int64_t kShortRow = 256;

// Many short contiguous rows (a global average pool's (n, c) planes): the blocks of rows that
// nd_for_each hands over, threaded.
template <typename T>
void short_row_sums(const T* in, const Layout& kept, const Layout& ol, int64_t nred, T* o) {
  nd_for_each<2>(kept.shape(), {&kept, &ol}, std::max<int64_t>(64, kGrain / nred),
                 [&](const auto& off, const auto& st, int64_t n) {
                   if (st[0] >= nred) {
                     short_row_sums_dense(in + off[0], st[0], n, nred, o + off[1], st[1]);
                     return;
                   }
                   const ReduceRowFn row = kernels().reduce_row[0][(int)DTypeOf<T>::value];
                   for (int64_t i = 0; i < n; ++i) row(in + off[0] + i * st[0], nred, o + off[1] + i * st[1]);
                 });
}

template <typename T>
void reduce_values(int kind, const CpuStorage& s, const Layout& l, const std::vector<int64_t>& dims,
                   CpuStorage& out) {
  const KernelTable& K = kernels();
  ReduceRowFn row = K.reduce_row[kind][(int)s.dtype()];
  ReduceColFn col = K.reduce_col[kind][(int)s.dtype()];
  Split sp = split_dims(l, dims);
  const T* in = s.data<T>();
  T* o = out.data<T>();
  const int64_t nout = sp.kept.numel(), nred = sp.red.numel();
  auto [rlen, rstride] = as_line(sp.red);

  if (nred == 0) {  // sum over an empty dim
    for (int64_t i = 0; i < nout; ++i) o[i] = store<T>(C_t<T>(0));
    return;
  }
  if (rlen > 0 && rstride == 1) {
    const Layout ol = Layout::contiguous(sp.kept.shape());
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (kind == 0 && nred <= kShortRow && nout >= 64) {
        short_row_sums<T>(in, sp.kept, ol, nred, o);
        return;
      }
    }
    if (!few_long_rows(nout, nred)) {
      // many rows: threads take whole rows
      nd_for_each<2>(sp.kept.shape(), {&sp.kept, &ol}, std::max<int64_t>(1, kGrain / nred),
                     [&](const auto& off, const auto& st, int64_t n) {
                       for (int64_t i = 0; i < n; ++i) row(in + off[0] + i * st[0], nred, o + off[1] + i * st[1]);
                     });
    } else {
      // few long rows: split each row across threads, then combine the partials
      for (int64_t r = 0; r < nout; ++r) {
        const int64_t base = kept_offset(sp.kept, r);
        // Partials are combined in int64 for integers (exact, wraps like the dtype) and in double
        // for floats; the float sum of each part is computed in double by the row kernel already.
        using P = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
        const std::vector<P> partial = row_parts<P>(nred, [&](int64_t lo, int64_t hi) {
          T v;
          row(in + base + lo, hi - lo, &v);
          return (P)load(v);
        });
        const int64_t parts = (int64_t)partial.size();
        P acc = partial[0];
        for (int64_t p = 1; p < parts; ++p) {
          if (kind == 0) acc = (P)((std::conditional_t<std::is_integral_v<T>, uint64_t, double>)acc + partial[p]);
          else acc = combine<P>(kind, acc, partial[p]);
        }
        o[r] = convert<T, P>(acc);
      }
    }
    return;
  }
  auto [klen, kstride] = as_line(sp.kept);
  if (klen > 0 && kstride == 1) {
    // columns: accumulate whole rows of kept elements, parallel over column blocks
    const std::vector<int64_t> roffs = reduced_offsets(sp.red);
    const int64_t base = sp.kept.offset();
    parallel_for(nout, column_grain(nred), [&](int64_t b, int64_t e) {
      std::vector<C_t<T>> acc(e - b);
      auto first = [&](int64_t r) {
        for (int64_t j = b; j < e; ++j) acc[j - b] = load(in[base + roffs[r] + j]);
      };
      if (kind != 0 || std::is_integral_v<T>) {
        first(0);
        for (int64_t r = 1; r < nred; ++r) col(in + base + roffs[r] + b, e - b, acc.data());
        for (int64_t j = b; j < e; ++j) o[j] = store<T>(acc[j - b]);
        return;
      }
      // float sums: 16 rows at a time in the accumulator type, then into double, so tall
      // columns stay as accurate as long rows
      std::vector<double> wide(e - b, 0.0);
      for (int64_t r0 = 0; r0 < nred; r0 += 16) {
        first(r0);
        for (int64_t r = r0 + 1; r < std::min<int64_t>(r0 + 16, nred); ++r)
          col(in + base + roffs[r] + b, e - b, acc.data());
        for (int64_t j = 0; j < e - b; ++j) wide[j] += (double)acc[j];
      }
      for (int64_t j = b; j < e; ++j) o[j] = convert<T, double>(wide[j - b]);
    });
    return;
  }
  // general: gather into (kept..., reduced...) contiguous order, then rows
  Rows r = as_rows(s, l, dims);
  reduce_values<T>(kind, *r.storage, r.layout, r.dims, out);
}

// Sum of n contiguous integers into int64, wrapping like int64 arithmetic. Narrow types add into
// 32-bit lanes a block at a time (a widening add the compiler vectorises; 2^16 uint8 values cannot
// overflow them), then the block total goes into the int64 sum.
template <typename T> int64_t wide_sum(const T* p, int64_t n) {
  uint64_t total = 0;
  if constexpr (sizeof(T) == 1) {
    constexpr int64_t kB = int64_t(1) << 16;
    for (int64_t b = 0; b < n; b += kB) {
      const int64_t e = std::min(n, b + kB);
      uint32_t acc = 0;
      for (int64_t i = b; i < e; ++i) acc += (uint32_t)p[i];
      total += acc;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) total += (uint64_t)(int64_t)p[i];
  }
  return (int64_t)total;
}

// Integer sums into int64 without first widening the whole input: reduced dims that form one contiguous
// run are summed where they lie, threaded over rows or, for a few long rows, over parts of each row;
// kept dims that form one contiguous run (columns) add row by row into the outputs. Other layouts are
// converted to int64 first and summed there.
template <typename T>
StoragePtr sum_i64(const CpuStorage& s, const Layout& l, const std::vector<int64_t>& dims) {
  Split sp = split_dims(l, dims);
  const int64_t nout = sp.kept.numel(), nred = sp.red.numel();
  auto [rlen, rstride] = as_line(sp.red);
  auto [klen, kstride] = as_line(sp.kept);
  auto out = new_cpu(DType::I64, nout);
  int64_t* o = out->data<int64_t>();
  const T* in = s.data<T>();
  if (nred > 0 && (rlen <= 0 || rstride != 1)) {
    if (klen <= 0 || kstride != 1) {  // neither rows nor columns: sum an int64 copy
      auto wide = s.to_dtype(l, DType::I64);
      return as_cpu(*wide).reduce(ReduceOp::Sum, Layout::contiguous(l.shape()), dims);
    }
    // columns (a mask's per-column count): each reduced row adds into the int64 outputs, threads
    // split the columns
    const std::vector<int64_t> roffs = reduced_offsets(sp.red);
    const T* base = in + sp.kept.offset();
    parallel_for(nout, column_grain(nred), [&](int64_t b, int64_t e) {
      std::fill(o + b, o + e, int64_t(0));
      for (int64_t r = 0; r < nred; ++r) {
        const T* row = base + roffs[r];
        for (int64_t j = b; j < e; ++j) o[j] = (int64_t)((uint64_t)o[j] + (uint64_t)row[j]);
      }
    });
    return out;
  }
  const Layout ol = Layout::contiguous(sp.kept.shape());
  if (!few_long_rows(nout, nred)) {
    nd_for_each<2>(sp.kept.shape(), {&sp.kept, &ol}, std::max<int64_t>(1, kGrain / std::max<int64_t>(nred, 1)),
                   [&](const auto& off, const auto& st, int64_t n) {
                     for (int64_t i = 0; i < n; ++i) o[off[1] + i * st[1]] = wide_sum(in + off[0] + i * st[0], nred);
                   });
    return out;
  }
  for (int64_t r = 0; r < nout; ++r) {  // few long rows: parts of each row in parallel, then their sum
    const T* row = in + kept_offset(sp.kept, r);
    const std::vector<int64_t> partial =
        row_parts<int64_t>(nred, [&](int64_t lo, int64_t hi) { return wide_sum(row + lo, hi - lo); });
    uint64_t acc = 0;
    for (int64_t v : partial) acc += (uint64_t)v;
    o[r] = (int64_t)acc;
  }
  return out;
}

template <typename C> inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v; else return false;
}

template <typename T>
void reduce_arg(bool is_max, const CpuStorage& s, const Layout& l, const std::vector<int64_t>& dims,
                CpuStorage& out) {
  Split sp = split_dims(l, dims);
  auto [rlen, rstride] = as_line(sp.red);
  if (!(rlen > 0)) {  // several non-mergeable reduced dims: make them one contiguous row first
    Rows r = as_rows(s, l, dims);
    reduce_arg<T>(is_max, *r.storage, r.layout, r.dims, out);
    return;
  }
  const T* in = s.data<T>();
  int64_t* o = out.data<int64_t>();
  const int64_t n = sp.red.numel();
  const Layout ol = Layout::contiguous(sp.kept.shape());
  nd_for_each<2>(sp.kept.shape(), {&sp.kept, &ol}, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
                 [&](const auto& off, const auto& st, int64_t cnt) {
                   for (int64_t i = 0; i < cnt; ++i) {
                     const T* p = in + off[0] + i * st[0];
                     C_t<T> best = load(p[0]);
                     int64_t bi = 0;
                     for (int64_t k = 1; k < n && !is_nan(best); ++k) {  // a NaN wins, as in torch
                       C_t<T> v = load(p[k * rstride]);
                       if (is_nan(v) || (is_max ? v > best : v < best)) { best = v; bi = k; }
                     }
                     o[off[1] + i * st[1]] = bi;
                   }
                 });
}

}  // namespace

StoragePtr CpuStorage::reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const {
  Split sp = split_dims(l, dims);
  const int64_t nout = sp.kept.numel();
  if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) {
    auto out = new_cpu(DType::I64, nout);
    if (nout) EMBER_DISPATCH_BOOL_AS_U8(dtype_, reduce_arg<T>(op == ReduceOp::ArgMax, *this, l, dims, *out));
    return out;
  }
  if (op == ReduceOp::SumI64) {
    if (dtype_ == DType::U8) return sum_i64<uint8_t>(*this, l, dims);
    if (dtype_ == DType::U32) return sum_i64<uint32_t>(*this, l, dims);
    if (dtype_ == DType::I32) return sum_i64<int32_t>(*this, l, dims);
    if (dtype_ == DType::Bool) return sum_i64<uint8_t>(*this, l, dims);
    op = ReduceOp::Sum;  // int64 and float inputs: a plain sum
  }
  auto out = new_cpu(dtype_, nout);
  if (nout) EMBER_DISPATCH_BOOL_AS_U8(dtype_, reduce_values<T>((int)op, *this, l, dims, *out));
  return out;
}

}  // namespace ember::cpu
