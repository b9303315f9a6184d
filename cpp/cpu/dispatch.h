// Runtime SIMD dispatch: the hot loops are compiled once per ISA (kernels_isa.cpp, fused_isa.cpp)
// into tables of function pointers; cpuid picks one table at first use.
#pragma once
#include <cstdint>

#include "backend.h"

namespace ember::cpu {

enum class Isa : uint8_t { Base = 0, Avx2 = 1, Avx512 = 2 };
Isa active_isa();  // best the CPU supports; EMBER_ISA=base|avx2|avx512 may lower it
const char* isa_name(Isa isa);
// Whether the host CPU (and OS) can run FMA code, whatever EMBER_ISA says (false off x86-64).
bool host_has_fma();

// out[i*os] = op(in[i*is]) for i < n (strides in elements; 1 is the fast path).
using UnaryFn = void (*)(const void* in, int64_t is, void* out, int64_t os, int64_t n, double p0, double p1);
// out[i] = op(a[i*sa], b[i*sb]); sa, sb in {0, 1} are the fast paths. out is contiguous.
using BinaryFn = void (*)(const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n);
// Reduces a contiguous row of n elements into *out (value in the input dtype, sum of halves in float
// then rounded once).
using ReduceRowFn = void (*)(const void* in, int64_t n, void* out);
// acc[j] (op)= in[j] for j < n: combines one contiguous row into an accumulator row of the same dtype
// (the column-reduction step). For halves the accumulator is float.
using ReduceColFn = void (*)(const void* in, int64_t n, void* acc);

struct KernelTable {
  UnaryFn unary[kNumUnary][kNumDTypes] = {};
  BinaryFn binary[kNumBinary][kNumDTypes] = {};
  ReduceRowFn reduce_row[3][kNumDTypes] = {};  // Sum, Max, Min
  ReduceColFn reduce_col[3][kNumDTypes] = {};
};

const KernelTable& kernels();

// One of these per ISA translation unit (EMBER_ISA = base, avx2, avx512).
void register_kernels_base(KernelTable& t);
void register_kernels_avx2(KernelTable& t);
void register_kernels_avx512(KernelTable& t);

}  // namespace ember::cpu
