// The plain values the GPU launch layer and both GPU backends' adapters share: a [[function_constant(index)]]
// value (and its spelling as a C++ literal) and a 3-D size (grid or group, in threads).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace ember::gpu {

struct FunctionConstant {
  enum class Type : uint8_t { Bool, Int, UInt, Float };
  uint32_t index = 0;
  Type type = Type::Int;
  double value = 0;  // exact for every int32/uint32 and float
};

// The constant as a literal of its type, as the compilers that see it as a macro take it (the MSL emulator's
// constants, CUDA's -DMSL_FC_<i>=<literal>): "true", "(-3)", "7u", "0x1.8p+0f" (exact: hex floats).
inline std::string constant_literal(const FunctionConstant& c) {
  char buf[64];
  switch (c.type) {
    case FunctionConstant::Type::Bool: return c.value != 0 ? "true" : "false";
    case FunctionConstant::Type::Int: std::snprintf(buf, sizeof buf, "(%lld)", (long long)c.value); return buf;
    case FunctionConstant::Type::UInt: std::snprintf(buf, sizeof buf, "%lluu", (unsigned long long)c.value); return buf;
    case FunctionConstant::Type::Float: std::snprintf(buf, sizeof buf, "%af", (double)(float)c.value); return buf;
  }
  return "0";
}

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

}  // namespace ember::gpu
