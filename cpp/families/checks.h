// The argument checks the fused families' entry points share (one error class each, "[op]" messages).
#pragma once
#include <cstdint>
#include <utility>

#include "../backend.h"

namespace ember::checks {

// s holds a float dtype ("[op] expected a float <what>, got int64").
void float_input(const BackendStorage& s, const char* op, const char* what);
// b (named `what`) is on a's device with a's dtype.
void like(const BackendStorage& a, const BackendStorage& b, const char* op, const char* what);
// l has a stride per dim, countable dims, and stays inside s (storage.h's check_in_bounds).
void in_bounds(const BackendStorage& s, const Layout& l, const char* op);
// A gradient lg of the shape of l.
void grad_shape(const Layout& l, const Layout& lg, const char* op);
// A norm backward's optional `add` (the gradient x already holds): ladd given, x's shape, device and dtype,
// inside its storage.
void dx_add(const BackendStorage& x, const Layout& l, const BackendStorage& add, const Layout* ladd, const char* op);
// The size of l's last dim (1 for a scalar), and the product of the others (saturating at INT64_MAX).
int64_t last_dim(const Layout& l);
int64_t rows_of(const Layout& l);
// An (n,) weight or bias on x's device, inside its storage; opt_param accepts a null p (absent).
void param(const BackendStorage& x, const BackendStorage& p, const Layout& lp, int64_t n, const char* op,
           const char* what);
void opt_param(const BackendStorage& x, const BackendStorage* p, const Layout* lp, int64_t n, const char* op,
               const char* what);
// Saved statistics `what` on x's device: one stats-dtype value per `per`, `count` of them.
void stats(const BackendStorage& x, const BackendStorage& s, int64_t count, const char* op, const char* what,
           const char* per);
// (n, c) of an (N, C, ...) input with `groups` dividing c (group_norm).
std::pair<int64_t, int64_t> group_dims(const Layout& lx, int64_t groups, const char* op);
// c of an (N, C, ...) input (batch_norm), and a running statistic: a float (c,) tensor on x's device or null.
int64_t batch_channels(const Layout& lx, const char* op);
void running(const BackendStorage& x, const BackendStorage* r, const Layout* lr, int64_t c, const char* op,
             const char* what);

}  // namespace ember::checks
