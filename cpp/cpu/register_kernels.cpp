// The CPU backend's entries in the kernel registry: one call per family, made once at import.
#include "registry.h"

namespace ember::cpu {

void register_group_norm();  // cpu/group_norm.cpp

void register_kernels() { register_group_norm(); }

}  // namespace ember::cpu
