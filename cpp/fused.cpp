// Fused ops' entry points: every argument check the backends rely on (one error class, "[op]" messages),
// then the kernel registered for x's (q's) device (registry.h, cpp/families/). No backend re-checks; the
// shared geometry (SdpaGeom) is computed here once.
#include "fused.h"

#include <climits>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "families/act_bwd.h"
#include "families/checks.h"
#include "families/cross_entropy.h"
#include "families/optim.h"
#include "families/rope.h"
#include "families/sdpa.h"
#include "registry.h"
#include "storage.h"

namespace ember::fused {
namespace {

// The shape (B, H, L, D) and strides of a 3-D (B, L, D) or 4-D layout (H = 1, stride 0 for 3-D).
void dims4(const Layout& l, const char* what, int64_t sh[4], int64_t st[4]) {
  EMBER_CHECK(l.ndim() == 3 || l.ndim() == 4, Shape, "[sdpa] expected ", what,
              " of shape (B, H, L, D) or (B, L, D), got ", shape_str(l.shape()));
  const int64_t off = 4 - l.ndim();
  for (int i = 0; i < 4; ++i) {
    sh[i] = i < off ? 1 : l.shape()[i - off];
    st[i] = i < off ? 0 : l.stride()[i - off];
  }
}

// The forward's checks; returns the geometry every backend reads (the output is (B, H, Lq, Dv)).
SdpaGeom check_sdpa(const SdpaArgs& a) {
  EMBER_CHECK(a.q && a.k && a.v, Value, "[sdpa] query, key and value are required");
  EMBER_CHECK(a.softcap == 0.0 || (std::isfinite(a.softcap) && a.softcap > 0.0), Value,
              "[sdpa] softcap must be positive and finite (0 for none), got ", a.softcap);
  const BackendStorage &q = *a.q, &k = *a.k, &v = *a.v;
  checks::float_input(q, "sdpa", "query");
  checks::like(q, k, "sdpa", "key");
  checks::like(q, v, "sdpa", "value");
  check_in_bounds(q, a.lq, "sdpa");
  check_in_bounds(k, a.lk, "sdpa");
  check_in_bounds(v, a.lv, "sdpa");
  SdpaGeom geo;
  int64_t shq[4], shk[4], shv[4];
  dims4(a.lq, "query", shq, geo.sq);
  dims4(a.lk, "key", shk, geo.sk);
  dims4(a.lv, "value", shv, geo.sv);
  // k and v may have fewer heads than q when they divide it (grouped-query attention).
  EMBER_CHECK(a.lq.ndim() == a.lk.ndim() && a.lq.ndim() == a.lv.ndim() && shq[0] == shk[0] && shk[1] > 0 &&
                  shq[1] % shk[1] == 0 && shk[0] == shv[0] && shk[1] == shv[1] && shk[2] == shv[2] &&
                  shq[3] == shk[3],
              Shape, "[sdpa] incompatible shapes q ", shape_str(a.lq.shape()), ", k ", shape_str(a.lk.shape()),
              ", v ", shape_str(a.lv.shape()),
              " (k and v need the same batch, the same heads, a head count dividing q's, and k the head dim of q)");
  geo.B = shq[0], geo.H = shq[1], geo.Hkv = shk[1], geo.Lq = shq[2], geo.Lk = shk[2], geo.D = shq[3];
  geo.Dv = shv[3];
  if (!a.mask) return geo;
  const Layout& l = a.lmask;
  const DType dt = a.mask->dtype();
  check_same_device(q, *a.mask, "sdpa");
  EMBER_CHECK(is_float(dt) || dt == DType::U8 || dt == DType::Bool, DType,
              "[sdpa] mask must be a float (additive) or bool/uint8 tensor, got ", dtype_name(dt));
  EMBER_CHECK(l.ndim() <= 4, Shape, "[sdpa] mask of shape ", shape_str(l.shape()), " has more than 4 dims");
  check_in_bounds(*a.mask, l, "sdpa");
  const int64_t target[4] = {shq[0], shq[1], shq[2], shk[2]};
  const int64_t off = 4 - l.ndim();
  for (int i = 0; i < 4; ++i) {
    const int64_t sz = i < off ? 1 : l.shape()[i - off];
    EMBER_CHECK(sz == 1 || sz == target[i], Shape, "[sdpa] mask of shape ", shape_str(l.shape()),
                " cannot be broadcast to ", shape_str({target[0], target[1], target[2], target[3]}));
    geo.sm[i] = sz == 1 ? 0 : l.stride()[i - off];
  }
  return geo;
}

// A destination the caller gave (SdpaArgs::out, dq, dk, dv): on the CPU, q's dtype, in bounds, shaped
// (B, H, L, n) as q's rank says, with unit last stride; its strides go to st.
void check_dest(const SdpaArgs& a, const BackendStorage* d, const Layout& l, const int64_t want[4], const char* op,
                const char* what, int64_t st[4]) {
  if (!d) return;
  EMBER_CHECK(d->device().kind == DeviceKind::Cpu && a.q->device().kind == DeviceKind::Cpu, Device, "[", op, "] ",
              what, " destinations are supported on the CPU only");
  checks::like(*a.q, *d, op, what);
  check_in_bounds(*d, l, op);
  int64_t sh[4];
  dims4(l, what, sh, st);
  EMBER_CHECK(l.ndim() == a.lq.ndim() && sh[0] == want[0] && sh[1] == want[1] && sh[2] == want[2] &&
                  sh[3] == want[3] && (st[3] == 1 || sh[3] <= 1),
              Shape, "[", op, "] ", what, " destination ", shape_str(l.shape()), " (strides ",
              shape_str(l.stride()), ") must have the result's shape and unit last stride");
  st[3] = 1;
}

// Whether two views share an element: exact for views of one storage, true for two storages over one
// buffer (their offsets are not comparable).
bool views_overlap(const BackendStorage& a, const Layout& la, const BackendStorage& b, const Layout& lb) {
  if (!a.same_buffer(b)) return false;
  return &a != &b || la.shares_element_with(lb);
}
// A view the kernel reads or writes, named for the error.
struct Operand {
  const BackendStorage* s;
  const Layout* l;
  const char* what;
};
// A destination the caller gave must share no element with an operand (the kernels read those while
// they write it) or with another destination (both written).
void check_disjoint(const BackendStorage* d, const Layout& ld, const char* op, const char* what,
                    std::initializer_list<Operand> others) {
  if (!d) return;
  for (const Operand& o : others)
    EMBER_CHECK(!o.s || !views_overlap(*d, ld, *o.s, *o.l), Value, "[", op, "] ", what, " destination overlaps ",
                o.what, " (destinations must not share memory with the operands or with each other)");
}

}  // namespace

namespace {
// The checks both directions of cross_entropy make (x float, t integer class ids of x's leading shape, w (C,)).
void ce_check(const CeArgs& a, const char* op) {
  EMBER_CHECK(a.x && a.t, Value, "[", op, "] logits and targets are required");
  checks::float_input(*a.x, op, "logits tensor");
  EMBER_CHECK(a.lx.ndim() >= 1, Shape, "[", op, "] expected logits (..., classes), got a scalar");
  EMBER_CHECK(a.t->dtype() == DType::I64 || a.t->dtype() == DType::I32, DType, "[", op,
              "] targets must be int64 or int32 class ids, got ", dtype_name(a.t->dtype()));
  const Shape lead(a.lx.shape().begin(), a.lx.shape().end() - 1);
  EMBER_CHECK(a.lt.shape() == lead, Shape, "[", op, "] logits ", shape_str(a.lx.shape()), " do not fit targets ",
              shape_str(a.lt.shape()), " (expected logits (..., classes) and targets (...))");
  check_same_device(*a.x, *a.t, op);
  check_in_bounds(*a.x, a.lx, op);
  check_in_bounds(*a.t, a.lt, op);
  EMBER_CHECK(std::isfinite(a.eps) && a.eps >= 0.0 && a.eps <= 1.0, Value, "[", op,
              "] label_smoothing must be in [0, 1], got ", a.eps);
  if (a.w) {
    EMBER_CHECK(a.w->dtype() == a.x->dtype(), DType, "[", op, "] weight has dtype ", dtype_name(a.w->dtype()),
                ", expected ", dtype_name(a.x->dtype()));
    checks::param(*a.x, *a.w, a.lw, checks::last_dim(a.lx), op, "weight");
  }
}
}  // namespace

std::tuple<StoragePtr, StoragePtr> cross_entropy_fwd(const CeArgs& a) {
  ce_check(a, "cross_entropy");
  return Kernels<CrossEntropyFwd>::of(*a.x)(a);
}

StoragePtr cross_entropy_bwd(const CeArgs& a, const BackendStorage& lse, const BackendStorage& g, const Layout& lg) {
  const char* op = "cross_entropy_bwd";
  ce_check(a, op);
  checks::like(*a.x, g, op, "grad");
  checks::grad_shape(a.lt, lg, op);
  check_in_bounds(g, lg, op);
  const int64_t rows = a.lt.numel();
  EMBER_CHECK(lse.dtype() == stats_dtype(a.x->dtype()) && (int64_t)lse.numel() >= rows, Value, "[", op,
              "] lse must be the forward's (", rows, " ", dtype_name(stats_dtype(a.x->dtype())), " values)");
  check_same_device(*a.x, lse, op);
  return Kernels<CrossEntropyBwd>::of(*a.x)(a, lse, g, lg);
}

StoragePtr act_bwd(ActKind kind, const BackendStorage& a, const Layout& la, const BackendStorage& g,
                   const Layout& lg, double p0, double p1) {
  EMBER_CHECK(kind < ActKind::Count, Value, "[act_bwd] unknown activation ", (int)kind);
  const std::string op = std::string(act_name(kind)) + "_bwd";
  checks::float_input(a, op.c_str(), "input");
  checks::like(a, g, op.c_str(), "grad");
  checks::grad_shape(la, lg, op.c_str());
  check_in_bounds(a, la, op.c_str());
  check_in_bounds(g, lg, op.c_str());
  return Kernels<ActBwd>::of(a)(a, la, g, lg, kind, p0, p1);
}

void sdpa_check(const SdpaArgs& a) { check_sdpa(a); }

std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const SdpaArgs& a) {
  SdpaGeom geo = check_sdpa(a);
  const int64_t want[4] = {geo.B, geo.H, geo.Lq, geo.Dv};
  check_dest(a, a.out, a.lout, want, "sdpa", "out", geo.sout);
  check_disjoint(a.out, a.lout, "sdpa", "out",
                 {{a.q, &a.lq, "query"}, {a.k, &a.lk, "key"}, {a.v, &a.lv, "value"}, {a.mask, &a.lmask, "mask"}});
  return Kernels<SdpaFwd>::of(*a.q)(a, geo);
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const SdpaArgs& a, const BackendStorage& o, const Layout& lo,
                                                        const BackendStorage& lse, const BackendStorage& g,
                                                        const Layout& lg) {
  SdpaGeom geo = check_sdpa(a);
  const int64_t want[4] = {geo.B, geo.H, geo.Lq, geo.Dv};
  const BackendStorage& q = *a.q;
  checks::like(q, o, "sdpa_bwd", "out");
  checks::like(q, g, "sdpa_bwd", "grad");
  check_in_bounds(o, lo, "sdpa_bwd");
  check_in_bounds(g, lg, "sdpa_bwd");
  int64_t sho[4], shg[4];
  dims4(lo, "out", sho, geo.so);
  dims4(lg, "grad", shg, geo.sg);
  for (int i = 0; i < 4; ++i)
    EMBER_CHECK(sho[i] == want[i] && shg[i] == want[i], Shape, "[sdpa_bwd] out/grad shapes ", shape_str(lo.shape()),
                ", ", shape_str(lg.shape()), " do not match the attention output");
  checks::stats(q, lse, want[0] * want[1] * want[2], "sdpa_bwd", "lse", "query row");
  const int64_t wq[4] = {geo.B, geo.H, geo.Lq, geo.D}, wk[4] = {geo.B, geo.Hkv, geo.Lk, geo.D},
                wv[4] = {geo.B, geo.Hkv, geo.Lk, geo.Dv};
  check_dest(a, a.dq, a.ldq, wq, "sdpa_bwd", "dq", geo.sdq);
  check_dest(a, a.dk, a.ldk, wk, "sdpa_bwd", "dk", geo.sdk);
  check_dest(a, a.dv, a.ldv, wv, "sdpa_bwd", "dv", geo.sdv);
  const Layout llse = Layout::contiguous({want[0] * want[1] * want[2]});  // the kernels read lse's first rows
  const std::initializer_list<Operand> reads = {{a.q, &a.lq, "query"}, {a.k, &a.lk, "key"}, {a.v, &a.lv, "value"},
                                                {a.mask, &a.lmask, "mask"}, {&o, &lo, "out"},
                                                {&g, &lg, "grad"},         {&lse, &llse, "lse"}};
  check_disjoint(a.dq, a.ldq, "sdpa_bwd", "dq", reads);
  check_disjoint(a.dk, a.ldk, "sdpa_bwd", "dk", reads);
  check_disjoint(a.dv, a.ldv, "sdpa_bwd", "dv", reads);
  check_disjoint(a.dq, a.ldq, "sdpa_bwd", "dq", {{a.dk, &a.ldk, "dk"}, {a.dv, &a.ldv, "dv"}});
  check_disjoint(a.dk, a.ldk, "sdpa_bwd", "dk", {{a.dv, &a.ldv, "dv"}});
  return Kernels<SdpaBwd>::of(q)(a, geo, o, lo, lse, g, lg);
}

