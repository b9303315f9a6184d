// cuda_emu.h: the shim that lets CUDA C++ kernels compile and run as C++ on the CPU under ember's CUDA
// emulator. The emulator's rewriter (cpp/cuda/cuda_source.cpp) turns a kernel's pointer parameters into
// cuemu::gptr<T> (bounds-checked), `__shared__` declarations into per-block storage and tags each
// __syncthreads with its line; this header supplies the rest: the built-in indices, barriers, warp
// intrinsics, atomics, the math library, __half / __nv_bfloat16. The runtime is the MSL emulator's
// (cpp/emu/, metal/msl_abi.h): one fiber per thread, a block per worker, faults through Api::fault.
#pragma once
#define __CUDA_EMULATOR__ 1
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <type_traits>
#include <utility>

#if __has_include("ember_dtype.h")
#include "ember_dtype.h"
#else
#include "../cpp/dtype.h"
#endif
#include "msl_abi.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __constant__ static
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__
// A `__shared__` the rewriter did not turn into block storage (one at namespace scope): an error.
#define __shared__ cuemu_shared_memory_is_supported_only_inside_functions

// ---------------------------------------------------------------------------------------------------
// Faults: out of the module only through the runtime's Api::fault (metal/msl_abi.h says why).
namespace cuemu {
inline const msl_abi::Api* api = nullptr;  // set when the runtime loads the module
using msg = msl_abi::Msg;
[[noreturn]] inline void fault(uint32_t kind, const char* m) {
  api->fault(api->current(), kind, m);
  __builtin_trap();  // Api::fault never returns
}
inline msl_abi::Thread* self() { return api->current(); }

// The body of every kernel entry: whatever the kernel's own C++ throws is reported as a fault.
template <class F> inline void run_entry(F&& f) noexcept {
  msg m;
  m.s("the kernel threw a C++ exception");
  try {
    f();
    return;
  } catch (const std::exception& e) {
    m.s(": ").s(e.what());
  } catch (...) {
  }
  fault(msl_abi::kFaultValue, m.b);
}

// A kernel's pointer parameter: every access checks the byte range against the argument's storage and
// faults naming the argument and the offset (the runtime adds the kernel, block and thread).
[[noreturn]] __attribute__((noinline, cold)) inline void bounds_fault(const char* what, int64_t off, uint64_t n,
                                                                     uint64_t size) {
  msg m;
  m.s("out-of-bounds access to ").s(what).s(" at byte offset ").i(off).s(" (").u(n);
  fault(msl_abi::kFaultIndex, m.s(" bytes; the argument has ").u(size).s(")").b);
}
template <class T> struct gptr {
  char* base = nullptr;
  int64_t off = 0;  // bytes from base
  uint64_t size = 0;
  const char* what = "";
  gptr() = default;
  gptr(std::nullptr_t) {}
  gptr(char* b, int64_t o, uint64_t s, const char* w) : base(b), off(o), size(s), what(w) {}
  template <class U, typename std::enable_if<std::is_convertible<U*, T*>::value, int>::type = 0>
  gptr(const gptr<U>& o) : base(o.base), off(o.off), size(o.size), what(o.what) {}
  T* at(int64_t i) const {
    const int64_t o = off + i * (int64_t)sizeof(T);
    if (__builtin_expect(o < 0 || (uint64_t)o + sizeof(T) > size, 0)) bounds_fault(what, o, sizeof(T), size);
    return reinterpret_cast<T*>(base + o);
  }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  T& operator[](I i) const { return *at((int64_t)i); }
  T& operator*() const { return *at(0); }
  T* operator->() const { return at(0); }
  // Handed to a __device__ helper taking T*, or cast: from there on unchecked (docs/cuda.md).
  operator T*() const { return reinterpret_cast<T*>(base + off); }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  gptr operator+(I i) const { return gptr(base, off + (int64_t)i * (int64_t)sizeof(T), size, what); }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  gptr operator-(I i) const { return gptr(base, off - (int64_t)i * (int64_t)sizeof(T), size, what); }
  int64_t operator-(const gptr& o) const { return (off - o.off) / (int64_t)sizeof(T); }
  template <class I> gptr& operator+=(I i) { off += (int64_t)i * (int64_t)sizeof(T); return *this; }
  template <class I> gptr& operator-=(I i) { off -= (int64_t)i * (int64_t)sizeof(T); return *this; }
  gptr& operator++() { off += sizeof(T); return *this; }
  gptr& operator--() { off -= sizeof(T); return *this; }
  gptr operator++(int) { gptr r = *this; off += sizeof(T); return r; }
  gptr operator--(int) { gptr r = *this; off -= sizeof(T); return r; }
  bool operator==(const gptr& o) const { return base + off == o.base + o.off; }
  bool operator!=(const gptr& o) const { return !(*this == o); }
  explicit operator bool() const { return base != nullptr; }
};
template <class T, class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
inline gptr<T> operator+(I i, const gptr<T>& p) { return p + i; }
template <class T> inline T* raw(const gptr<T>& p) { return p.at(0); }
template <class T> inline T* raw(T* p) { return p; }

// Argument binding (the generated wrappers): argument i of the launch is buffer i.
template <class P> struct binder {  // by value: the bytes numpy gave, of exactly sizeof(P)
  static P get(msl_abi::Thread* t, uint32_t i, const char* what) {
    if (t->buffers[i].size != sizeof(P)) {
      msg m;
      m.s(what).s(" takes ").u(sizeof(P)).s(" bytes by value; the launch gave ").u(t->buffers[i].size);
      fault(msl_abi::kFaultValue, m.b);
    }
    P v;
    std::memcpy((void*)&v, t->buffers[i].data, sizeof(P));
    return v;
  }
};
template <class T> struct binder<gptr<T>> {
  static gptr<T> get(msl_abi::Thread* t, uint32_t i, const char* what) {
    return gptr<T>(t->buffers[i].data, 0, t->buffers[i].size, what);
  }
};

// An extern "C" kernel inside a namespace (ember's translated kernels): its arguments bound by its own
// parameter types, argument i from buffer i.
template <class... P, size_t... I>
inline void invoke_at(msl_abi::Thread* t, void (*f)(P...), const char* const* what, std::index_sequence<I...>) {
  f(binder<std::remove_cv_t<P>>::get(t, (uint32_t)I, what[I])...);
}
template <class... P> inline void invoke(msl_abi::Thread* t, void (*f)(P...), const char* const* what) {
  invoke_at(t, f, what, std::index_sequence_for<P...>{});
}

// ---- shared memory ----------------------------------------------------------------------------------
// Static `__shared__ T name[N]...` becomes a reference to the block's variable of that site (allocated
// by the first thread to reach it, filled with 0xff like uninitialised memory); arrays are checked.
[[noreturn]] __attribute__((noinline, cold)) inline void shared_bounds_fault(int64_t i, uint64_t n) {
  msg m;
  m.s("out-of-bounds access to a __shared__ array at index ").i(i).s(" (it has ").u(n);
  fault(msl_abi::kFaultIndex, m.s(" elements)").b);
}
template <class T, size_t N> struct sarr {
  T v[N];
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  T& operator[](I i) {
    if (__builtin_expect((uint64_t)(int64_t)i >= N, 0)) shared_bounds_fault((int64_t)i, N);
    return v[i];
  }
  operator T*() { return v; }
};
template <class T> struct swrap { using type = T; };
template <class U, size_t N> struct swrap<U[N]> { using type = sarr<typename swrap<U>::type, N>; };
template <class T> inline typename swrap<T>::type& shared_var(uint32_t site) {
  using W = typename swrap<T>::type;
  static_assert(sizeof(W) == sizeof(T), "checked arrays keep the layout");
  msl_abi::Thread* t = self();
  return *static_cast<W*>(api->tg_alloc(t, site, sizeof(W), alignof(W) < 16 ? 16 : alignof(W)));
}
// `extern __shared__ T name[];`: the launch's dynamic shared memory (shared_mem bytes), a plain pointer;
// a write past its end lands in guard bytes that are checked when the block ends.
template <class T> inline T* dynamic_shared() {
  msl_abi::Thread* t = self();
  uint64_t size = 0;
  return static_cast<T*>(api->tg_param(t, 0, &size));
}

// ---- barriers and warps -----------------------------------------------------------------------------
inline void syncthreads(uint32_t line) {
  msl_abi::Thread* t = self();
  t->sync_site = line;
  api->barrier(t);
}
enum WarpOp : uint32_t { kShfl = 101, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kActive, kSyncWarp, kMatch };
inline const char* warp_op_name(uint32_t op) {
  static const char* n[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                            "__any_sync", "__all_sync", "__activemask", "__syncwarp", "__match_any_sync"};
  return op >= kShfl && op <= kMatch ? n[op - kShfl] : "a warp intrinsic";
}
// The lanes of this thread's warp that exist (a block's last warp may be partial).
inline uint32_t warp_lanes(const msl_abi::Thread* t) {
  const uint32_t count = t->tptg[0] * t->tptg[1] * t->tptg[2];
  const uint32_t first = t->simd_id * 32, n = count - first < 32 ? count - first : 32;
  return n == 32 ? 0xffffffffu : ((1u << n) - 1);
}
// One warp exchange: every arriving lane hands `v` (<= 8 bytes) to its slot, waits for the warp's lanes,
// then reads the slots. Lanes named in `mask` that did not arrive are an error (CUDA: undefined).
struct Exchange {
  msl_abi::Thread* t;
  char* slots;
  uint32_t arrived;
};
template <class V> inline Exchange exchange(uint32_t op, uint32_t mask, const V& v, bool check_mask = true) {
  static_assert(sizeof(V) <= msl_abi::kSimdSlotBytes, "a warp value of at most 64 bytes");
  msl_abi::Thread* t = self();
  char* slots = api->simd_begin(t);
  std::memcpy(slots + t->lane * msl_abi::kSimdSlotBytes, &v, sizeof(V));
  const uint32_t arrived = (uint32_t)api->simd_end(t, op);
  if (check_mask) {
    const uint32_t missing = mask & warp_lanes(t) & ~arrived;
    if (!((mask >> t->lane) & 1u)) {
      msg m;
      m.s(warp_op_name(op)).s(" with mask ").x(mask).s(" called by lane ").u(t->lane).s(", which the mask leaves out");
      fault(msl_abi::kFaultValue, m.b);
    }
    if (missing) {
      msg m;
      m.s(warp_op_name(op)).s(" with mask ").x(mask).s(": lanes ").x(missing)
          .s(" of the mask did not reach it with this lane (divergent, or returned); undefined on a GPU");
      fault(msl_abi::kFaultValue, m.b);
    }
  }
  return {t, slots, arrived};
}
template <class V> inline V lane_value(const Exchange& e, uint32_t lane) {
  V r;
  std::memcpy(&r, e.slots + lane * msl_abi::kSimdSlotBytes, sizeof(V));
  return r;
}
}  // namespace cuemu

