// ISA cross-check harness: runs two ISA variants of ember's kernel tables on identical inputs and compares them.
//
//   harness [A B] [--break FAMILY] [--only kernels|fused|gemm] [--quick] [--verbose] [seed=N]
//     A B: base|avx2|avx512 (default: avx2 avx512 when the CPU has AVX-512 F/BW/VL/DQ, else base avx2)
//     --break F: perturb the last element of B's first input in every case of family F (unary, binary,
//                reduce, col, softmax, softmax_bwd, rms, rms_bwd, ln, ln_bwd, act, sdpa, sdpa_bwd, gemm): proves
//                that a difference in F is reported.
// Runs as /init (PID 1) under bochs too: then it powers the machine off after printing "EMU DONE".
// Exit status: 0 = no mismatch, 1 = mismatches, 2 = a variant is unavailable on this CPU.
#include <cpuid.h>
#include <sys/reboot.h>
#include <unistd.h>

#include "harness.h"

namespace isa_check {

bool g_verbose = false, g_quick = false, g_fma_both = false;
std::string g_break;
int g_fail = 0, g_checks = 0;
static int g_printed = 0;
Variant *VA = nullptr, *VB = nullptr;

static uint64_t rng_s = 0x243F6A8885A308D3ull;
uint64_t rnd() {  // splitmix64: cheap, and the same sequence on every machine and libc
  uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double urand(double lo, double hi) { return lo + (hi - lo) * ((rnd() >> 11) * (1.0 / 9007199254740992.0)); }

// ---- buffers ---------------------------------------------------------------------------------------
double Buf::get(int64_t i) const {
  const void* p = (const uint8_t*)data() + i * isz(dt);
  switch (dt) {
    case DType::F32: return *(const float*)p;
    case DType::F64: return *(const double*)p;
    case DType::F16: return f16_to_f32(*(const uint16_t*)p);
    case DType::BF16: return bf16_to_f32(*(const uint16_t*)p);
    case DType::I64: return (double)*(const int64_t*)p;
    case DType::U32: return *(const uint32_t*)p;
    case DType::U8: return *(const uint8_t*)p;
  }
  return 0;
}
void Buf::set(int64_t i, double v) {
  void* p = (uint8_t*)data() + i * isz(dt);
  switch (dt) {
    case DType::F32: *(float*)p = (float)v; break;
    case DType::F64: *(double*)p = v; break;
    case DType::F16: *(uint16_t*)p = f64_to_f16(v); break;
    case DType::BF16: *(uint16_t*)p = f32_to_bf16((float)v); break;
    case DType::I64: *(int64_t*)p = (int64_t)v; break;
    case DType::U32: *(uint32_t*)p = (uint32_t)(int64_t)v; break;
    case DType::U8: *(uint8_t*)p = (uint8_t)(int64_t)v; break;
  }
}
int64_t Buf::geti(int64_t i) const {
  const void* p = (const uint8_t*)data() + i * isz(dt);
  switch (dt) {
    case DType::I64: return *(const int64_t*)p;
    case DType::U32: return *(const uint32_t*)p;
    case DType::U8: return *(const uint8_t*)p;
    default: return (int64_t)get(i);
  }
}
void Buf::seti(int64_t i, int64_t v) {
  void* p = (uint8_t*)data() + i * isz(dt);
  switch (dt) {
    case DType::I64: *(int64_t*)p = v; break;
    case DType::U32: *(uint32_t*)p = (uint32_t)v; break;
    case DType::U8: *(uint8_t*)p = (uint8_t)v; break;
    default: set(i, (double)v);
  }
}

void fill_uniform(Buf& b, double lo, double hi) {
  for (int64_t i = 0; i < b.n; ++i) {
    if (isf(b.dt)) b.set(i, urand(lo, hi));
    else b.set(i, std::floor(urand(lo, hi + 1)));
  }
}
void add_specials(Buf& b) {
  if (!isf(b.dt)) return;
  const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, -3e-39, 6e4, -6e4, 1e30, -1e-30, 88.5, -104.0, 710.0};
  for (int64_t i = 0; i < b.n; i += 3) b.set(i, sp[(i / 3) % (sizeof sp / sizeof sp[0])]);
}
void perturb_last(Buf& b, int64_t count) {
  if (count <= 0) return;
  const double v = b.get(count - 1);
  if (isf(b.dt)) b.set(count - 1, v + std::max(0.01, std::fabs(v) * 0.01));
  else b.seti(count - 1, b.geti(count - 1) + 1);  // exact: int64 values past 2^53 too
}

// ---- comparison ---------------------------------------------------------------------------------------
static int64_t ord_bits(DType dt, const void* p) {  // monotone integer image of a float's bits (ulp distance)
  int64_t u;
  switch (dt) {
    case DType::F32: { int32_t i; memcpy(&i, p, 4); u = i; return u < 0 ? (int64_t)INT32_MIN - u : u; }
    case DType::F64: { int64_t i; memcpy(&i, p, 8); return i < 0 ? INT64_MIN - i : i; }
    default: { int16_t i; memcpy(&i, p, 2); u = i; return u < 0 ? (int64_t)INT16_MIN - u : u; }
  }
}
static double type_eps(DType dt) {
  switch (dt) {
    case DType::F32: return 1.1920929e-7;
    case DType::F64: return 2.220446049250313e-16;
    case DType::F16: return 9.765625e-4;
    case DType::BF16: return 7.8125e-3;
    default: return 0;
  }
}

// Compares `n` elements of a and b (both dt, element stride `stride`).
static Stat compare(DType dt, const void* a, const void* b, int64_t n, int64_t stride, double floor) {
  Stat s;
  s.n = n;
  const size_t w = isz(dt);
  double maxb = 0, maxd = 0;
  Buf ta(dt, 1), tb(dt, 1);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* pa = (const uint8_t*)a + i * stride * w;
    const uint8_t* pb = (const uint8_t*)b + i * stride * w;
    if (memcmp(pa, pb, w) == 0) {
      if (isf(dt)) { memcpy(tb.data(), pb, w); double vb = tb.get(0); if (std::isfinite(vb)) maxb = std::max(maxb, std::fabs(vb)); }
      continue;
    }
    memcpy(ta.data(), pa, w);
    memcpy(tb.data(), pb, w);
    const double va = ta.get(0), vb = tb.get(0);
    if (isf(dt) && va != va && vb != vb) continue;  // both NaN (payload may differ)
    ++s.diff;
    if (s.first_bad < 0) s.first_bad = i;
    if (!isf(dt)) { s.max_ulp = INFINITY; continue; }
    if ((va != va) != (vb != vb) || std::isinf(va) != std::isinf(vb)) { s.nan_mismatch = true; s.max_ulp = INFINITY; continue; }
    if (std::isfinite(vb)) maxb = std::max(maxb, std::fabs(vb));
    s.max_ulp = std::max(s.max_ulp, (double)std::llabs(ord_bits(dt, pa) - ord_bits(dt, pb)));
    if (std::isfinite(va) && std::isfinite(vb)) maxd = std::max(maxd, std::fabs(va - vb));
  }
  maxb = std::max(maxb, floor);
  s.norm = maxb > 0 ? maxd / maxb : maxd;
  return s;
}
// Got vs a double reference: max |got - ref| / max(|ref|, floor) (normwise), NaN/inf must match.
struct RefStat {
  double err = 0;  // in units of the type's eps
  int64_t worst = -1, bad_special = -1;
};
static RefStat compare_ref(const Buf& got, const std::vector<double>& ref, int64_t n, int64_t stride,
                           bool elementwise, double floor) {
  RefStat r;
  double scale = floor;
  if (!elementwise)
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(ref[i])) scale = std::max(scale, std::fabs(ref[i]));
  const double eps = isf(got.dt) ? type_eps(got.dt) : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got.get(i * stride), f = ref[i];
    if (!std::isfinite(f) || !std::isfinite(g)) {
      const bool same = (f != f && g != g) || (f == g);
      if (!same && r.bad_special < 0) r.bad_special = i;
      continue;
    }
    const double sc = elementwise ? std::max(std::fabs(f), floor) : scale;
    const double e = sc > 0 ? std::fabs(g - f) / sc / eps : (g == f ? 0 : INFINITY);
    if (e > r.err) r.err = e, r.worst = i;
  }
  return r;
}

