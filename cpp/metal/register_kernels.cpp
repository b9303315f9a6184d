// The Metal backend's entries in the kernel registry: one call per family, made by register_backend.
namespace ember::metal {

namespace ops {
void register_group_norm();      // metal/ops/group_norm.cpp
void register_sort();            // metal/ops/sort.cpp: sort, topk, multinomial
void register_scan();            // metal/ops/scan.cpp
void register_scatter_reduce();  // metal/ops/index.cpp
}  // namespace ops

void register_kernels() {
  ops::register_group_norm();
  ops::register_sort();
  ops::register_scan();
  ops::register_scatter_reduce();
}

}  // namespace ember::metal