#define __syncthreads() ::cuemu::syncthreads(__LINE__)
namespace cuemu {
// __syncthreads_count / _and / _or: a barrier that also counts the block's true predicates, through a block
// variable at reserved site 4095 (the rewriter numbers __shared__ variables from 0); the barriers before and
// after keep one call's count from the next's.
inline int syncthreads_count(int pred, uint32_t line) {
  int& c = *static_cast<int*>(api->tg_alloc(self(), 4095u, sizeof(int), 16));
  syncthreads(line);
  if (self()->tiitg == 0) c = 0;
  syncthreads(line);
  if (pred) __atomic_fetch_add(&c, 1, __ATOMIC_SEQ_CST);
  syncthreads(line);
  const int r = c;
  syncthreads(line);
  return r;
}
}  // namespace cuemu
#define __syncthreads_count(p) ::cuemu::syncthreads_count((p) != 0, __LINE__)
#define __syncthreads_and(p) (::cuemu::syncthreads_count((p) == 0, __LINE__) == 0)
#define __syncthreads_or(p) (::cuemu::syncthreads_count((p) != 0, __LINE__) != 0)
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------------
// Vector types and built-in indices.
struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};
typedef dim3 uint3;
#define CUEMU_V3(NAME, T)                                                                  \
  struct NAME { T x, y, z; };                                                              \
  inline NAME make_##NAME(T a, T b, T c) { return NAME{a, b, c}; }
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };
CUEMU_V3(float3, float)
CUEMU_V3(int3, int)
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int2 make_int2(int a, int b) { return {a, b}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline double2 make_double2(double a, double b) { return {a, b}; }
inline uint3 make_uint3(unsigned a, unsigned b, unsigned c) { return uint3(a, b, c); }
#undef CUEMU_V3

namespace cuemu {
inline dim3 v3(const uint32_t* v) { return dim3(v[0], v[1], v[2]); }
}  // namespace cuemu
#define threadIdx (::cuemu::v3(::cuemu::self()->tpitg))
#define blockIdx (::cuemu::v3(::cuemu::self()->tgpig))
#define blockDim (::cuemu::v3(::cuemu::self()->dtptg))
#define gridDim (::cuemu::v3(::cuemu::self()->tgpg))

// ---------------------------------------------------------------------------------------------------
// Warp intrinsics (width 32; `width` below 32 splits the warp into segments, as CUDA's).
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const auto e = ::cuemu::exchange(::cuemu::kShfl, mask, v);
  const uint32_t lane = e.t->lane, seg = lane & ~(uint32_t)(width - 1);
  return ::cuemu::lane_value<T>(e, seg + ((uint32_t)src & (uint32_t)(width - 1)));
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const auto e = ::cuemu::exchange(::cuemu::kShflUp, mask, v);
  const uint32_t lane = e.t->lane, seg = lane & ~(uint32_t)(width - 1);
  return (lane - seg) >= delta ? ::cuemu::lane_value<T>(e, lane - delta) : v;
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const auto e = ::cuemu::exchange(::cuemu::kShflDown, mask, v);
  const uint32_t lane = e.t->lane, seg = lane & ~(uint32_t)(width - 1);
  return (lane - seg) + delta < (uint32_t)width ? ::cuemu::lane_value<T>(e, lane + delta) : v;
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const auto e = ::cuemu::exchange(::cuemu::kShflXor, mask, v);
  const uint32_t lane = e.t->lane, seg = lane & ~(uint32_t)(width - 1);
  const uint32_t src = lane ^ (uint32_t)lane_mask;
  return (src & ~(uint32_t)(width - 1)) == seg ? ::cuemu::lane_value<T>(e, src) : v;
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  const auto e = ::cuemu::exchange(::cuemu::kBallot, mask, (int)(pred != 0));
  unsigned r = 0;
  for (uint32_t l = 0; l < 32; ++l)
    if (((e.arrived & mask) >> l) & 1u) r |= (unsigned)::cuemu::lane_value<int>(e, l) << l;
  return r;
}
inline int __any_sync(unsigned mask, int pred) {
  const auto e = ::cuemu::exchange(::cuemu::kAny, mask, (int)(pred != 0));
  for (uint32_t l = 0; l < 32; ++l)
    if ((((e.arrived & mask) >> l) & 1u) && ::cuemu::lane_value<int>(e, l)) return 1;
  return 0;
}
inline int __all_sync(unsigned mask, int pred) {
  const auto e = ::cuemu::exchange(::cuemu::kAll, mask, (int)(pred != 0));
  for (uint32_t l = 0; l < 32; ++l)
    if ((((e.arrived & mask) >> l) & 1u) && !::cuemu::lane_value<int>(e, l)) return 0;
  return 1;
}
// The lanes that reached this call together: the emulator's lanes converge at every warp operation.
inline unsigned __activemask() { return ::cuemu::exchange(::cuemu::kActive, 0, 0, false).arrived; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)::cuemu::exchange(::cuemu::kSyncWarp, mask, 0); }
template <class T> inline unsigned __match_any_sync(unsigned mask, T v) {
  const auto e = ::cuemu::exchange(::cuemu::kMatch, mask, v);
  unsigned r = 0;
  for (uint32_t l = 0; l < 32; ++l)
    if ((((e.arrived & mask) >> l) & 1u) && std::memcmp(e.slots + l * msl_abi::kSimdSlotBytes, &v, sizeof(T)) == 0)
      r |= 1u << l;
  return r;
}
inline unsigned __lanemask_lt() { return (1u << ::cuemu::self()->lane) - 1u; }

