// The MSL -> C++ source rewriter of the emulator: plain MSL in, C++ against metal/msl_cpu.h out.
#pragma once
#include <string>
#include <vector>

namespace ember::metal::emu {

enum class RewriteMode {
  Emulate,  // for running: checked device pointers, group-shared threadgroup variables, entry wrappers
  Static,   // for the static checks: address spaces kept (the shim's macros), nothing generated
};

struct RewriteResult {
  std::string text;                  // the C++ translation unit (line numbers kept)
  std::vector<std::string> kernels;  // host names of the kernels it defines, in source order
  bool uses_sync = false;            // some kernel calls a barrier or a simd_* op
};

// Rewrites preprocessed MSL. `name` labels the source in messages. Throws ember::Error (Value kind,
// "[metal] ...") on a construct the emulator cannot run (a kernel parameter without a binding, say).
RewriteResult rewrite_msl(const std::string& source, const std::string& name, RewriteMode mode);

}  // namespace ember::metal::emu
