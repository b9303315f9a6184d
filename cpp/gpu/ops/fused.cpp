// GPU launchers for the fused family: softmax / log_softmax, rms_norm, layer_norm, the activations'
// backward and sdpa, forward and backward (metal/softmax.metal, norm.metal, act.metal, sdpa.metal).
// The shared entry points (cpp/fused.cpp) have checked dtypes, shapes and devices; saved statistics
// are float32 (float64 for float64 inputs, on CUDA: Metal has no float64).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <tuple>

#include "families/act_bwd.h"
#include "families/layer_norm.h"
#include "families/rms_norm.h"
#include "families/rope.h"
#include "families/sdpa.h"
#include "families/cross_entropy.h"
#include "families/softmax.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// ---- argument blocks, byte for byte the structs of the .metal files ---------------------------
constexpr int kRowDims = 8;  // RowLayout's outer dims (softmax.metal, norm.metal)
struct RowLayout {
  int64_t offset = 0, cstride = 1, nd = 0;
  int64_t shape[kRowDims] = {}, stride[kRowDims] = {};
};
struct SoftmaxArgs {
  RowLayout a, b;
  int64_t n = 0, rows = 0;
};
// R: the float fields' type, double in CUDA's float64 kernels (their float is double: cuda/kernels.h).
template <class R = float> struct NormArgs {
  RowLayout x, g;
  int64_t n = 0, rows = 0, w_off = 0, w_st = 0, b_off = 0, b_st = 0, chunk = 1, nchunks = 0;
  R eps = 0;
  uint32_t has_w = 0, has_b = 0, has_mean = 0;
};
constexpr int kActDims = 8;  // act.metal
struct ActArgs {
  int64_t n = 0, nd = 0, a_off = 0, g_off = 0;
  int64_t shape[kActDims] = {}, sa[kActDims] = {}, sg[kActDims] = {};
};
template <class R = float> struct SdpaKArgs {  // sdpa.metal's SdpaArgs
  int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  int64_t q_off = 0, k_off = 0, v_off = 0, m_off = 0, o_off = 0, g_off = 0;
  int64_t sq[4] = {}, sk[4] = {}, sv[4] = {}, sm[4] = {}, so[4] = {}, sg[4] = {};
  int64_t tile = 1;
  R scale = 1;
  uint32_t causal = 0, mask_kind = 0, pad = 0;
  R softcap = 0;  // 0: off
  uint32_t pad2 = 0;
};
template <class R> struct ActParams {  // act.metal's, for the activations with parameters
  R p0 = 0, p1 = 0;
};
template <class R = float> struct RopeKArgs {  // rope.metal's RopeArgs
  RowLayout x;
  int64_t D = 0, L = 0, rows = 0, half = 0, per_batch = 1, offset = 0, o_off = 0, o_st = 0, f_off = 0, f_st = 0;
  R scale = 1, log2_base = 0;
  uint32_t traditional = 0, inverse = 0, has_offsets = 0, has_freqs = 0;
};
static_assert(sizeof(RopeKArgs<>) == 256, "argument blocks must match the kernels' structs");
static_assert(sizeof(RowLayout) == 152 && sizeof(SoftmaxArgs) == 320 && sizeof(NormArgs<>) == 384 &&
                  sizeof(ActArgs) == 224 && sizeof(SdpaKArgs<>) == 328,
              "argument blocks must match the kernels' structs");

constexpr int64_t kTile = 2048, kMaxTileRows = 64, kMaxHeadDim = 256;  // sdpa.metal
constexpr int64_t kBlockPer = 8;                                       // softmax.metal's kPer

// `threads` rounded up to whole simdgroups, within the pipeline's limit (a multiple of 32).
uint32_t round_group(int64_t threads, uint32_t limit) {
  return (uint32_t)std::clamp<int64_t>((threads + 31) / 32 * 32, 32, std::max<uint32_t>(limit / 32 * 32, 32));
}

// The thread limit of `function` in `file` (its pipeline's maxTotalThreadsPerThreadgroup).
uint32_t limit_of(GpuDevice& dev, const char* file, const std::string& function) {
  return Launch(dev, file, function).max_threads();
}

// A dense copy of (s, l) when its rows need more outer dims than a RowLayout holds.
GpuStoragePtr dense_copy(const GpuStorage& s, const Layout& l) {
  auto out = new_storage(s.gpu_device(), s.dtype(), l.numel(), "fused");
  copy_into(s, l, *out, Layout::contiguous(l.shape()));
  return out;
}

