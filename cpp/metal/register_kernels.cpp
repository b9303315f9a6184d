// The Metal backend's entries in the kernel registry: one call per family, made by register_backend.
namespace ember::metal {

namespace ops {
void register_group_norm();      // metal/ops/group_norm.cpp
void register_batch_norm();      // metal/ops/batch_norm.cpp
void register_fused();           // metal/ops/fused.cpp: softmax, rms_norm, layer_norm, act_bwd, sdpa, rope
void register_optim();           // metal/ops/optim.cpp
void register_rnn_cell();        // metal/ops/rnn_cell.cpp
void register_sort();            // metal/ops/sort.cpp: sort, topk, multinomial
void register_scan();            // metal/ops/scan.cpp
void register_scatter_reduce();  // metal/ops/index.cpp
}  // namespace ops

void register_kernels() {
  ops::register_group_norm();
  ops::register_batch_norm();
  ops::register_fused();
  ops::register_optim();
  ops::register_rnn_cell();
  ops::register_sort();
  ops::register_scan();
  ops::register_scatter_reduce();
}

}  // namespace ember::metal
