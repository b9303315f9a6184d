// bias_residual's kernel family: out = r + (y + b), b broadcast over the last dim (see registry.h).
#pragma once

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// y (a linear layer's product), b (n,) its bias and r (the residual stream) of y's shape; out dense. The sum
// is rounded as the two separate adds round it ((y + b) first), so out equals r + (y + b) bit for bit.
struct BiasResidual {
  static constexpr const char* kName = "bias_residual";
  // The entry point: checks every argument, then calls the kernel of y's device (kernels re-check nothing).
  static StoragePtr run(const BackendStorage& y, const Layout& ly, const BackendStorage& b, const Layout& lb,
                        const BackendStorage& r, const Layout& lr) {
    const char* op = "bias_residual";
    checks::float_input(y, op, "input");
    checks::like(y, b, op, "bias");
    checks::like(y, r, op, "residual");
    EMBER_CHECK(ly.ndim() >= 1, Shape, "[bias_residual] expected at least 1 dim, got a scalar");
    EMBER_CHECK(ly.shape() == lr.shape(), Shape, "[bias_residual] the residual's shape ", shape_str(lr.shape()),
                " differs from the input's ", shape_str(ly.shape()));
    checks::in_bounds(y, ly, op);
    checks::in_bounds(r, lr, op);
    checks::param(y, b, lb, checks::last_dim(ly), op, "bias");
    return Kernels<BiasResidual>::of(y)(y, ly, b, lb, r, lr);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
