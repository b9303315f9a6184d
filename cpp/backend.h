// BackendStorage: the trait every device backend implements, one virtual method per op family.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "dtype.h"
#include "layout.h"

namespace ember {

enum class DeviceKind : uint8_t { Cpu = 0, Metal = 1, Cuda = 2 };
constexpr int kNumDeviceKinds = 3;
// Every code table below is indexed by the enum's value; _C exports them and Python derives its
// tables from them (names in enum order), so nothing else has to agree by position.
inline constexpr const char* kDeviceKindNames[kNumDeviceKinds] = {"cpu", "metal", "cuda"};
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

// Elementwise ops with up to two scalar parameters (affine: mul, add; powf: e; clamp: lo, hi).
enum class UnaryOp : uint8_t {
  Exp, Log, Sin, Cos, Tanh, Sqrt, Sqr, Abs, Neg, Recip, Relu, Gelu, Silu, Erf, Ceil, Floor, Round,
  Sign, Sigmoid, Affine, Powf, Clamp, Log1p, Expm1, Rsqrt, Log2, Log10, Tan, Sinh, Cosh, Asin, Acos, Atan,
  Trunc,
  // The activations with parameters: elu (p0 alpha), leaky_relu (p0 slope), softplus (p0 beta, p1
  // threshold), mish, hardswish, hardsigmoid, gelu's tanh form; float only.
  Elu, LeakyRelu, Softplus, Mish, Hardswish, Hardsigmoid, GeluTanh,
  // ~x: bitwise on integers, logical on bool; no float version.
  BitNot,
  Count
};
// FloorDiv and Rem follow Python/numpy: the quotient rounds toward -inf and the remainder takes the
// divisor's sign; integer x // 0 and x % 0 give 0 (numpy's result, without its warning).
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Maximum, Minimum, Pow, FloorDiv, Rem, Eq, Ne, Lt, Le, Gt, Ge,
  // & | ^: bitwise on integers, logical on bool; no float version. Appended after the comparisons.
  BitAnd, BitOr, BitXor,
  Count
};
// SumI64 is sum with integer inputs accumulated into (and returned as) int64, torch's integer sum
// (a count of a uint8 mask must not wrap at 256); on float inputs it is Sum.
enum class ReduceOp : uint8_t { Sum, Max, Min, ArgMax, ArgMin, SumI64, Count };
constexpr int kNumUnary = (int)UnaryOp::Count;
constexpr int kNumBinary = (int)BinaryOp::Count;
constexpr int kNumReduce = (int)ReduceOp::Count;
inline bool is_cmp(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::Ge; }
// The ops' names, as Python spells them (the array sizes make a missing or extra name a compile error).
inline constexpr const char* kUnaryNames[kNumUnary] = {
    "exp",   "log",  "sin",   "cos",  "tanh",    "sqrt",   "sqr",  "abs",   "neg",   "recip", "relu", "gelu",
    "silu",  "erf",  "ceil",  "floor", "round",  "sign",   "sigmoid", "affine", "powf", "clamp", "log1p", "expm1",
    "rsqrt", "log2", "log10", "tan",  "sinh",    "cosh",   "asin", "acos",  "atan",  "trunc",
    "elu", "leaky_relu", "softplus", "mish", "hardswish", "hardsigmoid", "gelu_tanh",
    "bitwise_not"};
inline constexpr const char* kBinaryNames[kNumBinary] = {
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "floor_divide", "remainder",
    "eq",  "ne",  "lt",  "le",  "gt",      "ge",
    "bitwise_and", "bitwise_or", "bitwise_xor"};
inline constexpr const char* kReduceNames[kNumReduce] = {"sum", "max", "min", "argmax", "argmin", "sum_i64"};
static_assert(kUnaryNames[kNumUnary - 1] && kBinaryNames[kNumBinary - 1] && kReduceNames[kNumReduce - 1],
              "a name per op");
inline const char* op_name(UnaryOp op) { return kUnaryNames[(int)op]; }
inline const char* op_name(BinaryOp op) { return kBinaryNames[(int)op]; }
// SumI64 is reported as "sum" in error messages: the user called sum.
inline const char* op_name(ReduceOp op) { return op == ReduceOp::SumI64 ? "sum" : kReduceNames[(int)op]; }

// Fused recurrent cells: everything after the two gate GEMMs (see cpp/fused.h's rnn_cell_fwd). The gate
// counts are torch's: LSTM 4 (i, f, g, o), GRU 3 (r, z, n), Elman RNN 1 (tanh or relu).
enum class RnnCell : uint8_t { Lstm, Gru, RnnTanh, RnnRelu, Count };
inline int64_t rnn_gates(RnnCell k) { return k == RnnCell::Lstm ? 4 : k == RnnCell::Gru ? 3 : 1; }
// Columns per row of the forward's saved workspace (stats dtype): LSTM the activated gates i, f, g, o;
// GRU r, z, n and W_hn h + b_hn; RNN the output h'.
inline int64_t rnn_ws_width(RnnCell k, int64_t hidden) { return (k == RnnCell::Lstm || k == RnnCell::Gru ? 4 : 1) * hidden; }
inline const char* rnn_cell_name(RnnCell k) { return k == RnnCell::Lstm ? "lstm_cell" : k == RnnCell::Gru ? "gru_cell" : "rnn_cell"; }

