// Scans along one dim on CPU (cumsum, cumprod, cummax, cummin; exclusive and reverse forms): each line
// in order in the accumulator type (float for halves, double for f64, int64 for integer sums and
// products), threaded over the independent lines.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"

namespace ember::cpu {
namespace {

// Line r's input offset (over the dims other than the scanned one) and its contiguous output offset.
struct ScanLines {
  Shape shape, in_stride, out_stride;
  void offsets(int64_t r, int64_t& in, int64_t& out) const {
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      const int64_t q = r % shape[d];
      in += q * in_stride[d];
      out += q * out_stride[d];
      r /= shape[d];
    }
  }
};

template <typename A> inline bool nan_of(A v) { return v != v; }

// T in, O out, A the accumulator. Max/min follow torch: a NaN is taken (and stays), equal values move
// the index to the later position.
template <typename T, typename O, typename A>
void scan_lines(ScanOp op, const T* in, const Layout& l, int64_t dim, bool exclusive, bool reverse, O* out,
                int64_t* ids) {
  ScanLines ls;
  const Shape cs = contiguous_strides(l.shape());
  for (int64_t i = 0; i < l.ndim(); ++i) {
    if (i == dim) continue;
    ls.shape.push_back(l.shape()[i]);
    ls.in_stride.push_back(l.stride()[i]);
    ls.out_stride.push_back(cs[i]);
  }
  const int64_t n = l.shape()[dim], is = l.stride()[dim], os = cs[dim];
  const int64_t nlines = n == 0 ? 0 : l.numel() / n;
  parallel_for(nlines, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t io = l.offset(), oo = 0;
      ls.offsets(r, io, oo);
      const T* src = in + io;
      O* dst = out + oo;
      int64_t* di = ids ? ids + oo : nullptr;
      A acc = op == ScanOp::Prod ? A(1) : A(0);
      int64_t best = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t p = reverse ? n - 1 - k : k;
        const A x = (A)load<T>(src[p * is]);
        if (exclusive) dst[p * os] = store<O>((typename Acc<O>::type)acc);  // before this element joins
        switch (op) {
          case ScanOp::Sum: acc += x; break;
          case ScanOp::Prod: acc *= x; break;
          case ScanOp::Max:
            if (k == 0 || nan_of(x) || (!nan_of(acc) && x >= acc)) acc = x, best = p;
            break;
          case ScanOp::Min:
            if (k == 0 || nan_of(x) || (!nan_of(acc) && x <= acc)) acc = x, best = p;
            break;
          case ScanOp::Count: break;
        }
        if (!exclusive) dst[p * os] = store<O>((typename Acc<O>::type)acc);
        if (di) di[p * os] = best;
      }
    }
  });
}

}  // namespace

std::tuple<StoragePtr, StoragePtr> CpuStorage::scan(ScanOp op, const Layout& l, int64_t dim, bool exclusive,
                                                    bool reverse) const {
  const bool arith = op == ScanOp::Sum || op == ScanOp::Prod;
  const DType odt = arith && !is_float(dtype_) ? DType::I64 : dtype_;
  auto out = new_cpu(odt, l.numel());
  CpuStoragePtr ids = arith ? nullptr : new_cpu(DType::I64, l.numel());
  int64_t* ip = ids ? ids->data<int64_t>() : nullptr;
  if (arith && !is_float(dtype_)) {  // integer sums and products: int64 out, wrapping (unsigned arithmetic)
    EMBER_DISPATCH(dtype_, if constexpr (std::is_integral_v<T>) scan_lines<T, int64_t, uint64_t>(
                               op, data<T>(), l, dim, exclusive, reverse, out->data<int64_t>(), ip));
  } else {
    EMBER_DISPATCH(dtype_, scan_lines<T, T, typename Acc<T>::type>(op, data<T>(), l, dim, exclusive, reverse,
                                                                    out->data<T>(), ip));
  }
  return {out, ids};
}

}  // namespace ember::cpu