StoragePtr rope(const BackendStorage& x, const Layout& lx, const RopeArgs& a) {
  const char* op = "rope";
  checks::float_input(x, op, "input");
  check_in_bounds(x, lx, op);
  EMBER_CHECK(lx.ndim() >= 2, Shape, "[rope] expected an input of shape (..., L, D), got ", shape_str(lx.shape()));
  const int64_t D = lx.shape().back();
  EMBER_CHECK(a.dims > 0 && a.dims <= D && a.dims % 2 == 0, Value, "[rope] dims must be even and in [2, ", D,
              "], got ", a.dims);
  EMBER_CHECK(std::isfinite(a.base) && a.base > 0 && std::isfinite(a.scale), Value,
              "[rope] base must be positive and finite and scale finite, got base ", a.base, ", scale ", a.scale);
  if (a.offsets) {
    check_same_device(x, *a.offsets, op);
    EMBER_CHECK(a.offsets->dtype() == DType::I64, DType, "[rope] offset tensor must be int64, got ",
                dtype_name(a.offsets->dtype()));
    check_in_bounds(*a.offsets, a.loffsets, op);
    const int64_t n = a.loffsets.numel();
    EMBER_CHECK(a.loffsets.ndim() <= 1 && (n == 1 || (lx.ndim() >= 3 && n == lx.shape()[0])), Shape,
                "[rope] offset must be a scalar or hold one position per batch (dim 0 of ", shape_str(lx.shape()),
                "), got shape ", shape_str(a.loffsets.shape()));
  }
  if (a.freqs) {
    check_same_device(x, *a.freqs, op);
    const DType sdt = stats_dtype(x.dtype());
    EMBER_CHECK(a.freqs->dtype() == sdt, DType, "[rope] freqs must be ", dtype_name(sdt), " for a ",
                dtype_name(x.dtype()), " input, got ", dtype_name(a.freqs->dtype()));
    EMBER_CHECK(a.lfreqs.ndim() == 1 && a.lfreqs.shape()[0] == a.dims / 2, Shape, "[rope] expected freqs of shape (",
                a.dims / 2, ",), got ", shape_str(a.lfreqs.shape()));
    check_in_bounds(*a.freqs, a.lfreqs, op);
  }
  if (a.table) {
    check_same_device(x, *a.table, op);
    const DType sdt = stats_dtype(x.dtype());
    EMBER_CHECK(a.table->dtype() == sdt, DType, "[rope] the cos/sin table must be ", dtype_name(sdt), " for a ",
                dtype_name(x.dtype()), " input, got ", dtype_name(a.table->dtype()));
    EMBER_CHECK(!a.freqs && !a.offsets && a.offset == 0, Value,
                "[rope] a cos/sin table takes neither freqs nor offsets: its rows are the positions");
    const auto& ts = a.ltable.shape();
    const int64_t L = lx.shape()[lx.ndim() - 2];
    EMBER_CHECK(a.ltable.ndim() == 3 && ts[1] == L && ts[2] == a.dims &&
                    (ts[0] == 1 || (lx.ndim() >= 3 && ts[0] == lx.shape()[0])),
                Shape, "[rope] expected a cos/sin table of shape (1 or batch, ", L, ", ", a.dims, ") for input ",
                shape_str(lx.shape()), ", got ", shape_str(ts));
    EMBER_CHECK(a.ltable.is_contiguous(), Value, "[rope] the cos/sin table must be contiguous");
    check_in_bounds(*a.table, a.ltable, op);
  }
  return Kernels<Rope>::of(x)(x, lx, a);
}

