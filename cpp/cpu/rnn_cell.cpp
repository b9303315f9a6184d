// Fused recurrent cells' CPU host side: batch rows split across the pool, each through the per-ISA row
// kernel (cpu/fused_rnn.inc). Arguments arrive checked (cpp/fused_rnn.cpp): 2-D operands have unit
// column stride, so a row is (offset + r * row stride) in place.
#include <algorithm>

#include "cpu/fused.h"
#include "cpu/parallel.h"
#include "families/rnn_cell.h"
#include "registry.h"

namespace ember::cpu {
namespace {

DType stats_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

// Row r of a 2-D operand with unit column stride.
struct RowPtr {
  const char* base = nullptr;
  int64_t off = 0, ld = 0, isz = 0;
  RowPtr() = default;
  RowPtr(const CpuStorage& s, const Layout& l)
      : base((const char*)s.raw()), off(l.offset()), ld(l.stride()[0]), isz((int64_t)itemsize(s.dtype())) {}
  const void* at(int64_t r) const { return base ? base + (off + r * ld) * isz : nullptr; }
};

// Rows per task: enough hidden units that a task outweighs its scheduling (about 16k gate values).
int64_t grain_rows(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)); }

std::tuple<Sto, Sto, Sto> rnn_cell_fwd(const BackendStorage& xgs, const Layout& lxg, RnnCell kind,
                                       const BackendStorage& hgs, const Layout& lhg, const BackendStorage* b,
                                       const Layout* lb, const BackendStorage* ss, const Layout* ls) {
  const CpuStorage &xg = as_cpu(xgs), &hg = as_cpu(hgs);
  const CpuStorage* s = ss ? &as_cpu(*ss) : nullptr;
  const DType dt = xg.dtype(), sdt = stats_dtype(dt);
  const int64_t n = lxg.shape()[0], g = lxg.shape()[1], h = g / rnn_gates(kind), w = rnn_ws_width(kind, h);
  auto hn = new_cpu(dt, n * h);
  auto cn = kind == RnnCell::Lstm ? new_cpu(dt, n * h) : nullptr;
  auto ws = new_cpu(sdt, n * w);
  // The bias in the compute type, zeros when absent, so the row loops carry no branch on it.
  Sto bias = b ? b->to_dtype(*lb, sdt) : new_cpu(sdt, std::max<int64_t>(g, 1), true);
  if (n == 0 || h == 0) return {hn, cn, ws};
  const void* bp = as_cpu(*bias).raw();
  const RowPtr px(xg, lxg), ph(hg, lhg), ps = s ? RowPtr(*s, *ls) : RowPtr();
  const int64_t isz = (int64_t)itemsize(dt), ssz = (int64_t)itemsize(sdt);
  char* hb = (char*)hn->raw();
  char* cb = cn ? (char*)cn->raw() : nullptr;
  char* wb = (char*)ws->raw();
  auto fn = fused_kernels().rnn_fwd[(int)dt];
  parallel_for(n, grain_rows(g), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      fn(kind, px.at(r), ph.at(r), bp, ps.at(r), hb + r * h * isz, cb ? cb + r * h * isz : nullptr,
         wb + r * w * ssz, h);
  });
  return {hn, cn, ws};
}

std::tuple<Sto, Sto, Sto> rnn_cell_bwd(const BackendStorage& dhs, const Layout& ldh, RnnCell kind,
                                       const BackendStorage& wss, const Layout& lws, const BackendStorage* ss,
                                       const Layout* ls, const BackendStorage* dcs, const Layout* ldc) {
  const CpuStorage &dh = as_cpu(dhs), &ws = as_cpu(wss);
  const CpuStorage *s = ss ? &as_cpu(*ss) : nullptr, *dc = dcs ? &as_cpu(*dcs) : nullptr;
  const DType dt = dh.dtype(), sdt = stats_dtype(dt);
  const int64_t n = ldh.shape()[0], h = ldh.shape()[1], g = rnn_gates(kind) * h, w = rnn_ws_width(kind, h);
  auto dxg = new_cpu(dt, n * g);
  auto dhg = kind == RnnCell::Gru ? new_cpu(dt, n * g) : nullptr;
  auto ds = kind == RnnCell::Lstm || kind == RnnCell::Gru ? new_cpu(dt, n * h) : nullptr;
  if (n == 0 || h == 0) return {dxg, dhg, ds};
  const RowPtr pdh(dh, ldh), ps = s ? RowPtr(*s, *ls) : RowPtr(), pdc = dc ? RowPtr(*dc, *ldc) : RowPtr();
  const int64_t isz = (int64_t)itemsize(dt), ssz = (int64_t)itemsize(sdt);
  const char* wb = (const char*)ws.raw() + lws.offset() * ssz;
  char* xb = (char*)dxg->raw();
  char* hb = dhg ? (char*)dhg->raw() : nullptr;
  char* sb = ds ? (char*)ds->raw() : nullptr;
  auto fn = fused_kernels().rnn_bwd[(int)dt];
  parallel_for(n, grain_rows(g), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      fn(kind, wb + r * w * ssz, ps.at(r), pdh.at(r), pdc.at(r), xb + r * g * isz, hb ? hb + r * g * isz : nullptr,
         sb ? sb + r * h * isz : nullptr, h);
  });
  return {dxg, dhg, ds};
}

}  // namespace

void register_rnn_cell() {
  Kernels<RnnCellFwd>::set(DeviceKind::Cpu, &rnn_cell_fwd);
  Kernels<RnnCellBwd>::set(DeviceKind::Cpu, &rnn_cell_bwd);
}

}  // namespace ember::cpu
