// GPU launchers for the reductions: every ReduceOp over any dims of a strided input (metal/reduce.metal).
// The kept and reduced dims are collapsed separately (order kept, so arg* indices stay row-major over the
// reduced dims); reduced elements that vary faster in memory than the outputs go to the row kernel (a
// simdgroup per short row, a looped threadgroup per long one, two passes for a few very long rows), the
// others, and rows of a few elements, to the column kernel.
#include <algorithm>
#include <cstdlib>

#include "gpu/launch.h"
#include "gpu/ops/ops.h"

namespace ember::gpu::ops {
namespace {

// The kernels' op name and the result's dtype.
std::pair<const char*, DType> kernel_op(ReduceOp op, DType dt) {
  switch (op) {
    case ReduceOp::Sum: return {"sum", dt};
    case ReduceOp::Max: return {"max", dt};
    case ReduceOp::Min: return {"min", dt};
    case ReduceOp::ArgMax: return {"argmax", DType::I64};
    case ReduceOp::ArgMin: return {"argmin", DType::I64};
    case ReduceOp::SumI64:  // int64 and float inputs: a plain sum (cpp/backend.h)
      if (dt == DType::U8 || dt == DType::U32 || dt == DType::I32 || dt == DType::Bool) return {"sum_i64", DType::I64};
      return {"sum", dt};
    case ReduceOp::Count: break;
  }
  throw Error(ErrorKind::Value, "[reduce] unknown reduce op");
}

// The dtype of a partial state's value in the two-pass form (reduce.metal's V): the accumulator type.
DType state_dtype(ReduceOp op, DType dt) {
  const bool sum = op == ReduceOp::Sum || op == ReduceOp::SumI64;
  if (is_float(dt)) return compute_dtype(dt);
  return sum ? DType::I64 : dt;
}

uint32_t pow2_at_least(uint64_t v, uint32_t lo, uint32_t hi) {
  uint32_t p = lo;
  while (p < hi && p < v) p *= 2;
  return p;
}

// Few outputs whose rows are long enough that one threadgroup each would leave the GPU idle.
constexpr int64_t kPartElems = 16384;  // elements per part in the two-pass form
constexpr int64_t kFewRows = 16;
constexpr int64_t kShortRow = 16;  // at most this many reduced elements: a thread per output

}  // namespace

StoragePtr reduce(const GpuStorage& s, ReduceOp op, const Layout& l, const std::vector<int64_t>& dims) {
  const char* name = op_name(op);
  GpuDevice& dev = s.gpu_device();
  const DType dt = s.dtype();
  const char* tname = type_suffix(dt, name);
  const auto [kop, odt] = kernel_op(op, dt);

  Shape ks, kst, rs, rst;
  for (int64_t i = 0; i < l.ndim(); ++i) {
    const bool r = std::binary_search(dims.begin(), dims.end(), i);
    (r ? rs : ks).push_back(l.shape()[i]);
    (r ? rst : kst).push_back(l.stride()[i]);
  }
  const int64_t nout = shape_numel(ks), nred = shape_numel(rs);
  auto out = new_storage(dev, odt, nout, name);
  if (nout == 0) return out;
  const Strided K = collapse(Layout(ks, kst, 0)), R = collapse(Layout(rs, rst, 0));
  std::vector<int64_t> meta = {(int64_t)K.ndim(), (int64_t)R.ndim(), l.offset(), nred, nout};
  meta.insert(meta.end(), K.shape.begin(), K.shape.end());
  meta.insert(meta.end(), K.strides.begin(), K.strides.end());
  meta.insert(meta.end(), R.shape.begin(), R.shape.end());
  meta.insert(meta.end(), R.strides.begin(), R.strides.end());
  // Threadgroups stay at or under 512 threads, and under each pipeline's own limit (register use can
  // put it below the device's 1024): a power of two of it.
  auto limit = [&](Launch& k) {
    uint32_t p = 32;
    while (p * 2 <= std::min<uint32_t>(512, k.max_threads())) p *= 2;
    return p;
  };
  const uint32_t rows = checked_u32(nout, name);
  const std::string suffix = std::string(kop) + "_" + tname;

  // Rows when the reduced elements are the closer ones in memory (or there is one output); rows of a
  // few elements would leave most of a simdgroup idle, so one thread per output takes those.
  const int64_t k_inner = std::llabs(K.strides.back()), r_inner = std::llabs(R.strides.back());
  const bool use_rows = nout == 1 || (nred > kShortRow && r_inner <= k_inner);
  if (!use_rows) {
    // columns: adjacent outputs on adjacent threads; up to 16 threads share an output's reduced elements
    Launch k(dev, "reduce.metal", "reduce_cols_" + suffix);
    const uint32_t max_threads = limit(k);
    uint32_t ty = 1;
    while (ty * 32 < max_threads && (int64_t)ty * 2 <= nred && (int64_t)ty * nout < 65536) ty *= 2;
    const uint32_t tx = std::min<uint32_t>({32, rows, max_threads / ty});
    k.input(s).output(*out).array(meta).dispatch(Dim3{rows, ty, 1}, Dim3{tx, ty, 1});
    return out;
  }
  if (nout < kFewRows && nred >= 4 * kPartElems) {
    // two passes: each row in parts, then the parts' states combined per output
    const int64_t parts = std::min<int64_t>(256, (nred + kPartElems - 1) / kPartElems);
    meta.push_back(parts);
    auto pv = new_storage(dev, state_dtype(op, dt), nout * parts, name);
    auto pi = new_storage(dev, DType::I64, nout * parts, name);
    Launch k(dev, "reduce.metal", "reduce_parts_" + suffix);
    const uint32_t tx = std::min<uint32_t>(256, limit(k));
    k.input(s).output(*pv).output(*pi).array(meta).dispatch(Dim3{tx, checked_u32(nout * parts, name), 1}, Dim3{tx, 1, 1});
    Launch(dev, "reduce.metal", "reduce_finish_" + suffix)
        .input(*pv).input(*pi).output(*out).array(std::vector<int64_t>{parts, nout})
        .dispatch(Dim3{32, rows, 1}, Dim3{32, 1, 1});
    return out;
  }
  // one simdgroup per short row (8 rows per threadgroup); a wider looped threadgroup per long row
  Launch k(dev, "reduce.metal", "reduce_rows_" + suffix);
  const uint32_t max_threads = limit(k);
  const uint32_t tx = nred <= 256 ? 32 : pow2_at_least((uint64_t)(nred + 3) / 4, 32, max_threads);
  const uint32_t ty = tx == 32 ? std::min<uint32_t>({8, rows, max_threads / 32}) : 1;
  k.input(s).output(*out).array(meta).dispatch(Dim3{tx, rows, 1}, Dim3{tx, ty, 1});
  return out;
}

}  // namespace ember::gpu::ops
