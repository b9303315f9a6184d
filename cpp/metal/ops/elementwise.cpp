// Metal launchers for the elementwise family: unary (with affine / powf / clamp) and binary.
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr unary(const MetalStorage& s, UnaryOp op, const Layout& l, double p0, double p1) {
  throw Error(ErrorKind::Unsupported, cat_str("[", op_name(op), "] not yet implemented on metal"));
}

StoragePtr binary(const MetalStorage& s, BinaryOp op, const Layout& l, const BackendStorage& rhs, const Layout& rl) {
  throw Error(ErrorKind::Unsupported, cat_str("[", op_name(op), "] not yet implemented on metal"));
}

}  // namespace ember::metal::ops
