// What the bindings use of the CPU backend directly: CpuStorage (zero-copy numpy / DLPack views), the
// thread pool's size and Ctrl-C hooks, and the SIMD level in use. Everything else goes through device.h.
#pragma once
#include <string>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"

namespace ember::cpu {
// The instruction set the kernels run ("base", "avx2", "avx512"; EMBER_ISA may lower it).
std::string isa();
}  // namespace ember::cpu