void Group::done() {
  printf("%-5s %-34s cases %4d  elems %8lld  notbitident %7lld  maxulp %-6g normdiff %-9.3g refA %-7.3g refB %-7.3g eps\n",
         fails ? "FAIL" : "ok", name.c_str(), cases, (long long)elems, (long long)diffs, max_ulp, max_norm, max_ref_a,
         max_ref_b);
  fflush(stdout);
}
void report(Group& g, const std::string& what, const char* msg) {
  ++g.fails;
  ++g_fail;
  if (g_printed++ < 400) printf("  MISMATCH %s: %s\n", what.c_str(), msg);  // the count stays exact
}
void check_pair(Group& g, const std::string& what, const Buf& A, const Buf& B, int64_t n, int64_t stride,
                double ulp_tol, double norm_tol, double floor) {
  ++g_checks;
  Stat s = compare(A.dt, A.data(), B.data(), n, stride, floor);
  g.add(s);
  char msg[512];
  if (!A.guard_ok() || !B.guard_ok()) report(g, what, "write past the end of the output");
  if (s.diff == 0) return;
  if (g_verbose)
    printf("  diff %s: %lld of %lld, max %g ulp, normwise %.3g\n", what.c_str(), (long long)s.diff, (long long)n,
           s.max_ulp, s.norm);
  // integers, NaN/inf against a finite value, and exact checks fail on any difference
  bool ok;
  if (!isf(A.dt) || s.nan_mismatch) ok = false;
  else if (ulp_tol == 0 && norm_tol == 0) ok = false;
  else ok = s.max_ulp <= ulp_tol || s.norm <= norm_tol * type_eps(A.dt);
  if (!ok) {
    const int64_t i = s.first_bad;
    snprintf(msg, sizeof msg, "B!=A at [%lld] A=%.9g B=%.9g (%lld of %lld differ, max %g ulp, normwise %.3g)",
             (long long)i, A.get(i * stride), B.get(i * stride), (long long)s.diff, (long long)n, s.max_ulp, s.norm);
    report(g, what, msg);
  }
}
void check_ref(Group& g, const std::string& what, const Buf& got, const char* who, const std::vector<double>& ref,
               int64_t n, int64_t stride, double tol, bool elementwise, double floor) {
  RefStat r = compare_ref(got, ref, n, stride, elementwise, floor);
  double& m = who[0] == 'A' ? g.max_ref_a : g.max_ref_b;
  m = std::max(m, r.err);
  char msg[512];
  if (r.bad_special >= 0) {
    snprintf(msg, sizeof msg, "%s vs ref: special value at [%lld] got %.9g ref %.9g", who, (long long)r.bad_special,
             got.get(r.bad_special * stride), ref[r.bad_special]);
    report(g, what, msg);
  }
  if (r.err > tol) {
    snprintf(msg, sizeof msg, "%s vs ref: error %.3g eps > %.3g at [%lld] got %.9g ref %.9g", who, r.err, tol,
             (long long)r.worst, got.get(r.worst * stride), ref[r.worst]);
    report(g, what, msg);
  }
}
void check_int_ref(Group& g, const std::string& what, const Buf& got, const char* who,
                   const std::vector<int64_t>& ref, int64_t n, int64_t stride) {
  int64_t bad = -1, count = 0;
  for (int64_t i = 0; i < n; ++i)
    if (got.geti(i * stride) != ref[i]) count += 1, bad = bad < 0 ? i : bad;
  if (count == 0) return;
  char msg[512];
  snprintf(msg, sizeof msg, "%s vs exact ref: %lld of %lld differ, first [%lld] got %lld ref %lld", who,
           (long long)count, (long long)n, (long long)bad, (long long)got.geti(bad * stride), (long long)ref[bad]);
  report(g, what, msg);
}

