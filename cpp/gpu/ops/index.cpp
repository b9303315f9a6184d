// GPU launchers for the index family (metal/index.metal): index_select, gather, index_add, scatter_add,
// index_copy, scatter_reduce. Indices are first checked and normalised on the device (index_prepare); the host waits for
// that pass and raises on a bad index before any kernel writes a tensor, as the CPU does.
#include <algorithm>
#include <cstring>

#include "gpu/launch.h"
#include "families/scatter.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// Threads of a grid-stride kernel: enough to fill a GPU, never more than there is work.
uint64_t grid_threads(int64_t work) { return (uint64_t)std::min<int64_t>(work, int64_t(1) << 20); }

// The indices as a contiguous int64 storage of values in [0, limit) (negative ones count from the end),
// in the index tensor's row-major order. Raises "[op] index i out of range for a dim of size limit" for
// the first bad one.
GpuStoragePtr prepare_ids(GpuDevice& dev, const BackendStorage& ids_, const Layout& il, int64_t limit,
                            const char* op) {
  const GpuStorage& ids = as_gpu(ids_);
  const int64_t n = il.numel();
  checked_u32(n, op);
  auto out = new_storage(dev, DType::I64, n, op);
  if (n == 0) return out;
  auto bad = new_storage(dev, DType::U32, 1, op);
  const uint32_t none = 0xffffffffu;
  bad->write(&none, 4);  // a fresh buffer: no encoded work uses it yet
  const Strided S = collapse(il);
  std::vector<int64_t> meta = {n, (int64_t)S.ndim(), S.offset, limit};
  meta.insert(meta.end(), S.shape.begin(), S.shape.end());
  meta.insert(meta.end(), S.strides.begin(), S.strides.end());
  Launch(dev, "index.metal", std::string("index_prepare_") + dtype_name(ids.dtype()))
      .input(ids).output(*out).inout(*bad).array(meta)
      .dispatch_1d((uint64_t)n, 256);
  dev.synchronize();
  uint32_t pos;
  bad->read(&pos, 4);
  if (pos != none) {
    int64_t raw;  // a bad entry keeps the value as the user wrote it
    out->read(&raw, 8, (size_t)pos * 8);
    throw Error(ErrorKind::Index, cat_str("[", op, "] index ", raw, " out of range for a dim of size ", limit));
  }
  return out;
}

// Data movement depends on the element's width only ("index_select_4").
std::string by_width(const char* kernel, DType dt, const char* op) {
  type_suffix(dt, op);  // refuses f64
  return std::string(kernel) + "_" + std::to_string(itemsize(dt));
}

void append(std::vector<int64_t>& v, const Shape& s) { v.insert(v.end(), s.begin(), s.end()); }

// The meta of a row-wise write of src's slices into l at ids along dim (index_add, index_copy).
std::vector<int64_t> rows_meta(const Layout& l, const Layout& sl, int64_t dim, int64_t nids, int64_t lines) {
  std::vector<int64_t> meta = {l.ndim(), dim, l.offset(), sl.offset(), nids, lines};
  append(meta, l.shape());
  append(meta, l.stride());
  append(meta, sl.stride());
  return meta;
}

}  // namespace

StoragePtr index_select(const GpuStorage& s, const Layout& l, const BackendStorage& ids_, const Layout& il,
                        int64_t dim) {
  GpuDevice& dev = s.gpu_device();
  const std::string fn = by_width("index_select", s.dtype(), "index_select");
  auto ids = prepare_ids(dev, ids_, il, l.shape()[dim], "index_select");
  Shape os = l.shape();
  os[dim] = il.numel();
  const int64_t total = shape_numel(os);
  auto out = new_storage(dev, s.dtype(), total, "index_select");
  if (total == 0) return out;
  std::vector<int64_t> meta = {l.ndim(), dim, l.offset(), il.numel(), total};
  append(meta, l.shape());
  append(meta, l.stride());
  Launch(dev, "index.metal", fn).input(s).output(*out).input(*ids).array(meta).dispatch_1d(grid_threads(total));
  return out;
}

StoragePtr gather(const GpuStorage& s, const Layout& l, const BackendStorage& ids_, const Layout& il, int64_t dim) {
  GpuDevice& dev = s.gpu_device();
  const std::string fn = by_width("gather", s.dtype(), "gather");
  auto ids = prepare_ids(dev, ids_, il, l.shape()[dim], "gather");
  const int64_t total = il.numel();
  auto out = new_storage(dev, s.dtype(), total, "gather");
  if (total == 0) return out;
  std::vector<int64_t> meta = {l.ndim(), dim, l.offset(), total};
  append(meta, il.shape());
  append(meta, l.stride());
  Launch(dev, "index.metal", fn).input(s).output(*out).input(*ids).array(meta).dispatch_1d(grid_threads(total));
  return out;
}

void index_add(GpuStorage& s, const Layout& l, const BackendStorage& ids_, const Layout& il,
               const BackendStorage& src, const Layout& sl, int64_t dim) {
  GpuDevice& dev = s.gpu_device();
  const std::string fn = std::string("index_add_") + type_suffix(s.dtype(), "index_add");
  auto ids = prepare_ids(dev, ids_, il, l.shape()[dim], "index_add");
  const int64_t nids = il.numel(), lines = l.shape()[dim] ? l.numel() / l.shape()[dim] : 0;
  if (nids == 0 || lines == 0) return;
  // one thread per destination line, adding the slices in index order (deterministic, no atomics)
  Launch(dev, "index.metal", fn)
      .inout(s).input(as_gpu(src)).input(*ids).array(rows_meta(l, sl, dim, nids, lines))
      .dispatch_1d(grid_threads(lines), 64);
}

