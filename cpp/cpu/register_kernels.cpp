// The CPU backend's entries in the kernel registry: one call per family, made once at import.
#include "registry.h"

namespace ember::cpu {

void register_group_norm();  // cpu/group_norm.cpp
void register_batch_norm();  // cpu/batch_norm.cpp
void register_fused();       // cpu/fused.cpp: softmax, rms_norm, layer_norm, act_bwd, sdpa, rope, optim_step
void register_rnn_cell();    // cpu/rnn_cell.cpp

void register_kernels() {
  register_group_norm();
  register_batch_norm();
  register_fused();
  register_rnn_cell();
}

}  // namespace ember::cpu