namespace {
// Checks one step's operands (see optim_step in fused.h) and fills its OptimArgs; `written` gets the
// buffers the step writes (p first, then the states).
OptimArgs optim_args(const char* op, OptimKind kind, uint32_t flags, const std::vector<double>& scalars,
                     BackendStorage& p, const Layout& lp, const BackendStorage& g, const Layout& lg,
                     BackendStorage* const st[3], const Layout* const lst[3],
                     std::vector<const BackendStorage*>& written) {
  EMBER_CHECK(kind < OptimKind::Count, Value, "[", op, "] unknown optimizer kind ", (int)kind);
  EMBER_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, DType, "[", op,
              "] fused updates take float32 or float64 parameters, got ", dtype_name(p.dtype()));
  EMBER_CHECK(scalars.size() <= 8, Value, "[", op, "] at most 8 scalars, got ", scalars.size());
  // Which state buffers each kind reads and writes, by its flags.
  bool need[3] = {false, false, false};
  if (kind == OptimKind::Sgd) {
    need[0] = flags & kOptMomentum;
  } else if (kind == OptimKind::Adam) {
    need[0] = need[1] = true;
    need[2] = flags & kOptAmsgrad;
  } else {
    need[0] = true;
    need[1] = flags & kOptCentered;
    need[2] = flags & kOptMomentum;
  }
  OptimArgs a;
  a.kind = kind;
  a.flags = flags;
  a.n = lp.numel();
  for (size_t i = 0; i < scalars.size(); ++i) a.s[i] = scalars[i];
  auto dense = [&](const BackendStorage& s, const Layout& l, const char* what) {
    checks::like(p, s, op, what);
    EMBER_CHECK(l.is_contiguous() && l.numel() == a.n, Shape, "[", op, "] ", what, " must be contiguous with ",
                a.n, " elements, got shape ", shape_str(l.shape()));
    check_in_bounds(s, l, op);
  };
  dense(p, lp, "param");
  dense(g, lg, "grad");
  a.p = &p, a.g = &g;
  a.off_p = lp.offset(), a.off_g = lg.offset();
  written.assign({&p});
  for (int i = 0; i < 3; ++i) {
    if (!need[i]) continue;
    EMBER_CHECK(st[i] && lst[i], Value, "[", op, "] state buffer ", i, " is missing");
    dense(*st[i], *lst[i], "state buffer");
    for (const BackendStorage* w : written)
      EMBER_CHECK(!st[i]->same_buffer(*w), Value, "[", op, "] the parameter and state buffers must not share memory");
    written.push_back(st[i]);
    a.st[i] = st[i], a.off_st[i] = lst[i]->offset();
  }
  for (const BackendStorage* w : written)
    EMBER_CHECK(!g.same_buffer(*w), Value, "[", op, "] the gradient must not share memory with what the step writes");
  return a;
}

