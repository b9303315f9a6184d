// Metal launchers for the reductions: every ReduceOp over any dims.
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr reduce(const MetalStorage& s, ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) {
  throw Error(ErrorKind::Unsupported, cat_str("[", op_name(op), "] not yet implemented on metal"));
}

}  // namespace ember::metal::ops