class BackendStorage;
using StoragePtr = std::shared_ptr<BackendStorage>;

// The activations with a fused backward; act_bwd's `a` is y (the forward output) for Sigmoid, x otherwise.
// The kinds from Elu on take the forward's scalar parameters p0, p1 (as their UnaryOp does).
enum class ActKind : uint8_t {
  Sigmoid, Silu, Gelu,
  Elu, LeakyRelu, Softplus, Mish, Hardswish, Hardsigmoid, GeluTanh,
  Count
};
const char* act_name(ActKind kind);  // "sigmoid", "silu", "gelu", "elu", ..., "gelu_tanh" (the UnaryOp names)
// The operands of scaled dot-product attention: q (B, H, Lq, D) or (B, Lq, D), k/v with a head count
// dividing q's, an optional mask broadcastable to (B, H, Lq, Lk) (additive float, or uint8 0 = masked).
struct SdpaArgs {
  const BackendStorage *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;  // mask optional
  Layout lq, lk, lv, lmask;
  double scale = 1.0;
  bool causal = false;
  // Gemma 2's logit soft-capping: each scaled score s becomes softcap * tanh(s / softcap) before the
  // mask and the softmax; 0 = off (checked finite and >= 0 by the entry point).
  double softcap = 0.0;
  // Optional destinations, CPU only (the entry point checks them): the forward writes out, the backward
  // dq / dk / dv, into these views (shaped as the result, unit last stride; they must not overlap one
  // another or an operand) instead of new dense storages, and returns null for them.
  BackendStorage *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  Layout lout, ldq, ldk, ldv;
};
// The geometry of one attention call, computed once by the seam (cpp/fused.cpp, which has checked the
// shapes) and passed to every backend: each operand seen as 4-D (B, H, L, D) (a 3-D one with H = 1 and
// stride 0 there), strides in elements per dim. Query head h reads key/value head h / (H / Hkv)
// (grouped-query attention). The mask's strides are 0 on the dims it broadcasts over (B, H, Lq, Lk).
struct SdpaGeom {
  int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  int64_t sq[4] = {}, sk[4] = {}, sv[4] = {}, sm[4] = {};
  int64_t so[4] = {}, sg[4] = {};  // the backward's out and its gradient (B, H, Lq, Dv); zeros in the forward
  int64_t sout[4] = {}, sdq[4] = {}, sdk[4] = {}, sdv[4] = {};  // SdpaArgs' destinations' strides, when given
};

// One optimizer step, in place (cpp/fused.h optim_step): torch.optim's single-tensor update rules fused
// into one pass. param, grad and the state buffers are dense and contiguous from their offsets (n
// elements each, one dtype). Scalars arrive as torch's Python code computes them in double; kernels
// round each to the dtype first, as torch's kernels do with a Scalar argument.
enum class OptimKind : uint8_t { Sgd = 0, Adam = 1, RmsProp = 2, Count = 3 };
enum OptimFlag : uint32_t {
  kOptMaximize = 1,   // every kind: the gradient is negated first
  kOptWeightDecay = 2,  // g += wd * p (Adam: only without kOptDecoupled)
  kOptMomentum = 4,   // Sgd, RmsProp: a momentum buffer (s0 for Sgd, s2 for RmsProp)
  kOptNesterov = 8,   // Sgd
  kOptFirst = 16,     // Sgd: the momentum buffer starts as the gradient
  kOptDecoupled = 32,  // Adam: AdamW's p *= 1 - lr * wd
  kOptAmsgrad = 64,   // Adam: s2 keeps the running max of s1
  kOptCentered = 128,  // RmsProp: s1 keeps the gradient average
};
struct OptimArgs {
  OptimKind kind = OptimKind::Sgd;
  uint32_t flags = 0;
  int64_t n = 0;
  // Sgd: wd, momentum, 1 - dampening, -lr. Adam: wd (or 1 - lr * wd when decoupled), 1 - beta1, beta2,
  // 1 - beta2, sqrt(1 - beta2^t), eps, -lr / (1 - beta1^t). RmsProp: wd, alpha, 1 - alpha, eps, momentum, -lr.
  double s[8] = {};
  BackendStorage* p = nullptr;  // the storage the method is called on
  const BackendStorage* g = nullptr;
  BackendStorage* st[3] = {};  // Sgd: momentum buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq;
                               // RmsProp: square_avg, grad_avg, momentum_buffer (null when unused)
  int64_t off_p = 0, off_g = 0, off_st[3] = {};  // element offsets
};

