// Launch: the one way a GPU launcher encodes a kernel on a GpuDevice (bindings by [[buffer(n)]] in call order,
// read/write flags for the device's ordering, cached kernels, scalars by value), and the helpers launchers share
// (type names, fast-path tests). The same for Metal and CUDA: both run the kernels of metal/*.metal.
//
//   Launch(dev, "unary.metal", "unary_contig_exp_" + std::string(type_suffix(dt, "exp")))
//       .input(x, l.offset()).output(*out).scalar<uint32_t>(n)
//       .dispatch_1d(ceil_div(n, 4));
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "layout.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_storage.h"

namespace ember::gpu {

// The MSL type-name suffix kernels are instantiated with: "float32", "float16", "bfloat16", "int64",
// "uint32", "uint8", "int32", "bool", and "float64" for CUDA's float64 variants (dtype_name). A device without
// F64 (Metal) refuses it earlier, in its own words: GpuDevice::check_dtype.
const char* type_suffix(DType dt, const char* op);
// The MSL type of a dtype: "float", "half", "bfloat", "double" (CUDA only), "long", "uint", "uchar", "int",
// "bool" (for generated source).
const char* msl_type(DType dt, const char* op);

// The float type kernels compute, accumulate and keep statistics in for dt: F64 for float64 (CUDA's float64
// variants are the float kernels retyped to double, so their float scratch and float parameters are double), F32
// for every other dtype.
inline DType compute_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }
// f(double()) for F64's kernels, f(float()) otherwise: a launcher's body generic in the float type of its
// parameter structs (`using R = decltype(tag);`), which is double in the float64 kernels.
template <class F> auto with_args(DType ft, F&& f) { return ft == DType::F64 ? f(double()) : f(float()); }

// Kernels index with 32-bit `uint`s, as Metal's grid does (on every GPU: the kernels are Metal's): throws
// "[op] n elements: Metal kernels index with 32 bits" (Unsupported) past 2^32-1.
uint32_t checked_u32(int64_t n, const char* op);
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// True when l reads numel consecutive elements from l.offset() (the contiguous fast path).
inline bool is_dense(const Layout& l) { return l.is_contiguous(); }

// A layout for a strided kernel: adjacent dims merged where the strides allow, size-1 dims dropped
// (at least one dim is kept), so the kernel's index arithmetic loops over as few dims as possible.
struct Strided {
  std::vector<int64_t> shape, strides;  // the same length, >= 1
  int64_t offset = 0;
  uint32_t ndim() const { return (uint32_t)shape.size(); }
};
Strided collapse(const Layout& l);
// Several layouts of one shape (the broadcast operands of one op) merged together: a dim pair merges
// only where it merges in every layout, so one shape array serves all of them.
std::vector<Strided> collapse(const std::vector<const Layout*>& ls);

class Launch {
 public:
  // `function` of the embedded kernel file `file` ("copy.metal").
  Launch(GpuDevice& dev, const std::string& file, std::string function);
  // `function` of any source (user kernels, generated code); `src` must outlive the dispatch call.
  Launch(GpuDevice& dev, const KernelSource& src, std::string function);

  // Each binding takes the next [[buffer(n)]] index, from 0 in call order (at() moves it).
  // A storage read by the kernel, bound at its byte offset plus `elem_offset` elements.
  Launch& input(const GpuStorage& s, int64_t elem_offset = 0) { return buffer(s, elem_offset, true, false); }
  // A storage the kernel writes (registered for hazards as a write).
  Launch& output(const GpuStorage& s, int64_t elem_offset = 0) { return buffer(s, elem_offset, false, true); }
  // A storage the kernel reads and writes (in-place ops, atomics into an accumulator).
  Launch& inout(const GpuStorage& s, int64_t elem_offset = 0) { return buffer(s, elem_offset, true, true); }
  // A `constant T&` argument, copied now (set_bytes): T must be trivially copyable.
  template <class T> Launch& scalar(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "scalars are copied by value");
    return bytes(&v, sizeof v);
  }
  // A parameter struct with float fields: `f64` (its double form) for a float64 kernel (ft F64), else `f32`.
  template <class A, class B> Launch& scalar_of(DType ft, const A& f32, const B& f64) {
    return ft == DType::F64 ? scalar(f64) : scalar(f32);
  }
  Launch& bytes(const void* data, size_t n);
  // A `constant long*` / `constant uint*` array (shapes, strides), by value; an empty array binds one
  // zero so that the binding exists. At most 4096 bytes (set_bytes' limit).
  Launch& array(const std::vector<int64_t>& v);
  Launch& array(const std::vector<uint32_t>& v);
  Launch& skip() { return at(next_ + 1); }  // leaves the next index unbound
  Launch& at(uint32_t index);               // the next binding goes to [[buffer(index)]]

  // [[function_constant(index)]] values (part of the kernel's cache key).
  Launch& constant(uint32_t index, bool v);
  Launch& constant(uint32_t index, int32_t v);
  Launch& constant(uint32_t index, uint32_t v);
  Launch& constant(uint32_t index, float v);
  // Dynamic [[threadgroup(index)]] memory, in bytes.
  Launch& threadgroup_memory(size_t bytes, uint32_t index = 0);

  // The most threads per threadgroup this kernel allows (Metal's maxTotalThreadsPerThreadgroup: can
  // be below the device's 1024), a multiple of 32. Launchers size their groups from it; it compiles the
  // pipeline now (with the constants set so far) if it is not cached yet.
  uint32_t max_threads();
  // `want` threads rounded down to whole simdgroups, at least 32, at most max_threads().
  uint32_t fit_threads(uint64_t want);

  // Encodes the dispatch: `grid` in threads (dispatchThreads: edge groups are partial). A grid with
  // a zero size encodes nothing. The pipeline is compiled (or found in the cache) here. A group over
  // the pipeline's limit is refused (a launcher that did not ask max_threads()).
  void dispatch(Dim3 grid, Dim3 threads_per_group);
  // A 1-D grid of `threads` threads in groups of `group` (clamped to the grid and the pipeline).
  void dispatch_1d(uint64_t threads, uint32_t group = 256);
  // A grid whose kernel reads only its thread positions (any group shape works): groups of up to `want`
  // (x first, then y), clamped to the grid and to the pipeline's limit.
  void dispatch_grid(Dim3 grid, Dim3 want = Dim3{256, 1, 1});
  // One threadgroup per row (grid (t, rows)): t = `want` threads, or fewer whole simdgroups where the
  // pipeline allows fewer; for kernels that stride over a row by [[threads_per_threadgroup]].
  void dispatch_rows(uint32_t rows, uint32_t want);

 private:
  Launch& buffer(const GpuStorage& s, int64_t elem_offset, bool read, bool write);
  KernelHandle resolve();
  const char* kind_() const;  // "metal", "cuda": messages' prefix
  DispatchDesc::Arg& slot();
  GpuDevice& dev_;
  const KernelSource& src_;
  DispatchDesc d_;
  std::vector<FunctionConstant> constants_;
  uint32_t next_ = 0;
};

}  // namespace ember::gpu
