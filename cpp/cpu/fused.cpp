// Fused kernels: row walking and threading (see fused.h).
#include "cpu/fused.h"
