// Fused kernels' host side: walking the rows of any layout (dense rows in place, strided rows gathered
// into a per-chunk buffer), splitting rows across the pool, dw/db reductions. Arguments arrive checked
// (cpp/fused.cpp).
#include "cpu/fused.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/nditer.h"
#include "cpu/parallel.h"
#include "families/act_bwd.h"
#include "families/bias_gelu.h"
#include "families/cross_entropy.h"
#include "families/layer_norm.h"
#include "families/bias_residual.h"
#include "families/rms_norm.h"
#include "families/rope.h"
#include "families/softmax.h"
#include "registry.h"

namespace ember::cpu {
namespace {

using Ptr = std::shared_ptr<BackendStorage>;

// The stats dtype of cpp/fused.h (that header's name is shadowed by this directory's fused.h).
DType stats_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

// The rows of a layout: last dim n (any stride), outer dims coalesced for cheap row offsets.
struct Rows {
  const char* base = nullptr;
  size_t isz = 0;
  int64_t n = 0, nrows = 0, cstride = 1, off = 0;
  Shape osh, ost;
  Rows(const CpuStorage& s, const Layout& l) {
    base = (const char*)s.raw();
    isz = itemsize(s.dtype());
    const int64_t nd = l.ndim();
    n = nd ? l.shape()[nd - 1] : 1;
    cstride = nd ? l.stride()[nd - 1] : 1;
    if (n <= 1) cstride = 1;
    off = l.offset();
    osh.assign(l.shape().begin(), l.shape().end() - (nd ? 1 : 0));
    ost.assign(l.stride().begin(), l.stride().end() - (nd ? 1 : 0));
    nrows = shape_numel(osh);
    coalesce(osh, ost);
  }
  bool dense_rows() const { return cstride == 1 && osh.size() <= 1; }
  int64_t ld() const { return osh.empty() ? 0 : ost[0]; }
  int64_t row_off(int64_t r) const {
    int64_t o = off;
    for (int64_t d = (int64_t)osh.size() - 1; d >= 0 && r; --d) {
      o += (r % osh[d]) * ost[d];
      r /= osh[d];
    }
    return o;
  }
  const void* at(int64_t elem) const { return base + elem * (int64_t)isz; }
  // Pointer to row r's first element, gathering it into `tmp` when its elements are strided.
  const void* row(int64_t r, std::vector<char>& tmp) const {
    const int64_t o = row_off(r);
    if (cstride == 1) return at(o);
    tmp.resize(n * isz);
    for (int64_t j = 0; j < n; ++j) std::memcpy(tmp.data() + j * isz, at(o + j * cstride), isz);
    return tmp.data();
  }
};

// Splits `nrows` rows of n elements into at most one chunk per thread (fewer for small work) and
// calls body(r0, r1, chunk). Returns the number of chunks used.
// Row chunks: a few per thread so the pool can balance them when a core is busy elsewhere.
inline int64_t max_chunks() { return 4 * (int64_t)get_num_threads(); }
// Chunks of a norm backward that also sums the parameters' gradients over rows: each chunk zeroes, then
// the reduction reads, an n-long partial per parameter, which for a few long rows ((32, 65536): 4 rows
// a chunk) cost a third of the pass. So 32 rows a chunk at least, beyond one chunk per thread.
inline int64_t param_chunks(int64_t nrows) {
  return std::min<int64_t>(max_chunks(), std::max<int64_t>(get_num_threads(), nrows / 32));
}

template <typename F> int64_t run_chunks(int64_t nrows, int64_t n, int64_t nchunks_max, F&& body) {
  const int64_t work = nrows * std::max<int64_t>(n, 1);
  int64_t nc = std::min<int64_t>({nchunks_max, nrows, std::max<int64_t>(1, work / 16384)});
  nc = std::max<int64_t>(nc, 1);
  parallel_for(nc, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) body(nrows * c / nc, nrows * (c + 1) / nc, c);
  });
  return nc;
}

// A dense copy of a 1-D (n,) parameter (weight/bias) when it is strided; else its data in place.
const void* param_ptr(const CpuStorage& s, const Layout& l, std::vector<char>& tmp) {
  Rows r(s, l);
  return r.row(0, tmp);
}

template <typename C> void sum_partials(const void* parts, int64_t nc, int64_t n, DType dt, void* out) {
  const C* p = (const C*)parts;
  EMBER_DISPATCH_FLOAT(dt, {
    T* o = (T*)out;
    parallel_for(n, 4096, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        C s = 0;
        for (int64_t c = 0; c < nc; ++c) s += p[c * n + j];
        o[j] = store<T>((typename Acc<T>::type)s);
      }
    });
  });
}
void reduce_partials(const void* parts, int64_t nc, int64_t n, DType dt, void* out) {
  if (dt == DType::F64) sum_partials<double>(parts, nc, n, dt, out);
  else sum_partials<float>(parts, nc, n, dt, out);
}

