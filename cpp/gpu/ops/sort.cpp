// GPU launchers for sort along one dim (metal/sort.metal: a threadgroup bitonic sort per line when the
// line's power-of-two padding fits threadgroup memory, else bitonic stages through device scratch), topk's
// per-line selection kernel, and multinomial (metal/random.metal's keys and search kernels).
#include <algorithm>
#include <cstring>

#include "gpu/launch.h"
#include "families/scan.h"
#include "families/sampling.h"
#include "families/sort.h"
#include "lines.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// sort.metal's B per type: the elements whose key and index fit its threadgroup arrays (at most 24 KiB).
int64_t block_elems(DType dt) { return dt == DType::U8 || dt == DType::Bool ? 4096 : 2048; }

uint32_t pow2_floor(uint32_t v) {
  uint32_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

std::tuple<StoragePtr, StoragePtr> sort(const BackendStorage& xs, const Layout& l, int64_t dim, bool descending,
                                        bool stable) {
  const GpuStorage& s = as_gpu(xs);
  (void)stable;  // the kernels' order is total (ties by index): always stable
  const char* name = "sort";
  GpuDevice& dev = s.gpu_device();
  const DType dt = s.dtype();
  const char* tname = type_suffix(dt, name);
  const int64_t numel = l.numel(), n = l.shape()[dim];
  auto vals = new_storage(dev, dt, numel, name);
  auto ids = new_storage(dev, DType::I64, numel, name);
  if (numel == 0) return {vals, ids};
  checked_u32(numel, name);
  int64_t P = 1;
  while (P < n) P *= 2;
  const Lines ls = lines_along(l, dim);
  std::vector<int64_t> meta = {ls.rank_for_meta(), l.offset(), n, ls.a_step, ls.b_step, P, descending};
  ls.append_meta(meta);
  const uint32_t lines = checked_u32(numel / n, name);
  const int64_t block = block_elems(dt);
  const std::string t(tname);
  if (P <= block) {
    Launch k(dev, "sort.metal", "sort_block_" + t);
    const uint32_t tx = (uint32_t)std::clamp<int64_t>(P / 2, 1, pow2_floor(k.max_threads()));
    k.input(s).output(*vals).output(*ids).array(meta).dispatch(Dim3{tx, lines, 1}, Dim3{tx, 1, 1});
    return {vals, ids};
  }
  const int64_t padded = P * (int64_t)lines;
  checked_u32(padded, name);
  auto sk = new_storage(dev, dt, padded, name);
  auto si = new_storage(dev, DType::U32, padded, name);
  Launch(dev, "sort.metal", "sort_init_" + t)
      .input(s).output(*sk).output(*si).array(meta)
      .dispatch_grid(Dim3{(uint32_t)P, lines, 1});
  for (uint32_t k = 2; k <= (uint64_t)P; k <<= 1) {
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      Launch(dev, "sort.metal", "sort_step_" + t)
          .inout(*sk).inout(*si).array(meta).scalar<uint32_t>(k).scalar<uint32_t>(j)
          .dispatch_grid(Dim3{(uint32_t)(P / 2), lines, 1});
    }
  }
  Launch(dev, "sort.metal", "sort_write_" + t)
      .input(*sk).input(*si).output(*vals).output(*ids).array(meta)
      .dispatch_grid(Dim3{(uint32_t)n, lines, 1});
  return {vals, ids};
}

int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

std::tuple<StoragePtr, StoragePtr> topk(const BackendStorage& xs, const Layout& l, int64_t dim, int64_t k,
                                        bool largest) {
  const GpuStorage& s = as_gpu(xs);
  const char* name = "topk";
  GpuDevice& dev = s.gpu_device();
  const DType dt = s.dtype();
  const std::string t(type_suffix(dt, name));
  const int64_t n = l.shape()[dim];
  Shape oshape = l.shape();
  oshape[dim] = k;
  const int64_t lines = n == 0 ? 0 : l.numel() / n, onumel = lines * k;
  checked_u32(l.numel(), name);
  const int64_t block = block_elems(dt);
  const int64_t kp = pow2_at_least(std::max<int64_t>(k, 1));
  if (kp * 4 > block || k * 4 > n) {
    // k is a large part of the line (or of a threadgroup): sort the lines, keep their first k
    auto [sv, si] = sort(s, l, dim, largest, true);
    auto vals = new_storage(dev, dt, onumel, name);
    auto ids = new_storage(dev, DType::I64, onumel, name);
    const Layout head(oshape, contiguous_strides(l.shape()), 0);
    sv->copy_into(head, *vals, Layout::contiguous(oshape));
    si->copy_into(head, *ids, Layout::contiguous(oshape));
    return {vals, ids};
  }
  auto vals = new_storage(dev, dt, onumel, name);
  auto ids = new_storage(dev, DType::I64, onumel, name);
  if (onumel == 0) return {vals, ids};
  const Lines ls = lines_along(l, dim, k);
  std::vector<int64_t> meta = {ls.rank_for_meta(), l.offset(), n, ls.a_step, ls.b_step, kp, largest, k};
  ls.append_meta(meta);
  // threads: a power of two, their kp slots filling the threadgroup's memory, no more than the line needs
  uint32_t tx = 1;
  Launch kl(dev, "sort.metal", "topk_block_" + t);
  const uint32_t max_threads = kl.max_threads();  // the pipeline's own limit
  while ((int64_t)tx * 2 * kp <= block && tx * 2 <= max_threads && (int64_t)tx * kp < n) tx *= 2;
  kl.input(s).output(*vals).output(*ids).array(meta).dispatch(Dim3{tx, checked_u32(lines, name), 1}, Dim3{tx, 1, 1});
  return {vals, ids};
}

