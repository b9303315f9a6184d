// CPU random fills and multinomial draws: value i of a draw is a hash of (seed, counter + i) from the global
// generator (device.h), so threads need no shared state and manual_seed(n) makes every later draw reproducible.
#include "cpu/random.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/host_api.h"
#include "cpu/parallel.h"
#include "cpu/topk.h"
#include "device.h"
#include "families/sampling.h"
#include "registry.h"

namespace ember::cpu {
namespace {

inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with `bits` random bits (53 for doubles; fewer for narrow dtypes, so that every
// value is on the dtype's grid and rounding can never reach 1).
inline double unit(uint64_t seed, uint64_t i, int bits = 53) {
  return (double)(mix(seed ^ mix(i)) >> (64 - bits)) * std::ldexp(1.0, -bits);
}

template <typename T> constexpr int mantissa_bits() {
  if constexpr (std::is_same_v<T, f16>) return 11;
  else if constexpr (std::is_same_v<T, bf16>) return 8;
  else if constexpr (std::is_same_v<T, float>) return 24;
  else return 53;
}

// The largest value of T strictly below v (v finite): keeps rand's results inside [lo, hi).
template <typename T> T next_below(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    uint16_t b = v.bits;
    if ((b & 0x7fff) == 0) return T{(uint16_t)0x8001};
    return T{(uint16_t)((b & 0x8000) ? b + 1 : b - 1)};
  } else {
    return std::nextafter(v, -INFINITY);
  }
}

// value_at(seed, base, i, bits) -> double; `below` (if finite) is an exclusive upper bound that the
// value rounded to the dtype must respect.
template <typename F> StoragePtr generate(DType dt, int64_t n, double below, F&& value_at) {
  auto out = new_cpu(dt, n);
  const RngDraw draw = rng_reserve((uint64_t)n + 1);
  const uint64_t seed = draw.seed, base = draw.counter;
  EMBER_DISPATCH_FLOAT(dt, {
    T* o = out->data<T>();
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T v = convert<T, double>(value_at(seed, base, i, mantissa_bits<T>()));
        if ((double)load(v) >= below) v = next_below(v);
        o[i] = v;
      }
    });
  });
  return out;
}

}  // namespace

StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi) {
  const double below = hi > lo ? hi : INFINITY;
  return generate(dt, n, below, [lo, hi](uint64_t s, uint64_t base, int64_t i, int bits) {
    return lo + (hi - lo) * unit(s, base + (uint64_t)i, bits);
  });
}

