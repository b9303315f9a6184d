// A value for a [[function_constant(index)]]: shared by the adapter interface and the public surface (api.h).
#pragma once
#include <cstdint>

namespace ember::metal {

struct FunctionConstant {
  enum class Type : uint8_t { Bool, Int, UInt, Float };
  uint32_t index = 0;
  Type type = Type::Int;
  double value = 0;  // exact for every int32/uint32 and float
};

}  // namespace ember::metal
