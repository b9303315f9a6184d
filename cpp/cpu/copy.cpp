// Strided copies (copy_into: contiguous(), slice_set, cat) and fills (zero_set, full) on CPU.
#include <cstring>

#include "cpu/cpu_storage.h"
#include "cpu/nditer.h"

namespace ember::cpu {

void CpuStorage::copy_into(const Layout& l, BackendStorage& dst_, const Layout& dl) const {
  auto& dst = as_cpu(dst_);
  const size_t isz = itemsize(dtype_);
  const char* in = static_cast<const char*>(raw());
  char* o = static_cast<char*>(dst.raw());
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
    for (int64_t i = 0; i < n; ++i) d[i * st[1]] = s[i * st[0]];                    \
    break;                                                                          \
  }
      EMBER_COPY_CASE(1, uint8_t)
      EMBER_COPY_CASE(2, uint16_t)
      EMBER_COPY_CASE(4, uint32_t)
      EMBER_COPY_CASE(8, uint64_t)
#undef EMBER_COPY_CASE
    }
  });
  dst.bump_version();
}

void CpuStorage::fill(const Layout& l, double value) {
  EMBER_DISPATCH(dtype_, {
    const T v = convert<T, double>(value);
    T* o = data<T>();
    nd_for_each<1>(l.shape(), {&l}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = v;
    });
  });
  bump_version();
}

}  // namespace ember::cpu
