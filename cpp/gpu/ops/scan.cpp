// GPU launcher for the scans (metal/scan.metal): one simdgroup per line, 8 lines per threadgroup.
#include "gpu/launch.h"
#include "families/scan.h"
#include "lines.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {

namespace {

std::tuple<StoragePtr, StoragePtr> scan(const BackendStorage& xs, ScanOp op, const Layout& l, int64_t dim,
                                        bool exclusive, bool reverse) {
  const GpuStorage& s = as_gpu(xs);
  const char* name = kScanNames[(int)op];
  GpuDevice& dev = s.gpu_device();
  const DType dt = s.dtype();
  const char* tname = type_suffix(dt, name);
  const bool arith = op == ScanOp::Sum || op == ScanOp::Prod;
  const DType odt = arith && !is_float(dt) ? DType::I64 : dt;
  const int64_t numel = l.numel(), n = l.shape()[dim];
  auto out = new_storage(dev, odt, numel, name);
  // cumsum/cumprod write no indices: a one-element stand-in keeps the binding valid
  auto ids = new_storage(dev, DType::I64, arith ? 1 : numel, name);
  if (numel == 0) return {out, arith ? nullptr : ids};
  checked_u32(numel, name);
  const Lines ls = lines_along(l, dim);
  std::vector<int64_t> meta = {ls.rank_for_meta(), l.offset(), n, ls.a_step, ls.b_step, exclusive, reverse};
  ls.append_meta(meta);
  const uint32_t lines = checked_u32(numel / n, name);
  Launch(dev, "scan.metal", std::string("scan_") + name + "_" + tname)
      .input(s).output(*out).output(*ids).array(meta).scalar<uint32_t>(lines)
      .dispatch_grid(Dim3{32, lines, 1}, Dim3{32, 8, 1});
  return {out, arith ? nullptr : ids};
}

}  // namespace

void register_scan(DeviceKind kind) { Kernels<Scan>::set(kind, &scan); }

}  // namespace ember::gpu::ops
