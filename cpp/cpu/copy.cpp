// Strided copies (copy_into: contiguous(), slice_set, cat) and fills (zero_set, full) on CPU.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/cpu_storage.h"
#include "cpu/nditer.h"

namespace ember::cpu {
namespace {

// A copy whose destination runs read the source with a stride (a transposed or permuted view made
// contiguous) walks the source down its columns: a cache line, and every few elements a page, per
// element. When another dim is the source's
// contiguous one, copy square tiles over those two dims instead, so that both sides move whole lines
// while the tile sits in L1. Returns false (nothing copied) for every other pattern.
template <typename E> bool copy_tiled(const E* in, const Layout& l, E* o, const Layout& dl) {
  const NdPlan<2> p = make_plan<2>(l.shape(), {&l, &dl});
  const int64_t nd = (int64_t)p.shape.size(), j = nd - 1;
  // (a source run of stride 0, a broadcast, is a fill: the plain loop below does it)
  if (nd < 2 || p.stride[1][j] != 1 || p.stride[0][j] == 1 || p.stride[0][j] == 0) return false;
  int64_t k = -1;  // the dim along which the source is contiguous
  for (int64_t d = 0; d < j; ++d)
    if (p.stride[0][d] == 1) k = d;
  constexpr int64_t T = 64;  // the fastest of 16, 32 and 64 (two 16 KB f32 tiles fit L1)
  if (k < 0 || p.shape[k] < T / 2 || p.shape[j] < T / 2) return false;
  const int64_t nk = p.shape[k], nj = p.shape[j], sj = p.stride[0][j], dk = p.stride[1][k];
  const int64_t tk = (nk + T - 1) / T, tj = (nj + T - 1) / T;
  int64_t outer = 1;
  for (int64_t d = 0; d < j; ++d)
    if (d != k) outer *= p.shape[d];
  parallel_for(outer * tk * tj, std::max<int64_t>(1, kGrain / (T * T)), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t rem = u / (tk * tj), so = p.offset[0], doff = p.offset[1];
      for (int64_t d = j - 1; d >= 0; --d) {  // the tile's position in the other dims
        if (d == k) continue;
        const int64_t i = rem % p.shape[d];
        rem /= p.shape[d];
        so += i * p.stride[0][d];
        doff += i * p.stride[1][d];
      }
      const int64_t t = u % (tk * tj), a0 = t / tj * T, b0 = t % tj * T;
      const int64_t na = std::min(nk, a0 + T) - a0, nb = std::min(nj, b0 + T) - b0;
      // Through a buffer, so each side is read or written a whole line at a time: with power-of-two
      // strides the tile's lines share one L1 set, and touching each of them once per element thrashed.
      E buf[T][T];
      for (int64_t c = 0; c < nb; ++c) {
        const E* s = in + so + a0 + (b0 + c) * sj;
        for (int64_t a = 0; a < na; ++a) buf[a][c] = s[a];
      }
      for (int64_t a = 0; a < na; ++a) {
        E* d = o + doff + (a0 + a) * dk + b0;
        for (int64_t c = 0; c < nb; ++c) d[c] = buf[a][c];
      }
    }
  });
  return true;
}

}  // namespace

void CpuStorage::copy_into(const Layout& l, BackendStorage& dst_, const Layout& dl) const {
  auto& dst = as_cpu(dst_);
  const size_t isz = itemsize(dtype_);
  const char* in = static_cast<const char*>(raw());
  char* o = static_cast<char*>(dst.raw());
  bool tiled = false;
  switch (isz) {
    case 1: tiled = copy_tiled(reinterpret_cast<const uint8_t*>(in), l, reinterpret_cast<uint8_t*>(o), dl); break;
    case 2: tiled = copy_tiled(reinterpret_cast<const uint16_t*>(in), l, reinterpret_cast<uint16_t*>(o), dl); break;
    case 4: tiled = copy_tiled(reinterpret_cast<const uint32_t*>(in), l, reinterpret_cast<uint32_t*>(o), dl); break;
    default: tiled = copy_tiled(reinterpret_cast<const uint64_t*>(in), l, reinterpret_cast<uint64_t*>(o), dl); break;
  }
  if (tiled) return;
  nd_for_each<2>(l.shape(), {&l, &dl}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
    if (st[0] == 1 && st[1] == 1) {
      std::memmove(o + off[1] * isz, in + off[0] * isz, n * isz);
      return;
    }
    switch (isz) {
#define EMBER_COPY_CASE(SZ, TY)                                                     \
  case SZ: {                                                                        \
    const TY* s = reinterpret_cast<const TY*>(in) + off[0];                         \
    TY* d = reinterpret_cast<TY*>(o) + off[1];                                      \
    if (st[0] == 0 && st[1] == 1) /* a broadcast run (an expanded gradient) */      \
      std::fill(d, d + n, *s);                                                      \
    else                                                                            \
      for (int64_t i = 0; i < n; ++i) d[i * st[1]] = s[i * st[0]];                  \
    break;                                                                          \
  }
      EMBER_COPY_CASE(1, uint8_t)
      EMBER_COPY_CASE(2, uint16_t)
      EMBER_COPY_CASE(4, uint32_t)
      EMBER_COPY_CASE(8, uint64_t)
#undef EMBER_COPY_CASE
    }
  });
}

void CpuStorage::fill(const Layout& l, double value) {
  EMBER_DISPATCH(dtype_, {
    const T v = convert<T, double>(value);
    T* o = data<T>();
    nd_for_each<1>(l.shape(), {&l}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = v;
    });
  });
}

}  // namespace ember::cpu
