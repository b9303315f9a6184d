// A user kernel's arguments as every device's dispatcher takes them (em.metal.Kernel today): bound in order,
// one [[buffer(n)]] (or parameter) each. Device-neutral, so a new device's user kernels bind the same list.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"

namespace ember {

struct KernelArg {
  enum class Role : uint8_t { In, Out, InOut, Bytes, Skip };
  Role role = Role::Skip;
  StoragePtr storage;  // In, Out, InOut
  std::string bytes;   // Bytes: a value copied at encoding
  std::string what;    // how messages name it: "inputs[0]"
};

// The storages a dispatch writes: their versions move before and after it, as an in-place op's do, so a
// graph that saved one of them raises InplaceModifiedError in backward.
inline void bump_written(const std::vector<KernelArg>& args) {
  for (const KernelArg& a : args)
    if (a.storage && (a.role == KernelArg::Role::Out || a.role == KernelArg::Role::InOut)) a.storage->bump_version();
}

}  // namespace ember