// The rows of l: its last dim (n elements, cstride apart) and the outer dims, merged where their
// strides allow and size-1 dims dropped. False when more than kRowDims outer dims remain.
bool row_layout(const Layout& l, RowLayout& r) {
  const int64_t nd = l.ndim();
  r.offset = l.offset();
  r.cstride = nd ? l.stride()[nd - 1] : 1;
  Shape sh, st;
  for (int64_t d = 0; d + 1 < nd; ++d) {
    if (l.shape()[d] == 1) continue;
    if (!sh.empty() && st.back() == l.stride()[d] * l.shape()[d]) {
      sh.back() *= l.shape()[d];
      st.back() = l.stride()[d];
    } else {
      sh.push_back(l.shape()[d]);
      st.push_back(l.stride()[d]);
    }
  }
  if ((int64_t)sh.size() > kRowDims) return false;
  r.nd = (int64_t)sh.size();
  for (size_t d = 0; d < sh.size(); ++d) {
    r.shape[d] = sh[d];
    r.stride[d] = st[d];
  }
  return true;
}

// An operand read row by row: in place when its layout fits a RowLayout, else through a dense copy.
struct RowOperand {
  const GpuStorage* s = nullptr;
  GpuStoragePtr copy;
  RowLayout rl;
  RowOperand(const GpuStorage& st, const Layout& l) : s(&st) {
    if (row_layout(l, rl)) return;
    copy = dense_copy(st, l);
    s = copy.get();
    row_layout(Layout::contiguous(l.shape()), rl);
  }
};

int64_t row_len(const Layout& l) { return l.ndim() ? l.shape().back() : 1; }
int64_t row_count(const Layout& l) { return l.ndim() ? l.numel() / std::max<int64_t>(row_len(l), 1) : 1; }

std::string kname(const char* base, DType dt, const char* op) { return std::string(base) + type_suffix(dt, op); }

}  // namespace

// ================================ softmax ========================================================
namespace {

// Which softmax kernel a row length takes: a simdgroup per row (up to 8 rows per group) up to 32 * kPer
// elements, a threadgroup per row holding it in registers up to (the block pipeline's thread limit) *
// kPer, else the looped one with as many threads as its pipeline allows (at most 1024).
struct SoftmaxPlan {
  const char* kind;  // the kernel name's part: "simd_", "block_", "looped_"
  uint32_t tpg, groups;
};
SoftmaxPlan softmax_plan(GpuDevice& dev, const std::string& base, DType dt, int64_t n, int64_t rows, const char* op) {
  auto limit = [&](const char* kind) { return limit_of(dev, "softmax.metal", kname((base + kind).c_str(), dt, op)); };
  if (n <= 32 * kBlockPer) {
    const uint32_t t = round_group(256, limit("simd_"));
    return {"simd_", t, checked_u32(ceil_div(rows, t / 32), op)};
  }
  const uint32_t block = limit("block_");
  if (n <= (int64_t)block * kBlockPer)
    return {"block_", round_group((n + kBlockPer - 1) / kBlockPer, block), checked_u32(rows, op)};
  return {"looped_", round_group(1024, limit("looped_")), checked_u32(rows, op)};
}

}  // namespace

StoragePtr softmax_fwd(const BackendStorage& xs, const Layout& l, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  const int64_t n = row_len(l), rows = row_count(l);
  if (l.numel() == 0) return y;
  RowOperand in(x, l);
  SoftmaxArgs a;
  a.a = a.b = in.rl;
  a.n = n;
  a.rows = rows;
  const SoftmaxPlan p = softmax_plan(dev, std::string(op) + "_fwd_", x.dtype(), n, rows, op);
  Launch(dev, "softmax.metal", kname((std::string(op) + "_fwd_" + p.kind).c_str(), x.dtype(), op))
      .input(*in.s)
      .output(*y)
      .scalar(a)
      .dispatch({p.tpg, p.groups, 1}, {p.tpg, 1, 1});
  return y;
}

StoragePtr softmax_bwd(const BackendStorage& ys, const Layout& l, const BackendStorage& g, const Layout& lg,
                       bool log) {
  const char* op = log ? "log_softmax_bwd" : "softmax_bwd";
  const GpuStorage& y = as_gpu(ys);
  GpuDevice& dev = y.gpu_device();
  auto dx = new_storage(dev, y.dtype(), l.numel(), op);
  const int64_t n = row_len(l), rows = row_count(l);
  if (l.numel() == 0) return dx;
  RowOperand ry(y, l), rg(as_gpu(g), lg);
  SoftmaxArgs a;
  a.a = ry.rl;
  a.b = rg.rl;
  a.n = n;
  a.rows = rows;
  const std::string base = std::string(log ? "log_softmax" : "softmax") + "_bwd_";
  const SoftmaxPlan p = softmax_plan(dev, base, y.dtype(), n, rows, op);
  Launch(dev, "softmax.metal", kname((base + p.kind).c_str(), y.dtype(), op))
      .input(*ry.s)
      .input(*rg.s)
      .output(*dx)
      .scalar(a)
      .dispatch({p.tpg, p.groups, 1}, {p.tpg, 1, 1});
  return dx;
}