// The per-chunk partial sums of one parameter's gradient (n values a chunk, in the stats dtype), from the
// caching allocator (a fresh std::vector of MBs is fresh pages to fault in and zero on every call); each
// chunk zeroes its own slice, in its own cache. Empty (chunk() gives null) when the gradient is not wanted.
class ParamPartials {
 public:
  ParamPartials(bool want, int64_t maxc, int64_t n, DType sdt)
      : sto_(want ? new_cpu(sdt, maxc * n) : nullptr), n_(n), bytes_(n * (int64_t)itemsize(sdt)) {}
  void* chunk(int64_t c) const {
    if (!sto_) return nullptr;
    char* p = (char*)sto_->raw() + c * bytes_;
    std::memset(p, 0, bytes_);
    return p;
  }
  // The n sums over the nc chunks that ran (zeros when none did), as dt.
  CpuStoragePtr sum(int64_t nc, DType dt) const {
    if (nc == 0) std::memset(sto_->raw(), 0, bytes_);
    auto out = new_cpu(dt, n_);
    reduce_partials(sto_->raw(), std::max<int64_t>(nc, 1), n_, dt, out->raw());
    return out;
  }

 private:
  CpuStoragePtr sto_;
  int64_t n_, bytes_;
};

int fi(DType dt) { return (int)dt; }

// Outputs this big are written with streaming stores: they skip the read-for-ownership (a third of a
// row kernel's traffic) and leave the inputs in the last-level cache; a smaller output is more likely
// to be read again from cache by the next op. Measured on a 32 MiB-L3 Zen 3: helps from ~4 MiB up.
constexpr int64_t kStreamBytes = int64_t(4) << 20;
bool stream_output(const Sto& out) { return (int64_t)(out->numel() * itemsize(out->dtype())) >= kStreamBytes; }

}  // namespace

// ================================ softmax ========================================================
Sto softmax_fwd(const BackendStorage& xs, const Layout& lx, bool log) {
  const CpuStorage& x = as_cpu(xs);
  Rows rx(x, lx);
  auto y = new_cpu(x.dtype(), lx.numel());
  if (lx.numel() == 0) return y;
  auto fn = fused_kernels().softmax_fwd[fi(x.dtype())];
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype());
  char* yb = (char*)y->raw();
  const bool nt = stream_output(y);
  run_chunks(rx.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    if (rx.dense_rows()) return fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), yb + r0 * n * isz, r1 - r0, n, log, nt);
    std::vector<char> t;
    for (int64_t r = r0; r < r1; ++r) fn(rx.row(r, t), n, yb + r * n * isz, 1, n, log, nt);
  });
  return y;
}

Sto softmax_bwd(const BackendStorage& ys, const Layout& ly, const BackendStorage& gs, const Layout& lg, bool log) {
  const CpuStorage &y = as_cpu(ys), &g = as_cpu(gs);
  Rows ry(y, ly), rg(g, lg);
  auto dx = new_cpu(y.dtype(), ly.numel());
  if (ly.numel() == 0) return dx;
  auto fn = fused_kernels().softmax_bwd[fi(y.dtype())];
  const int64_t n = ry.n, isz = (int64_t)itemsize(y.dtype());
  char* ob = (char*)dx->raw();
  const bool nt = stream_output(dx);
  run_chunks(ry.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    if (ry.dense_rows() && rg.dense_rows())
      return fn(ry.at(ry.off + r0 * ry.ld()), ry.ld(), rg.at(rg.off + r0 * rg.ld()), rg.ld(), ob + r0 * n * isz,
                r1 - r0, n, log, nt);
    std::vector<char> t1, t2;
    for (int64_t r = r0; r < r1; ++r) fn(ry.row(r, t1), n, rg.row(r, t2), n, ob + r * n * isz, 1, n, log, nt);
  });
  return dx;
}

// ================================ cross_entropy ==================================================
// Per row the ISA (log_)softmax kernel does the exp work (f16/bf16 rows widened to f32 first); the
// loss and dx terms are then one pass over that row in the accumulation type.
namespace {
struct CeRows {
  const CeArgs& a;
  Rows rx;
  std::vector<double> w;  // the class weights (empty: ones), read once
  double sum_w = 0;
  int64_t n;
  std::atomic<int64_t> bad{INT64_MIN};  // a class id out of range, raised after the pool is done
  explicit CeRows(const CeArgs& a_) : a(a_), rx(as_cpu(*a_.x), a_.lx), n(rx.n) {
    if (a.w) {
      std::vector<char> tmp;
      const void* wp = param_ptr(as_cpu(*a.w), a.lw, tmp);
      w.resize(n);
      EMBER_DISPATCH_FLOAT(a.w->dtype(), { for (int64_t c = 0; c < n; ++c) w[c] = (double)load<T>(((const T*)wp)[c]); });
      for (double v : w) sum_w += v;
    } else {
      sum_w = (double)n;
    }
  }
  // Row r's class id, or INT64_MIN when it is ignored; a bad one is remembered and read as ignored.
  int64_t target(int64_t r) {
    int64_t o = a.lt.offset(), rr = r;
    for (int64_t d = a.lt.ndim() - 1; d >= 0; --d) {
      o += (rr % a.lt.shape()[d]) * a.lt.stride()[d];
      rr /= a.lt.shape()[d];
    }
    const char* tb = (const char*)as_cpu(*a.t).raw();
    const int64_t t = a.t->dtype() == DType::I64 ? ((const int64_t*)tb)[o] : ((const int32_t*)tb)[o];
    if (t == a.ignore) return INT64_MIN;
    if (t < 0 || t >= n) {
      bad.store(t);
      return INT64_MIN;
    }
    return t;
  }
  double wt(int64_t c) const { return w.empty() ? 1.0 : w[c]; }
  void raise_bad(const char* op) const {
    const int64_t t = bad.load();
    EMBER_CHECK(t == INT64_MIN, Index, "[", op, "] target ", t, " out of range for ", n,
                " classes (targets are class ids in [0, classes), or ignore_index)");
  }
  // Row r of x in the kernel type C (float for f16/bf16), through `tmp` when gathered or widened.
  template <typename T, typename C> const C* row(int64_t r, std::vector<char>& g, std::vector<C>& wide) const {
    const T* xr = (const T*)rx.row(r, g);
    if constexpr (std::is_same_v<T, C>) {
      return xr;
    } else {
      wide.resize(n);
      for (int64_t c = 0; c < n; ++c) wide[c] = load<T>(xr[c]);
      return wide.data();
    }
  }
};
}  // namespace

