// The fused families' shared argument checks (families/checks.h).
#include "families/checks.h"

#include <climits>
#include <utility>

#include "error.h"
#include "fused.h"
#include "storage.h"

namespace ember::checks {

void float_input(const BackendStorage& s, const char* op, const char* what) {
  EMBER_CHECK(is_float(s.dtype()), DType, "[", op, "] expected a float ", what, ", got ", dtype_name(s.dtype()));
}

void like(const BackendStorage& a, const BackendStorage& b, const char* op, const char* what) {
  check_same_device(a, b, op);
  EMBER_CHECK(a.dtype() == b.dtype(), DType, "[", op, "] ", what, " has dtype ", dtype_name(b.dtype()),
              ", expected ", dtype_name(a.dtype()));
}

void in_bounds(const BackendStorage& s, const Layout& l, const char* op) { check_in_bounds(s, l, op); }

void grad_shape(const Layout& l, const Layout& lg, const char* op) {
  EMBER_CHECK(l.shape() == lg.shape(), Shape, "[", op, "] grad shape ", shape_str(lg.shape()), " does not match ",
              shape_str(l.shape()));
}

void dx_add(const BackendStorage& x, const Layout& l, const BackendStorage& add, const Layout* ladd, const char* op) {
  EMBER_CHECK(ladd, Value, "[", op, "] add given without a layout");
  like(x, add, op, "add");
  EMBER_CHECK(ladd->shape() == l.shape(), Shape, "[", op, "] add has shape ", shape_str(ladd->shape()),
              ", expected the input's ", shape_str(l.shape()));
  in_bounds(add, *ladd, op);
}

int64_t last_dim(const Layout& l) { return l.ndim() ? l.shape().back() : 1; }

int64_t rows_of(const Layout& l) {
  int64_t r = 1;
  for (int64_t d = 0; d + 1 < l.ndim(); ++d)
    if (__builtin_mul_overflow(r, l.shape()[d], &r)) return INT64_MAX;
  return r;
}

void param(const BackendStorage& x, const BackendStorage& p, const Layout& lp, int64_t n, const char* op,
           const char* what) {
  EMBER_CHECK(lp.ndim() == 1 && lp.shape()[0] == n, Shape, "[", op, "] expected ", what, " of shape ",
              shape_str({n}), ", got ", shape_str(lp.shape()));
  check_in_bounds(p, lp, op);
  check_same_device(x, p, op);
}

void opt_param(const BackendStorage& x, const BackendStorage* p, const Layout* lp, int64_t n, const char* op,
               const char* what) {
  if (!p) return;
  EMBER_CHECK(lp, Value, "[", op, "] ", what, " given without a layout");
  param(x, *p, *lp, n, op, what);
}

void stats(const BackendStorage& x, const BackendStorage& s, int64_t count, const char* op, const char* what,
           const char* per) {
  check_same_device(x, s, op);
  const DType sdt = fused::stats_dtype(x.dtype());
  EMBER_CHECK(s.dtype() == sdt && s.numel() >= count, Value, "[", op, "] ", what, " must hold one ",
              dtype_name(sdt), " per ", per);
}

std::pair<int64_t, int64_t> group_dims(const Layout& lx, int64_t groups, const char* op) {
  EMBER_CHECK(lx.ndim() >= 2, Shape, "[", op, "] expected input (N, C, ...), got ", shape_str(lx.shape()));
  const int64_t c = lx.shape()[1];
  EMBER_CHECK(groups >= 1 && c % groups == 0, Shape, "[", op, "] num_groups ", groups, " must be positive and divide ",
              "the channels ", c);
  return {lx.shape()[0], c};
}

int64_t batch_channels(const Layout& lx, const char* op) {
  EMBER_CHECK(lx.ndim() >= 2, Shape, "[", op, "] expected input (N, C, ...), got ", shape_str(lx.shape()));
  return lx.shape()[1];
}

void running(const BackendStorage& x, const BackendStorage* r, const Layout* lr, int64_t c, const char* op,
             const char* what) {
  if (!r) return;
  EMBER_CHECK(lr, Value, "[", op, "] ", what, " given without a layout");
  EMBER_CHECK(is_float(r->dtype()), DType, "[", op, "] expected a float ", what, ", got ", dtype_name(r->dtype()));
  param(x, *r, *lr, c, op, what);
}

}  // namespace ember::checks
