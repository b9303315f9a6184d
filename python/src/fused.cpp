// Bindings for the fused ops on any device: _C.fused.<op>(storage, layout, ...) -> new dense storage(s),
// through the checked entry points (a family's `run` in cpp/families/, or cpp/fused.h).
#include <cmath>
#include <string>

#include "common.h"
#include "families/bias_gelu.h"
#include "families/bias_residual.h"
#include "families/batch_norm.h"
#include "families/group_norm.h"
#include "families/layer_norm.h"
#include "families/rms_norm.h"
#include "families/softmax.h"
#include "fused.h"

namespace {
using ember::ActKind;
using ember::BackendStorage;
using ember::Layout;
using ember::SdpaArgs;
using ember::StoragePtr;
namespace fz = ember::fused;

double scale_arg(std::optional<double> scale, const Layout& lq) {
  if (scale) return *scale;
  const int64_t d = lq.ndim() ? lq.shape().back() : 1;
  return 1.0 / std::sqrt((double)std::max<int64_t>(d, 1));
}
// q, k, v and an optional mask: both the storage and its layout, or neither.
SdpaArgs sdpa_args(const BackendStorage& q, const Layout& lq, const BackendStorage& k, const Layout& lk,
                   const BackendStorage& v, const Layout& lv, const BackendStorage* mask, const Layout* lmask,
                   std::optional<double> scale, bool causal, double softcap = 0.0) {
  SdpaArgs a;
  a.q = &q, a.k = &k, a.v = &v;
  a.lq = lq, a.lk = lk, a.lv = lv;
  if (mask) {
    EMBER_CHECK(lmask, Value, "[sdpa] mask given without a layout");
    a.mask = mask;
    a.lmask = *lmask;
  }
  a.scale = scale_arg(scale, lq);
  a.causal = causal;
  a.softcap = softcap;
  return a;
}
// An optional sdpa destination (SdpaArgs::out, dq, ...): the storage and its layout, or neither.
void set_dest(BackendStorage*& d, Layout& ld, BackendStorage* s, const Layout* l, const char* op, const char* what) {
  if (!s) return;
  EMBER_CHECK(l, Value, "[", op, "] ", what, " given without a layout");
  d = s, ld = *l;
}
// Cross-entropy's operands: the weight's storage and layout both given, or neither.
ember::CeArgs ce_args(const BackendStorage& x, const Layout& lx, const BackendStorage& t, const Layout& lt,
                      const BackendStorage* w, const Layout* lw, int64_t ignore_index, double label_smoothing) {
  ember::CeArgs a;
  a.x = &x, a.t = &t, a.lx = lx, a.lt = lt;
  if (w) {
    EMBER_CHECK(lw, Value, "[cross_entropy] weight given without a layout");
    a.w = w;
    a.lw = *lw;
  }
  a.ignore = ignore_index;
  a.eps = label_smoothing;
  return a;
}
ember::RnnCell rnn_kind(const std::string& k) {
  if (k == "lstm") return ember::RnnCell::Lstm;
  if (k == "gru") return ember::RnnCell::Gru;
  if (k == "rnn_tanh") return ember::RnnCell::RnnTanh;
  EMBER_CHECK(k == "rnn_relu", Value, "[rnn_cell] kind must be 'lstm', 'gru', 'rnn_tanh' or 'rnn_relu', got '", k,
              "'");
  return ember::RnnCell::RnnRelu;
}
// optim_step's 13 arguments (kind, flags, scalars, p, lp, g, lg, s0, l0, s1, l1, s2, l2), converted for
// optim_step and for each step of optim_step_multi: a wrong Python type is an EmberTypeError naming the argument
// (and the step, where `step` >= 0), not pybind11's generic cast error. None is null for a state or its layout,
// and for p, lp, g and lg where `operands_none` (optim_step_multi's entry point refuses those nulls itself).
struct OptimStepArgs {
  py::handle a[13];
  const char* op;
  int64_t step = -1;
  bool operands_none = false;

