// Per-ISA row kernels for the fused ops (see fused.h).
#include "cpu/fused.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_FCAT2(a, b) a##b
#define EMBER_FCAT(a, b) EMBER_FCAT2(a, b)

namespace ember::cpu {
void EMBER_FCAT(register_fused_, EMBER_ISA)(FusedTable& t) {}
}  // namespace ember::cpu
