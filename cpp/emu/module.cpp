// Loading a compiled kernel module (either emulator): its two exported functions, the ABI check, lookup.
#include "emu/module.h"

#include <dlfcn.h>

#include "emu/runtime.h"
#include "error.h"

namespace ember::emu {

Module::Module(void* handle, std::string label, const char* tag) : handle_(handle), label_(std::move(label)) {
  using Init = uint32_t (*)(const msl_abi::Api*);
  using List = const msl_abi::Kernel* (*)(uint32_t*);
  auto init = reinterpret_cast<Init>(::dlsym(handle, "msl_module_init"));
  auto list = reinterpret_cast<List>(::dlsym(handle, "msl_module_kernels"));
  EMBER_CHECK(init && list, Value, "[", tag, "] ", label_, ": the compiled module lacks its entry points");
  EMBER_CHECK(init(runtime_api()) == msl_abi::kVersion, Value, "[", tag, "] ", label_, ": module ABI mismatch");
  kernels_ = list(&count_);
}

const msl_abi::Kernel* Module::find(const std::string& name) const {
  for (uint32_t i = 0; i < count_; ++i)
    if (name == kernels_[i].name) return &kernels_[i];
  return nullptr;
}

std::vector<std::string> Module::names() const {
  std::vector<std::string> n;
  for (uint32_t i = 0; i < count_; ++i) n.push_back(kernels_[i].name);
  return n;
}

}  // namespace ember::emu
