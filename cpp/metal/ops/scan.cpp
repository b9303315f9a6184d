// Metal launcher for the scans (metal/scan.metal): one simdgroup per line, 8 lines per threadgroup.
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

std::tuple<StoragePtr, StoragePtr> scan(const MetalStorage& s, ScanOp op, const Layout& l, int64_t dim,
                                        bool exclusive, bool reverse) {
  const char* name = kScanNames[(int)op];
  MetalDevice& dev = s.metal_device();
  const DType dt = s.dtype();
  const char* tname = type_suffix(dt, name);
  const bool arith = op == ScanOp::Sum || op == ScanOp::Prod;
  const DType odt = arith && !is_float(dt) ? DType::I64 : dt;
  const int64_t numel = l.numel(), n = l.shape()[dim];
  auto out = new_metal(dev, odt, numel, name);
  // cumsum/cumprod write no indices: a one-element stand-in keeps the binding valid
  auto ids = new_metal(dev, DType::I64, arith ? 1 : numel, name);
  if (numel == 0) return {out, arith ? nullptr : ids};
  checked_u32(numel, name);
  const Shape cs = contiguous_strides(l.shape());
  std::vector<int64_t> shape, istr, ostr;
  for (int64_t i = 0; i < l.ndim(); ++i) {
    if (i == dim) continue;
    shape.push_back(l.shape()[i]);
    istr.push_back(l.stride()[i]);
    ostr.push_back(cs[i]);
  }
  if (shape.empty()) shape = istr = ostr = {1};
  std::vector<int64_t> meta = {(int64_t)shape.size(), l.offset(), n, l.stride()[dim], cs[dim], exclusive, reverse};
  meta.insert(meta.end(), shape.begin(), shape.end());
  meta.insert(meta.end(), istr.begin(), istr.end());
  meta.insert(meta.end(), ostr.begin(), ostr.end());
  const uint32_t lines = checked_u32(numel / n, name);
  Launch(dev, "scan.metal", std::string("scan_") + name + "_" + tname)
      .input(s).output(*out).output(*ids).array(meta).scalar<uint32_t>(lines)
      .dispatch_grid(Dim3{32, lines, 1}, Dim3{32, 8, 1});
  return {out, arith ? nullptr : ids};
}

}  // namespace ember::metal::ops
