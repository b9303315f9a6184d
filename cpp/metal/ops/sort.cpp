// Metal launcher for sort along one dim (metal/sort.metal): a threadgroup bitonic sort per line when the
// line's power-of-two padding fits threadgroup memory, else bitonic stages through device scratch.
#include <algorithm>

#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

std::tuple<StoragePtr, StoragePtr> sort(const MetalStorage& s, const Layout& l, int64_t dim, bool descending,
                                        bool stable) {
  (void)stable;  // the kernels' order is total (ties by index): always stable
  const char* name = "sort";
  MetalDevice& dev = s.metal_device();
  const DType dt = s.dtype();
  const char* tname = type_suffix(dt, name);
  const int64_t numel = l.numel(), n = l.shape()[dim];
  auto vals = new_metal(dev, dt, numel, name);
  auto ids = new_metal(dev, DType::I64, numel, name);
  if (numel == 0) return {vals, ids};
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
  int64_t P = 1;
  while (P < n) P *= 2;
  std::vector<int64_t> meta = {(int64_t)shape.size(), l.offset(), n, l.stride()[dim], cs[dim], P, descending};
  meta.insert(meta.end(), shape.begin(), shape.end());
  meta.insert(meta.end(), istr.begin(), istr.end());
  meta.insert(meta.end(), ostr.begin(), ostr.end());
  const uint32_t lines = checked_u32(numel / n, name);
  const int64_t block = dt == DType::I64 ? 2048 : 4096;  // sort.metal's B per type
  const std::string t(tname);
  if (P <= block) {
    const uint32_t max_threads = std::min<uint32_t>(1024, dev.adapter().max_threads_per_threadgroup());
    const uint32_t tx = (uint32_t)std::clamp<int64_t>(P / 2, 1, max_threads);
    Launch(dev, "sort.metal", "sort_block_" + t)
        .input(s).output(*vals).output(*ids).array(meta)
        .dispatch(Dim3{tx, lines, 1}, Dim3{tx, 1, 1});
    return {vals, ids};
  }
  const int64_t padded = P * (int64_t)lines;
  checked_u32(padded, name);
  auto sk = new_metal(dev, dt, padded, name);
  auto si = new_metal(dev, DType::U32, padded, name);
  Launch(dev, "sort.metal", "sort_init_" + t)
      .input(s).output(*sk).output(*si).array(meta)
      .dispatch(Dim3{(uint32_t)P, lines, 1}, Dim3{256, 1, 1});
  for (uint32_t k = 2; k <= (uint64_t)P; k <<= 1) {
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      Launch(dev, "sort.metal", "sort_step_" + t)
          .inout(*sk).inout(*si).array(meta).scalar<uint32_t>(k).scalar<uint32_t>(j)
          .dispatch(Dim3{(uint32_t)(P / 2), lines, 1}, Dim3{256, 1, 1});
    }
  }
  Launch(dev, "sort.metal", "sort_write_" + t)
      .input(*sk).input(*si).output(*vals).output(*ids).array(meta)
      .dispatch(Dim3{(uint32_t)n, lines, 1}, Dim3{256, 1, 1});
  return {vals, ids};
}

}  // namespace ember::metal::ops
