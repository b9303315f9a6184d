// ember's own CUDA kernels: the embedded metal/*.metal sources translated to CUDA C++ (one source per kernel for
// both GPUs), with the launch contract the host code (gpu::Launch on a CudaDevice) and the translator share.
//
// The contract of one translated kernel `extern "C" __global__ void <host_name>(...)`, parameters in order:
//   1. one per [[buffer(n)]] the MSL kernel declares, n ascending (gaps take no parameter):
//      - a pointer (`device T*`, `constant T*` arrays, `device T&`): the host passes a device address (a bound
//        storage at its byte offset, or bound bytes it uploaded to device memory);
//      - a value (`constant T& x`): the bound bytes, passed by value (their size must be sizeof(T));
//   2. one `unsigned int` per [[threadgroup(i)]] parameter, i ascending: its byte offset in the launch's
//      dynamic shared memory (each 16-byte aligned; the launch's shared_mem is their total);
//   3. `unsigned int em_grid_x, em_grid_y, em_grid_z`: the grid in threads, as Metal's dispatchThreads takes it;
//      `em_off_x, em_off_y, em_off_z`: the first group this launch runs; `em_group_x, em_group_y, em_group_z`: the
//      dispatch's group size.
// Metal's partial edge groups are exact: a dispatch is up to 8 launches, one per combination of whole and edge
// groups along x, y and z, an edge group's launch having the smaller block. So no thread lies past the grid, a
// barrier sees every thread of its group, and [[threads_per_threadgroup]] and the simd numbering are Metal's.
// [[function_constant(i)]] values become options "-DMSL_FC_<i>=<literal>", one module per set of values.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::cuda {

// One translated kernel's parameters (see the contract above).
struct KernelSig {
  // Per [[buffer(n)]] index n = 0..max: 'p' pointer parameter, 'v' by-value parameter, '-' none.
  std::string buffers;
  // Per index n: sizeof(T) of a by-value parameter, 0 for the others.
  std::vector<uint32_t> value_size;
  // The [[threadgroup(i)]] indices the kernel declares, ascending.
  std::vector<uint32_t> threadgroup;
};

struct TranslatedSource {
  std::string text;   // CUDA C++: compiles with NVRTC (-default-device) and under the CUDA emulator
  std::string label;  // the name messages use: "unary.metal (CUDA)"
  std::map<std::string, KernelSig> kernels;  // by host name
};

// The translation of the embedded kernel file `metal_file` ("unary.metal"), made once and cached for the
// process. Throws Error (Value) "[cuda] ..." for an unknown file or a construct the translator cannot map.
// With `f64`: the file's float64 variant ("unary.metal (CUDA, float64)"), whose entries are the float32 kernels
// retyped to double and named ..._float64 (msl/rewrite.h); Metal has no double, so only CUDA has these.
const TranslatedSource& translated_source(const std::string& metal_file, bool f64 = false);

// The names of every embedded kernel file ("act.metal", ...), for checks that compile them all.
std::vector<std::string> kernel_files();

}  // namespace ember::cuda