// ---- variants ---------------------------------------------------------------------------------------
static bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
static bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
static Variant* make_variant(const std::string& n) {
  Variant* v = new Variant();
  if (n == "base") { v->name = "base"; register_kernels_base(v->k); register_fused_base(v->f); register_gemm_base(v->g); }
  else if (n == "avx2") {
    if (!cpu_has_avx2()) { printf("this CPU has no AVX2\n"); return nullptr; }
    v->name = "avx2"; register_kernels_avx2(v->k); register_fused_avx2(v->f); register_gemm_avx2(v->g);
  } else if (n == "avx512") {
    if (!cpu_has_avx512()) { printf("this CPU has no AVX-512 F/BW/VL/DQ\n"); return nullptr; }
    v->name = "avx512"; register_kernels_avx512(v->k); register_fused_avx512(v->f); register_gemm_avx512(v->g);
  } else { printf("unknown variant %s\n", n.c_str()); return nullptr; }
  return v;
}

const std::vector<int64_t>& lengths() {
  // around every vector width (8/16 floats, 4/8 doubles, 16/32 halves), tails, and multi-block sizes
  static std::vector<int64_t> full = {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 257, 1000, 4097};
  static std::vector<int64_t> quick = {1, 7, 17, 33, 100, 257};
  return g_quick ? quick : full;
}

