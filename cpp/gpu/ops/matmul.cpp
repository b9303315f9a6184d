// GPU launcher for matmul (metal/matmul.metal): batched, broadcast batch dims as stride 0, any strides of
// A and B read in place (a transposed operand is never copied), every Metal dtype; a simdgroup per output
// for matrix-vector shapes.
#include <algorithm>

#include "gpu/launch.h"
#include "gpu/ops/ops.h"

namespace ember::gpu::ops {

StoragePtr matmul(const GpuStorage& s, const Layout& l, const BackendStorage& rhs_, const Layout& rl) {
  const GpuStorage& rhs = as_gpu(rhs_);
  GpuDevice& dev = s.gpu_device();
  const char* tname = type_suffix(s.dtype(), "matmul");
  EMBER_CHECK(s.dtype() != DType::Bool, DType, "[matmul] not supported for bool");  // as torch and the CPU
  const int64_t nd = l.ndim();
  const int64_t m = l.shape()[nd - 2], k = l.shape()[nd - 1], n = rl.shape()[nd - 1];
  const Shape bs(l.shape().begin(), l.shape().end() - 2);
  const int64_t nbatch = shape_numel(bs);
  auto out = new_storage(dev, s.dtype(), nbatch * m * n, "matmul");
  if (nbatch * m * n == 0) return out;
  // Batch dims merged where both operands allow it (the output's batches stay in row-major order).
  const Layout ab(bs, Shape(l.stride().begin(), l.stride().end() - 2), 0);
  const Layout bb(bs, Shape(rl.stride().begin(), rl.stride().end() - 2), 0);
  const std::vector<Strided> B = collapse(std::vector<const Layout*>{&ab, &bb});
  std::vector<int64_t> meta = {(int64_t)B[0].ndim(), m, n, k, l.offset(), rl.offset(),
                               l.stride()[nd - 2], l.stride()[nd - 1], rl.stride()[nd - 2], rl.stride()[nd - 1]};
  meta.insert(meta.end(), B[0].shape.begin(), B[0].shape.end());
  meta.insert(meta.end(), B[0].strides.begin(), B[0].strides.end());
  meta.insert(meta.end(), B[1].strides.begin(), B[1].strides.end());
  // Matrix-vector shapes of floats whose k runs contiguously in both operands (x @ W^T at batch 1):
  // a simdgroup per output; the tiles would compute 63 of every 64 rows for nothing.
  const int64_t acs = l.stride()[nd - 1], brs = rl.stride()[nd - 2];
  if (is_float(s.dtype()) && (m == 1 || n == 1) && (acs == 1 || k == 1) && (brs == 1 || k == 1) && k >= 32) {
    const uint32_t outs = checked_u32(nbatch * m * n, "matmul");
    Launch(dev, "matmul.metal", std::string("matmul_dot_") + tname)
        .input(s).input(rhs).output(*out).array(meta)
        .dispatch_grid(Dim3{32, outs, 1}, Dim3{32, 8, 1});
    return out;
  }
  // 64x64 output tiles, 16x16 threads each (matmul.metal's BM, BN, TG)
  const uint32_t gx = checked_u32((int64_t)ceil_div((uint64_t)n, 64) * 16, "matmul");
  const uint32_t gy = checked_u32((int64_t)ceil_div((uint64_t)m, 64) * 16, "matmul");
  Launch(dev, "matmul.metal", std::string("matmul_tiled_") + tname)
      .input(s).input(rhs).output(*out).array(meta)
      .dispatch(Dim3{gx, gy, checked_u32(nbatch, "matmul")}, Dim3{16, 16, 1});
  return out;
}

}  // namespace ember::gpu::ops
