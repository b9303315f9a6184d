// The fused optimizer step's kernel family (SGD, Adam/AdamW, RMSprop): see registry.h.
#pragma once
#include "../backend.h"

namespace ember {

// One step in place on *a.p and the state buffers (see OptimArgs in backend.h); the device is a.p's. The
// seam (fused.cpp) has validated every operand, skips empty steps and bumps the versions.
struct OptimStep {
  static constexpr const char* kName = "optim_step";
  using Fn = void (*)(const OptimArgs& a);
};

}  // namespace ember