// ================================ norms ==========================================================
namespace {

// Threads per row: about 4 elements each, whole simdgroups, within `function`'s pipeline limit.
uint32_t norm_group(GpuDevice& dev, const std::string& function, int64_t n) {
  return round_group((n + 3) / 4, limit_of(dev, "norm.metal", function));
}

void set_param(const Layout* l, int64_t& off, int64_t& st) {
  off = l ? l->offset() : 0;
  st = l && l->ndim() == 1 ? l->stride()[0] : 0;
}

// dw (and db) = column sums over the rows of g * xhat (and g), in chunks of rows then in chunk order:
// a function of the shape only, so the result is the same on every run.
template <class R>
void norm_params(GpuDevice& dev, const char* op, const RowOperand& x, const RowOperand& g, const GpuStorage* mean,
                 const GpuStorage& rstd, NormArgs<R> a, const GpuStorage& dw, const GpuStorage* db) {
  const int64_t n = a.n, rows = a.rows;
  if (n == 0) return;
  const int64_t want = std::clamp<int64_t>((int64_t(1) << 16) / std::max<int64_t>(n, 1), 1, 1024);
  a.chunk = std::max<int64_t>(1, (rows + want - 1) / want);
  a.nchunks = rows ? (rows + a.chunk - 1) / a.chunk : 0;
  a.has_b = db != nullptr;
  a.has_mean = mean != nullptr;
  const DType dt = x.s->dtype();
  auto pw = new_storage(dev, compute_dtype(dt), std::max<int64_t>(1, a.nchunks * n), op);
  auto pb = db ? new_storage(dev, compute_dtype(dt), std::max<int64_t>(1, a.nchunks * n), op) : pw;
  Launch(dev, "norm.metal", kname("norm_bwd_params_part_", dt, op))
      .input(*x.s)
      .input(mean ? *mean : rstd)
      .input(rstd)
      .input(*g.s)
      .output(*pw)
      .output(*pb)
      .scalar(a)
      .dispatch_grid({checked_u32(n, op), checked_u32(a.nchunks, op), 1});
  Launch(dev, "norm.metal", kname("norm_bwd_params_sum_", dt, op))
      .input(*pw)
      .input(*pb)
      .output(dw)
      .output(db ? *db : dw)
      .scalar(a)
      .dispatch_1d(checked_u32(n, op), 256);
}

// The arguments every norm kernel reads: the rows of x and g, their length and count, and where the
// weight (and bias) lie.
template <class R>
NormArgs<R> norm_args(const RowLayout& x, const RowLayout& g, int64_t n, int64_t rows, const BackendStorage* w,
                      const Layout* lw, const BackendStorage* b, const Layout* lb) {
  NormArgs<R> a;
  a.x = x;
  a.g = g;
  a.n = n;
  a.rows = rows;
  a.has_w = w != nullptr;
  a.has_b = b != nullptr;
  set_param(lw, a.w_off, a.w_st);
  set_param(lb, a.b_off, a.b_st);
  return a;
}

// One group of threads per row of `function` (norm.metal), buffers bound in order: inputs, then outputs.
template <class R>
void norm_rows(GpuDevice& dev, const char* function, const char* op, DType dt, const NormArgs<R>& a,
               std::initializer_list<const GpuStorage*> inputs, std::initializer_list<const GpuStorage*> outputs) {
  const std::string name = kname(function, dt, op);
  const uint32_t tpg = norm_group(dev, name, a.n);
  Launch launch(dev, "norm.metal", name);
  for (const GpuStorage* s : inputs) launch.input(*s);
  for (const GpuStorage* s : outputs) launch.output(*s);
  launch.scalar(a).dispatch({tpg, checked_u32(a.rows, op), 1}, {tpg, 1, 1});
}

}  // namespace

