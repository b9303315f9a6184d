// The Metal backend's entries in the kernel registry: one call per family, made by register_backend.
namespace ember::metal {

namespace ops {
void register_group_norm();      // metal/ops/group_norm.cpp
void register_sort();            // metal/ops/sort.cpp: sort, topk, multinomial
void register_scan();            // metal/ops/scan.cpp
void register_scatter_reduce();  // metal/ops/index.cpp
void register_conv();            // metal/ops/conv.cpp: im2col, col2im, conv2d's three directions
void register_pool();            // metal/ops/pool.cpp
void register_upsample();        // metal/ops/upsample.cpp
}  // namespace ops

void register_kernels() {
  ops::register_group_norm();
  ops::register_sort();
  ops::register_scan();
  ops::register_scatter_reduce();
  ops::register_conv();
  ops::register_pool();
  ops::register_upsample();
}

}  // namespace ember::metal
