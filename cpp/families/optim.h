// The fused optimizer step's kernel family (SGD, Adam/AdamW, RMSprop): see registry.h.
#pragma once
#include <vector>

#include "../backend.h"

namespace ember {

// One step in place on *a.p and the state buffers (see OptimArgs in backend.h); the device is a.p's. The
// seam (fused.cpp) has validated every operand, skips empty steps and bumps the versions.
struct OptimStep {
  static constexpr const char* kName = "optim_step";
  using Fn = void (*)(const OptimArgs& a);
};

// Many such steps at once (optim_step_multi), each validated as above; optional: a device without it
// runs the steps one after another through OptimStep.
struct OptimStepMulti {
  static constexpr const char* kName = "optim_step_multi";
  using Fn = void (*)(const std::vector<OptimArgs>& steps);
};

}  // namespace ember