// Without a weight (or bias) the kernels read none; x is bound in its place.
std::tuple<StoragePtr, StoragePtr> rms_norm_fwd(const BackendStorage& xs, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, double eps) {
  const char* op = "rms_norm";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr> {
  using R = decltype(tag);
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  auto rstd = new_storage(dev, compute_dtype(x.dtype()), row_count(l), op);
  if (l.numel() == 0) return {y, rstd};
  RowOperand in(x, l);
  NormArgs<R> a = norm_args<R>(in.rl, in.rl, row_len(l), row_count(l), w, lw, nullptr, nullptr);
  a.eps = (R)eps;
  norm_rows(dev, "rms_norm_fwd_", op, x.dtype(), a, {in.s, w ? &as_gpu(*w) : in.s}, {y.get(), rstd.get()});
  return {y, rstd};
  });
}

std::tuple<StoragePtr, StoragePtr> rms_norm_bwd(const BackendStorage& xs, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, const BackendStorage& rstd, const BackendStorage& g,
                                                const Layout& lg, bool want_params, const BackendStorage* add,
                                                const Layout* ladd) {
  const char* op = "rms_norm_bwd";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const int64_t n = row_len(l);
  auto dx = new_storage(dev, x.dtype(), l.numel(), op);
  GpuStoragePtr dw = want_params ? new_storage(dev, x.dtype(), n, op) : nullptr;
  RowOperand rx(x, l), rg(as_gpu(g), lg);
  const NormArgs<R> a = norm_args<R>(rx.rl, rg.rl, n, row_count(l), w, lw, nullptr, nullptr);
  if (l.numel() > 0)
    norm_rows(dev, "rms_norm_bwd_dx_", op, x.dtype(), a, {rx.s, w ? &as_gpu(*w) : rx.s, &as_gpu(rstd), rg.s},
              {dx.get()});
  if (dw) norm_params(dev, op, rx, rg, nullptr, as_gpu(rstd), a, *dw, nullptr);
  if (add) return {dx->binary(BinaryOp::Add, Layout::contiguous(l.shape()), *add, *ladd), dw};  // not fused here
  return {dx, dw};
  });
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_fwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb, double eps) {
  const char* op = "layer_norm";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const int64_t rows = row_count(l);
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  auto mean = new_storage(dev, compute_dtype(x.dtype()), rows, op);
  auto rstd = new_storage(dev, compute_dtype(x.dtype()), rows, op);
  if (l.numel() == 0) return {y, mean, rstd};
  RowOperand in(x, l);
  NormArgs<R> a = norm_args<R>(in.rl, in.rl, row_len(l), rows, w, lw, b, lb);
  a.eps = (R)eps;
  norm_rows(dev, "layer_norm_fwd_", op, x.dtype(), a, {in.s, w ? &as_gpu(*w) : in.s, b ? &as_gpu(*b) : in.s},
            {y.get(), mean.get(), rstd.get()});
  return {y, mean, rstd};
  });
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_bwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg,
                                                              bool want_params, const BackendStorage* add,
                                                              const Layout* ladd) {
  const char* op = "layer_norm_bwd";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const int64_t n = row_len(l);
  auto dx = new_storage(dev, x.dtype(), l.numel(), op);
  GpuStoragePtr dw, db;
  if (want_params) {  // the seam passes it false without w
    dw = new_storage(dev, x.dtype(), n, op);
    db = new_storage(dev, x.dtype(), n, op);
  }
  RowOperand rx(x, l), rg(as_gpu(g), lg);
  const NormArgs<R> a = norm_args<R>(rx.rl, rg.rl, n, row_count(l), w, lw, nullptr, nullptr);
  if (l.numel() > 0)
    norm_rows(dev, "layer_norm_bwd_dx_", op, x.dtype(), a,
              {rx.s, w ? &as_gpu(*w) : rx.s, &as_gpu(mean), &as_gpu(rstd), rg.s}, {dx.get()});
  if (dw) norm_params(dev, op, rx, rg, &as_gpu(mean), as_gpu(rstd), a, *dw, db.get());
  if (add) return {dx->binary(BinaryOp::Add, Layout::contiguous(l.shape()), *add, *ladd), dw, db};  // not fused here
  return {dx, dw, db};
  });
}

