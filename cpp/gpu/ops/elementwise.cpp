// GPU launchers for the elementwise family: unary (with affine / powf / clamp) and binary, each picking
// the contiguous, scalar-broadcast or strided kernel of metal/unary.metal / metal/binary.metal.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gpu/launch.h"
#include "gpu/ops/ops.h"

namespace ember::gpu::ops {
namespace {

// The kernels' parameter structs (metal/unary.metal), byte for byte.
template <class R> struct UnaryParams {  // R: float, double for the float64 kernels
  R p0 = 0, p1 = 0;
};
struct IntUnaryParams {
  int64_t lo_thr = 0, hi_thr = 0, lo_val = 0, hi_val = 0;
  uint64_t mul = 0, add = 0, mul_bits = 0, add_bits = 0;
  uint32_t flags = 0, pad = 0;
};
static_assert(sizeof(IntUnaryParams) == 72, "IntUnaryParams must match metal/unary.metal");
constexpr uint32_t kLoAlways = 1, kLoNever = 2, kHiAlways = 4, kHiNever = 8, kAffineExact = 16;
constexpr double kTwo63 = 9223372036854775808.0;

// The unary ops the CPU has an integer version of (cpp/cpu/kernels_isa.cpp, register_dtype); neg
// only for signed int64/int32 (negating an unsigned value is refused rather than wrapped); bool has
// bitwise_not (logical) alone, and floats have no bitwise_not.
bool int_unary_supported(UnaryOp op, DType dt) {
  if (dt == DType::Bool) return op == UnaryOp::BitNot;
  switch (op) {
    case UnaryOp::Sqr: case UnaryOp::Abs: case UnaryOp::Relu: case UnaryOp::Sign: case UnaryOp::Ceil:
    case UnaryOp::Floor: case UnaryOp::Round: case UnaryOp::Trunc: case UnaryOp::Clamp: case UnaryOp::Affine:
      return true;
    case UnaryOp::Neg:
      return dt == DType::I64 || dt == DType::I32;
    case UnaryOp::BitNot:
      return true;
    default:
      return false;
  }
}

uint64_t double_bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

template <typename T> int64_t saturate(double b) {
  // a bound outside T saturates (uint8 clamp(lo=300) gives 255), as the CPU's integer clamp
  constexpr double tmin = (double)std::numeric_limits<T>::min(), tmax = (double)std::numeric_limits<T>::max();
  if (b <= tmin) return (int64_t)std::numeric_limits<T>::min();
  if (b >= tmax) return (int64_t)std::numeric_limits<T>::max();
  return (int64_t)convert<T, double>(b);
}

// Integer parameters from the doubles, with the CPU's exact rules (int_lt / int_gt / saturation for
// clamp; the integral fast path or a double computation for affine).
IntUnaryParams int_params(UnaryOp op, DType dt, double p0, double p1) {
  IntUnaryParams q;
  if (op == UnaryOp::Clamp) {
    // integer x: x < p <=> x < ceil(p), and x > p <=> x > floor(p), for p within int64
    if (!(p0 > -kTwo63)) q.flags |= kLoNever;  // also NaN
    else if (p0 >= kTwo63) q.flags |= kLoAlways;
    else q.lo_thr = (int64_t)std::ceil(p0);
    if (!(p1 < kTwo63)) q.flags |= kHiNever;
    else if (p1 < -kTwo63) q.flags |= kHiAlways;
    else q.hi_thr = (int64_t)std::floor(p1);
    int64_t lo = 0, hi = 0;
    switch (dt) {
      case DType::I64: lo = saturate<int64_t>(p0), hi = saturate<int64_t>(p1); break;
      case DType::U32: lo = saturate<uint32_t>(p0), hi = saturate<uint32_t>(p1); break;
      case DType::U8: lo = saturate<uint8_t>(p0), hi = saturate<uint8_t>(p1); break;
      case DType::I32: lo = saturate<int32_t>(p0), hi = saturate<int32_t>(p1); break;
      default: break;
    }
    q.lo_val = p0 > p1 ? hi : lo;  // then every x clamps to hi, as min(max(x, lo), hi) does
    q.hi_val = hi;
  } else if (op == UnaryOp::Affine) {
    const bool exact = p0 == std::trunc(p0) && p1 == std::trunc(p1) && std::fabs(p0) < 9.2e18 && std::fabs(p1) < 9.2e18;
    if (exact) {
      q.flags |= kAffineExact;
      q.mul = (uint64_t)(int64_t)p0;
      q.add = (uint64_t)(int64_t)p1;
    } else {
      q.mul_bits = double_bits(p0);
      q.add_bits = double_bits(p1);
    }
  }
  return q;
}

// One element seen everywhere: every dim is broadcast (stride 0) or of size 1.
bool is_single(const Layout& l) {
  for (size_t d = 0; d < l.shape().size(); ++d)
    if (l.stride()[d] != 0 && l.shape()[d] != 1) return false;
  return true;
}

bool is_bitwise(BinaryOp op) { return op == BinaryOp::BitAnd || op == BinaryOp::BitOr || op == BinaryOp::BitXor; }
// What binary.metal instantiates for bool (torch's rules: + is or, * is and; - and / are refused).
bool bool_binary_supported(BinaryOp op) {
  return is_cmp(op) || is_bitwise(op) || op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Maximum ||
         op == BinaryOp::Minimum;
}

std::vector<uint32_t> shape_u32(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

}  // namespace

StoragePtr unary(const GpuStorage& s, UnaryOp op, const Layout& l, double p0, double p1) {
  const char* name = op_name(op);
  const DType dt = s.dtype();
  const std::string suffix = std::string(name) + "_" + type_suffix(dt, name);
  EMBER_CHECK(op != UnaryOp::BitNot || !is_float(dt), DType, "[", name, "] not supported for ", dtype_name(dt),
              " (expected an integer or bool dtype)");
  EMBER_CHECK(is_float(dt) || int_unary_supported(op, dt), DType, "[", name, "] not supported for ", dtype_name(dt),
              " (expected a float dtype)");
  const uint32_t n = checked_u32(l.numel(), name);
  GpuDevice& dev = s.gpu_device();
  auto out = new_storage(dev, dt, n, name);
  if (n == 0) return out;
  auto params = [&](Launch& k) -> Launch& {
    if (dt == DType::F64) return k.scalar(UnaryParams<double>{p0, p1});
    if (is_float(dt)) return k.scalar(UnaryParams<float>{(float)p0, (float)p1});
    return k.scalar(int_params(op, dt, p0, p1));
  };
  if (is_dense(l)) {
    Launch k(dev, "unary.metal", "unary_contig_" + suffix);
    params(k.input(s, l.offset()).output(*out).scalar(n)).dispatch_1d(ceil_div(n, 4));
    return out;
  }
  const Strided c = collapse(l);
  Launch k(dev, "unary.metal", "unary_strided_" + suffix);
  params(k.input(s).output(*out).scalar(n))
      .scalar(c.ndim()).array(shape_u32(c.shape)).array(c.strides).scalar<int64_t>(c.offset)
      .dispatch_1d(n);
  return out;
}

StoragePtr binary(const GpuStorage& s, BinaryOp op, const Layout& l, const BackendStorage& rhs_, const Layout& rl) {
  const char* name = op_name(op);
  const DType dt = s.dtype();
  const std::string suffix = std::string(name) + "_" + type_suffix(dt, name);
  EMBER_CHECK(op != BinaryOp::Pow || is_float(dt), DType, "[", name, "] not supported for ", dtype_name(dt));
  EMBER_CHECK(!is_bitwise(op) || !is_float(dt), DType, "[", name, "] not supported for ", dtype_name(dt),
              " (expected an integer or bool dtype)");
  EMBER_CHECK(dt != DType::Bool || bool_binary_supported(op), DType, "[", name, "] not supported for bool");
  const GpuStorage& rhs = as_gpu(rhs_);
  const uint32_t n = checked_u32(l.numel(), name);
  GpuDevice& dev = s.gpu_device();
  auto out = new_storage(dev, is_cmp(op) ? DType::Bool : dt, n, name);
  if (n == 0) return out;
  // Both dense, or one of them a single element seen through stride-0 dims (a scalar operand).
  const char* dense = nullptr;
  if (is_dense(l) && is_dense(rl)) dense = "binary_contig_";
  else if (is_dense(l) && is_single(rl)) dense = "binary_scalar_rhs_";
  else if (is_single(l) && is_dense(rl)) dense = "binary_scalar_lhs_";
  if (dense) {
    Launch(dev, "binary.metal", dense + suffix)
        .input(s, l.offset()).input(rhs, rl.offset()).output(*out).scalar(n)
        .dispatch_1d(ceil_div(n, 4));
    return out;
  }
  const std::vector<Strided> c = collapse({&l, &rl});
  Launch(dev, "binary.metal", "binary_strided_" + suffix)
      .input(s).input(rhs).output(*out).scalar(n)
      .scalar(c[0].ndim()).array(shape_u32(c[0].shape)).array(c[0].strides).array(c[1].strides)
      .array(std::vector<int64_t>{c[0].offset, c[1].offset})
      .dispatch_1d(n);
  return out;
}

}  // namespace ember::gpu::ops
