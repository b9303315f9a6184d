// Fused ops' entry points for every device: the argument checks (dtypes, shapes, the mask's broadcast,
// same device, bounds), then the kernel registered for x's (q's) device (registry.h, cpp/families/). A family
// whose entry takes the kernel's own arguments declares it once, as its `run` (softmax and the norms); the
// ones here build arguments the kernels share (sdpa's geometry, argument structs).
#pragma once
#include <tuple>
#include <vector>

#include "backend.h"
#include "families/cross_entropy.h"

namespace ember::fused {

// The dtype saved statistics (rstd, mean, lse) are kept in: F64 for f64 inputs, F32 otherwise.
inline DType stats_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

// dx = g * f'(a), a = y for Sigmoid, x otherwise; p0, p1: the forward's parameters (see ActKind).
StoragePtr act_bwd(ActKind kind, const BackendStorage& a, const Layout& la, const BackendStorage& g,
                   const Layout& lg, double p0 = 0.0, double p1 = 0.0);
// The checks sdpa_fwd makes, computing nothing: for the composite path a float mask with a gradient takes.
void sdpa_check(const SdpaArgs& a);
// Returns (out, lse).
std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const SdpaArgs& a);
// o, lse: the forward's outputs; g: out's gradient. Returns (dq, dk, dv).
std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const SdpaArgs& a, const BackendStorage& o, const Layout& lo,
                                                        const BackendStorage& lse, const BackendStorage& g,
                                                        const Layout& lg);

// Cross-entropy of logits a.x (..., C) at class ids a.t (...) (see CeArgs in families/cross_entropy.h).
// Returns (loss (...) in x's dtype, lse in the stats dtype).
std::tuple<StoragePtr, StoragePtr> cross_entropy_fwd(const CeArgs& a);
// g: the loss's gradient (...), x's dtype; lse: the forward's. Returns dx, dense like x.
StoragePtr cross_entropy_bwd(const CeArgs& a, const BackendStorage& lse, const BackendStorage& g, const Layout& lg);

// Rotary position embedding of x (..., L, D) (see RopeArgs in backend.h); checks dims, the offsets and freqs.
StoragePtr rope(const BackendStorage& x, const Layout& lx, const RopeArgs& a);

// One fused optimizer step (see OptimArgs in backend.h), in place. p, g and the states (null where
// the kind and flags use none) must be float32/float64 (what the device holds), of one dtype and
// device, dense and contiguous with p's numel, and the written buffers must not share memory with each
// other or with g. Bumps the version of p and of every state before and after the write.
void optim_step(OptimKind kind, uint32_t flags, const std::vector<double>& scalars, BackendStorage& p,
                const Layout& lp, const BackendStorage& g, const Layout& lg, BackendStorage* const st[3],
                const Layout* const lst[3]);

// One item of optim_step_multi: optim_step's arguments (states and their layouts null where unused).
struct OptimItem {
  OptimKind kind = OptimKind::Sgd;
  uint32_t flags = 0;
  std::vector<double> scalars;
  BackendStorage* p = nullptr;
  const Layout* lp = nullptr;
  const BackendStorage* g = nullptr;
  const Layout* lg = nullptr;
  BackendStorage* st[3] = {};
  const Layout* lst[3] = {};
};
// Many optim_step calls in one (torch's multi-tensor "foreach" step): each item is checked as optim_step
// checks it, every parameter on one device; the CPU runs them all in one parallel pass over the
// elements (items sharing memory run one after another, in order), other devices one after another.
void optim_step_multi(const std::vector<OptimItem>& items);

// Recurrent cells (cpp/fused_rnn.cpp): xg = x W_ih^T + b_ih and hg = h W_hh^T, (N, gates * H), rows
// with unit column stride; b = b_hh (gates * H,) optional; s = c (LSTM, needed), h (GRU, needed), null
// for RNN. LSTM: i, f, o = sigmoid, g = tanh of xg + hg + b, c' = f c + i g, h' = o tanh(c'). GRU:
// r, z = sigmoid(xg + hg + b), n = tanh(xn + r (hn + bn)), h' = (1 - z) n + z h. RNN: h' = tanh or
// relu(xg + hg + b). Returns (h', c' or null, ws: the workspace (N, rnn_ws_width) in the stats dtype).
std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_fwd(RnnCell kind, const BackendStorage& xg, const Layout& lxg,
                                                            const BackendStorage& hg, const Layout& lhg,
                                                            const BackendStorage* b, const Layout* lb,
                                                            const BackendStorage* s, const Layout* ls);
// dh: h''s gradient (N, H); dc: c''s (LSTM, needed). Returns (dxg, dhg or null (= dxg), ds: dc (LSTM),
// the direct dh (GRU), null (RNN)): the gradients of the gate pre-activations and of the state.
std::tuple<StoragePtr, StoragePtr, StoragePtr> rnn_cell_bwd(RnnCell kind, const BackendStorage& ws, const Layout& lws,
                                                            const BackendStorage* s, const Layout* ls,
                                                            const BackendStorage& dh, const Layout& ldh,
                                                            const BackendStorage* dc, const Layout* ldc);

}  // namespace ember::fused