  template <class T> T get(int i) const {
    const bool none_ok = i >= 7 || operands_none;
    py::detail::make_caster<T> c;
    const bool ok = (none_ok || !a[i].is_none()) && c.load(a[i], true);
    static const char* const names[13] = {"kind", "flags", "scalars", "p", "lp", "g", "lg",
                                          "s0",   "l0",    "s1",      "l1", "s2", "l2"};
    // kind, flags and scalars each have their own; then storages (odd i) and layouts (even i) alternate
    static const char* const wants[5] = {"an optimizer kind (0 SGD, 1 Adam, 2 RMSprop)", "an int in [0, 2**32)",
                                         "a sequence of floats", "a storage", "a Layout"};
    EMBER_CHECK(ok, Type, "[", op, "] ", step >= 0 ? "step " + std::to_string(step) + ": " : "", names[i],
                " (argument ", i, ") must be ", wants[i < 3 ? i : 4 - i % 2], i >= 3 && none_ok ? " or None" : "",
                ", got ", Py_TYPE(a[i].ptr())->tp_name);
    return py::detail::cast_op<T>(std::move(c));
  }
  fz::OptimItem item() const {
    fz::OptimItem it;
    const int kind = get<int>(0);
    EMBER_CHECK(kind >= 0 && kind < (int)ember::OptimKind::Count, Value, "[", op, "] unknown optimizer kind ", kind);
    it.kind = (ember::OptimKind)kind;
    it.flags = get<uint32_t>(1);
    it.scalars = get<std::vector<double>>(2);
    it.p = get<BackendStorage*>(3);
    it.lp = get<const Layout*>(4);
    it.g = get<const BackendStorage*>(5);
    it.lg = get<const Layout*>(6);
    for (int k = 0; k < 3; ++k) {
      it.st[k] = get<BackendStorage*>(7 + 2 * k);
      it.lst[k] = get<const Layout*>(8 + 2 * k);
    }
    return it;
  }
};
}  // namespace