// ================================ activations' backward ==========================================
StoragePtr act_bwd(const BackendStorage& as_, const Layout& l, const BackendStorage& g, const Layout& lg, ActKind kind,
                   double p0, double p1) {
  const std::string op = std::string(act_name(kind)) + "_bwd";
  const GpuStorage& a = as_gpu(as_);
  GpuDevice& dev = a.gpu_device();
  const int64_t n = l.numel();
  auto dx = new_storage(dev, a.dtype(), n, op.c_str());
  if (n == 0) return dx;
  ActArgs p;
  p.n = n;
  const GpuStorage* as = &a;
  const GpuStorage* gs = &as_gpu(g);
  GpuStoragePtr ca, cg;
  uint64_t threads = n;
  if (l.is_contiguous() && lg.is_contiguous()) {
    p.a_off = l.offset();
    p.g_off = lg.offset();
    threads = ceil_div(n, 4);  // act.metal's kReads
  } else {
    auto st = collapse({&l, &lg});
    if (st[0].ndim() > (uint32_t)kActDims) {  // beyond the kernel's dims: read dense copies
      ca = dense_copy(a, l);
      cg = dense_copy(*gs, lg);
      as = ca.get();
      gs = cg.get();
      threads = ceil_div(n, 4);
    } else {
      p.nd = st[0].ndim();
      p.a_off = st[0].offset;
      p.g_off = st[1].offset;
      for (int64_t d = 0; d < p.nd; ++d) {
        p.shape[d] = st[0].shape[d];
        p.sa[d] = st[0].strides[d];
        p.sg[d] = st[1].strides[d];
      }
    }
  }
  Launch k(dev, "act.metal", kname((op + "_").c_str(), a.dtype(), op.c_str()));
  k.input(*as).input(*gs).output(*dx).scalar(p);
  // The kinds with parameters take them at buffer(4) (act.metal's act_bwd_param).
  if (kind >= ActKind::Elu) k.scalar_of(a.dtype(), ActParams<float>{(float)p0, (float)p1}, ActParams<double>{p0, p1});
  k.dispatch_1d(checked_u32((int64_t)threads, op.c_str()), 256);
  return dx;
}

// ================================ sdpa ===========================================================
namespace {

template <class R> struct SdpaSetup {
  SdpaKArgs<R> k;
  std::string suffix;  // "<dtype>_<mask dtype>"
  const GpuStorage* mask = nullptr;
};

// The kernels' argument block from the seam's geometry (cpp/fused.cpp).
template <class R> SdpaSetup<R> sdpa_setup(const SdpaArgs& a, const SdpaGeom& g, const char* op) {
  SdpaSetup<R> s;
  SdpaKArgs<R>& k = s.k;
  k.B = g.B, k.H = g.H, k.Hkv = g.Hkv, k.Lq = g.Lq, k.Lk = g.Lk, k.D = g.D, k.Dv = g.Dv;
  std::copy(g.sq, g.sq + 4, k.sq);
  std::copy(g.sk, g.sk + 4, k.sk);
  std::copy(g.sv, g.sv + 4, k.sv);
  EMBER_CHECK(k.D <= kMaxHeadDim && k.Dv <= kMaxHeadDim, Unsupported, "[", op, "] head dims up to ", kMaxHeadDim,
              " on ", kDeviceKindNames[(int)a.q->device().kind], ", got ", k.D, " and ", k.Dv);
  k.q_off = a.lq.offset();
  k.k_off = a.lk.offset();
  k.v_off = a.lv.offset();
  k.scale = (R)a.scale;
  k.softcap = (R)a.softcap;
  k.causal = a.causal;
  k.tile = std::min<int64_t>(kMaxTileRows, kTile / std::max<int64_t>({k.D, k.Dv, 1}));
  const DType qdt = a.q->dtype();
  if (a.mask) {
    std::copy(g.sm, g.sm + 4, k.sm);
    k.m_off = a.lmask.offset();
    // a bool keep-mask is one byte 0/1 per element, as a uint8 one: it runs the uint8 variant
    const bool keep = a.mask->dtype() == DType::U8 || a.mask->dtype() == DType::Bool;
    k.mask_kind = keep ? 1 : 2;
    s.mask = &as_gpu(*a.mask);
    s.suffix = std::string(type_suffix(qdt, op)) + "_" + (keep ? "uint8" : type_suffix(a.mask->dtype(), op));
  } else {
    s.suffix = std::string(type_suffix(qdt, op)) + "_uint8";  // the uint8 variant, mask_kind 0
  }
  return s;
}

uint32_t sdpa_simdgroups(int64_t rows) { return rows >= 32 ? 8 : 4; }

}  // namespace