std::tuple<Sto, Sto> cross_entropy_fwd(const CeArgs& a) {
  CeRows ce(a);
  const DType dt = a.x->dtype(), sdt = stats_dtype(dt);
  const int64_t rows = a.lt.numel(), n = ce.n;
  auto loss = new_cpu(dt, rows);
  auto lse = new_cpu(sdt, rows);
  if (rows == 0) return {loss, lse};
  const double eps = a.eps;
  EMBER_DISPATCH_FLOAT(dt, {
    using C = typename Acc<T>::type;
    const auto lsm = fused_kernels().softmax_fwd[fi(sdt)];
    T* lo = (T*)loss->raw();
    C* ls = (C*)lse->raw();
    run_chunks(rows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
      std::vector<char> g;
      std::vector<C> wide, lp((size_t)std::max<int64_t>(n, 1));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t t = ce.target(r);
        if (n == 0) {  // no classes: torch's logsumexp of nothing is -inf
          ls[r] = -INFINITY;
          lo[r] = store<T>((C)0);
          continue;
        }
        const C* xr = ce.template row<T, C>(r, g, wide);
        lsm(xr, n, lp.data(), 1, n, true, false);  // lp = x - lse
        // lse = x - lp at the target (or class 0); where that x is -inf, at the largest lp instead.
        int64_t m = t == INT64_MIN ? 0 : t;
        if (!std::isfinite((double)xr[m]))
          for (int64_t c = 0; c < n; ++c) m = lp[c] > lp[m] ? c : m;
        ls[r] = xr[m] - lp[m];
        if (t == INT64_MIN) {
          lo[r] = store<T>((C)0);
          continue;
        }
        double l = (1.0 - eps) * ce.wt(t) * -(double)lp[t];
        if (eps != 0.0) {
          // 8 independent partial sums: one running sum is a chain of dependent adds the compiler cannot split.
          C part[8] = {};
          int64_t c = 0;
          if (ce.w.empty()) {
            for (; c + 8 <= n; c += 8)
              for (int k = 0; k < 8; ++k) part[k] -= lp[c + k];
            for (; c < n; ++c) part[0] -= lp[c];
          } else {
            for (; c + 8 <= n; c += 8)
              for (int k = 0; k < 8; ++k) part[k] -= (C)ce.w[c + k] * lp[c + k];
            for (; c < n; ++c) part[0] -= (C)ce.w[c] * lp[c];
          }
          const C sm = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
          l += eps / (double)n * (double)sm;
        }
        lo[r] = store<T>((C)l);
      }
    });
  });
  ce.raise_bad("cross_entropy");
  return {loss, lse};
}

Sto cross_entropy_bwd(const CeArgs& a, const BackendStorage&, const BackendStorage& gs, const Layout& lg) {
  CeRows ce(a);
  const DType dt = a.x->dtype(), sdt = stats_dtype(dt);
  const int64_t rows = a.lt.numel(), n = ce.n;
  auto dx = new_cpu(dt, a.lx.numel());
  if (a.lx.numel() == 0) return dx;
  const double eps = a.eps;
  const CpuStorage& g = as_cpu(gs);
  EMBER_DISPATCH_FLOAT(dt, {
    using C = typename Acc<T>::type;
    const auto sm = fused_kernels().softmax_fwd[fi(sdt)];
    T* out = (T*)dx->raw();
    const T* gb = (const T*)g.raw();
    run_chunks(rows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
      std::vector<char> tmp;
      std::vector<C> wide, p((size_t)n);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t t = ce.target(r);
        T* o = out + r * n;
        if (t == INT64_MIN) {
          std::fill(o, o + n, store<T>((C)0));
          continue;
        }
        int64_t go = lg.offset(), rr = r;  // the loss gradient's element for row r
        for (int64_t d = lg.ndim() - 1; d >= 0; --d) {
          go += (rr % lg.shape()[d]) * lg.stride()[d];
          rr /= lg.shape()[d];
        }
        const C gr = load<T>(gb[go]);
        // dx = g (p W - q): q = (1 - eps) w[t] one_hot(t) + eps / C w, W = sum q.
        const C wq = (C)((1.0 - eps) * ce.wt(t)), us = (C)(eps / (double)n);
        const C W = wq + us * (C)ce.sum_w, gW = gr * W, gu = gr * us;
        sm(ce.template row<T, C>(r, tmp, wide), n, p.data(), 1, n, false, false);
        if (ce.w.empty()) for (int64_t c = 0; c < n; ++c) p[c] = gW * p[c] - gu;
        else for (int64_t c = 0; c < n; ++c) p[c] = gW * p[c] - gu * (C)ce.w[c];
        p[t] -= gr * wq;
        for (int64_t c = 0; c < n; ++c) o[c] = store<T>(p[c]);
      }
    });
  });
  ce.raise_bad("cross_entropy_bwd");
  return dx;
}

