// Bindings for the fused CPU kernels: _C.fused.<kernel>(storage, layout, ...) -> new dense storage(s).
#include <cmath>
#include <optional>

#include "common.h"
#include "cpu/fused.h"

namespace {
using ember::Layout;
using ember::cpu::CpuStorage;
using ember::cpu::StoLayout;

// Optional mask: both the storage and its layout, or neither.
std::optional<StoLayout> mask_arg(const CpuStorage* m, const Layout* lm) {
  if (!m) return std::nullopt;
  EMBER_CHECK(lm, Value, "[sdpa] mask given without a layout");
  return StoLayout{m, *lm};
}
double scale_arg(std::optional<double> scale, const Layout& lq) {
  if (scale) return *scale;
  const int64_t d = lq.ndim() ? lq.shape().back() : 1;
  return 1.0 / std::sqrt((double)std::max<int64_t>(d, 1));
}
}  // namespace

void bind_fused(py::module_& m) {
  namespace c = ember::cpu;
  using G = ember::bind::GilFree;
  auto f = m.def_submodule("fused", "fused CPU kernels (softmax, norms, sdpa, activation backward)");
  f.def("softmax_fwd", &c::softmax_fwd, py::arg("x"), py::arg("lx"), py::arg("log") = false, G());
  f.def("softmax_bwd", &c::softmax_bwd, py::arg("y"), py::arg("ly"), py::arg("g"), py::arg("lg"),
        py::arg("log") = false, G());
  f.def("rms_norm_fwd", &c::rms_norm_fwd, py::arg("x"), py::arg("lx"), py::arg("w"), py::arg("lw"), py::arg("eps"),
        G());
  f.def("rms_norm_bwd", &c::rms_norm_bwd, py::arg("x"), py::arg("lx"), py::arg("w"), py::arg("lw"),
        py::arg("rstd"), py::arg("g"), py::arg("lg"), G());
  f.def("layer_norm_fwd", &c::layer_norm_fwd, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("b").none(true), py::arg("lb").none(true), py::arg("eps"), G());
  f.def("layer_norm_bwd", &c::layer_norm_bwd, py::arg("x"), py::arg("lx"), py::arg("w").none(true),
        py::arg("lw").none(true), py::arg("mean"), py::arg("rstd"), py::arg("g"), py::arg("lg"), G());
  for (const char* kind : {"sigmoid", "silu", "gelu"}) {
    f.def((std::string(kind) + "_bwd").c_str(),
          [kind](const CpuStorage& a, const Layout& la, const CpuStorage& g, const Layout& lg) {
            return c::act_bwd(kind, a, la, g, lg);
          },
          py::arg("a"), py::arg("la"), py::arg("g"), py::arg("lg"), G());
  }
  f.def(
      "sdpa_fwd",
      [](const CpuStorage& q, const Layout& lq, const CpuStorage& k, const Layout& lk, const CpuStorage& v,
         const Layout& lv, const CpuStorage* mask, const Layout* lmask, std::optional<double> scale, bool causal) {
        auto ms = mask_arg(mask, lmask);
        return c::sdpa_fwd(q, lq, k, lk, v, lv, ms ? &*ms : nullptr, scale_arg(scale, lq), causal);
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"),
      py::arg("mask").none(true) = nullptr, py::arg("lmask").none(true) = nullptr,
      py::arg("scale").none(true) = py::none(), py::arg("causal") = false, G());
  f.def(
      "sdpa_check",
      [](const CpuStorage& q, const Layout& lq, const CpuStorage& k, const Layout& lk, const CpuStorage& v,
         const Layout& lv, const CpuStorage* mask, const Layout* lmask) {
        auto ms = mask_arg(mask, lmask);
        c::sdpa_check(q, lq, k, lk, v, lv, ms ? &*ms : nullptr);
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"),
      py::arg("mask").none(true) = nullptr, py::arg("lmask").none(true) = nullptr);
  f.def(
      "sdpa_bwd",
      [](const CpuStorage& q, const Layout& lq, const CpuStorage& k, const Layout& lk, const CpuStorage& v,
         const Layout& lv, const CpuStorage& o, const Layout& lo, const CpuStorage& lse, const CpuStorage& g,
         const Layout& lg, const CpuStorage* mask, const Layout* lmask, std::optional<double> scale, bool causal) {
        auto ms = mask_arg(mask, lmask);
        return c::sdpa_bwd(q, lq, k, lk, v, lv, o, lo, lse, g, lg, ms ? &*ms : nullptr, scale_arg(scale, lq),
                           causal);
      },
      py::arg("q"), py::arg("lq"), py::arg("k"), py::arg("lk"), py::arg("v"), py::arg("lv"), py::arg("o"),
      py::arg("lo"), py::arg("lse"), py::arg("g"), py::arg("lg"), py::arg("mask").none(true) = nullptr,
      py::arg("lmask").none(true) = nullptr, py::arg("scale").none(true) = py::none(), py::arg("causal") = false,
      G());
}
