// Kernel registry: op families outside the core BackendStorage trait register one function per device kind.
#pragma once
#include <array>

#include "backend.h"
#include "error.h"

namespace ember {

// A family is a struct with `static constexpr const char* kName` and `using Fn = <function pointer>`,
// whose first parameter is, or holds, the operand that picks the device (x; SdpaArgs' q). Backends fill the
// table at import (cpu::register_kernels, metal::register_backend); a device without an entry raises
// Unsupported naming the op and the device, so a backend can grow family by family.
template <class Family>
class Kernels {
 public:
  using Fn = typename Family::Fn;
  static void set(DeviceKind kind, Fn fn) { table()[static_cast<int>(kind)] = fn; }
  static bool has(DeviceKind kind) { return table()[static_cast<int>(kind)] != nullptr; }
  // The implementation for x's device.
  static Fn of(const BackendStorage& x) {
    const Fn fn = table()[static_cast<int>(x.device().kind)];
    EMBER_CHECK(fn != nullptr, Unsupported, "[", Family::kName, "] is not implemented on device ",
                x.device().str());
    return fn;
  }

 private:
  static std::array<Fn, kNumDeviceKinds>& table() {
    static std::array<Fn, kNumDeviceKinds> t{};
    return t;
  }
};

namespace cpu {
// Registers every CPU family (cpu/register_kernels.cpp); the extension calls it once at import.
void register_kernels();
}  // namespace cpu

}  // namespace ember
