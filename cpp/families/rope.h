// Rotary position embedding's kernel family (its backward is the inverse rotation): see registry.h.
#pragma once
#include "../backend.h"

namespace ember {

// x (..., L, D) through l rotated as RopeArgs (backend.h) says. Returns a new dense storage of l's
// shape in x's dtype. The seam (fused.cpp) has validated every argument.
struct Rope {
  static constexpr const char* kName = "rope";
  using Fn = StoragePtr (*)(const BackendStorage& x, const Layout& l, const RopeArgs& a);
};

}  // namespace ember
