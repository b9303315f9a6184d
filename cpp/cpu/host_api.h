// What the bindings use of the CPU backend directly: CpuStorage (zero-copy numpy / DLPack views), the
// thread pool's size and Ctrl-C hooks, and the SIMD level in use. Everything else goes through device.h.
#pragma once
#include <string>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"

namespace ember::cpu {
// The instruction set the kernels run ("base", "avx2", "avx512"; EMBER_ISA may lower it).
std::string isa();
bool has_amx();  // whether bfloat16 matmul runs on AMX tiles here (cpu/gemm_amx.cpp)
// randint's draw: n values low + u, u uniform in [0, span_m1] from 64-bit draws of the global generator,
// straight into an integer dtype (int64, int32, uint32, uint8, bool): no float rounding, any span.
StoragePtr rand_int(DType dt, int64_t n, int64_t low, uint64_t span_m1);
}  // namespace ember::cpu
