// A user's CUDA C++ source as ember reads it: its __global__ kernels and their parameters (which the launch
// checks arguments against, on any adapter), and the emulator's rewrite of it into C++ for cuda/cuda_emu.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace ember::cuda {

struct Param {
  std::string name;     // as declared ("x"), or "" when unnamed
  std::string type;     // the declared type without __restrict__ ("const float*")
  bool pointer = false;
  std::string pointee;  // for a pointer: "const float"
  bool known = false;   // the (pointee) type is one ember knows: `dtype` / `scalar_bytes` hold it
  DType dtype = DType::F32;   // a pointer's element dtype (when known)
  std::string scalar_kind;    // a known scalar's numpy dtype name ("int32", "float32", ...)
  uint32_t scalar_bytes = 0;  // its size
};

struct KernelDecl {
  std::string name;        // the function's name (qualified by the namespaces it is in)
  std::vector<Param> params;
  bool is_template = false;
  int line = 0;
  // extern "C": `name` is the plain (linkage) name even inside a namespace; `qualified` is how to call it.
  bool extern_c = false;
  std::string qualified;
};

struct ParsedSource {
  std::vector<KernelDecl> kernels;
  bool uses_sync = false;  // __syncthreads, warp intrinsics or shared memory: threads run as fibers
  std::string emu_unit;    // the emulator's C++ translation unit (lines keep the user's numbering)
};

// Scans `source` (labelled `label` in messages and line directives). Never throws for what the compiler
// will report better; throws Error "[cuda] ..." for a kernel parameter the launch cannot bind (a reference).
ParsedSource parse_source(const std::string& source, const std::string& label);

// The declaration of kernel `name`, or a Value error listing the kernels the source defines.
const KernelDecl& find_kernel(const ParsedSource& p, const std::string& name, const std::string& label);

}  // namespace ember::cuda