// ================================ rms_norm =======================================================
namespace {
// Weight/bias pointers for the norms; a missing one becomes a row of ones/zeros (n values, not a tensor).
const void* ln_param(const BackendStorage* s, const Layout* l, int64_t n, DType dt, double fillv,
                     std::vector<char>& tmp) {
  if (s) return param_ptr(as_cpu(*s), *l, tmp);
  tmp.resize(n * itemsize(dt));
  EMBER_DISPATCH_FLOAT(dt, {
    T* p = (T*)tmp.data();
    for (int64_t j = 0; j < n; ++j) p[j] = store<T>((typename Acc<T>::type)fillv);
  });
  return tmp.data();
}
}  // namespace

std::tuple<Sto, Sto> rms_norm_fwd(const BackendStorage& xs, const Layout& lx, const BackendStorage* w,
                                  const Layout* lw, double eps) {
  const CpuStorage& x = as_cpu(xs);
  Rows rx(x, lx);
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype()), ssz = (int64_t)itemsize(stats_dtype(x.dtype()));
  std::vector<char> wt;
  const void* wp = ln_param(w, lw, n, x.dtype(), 1.0, wt);
  auto y = new_cpu(x.dtype(), lx.numel());
  auto rstd = new_cpu(stats_dtype(x.dtype()), rx.nrows);
  if (lx.numel() == 0) return {y, rstd};
  auto fn = fused_kernels().rms_fwd[fi(x.dtype())];
  char* yb = (char*)y->raw();
  char* sb = (char*)rstd->raw();
  const bool nt = stream_output(y);
  run_chunks(rx.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    if (rx.dense_rows())
      return fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), wp, yb + r0 * n * isz, sb + r0 * ssz, r1 - r0, n, eps, nt);
    std::vector<char> t;
    for (int64_t r = r0; r < r1; ++r) fn(rx.row(r, t), n, wp, yb + r * n * isz, sb + r * ssz, 1, n, eps, nt);
  });
  return {y, rstd};
}

// out rows [r0, r1) (dense, n each) += a's rows, in place through the elementwise add's own kernel (the
// binary kernels allow out == an operand), so each sum is bit for bit the separate add's.
static void add_rows(const Rows& a, DType dt, int64_t r0, int64_t r1, char* out) {
  const int64_t n = a.n, isz = (int64_t)a.isz;
  const BinaryFn add = kernels().binary[(int)BinaryOp::Add][(int)dt];
  if (a.dense_rows() && (a.ld() == n || r1 - r0 == 1)) {
    char* o = out + r0 * n * isz;
    return add(o, 1, a.at(a.off + r0 * a.ld()), 1, o, (r1 - r0) * n);
  }
  std::vector<char> tmp;
  for (int64_t r = r0; r < r1; ++r) add(out + r * n * isz, 1, a.row(r, tmp), 1, out + r * n * isz, n);
}

std::tuple<Sto, Sto> rms_norm_bwd(const BackendStorage& xs, const Layout& lx, const BackendStorage* w,
                                  const Layout* lw, const BackendStorage& rstds, const BackendStorage& gs,
                                  const Layout& lg, bool want_params, const BackendStorage* adds,
                                  const Layout* ladd) {
  const CpuStorage &x = as_cpu(xs), &rstd = as_cpu(rstds), &g = as_cpu(gs);
  Rows rx(x, lx), rg(g, lg);
  const DType sdt = stats_dtype(x.dtype());
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype()), ssz = (int64_t)itemsize(sdt);
  std::vector<char> wt;
  const void* wp = ln_param(w, lw, n, x.dtype(), 1.0, wt);
  auto dx = new_cpu(x.dtype(), lx.numel());
  const int64_t maxc = want_params ? param_chunks(rx.nrows) : max_chunks();
  const ParamPartials pw(want_params, maxc, n, sdt);  // none, and no sums in the kernel, when dw is not wanted
  auto fn = fused_kernels().rms_bwd[fi(x.dtype())];
  char* ob = (char*)dx->raw();
  const char* sb = (const char*)rstd.raw();
  // With `add`, each chunk's dx rows get add's rows summed in while they are still in cache (no streaming).
  const bool nt = !adds && stream_output(dx);
  std::optional<Rows> ra;
  if (adds) ra.emplace(as_cpu(*adds), *ladd);
  int64_t nc = 0;
  if (lx.numel() > 0)
    nc = run_chunks(rx.nrows, n, maxc, [&](int64_t r0, int64_t r1, int64_t c) {
      void* acc = pw.chunk(c);
      if (rx.dense_rows() && rg.dense_rows()) {
        fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), wp, sb + r0 * ssz, rg.at(rg.off + r0 * rg.ld()), rg.ld(),
           ob + r0 * n * isz, acc, r1 - r0, n, nt);
      } else {
        std::vector<char> t1, t2;
        for (int64_t r = r0; r < r1; ++r)
          fn(rx.row(r, t1), n, wp, sb + r * ssz, rg.row(r, t2), n, ob + r * n * isz, acc, 1, n, nt);
      }
      if (ra) add_rows(*ra, x.dtype(), r0, r1, ob);
    });
  if (!want_params) return {dx, nullptr};
  return {dx, pw.sum(nc, x.dtype())};
}

