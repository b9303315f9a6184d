// Sort along one dim on CPU: each independent line is copied into (key, index) pairs and ordered under a
// total order (NaN largest, ties by index, so the result is also stable): lines of 256 or more by an LSD
// radix sort on order-preserving unsigned images of the keys (stable, so ties keep index order), shorter
// ones (and float64) by std::sort with that order.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"
#include "families/sort.h"
#include "lines.h"
#include "registry.h"

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

// Any dtype, any length: std::sort of (key, index) pairs under Before.
template <typename T>
void sort_lines_cmp(const T* in, const Layout& l, int64_t dim, bool desc, T* vals, int64_t* ids) {
  using K = typename Acc<T>::type;
  const Lines ls = lines_along(l, dim);
  const int64_t n = ls.n, is = ls.a_step, os = ls.b_step, nlines = ls.count;
  parallel_for(nlines, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<Pair<K>> buf((size_t)n);
    for (int64_t r = b; r < e; ++r) {
      int64_t io = l.offset(), o = 0;
      ls.offsets(r, io, o);
      const T* src = in + io;
      if (is == 1) {  // contiguous line: no stride multiply in the load loop
        for (int64_t k = 0; k < n; ++k) buf[k] = {load<T>(src[k]), k};
      } else {
        for (int64_t k = 0; k < n; ++k) buf[k] = {load<T>(src[k * is]), k};
      }
      std::sort(buf.begin(), buf.end(), Before<K>{desc});
      for (int64_t k = 0; k < n; ++k) {
        vals[o + k * os] = store<T>(buf[k].key);
        ids[o + k * os] = buf[k].idx;
      }
    }
  });
}

// An unsigned image of a key that orders as the sort does: NaN above +inf, -0.0 equal to +0.0, and
// every bit flipped when descending (ties still by index: the radix sort is stable).
template <typename T> struct RadixKey { using type = void; };
template <> struct RadixKey<float> { using type = uint32_t; };
template <> struct RadixKey<f16> { using type = uint32_t; };
template <> struct RadixKey<bf16> { using type = uint32_t; };
template <> struct RadixKey<int64_t> { using type = uint64_t; };
template <> struct RadixKey<uint32_t> { using type = uint32_t; };
template <> struct RadixKey<uint8_t> { using type = uint32_t; };
template <> struct RadixKey<int32_t> { using type = uint32_t; };

template <typename T, typename U> inline U radix_key(T v, bool desc) {
  U u;
  if constexpr (std::is_same_v<U, uint32_t> && !std::is_integral_v<T>) {
    float f = load<T>(v);
    if (f != f) {
      u = 0xffffffffu;
    } else {
      if (f == 0.0f) f = 0.0f;  // -0.0 ties with +0.0
      uint32_t b;
      std::memcpy(&b, &f, 4);
      u = (b & 0x80000000u) ? ~b : b | 0x80000000u;
    }
  } else if constexpr (std::is_same_v<T, int64_t>) {
    u = (uint64_t)v ^ (1ull << 63);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    u = (uint32_t)v ^ (1u << 31);
  } else {
    u = (U)v;
  }
  return desc ? ~u : u;
}

// Sorts one line (n elements at src, stride is) by 8-bit LSD passes; passes whose digit is the same for
// every key are skipped (uint8 lines take one pass). Writes the order into idx.
template <typename T, typename U>
void radix_line(const T* src, int64_t n, int64_t is, bool desc, std::vector<U>& k0, std::vector<U>& k1,
                std::vector<uint32_t>& i0, std::vector<uint32_t>& i1) {
  constexpr int P = sizeof(U);
  k0.resize(n), k1.resize(n), i0.resize(n), i1.resize(n);
  uint32_t hist[P][256] = {};
  for (int64_t k = 0; k < n; ++k) {
    const U u = radix_key<T, U>(src[k * is], desc);
    k0[k] = u;
    i0[k] = (uint32_t)k;
    for (int p = 0; p < P; ++p) ++hist[p][(u >> (8 * p)) & 0xff];
  }
  U* ka = k0.data();
  U* kb = k1.data();
  uint32_t* ia = i0.data();
  uint32_t* ib = i1.data();
  for (int p = 0; p < P; ++p) {
    uint32_t* h = hist[p];
    if (h[(ka[0] >> (8 * p)) & 0xff] == (uint32_t)n) continue;  // one digit value: nothing moves
    uint32_t sum = 0;
    for (int d = 0; d < 256; ++d) {
      const uint32_t c = h[d];
      h[d] = sum;
      sum += c;
    }
    for (int64_t k = 0; k < n; ++k) {
      const uint32_t at = h[(ka[k] >> (8 * p)) & 0xff]++;
      kb[at] = ka[k];
      ib[at] = ia[k];
    }
    std::swap(ka, kb);
    std::swap(ia, ib);
  }
  if (ia != i0.data()) std::memcpy(i0.data(), ia, (size_t)n * sizeof(uint32_t));
}

template <typename T>
void sort_lines(const T* in, const Layout& l, int64_t dim, bool desc, T* vals, int64_t* ids) {
  using U = typename RadixKey<T>::type;
  if constexpr (!std::is_void_v<U>) {
    const int64_t n = l.shape()[dim];
    if (n >= 256 && n < (int64_t(1) << 32)) {
      const Lines ls = lines_along(l, dim);
      const int64_t is = ls.a_step, os = ls.b_step, nlines = ls.count;
      parallel_for(nlines, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
        std::vector<U> k0, k1;
        std::vector<uint32_t> i0, i1;
        for (int64_t r = b; r < e; ++r) {
          int64_t io = l.offset(), o = 0;
          ls.offsets(r, io, o);
          const T* src = in + io;
          radix_line<T, U>(src, n, is, desc, k0, k1, i0, i1);
          for (int64_t k = 0; k < n; ++k) {
            vals[o + k * os] = src[(int64_t)i0[k] * is];
            ids[o + k * os] = i0[k];
          }
        }
      });
      return;
    }
  }
  sort_lines_cmp(in, l, dim, desc, vals, ids);
}

std::tuple<StoragePtr, StoragePtr> sort(const BackendStorage& xs, const Layout& l, int64_t dim, bool descending,
                                        bool stable) {
  (void)stable;  // the order is total (ties by index), so every sort here is stable
  const CpuStorage& x = as_cpu(xs);
  auto vals = new_cpu(x.dtype(), l.numel());
  auto ids = new_cpu(DType::I64, l.numel());
  EMBER_DISPATCH_BOOL_AS_U8(x.dtype(),
                            sort_lines<T>(x.data<T>(), l, dim, descending, vals->data<T>(), ids->data<int64_t>()));
  return {vals, ids};
}

}  // namespace

void register_sort() { Kernels<Sort>::set(DeviceKind::Cpu, &sort); }

}  // namespace ember::cpu
