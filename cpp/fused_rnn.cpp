// Fused recurrent cells' entry points: every check the backends rely on (dtypes, shapes, devices,
// bounds, unit column strides), then the kernels registered as RnnCellFwd / RnnCellBwd. No backend re-checks.
#include <string>

#include "families/rnn_cell.h"
#include "fused.h"
#include "registry.h"
#include "storage.h"

namespace ember::fused {
namespace {

// A 2-D (rows, cols) operand of x's dtype and device whose rows have unit column stride.
void check_rows(const BackendStorage& x, const BackendStorage& s, const Layout& l, int64_t rows, int64_t cols,
                const std::string& op, const char* what) {
  check_same_device(x, s, op.c_str());
  EMBER_CHECK(s.dtype() == x.dtype(), DType, "[", op, "] ", what, " has dtype ", dtype_name(s.dtype()), ", expected ",
              dtype_name(x.dtype()));
  EMBER_CHECK(l.ndim() == 2 && l.shape()[0] == rows && l.shape()[1] == cols, Shape, "[", op, "] expected ", what,
              " of shape ", shape_str({rows, cols}), ", got ", shape_str(l.shape()));
  EMBER_CHECK(cols <= 1 || l.stride()[1] == 1, Value, "[", op, "] ", what,
              " must have contiguous rows (column stride 1), got strides ", shape_str(l.stride()));
  check_in_bounds(s, l, op.c_str());
}

void check_kind(RnnCell kind) {
  EMBER_CHECK(kind < RnnCell::Count, Value, "[rnn_cell] unknown cell kind ", (int)kind);
}

}  // namespace

std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_fwd(RnnCell kind, const BackendStorage& xg, const Layout& lxg,
                                                            const BackendStorage& hg, const Layout& lhg,
                                                            const BackendStorage* b, const Layout* lb,
                                                            const BackendStorage* s, const Layout* ls) {
  check_kind(kind);
  const std::string op = rnn_cell_name(kind);
  EMBER_CHECK(is_float(xg.dtype()), DType, "[", op, "] expected float gates, got ", dtype_name(xg.dtype()));
  const int64_t gates = rnn_gates(kind);
  EMBER_CHECK(lxg.ndim() == 2 && lxg.shape()[1] % gates == 0, Shape, "[", op, "] expected input gates of shape (N, ",
              gates, " * hidden), got ", shape_str(lxg.shape()));
  const int64_t n = lxg.shape()[0], g = lxg.shape()[1], h = g / gates;
  check_rows(xg, xg, lxg, n, g, op, "input gates");
  check_rows(xg, hg, lhg, n, g, op, "hidden gates");
  if (b) {
    EMBER_CHECK(lb, Value, "[", op, "] bias given without a layout");
    check_same_device(xg, *b, op.c_str());
    EMBER_CHECK(b->dtype() == xg.dtype(), DType, "[", op, "] bias has dtype ", dtype_name(b->dtype()), ", expected ",
                dtype_name(xg.dtype()));
    EMBER_CHECK(lb->ndim() == 1 && lb->shape()[0] == g, Shape, "[", op, "] expected bias of shape ", shape_str({g}),
                ", got ", shape_str(lb->shape()));
    check_in_bounds(*b, *lb, op.c_str());
  }
  const bool needs_state = kind == RnnCell::Lstm || kind == RnnCell::Gru;
  if (needs_state) {
    EMBER_CHECK(s && ls, Value, "[", op, "] needs the previous ", kind == RnnCell::Lstm ? "cell" : "hidden", " state");
    check_rows(xg, *s, *ls, n, h, op, kind == RnnCell::Lstm ? "cell state" : "hidden state");
  } else {
    EMBER_CHECK(!s, Value, "[", op, "] takes no previous state (the hidden state enters through the hidden gates)");
  }
  return Kernels<RnnCellFwd>::of(xg)(xg, lxg, kind, hg, lhg, b, b ? lb : nullptr, s, s ? ls : nullptr);
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_bwd(RnnCell kind, const BackendStorage& ws, const Layout& lws,
                                                            const BackendStorage* s, const Layout* ls,
                                                            const BackendStorage& dh, const Layout& ldh,
                                                            const BackendStorage* dc, const Layout* ldc) {
  check_kind(kind);
  const std::string op = std::string(rnn_cell_name(kind)) + "_bwd";
  EMBER_CHECK(is_float(dh.dtype()), DType, "[", op, "] expected a float grad, got ", dtype_name(dh.dtype()));
  EMBER_CHECK(ldh.ndim() == 2, Shape, "[", op, "] expected a grad of shape (N, hidden), got ", shape_str(ldh.shape()));
  const int64_t n = ldh.shape()[0], h = ldh.shape()[1], w = rnn_ws_width(kind, h);
  check_rows(dh, dh, ldh, n, h, op, "grad");
  check_same_device(dh, ws, op.c_str());
  const DType sdt = stats_dtype(dh.dtype());
  EMBER_CHECK(ws.dtype() == sdt, DType, "[", op, "] the workspace must be ", dtype_name(sdt), " for a ",
              dtype_name(dh.dtype()), " grad, got ", dtype_name(ws.dtype()));
  EMBER_CHECK(lws.ndim() == 2 && lws.shape()[0] == n && lws.shape()[1] == w && lws.is_contiguous(), Shape, "[", op,
              "] expected a contiguous workspace of shape ", shape_str({n, w}), ", got ", shape_str(lws.shape()));
  check_in_bounds(ws, lws, op.c_str());
  if (kind == RnnCell::Lstm || kind == RnnCell::Gru) {
    EMBER_CHECK(s && ls, Value, "[", op, "] needs the forward's previous state");
    check_rows(dh, *s, *ls, n, h, op, "state");
  } else {
    EMBER_CHECK(!s, Value, "[", op, "] takes no previous state");
  }
  if (kind == RnnCell::Lstm) {
    EMBER_CHECK(dc && ldc, Value, "[", op, "] needs the cell state's grad");
    check_rows(dh, *dc, *ldc, n, h, op, "cell grad");
  } else {
    EMBER_CHECK(!dc, Value, "[", op, "] takes no cell grad");
  }
  return Kernels<RnnCellBwd>::of(dh)(dh, ldh, kind, ws, lws, s, s ? ls : nullptr, dc, dc ? ldc : nullptr);
}

}  // namespace ember::fused
