// The Metal backend's entries in the kernel registry: one call per family, made by register_backend.
namespace ember::metal {

namespace ops {
void register_group_norm();  // metal/ops/group_norm.cpp
}  // namespace ops

void register_kernels() { ops::register_group_norm(); }

}  // namespace ember::metal
