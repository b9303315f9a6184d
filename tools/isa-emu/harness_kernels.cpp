// ISA cross-check, kernel families: elementwise unary and binary ops, row and column reductions.
#include "harness.h"

namespace isa_check {

// ---- elementwise unary ------------------------------------------------------------------------
static double unary_ref(int op, double x, double p0, double p1) {
  switch ((UnaryOp)op) {
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Sqr: return x * x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Neg: return -x;
    case UnaryOp::Recip: return 1.0 / x;
    case UnaryOp::Relu: return x < 0 ? 0 : x;
    case UnaryOp::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::Silu: return x / (1 + std::exp(-x));
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Round: return std::nearbyint(x);
    case UnaryOp::Sign: return x > 0 ? 1 : x < 0 ? -1 : x;
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::Affine: return x * p0 + p1;
    case UnaryOp::Powf: return std::pow(x, p0);
    case UnaryOp::Clamp: { const double m = x < p0 ? p0 : x; return m > p1 ? p1 : m; }  // min(max(x, lo), hi)
    case UnaryOp::Log1p: return std::log1p(x);
    case UnaryOp::Expm1: return std::expm1(x);
    case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::Log2: return std::log2(x);
    case UnaryOp::Log10: return std::log10(x);
    case UnaryOp::Tan: return std::tan(x);
    case UnaryOp::Sinh: return std::sinh(x);
    case UnaryOp::Cosh: return std::cosh(x);
    case UnaryOp::Asin: return std::asin(x);
    case UnaryOp::Acos: return std::acos(x);
    case UnaryOp::Atan: return std::atan(x);
    case UnaryOp::Trunc: return std::trunc(x);
    case UnaryOp::Elu: return x > 0 ? x : p0 * std::expm1(x);
    case UnaryOp::LeakyRelu: return x > 0 ? x : p0 * x;
    case UnaryOp::Softplus: return p0 * x > p1 ? x : std::log1p(std::exp(p0 * x)) / p0;
    case UnaryOp::Mish: return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOp::Hardswish: return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Hardsigmoid: return std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default: return NAN;
  }
}
static void unary_domain(int op, DType dt, double& lo, double& hi) {
  lo = -10, hi = 10;
  switch ((UnaryOp)op) {
    case UnaryOp::Exp: lo = -100, hi = 90; break;
    case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Powf: lo = 1e-3, hi = 100; break;
    case UnaryOp::Recip: lo = 0.05, hi = 20; break;
    case UnaryOp::Sin: case UnaryOp::Cos: lo = -50, hi = 50; break;
    case UnaryOp::Sigmoid: case UnaryOp::Silu: lo = -40, hi = 40; break;
    case UnaryOp::Log1p: lo = -0.9, hi = 100; break;
    case UnaryOp::Rsqrt: case UnaryOp::Log2: case UnaryOp::Log10: lo = 1e-3, hi = 100; break;
    case UnaryOp::Asin: case UnaryOp::Acos: lo = -1, hi = 1; break;
    case UnaryOp::Tan: lo = -1.4, hi = 1.4; break;
    default: break;
  }
  if (dt == DType::F16 && (UnaryOp)op == UnaryOp::Exp) lo = -17, hi = 11;
  if (dt == DType::U8) lo = 0, hi = 255;
  else if (dt == DType::U32) lo = 0, hi = 100000;
  else if (dt == DType::I64) lo = -100000, hi = 100000;
}
// Exact reference for the integer unary ops, as numpy computes them: integer arithmetic modulo 2^bits
// (sqr/abs/neg of the extremes wrap), ceil/floor/round are the identity, affine with a non-integral
// parameter goes through double and truncates toward zero, then wraps into the type as a cast does,
// and clamp is min(max(x, lo), hi) on the exact values (so lo > hi gives hi everywhere; a bound outside
// the type saturates to its end). Computed in
// 128-bit integers and long double, independently of the kernels' own uint64/double tricks.
static int64_t wrap_to(DType dt, __int128 v) {  // v modulo 2^bits, as Buf::geti reads it back
  const uint64_t u = (uint64_t)(unsigned __int128)v;
  return dt == DType::I64 ? (int64_t)u : dt == DType::U32 ? (int64_t)(uint32_t)u : (int64_t)(uint8_t)u;
}
static int64_t unary_int_ref(int op, DType dt, int64_t x, double p0, double p1) {
  const __int128 X = x;  // geti: unsigned types zero-extended
  // the test parameters keep every double below 2^63 in magnitude, where truncation to __int128 is exact
  auto cast = [&](double d) { return wrap_to(dt, (__int128)std::trunc(d)); };
  switch ((UnaryOp)op) {
    case UnaryOp::Sqr: return wrap_to(dt, X * X);
    case UnaryOp::Abs: return wrap_to(dt, X < 0 ? -X : X);
    case UnaryOp::Neg: return wrap_to(dt, -X);
    case UnaryOp::Relu: return X < 0 ? 0 : x;
    case UnaryOp::Sign: return wrap_to(dt, (X > 0) - (X < 0));
    case UnaryOp::Ceil: case UnaryOp::Floor: case UnaryOp::Round: case UnaryOp::Trunc: return x;
    case UnaryOp::BitNot: return wrap_to(dt, ~X);
    case UnaryOp::Affine:
      if (p0 == std::trunc(p0) && p1 == std::trunc(p1)) return wrap_to(dt, X * (__int128)p0 + (__int128)p1);
      return cast((double)x * p0 + p1);  // one double multiply and add (the harness builds with -ffp-contract=off)
    case UnaryOp::Clamp: {
      const long double lx = (long double)x;  // exact for every int64 (64-bit significand)
      const bool lo_wins = lx < (long double)p0, m_over_hi = (lo_wins ? (long double)p0 : lx) > (long double)p1;
      // a bound outside the type saturates to the type's end
      const long double tmin = dt == DType::I64 ? (long double)INT64_MIN : 0.0L;
      const long double tmax = dt == DType::I64 ? (long double)INT64_MAX : dt == DType::U32 ? 4294967295.0L : 255.0L;
      auto sat = [&](double b) {
        return (long double)b <= tmin ? (int64_t)tmin : (long double)b >= tmax ? (int64_t)tmax : cast(b);
      };
      return m_over_hi ? sat(p1) : lo_wins ? sat(p0) : x;
    }
    default: return 0;
  }
}
// Full-range integer inputs: random bits, plus the extremes and the values around 2^53, 2^60 and the
// square roots of the type's range (where sqr starts to wrap), at fixed positions.
static void fill_int_full(Buf& b) {
  for (int64_t i = 0; i < b.n; ++i) b.seti(i, (int64_t)rnd());
  std::vector<int64_t> ex;
  if (b.dt == DType::I64)
    ex = {INT64_MIN, INT64_MIN + 1, INT64_MAX, -1, 0, 1, (1ll << 53) + 1, -((1ll << 53) + 1), (1ll << 60) - 1,
          1ll << 60, (1ll << 60) + 1, -(1ll << 60) - 1, 3037000499ll, 3037000500ll, -3037000500ll};
  else if (b.dt == DType::U32)
    ex = {0, 1, 0xffffffffll, 0x80000000ll, 65535, 65536, 70000};
  else
    ex = {0, 1, 255, 128, 15, 16};
  for (size_t k = 0; k < ex.size() && (int64_t)(5 * k) < b.n; ++k) b.seti(5 * k, ex[k]);
}

void test_unary() {
  for (int op = 0; op < kNumUnary; ++op)
    for (DType dt : kAll) {
      UnaryFn fa = VA->k.unary[op][(int)dt], fb = VB->k.unary[op][(int)dt];
      if (!fa && !fb) continue;
      Group g;
      g.name = std::string("unary.") + kUnaryNames[op] + "." + dtn(dt);
      if (!fa || !fb) { report(g, g.name, "registered in one variant only"); g.done(); continue; }
      const UnaryOp u = (UnaryOp)op;
      std::vector<std::pair<double, double>> params = {{0, 0}};
      if (u == UnaryOp::Affine) {
        if (isf(dt)) params = {{1.5, -0.25}};
        // integers: truncating float parameters, results below 0 and past the type's range (wrap), negation
        else params = {{0.5, 3}, {-1.5, 2}, {1e5, 7}, {-1, 0}};
        // x * 0.1 is inexact in double: the result must still be the unfused multiply-then-add (as numpy
        // computes x * 0.1 + 0.3), whatever the compiler may contract into an FMA
        if (!isf(dt)) params.push_back({0.1, 0.3});
        if (dt == DType::I64) params.push_back({1e14, -7});  // wraps past 2^63 in integer arithmetic
      }
      if (u == UnaryOp::Powf) params = {{2.5, 0}};
      if (u == UnaryOp::Elu) params = {{1.0, 0}, {0.5, 0}};
      if (u == UnaryOp::LeakyRelu) params = {{0.01, 0}};
      if (u == UnaryOp::Softplus) params = {{1.0, 20}, {2.0, 10}};
      if (u == UnaryOp::Clamp) {
        if (isf(dt)) params = {{-2.5, 3.25}, {3.25, -2.5}};  // lo > hi: hi everywhere
        else params = {{3, 200}, {200, 3}, {-5, 100}, {5e9, 6e9}, {-6e9, -5e9}};  // bounds past u8/u32: saturate
        if (dt == DType::I64) params.push_back({-1152921504606846976.0, 1152921504606846976.0});  // +-2^60: exact compare
      }
      for (auto [p0, p1] : params)
      for (int64_t n : lengths())
        for (int pat = 0; pat < 2; ++pat)
          for (int st = 0; st < 2; ++st) {
            // full-range int64 through double leaves int64's range for |p0| > 0.5 (a cast is undefined there)
            if (pat == 1 && dt == DType::I64 && p0 != std::trunc(p0) && std::fabs(p0) > 0.5) continue;
            const int64_t is = st ? 3 : 1, os = st ? 2 : 1;
            Buf x(dt, n * is, st);  // strided cases also start one element off alignment
            double lo, hi;
            unary_domain(op, dt, lo, hi);
            fill_uniform(x, lo, hi);
            if (pat == 1) { if (isf(dt)) add_specials(x); else fill_int_full(x); }
            Buf xb = copy_of(x);
            if (g_break == "unary") perturb_last(xb, n * is);
            Buf ya(dt, n * os), yb(dt, n * os);
            fa(x.data(), is, ya.data(), os, n, p0, p1);
            fb(xb.data(), is, yb.data(), os, n, p0, p1);
            ++g.cases;
            char what[160];
            snprintf(what, sizeof what, "%s n=%lld is=%lld os=%lld %s p0=%g p1=%g", g.name.c_str(), (long long)n,
                     (long long)is, (long long)os, pat ? (isf(dt) ? "specials" : "fullrange") : "random", p0, p1);
            // whole output buffers, untouched gaps included (both must leave them alone)
            check_pair(g, what, ya, yb, n * os, 1, g_fma_both ? 0 : 4, g_fma_both ? 0 : 8);
            if (!isf(dt)) {
              std::vector<int64_t> ref(n);
              for (int64_t i = 0; i < n; ++i) ref[i] = unary_int_ref(op, dt, x.geti(i * is), p0, p1);
              check_int_ref(g, what, ya, "A", ref, n, os);
              check_int_ref(g, what, yb, "B", ref, n, os);
            } else if (pat == 0) {
              std::vector<double> ref(n);
              for (int64_t i = 0; i < n; ++i) {
                Buf t(dt, 1);  // the correctly rounded result in the output type (overflow -> inf, subnormals)
                t.set(0, unary_ref(op, x.get(i * is), p0, p1));
                ref[i] = t.get(0);
              }
              // tolerance in eps of the type, relative per element with a floor of 1 for bounded functions
              const bool bounded = u == UnaryOp::Sin || u == UnaryOp::Cos || u == UnaryOp::Tanh || u == UnaryOp::Erf ||
                                   u == UnaryOp::Gelu || u == UnaryOp::Silu || u == UnaryOp::Sigmoid ||
                                   u == UnaryOp::Affine ||  // affine: x*p0 + p1 cancels near 0 (no FMA on base)
                                   u == UnaryOp::Atan || u == UnaryOp::Asin || u == UnaryOp::Acos ||
                                   u == UnaryOp::Elu || u == UnaryOp::Mish || u == UnaryOp::Hardswish ||
                                   u == UnaryOp::Hardsigmoid || u == UnaryOp::GeluTanh || u == UnaryOp::Softplus;
              const double tol = dt == DType::F32 ? 8 : 4;
              // relative error below the smallest normal is measured against it (subnormal outputs)
              const double tiny = dt == DType::F16 ? 6.103515625e-05 : dt == DType::F64 ? 2.2250738585072014e-308 : 1.1754944e-38;
              const double floor = bounded ? 1.0 : tiny;
              check_ref(g, what, ya, "A", ref, n, os, tol, true, floor);
              check_ref(g, what, yb, "B", ref, n, os, tol, true, floor);
            }
          }
      g.done();
    }
}

// ---- elementwise binary -------------------------------------------------------------------------
static double binary_ref(int op, double a, double b) {
  switch ((BinaryOp)op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::FloorDiv: return std::floor(a / b);
    case BinaryOp::Rem: { double r = std::fmod(a, b); if (r != 0 && ((b < 0) != (r < 0))) r += b; return r; }
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return NAN;
  }
}
void test_binary() {
  const int64_t strides[][2] = {{1, 1}, {0, 1}, {1, 0}, {2, 3}};
  for (int op = 0; op < kNumBinary; ++op)
    for (DType dt : kAll) {
      BinaryFn fa = VA->k.binary[op][(int)dt], fb = VB->k.binary[op][(int)dt];
      if (!fa && !fb) continue;
      Group g;
      g.name = std::string("binary.") + kBinaryNames[op] + "." + dtn(dt);
      if (!fa || !fb) { report(g, g.name, "registered in one variant only"); g.done(); continue; }
      const bool cmp = is_cmp((BinaryOp)op);
      const DType odt = cmp ? DType::U8 : dt;
      for (int64_t n : lengths())
        for (auto& st : strides)
          for (int pat = 0; pat < 2; ++pat) {
            if (pat == 1 && !isf(dt)) continue;
            const int64_t sa = st[0], sb = st[1];
            Buf a(dt, std::max<int64_t>(1, n * sa), 1), b(dt, std::max<int64_t>(1, n * sb));
            double lo = -20, hi = 20;
            if (dt == DType::U8) lo = 0, hi = 255;
            if (dt == DType::U32) lo = 0, hi = 70000;
            if ((BinaryOp)op == BinaryOp::Pow) { fill_uniform(a, 0.05, 8); fill_uniform(b, -4, 4); }
            else { fill_uniform(a, lo, hi); fill_uniform(b, lo, hi); }
            if (cmp || (BinaryOp)op == BinaryOp::Maximum || (BinaryOp)op == BinaryOp::Minimum)
              for (int64_t i = 0; i < std::min(a.n, b.n); i += 4) b.set(i, a.get(i));  // ties
            if ((BinaryOp)op == BinaryOp::Div && isf(dt))
              for (int64_t i = 0; i < b.n; ++i) if (std::fabs(b.get(i)) < 0.05) b.set(i, 0.5);
            if (pat == 1) { add_specials(a); for (int64_t i = 1; i < b.n; i += 5) b.set(i, i % 2 ? 0.0 : INFINITY); }
            Buf ab = copy_of(a);
            if (g_break == "binary") perturb_last(ab, a.n);
            Buf oa(odt, n), ob(odt, n);
            fa(a.data(), sa, b.data(), sb, oa.data(), n);
            fb(ab.data(), sa, b.data(), sb, ob.data(), n);
            ++g.cases;
            char what[160];
            snprintf(what, sizeof what, "%s n=%lld sa=%lld sb=%lld %s", g.name.c_str(), (long long)n, (long long)sa,
                     (long long)sb, pat ? "specials" : "random");
            check_pair(g, what, oa, ob, n, 1, g_fma_both ? 0 : 4, g_fma_both ? 0 : 8);
            if (pat == 0 && isf(dt)) {
              std::vector<double> ref(n);
              for (int64_t i = 0; i < n; ++i) {
                double r = binary_ref(op, a.get(i * sa), b.get(i * sb));
                if (!cmp) { Buf t(dt, 1); t.set(0, r); r = t.get(0); }  // the correctly rounded result
                ref[i] = r;
              }
              // floordiv/rem: the exact-quotient rounding may differ from numpy's (a - fmod) / b near integers
              const double tol = ((BinaryOp)op == BinaryOp::Pow) ? 4 : ((BinaryOp)op == BinaryOp::FloorDiv) ? 1e300 : 2;
              Buf* outs[2] = {&oa, &ob};
              const char* who[2] = {"A", "B"};
              for (int k = 0; k < 2; ++k) {
                if (cmp) {
                  for (int64_t i = 0; i < n; ++i)
                    if (outs[k]->get(i) != ref[i]) { report(g, what, (std::string(who[k]) + " vs ref: comparison wrong").c_str()); break; }
                } else {
                  check_ref(g, what, *outs[k], who[k], ref, n, 1, tol, true, 1e-300);
                }
              }
            }
          }
      g.done();
    }
}

// ---- reductions ---------------------------------------------------------------------------------
void test_reduce() {
  const char* rn[] = {"sum", "max", "min"};
  for (int kind = 0; kind < 3; ++kind)
    for (DType dt : kAll) {
      ReduceRowFn ra = VA->k.reduce_row[kind][(int)dt], rb = VB->k.reduce_row[kind][(int)dt];
      ReduceColFn ca = VA->k.reduce_col[kind][(int)dt], cb = VB->k.reduce_col[kind][(int)dt];
      Group g, gc;
      g.name = std::string("reduce_row.") + rn[kind] + "." + dtn(dt);
      gc.name = std::string("reduce_col.") + rn[kind] + "." + dtn(dt);
      if (!ra || !rb || !ca || !cb) { report(g, g.name, "missing in a variant"); g.done(); continue; }
      std::vector<int64_t> ns = lengths();
      ns.push_back(g_quick ? 1000 : 10000);  // several 256-element blocks into double
      const DType acc_dt = (dt == DType::F16 || dt == DType::BF16) ? DType::F32 : dt;
      for (int64_t n : ns)
        for (int pat = 0; pat < 3; ++pat) {
          if (pat >= 1 && !isf(dt)) continue;
          Buf x(dt, n, n % 3);
          if (dt == DType::U8) fill_uniform(x, 0, 255);
          else if (dt == DType::U32) fill_uniform(x, 0, 4e9);
          else if (dt == DType::I64) fill_uniform(x, -1e15, 1e15);
          else if (pat == 2) { fill_uniform(x, -1, 1); x.set(n / 2, 1000.0); }  // one big value among small
          else fill_uniform(x, -3, 5);
          if (pat == 1) add_specials(x);
          Buf xb = copy_of(x);
          if (g_break == "reduce") perturb_last(xb, n);
          Buf oa(dt, 1), ob(dt, 1);
          ra(x.data(), n, oa.data());
          rb(xb.data(), n, ob.data());
          ++g.cases;
          char what[160];
          snprintf(what, sizeof what, "%s n=%lld pat=%d", g.name.c_str(), (long long)n, pat);
          // sums use 16 fixed lanes in the source, so every ISA adds in the same order: bit-identical
          check_pair(g, what, oa, ob, 1, 1, 0, 0);
          if (pat != 1 && isf(dt)) {
            double r = kind == 0 ? 0 : x.get(0);
            for (int64_t i = 0; i < n; ++i) {
              const double v = x.get(i);
              r = kind == 0 ? r + v : kind == 1 ? std::max(r, v) : std::min(r, v);
            }
            std::vector<double> ref = {r};
            double sabs = 0;
            for (int64_t i = 0; i < n; ++i) sabs += std::fabs(x.get(i));
            // sum: error bound relative to sum|x| (f32 lanes hold 16 adds before going to double)
            const double tol = kind == 0 ? (dt == DType::F16 || dt == DType::BF16 ? 1 : 32) * std::max(1.0, sabs / std::max(std::fabs(r), 1e-300)) : 0.5;
            check_ref(g, what, oa, "A", ref, 1, 1, tol, true);
            check_ref(g, what, ob, "B", ref, 1, 1, tol, true);
          }
          // column step: acc (C_t<T>) op= in
          Buf acc0(acc_dt, n);
          fill_uniform(acc0, -2, 2);
          if (!isf(dt)) fill_uniform(acc0, 0, 100);
          if (pat == 1) add_specials(acc0);
          Buf aa = copy_of(acc0), abb = copy_of(acc0);
          Buf xc = copy_of(x);
          if (g_break == "col") perturb_last(xc, n);
          ca(x.data(), n, aa.data());
          cb(xc.data(), n, abb.data());
          ++gc.cases;
          snprintf(what, sizeof what, "%s n=%lld pat=%d", gc.name.c_str(), (long long)n, pat);
          check_pair(gc, what, aa, abb, n, 1, 0, 0);
        }
      g.done();
      gc.done();
    }
}

}  // namespace isa_check
