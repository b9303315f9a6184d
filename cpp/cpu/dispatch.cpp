// Picks the kernel tables for the running CPU once (cpuid), honouring EMBER_ISA.
#include "cpu/dispatch.h"

#include <cstdlib>
#include <cstring>

#include "cpu/fused.h"
#include "cpu/packed_gemm.h"

namespace ember::cpu {

Isa active_isa() {
  static const Isa isa = [] {
    Isa best = Isa::Base;
#if defined(EMBER_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::Avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      best = Isa::Avx512;
#endif
    if (const char* e = std::getenv("EMBER_ISA")) {
      Isa want = !std::strcmp(e, "base") ? Isa::Base : !std::strcmp(e, "avx2") ? Isa::Avx2 : Isa::Avx512;
      if (want < best) best = want;
    }
    return best;
  }();
  return isa;
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
      case Isa::Avx512: register_fused_avx512(t); break;
      case Isa::Avx2: register_fused_avx2(t); break;
#endif
      default: register_fused_base(t); break;
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

}  // namespace ember::cpu
