// GPU launchers for the fused recurrent cells (metal/rnn_cell.metal), forward and backward, registered
// as RnnCellFwd / RnnCellBwd. The entry points (cpp/fused_rnn.cpp) have checked every operand;
// 2-D operands are bound at their offsets and read at their row strides. The workspace is float32.
#include <string>
#include <tuple>

#include "families/rnn_cell.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

struct RnnCellKArgs {  // rnn_cell.metal's RnnCellArgs
  int64_t rows = 0, H = 0;
  int64_t ld[4] = {};
  int64_t b_st = 0;
  uint32_t has_b = 0, relu = 0;
};
static_assert(sizeof(RnnCellKArgs) == 64, "argument blocks must match the kernels' structs");

int64_t row_stride(const Layout* l) { return l ? l->stride()[0] : 0; }

std::string kernel_name(RnnCell kind, const char* dir, DType dt, const char* op) {
  const char* base = kind == RnnCell::Lstm ? "lstm_cell_" : kind == RnnCell::Gru ? "gru_cell_" : "rnn_cell_";
  return std::string(base) + dir + "_" + type_suffix(dt, op);
}

// One thread per (hidden unit, batch row).
void dispatch(Launch& k, int64_t h, int64_t n, const char* op) {
  k.dispatch_grid({checked_u32(h, op), checked_u32(n, op), 1}, {64, 4, 1});
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_fwd(const BackendStorage& xg, const Layout& l, RnnCell kind,
                                                            const BackendStorage& hg, const Layout& lhg,
                                                            const BackendStorage* b, const Layout* lb,
                                                            const BackendStorage* s, const Layout* ls) {
  const char* op = rnn_cell_name(kind);
  const GpuStorage& x = as_gpu(xg);
  GpuDevice& dev = x.gpu_device();
  const DType dt = x.dtype();
  const int64_t n = l.shape()[0], g = l.shape()[1], h = g / rnn_gates(kind);
  auto hn = new_storage(dev, dt, n * h, op);
  auto cn = kind == RnnCell::Lstm ? new_storage(dev, dt, n * h, op) : nullptr;
  auto ws = new_storage(dev, compute_dtype(dt), n * rnn_ws_width(kind, h), op);  // double for float64
  if (n == 0 || h == 0) return {hn, cn, ws};
  RnnCellKArgs a;
  a.rows = n, a.H = h;
  a.ld[0] = l.stride()[0], a.ld[1] = lhg.stride()[0], a.ld[2] = row_stride(ls);
  a.has_b = b != nullptr;
  a.b_st = b ? lb->stride()[0] : 0;
  a.relu = kind == RnnCell::RnnRelu;
  Launch k(dev, "rnn_cell.metal", kernel_name(kind, "fwd", dt, op));
  // An absent bias is never read (has_b 0); the gates are bound in its place.
  k.input(x, l.offset()).input(as_gpu(hg), lhg.offset());
  if (b) k.input(as_gpu(*b), lb->offset());
  else k.input(x, l.offset());
  if (s) k.input(as_gpu(*s), ls->offset());
  k.output(*hn);
  if (cn) k.output(*cn);
  k.output(*ws).scalar(a);
  dispatch(k, h, n, op);
  return {hn, cn, ws};
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_bwd(const BackendStorage& dh, const Layout& l, RnnCell kind,
                                                            const BackendStorage& ws, const Layout& lws,
                                                            const BackendStorage* s, const Layout* ls,
                                                            const BackendStorage* dc, const Layout* ldc) {
  const std::string ops_name = std::string(rnn_cell_name(kind)) + "_bwd";
  const char* op = ops_name.c_str();
  const GpuStorage& x = as_gpu(dh);
  GpuDevice& dev = x.gpu_device();
  const DType dt = x.dtype();
  const int64_t n = l.shape()[0], h = l.shape()[1], g = rnn_gates(kind) * h;
  auto dxg = new_storage(dev, dt, n * g, op);
  auto dhg = kind == RnnCell::Gru ? new_storage(dev, dt, n * g, op) : nullptr;
  auto ds = kind == RnnCell::Lstm || kind == RnnCell::Gru ? new_storage(dev, dt, n * h, op) : nullptr;
  if (n == 0 || h == 0) return {dxg, dhg, ds};
  RnnCellKArgs a;
  a.rows = n, a.H = h;
  a.ld[0] = row_stride(ls), a.ld[1] = l.stride()[0], a.ld[2] = row_stride(ldc);
  a.relu = kind == RnnCell::RnnRelu;
  Launch k(dev, "rnn_cell.metal", kernel_name(kind, "bwd", dt, op));
  k.input(as_gpu(ws), lws.offset());
  if (s) k.input(as_gpu(*s), ls->offset());
  k.input(x, l.offset());
  if (dc) k.input(as_gpu(*dc), ldc->offset());
  k.output(*dxg);
  if (dhg) k.output(*dhg);
  if (ds) k.output(*ds);
  k.scalar(a);
  dispatch(k, h, n, op);
  return {dxg, dhg, ds};
}

}  // namespace

void register_rnn_cell(DeviceKind kind) {
  Kernels<RnnCellFwd>::set(kind, &rnn_cell_fwd);
  Kernels<RnnCellBwd>::set(kind, &rnn_cell_bwd);
}

}  // namespace ember::gpu::ops