void bind_fused(py::module_& m) {
  using G = ember::bind::GilFree;
  using S = const BackendStorage&;
  using SP = const BackendStorage*;
  using L = const Layout&;
  auto f = m.def_submodule("fused", "fused ops on any device (softmax, norms, sdpa, activation backward)");
  // Families whose entry point is their `run` (cpp/families/): bound as it is, its signature written once.
  f.def("softmax_fwd", &ember::SoftmaxFwd::run, py::arg("x"), py::arg("lx"), py::arg("log") = false, G());
  f.def("softmax_bwd", &ember::SoftmaxBwd::run, py::arg("y"), py::arg("ly"), py::arg("g"), py::arg("lg"),
        py::arg("log") = false, G());
  f.def(
      "cross_entropy_fwd",
      [](S x, L lx, S t, L lt, SP w, const Layout* lw, int64_t ignore_index, double label_smoothing) {
        return fz::cross_entropy_fwd(ce_args(x, lx, t, lt, w, lw, ignore_index, label_smoothing));
      },
      py::arg("x"), py::arg("lx"), py::arg("t"), py::arg("lt"), py::arg("w").none(true), py::arg("lw").none(true),
      py::arg("ignore_index"), py::arg("label_smoothing"), G());
  f.def(
      "cross_entropy_bwd",
      [](S x, L lx, S t, L lt, SP w, const Layout* lw, int64_t ignore_index, double label_smoothing, S lse, S g,
         L lg) { return fz::cross_entropy_bwd(ce_args(x, lx, t, lt, w, lw, ignore_index, label_smoothing), lse, g, lg); },
      py::arg("x"), py::arg("lx"), py::arg("t"), py::arg("lt"), py::arg("w").none(true), py::arg("lw").none(true),
      py::arg("ignore_index"), py::arg("label_smoothing"), py::arg("lse"), py::arg("g"), py::arg("lg"), G());
  f.def("rms_norm_fwd", &ember::RmsNormFwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("eps"), G());
  f.def("rms_norm_bwd", &ember::RmsNormBwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("rstd"), py::arg("g"), py::arg("lg"), py::arg("want_params") = true,
        py::arg("add").none(true) = nullptr, py::arg("ladd").none(true) = nullptr, G());
  f.def("bias_residual", &ember::BiasResidual::run, py::arg("y"), py::arg("ly"), py::arg("b"), py::arg("lb"),
        py::arg("r"), py::arg("lr"), G());
  f.def("bias_gelu_fwd", &ember::BiasGeluFwd::run, py::arg("x"), py::arg("lx"), py::arg("b"), py::arg("lb"), G());
  f.def("bias_gelu_bwd", &ember::BiasGeluBwd::run, py::arg("x"), py::arg("lx"), py::arg("b"), py::arg("lb"),
        py::arg("g"), py::arg("lg"), py::arg("want_bias") = true, G());
  f.def("layer_norm_fwd", &ember::LayerNormFwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("b").none(true), py::arg("lb").none(true), py::arg("eps"), G());
  f.def("layer_norm_bwd", &ember::LayerNormBwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("mean"), py::arg("rstd"), py::arg("g"), py::arg("lg"),
        py::arg("want_params") = true, py::arg("add").none(true) = nullptr, py::arg("ladd").none(true) = nullptr,
        G());
  f.def("group_norm_fwd", &ember::GroupNormFwd::run, py::arg("x"), py::arg("lx"), py::arg("groups"),
        py::arg("w").none(true), py::arg("lw").none(true), py::arg("b").none(true), py::arg("lb").none(true),
        py::arg("eps"), G());
  f.def("group_norm_bwd", &ember::GroupNormBwd::run, py::arg("x"), py::arg("lx"), py::arg("groups"),
        py::arg("w").none(true), py::arg("lw").none(true), py::arg("mean"), py::arg("rstd"), py::arg("g"),
        py::arg("lg"), G());
  f.def("batch_norm_fwd", &ember::BatchNormFwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("b").none(true), py::arg("lb").none(true), py::arg("rm").none(true),
        py::arg("lrm").none(true), py::arg("rv").none(true), py::arg("lrv").none(true), py::arg("training"),
        py::arg("momentum"), py::arg("eps"), G());
  f.def("batch_norm_bwd", &ember::BatchNormBwd::run, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("mean"), py::arg("rstd"), py::arg("g"), py::arg("lg"), py::arg("training"),
        G());
  for (int k = 0; k < (int)ActKind::Count; ++k) {
    const ActKind kind = (ActKind)k;
    f.def((std::string(ember::act_name(kind)) + "_bwd").c_str(),
          [kind](S a, L la, S g, L lg, double p0, double p1) { return fz::act_bwd(kind, a, la, g, lg, p0, p1); },
          py::arg("a"), py::arg("la"), py::arg("g"), py::arg("lg"), py::arg("p0") = 0.0, py::arg("p1") = 0.0, G());
  }
  f.def(
      "sdpa_fwd",
      [](S q, L lq, S k, L lk, S v, L lv, SP mask, const Layout* lmask, std::optional<double> scale, bool causal,
         double softcap, BackendStorage* out, const Layout* lout) {
        auto a = sdpa_args(q, lq, k, lk, v, lv, mask, lmask, scale, causal, softcap);
        set_dest(a.out, a.lout, out, lout, "sdpa", "out");
        return fz::sdpa_fwd(a);
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"),
      py::arg("mask").none(true) = nullptr, py::arg("lmask").none(true) = nullptr,
      py::arg("scale").none(true) = py::none(), py::arg("causal") = false, py::arg("softcap") = 0.0,
      py::arg("out").none(true) = nullptr, py::arg("lout").none(true) = nullptr, G());
  f.def(
      "rope",
      [](S x, L lx, int64_t dims, bool traditional, double base, double scale, int64_t offset, SP offsets,
         const Layout* loffsets, SP freqs, const Layout* lfreqs, bool inverse, SP table, const Layout* ltable) {
        ember::RopeArgs a;
        a.dims = dims, a.offset = offset, a.traditional = traditional, a.inverse = inverse;
        a.base = base, a.scale = scale;
        if (offsets) {
          EMBER_CHECK(loffsets, Value, "[rope] offset given without a layout");
          a.offsets = offsets, a.loffsets = *loffsets;
        }
        if (freqs) {
          EMBER_CHECK(lfreqs, Value, "[rope] freqs given without a layout");
          a.freqs = freqs, a.lfreqs = *lfreqs;
        }
        if (table) {
          EMBER_CHECK(ltable, Value, "[rope] table given without a layout");
          a.table = table, a.ltable = *ltable;
        }
        return fz::rope(x, lx, a);
      },
      py::arg("x"), py::arg("lx"), py::arg("dims"), py::arg("traditional") = false, py::arg("base") = 10000.0,
      py::arg("scale") = 1.0, py::arg("offset") = 0, py::arg("offsets").none(true) = nullptr,
      py::arg("loffsets").none(true) = nullptr, py::arg("freqs").none(true) = nullptr,
      py::arg("lfreqs").none(true) = nullptr, py::arg("inverse") = false, py::arg("table").none(true) = nullptr,
      py::arg("ltable").none(true) = nullptr, G());
  // Recurrent cells: kind "lstm", "gru", "rnn_tanh" or "rnn_relu" (cpp/fused.h's rnn_cell_fwd / _bwd).
  f.def(
      "rnn_cell_fwd",
      [](const std::string& kind, S xg, L lxg, S hg, L lhg, SP b, const Layout* lb, SP s, const Layout* ls) {
        return fz::rnn_cell_fwd(rnn_kind(kind), xg, lxg, hg, lhg, b, lb, s, ls);
      },
      py::arg("kind"), py::arg("xg"), py::arg("lxg"), py::arg("hg"), py::arg("lhg"), py::arg("b").none(true) = nullptr,
      py::arg("lb").none(true) = nullptr, py::arg("s").none(true) = nullptr, py::arg("ls").none(true) = nullptr, G());
  f.def(
      "rnn_cell_bwd",
      [](const std::string& kind, S ws, L lws, SP s, const Layout* ls, S dh, L ldh, SP dc, const Layout* ldc) {
        return fz::rnn_cell_bwd(rnn_kind(kind), ws, lws, s, ls, dh, ldh, dc, ldc);
      },
      py::arg("kind"), py::arg("ws"), py::arg("lws"), py::arg("s").none(true), py::arg("ls").none(true), py::arg("dh"),
      py::arg("ldh"), py::arg("dc").none(true) = nullptr, py::arg("ldc").none(true) = nullptr, G());
  f.def(
      "sdpa_check",
      [](S q, L lq, S k, L lk, S v, L lv, SP mask, const Layout* lmask) {
        fz::sdpa_check(sdpa_args(q, lq, k, lk, v, lv, mask, lmask, std::nullopt, false));
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"),
      py::arg("mask").none(true) = nullptr, py::arg("lmask").none(true) = nullptr);
  f.def(
      "sdpa_bwd",
      [](S q, L lq, S k, L lk, S v, L lv, S o, L lo, S lse, S g, L lg, SP mask, const Layout* lmask,
         std::optional<double> scale, bool causal, double softcap, BackendStorage* dq, const Layout* ldq,
         BackendStorage* dk, const Layout* ldk, BackendStorage* dv, const Layout* ldv) {
        auto a = sdpa_args(q, lq, k, lk, v, lv, mask, lmask, scale, causal, softcap);
        set_dest(a.dq, a.ldq, dq, ldq, "sdpa_bwd", "dq");
        set_dest(a.dk, a.ldk, dk, ldk, "sdpa_bwd", "dk");
        set_dest(a.dv, a.ldv, dv, ldv, "sdpa_bwd", "dv");
        return fz::sdpa_bwd(a, o, lo, lse, g, lg);
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"), py::arg("o"),
      py::arg("lo"), py::arg("lse"), py::arg("g"), py::arg("lg"), py::arg("mask").none(true) = nullptr,
      py::arg("lmask").none(true) = nullptr, py::arg("scale").none(true) = py::none(), py::arg("causal") = false,
      py::arg("softcap") = 0.0, py::arg("dq").none(true) = nullptr, py::arg("ldq").none(true) = nullptr,
      py::arg("dk").none(true) = nullptr, py::arg("ldk").none(true) = nullptr, py::arg("dv").none(true) = nullptr,
      py::arg("ldv").none(true) = nullptr, G());
  f.def(
      "optim_step",
      [](py::handle kind, py::handle flags, py::handle scalars, py::handle p, py::handle lp, py::handle g,
         py::handle lg, py::handle s0, py::handle l0, py::handle s1, py::handle l1, py::handle s2, py::handle l2) {
        const fz::OptimItem it =
            OptimStepArgs{{kind, flags, scalars, p, lp, g, lg, s0, l0, s1, l1, s2, l2}, "optim_step"}.item();
        ember::bind::Interruptible intr;
        py::gil_scoped_release nogil;
        fz::optim_step(it.kind, it.flags, it.scalars, *it.p, *it.lp, *it.g, *it.lg, it.st, it.lst);
      },
      "One fused optimizer step in place (kind 0 SGD, 1 Adam/AdamW, 2 RMSprop; OptimArgs in cpp/backend.h).",
      py::arg("kind"), py::arg("flags"), py::arg("scalars"), py::arg("p"), py::arg("lp"), py::arg("g"), py::arg("lg"),
      py::arg("s0") = py::none(), py::arg("l0") = py::none(), py::arg("s1") = py::none(), py::arg("l1") = py::none(),
      py::arg("s2") = py::none(), py::arg("l2") = py::none());
  f.def(
      "optim_step_multi",
      [](py::handle steps) {
        // Each entry: optim_step's arguments as a tuple (kind, flags, scalars, p, lp, g, lg, s0, l0, s1, l1, s2,
        // l2). `keep` (a tuple of those tuples) holds every storage and layout while the GIL is released, even if
        // the caller's list changes meanwhile.
        EMBER_CHECK(py::isinstance<py::list>(steps) || py::isinstance<py::tuple>(steps), Type,
                    "[optim_step_multi] steps must be a list of tuples, got ", Py_TYPE(steps.ptr())->tp_name);
        const py::tuple keep(py::reinterpret_borrow<py::object>(steps));
        std::vector<fz::OptimItem> items;
        items.reserve(keep.size());
        for (size_t i = 0; i < keep.size(); ++i) {
          const py::handle h = keep[i];
          EMBER_CHECK(py::isinstance<py::tuple>(h) && py::len(h) == 13, Type,
                      "[optim_step_multi] each step must be a tuple of optim_step's 13 arguments");
          OptimStepArgs a{{}, "optim_step_multi", (int64_t)i, true};
          for (int k = 0; k < 13; ++k) a.a[k] = PyTuple_GET_ITEM(h.ptr(), k);
          items.push_back(a.item());
        }
        ember::bind::Interruptible intr;
        py::gil_scoped_release nogil;
        fz::optim_step_multi(items);
      },
      "Many optim_step calls in one pass (torch's foreach step): a list of tuples of optim_step's arguments.",
      py::arg("steps"));
}
