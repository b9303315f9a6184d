// The CPU backend's entries in the kernel registry: one call per family, made once at import.
#include "registry.h"

namespace ember::cpu {

void register_group_norm();      // cpu/group_norm.cpp
void register_batch_norm();      // cpu/batch_norm.cpp
void register_fused();           // cpu/fused.cpp: softmax, cross_entropy, rms_norm, layer_norm, act_bwd, rope
void register_optim();           // cpu/optim.cpp: optim_step, optim_step_multi
void register_sdpa();            // cpu/sdpa.cpp
void register_rnn_cell();        // cpu/rnn_cell.cpp
void register_sort();            // cpu/sort.cpp
void register_topk();            // cpu/topk.cpp
void register_scan();            // cpu/scan.cpp
void register_multinomial();     // cpu/random.cpp
void register_scatter_reduce();  // cpu/index.cpp
void register_conv();            // cpu/conv.cpp: im2col, col2im, conv2d's three directions
void register_pool();            // cpu/pool.cpp
void register_upsample();        // cpu/upsample.cpp

void register_kernels() {
  register_group_norm();
  register_batch_norm();
  register_fused();
  register_optim();
  register_sdpa();
  register_rnn_cell();
  register_sort();
  register_topk();
  register_scan();
  register_multinomial();
  register_scatter_reduce();
  register_conv();
  register_pool();
  register_upsample();
}

}  // namespace ember::cpu
