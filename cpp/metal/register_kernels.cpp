// The Metal backend's entries in the kernel registry: one call per family, made by register_backend.
namespace ember::metal {

namespace ops {
void register_group_norm();  // metal/ops/group_norm.cpp
void register_batch_norm();  // metal/ops/batch_norm.cpp
void register_fused();       // metal/ops/fused.cpp: softmax, rms_norm, layer_norm, act_bwd, sdpa, rope
void register_optim();       // metal/ops/optim.cpp
void register_rnn_cell();    // metal/ops/rnn_cell.cpp
}  // namespace ops

void register_kernels() {
  ops::register_group_norm();
  ops::register_batch_norm();
  ops::register_fused();
  ops::register_optim();
  ops::register_rnn_cell();
}

}  // namespace ember::metal