// The CPU's errors for bad weights: multinomial_check's flags, read after the device finishes it.
void check_weights(GpuDevice& dev, const GpuStorage& s, const std::vector<int64_t>& meta, uint32_t rows,
                   uint32_t n, const std::string& t) {
  auto flags = new_storage(dev, DType::U32, (int64_t)rows + 1, "multinomial");
  flags->zero(((size_t)rows + 1) * 4);  // a fresh buffer: no encoded work uses it yet
  Launch(dev, "random.metal", "multinomial_check_" + t)
      .input(s).inout(*flags).array(meta)
      .dispatch_grid(Dim3{n, rows, 1});
  dev.synchronize();
  std::vector<uint32_t> f((size_t)rows + 1);
  flags->read(f.data(), f.size() * 4);
  EMBER_CHECK(f[0] == 0, Value, "[multinomial] probability tensor contains either inf, nan or element < 0");
  for (uint32_t r = 0; r < rows; ++r)
    EMBER_CHECK(f[1 + r] != 0, Value, "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
}

StoragePtr multinomial(const BackendStorage& ws, const Layout& l, int64_t num_samples, bool replacement,
                       uint64_t seed, uint64_t counter) {
  const GpuStorage& s = as_gpu(ws);
  const char* name = "multinomial";
  GpuDevice& dev = s.gpu_device();
  const int64_t rows = l.shape()[0], n = l.shape()[1];
  auto out = new_storage(dev, DType::I64, rows * num_samples, name);
  if (rows == 0) return out;
  const uint32_t rows32 = checked_u32(rows, name), n32 = checked_u32(n, name);
  checked_u32(rows * n, name);
  const std::string t(type_suffix(s.dtype(), name));
  const std::vector<int64_t> meta = {l.offset(), l.stride()[0], l.stride()[1], n, num_samples};
  check_weights(dev, s, meta, rows32, n32, t);
  if (!replacement) {
    // the exponential keys w / E in float32, then topk's selection of the num_samples largest
    auto keys = new_storage(dev, compute_dtype(s.dtype()), rows * n, name);  // double in the float64 kernels
    Launch(dev, "random.metal", "multinomial_keys_" + t)
        .input(s).output(*keys).array(meta).scalar<uint64_t>(seed).scalar<uint64_t>(counter)
        .dispatch_grid(Dim3{n32, rows32, 1});
    auto [v, ids] = topk(*keys, Layout::contiguous({rows, n}), 1, num_samples, true);
    (void)v;
    return ids;
  }
  // the running sum of each row in float32, then one binary search per draw
  StoragePtr w32 = s.to_dtype(l, DType::F32);
  auto [csum, none] = Kernels<Scan>::of(*w32)(*w32, ScanOp::Sum, Layout::contiguous({rows, n}), 1, false, false);
  (void)none;
  const uint32_t S = checked_u32(num_samples, name);
  Launch(dev, "random.metal", "multinomial_search")
      .input(as_gpu(*csum)).output(*out).array(meta).scalar<uint64_t>(seed).scalar<uint64_t>(counter)
      .dispatch_grid(Dim3{S, rows32, 1});
  return out;
}

}  // namespace

void register_sort(DeviceKind kind) {
  Kernels<Sort>::set(kind, &sort);
  Kernels<Topk>::set(kind, &topk);
  Kernels<Multinomial>::set(kind, &multinomial);
}

}  // namespace ember::gpu::ops