std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const SdpaArgs& a, const SdpaGeom& geo) {
  const char* op = "sdpa";
  const GpuStorage& q = as_gpu(*a.q);
  GpuDevice& dev = q.gpu_device();
  return with_args(compute_dtype(q.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr> {
  using R = decltype(tag);
  SdpaSetup<R> s = sdpa_setup<R>(a, geo, op);
  const SdpaKArgs<R>& k = s.k;
  const int64_t BH = k.B * k.H;
  auto out = new_storage(dev, q.dtype(), BH * k.Lq * k.Dv, op);
  auto lse = new_storage(dev, compute_dtype(q.dtype()), BH * k.Lq, op);
  if (BH * k.Lq == 0) return {out, lse};
  const GpuStorage& mask = s.mask ? *s.mask : q;
  // A few queries over many keys: the decode kernel spreads the keys over the group's simdgroups.
  const bool decode = k.Lq <= 4;
  uint32_t nsg = decode ? (uint32_t)std::min<int64_t>(8, kTile / std::max<int64_t>(k.Dv, 1))
                        : sdpa_simdgroups(k.Lq);
  // Few (query, head) pairs over a long cache would leave most of a GPU idle: the keys are split over
  // threadgroups too (chunks of at least 512 keys), and a second kernel merges them in chunk order.
  const int64_t chunks = decode && BH * k.Lq < 256 ? std::clamp<int64_t>(ceil_div(k.Lk, 512), 1, 32) : 1;
  const std::string fn = chunks > 1 ? "sdpa_decode_split_" + s.suffix
                                    : std::string(decode ? "sdpa_decode_" : "sdpa_fwd_") + s.suffix;
  nsg = std::max<uint32_t>(1, std::min<uint32_t>(nsg, limit_of(dev, "sdpa.metal", fn) / 32));  // the pipeline's limit
  if (chunks > 1) {
    SdpaKArgs<R> ks = k;
    ks.pad = (uint32_t)chunks;
    auto part = new_storage(dev, compute_dtype(q.dtype()), BH * k.Lq * chunks * (k.Dv + 2), op);
    Launch(dev, "sdpa.metal", fn)
        .input(q)
        .input(as_gpu(*a.k))
        .input(as_gpu(*a.v))
        .input(mask)
        .output(*part)
        .scalar(ks)
        .dispatch({32 * nsg, checked_u32(k.Lq * chunks, op), checked_u32(BH, op)}, {32 * nsg, 1, 1});
    Launch(dev, "sdpa.metal", kname("sdpa_decode_merge_", q.dtype(), op))
        .input(*part)
        .output(*out)
        .output(*lse)
        .scalar(ks)
        .dispatch({32, checked_u32(k.Lq, op), checked_u32(BH, op)}, {32, 1, 1});
    return {out, lse};
  }
  const uint32_t gy = decode ? checked_u32(k.Lq, op) : checked_u32((int64_t)ceil_div(k.Lq, nsg), op);
  Launch(dev, "sdpa.metal", fn)
      .input(q)
      .input(as_gpu(*a.k))
      .input(as_gpu(*a.v))
      .input(mask)
      .output(*out)
      .output(*lse)
      .scalar(k)
      .dispatch({32 * nsg, gy, checked_u32(BH, op)}, {32 * nsg, 1, 1});
  return {out, lse};
  });
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const SdpaArgs& a, const SdpaGeom& geo,
                                                        const BackendStorage& o, const Layout& lo,
                                                        const BackendStorage& lse, const BackendStorage& g,
                                                        const Layout& lg) {
  const char* op = "sdpa_bwd";
  const GpuStorage& q = as_gpu(*a.q);
  GpuDevice& dev = q.gpu_device();
  return with_args(compute_dtype(q.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
  using R = decltype(tag);
  SdpaSetup<R> s = sdpa_setup<R>(a, geo, op);
  SdpaKArgs<R>& k = s.k;
  std::copy(geo.so, geo.so + 4, k.so);
  std::copy(geo.sg, geo.sg + 4, k.sg);
  k.o_off = lo.offset();
  k.g_off = lg.offset();
  const int64_t BH = k.B * k.H;
  auto dq = new_storage(dev, q.dtype(), BH * k.Lq * k.D, op);
  auto dk = new_storage(dev, q.dtype(), k.B * k.Hkv * k.Lk * k.D, op);
  auto dv = new_storage(dev, q.dtype(), k.B * k.Hkv * k.Lk * k.Dv, op);
  if (BH == 0) return {dq, dk, dv};
  const GpuStorage& mask = s.mask ? *s.mask : q;
  auto di = new_storage(dev, compute_dtype(q.dtype()), std::max<int64_t>(1, BH * k.Lq), op);
  Launch(dev, "sdpa.metal", kname("sdpa_bwd_prep_", q.dtype(), op))
      .input(as_gpu(o))
      .input(as_gpu(g))
      .output(*di)
      .scalar(k)
      .dispatch({32, checked_u32(k.Lq, op), checked_u32(BH, op)}, {32, 1, 1});
  const uint32_t nq = std::max<uint32_t>(
      1, std::min<uint32_t>(sdpa_simdgroups(k.Lq), limit_of(dev, "sdpa.metal", "sdpa_bwd_dq_" + s.suffix) / 32));
  const uint32_t nk = std::max<uint32_t>(
      1, std::min<uint32_t>(sdpa_simdgroups(k.Lk), limit_of(dev, "sdpa.metal", "sdpa_bwd_dkv_" + s.suffix) / 32));
  Launch(dev, "sdpa.metal", "sdpa_bwd_dq_" + s.suffix)
      .input(q)
      .input(as_gpu(*a.k))
      .input(as_gpu(*a.v))
      .input(mask)
      .input(as_gpu(g))
      .input(as_gpu(lse))
      .input(*di)
      .output(*dq)
      .scalar(k)
      .dispatch({32 * nq, checked_u32((int64_t)ceil_div(k.Lq, nq), op), checked_u32(BH, op)}, {32 * nq, 1, 1});
  Launch(dev, "sdpa.metal", "sdpa_bwd_dkv_" + s.suffix)
      .input(q)
      .input(as_gpu(*a.k))
      .input(as_gpu(*a.v))
      .input(mask)
      .input(as_gpu(g))
      .input(as_gpu(lse))
      .input(*di)
      .output(*dk)
      .output(*dv)
      .scalar(k)
      .dispatch({32 * nk, checked_u32((int64_t)ceil_div(k.Lk, nk), op), checked_u32(k.B * k.Hkv, op)},
                {32 * nk, 1, 1});
  return {dq, dk, dv};
  });
}

// ================================ rope ===========================================================
StoragePtr rope(const BackendStorage& xs, const Layout& l, const RopeArgs& a) {
  const char* op = "rope";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> StoragePtr {
  using R = decltype(tag);
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  if (l.numel() == 0) return y;
  RowOperand in(x, l);
  RopeKArgs<R> k;
  k.x = in.rl;
  k.D = row_len(l);
  k.L = l.shape()[l.ndim() - 2];
  k.rows = row_count(l);
  k.half = a.dims / 2;
  k.offset = a.offset;
  k.scale = (R)a.scale;
  k.log2_base = (R)std::log2(a.base);
  k.traditional = a.traditional;
  k.inverse = a.inverse;
  k.has_offsets = a.offsets != nullptr;
  k.has_freqs = a.freqs != nullptr;
  k.per_batch = k.rows;
  if (a.offsets) {
    const bool batched = a.loffsets.numel() > 1;
    k.per_batch = batched ? k.rows / l.shape()[0] : k.rows;
    k.o_off = a.loffsets.offset();
    k.o_st = batched ? a.loffsets.stride()[0] : 0;
  }
  if (a.freqs) {
    k.f_off = a.lfreqs.offset();
    k.f_st = a.lfreqs.stride()[0];
  }
  if (a.table) {  // has_freqs 2: buffer 2 is the caller's (cos | sin) table, one row per (batch, position)
    k.has_freqs = 2;
    k.f_off = a.ltable.offset();
    k.per_batch = k.rows / a.ltable.shape()[0];
  }
  // Without freqs or a table, inv_freq comes from the host in double (has_freqs 3, by value, up to 1024 of
  // them) rather than the kernel's float exp2. Absent offsets / freqs are never read; x is bound there.
  std::vector<R> inv;
  if (!a.freqs && !a.table && k.half <= 1024) {
    inv.resize((size_t)std::max<int64_t>(k.half, 1));
    for (int64_t j = 0; j < k.half; ++j)
      inv[(size_t)j] = (R)std::exp2(-(double)(2 * j) / (double)(2 * k.half) * std::log2(a.base));
    k.has_freqs = 3;
  }
  Launch launch(dev, "rope.metal", kname("rope_", x.dtype(), op));
  launch.input(*in.s).input(a.offsets ? as_gpu(*a.offsets) : *in.s);
  if (!inv.empty()) launch.bytes(inv.data(), inv.size() * sizeof(R));
  else launch.input(a.freqs ? as_gpu(*a.freqs) : a.table ? as_gpu(*a.table) : *in.s);
  launch.output(*y).scalar(k).dispatch_grid({checked_u32(k.D - k.half, op), checked_u32(k.rows, op), 1}, {64, 1, 1});
  return y;
  });
}

