// Elementwise ops on CPU: unary (with scalar params), binary with broadcasting, where, dtype casts.
// The inner loops come from the per-ISA KernelTable; nd_for_each handles strides and threads.
#include <type_traits>
#include <cstring>

#include "cpu/cpu_storage.h"
#include "cpu/dispatch.h"
#include "cpu/nditer.h"

namespace ember::cpu {
namespace {
// float -> int truncation (NaN / out of range are screened by the caller). A template so its body is
// instantiated only for integer T: the cast's dispatch switch also expands it for f16/bf16, which
// clang (unlike GCC) checks even inside the discarded `if constexpr` branch.
template <typename T>
T float_to_int(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v < 0 && std::is_unsigned_v<T>) return T{};
    return std::is_unsigned_v<T> ? (T)(uint64_t)v : (T)(int64_t)v;
  } else {
    return T{};
  }
}
}  // namespace

StoragePtr CpuStorage::unary(UnaryOp op, const Layout& l, double p0, double p1) const {
  UnaryFn fn = kernels().unary[(int)op][(int)dtype_];
  EMBER_CHECK(fn, DType, "[", op_name(op), "] not supported for ", dtype_name(dtype_),
              is_float(dtype_) ? "" : " (expected a float dtype)");
  auto out = new_cpu(dtype_, l.numel());
  const size_t isz = itemsize(dtype_);
  const char* in = static_cast<const char*>(raw());
  char* o = static_cast<char*>(out->raw());
  if (l.numel() <= kGrain && l.is_contiguous()) {  // small dense input: skip the iterator set-up
    fn(in + l.offset() * isz, 1, o, 1, l.numel(), p0, p1);
    return out;
  }
  const Layout ol = Layout::contiguous(l.shape());
  nd_for_each<2>(l.shape(), {&l, &ol}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
    fn(in + off[0] * isz, st[0], o + off[1] * isz, st[1], n, p0, p1);
  });
  return out;
}

StoragePtr CpuStorage::binary(BinaryOp op, const Layout& l, const BackendStorage& rhs_, const Layout& rl) const {
  const auto& rhs = as_cpu(rhs_);
  BinaryFn fn = kernels().binary[(int)op][(int)dtype_];
  EMBER_CHECK(fn, DType, "[", op_name(op), "] not supported for ", dtype_name(dtype_));
  DType odt = is_cmp(op) ? DType::Bool : dtype_;  // cmp_loop writes bytes 0/1: bool's representation
  auto out = new_cpu(odt, l.numel());
  const size_t isz = itemsize(dtype_), osz = itemsize(odt);
  const char* a = static_cast<const char*>(raw());
  const char* b = static_cast<const char*>(rhs.raw());
  char* o = static_cast<char*>(out->raw());
  if (l.numel() <= kGrain && l.is_contiguous() && rl.is_contiguous()) {  // small dense operands
    fn(a + l.offset() * isz, 1, b + rl.offset() * isz, 1, o, l.numel());
    return out;
  }
  const Layout ol = Layout::contiguous(l.shape());
  nd_for_each<3>(l.shape(), {&l, &rl, &ol}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
    if (st[2] == 1) {
      fn(a + off[0] * isz, st[0], b + off[1] * isz, st[1], o + off[2] * osz, n);
    } else {  // output runs are always unit-stride for a contiguous output; kept for safety
      for (int64_t i = 0; i < n; ++i)
        fn(a + (off[0] + i * st[0]) * isz, 0, b + (off[1] + i * st[1]) * isz, 0, o + (off[2] + i * st[2]) * osz, 1);
    }
  });
  return out;
}

StoragePtr CpuStorage::where(const Layout& cl, const BackendStorage& a_, const Layout& al, const BackendStorage& b_,
                             const Layout& bl) const {
  const auto& a = as_cpu(a_);
  const auto& b = as_cpu(b_);
  auto out = new_cpu(a.dtype(), cl.numel());
  const Layout ol = Layout::contiguous(cl.shape());
  EMBER_DISPATCH(dtype_, {
    using CT = T;
    const CT* c = data<CT>();
    EMBER_DISPATCH(a.dtype(), {
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* o = out->data<T>();
      nd_for_each<4>(cl.shape(), {&cl, &al, &bl, &ol}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
        // Dense runs with a bool or uint8 condition (a comparison's result) and each operand dense or a scalar:
        // branch-free selects over plain arrays, which the compiler vectorises.
        if constexpr (std::is_same_v<CT, uint8_t> || std::is_same_v<CT, bool>) {
          if (st[0] == 1 && st[3] == 1 && (st[1] | 1) == 1 && (st[2] | 1) == 1) {
            // bool's bytes are 0/1 like a uint8 mask's: one loop serves both
            const uint8_t* cc = reinterpret_cast<const uint8_t*>(c + off[0]);
            const T* xa = pa + off[1];
            const T* xb = pb + off[2];
            T* oo = o + off[3];
            // Both values are loaded before the select: a load under the condition would make the
            // compiler branch, and a random mask mispredicts every other element.
            auto run = [&](auto ia, auto ib) {
              for (int64_t i = 0; i < n; ++i) {
                const T va = xa[ia(i)], vb = xb[ib(i)];
                oo[i] = cc[i] ? va : vb;
              }
            };
            auto dense = [](int64_t i) { return i; };
            auto scalar = [](int64_t) { return int64_t(0); };
            if (st[1] == 1 && st[2] == 1) run(dense, dense);
            else if (st[1] == 1) run(dense, scalar);
            else if (st[2] == 1) run(scalar, dense);
            else run(scalar, scalar);
            return;
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          bool take_a = load(c[off[0] + i * st[0]]) != 0;
          o[off[3] + i * st[3]] = take_a ? pa[off[1] + i * st[1]] : pb[off[2] + i * st[2]];
        }
      });
    });
  });
  return out;
}

StoragePtr CpuStorage::to_dtype(const Layout& l, DType dt) const {
  auto out = new_cpu(dt, l.numel());
  const Layout ol = Layout::contiguous(l.shape());
  EMBER_DISPATCH(dtype_, {
    using From = T;
    const From* in = data<From>();
    EMBER_DISPATCH(dt, {
      T* o = out->data<T>();
      nd_for_each<2>(l.shape(), {&l, &ol}, kGrain, [&](const auto& off, const auto& st, int64_t n) {
        const From* src = in + off[0];
        T* dst = o + off[1];
        if constexpr (std::is_same_v<From, T>) {
          if (st[0] == 1) { std::memcpy(dst, src, n * sizeof(T)); return; }
          if (st[0] == 0) { std::fill(dst, dst + n, *src); return; }  // a broadcast (an expanded gradient)
        }
        if constexpr (std::is_same_v<From, float> || std::is_same_v<From, double>) {
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            // float -> int truncates; NaN/out-of-range become 0 instead of undefined behaviour
            for (int64_t i = 0; i < n; ++i) {
              double v = (double)src[i * st[0]];
              bool ok = v == v && v > -9.3e18 && v < 1.8e19;
              dst[i] = ok ? float_to_int<T>(v) : T{};
            }
            return;
          }
        }
        for (int64_t i = 0; i < n; ++i) dst[i] = convert<T, From>(src[i * st[0]]);
      });
    });
  });
  return out;
}

}  // namespace ember::cpu
