// A loaded kernel module of either emulator (MSL or CUDA): a shared object speaking metal/msl_abi.h, its
// kernels looked up by name.
#pragma once
#include <string>
#include <vector>

#include "msl_abi.h"

namespace ember::emu {

// Kept loaded for the life of the process (kernels may be running). `tag` starts its messages.
class Module {
 public:
  // Initialises the module with the runtime's Api; throws Error "[tag] ..." when it lacks the entry points
  // or speaks another ABI version.
  Module(void* handle, std::string label, const char* tag);
  const msl_abi::Kernel* find(const std::string& name) const;  // nullptr when absent
  std::vector<std::string> names() const;
  const std::string& label() const { return label_; }

 private:
  void* handle_;
  std::string label_;
  const msl_abi::Kernel* kernels_ = nullptr;
  uint32_t count_ = 0;
};

}  // namespace ember::emu
