// The plain values the GPU launch layer and both GPU backends' adapters share: a [[function_constant(index)]]
// value and a 3-D size (grid or group, in threads).
#pragma once
#include <cstdint>

namespace ember::gpu {

struct FunctionConstant {
  enum class Type : uint8_t { Bool, Int, UInt, Float };
  uint32_t index = 0;
  Type type = Type::Int;
  double value = 0;  // exact for every int32/uint32 and float
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

}  // namespace ember::gpu