static void finish(bool as_init) {
  printf("SUMMARY %s vs %s: %d checks, %d mismatches%s\n", VB ? VB->name : "?", VA ? VA->name : "?", g_checks,
         g_fail, g_break.empty() ? "" : " (with --break)");
  printf("EMU DONE\n");
  fflush(stdout);
  if (as_init) {  // PID 1 must not exit (kernel panic): power the emulated machine off instead
    sync();
    sleep(1);
    reboot(RB_POWER_OFF);
  }
}
}  // namespace isa_check

int main(int argc, char** argv) {
  using namespace isa_check;
  const bool as_init = getpid() == 1;
  std::string a, b;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--break" && i + 1 < argc) g_break = argv[++i];
    else if (s == "--quick") g_quick = true;
    else if (s.rfind("seed=", 0) == 0) rng_s = 0x243F6A8885A308D3ull + std::stoull(s.substr(5));
    else if (s == "--verbose") g_verbose = true;
    else if (s == "--only" && i + 1 < argc) only.push_back(argv[++i]);
    else if (s == "base" || s == "avx2" || s == "avx512") { if (a.empty()) a = s; else b = s; }
    else printf("harness: ignoring argument '%s'\n", s.c_str());  // e.g. kernel parameters passed to /init
  }
  if (a.empty()) {
    if (cpu_has_avx512()) a = "avx2", b = "avx512";
    else a = "base", b = "avx2";
  }
  {
    // XCR0 shows whether the kernel enabled the AVX-512 state (0xe7); without it AVX-512 code faults
    unsigned ea, eb, ec, ed, lo = 0, hi = 0;
    __cpuid(1, ea, eb, ec, ed);
    if (ec & (1u << 27)) __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("harness: A=%s B=%s  cpu avx2=%d avx512(f,bw,vl,dq)=%d xcr0=%#x%s%s\n", a.c_str(), b.c_str(),
           (int)cpu_has_avx2(), (int)cpu_has_avx512(), lo, g_quick ? " quick" : "",
           g_break.empty() ? "" : (" break=" + g_break).c_str());
    fflush(stdout);
  }
  VA = make_variant(a);
  VB = make_variant(b);
  if (!VA || !VB) { g_fail = 1; finish(as_init); return 2; }
  g_fma_both = (a != "base" && b != "base");
  auto want = [&](const char* f) { return only.empty() || std::find(only.begin(), only.end(), f) != only.end(); };
  if (want("fused")) {
    test_softmax();
    test_norms();
    test_act();
    test_sdpa();
  }
  if (want("gemm")) test_gemm();
  if (want("kernels")) {
    test_reduce();
    test_binary();
    test_unary();
  }
  finish(as_init);
  return g_fail ? 1 : 0;
}
