// Metal launcher for matmul (batched, broadcast batch dims).
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr matmul(const MetalStorage& s, const Layout& l, const BackendStorage& rhs, const Layout& rl) {
  throw Error(ErrorKind::Unsupported, "[matmul] not yet implemented on metal");
}

}  // namespace ember::metal::ops