StoragePtr rand_normal(DType dt, int64_t n, double mean, double std) {
  // Box-Muller on a pair of independent uniforms per element.
  return generate(dt, n, INFINITY, [mean, std](uint64_t s, uint64_t base, int64_t i, int) {
    uint64_t k = 2 * (base + (uint64_t)i);
    double u1 = 1.0 - unit(s, k), u2 = unit(s, k + 1);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

namespace {

// The weights are checked in the pass that reads them (finite, >= 0, a positive one per row), so a bad
// row raises from the kernel without a separate read of the whole tensor.
void check_row(bool finite_nonneg, bool positive) {
  EMBER_CHECK(finite_nonneg, Value, "[multinomial] probability tensor contains either inf, nan or element < 0");
  EMBER_CHECK(positive, Value, "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
}

// A block of 64 float weights (stride cs): next = prev + its sum, in eight float lanes (64 weights lose
// nothing a draw could see; the walk inside the block adds in double from prev), the same sums for any
// stride, so strided weights draw as their contiguous copy; false for a NaN, infinite or negative weight.
inline bool float_block(const float* w, int64_t cs, double prev, double& next) {
  float lane[8] = {};
  int32_t bad = 0;
  for (int i = 0; i < 64; i += 8)
    for (int k = 0; k < 8; ++k) {
      const float v = w[(i + k) * cs];
      lane[k] += v;
      bad |= (int32_t)!((v >= 0.0f) & (v < std::numeric_limits<float>::infinity()));
    }
  next = prev + (double)(((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])));
  return bad == 0;
}

// Without replacement: the exponential-keys trick (w_i / E_i as logs, the num_samples largest, in key order);
// with replacement: inverse-CDF search of u * total in the row's running sum (double). Zero weights can
// never be drawn with replacement; without it they come after every positive weight, in index order.
template <typename T>
void multinomial_rows(const T* w, const Layout& l, int64_t S, bool repl, uint64_t seed, uint64_t counter,
                      int64_t* out) {
  const int64_t rows = l.shape()[0], n = l.shape()[1], rs = l.stride()[0], cs = l.stride()[1];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<double> buf;
    std::vector<TopkItem<double>> work;
    for (int64_t r = b; r < e; ++r) {
      const T* src = w + l.offset() + r * rs;
      int64_t* o = out + r * S;
      if (!repl) {
        buf.resize((size_t)n);
        const uint64_t base = counter + (uint64_t)(r * n);
        bool ok = true, pos = false;
        for (int64_t i = 0; i < n; ++i) {
          const double wi = (double)load<T>(src[i * cs]);
          ok &= (wi >= 0) & (wi < kInf);  // a NaN fails both
          pos |= wi > 0;
          const double ei = -std::log1p(-unit(seed, base + (uint64_t)i));  // exponential(1), >= 0
          // log(w / E): w / E overflows for huge float64 weights, and ties at +inf favour low indices.
          // E = 0 gives +inf: drawn first, as its probability says; a zero weight -inf: after the others
          buf[i] = wi > 0 ? std::log(wi) - std::log(ei) : -kInf;
        }
        check_row(ok, pos);
        select_topk(buf.data(), n, S, true, o, nullptr, work);
        continue;
      }
      // one pass: the prefix sums of 64-weight blocks (four partial sums each: no long dependency chain)
      // and the check; then per draw a binary search for its block and a walk inside it over the weights
      // where they lie. The walk's sum only grows at positive weights, so a weight-0 category is never drawn.
      constexpr int64_t B = 64;
      const int64_t nb = (n + B - 1) / B;
      buf.resize((size_t)nb + 1);
      double* pre = buf.data();
      pre[0] = 0;
      bool ok = true;
      for (int64_t blk = 0; blk < nb; ++blk) {
        const int64_t i0 = blk * B, i1 = std::min(n, i0 + B);
        if constexpr (std::is_same_v<T, float>) {
          if (i1 - i0 == B) {  // a full float block: float lanes (vectorised when dense), then double
            ok &= cs == 1 ? float_block(src + i0, 1, pre[blk], pre[blk + 1])
                          : float_block(src + i0 * cs, cs, pre[blk], pre[blk + 1]);
            continue;
          }
        }
        // weight i adds into partial sum i % 4 (i0 is a multiple of 4), in named scalars: an array indexed
        // by i & 3 kept the sums in memory, a store-to-load wait per weight
        double p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        bool bok = true;
        auto wt = [&](int64_t i) {
          const double wi = (double)load<T>(src[i * cs]);
          bok &= (wi >= 0) & (wi < kInf);  // a NaN fails both
          return wi;
        };
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) {
          p0 += wt(i), p1 += wt(i + 1), p2 += wt(i + 2), p3 += wt(i + 3);
        }
        if (i < i1) p0 += wt(i++);
        if (i < i1) p1 += wt(i++);
        if (i < i1) p2 += wt(i++);
        ok &= bok;
        pre[blk + 1] = pre[blk] + ((p0 + p1) + (p2 + p3));
      }
      const double total = pre[nb];
      check_row(ok && total < kInf, total > 0);  // finite weights whose sum overflows count as inf
      const uint64_t base = counter + (uint64_t)(r * S);
      for (int64_t j = 0; j < S; ++j) {
        const double target = unit(seed, base + (uint64_t)j) * total;
        const int64_t blk = std::min<int64_t>(std::upper_bound(pre + 1, pre + nb + 1, target) - (pre + 1), nb - 1);
        int64_t pick = -1;
        double acc = pre[blk];
        for (int64_t i = blk * B; i < n; ++i) {
          acc += (double)load<T>(src[i * cs]);
          if (acc > target) {
            pick = i;
            break;
          }
        }
        if (pick < 0) {  // rounding carried u * total past the walk's sum: the last positive weight
          pick = n - 1;
          while (pick > 0 && !((double)load<T>(src[pick * cs]) > 0)) --pick;
        }
        o[j] = pick;
      }
    }
  });
}

StoragePtr multinomial(const BackendStorage& ws, const Layout& l, int64_t num_samples, bool replacement,
                       uint64_t seed, uint64_t counter) {
  const CpuStorage& w = as_cpu(ws);
  auto out = new_cpu(DType::I64, l.shape()[0] * num_samples);
  EMBER_DISPATCH_FLOAT(w.dtype(), multinomial_rows<T>(w.data<T>(), l, num_samples, replacement, seed, counter,
                                                      out->data<int64_t>()));
  return out;
}

}  // namespace

void register_multinomial() { Kernels<Multinomial>::set(DeviceKind::Cpu, &multinomial); }

// Lemire's multiply-and-reject on 64-bit hashes: unbiased for every span up to 2^64. A rejected
// element re-hashes its own value, so each element's draw depends on its index alone (any thread count).
StoragePtr rand_int(DType dt, int64_t n, int64_t low, uint64_t span_m1) {
  EMBER_CHECK(n >= 0, Value, "[randint] negative element count ", n);
  EMBER_CHECK(dt == DType::I64 || dt == DType::I32 || dt == DType::U32 || dt == DType::U8 || dt == DType::Bool,
              DType, "[randint] expected an integer dtype, got ", dtype_name(dt));
  auto out = new_cpu(dt, n);
  const RngDraw draw = rng_reserve((uint64_t)n + 1);
  const uint64_t seed = draw.seed, base = draw.counter;
  const uint64_t span = span_m1 + 1;  // 0 means 2^64: every 64-bit value
  const uint64_t reject_below = span ? (0 - span) % span : 0;
  auto value = [=](int64_t i) -> uint64_t {
    uint64_t x = mix(seed ^ mix(base + (uint64_t)i));
    if (!span) return (uint64_t)low + x;
    unsigned __int128 m = (unsigned __int128)x * span;
    while ((uint64_t)m < reject_below) {
      x = mix(x ^ 0xd1b54a32d192ed03ULL);
      m = (unsigned __int128)x * span;
    }
    return (uint64_t)low + (uint64_t)(m >> 64);  // wraps to the signed value two's complement gives
  };
  auto fill = [&](auto* o) {
    using O = std::remove_pointer_t<decltype(o)>;
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = (O)value(i);
    });
  };
  if (dt == DType::I64) fill(out->data<int64_t>());
  else if (dt == DType::I32) fill(out->data<int32_t>());
  else if (dt == DType::U32) fill(out->data<uint32_t>());
  else fill(out->data<uint8_t>());  // uint8, and bool (its span is at most 2: values 0 and 1)
  return out;
}

StoragePtr arange(DType dt, double start, double step, int64_t n) {
  auto out = new_cpu(dt, n);
  EMBER_DISPATCH(dt, {
    T* o = out->data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = convert<T, double>(start + step * (double)i);
  });
  return out;
}

}  // namespace ember::cpu