void scatter_add(GpuStorage& s, const Layout& l, const BackendStorage& ids_, const Layout& il,
                 const BackendStorage& src, const Layout& sl, int64_t dim) {
  GpuDevice& dev = s.gpu_device();
  const std::string fn = std::string("scatter_add_") + type_suffix(s.dtype(), "scatter_add");
  auto ids = prepare_ids(dev, ids_, il, l.shape()[dim], "scatter_add");
  if (il.numel() == 0) return;
  const int64_t lines = il.numel() / il.shape()[dim];
  std::vector<int64_t> meta = {l.ndim(), dim, l.offset(), sl.offset(), lines};
  append(meta, il.shape());
  append(meta, l.stride());
  append(meta, sl.stride());
  Launch(dev, "index.metal", fn)
      .inout(s).input(as_gpu(src)).input(*ids).array(meta)
      .dispatch_1d(grid_threads(lines), 64);
}

void index_copy(GpuStorage& s, const Layout& l, const BackendStorage& ids_, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim) {
  GpuDevice& dev = s.gpu_device();
  const std::string fn = by_width("index_copy", s.dtype(), "setitem");
  const int64_t limit = l.shape()[dim];
  auto ids = prepare_ids(dev, ids_, il, limit, "setitem");
  const int64_t nids = il.numel(), lines = limit ? l.numel() / limit : 0;
  if (nids == 0 || lines == 0) return;
  // win[i]: 1 + the last position naming row i, so repeated indices keep their last slice
  auto win = new_storage(dev, DType::U32, limit, "setitem");
  win->zero((size_t)limit * 4);  // a fresh buffer: no encoded work uses it yet
  Launch(dev, "index.metal", "index_last")
      .input(*ids).inout(*win).array(std::vector<int64_t>{nids})
      .dispatch_1d((uint64_t)nids, 256);
  Launch(dev, "index.metal", fn)
      .inout(s).input(as_gpu(src)).input(*ids).input(*win).array(rows_meta(l, sl, dim, nids, lines))
      .dispatch_1d(grid_threads(nids * lines), 256);
}

namespace {

void scatter_reduce(BackendStorage& out, ScatterOp op, const Layout& l, const BackendStorage& ids_, const Layout& il,
                    const BackendStorage& src, const Layout& sl, int64_t dim, bool include_self) {
  GpuStorage& s = as_gpu(out);
  GpuDevice& dev = s.gpu_device();
  const char* name = op == ScatterOp::Set ? "scatter" : "scatter_reduce";
  const std::string fn = std::string("scatter_reduce_") + kScatterNames[(int)op] + "_" + type_suffix(s.dtype(), name);
  EMBER_CHECK(op != ScatterOp::Mean || s.dtype() != DType::Bool, DType, "[", name, "] mean not supported for bool");
  auto ids = prepare_ids(dev, ids_, il, l.shape()[dim], name);
  if (il.numel() == 0) return;
  checked_u32(l.numel(), name);
  const int64_t lines = il.numel() / il.shape()[dim];
  std::vector<int64_t> meta = {l.ndim(), dim, l.offset(), sl.offset(), lines, include_self ? 1 : 0};
  append(meta, il.shape());
  append(meta, l.stride());
  append(meta, sl.stride());
  if (s.dtype() == DType::U32 && (op == ScatterOp::Sum || op == ScatterOp::Max || op == ScatterOp::Min)) {
    // 32-bit atomics combine integers exactly in any order: one thread per element, the same result
    meta[4] = il.numel();
    const std::string base = std::string("scatter_atomic_u32_") + kScatterNames[(int)op];
    if (!include_self)  // the indexed elements start from the op's identity (a pass of its own, before)
      Launch(dev, "index.metal", base + "_fill")
          .inout(s).input(as_gpu(src)).input(*ids).array(meta).dispatch_1d(grid_threads(il.numel()), 256);
    Launch(dev, "index.metal", base)
        .inout(s).input(as_gpu(src)).input(*ids).array(meta).dispatch_1d(grid_threads(il.numel()), 256);
    return;
  }
  // mean's per-element counts (zeros); the other reductions bind a one-element placeholder
  const int64_t ncnt = op == ScatterOp::Mean ? l.numel() : 1;
  auto cnt = new_storage(dev, DType::U32, ncnt, name);
  cnt->zero((size_t)ncnt * 4);  // a fresh buffer: no encoded work uses it yet
  // one thread per line along dim, combining in index order (deterministic, the CPU's results)
  Launch(dev, "index.metal", fn)
      .inout(s).input(as_gpu(src)).input(*ids).inout(*cnt).array(meta)
      .dispatch_1d(grid_threads(lines), 64);
}

}  // namespace

void register_scatter_reduce(DeviceKind kind) { Kernels<ScatterReduce>::set(kind, &scatter_reduce); }

}  // namespace ember::gpu::ops