// ================================ layer_norm =====================================================

std::tuple<Sto, Sto, Sto> layer_norm_fwd(const BackendStorage& xs, const Layout& lx, const BackendStorage* w,
                                         const Layout* lw, const BackendStorage* b, const Layout* lb, double eps) {
  const CpuStorage& x = as_cpu(xs);
  Rows rx(x, lx);
  const DType sdt = stats_dtype(x.dtype());
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype()), ssz = (int64_t)itemsize(sdt);
  std::vector<char> wt, bt;
  const void* wp = ln_param(w, lw, n, x.dtype(), 1.0, wt);
  const void* bp = ln_param(b, lb, n, x.dtype(), 0.0, bt);
  auto y = new_cpu(x.dtype(), lx.numel());
  auto mean = new_cpu(sdt, rx.nrows);
  auto rstd = new_cpu(sdt, rx.nrows);
  if (lx.numel() == 0) return {y, mean, rstd};
  auto fn = fused_kernels().ln_fwd[fi(x.dtype())];
  char* yb = (char*)y->raw();
  char* mb = (char*)mean->raw();
  char* sb = (char*)rstd->raw();
  const bool nt = stream_output(y);
  run_chunks(rx.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    if (rx.dense_rows())
      return fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), wp, bp, yb + r0 * n * isz, mb + r0 * ssz, sb + r0 * ssz,
                r1 - r0, n, eps, nt);
    std::vector<char> t;
    for (int64_t r = r0; r < r1; ++r)
      fn(rx.row(r, t), n, wp, bp, yb + r * n * isz, mb + r * ssz, sb + r * ssz, 1, n, eps, nt);
  });
  return {y, mean, rstd};
}

std::tuple<Sto, Sto, Sto> layer_norm_bwd(const BackendStorage& xs, const Layout& lx, const BackendStorage* w,
                                         const Layout* lw, const BackendStorage& means,
                                         const BackendStorage& rstds, const BackendStorage& gs, const Layout& lg,
                                         bool want_params, const BackendStorage* adds, const Layout* ladd) {
  const CpuStorage &x = as_cpu(xs), &mean = as_cpu(means), &rstd = as_cpu(rstds), &g = as_cpu(gs);
  Rows rx(x, lx), rg(g, lg);
  const DType sdt = stats_dtype(x.dtype());
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype()), ssz = (int64_t)itemsize(sdt);
  std::vector<char> wt;
  const void* wp = ln_param(w, lw, n, x.dtype(), 1.0, wt);
  auto dx = new_cpu(x.dtype(), lx.numel());
  const int64_t maxc = want_params ? param_chunks(rx.nrows) : max_chunks();
  const ParamPartials pw(want_params, maxc, n, sdt), pb(want_params, maxc, n, sdt);
  auto fn = fused_kernels().ln_bwd[fi(x.dtype())];
  char* ob = (char*)dx->raw();
  const char* mb = (const char*)mean.raw();
  const char* sb = (const char*)rstd.raw();
  // With `add`, each chunk's dx rows get add's rows summed in while they are still in cache (no streaming).
  const bool nt = !adds && stream_output(dx);
  std::optional<Rows> ra;
  if (adds) ra.emplace(as_cpu(*adds), *ladd);
  int64_t nc = 0;
  if (lx.numel() > 0)
    nc = run_chunks(rx.nrows, n, maxc, [&](int64_t r0, int64_t r1, int64_t c) {
      void* aw = pw.chunk(c);
      void* ab = pb.chunk(c);
      if (rx.dense_rows() && rg.dense_rows()) {
        fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), wp, mb + r0 * ssz, sb + r0 * ssz, rg.at(rg.off + r0 * rg.ld()),
           rg.ld(), ob + r0 * n * isz, aw, ab, r1 - r0, n, nt);
      } else {
        std::vector<char> t1, t2;
        for (int64_t r = r0; r < r1; ++r)
          fn(rx.row(r, t1), n, wp, mb + r * ssz, sb + r * ssz, rg.row(r, t2), n, ob + r * n * isz, aw, ab, 1, n, nt);
      }
      if (ra) add_rows(*ra, x.dtype(), r0, r1, ob);
    });
  if (!want_params) return {dx, nullptr, nullptr};
  return {dx, pw.sum(nc, x.dtype()), pb.sum(nc, x.dtype())};
}

