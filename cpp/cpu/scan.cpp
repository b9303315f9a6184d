// Scans along one dim on CPU (cumsum, cumprod, cummax, cummin; exclusive and reverse forms): each line
// in order in the accumulator type (float for halves, double for f64, int64 for integer sums and
// products), threaded over the independent lines. Sums and products run several lines in lock-step, so
// their running values' dependency chains overlap: lines of the innermost contiguous dim as one vector
// (a scan along an outer dim), or groups of 16, 8 or 4 whole lines (a scan along the last dim).
#include <algorithm>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"
#include "families/scan.h"
#include "lines.h"
#include "registry.h"

namespace ember::cpu {
namespace {

template <typename A> inline bool nan_of(A v) { return v != v; }

constexpr int kGroup = 16;  // the most lines scanned in lock-step

// Sum/Prod of G lines that start at in[g] / out[g] (g < G) and step by is / os: every line's additions
// stay in index order (the results are the one-line loop's), the G chains overlap.
// `Cols`: the lines are consecutive elements (in + g, out + g), which the compiler turns into vectors.
#if defined(__SSE2__)
// float32 lines read and written contiguously, forward: 4x4 blocks transposed in registers, each column
// of four lines one vector step of the four running values (the additions in index order, as above).
template <int G, bool Prod, bool Excl> void float_rows_sse(const float* const* in, float* const* out, int64_t n) {
  static_assert(G % 4 == 0, "groups of four lines");
  __m128 acc[G / 4];
  for (auto& a : acc) a = _mm_set1_ps(Prod ? 1.0f : 0.0f);
  const int64_t n4 = n / 4 * 4;
  // Four lines at a time over a stretch of 64 positions: lines a multiple of 4 KiB apart share their
  // L1 sets, and all G of them at once would evict each other between two steps.
  for (int64_t c0 = 0; c0 < n4; c0 += 64)
    for (int q = 0; q < G / 4; ++q)
      for (int64_t c = c0; c < std::min(n4, c0 + 64); c += 4) {
        __m128 r[4];
        for (int i = 0; i < 4; ++i) r[i] = _mm_loadu_ps(in[4 * q + i] + c);
        _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
        __m128 a = acc[q];
        for (int j = 0; j < 4; ++j) {
          const __m128 before = a;
          a = Prod ? _mm_mul_ps(a, r[j]) : _mm_add_ps(a, r[j]);
          r[j] = Excl ? before : a;
        }
        acc[q] = a;
        _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
        for (int i = 0; i < 4; ++i) _mm_storeu_ps(out[4 * q + i] + c, r[i]);
      }
  alignas(16) float lane[G];
  for (int q = 0; q < G / 4; ++q) _mm_store_ps(lane + 4 * q, acc[q]);
  for (int g = 0; g < G; ++g)  // the last n % 4 positions, line by line
    for (int64_t c = n4; c < n; ++c) {
      const float before = lane[g];
      lane[g] = Prod ? lane[g] * in[g][c] : lane[g] + in[g][c];
      out[g][c] = Excl ? before : lane[g];
    }
}
#endif

// Whole lines (not Cols) go through a tile of kTile positions x G lines, transposed in and out, so the
// lock-step loop runs on G adjacent accumulators as in the Cols case.
template <int G, typename T, typename O, typename A, bool Prod, bool Excl>
void arith_tiled(const T* const* in, O* const* out, int64_t n, int64_t is, int64_t os, bool reverse) {
  using OA = typename Acc<O>::type;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<O, float> && std::is_same_v<A, float>) {
    if (is == 1 && os == 1 && !reverse) return float_rows_sse<G, Prod, Excl>(in, out, n);
  }
#endif
  constexpr int64_t kTile = 64;
  alignas(64) A buf[kTile][G];
  A acc[G];
  for (int g = 0; g < G; ++g) acc[g] = Prod ? A(1) : A(0);
  for (int64_t c0 = 0; c0 < n; c0 += kTile) {
    const int64_t m = std::min(kTile, n - c0);
    const int64_t p0 = reverse ? n - 1 - c0 : c0, step = reverse ? -1 : 1;  // position of tile row q: p0 + q step
    if (is == 1 && step == 1) {  // the common case, with loads the compiler can vectorise
      for (int g = 0; g < G; ++g)
        for (int64_t q = 0; q < m; ++q) buf[q][g] = (A)load<T>(in[g][c0 + q]);
    } else {
      for (int g = 0; g < G; ++g)
        for (int64_t q = 0; q < m; ++q) buf[q][g] = (A)load<T>(in[g][(p0 + q * step) * is]);
    }
    for (int64_t q = 0; q < m; ++q)
      for (int g = 0; g < G; ++g) {
        const A x = buf[q][g], before = acc[g];
        if (Prod) acc[g] *= x;
        else acc[g] += x;
        buf[q][g] = Excl ? before : acc[g];
      }
    if (os == 1 && step == 1) {
      for (int g = 0; g < G; ++g)
        for (int64_t q = 0; q < m; ++q) out[g][c0 + q] = store<O>((OA)buf[q][g]);
    } else {
      for (int g = 0; g < G; ++g)
        for (int64_t q = 0; q < m; ++q) out[g][(p0 + q * step) * os] = store<O>((OA)buf[q][g]);
    }
  }
}

template <int G, typename T, typename O, typename A, bool Prod, bool Excl, bool Cols>
void arith_group(const T* const* in, O* const* out, int64_t n, int64_t is, int64_t os, bool reverse) {
  using OA = typename Acc<O>::type;
  if constexpr (!Cols) {
    arith_tiled<G, T, O, A, Prod, Excl>(in, out, n, is, os, reverse);
    return;
  }
  A acc[G];
  for (int g = 0; g < G; ++g) acc[g] = Prod ? A(1) : A(0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = reverse ? n - 1 - k : k;
    const T* src = in[0] + p * is;
    O* dst = out[0] + p * os;
    for (int g = 0; g < G; ++g) {
      const A x = (A)load<T>(Cols ? src[g] : in[g][p * is]);
      O& d = Cols ? dst[g] : out[g][p * os];
      if (Excl) d = store<O>((OA)acc[g]);
      if (Prod) acc[g] *= x;
      else acc[g] += x;
      if (!Excl) d = store<O>((OA)acc[g]);
    }
  }
}

template <int G, typename T, typename O, typename A, bool Cols>
void arith_group(ScanOp op, bool exclusive, const T* const* in, O* const* out, int64_t n, int64_t is, int64_t os,
                 bool reverse) {
  const bool prod = op == ScanOp::Prod;
  if (prod && exclusive) arith_group<G, T, O, A, true, true, Cols>(in, out, n, is, os, reverse);
  else if (prod) arith_group<G, T, O, A, true, false, Cols>(in, out, n, is, os, reverse);
  else if (exclusive) arith_group<G, T, O, A, false, true, Cols>(in, out, n, is, os, reverse);
  else arith_group<G, T, O, A, false, false, Cols>(in, out, n, is, os, reverse);
}

template <typename T, typename O, typename A, bool Cols>
void arith_group(int g, ScanOp op, bool exclusive, const T* const* in, O* const* out, int64_t n, int64_t is,
                 int64_t os, bool reverse) {
  if (g == 16) arith_group<16, T, O, A, Cols>(op, exclusive, in, out, n, is, os, reverse);
  else if (g == 8) arith_group<8, T, O, A, Cols>(op, exclusive, in, out, n, is, os, reverse);
  else arith_group<4, T, O, A, Cols>(op, exclusive, in, out, n, is, os, reverse);
}

// The group size for `lines` lines: 16, 8 or 4 (0: too few lines to group).
inline int group_of(int64_t lines) { return lines >= 16 ? 16 : lines >= 8 ? 8 : lines >= 4 ? 4 : 0; }

// T in, O out, A the accumulator. Max/min follow torch: a NaN is taken (and stays), equal values move
// the index to the later position.
template <typename T, typename O, typename A>
void scan_lines(ScanOp op, const T* in, const Layout& l, int64_t dim, bool exclusive, bool reverse, O* out,
                int64_t* ids) {
  const Lines ls = lines_along(l, dim);
  const int64_t n = ls.n, is = ls.a_step, os = ls.b_step, nlines = ls.count;
  const bool arith = op == ScanOp::Sum || op == ScanOp::Prod;
  // a group: G (16, 8 or 4) lines of a chunk of the innermost dim (when it is contiguous in and out), or
  // G consecutive lines
  const int64_t inner = ls.shape.empty() ? 1 : ls.shape.back();
  const bool cols = arith && group_of(inner) && ls.a_stride.back() == 1 && ls.b_stride.back() == 1;
  const bool rows = arith && !cols && group_of(nlines);
  const int G = cols ? group_of(inner) : rows ? group_of(nlines) : 0;
  if (cols || rows) {
    const int64_t per = cols ? inner / G : nlines / G;  // full groups per outer line / in all
    const int64_t items = per * (cols ? nlines / inner : 1);
    parallel_for(items, std::max<int64_t>(1, 2048 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      const T* in_p[kGroup];
      O* out_p[kGroup];
      for (int64_t w = b; w < e; ++w) {
        const int64_t r0 = cols ? (w / per) * inner + (w % per) * G : w * G;
        for (int g = 0; g < G; ++g) {
          int64_t io = l.offset(), oo = 0;
          ls.offsets(cols ? r0 : r0 + g, io, oo);
          in_p[g] = in + io + (cols ? g : 0);
          out_p[g] = out + oo + (cols ? g : 0);
        }
        if (cols) arith_group<T, O, A, true>(G, op, exclusive, in_p, out_p, n, is, os, reverse);
        else arith_group<T, O, A, false>(G, op, exclusive, in_p, out_p, n, is, os, reverse);
      }
    });
  }
  // the lines no group covered (the tails of the inner dim or of the lines), one at a time
  auto covered = [&](int64_t r) {
    if (cols) return r % inner < inner / G * G;
    if (rows) return r < nlines / G * G;
    return false;
  };
  parallel_for(nlines, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (covered(r)) continue;
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

std::tuple<StoragePtr, StoragePtr> scan(const BackendStorage& xs, ScanOp op, const Layout& l, int64_t dim,
                                        bool exclusive, bool reverse) {
  const CpuStorage& x = as_cpu(xs);
  const DType dt = x.dtype();
  const bool arith = op == ScanOp::Sum || op == ScanOp::Prod;
  const DType odt = arith && !is_float(dt) ? DType::I64 : dt;
  auto out = new_cpu(odt, l.numel());
  CpuStoragePtr ids = arith ? nullptr : new_cpu(DType::I64, l.numel());
  int64_t* ip = ids ? ids->data<int64_t>() : nullptr;
  if (arith && !is_float(dt)) {  // integer sums and products: int64 out, wrapping (unsigned arithmetic)
    EMBER_DISPATCH_BOOL_AS_U8(dt, if constexpr (std::is_integral_v<T>) scan_lines<T, int64_t, uint64_t>(
                               op, x.data<T>(), l, dim, exclusive, reverse, out->data<int64_t>(), ip));
  } else {
    EMBER_DISPATCH_BOOL_AS_U8(dt, scan_lines<T, T, typename Acc<T>::type>(op, x.data<T>(), l, dim, exclusive, reverse,
                                                                    out->data<T>(), ip));
  }
  return {out, ids};
}

}  // namespace

void register_scan() { Kernels<Scan>::set(DeviceKind::Cpu, &scan); }

}  // namespace ember::cpu