// Rotary position embedding over x (..., L, D): feature pairs i < dims / 2 of the row at position
// t = offset + l (l: the row's index along dim -2; offset: `offset`, plus offsets[b] for the row's
// batch b = index along dim 0 when given) are rotated by theta = t * scale * inv_freq[i], inv_freq[i] =
// base^(-2i / dims), or 1 / freqs[i] when freqs is given. The pairs are (2i, 2i + 1) when
// `traditional`, else (i, i + dims / 2); features from dims on pass through. `inverse` rotates by
// -theta (the backward). offsets: int64, 1 or B values; freqs: dims / 2 values in the stats dtype.
struct RopeArgs {
  int64_t dims = 0, offset = 0;
  bool traditional = false, inverse = false;
  double base = 10000.0, scale = 1.0;
  const BackendStorage *offsets = nullptr, *freqs = nullptr;  // optional
  Layout loffsets, lfreqs;
  // Optional caller-supplied angles instead of positions and frequencies: a dense (nb, L, dims) table in
  // the stats dtype whose row (b, l) holds dims/2 cosines then dims/2 sines; nb is 1 or dim 0 of x.
  const BackendStorage* table = nullptr;
  Layout ltable;
};

class BackendStorage : public std::enable_shared_from_this<BackendStorage> {
 public:
  BackendStorage(DType dtype, Device device, int64_t numel) : dtype_(dtype), device_(device), numel_(numel) {}
  virtual ~BackendStorage() = default;
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return numel_; }
  // Bumped by every in-place write, so autograd can tell a saved tensor was modified. While a
  // writable view of the buffer is out (numpy(), as_numpy(writable=True)) any write may happen
  // unseen, so every read then returns a new value: a backward whose saved tensor was recorded
  // before the view closed, or while it was open, finds a different version and raises.
  uint64_t version() const {
    if (writable_views_.load(std::memory_order_relaxed) == 0) return version_.load(std::memory_order_relaxed);
    return version_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // A writable view opens / closes: each counts as a write (see version()).
  void open_writable_view() {
    writable_views_.fetch_add(1, std::memory_order_relaxed);
    bump_version();
  }
  void close_writable_view() {
    bump_version();
    writable_views_.fetch_sub(1, std::memory_order_relaxed);
  }
  // Set when autograd records this storage for backward; DLPack exports of such a buffer are marked
  // read-only. Sticky: the graph that saved it may still be alive.
  void mark_saved() { saved_.store(true, std::memory_order_relaxed); }
  bool saved() const { return saved_.load(std::memory_order_relaxed); }
  // True when both storages are the same buffer (in-place ops must snapshot shared operands).
  virtual bool same_buffer(const BackendStorage& other) const = 0;

  // Every method reads `this` through layout `l`; results are new contiguous storages.
  // Binary/where/matmul layouts come already broadcast to the output shape by the caller.
  virtual StoragePtr unary(UnaryOp op, const Layout& l, double p0, double p1) const = 0;
  virtual StoragePtr binary(BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) const = 0;
  virtual StoragePtr where(const Layout& cl, const BackendStorage& a, const Layout& al,
                           const BackendStorage& b, const Layout& bl) const = 0;
  virtual StoragePtr to_dtype(const Layout& l, DType dt) const = 0;
  // Reduces over `dims` (sorted, unique); the result has the input's shape with those dims set to 1.
  virtual StoragePtr reduce(ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) const = 0;
  // l: (..., m, k), rl: (..., k, n) with equal batch dims; result (..., m, n).
  virtual StoragePtr matmul(const Layout& l, const BackendStorage& rhs, const Layout& rl) const = 0;
  // Copies this (through l) into dst (through dl); shapes equal, dtypes equal. Backends never bump
  // versions: the entry points in storage.cpp do, for every in-place write.
  virtual void copy_into(const Layout& l, BackendStorage& dst, const Layout& dl) const = 0;
  // Writes `value` into every element of this seen through l.
  virtual void fill(const Layout& l, double value) = 0;
  virtual StoragePtr index_select(const Layout& l, const BackendStorage& ids, const Layout& il,
                                  int64_t dim) const = 0;
  virtual StoragePtr gather(const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) const = 0;
  // Adds src (through sl) into this (through l) at ids along dim, in place: index_add / scatter_add.
  virtual void index_add(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                         const Layout& sl, int64_t dim) = 0;
  virtual void scatter_add(const Layout& l, const BackendStorage& ids, const Layout& il,
                           const BackendStorage& src, const Layout& sl, int64_t dim) = 0;
  // Writes src's slices (through sl) into this (through l) at ids along dim, in place, in index order
  // (a repeated index keeps the last slice): t[ids] = src. src does not share this buffer.
  virtual void index_copy(const Layout& l, const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                          const Layout& sl, int64_t dim) = 0;


 protected:
  DType dtype_;
  Device device_;
  int64_t numel_;
  mutable std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> writable_views_{0};
  std::atomic<bool> saved_{false};
};

}  // namespace ember