// ================================ activations' backward ==========================================
namespace {
// k elements of itemsize isz from base + at elements, stride st: in place when st == 1, else copied into
// buf (B * 8 bytes) by a loop over the element type.
template <typename U> void copy_run(const U* src, int64_t st, U* dst, int64_t k) {
  if (st == 0) std::fill(dst, dst + k, src[0]);
  else for (int64_t i = 0; i < k; ++i) dst[i] = src[i * st];
}
const void* gather_run(const char* base, int64_t at, int64_t st, int64_t isz, int64_t k, char* buf) {
  const char* src = base + at * isz;
  if (st == 1) return src;
  switch (isz) {
    case 2: copy_run((const uint16_t*)src, st, (uint16_t*)buf, k); break;
    case 4: copy_run((const uint32_t*)src, st, (uint32_t*)buf, k); break;
    default: copy_run((const uint64_t*)src, st, (uint64_t*)buf, k); break;
  }
  return buf;
}
}  // namespace

Sto act_bwd(const BackendStorage& as_, const Layout& la, const BackendStorage& gs, const Layout& lg, ActKind kind,
            double p0, double p1) {
  const CpuStorage &a = as_cpu(as_), &g = as_cpu(gs);
  const FusedTable& t = fused_kernels();
  const int d = fi(a.dtype());
  EltBwdFn efn = nullptr;
  ActBwdFn pfn = kind < ActKind::Count ? t.act_bwd[(int)kind][d] : nullptr;  // the kinds with parameters
  switch (kind) {
    case ActKind::Sigmoid: efn = t.sigmoid_bwd[d]; break;
    case ActKind::Silu: efn = t.silu_bwd[d]; break;
    case ActKind::Gelu: efn = t.gelu_bwd[d]; break;
    default: break;
  }
  EMBER_CHECK(efn || pfn, Value, "[", act_name(kind), "_bwd] unknown activation");
  auto fn = [&](const void* ap, const void* gp, void* op, int64_t m) {
    if (efn) efn(ap, gp, op, m);
    else pfn(ap, gp, op, m, p0, p1);
  };
  const int64_t n = la.numel(), isz = (int64_t)itemsize(a.dtype());
  auto dx = new_cpu(a.dtype(), n);
  auto ca = la.contiguous_offsets(), cg = lg.contiguous_offsets();
  char* ob = (char*)dx->raw();
  if (ca && cg) {
    const char* ap = (const char*)a.raw() + ca->first * isz;
    const char* gp = (const char*)g.raw() + cg->first * isz;
    parallel_for(n, 16384, [&](int64_t i0, int64_t i1) { fn(ap + i0 * isz, gp + i0 * isz, ob + i0 * isz, i1 - i0); });
    return dx;
  }
  // Strided inputs (a transposed x, the broadcast gradient of a sum): runs of the jointly coalesced
  // innermost dim; an operand that is not unit-stride there is gathered a block at a time by a typed
  // loop (a stride-0 gradient becomes a fill), then the dense kernel runs on the block.
  const Layout lo = Layout::contiguous(la.shape());
  const char* abase = (const char*)a.raw();
  const char* gbase = (const char*)g.raw();
  nd_for_each<3>(la.shape(), {&la, &lg, &lo}, kGrain, [&](const auto& off, const auto& st, int64_t m) {
    constexpr int64_t B = 1024;
    alignas(64) char ta[B * 8], tg[B * 8];
    for (int64_t b = 0; b < m; b += B) {
      const int64_t k = std::min(B, m - b);
      const void* ap = gather_run(abase, off[0] + b * st[0], st[0], isz, k, ta);
      const void* gp = gather_run(gbase, off[1] + b * st[1], st[1], isz, k, tg);
      fn(ap, gp, ob + (off[2] + b) * isz, k);
    }
  });
  return dx;
}

// ================================ bias_gelu =======================================================
Sto bias_gelu_fwd(const BackendStorage& xs, const Layout& lx, const BackendStorage& bs, const Layout& lb) {
  const CpuStorage& x = as_cpu(xs);
  Rows rx(x, lx);
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype());
  std::vector<char> bt;
  const void* bp = param_ptr(as_cpu(bs), lb, bt);
  auto y = new_cpu(x.dtype(), lx.numel());
  if (lx.numel() == 0) return y;
  auto fn = fused_kernels().bias_gelu_fwd[fi(x.dtype())];
  char* yb = (char*)y->raw();
  run_chunks(rx.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    if (rx.dense_rows()) return fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), bp, yb + r0 * n * isz, r1 - r0, n);
    std::vector<char> t;
    for (int64_t r = r0; r < r1; ++r) fn(rx.row(r, t), n, bp, yb + r * n * isz, 1, n);
  });
  return y;
}

