// The MSL source rewriter: preprocessed MSL in; C++ against metal/msl_cpu.h (the Metal emulator) or CUDA C++
// against metal/msl_cuda.h (ember's kernels on CUDA) out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::metal::emu {

enum class RewriteMode {
  Emulate,  // for running: checked device pointers, group-shared threadgroup variables, entry wrappers
  Static,   // for the static checks: address spaces kept (the shim's macros), nothing generated
  Cuda,     // CUDA C++ for NVRTC and the CUDA emulator (rewrite_cuda.cpp; the contract: cpp/cuda/kernels.h)
};

// One kernel of a Cuda-mode rewrite: its parameters as cuda/kernels.h's KernelSig describes them.
struct CudaKernelParams {
  std::string host_name;
  std::string buffers;               // per [[buffer(n)]]: 'p' pointer, 'v' by value, '-' none
  std::vector<uint32_t> value_size;  // per n: sizeof a by-value parameter's type, else 0
  std::vector<uint32_t> threadgroup; // the [[threadgroup(i)]] indices, ascending
};

struct RewriteResult {
  std::string text;                  // the C++ translation unit (line numbers kept)
  std::vector<std::string> kernels;  // host names of the kernels it defines, in source order
  bool uses_sync = false;            // some kernel calls a barrier or a simd_* op
  std::vector<CudaKernelParams> cuda; // Cuda mode: every kernel's parameters, in source order
};

// Rewrites preprocessed MSL. `name` labels the source in messages. Throws ember::Error (Value kind,
// "[metal] ...") on a construct the emulator cannot run (a kernel parameter without a binding, say).
// With `f64` (Cuda mode only) the source is first retyped to its float64 variant (rewrite_cuda.cpp,
// cuda_f64_retype): float becomes double, and only the kernels whose names then say float64 get entries.
RewriteResult rewrite_msl(const std::string& source, const std::string& name, RewriteMode mode, bool f64 = false);

}  // namespace ember::metal::emu