// ---------------------------------------------------------------------------------------------------
// __half and __nv_bfloat16: 16-bit storage, arithmetic through float with one rounding per operation.
#define CUEMU_SMALL_FLOAT(NAME, TO_F, FROM_F)                                                           \
  struct NAME {                                                                                         \
    unsigned short __x;                                                                                 \
    NAME() = default;                                                                                   \
    NAME(float f) : __x(FROM_F(f)) {}                                                                   \
    NAME(double d) : __x(FROM_F((float)d)) {}                                                           \
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>              \
    NAME(I i) : __x(FROM_F((float)i)) {}                                                                \
    operator float() const { return TO_F(__x); }                                                        \
    NAME& operator+=(NAME b) { return *this = NAME((float)*this + (float)b); }                          \
    NAME& operator-=(NAME b) { return *this = NAME((float)*this - (float)b); }                          \
    NAME& operator*=(NAME b) { return *this = NAME((float)*this * (float)b); }                          \
    NAME& operator/=(NAME b) { return *this = NAME((float)*this / (float)b); }                          \
  };                                                                                                    \
  inline NAME operator+(NAME a, NAME b) { return NAME((float)a + (float)b); }                           \
  inline NAME operator-(NAME a, NAME b) { return NAME((float)a - (float)b); }                           \
  inline NAME operator*(NAME a, NAME b) { return NAME((float)a * (float)b); }                           \
  inline NAME operator/(NAME a, NAME b) { return NAME((float)a / (float)b); }                           \
  inline NAME operator-(NAME a) { NAME r; r.__x = a.__x ^ 0x8000; return r; }                           \
  inline bool operator==(NAME a, NAME b) { return (float)a == (float)b; }                               \
  inline bool operator!=(NAME a, NAME b) { return (float)a != (float)b; }                               \
  inline bool operator<(NAME a, NAME b) { return (float)a < (float)b; }                                 \
  inline bool operator>(NAME a, NAME b) { return (float)a > (float)b; }                                 \
  inline bool operator<=(NAME a, NAME b) { return (float)a <= (float)b; }                               \
  inline bool operator>=(NAME a, NAME b) { return (float)a >= (float)b; }