std::tuple<Sto, Sto> bias_gelu_bwd(const BackendStorage& xs, const Layout& lx, const BackendStorage& bs,
                                   const Layout& lb, const BackendStorage& gs, const Layout& lg, bool want_bias) {
  const CpuStorage &x = as_cpu(xs), &g = as_cpu(gs);
  Rows rx(x, lx), rg(g, lg);
  const DType sdt = stats_dtype(x.dtype());
  const int64_t n = rx.n, isz = (int64_t)itemsize(x.dtype());
  std::vector<char> bt;
  const void* bp = param_ptr(as_cpu(bs), lb, bt);
  auto dx = new_cpu(x.dtype(), lx.numel());
  const int64_t maxc = want_bias ? param_chunks(rx.nrows) : max_chunks();
  const ParamPartials pb(want_bias, maxc, n, sdt);
  auto fn = fused_kernels().bias_gelu_bwd[fi(x.dtype())];
  char* ob = (char*)dx->raw();
  int64_t nc = 0;
  if (lx.numel() > 0)
    nc = run_chunks(rx.nrows, n, maxc, [&](int64_t r0, int64_t r1, int64_t c) {
      void* acc = pb.chunk(c);
      if (rx.dense_rows() && rg.dense_rows())
        return fn(rx.at(rx.off + r0 * rx.ld()), rx.ld(), bp, rg.at(rg.off + r0 * rg.ld()), rg.ld(),
                  ob + r0 * n * isz, acc, r1 - r0, n);
      std::vector<char> t1, t2;
      for (int64_t r = r0; r < r1; ++r) fn(rx.row(r, t1), n, bp, rg.row(r, t2), n, ob + r * n * isz, acc, 1, n);
    });
  if (!want_bias) return {dx, nullptr};
  return {dx, pb.sum(nc, x.dtype())};
}

// ================================ rope ===========================================================
namespace {

// Positions run 16 at a time from an exact sincos: the 15 after it by the angle-addition recurrence in
// double (an error of a few ulp of double, far below the table's float), 16x fewer libm calls.
constexpr int64_t kRopeSeed = 16;

// The (cos, sin) table of rope: entry (b, l) holds half cosines then half sines (sines negated for the
// inverse) of theta = (pos(b) + l) * scale * inv_freq[i], in C. nb: 1, or the batch when per-batch offsets.
template <typename C>
void rope_table(const std::vector<double>& inv_freq, const std::vector<int64_t>& pos0, int64_t L, double scale,
                bool inverse, C* tab) {
  const int64_t half = (int64_t)inv_freq.size(), nb = (int64_t)pos0.size(), nblk = (L + kRopeSeed - 1) / kRopeSeed;
  const double sg = inverse ? -1.0 : 1.0;
  parallel_for(nb * nblk, 4, [&](int64_t a, int64_t e) {
    for (int64_t it = a; it < e; ++it) {
      const int64_t b = it / nblk, l0 = (it % nblk) * kRopeSeed, l1 = std::min(L, l0 + kRopeSeed);
      for (int64_t i = 0; i < half; ++i) {
        const double w = scale * inv_freq[i];
        double c = std::cos((double)(pos0[b] + l0) * w), s = std::sin((double)(pos0[b] + l0) * w);
        const double dc = std::cos(w), ds = std::sin(w);
        for (int64_t l = l0; l < l1; ++l) {
          C* row = tab + (b * L + l) * 2 * half;
          row[i] = (C)c;
          row[half + i] = (C)(sg * s);
          const double cn = c * dc - s * ds;
          s = s * dc + c * ds;
          c = cn;
        }
      }
    }
  });
}

}  // namespace

