// Seeded counter-based random numbers (splitmix64 over the global counter of device.h) and arange on the CPU.
#pragma once
#include "cpu/cpu_storage.h"

namespace ember::cpu {
StoragePtr rand_uniform(DType dt, int64_t n, double lo, double hi);
StoragePtr rand_normal(DType dt, int64_t n, double mean, double std);
StoragePtr arange(DType dt, double start, double step, int64_t n);
}  // namespace ember::cpu
