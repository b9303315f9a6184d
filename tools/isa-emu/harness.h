// Shared declarations of the ISA cross-check harness: buffers, comparisons, result groups, variants.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/fused.h"
#include "cpu/packed_gemm.h"
#include "dtype.h"

namespace isa_check {
using namespace ember;
using namespace ember::cpu;

// ---- options and counters (harness_main.cpp) ----
extern bool g_verbose, g_quick, g_fma_both;
extern std::string g_break;  // family whose B inputs get one element perturbed (self-test)
extern int g_fail, g_checks;

uint64_t rnd();                         // splitmix64, seeded by seed=N
double urand(double lo, double hi);     // uniform in [lo, hi)

inline const char* dtn(DType d) {
  static const char* n[] = {"f32", "f16", "bf16", "f64", "i64", "u32", "u8"};
  return n[(int)d];
}
inline size_t isz(DType d) { return itemsize(d); }
inline bool isf(DType d) { return is_float(d); }
inline DType stats_dt(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// A 128-byte-aligned buffer of `n` elements, `off` elements past the aligned start (to test misaligned
// pointers), followed by kGuard bytes of 0xA5 that must survive the kernel (catches overruns).
constexpr size_t kGuard = 256;
struct Buf {
  DType dt = DType::F32;
  int64_t n = 0;
  size_t off = 0;
  std::vector<uint8_t> raw;
  Buf() = default;
  Buf(DType d, int64_t count, size_t offset = 0) : dt(d), n(count), off(offset) {
    raw.assign((n + off) * isz(d) + kGuard + 128, 0xA5);
  }
  // copies keep the logical content (the aligned start moves with the allocation)
  Buf(const Buf& o) : dt(o.dt), n(o.n), off(o.off), raw(o.raw.size()) { memcpy(base(), o.base(), o.raw.size() - 128); }
  Buf& operator=(const Buf& o) {
    dt = o.dt, n = o.n, off = o.off;
    raw.assign(o.raw.size(), 0);
    memcpy(base(), o.base(), o.raw.size() - 128);
    return *this;
  }
  uint8_t* base() { return raw.data() + ((128 - ((uintptr_t)raw.data() & 127)) & 127); }
  const uint8_t* base() const { return raw.data() + ((128 - ((uintptr_t)raw.data() & 127)) & 127); }
  void* data() { return base() + off * isz(dt); }
  const void* data() const { return base() + off * isz(dt); }
  double get(int64_t i) const;
  void set(int64_t i, double v);
  // integer element i exactly (get() goes through double and loses int64 bits above 2^53)
  int64_t geti(int64_t i) const;
  void seti(int64_t i, int64_t v);  // stores v modulo 2^bits
  bool guard_ok() const {
    const uint8_t* e = (const uint8_t*)data() + n * isz(dt);
    for (size_t i = 0; i < kGuard; ++i)
      if (e[i] != 0xA5) return false;
    return true;
  }
};
inline Buf copy_of(const Buf& b) { return b; }

void fill_uniform(Buf& b, double lo, double hi);
void add_specials(Buf& b);                     // NaN, +-inf, +-0, subnormals, overflow (float types)
void perturb_last(Buf& b, int64_t count);      // --break: a small but clear change of one element

// ---- one result line per (kernel, dtype) group, accumulated over its cases ----
struct Stat {
  int64_t n = 0, diff = 0;       // elements compared, not bit-identical (NaN == NaN)
  double max_ulp = 0, norm = 0;  // max ulp distance, max|a-b| / max|b|
  int64_t first_bad = -1;
  bool nan_mismatch = false;
};
struct Group {
  std::string name;
  int cases = 0, fails = 0;
  int64_t elems = 0, diffs = 0;
  double max_ulp = 0, max_norm = 0, max_ref_a = 0, max_ref_b = 0;
  void add(const Stat& s) {
    elems += s.n;
    diffs += s.diff;
    max_ulp = std::max(max_ulp, s.max_ulp);
    max_norm = std::max(max_norm, s.norm);
  }
  void done();  // prints the group's "ok"/"FAIL" line
};
void report(Group& g, const std::string& what, const char* msg);
// B vs A: bit-identical when both tolerances are 0, else within ulp_tol ulps or norm_tol eps normwise.
void check_pair(Group& g, const std::string& what, const Buf& A, const Buf& B, int64_t n, int64_t stride,
                double ulp_tol, double norm_tol, double floor = 0);
// got vs a double reference, normwise (or per element) within tol eps of got's type.
void check_ref(Group& g, const std::string& what, const Buf& got, const char* who, const std::vector<double>& ref,
               int64_t n, int64_t stride, double tol, bool elementwise = false, double floor = 0);
// integer got vs an exact reference (values already wrapped into got's type): every element equal.
void check_int_ref(Group& g, const std::string& what, const Buf& got, const char* who,
                   const std::vector<int64_t>& ref, int64_t n, int64_t stride);

// Tolerance (eps of the output type, normwise) for results whose summation order legitimately differs
// between vector widths.
inline double fused_tol(DType dt) {
  switch (dt) {
    case DType::F32: return 64;  // long float partial sums (256 terms per lane) in another order
    case DType::F64: return 64;
    default: return 2;           // one rounding of the half output either way
  }
}

// ---- the two variants under comparison ----
struct Variant {
  const char* name;
  KernelTable k;
  FusedTable f;
  PackedGemm g;
};
extern Variant *VA, *VB;

const std::vector<int64_t>& lengths();
constexpr DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U32, DType::U8};
constexpr DType kFloat[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

// ---- test families ----
void test_unary();    // harness_kernels.cpp
void test_binary();
void test_reduce();
void test_softmax();  // harness_fused.cpp
void test_norms();
void test_act();
void test_sdpa();     // harness_sdpa.cpp
void test_gemm();     // harness_gemm.cpp
}  // namespace isa_check