void bump(const std::vector<const BackendStorage*>& written) {
  for (const BackendStorage* w : written) const_cast<BackendStorage*>(w)->bump_version();
}
}  // namespace

void optim_step(OptimKind kind, uint32_t flags, const std::vector<double>& scalars, BackendStorage& p,
                const Layout& lp, const BackendStorage& g, const Layout& lg, BackendStorage* const st[3],
                const Layout* const lst[3]) {
  std::vector<const BackendStorage*> written;
  const OptimArgs a = optim_args("optim_step", kind, flags, scalars, p, lp, g, lg, st, lst, written);
  const OptimStep::Fn step = Kernels<OptimStep>::of(p);
  bump(written);
  if (a.n) step(a);
  bump(written);
}

void optim_step_multi(const std::vector<OptimItem>& items) {
  const char* op = "optim_step_multi";
  std::vector<OptimArgs> args;
  std::vector<const BackendStorage*> written, all_written;
  args.reserve(items.size());
  for (const OptimItem& it : items) {
    EMBER_CHECK(it.p && it.g && it.lp && it.lg, Value, "[", op, "] every step needs a parameter and a gradient");
    args.push_back(optim_args(op, it.kind, it.flags, it.scalars, *it.p, *it.lp, *it.g, *it.lg, it.st, it.lst, written));
    EMBER_CHECK(it.p->device() == items[0].p->device(), Device, "[", op, "] every parameter must be on one device, got ",
                items[0].p->device().str(), " and ", it.p->device().str());
    all_written.insert(all_written.end(), written.begin(), written.end());
  }
  if (args.empty()) return;
  const BackendStorage& dev = *items[0].p;
  const bool multi = Kernels<OptimStepMulti>::has(dev.device().kind);
  const OptimStep::Fn step = multi ? nullptr : Kernels<OptimStep>::of(dev);
  bump(all_written);
  if (multi) Kernels<OptimStepMulti>::of(dev)(args);
  else  // one step after another, as separate optim_step calls would run
    for (const OptimArgs& a : args)
      if (a.n) step(a);
  bump(all_written);
}

}  // namespace ember::fused
