// The GPU launchers' entries in the kernel registry: one call per family, for each GPU device kind (Metal and
// CUDA run the same launchers over their own GpuDevice).
#include "gpu/gpu_storage.h"

namespace ember::gpu {

namespace ops {
void register_group_norm(DeviceKind kind);      // gpu/ops/group_norm.cpp
void register_batch_norm(DeviceKind kind);      // gpu/ops/batch_norm.cpp
void register_fused(DeviceKind kind);           // gpu/ops/fused.cpp: softmax, rms_norm, layer_norm, act_bwd, sdpa, rope
void register_optim(DeviceKind kind);           // gpu/ops/optim.cpp
void register_rnn_cell(DeviceKind kind);        // gpu/ops/rnn_cell.cpp
void register_sort(DeviceKind kind);            // gpu/ops/sort.cpp: sort, topk, multinomial
void register_scan(DeviceKind kind);            // gpu/ops/scan.cpp
void register_scatter_reduce(DeviceKind kind);  // gpu/ops/index.cpp
void register_conv(DeviceKind kind);            // gpu/ops/conv.cpp: im2col, col2im, conv2d's three directions
void register_pool(DeviceKind kind);            // gpu/ops/pool.cpp
void register_upsample(DeviceKind kind);        // gpu/ops/upsample.cpp
}  // namespace ops

void register_kernels(DeviceKind kind) {
  ops::register_group_norm(kind);
  ops::register_batch_norm(kind);
  ops::register_fused(kind);
  ops::register_optim(kind);
  ops::register_rnn_cell(kind);
  ops::register_sort(kind);
  ops::register_scan(kind);
  ops::register_scatter_reduce(kind);
  ops::register_conv(kind);
  ops::register_pool(kind);
  ops::register_upsample(kind);
}

}  // namespace ember::gpu