CUEMU_SMALL_FLOAT(__half, ::ember::f16_to_f32, ::ember::f32_to_f16)
CUEMU_SMALL_FLOAT(__nv_bfloat16, ::ember::bf16_to_f32, ::ember::f32_to_bf16)
#undef CUEMU_SMALL_FLOAT
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct __half2 { __half x, y; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return (float)h; }
inline __half __double2half(double d) { __half h; h.__x = ::ember::f64_to_f16(d); return h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __double2bfloat16(double d) { __nv_bfloat16 h; h.__x = ::ember::f64_to_bf16(d); return h; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hdiv(__half a, __half b) { return a / b; }
inline __half __hneg(__half a) { return -a; }
// One rounding of the exact a*b+c: the float FMA of halves is exact before its final rounding to half
// only up to double rounding, so it goes through double (exact for the product of two halves).
inline __half __hfma(__half a, __half b, __half c) { return __double2half((double)(float)a * (float)b + (float)c); }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __double2bfloat16((double)(float)a * (float)b + (float)c);
}
inline __half hsqrt(__half a) { return __half(std::sqrt((float)a)); }
inline __half hexp(__half a) { return __half(std::exp((float)a)); }
inline bool __hisnan(__half a) { return std::isnan((float)a); }
inline __half __hmax(__half a, __half b) { return (float)a < (float)b ? b : a; }
inline __half __hmin(__half a, __half b) { return (float)b < (float)a ? b : a; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline float __low2float(__half2 h) { return (float)h.x; }
inline float __high2float(__half2 h) { return (float)h.y; }

// ---------------------------------------------------------------------------------------------------
// The math library: the C names exist (<cmath>); CUDA's own and its intrinsics map onto them.
using std::abs;
template <class A, class B> inline auto min(A a, B b) -> decltype(a < b ? a : b) { return b < a ? b : a; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a < b ? a : b) { return a < b ? b : a; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x), *c = std::cos(x); }
inline void __sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)std::floor(x); }
inline int __float2int_ru(float x) { return (int)std::ceil(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline unsigned __float2uint_rn(float x) { return (unsigned)std::nearbyint(x); }
inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
inline unsigned __float_as_uint(float x) { unsigned r; std::memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned x) { float r; std::memcpy(&r, &x, 4); return r; }
inline long long __double_as_longlong(double x) { long long r; std::memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; std::memcpy(&r, &x, 8); return r; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldg(const ::cuemu::gptr<T>& p) { return *p; }
template <class T> inline T __ldg(const ::cuemu::gptr<const T>& p) { return *p; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return 0; }
inline int clock() { return 0; }

// ---------------------------------------------------------------------------------------------------
// Atomics: blocks run on several CPU threads at once, so these are real atomic operations.
#define CUEMU_ATOMIC_INT(T)                                                                                          \
  inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }                               \
  inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }                               \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }                               \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }                                 \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }                               \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }                             \
  inline T atomicCAS(T* p, T cmp, T v) {                                                                             \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
    return cmp;                                                                                                      \
  }                                                                                                                  \
  inline T atomicMax(T* p, T v) {                                                                                    \
    T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                                      \
    while (o < v && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}             \
    return o;                                                                                                        \
  }                                                                                                                  \
  inline T atomicMin(T* p, T v) {                                                                                    \
    T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                                      \
    while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}             \
    return o;                                                                                                        \
  }
