// Picks the kernel tables for the running CPU once (cpuid), honouring EMBER_ISA.
#include "cpu/dispatch.h"

#include <cstdlib>
#include <cstring>

#include "cpu/fused.h"
#include "cpu/packed_gemm.h"

#if defined(EMBER_X86)
#include <cpuid.h>
#endif
#if defined(EMBER_AMX) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ember::cpu {
namespace {
#if defined(EMBER_X86)
// cpuid and xgetbv directly, not __builtin_cpu_supports: that needs compiler-rt's __cpu_model, which
// not every toolchain can link into a shared object (zig's, for the release wheel, cannot).
struct X86Features {
  bool avx2_fma = false, avx512 = false;
};
X86Features x86_features() {
  X86Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
  if (!osxsave) return f;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const bool ymm = (lo & 0x6u) == 0x6u, zmm = (lo & 0xe6u) == 0xe6u;  // the OS saves these registers
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = ymm && fma && f16c && (b & (1u << 5));
  // AVX512 F (16), DQ (17), BW (30), VL (31)
  f.avx512 = f.avx2_fma && zmm && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  return f;
}
#endif
}  // namespace

Isa active_isa() {
  static const Isa isa = [] {
    Isa best = Isa::Base;
#if defined(EMBER_X86)
    const X86Features f = x86_features();
    if (f.avx2_fma) best = Isa::Avx2;
    if (f.avx512) best = Isa::Avx512;
#endif
    if (const char* e = std::getenv("EMBER_ISA")) {
      Isa want = !std::strcmp(e, "base") ? Isa::Base : !std::strcmp(e, "avx2") ? Isa::Avx2 : Isa::Avx512;
      if (want < best) best = want;
    }
    return best;
  }();
  return isa;
}

bool host_has_fma() {
#if defined(EMBER_X86)
  static const bool fma = x86_features().avx2_fma;
  return fma;
#else
  return false;
#endif
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Base: return "base";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

const KernelTable& kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    switch (active_isa()) {
#if defined(EMBER_X86)
      case Isa::Avx512: register_kernels_avx512(t); break;
      case Isa::Avx2: register_kernels_avx2(t); break;
#endif
      default: register_kernels_base(t); break;
    }
    return t;
  }();
  return table;
}

const FusedTable& fused_kernels() {
  static const FusedTable table = [] {
    FusedTable t;
    switch (active_isa()) {
#if defined(EMBER_X86)
      case Isa::Avx512: register_fused_avx512(t), register_fused_optim_avx512(t); break;
      case Isa::Avx2: register_fused_avx2(t), register_fused_optim_avx2(t); break;
#endif
      default: register_fused_base(t), register_fused_optim_base(t); break;
    }
    return t;
  }();
  return table;
}

const PackedGemm& packed_gemm() {
  static const PackedGemm table = [] {
    PackedGemm g;
    switch (active_isa()) {
#if defined(EMBER_X86)
      case Isa::Avx512: register_gemm_avx512(g); break;
      case Isa::Avx2: register_gemm_avx2(g); break;
#endif
      default: register_gemm_base(g); break;
    }
    return g;
  }();
  return table;
}

const AmxGemm* amx_gemm() {
  static const AmxGemm* g = []() -> const AmxGemm* {
#if defined(EMBER_X86) && defined(EMBER_AMX) && defined(__linux__)
    if (active_isa() != Isa::Avx512) return nullptr;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return nullptr;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return nullptr;  // AMX-BF16, AMX-TILE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return nullptr;  // XTILECFG and XTILEDATA enabled by the OS
    // Linux hands tile data to a process only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); the
    // permission covers every thread and is inherited across fork.
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return nullptr;
    static AmxGemm t;
    register_gemm_amx(t);
    return &t;
#else
    return nullptr;
#endif
  }();
  return g;
}

}  // namespace ember::cpu