// ================================ cross_entropy ==================================================
namespace {
template <class R = float> struct CeKArgs {  // cross_entropy.metal's CeArgs
  RowLayout x;
  int64_t n = 0, rows = 0, t_off = 0, g_off = 0, w_off = 0, w_st = 0, ignore = 0;
  R eps = 0;
  uint32_t has_w = 0, t_i32 = 0, pad = 0;
};
static_assert(sizeof(CeKArgs<>) == 224, "argument blocks must match the kernels' structs");

// An operand read densely from its offset: in place when contiguous, else a dense copy.
struct DenseOperand {
  const GpuStorage* s;
  GpuStoragePtr copy;
  int64_t off;
  DenseOperand(const GpuStorage& st, const Layout& l) : s(&st), off(l.offset()) {
    if (l.is_contiguous()) return;
    copy = dense_copy(st, l);
    s = copy.get();
    off = 0;
  }
};

template <class R> struct CeLaunch {
  RowOperand x;
  DenseOperand t;
  CeKArgs<R> k;
  uint32_t tpg;
  CeLaunch(GpuDevice& dev, const CeArgs& a, const char* fn, const char* op)
      : x(as_gpu(*a.x), a.lx), t(as_gpu(*a.t), a.lt) {
    k.x = x.rl;
    k.n = row_len(a.lx);
    k.rows = a.lt.numel();
    k.t_off = t.off;
    k.ignore = a.ignore;
    k.eps = (R)a.eps;
    k.t_i32 = a.t->dtype() == DType::I32;
    k.has_w = a.w != nullptr;
    set_param(a.w ? &a.lw : nullptr, k.w_off, k.w_st);
    tpg = round_group(std::clamp<int64_t>(k.n, 32, 1024), limit_of(dev, "cross_entropy.metal", kname(fn, a.x->dtype(), op)));
  }
};
}  // namespace

