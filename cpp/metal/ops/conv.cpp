// Metal launchers for the convolution windows: im2col (unfold) and col2im (fold).
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr im2col(const MetalStorage& s, const Layout& l, const ConvGeom& g) {
  throw Error(ErrorKind::Unsupported, "[unfold] not yet implemented on metal");
}

StoragePtr col2im(const MetalStorage& s, const ConvGeom& g) {
  throw Error(ErrorKind::Unsupported, "[fold] not yet implemented on metal");
}

}  // namespace ember::metal::ops
