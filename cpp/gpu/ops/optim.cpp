// GPU launcher of the fused optimizer steps (metal/optim.metal): float32 only (Metal has no float64);
// every operand dense from its offset, the parameter and the state buffers written in place.
#include <cmath>
#include <string>

#include "families/optim.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

template <class R> struct OptimKArgs {  // must match optim.metal's OptimArgs (R: double for float64's kernels)
  uint32_t n, flags, small, pad;
  R s[8];
};

}  // namespace

void optim_step(const OptimArgs& a) {
  const char* op = "optim_step";
  GpuStorage& p = as_gpu(*a.p);
  GpuDevice& dev = p.gpu_device();
  const std::string suffix = type_suffix(p.dtype(), op);
  EMBER_CHECK(p.dtype() == DType::F32 || (p.dtype() == DType::F64 && dev.holds(DType::F64)), DType, "[", op, "] fused updates on ", kDeviceKindNames[(int)dev.device().kind], " take float32 (or float64 where the device has it), got ",
              dtype_name(p.dtype()));
  auto args = [&](auto tag) {
    using R = decltype(tag);
    OptimKArgs<R> k{};
    k.n = checked_u32(a.n, op);
    k.flags = a.flags;
    for (int i = 0; i < 8; ++i) k.s[i] = (R)a.s[i];  // torch rounds each Scalar to the dtype
    // The lerp weight (Adam: 1 - beta1, RMSprop: 1 - alpha) in the dtype picks torch's lerp form.
    if (a.kind == OptimKind::Adam) k.small = std::fabs(k.s[1]) < 0.5;
    if (a.kind == OptimKind::RmsProp) k.small = std::fabs(k.s[2]) < 0.5;
    return k;
  };
  const auto k = args(float());
  const auto k64 = args(double());
  const GpuStorage& g = as_gpu(*a.g);
  const char* name = a.kind == OptimKind::Sgd ? "sgd_step_" : a.kind == OptimKind::Adam ? "adam_step_" : "rmsprop_step_";
  Launch l(dev, "optim.metal", name + suffix);
  l.inout(p, a.off_p).input(g, a.off_g);
  const int nst = a.kind == OptimKind::Sgd ? 1 : 3;
  // An unused state slot is bound to the gradient, read-only; the kernel never touches it.
  for (int i = 0; i < nst; ++i) {
    if (a.st[i]) l.inout(as_gpu(*a.st[i]), a.off_st[i]);
    else l.input(g, a.off_g);
  }
  l.scalar_of(p.dtype(), k, k64).dispatch_1d(k.n);
}

void register_optim(DeviceKind kind) { Kernels<OptimStep>::set(kind, &optim_step); }

}  // namespace ember::gpu::ops