CUEMU_ATOMIC_INT(int)
CUEMU_ATOMIC_INT(unsigned int)
CUEMU_ATOMIC_INT(unsigned long long)
CUEMU_ATOMIC_INT(long long)
#undef CUEMU_ATOMIC_INT
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
// Floating point: a compare-and-swap loop on the bits (what CUDA's own fallback for doubles does).
template <class F, class U, class Op> inline F cuemu_atomic_float(F* p, Op op) {
  U* q = reinterpret_cast<U*>(p);
  U o = __atomic_load_n(q, __ATOMIC_SEQ_CST), n;
  for (;;) {
    F of;
    std::memcpy(&of, &o, sizeof(F));
    const F nf = op(of);
    std::memcpy(&n, &nf, sizeof(F));
    if (__atomic_compare_exchange_n(q, &o, n, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return of;
  }
}
inline float atomicAdd(float* p, float v) { return cuemu_atomic_float<float, uint32_t>(p, [v](float a) { return a + v; }); }
inline double atomicAdd(double* p, double v) { return cuemu_atomic_float<double, uint64_t>(p, [v](double a) { return a + v; }); }
inline __half atomicAdd(__half* p, __half v) {
  return cuemu_atomic_float<__half, unsigned short>(p, [v](__half a) { return a + v; });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return cuemu_atomic_float<__nv_bfloat16, unsigned short>(p, [v](__nv_bfloat16 a) { return a + v; });
}
inline float atomicExch(float* p, float v) { return cuemu_atomic_float<float, uint32_t>(p, [v](float) { return v; }); }
inline float atomicMax(float* p, float v) {
  return cuemu_atomic_float<float, uint32_t>(p, [v](float a) { return a < v ? v : a; });
}
inline float atomicMin(float* p, float v) {
  return cuemu_atomic_float<float, uint32_t>(p, [v](float a) { return v < a ? v : a; });
}
inline unsigned atomicInc(unsigned* p, unsigned lim) {
  unsigned o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &o, o >= lim ? 0u : o + 1u, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return o;
}
inline unsigned atomicDec(unsigned* p, unsigned lim) {
  unsigned o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &o, (o == 0u || o > lim) ? lim : o - 1u, true, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {}
  return o;
}
// The same on a checked pointer (`atomicAdd(out + i, v)`): the address is checked, then the plain one.
#define CUEMU_ATOMIC_GPTR(NAME)                                                                    \
  template <class T, class... V> inline auto NAME(const ::cuemu::gptr<T>& p, V... v) {             \
    return NAME(p.at(0), (T)v...);                                                                 \
  }
CUEMU_ATOMIC_GPTR(atomicAdd)
CUEMU_ATOMIC_GPTR(atomicSub)
CUEMU_ATOMIC_GPTR(atomicAnd)
CUEMU_ATOMIC_GPTR(atomicOr)
CUEMU_ATOMIC_GPTR(atomicXor)
CUEMU_ATOMIC_GPTR(atomicExch)
CUEMU_ATOMIC_GPTR(atomicCAS)
CUEMU_ATOMIC_GPTR(atomicMax)
CUEMU_ATOMIC_GPTR(atomicMin)
CUEMU_ATOMIC_GPTR(atomicInc)
CUEMU_ATOMIC_GPTR(atomicDec)
#undef CUEMU_ATOMIC_GPTR