std::tuple<StoragePtr, StoragePtr> cross_entropy_fwd(const CeArgs& a) {
  const char* op = "cross_entropy";
  const GpuStorage& x = as_gpu(*a.x);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> std::tuple<StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const int64_t rows = a.lt.numel();
  auto loss = new_storage(dev, x.dtype(), rows, op);
  auto lse = new_storage(dev, compute_dtype(x.dtype()), rows, op);
  if (rows == 0) return {loss, lse};
  CeLaunch<R> c(dev, a, "ce_fwd_", op);
  Launch(dev, "cross_entropy.metal", kname("ce_fwd_", x.dtype(), op))
      .input(*c.x.s)
      .input(*c.t.s)
      .input(*c.t.s)
      .input(a.w ? as_gpu(*a.w) : x)
      .output(*loss)
      .output(*lse)
      .scalar(c.k)
      .dispatch({c.tpg, checked_u32(rows, op), 1}, {c.tpg, 1, 1});
  return {loss, lse};
  });
}

StoragePtr cross_entropy_bwd(const CeArgs& a, const BackendStorage& lse, const BackendStorage& gs, const Layout& lg) {
  const char* op = "cross_entropy_bwd";
  const GpuStorage& x = as_gpu(*a.x);
  GpuDevice& dev = x.gpu_device();
  return with_args(compute_dtype(x.dtype()), [&](auto tag) -> StoragePtr {
  using R = decltype(tag);
  auto dx = new_storage(dev, x.dtype(), a.lx.numel(), op);
  const int64_t rows = a.lt.numel();
  if (a.lx.numel() == 0) return dx;
  CeLaunch<R> c(dev, a, "ce_bwd_", op);
  DenseOperand g(as_gpu(gs), lg);
  c.k.g_off = g.off;
  Launch(dev, "cross_entropy.metal", kname("ce_bwd_", x.dtype(), op))
      .input(*c.x.s)
      .input(*c.t.s)
      .input(*c.t.s)
      .input(a.w ? as_gpu(*a.w) : x)
      .input(as_gpu(lse))
      .input(*g.s)
      .output(*dx)
      .scalar(c.k)
      .dispatch({c.tpg, checked_u32(rows, op), 1}, {c.tpg, 1, 1});
  return dx;
  });
}

void register_fused(DeviceKind kind) {
  Kernels<SoftmaxFwd>::set(kind, &softmax_fwd);
  Kernels<SoftmaxBwd>::set(kind, &softmax_bwd);
  Kernels<CrossEntropyFwd>::set(kind, &cross_entropy_fwd);
  Kernels<CrossEntropyBwd>::set(kind, &cross_entropy_bwd);
  Kernels<RmsNormFwd>::set(kind, &rms_norm_fwd);
  Kernels<RmsNormBwd>::set(kind, &rms_norm_bwd);
  Kernels<LayerNormFwd>::set(kind, &layer_norm_fwd);
  Kernels<LayerNormBwd>::set(kind, &layer_norm_bwd);
  Kernels<ActBwd>::set(kind, &act_bwd);
  Kernels<SdpaFwd>::set(kind, &sdpa_fwd);
  Kernels<SdpaBwd>::set(kind, &sdpa_bwd);
  Kernels<Rope>::set(kind, &rope);
}

}  // namespace ember::gpu::ops