Sto rope(const BackendStorage& xs, const Layout& lx, const RopeArgs& a) {
  const CpuStorage& x = as_cpu(xs);
  const DType dt = x.dtype();
  const int64_t nd = lx.ndim(), D = lx.shape()[nd - 1], L = lx.shape()[nd - 2], half = a.dims / 2;
  auto y = new_cpu(dt, lx.numel());
  if (lx.numel() == 0) return y;
  const int64_t rows = lx.numel() / D;
  const DType sdt = stats_dtype(dt);
  const int64_t csz = (int64_t)itemsize(sdt), isz = (int64_t)itemsize(dt);
  auto fn = fused_kernels().rope_row[fi(dt)];
  Rows rx(x, lx);
  char* yb = (char*)y->raw();
  auto apply = [&](const char* tab, int64_t nb) {
    const int64_t per_batch = rows / nb;  // row r belongs to batch r / per_batch
    run_chunks(rows, D, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
      std::vector<char> t;
      for (int64_t r = r0; r < r1; ++r) {
        const char* cs = tab + ((r / per_batch) * L + r % L) * 2 * half * csz;
        fn(rx.row(r, t), yb + r * D * isz, cs, cs + half * csz, half, D, a.traditional);
      }
    });
  };
  if (a.table) {  // the caller's angles; the inverse negates a copy's sines
    const int64_t nb = a.ltable.shape()[0], n = nb * L * 2 * half;
    const char* tab = (const char*)as_cpu(*a.table).raw() + a.ltable.offset() * csz;
    if (!a.inverse) {
      apply(tab, nb);
      return y;
    }
    auto neg = new_cpu(sdt, std::max<int64_t>(1, n));
    std::memcpy(neg->raw(), tab, (size_t)(n * csz));
    for (int64_t row = 0; row < nb * L; ++row)
      for (int64_t i = half; i < 2 * half; ++i) {
        if (sdt == DType::F64) ((double*)neg->raw())[row * 2 * half + i] *= -1.0;
        else ((float*)neg->raw())[row * 2 * half + i] *= -1.0f;
      }
    apply((const char*)neg->raw(), nb);
    return y;
  }
  // Per-batch offsets: one table row block per batch.
  const bool batched = a.offsets && a.loffsets.numel() > 1;
  const int64_t nb = batched ? lx.shape()[0] : 1;
  std::vector<int64_t> pos0((size_t)nb, a.offset);
  if (a.offsets) {
    const int64_t* op = (const int64_t*)as_cpu(*a.offsets).raw() + a.loffsets.offset();
    const int64_t st = a.loffsets.ndim() ? a.loffsets.stride()[0] : 0;
    for (int64_t b = 0; b < nb; ++b) pos0[b] += op[(batched ? b : 0) * st];
  }
  std::vector<double> inv_freq((size_t)half);
  for (int64_t i = 0; i < half; ++i) {
    if (a.freqs) {
      const CpuStorage& f = as_cpu(*a.freqs);
      const int64_t o = a.lfreqs.offset() + i * a.lfreqs.stride()[0];
      inv_freq[i] = 1.0 / (f.dtype() == DType::F64 ? ((const double*)f.raw())[o] : (double)((const float*)f.raw())[o]);
    } else {
      inv_freq[i] = std::pow(a.base, -2.0 * (double)i / (double)a.dims);
    }
  }
  auto tab_sto = new_cpu(sdt, std::max<int64_t>(1, nb * L * 2 * half));
  char* tab = (char*)tab_sto->raw();
  if (sdt == DType::F64) rope_table(inv_freq, pos0, L, a.scale, a.inverse, (double*)tab);
  else rope_table(inv_freq, pos0, L, a.scale, a.inverse, (float*)tab);
  apply(tab, nb);
  return y;
}

// ================================ bias_residual ===================================================
// out = r + (y + b) through the elementwise add's own kernel, row chunks on the pool: y + b goes into the
// output row and the residual onto it while the row is in L1, one pass over memory instead of two adds'.
Sto bias_residual(const BackendStorage& ys, const Layout& ly, const BackendStorage& bs, const Layout& lb,
                  const BackendStorage& rs, const Layout& lr) {
  const CpuStorage &y = as_cpu(ys), &r = as_cpu(rs);
  Rows ry(y, ly), rr(r, lr);
  const int64_t n = ry.n, isz = (int64_t)itemsize(y.dtype());
  std::vector<char> bt;
  const void* bp = param_ptr(as_cpu(bs), lb, bt);
  auto out = new_cpu(y.dtype(), ly.numel());
  if (ly.numel() == 0) return out;
  const BinaryFn add = kernels().binary[(int)BinaryOp::Add][(int)y.dtype()];
  char* ob = (char*)out->raw();
  run_chunks(ry.nrows, n, max_chunks(), [&](int64_t r0, int64_t r1, int64_t) {
    std::vector<char> t1, t2;
    char* o = ob + r0 * n * isz;
    for (int64_t i = r0; i < r1; ++i, o += n * isz) {
      add(ry.row(i, t1), 1, bp, 1, o, n);
      add(rr.row(i, t2), 1, o, 1, o, n);
    }
  });
  return out;
}

// ================================ the registry's entries =========================================
void register_fused() {
  Kernels<SoftmaxFwd>::set(DeviceKind::Cpu, &softmax_fwd);
  Kernels<SoftmaxBwd>::set(DeviceKind::Cpu, &softmax_bwd);
  Kernels<CrossEntropyFwd>::set(DeviceKind::Cpu, &cross_entropy_fwd);
  Kernels<CrossEntropyBwd>::set(DeviceKind::Cpu, &cross_entropy_bwd);
  Kernels<RmsNormFwd>::set(DeviceKind::Cpu, &rms_norm_fwd);
  Kernels<RmsNormBwd>::set(DeviceKind::Cpu, &rms_norm_bwd);
  Kernels<LayerNormFwd>::set(DeviceKind::Cpu, &layer_norm_fwd);
  Kernels<LayerNormBwd>::set(DeviceKind::Cpu, &layer_norm_bwd);
  Kernels<ActBwd>::set(DeviceKind::Cpu, &act_bwd);
  Kernels<BiasGeluFwd>::set(DeviceKind::Cpu, &bias_gelu_fwd);
  Kernels<BiasGeluBwd>::set(DeviceKind::Cpu, &bias_gelu_bwd);
  Kernels<Rope>::set(DeviceKind::Cpu, &rope);
  Kernels<BiasResidual>::set(DeviceKind::Cpu, &bias_residual);
}

}  // namespace ember::cpu
