// Metal launchers for data movement: strided copies, fill, casts between every dtype pair, where.
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr where(const MetalStorage& c, const Layout& cl, const BackendStorage& a, const Layout& al,
                 const BackendStorage& b, const Layout& bl) {
  throw Error(ErrorKind::Unsupported, "[where] not yet implemented on metal");
}

StoragePtr to_dtype(const MetalStorage& s, const Layout& l, DType dt) {
  throw Error(ErrorKind::Unsupported, "[to_dtype] not yet implemented on metal");
}

void copy_into(const MetalStorage& s, const Layout& l, BackendStorage& dst, const Layout& dl) {
  throw Error(ErrorKind::Unsupported, "[copy] not yet implemented on metal");
}

void fill(MetalStorage& s, const Layout& l, double value) {
  throw Error(ErrorKind::Unsupported, "[fill] not yet implemented on metal");
}

}  // namespace ember::metal::ops
